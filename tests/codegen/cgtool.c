/* Test driver for the memory plan and the code generator.
 *
 *   cgtool compile MODEL OUTDIR [--print] [--f64] [--threads N] [--passes P] [-D name=value]...
 *   cgtool check MODEL [--corrupt] [--f64] [--threads N] [--passes P] [-D name=value]...
 *
 * Both load MODEL (.shard or printed .ir), apply the overrides and run the
 * CPU pipeline (or P). `compile` writes the rank program into OUTDIR and
 * prints the plan (with --print: rank0.c and manifest.json instead); `check` prints the plan and replays liveness over it
 * independently of memplan.c (see check_plan), printing what it checked.
 * With --corrupt it first moves one temporary onto another that is live at
 * the same time, and succeeds only when the checker notices.
 * Exit status 1 on any error or failed check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/codegen.h"
#include "../../frontend/frontend.h"
#include "../../passes/memplan.h"
#include "../../passes/passes.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL: " __VA_ARGS__);                                                                \
      printf("\n");                                                                                \
      if (++failures > 20) exit(1);                                                                \
    }                                                                                              \
  } while (0)

/* ------------------------------------------------------------- loading */

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0, n = 0, got;
  do {
    if (n == cap) buf = realloc(buf, (cap = cap ? 2 * cap : 65536) + 1);
    got = fread(buf + n, 1, cap - n, f);
    n += got;
  } while (got > 0);
  fclose(f);
  *len = n;
  return buf;
}

static IrGraph *load(const char *path) {
  size_t n = strlen(path), len = 0;
  if (n > 3 && strcmp(path + n - 3, ".ir") == 0) {
    char *text = slurp(path, &len);
    if (!text) {
      fprintf(stderr, "cgtool: cannot read %s\n", path);
      return NULL;
    }
    return ir_parse(path, ir_strndup(text, len), len);
  }
  return fe_load(path);
}

/* ---------------------------------------------------------- the checker */

/* An independent replay of the plan's liveness: for every position of the
 * program it collects the buffers that must hold their bytes there and
 * asserts that no two of them overlap. The intervals are recomputed here
 * from the graph (defs, reads, views, the runtime's contract on inputs,
 * outputs and d_loss); only the fusion decision is taken from the plan,
 * after checking that it is well formed. */
typedef struct Live {
  int first, last; /* -1: owns no memory */
  int64_t start, end; /* bytes into the activation buffer */
} Live;

typedef struct Checker {
  IrGraph *g;
  const PassMemPlan *p;
  int N, nb;
  int *def;   /* defining node of each buffer, -1 for leaves */
  int *root;  /* buffer owning the bytes */
  Live *live; /* per root */
  int64_t positions, pairs;
} Checker;

static int idx(Checker *c, const IrValue *v) {
  const PassBuf *b = pass_memplan_find(c->p, v);
  if (!b) {
    printf("FAIL: a value of the graph is missing from the plan\n");
    exit(1);
  }
  return b->index;
}

static void check_groups(Checker *c) {
  for (int i = 0; i < c->N; i++) {
    IrNode *n = c->g->nodes.items[i];
    int f = c->p->group_first[i], l = c->p->group_last[i];
    CHECK(f <= i && i <= l, "node %d outside its group [%d, %d]", i, f, l);
    if (f != i || l != i) CHECK(c->p->fused[i], "node %d grouped but not fused", i);
    if (c->p->fused[i])
      CHECK(ir_op_info(n->op)->flags & IR_OPF_ELEMENTWISE,
            "node %d (%s) fused but not elementwise", i, ir_op_info(n->op)->name);
    if (c->p->absorbed[i])
      CHECK(n->op == IR_OP_ADD && !c->p->fused[i] && !c->p->view[i], "node %d absorbed but not an add", i);
    if (c->p->view[i])
      CHECK(n->op == IR_OP_RESHAPE || n->op == IR_OP_SPLIT || n->op == IR_OP_DROPOUT ||
                n->op == IR_OP_DROPOUT_GRAD,
            "node %d (%s) is not a view op", i, ir_op_info(n->op)->name);
    if (f == i && l > i) CHECK(i < c->p->boundary ? l < c->p->boundary : 1, "group crosses the boundary");
  }
}

static void ext(Live *l, int pos) {
  if (pos > l->last) l->last = pos;
}

static void compute_intervals(Checker *c) {
  const PassMemPlan *p = c->p;
  int B = p->boundary + 1;
  for (int k = 0; k < c->nb; k++) c->root[k] = k, c->def[k] = -1;
  for (int i = 0; i < c->N; i++) {
    IrNode *n = c->g->nodes.items[i];
    for (int j = 0; j < n->nout; j++) {
      int k = idx(c, n->out[j]);
      c->def[k] = i;
      if (p->view[i]) c->root[k] = c->root[idx(c, n->in[0])];
    }
  }
  for (int k = 0; k < c->nb; k++) {
    const IrValue *v = p->bufs[k].value;
    int first = c->def[k] >= 0 ? p->group_first[c->def[k]] + 1
                : (v->kind == IR_VAL_INPUT && strcmp(v->name, "d_loss") == 0) ? B : 0;
    c->live[k] = (Live){first, first, 0, 0};
  }
  for (int i = 0; i < c->N; i++) {
    IrNode *n = c->g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) ext(&c->live[c->root[idx(c, n->in[j])]], p->group_last[i] + 1);
  }
  for (int i = 0; i < c->g->outputs.len; i++) {
    IrValue *v = c->g->outputs.items[i];
    ext(&c->live[c->root[idx(c, v)]], B);
    if (v->kind == IR_VAL_NODE && v->def->op == IR_OP_CROSS_ENTROPY)
      ext(&c->live[c->root[idx(c, v->def->in[0])]], B);
  }
  for (int i = 0; i < c->g->params.len; i++) {
    IrValue *prm = c->g->params.items[i];
    if (!prm->grad) continue;
    int k = idx(c, prm->grad);
    if (p->bufs[k].region != PASS_REGION_GRADS && (c->def[k] < 0 || c->def[k] < p->boundary))
      ext(&c->live[c->root[k]], B);
  }
}

/* Every root in the activation buffer: inside its region, its interval no
 * shorter than the plan's, in the right region. */
static void check_roots(Checker *c) {
  const PassMemPlan *p = c->p;
  int B = p->boundary + 1;
  for (int k = 0; k < c->nb; k++) {
    const PassBuf *b = &p->bufs[k];
    Live *l = &c->live[k];
    if (c->root[k] != k) {
      const PassBuf *r = &p->bufs[c->root[k]];
      CHECK(b->region == r->region && b->offset >= r->offset &&
                b->offset + b->bytes <= r->offset + r->bytes,
            "view %d outside the bytes of %d", k, r->index);
      l->first = -1;
      continue;
    }
    if (b->region != PASS_REGION_ACTIVATIONS && b->region != PASS_REGION_TEMPORARIES) {
      l->first = -1;
      continue;
    }
    int64_t size = b->region == PASS_REGION_ACTIVATIONS ? p->activations : p->temporaries;
    CHECK(b->offset % 64 == 0 && b->offset >= 0 && b->offset + b->bytes <= size,
          "buffer %d at %lld+%lld outside its region of %lld", k, (long long)b->offset,
          (long long)b->bytes, (long long)size);
    CHECK(b->first <= l->first && b->last >= l->last, "buffer %d: plan interval [%d, %d] misses [%d, %d]",
          k, b->first, b->last, l->first, l->last);
    bool forward = c->def[k] >= 0 ? c->def[k] < p->boundary
                                  : strcmp(b->value->name ? b->value->name : "", "d_loss") != 0;
    bool kept = forward && l->last >= B;
    CHECK(kept == (b->region == PASS_REGION_ACTIVATIONS), "buffer %d: kept %d but region %d", k,
          kept, b->region);
    l->start = pass_memplan_act_offset(p, b);
    l->end = l->start + b->bytes;
  }
}

/* Registers never leave their loop; direct gradients sit on their slot;
 * params tile the weights. */
static void check_special(Checker *c) {
  const PassMemPlan *p = c->p;
  for (int i = 0; i < c->N; i++) {
    IrNode *n = c->g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) {
      int k = idx(c, n->in[j]);
      if (p->bufs[k].region != PASS_REGION_NONE) continue;
      CHECK(c->def[k] >= 0 && p->fused[i] && p->group_first[c->def[k]] == p->group_first[i],
            "register %d read outside its loop by node %d", k, i);
    }
  }
  for (int i = 0; i < c->g->outputs.len; i++)
    CHECK(p->bufs[idx(c, c->g->outputs.items[i])].region != PASS_REGION_NONE, "output in a register");
  int64_t prev_end = 0;
  for (int i = 0; i < c->g->params.len; i++) {
    IrValue *prm = c->g->params.items[i];
    const PassBuf *b = &p->bufs[idx(c, prm)];
    CHECK(b->region == PASS_REGION_WEIGHTS && b->offset >= prev_end && b->offset % 64 == 0 &&
              b->offset + b->bytes <= p->weights,
          "param %s at %lld badly placed", prm->name, (long long)b->offset);
    prev_end = b->offset + b->bytes;
    if (!prm->grad) continue;
    const PassBuf *gb = &p->bufs[idx(c, prm->grad)];
    CHECK(gb->grad_of == prm, "grad of %s not marked", prm->name);
    if (gb->region == PASS_REGION_GRADS)
      CHECK(gb->offset == b->offset && gb->bytes == b->bytes && gb->uses == 0,
            "direct grad of %s off its slot", prm->name);
  }
  for (int k = 0; k < c->nb; k++) {
    const PassBuf *b = &p->bufs[k];
    if (b->region != PASS_REGION_GRADS) continue;
    const PassBuf *slot = b->grad_of ? pass_memplan_find(p, b->grad_of) : NULL;
    CHECK(slot && b->offset == slot->offset && b->bytes == slot->bytes && c->def[k] >= p->boundary,
          "value %d in the grads region off its param's slot", k);
  }
  for (int i = 0; i < c->N; i++) {
    IrNode *n = c->g->nodes.items[i];
    if (!p->absorbed[i]) continue;
    const PassBuf *y = &p->bufs[idx(c, n->out[0])];
    for (int j = 0; j < n->nin; j++) {
      const PassBuf *x = &p->bufs[idx(c, n->in[j])];
      CHECK(x->region == PASS_REGION_GRADS && x->grad_of == y->grad_of && x->uses == 1,
            "absorbed node %d reads a value not added into the slot", i);
    }
  }
  CHECK(p->grads == p->weights && p->optimizer == 2 * p->weights &&
            p->nweights * p->real_bytes == p->weights,
        "region sizes");
}

static int cmp_live(const void *a, const void *b) {
  const Live *x = *(Live *const *)a, *y = *(Live *const *)b;
  return (x->start > y->start) - (x->start < y->start);
}

/* The replay: at each position, the live buffers (and the scratch of the
 * node there) sorted by address must not overlap. */
static void replay(Checker *c) {
  const PassMemPlan *p = c->p;
  Live **set = malloc(sizeof *set * (size_t)(c->nb + 1));
  Live scratch;
  for (int pos = 0; pos <= c->N + 1; pos++) {
    int n = 0;
    for (int k = 0; k < c->nb; k++)
      if (c->live[k].first >= 0 && c->live[k].first <= pos && pos <= c->live[k].last)
        set[n++] = &c->live[k];
    if (pos >= 1 && pos <= c->N && p->scratch_offset[pos - 1] >= 0) {
      scratch.start = p->activations + p->scratch_offset[pos - 1];
      scratch.end = scratch.start + p->scratch_bytes[pos - 1];
      CHECK(p->scratch_offset[pos - 1] + p->scratch_bytes[pos - 1] <= p->temporaries,
            "scratch of node %d outside the temporaries", pos - 1);
      set[n++] = &scratch;
    }
    qsort(set, (size_t)n, sizeof *set, cmp_live);
    for (int k = 0; k + 1 < n; k++) {
      CHECK(set[k]->end <= set[k + 1]->start, "position %d: bytes [%lld, %lld) and [%lld, %lld) overlap",
            pos, (long long)set[k]->start, (long long)set[k]->end, (long long)set[k + 1]->start,
            (long long)set[k + 1]->end);
      c->pairs++;
    }
    c->positions++;
  }
  free(set);
}

static void check_plan(IrGraph *g) {
  Checker c = {.g = g, .p = g->memplan, .N = g->nodes.len, .nb = g->memplan->nbufs};
  c.def = calloc((size_t)c.nb, sizeof *c.def);
  c.root = calloc((size_t)c.nb, sizeof *c.root);
  c.live = calloc((size_t)c.nb, sizeof *c.live);
  check_groups(&c);
  compute_intervals(&c);
  check_roots(&c);
  check_special(&c);
  replay(&c);
  int regs = 0, views = 0, direct = 0, act = 0, tmp = 0, fused = 0, loops = 0;
  for (int k = 0; k < c.nb; k++) {
    const PassBuf *b = &c.p->bufs[k];
    views += b->alias != NULL;
    if (b->alias) continue;
    regs += b->region == PASS_REGION_NONE;
    direct += b->region == PASS_REGION_GRADS;
    act += b->region == PASS_REGION_ACTIVATIONS;
    tmp += b->region == PASS_REGION_TEMPORARIES;
  }
  for (int i = 0; i < c.N; i++) {
    fused += c.p->fused[i];
    loops += c.p->fused[i] && c.p->group_first[i] == i;
  }
  printf("plan check: %d nodes (%d backward), %d values: %d activations, %d temporaries, "
         "%d views, %d registers, %d direct gradients\n",
         c.N, c.N - c.p->boundary, c.nb, act, tmp, views, regs, direct);
  printf("plan check: %d elementwise nodes in %d loops; %lld positions replayed, %lld neighbour "
         "pairs disjoint: %s\n",
         fused, loops, (long long)c.positions, (long long)c.pairs, failures ? "FAILED" : "ok");
  free(c.def);
  free(c.root);
  free(c.live);
}

/* Puts the second of two temporaries that are live together (and disjoint)
 * at the offset of the first: a plan the checker must reject. */
static bool corrupt(PassMemPlan *p) {
  for (int a = 0; a < p->nbufs; a++)
    for (int b = a + 1; b < p->nbufs; b++) {
      PassBuf *x = &p->bufs[a], *y = &p->bufs[b];
      if (x->region != PASS_REGION_TEMPORARIES || y->region != PASS_REGION_TEMPORARIES ||
          x->alias || y->alias || x->last < y->first || y->last < x->first ||
          x->offset == y->offset)
        continue;
      printf("corrupt: value %d moved from %lld to %lld, where value %d lives\n", b,
             (long long)y->offset, (long long)x->offset, a);
      y->offset = x->offset;
      return true;
    }
  return false;
}

/* ----------------------------------------------------------------- main */

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: cgtool compile MODEL OUTDIR [options] | cgtool check MODEL [options]\n");
    return 2;
  }
  bool compile = strcmp(argv[1], "compile") == 0;
  const char *model = argv[2], *out = compile && argc > 3 ? argv[3] : NULL;
  const char *pipeline = cg_pipeline("cpu", false);
  const char *defines[64];
  int ndefines = 0, threads = 0, low_bytes = 0;
  bool print = false, corrupt_plan = false;
  IrDType dtype = IR_F32;
  for (int i = compile ? 4 : 3; i < argc; i++) {
    if (strcmp(argv[i], "--f64") == 0) dtype = IR_F64;
    else if (strcmp(argv[i], "--print") == 0) print = true;
    else if (strcmp(argv[i], "--corrupt") == 0) corrupt_plan = true;
    else if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc) pipeline = argv[++i];
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    /* The bf16 plans of the CUDA target: the step's values at 2 bytes. */
    else if (strcmp(argv[i], "--low-bytes") == 0 && i + 1 < argc) low_bytes = atoi(argv[++i]);
    else if (strcmp(argv[i], "-D") == 0 && i + 1 < argc && ndefines < 64) defines[ndefines++] = argv[++i];
    else {
      fprintf(stderr, "cgtool: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  IrGraph *g = load(model);
  if (!g || ir_error_count()) return 1;
  for (int i = 0; i < ndefines; i++) {
    const char *eq = strchr(defines[i], '=');
    if (!eq || !pass_override_config(g, ir_strndup(defines[i], (size_t)(eq - defines[i])), eq + 1,
                                      ir_cmdline))
      return 1;
  }
  PassOptions opt = {.memplan = cg_memplan_policy("cpu"), .real_bytes = dtype == IR_F64 ? 8 : 4,
                     .threads = threads};
  PassManagerFlags flags = {.print_stream = stdout};
  PassProgram prog = {.g = g};
  if (!pass_run_program(&prog, pipeline, &opt, &flags) || ir_error_count()) return 1;
  CgOptions o = {.target = "cpu", .out_dir = out, .dtype = dtype, .model_path = model,
                 .defines = defines, .ndefines = ndefines, .threads = threads, .plan_out = stdout};
  if (compile) {
    if (print) o.plan_out = NULL;
    if (cg_compile(&prog, &o)) return 1;
    const char *files[] = {"rank0.c", "manifest.json"};
    for (int i = 0; print && i < 2; i++) {
      size_t len = 0;
      char *text = slurp(ir_fmt("%s/%s", out, files[i]), &len);
      if (!text) return 1;
      fwrite(text, 1, len, stdout);
      free(text);
    }
    return 0;
  }
  int rb = dtype == IR_F64 ? 8 : 4;
  PassMemPolicy policy = *cg_memplan_policy("cpu");
  if (threads > 0) policy.threads = threads;
  policy.low_bytes = low_bytes;
  PassMemPlan *p = pass_memplan_build(g, rb, &policy);
  if (!p) return 1;
  pass_memplan_print(stdout, p);
  if (corrupt_plan && !corrupt(p)) {
    printf("corrupt: no two temporaries are live together\n");
    return 1;
  }
  check_plan(g);
  if (corrupt_plan) {
    printf("corrupt: the checker reported %d failure%s\n", failures, failures == 1 ? "" : "s");
    return failures ? 0 : 1;
  }
  return failures ? 1 : 0;
}
