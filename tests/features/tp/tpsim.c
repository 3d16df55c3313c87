/* tpsim: checks tensor parallelism numerically, independent of codegen.
 *
 * Reads two .ir files that went through the CPU target's passes up to
 * autodiff: REF, compiled for one rank, and PART, the same model compiled
 * for t tensor-parallel ranks (`mesh tensor = t`). It interprets REF once
 * and PART as t ranks in lockstep, node by node in double precision with
 * the f64 CPU kernels: an ordinary node runs on every rank with that rank's
 * tensors, a collective combines the ranks' tensors (all_reduce sums them,
 * all_gather joins the parts in rank order, tp_slice and reduce_scatter
 * keep part r), and the vocab-parallel embedding, cross_entropy and their
 * gradients follow the semantics of ir/ops.def (a rank holds rows or
 * columns [r*V, (r+1)*V) of the whole vocabulary). Parameters get the same
 * random values in both: each rank's part is cut from REF's tensor as its
 * split spec says (blocks included); padding gets random values too, which
 * must change nothing. Then it compares the loss of every rank with REF's,
 * and every gradient: split ones gathered into the whole tensor (padding
 * must get a zero gradient), replicated ones on every rank.
 *
 *   tpsim REF.ir PART.ir
 *
 * This is what the partitioning passes promise: the t ranks together
 * compute what one rank computes. The generated programs keep the same
 * promise with real messages (tests/features/train). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"

#define MAX_RANKS 16
/* f64 sums in a different order (partial sums over ranks): a few ulps. */
#define TOL 1e-9

typedef TiTensor Tensor;

/* Short names for the shared interpreter's. */
#define last(v) ti_last(v)
#define dim(v, d) ti_dim(v, d)

/* ------------------------------------------------------------- the ranks */

static int nranks;
static Tensor *ref_table, *rank_tables[MAX_RANKS];

static Tensor *on(int r, const IrValue *v) { return &rank_tables[r][v->id]; }

/* x viewed as [outer, n, inner] around dim d. */
static void dims3(const IrType *t, int d, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int k = 0; k < d; k++) *outer *= t->shape[k];
  *n = t->shape[d];
  for (int k = d + 1; k < t->rank; k++) *inner *= t->shape[k];
}

/* Copies part `r` of `parts` equal parts along dim d of whole (shape
 * `wt`) to or from part (gather: part -> whole). `blocks` equal blocks
 * along d each give their own part r. */
static void part_copy(real *whole, const IrType *wt, real *part, int d, int r, int parts,
                      int blocks, bool to_whole) {
  int64_t outer, n, inner;
  dims3(wt, d, &outer, &n, &inner);
  int64_t bn = n / blocks, pn = bn / parts, local = pn * blocks;
  for (int b = 0; b < blocks; b++) {
    real *w = whole + (b * bn + r * pn) * inner, *p = part + b * pn * inner;
    if (to_whole)
      k_copy2d(w, n * inner, p, local * inner, outer, pn * inner);
    else
      k_copy2d(p, local * inner, w, n * inner, outer, pn * inner);
  }
}

static int64_t count(const IrValue *v) { return ir_type_numel(&v->type); }

/* all_reduce, tp_copy, all_gather, tp_slice, reduce_scatter over the ranks. */
static void collective(IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  int d = ir_attr_has(n, "dim") ? (int)ir_attr_int(n, "dim") : 0; /* all_reduce, tp_copy: none */
  if (d < 0) d += x->type.rank;
  if (ir_attr_int(n, "size") != nranks) die("tpsim: %s over %lld ranks, not %d",
                                           ir_op_info(n->op)->name, (long long)ir_attr_int(n, "size"), nranks);
  real *sum = calloc((size_t)count(x) + 1, sizeof(real));
  for (int r = 0; r < nranks; r++)
    for (int64_t i = 0; i < count(x); i++) sum[i] += on(r, x)->r[i];
  for (int r = 0; r < nranks; r++) {
    real *out = on(r, y)->r, *in = on(r, x)->r;
    switch (n->op) {
    case IR_OP_ALL_REDUCE: memcpy(out, sum, sizeof(real) * (size_t)count(y)); break;
    case IR_OP_TP_COPY: memcpy(out, in, sizeof(real) * (size_t)count(y)); break;
    case IR_OP_ALL_GATHER:
      for (int q = 0; q < nranks; q++) part_copy(out, &y->type, on(q, x)->r, d, q, nranks, 1, true);
      break;
    case IR_OP_TP_SLICE: part_copy(in, &x->type, out, d, r, nranks, 1, false); break;
    case IR_OP_REDUCE_SCATTER: part_copy(sum, &x->type, out, d, r, nranks, 1, false); break;
    default: die("tpsim: not a collective");
    }
  }
  free(sum);
}

/* embedding(_grad) with vocab_parallel: rank r holds rows [r*V, (r+1)*V). */
static void vocab_embedding(IrNode *n) {
  const IrValue *ids = n->in[0], *y = n->out[0];
  bool grad = n->op == IR_OP_EMBEDDING_GRAD;
  int64_t h = grad ? last(y) : last(n->in[1]), rows = grad ? dim(y, 0) : dim(n->in[1], 0);
  for (int r = 0; r < nranks; r++) {
    const int32_t *id = on(r, ids)->i;
    real *out = on(r, y)->r, *src = on(r, n->in[1])->r;
    memset(out, 0, sizeof(real) * (size_t)count(y));
    for (int64_t i = 0; i < count(ids); i++) {
      int64_t row = id[i] - r * rows;
      if (row < 0 || row >= rows) continue;
      for (int64_t k = 0; k < h; k++) {
        if (grad)
          out[row * h + k] += src[i * h + k];
        else
          out[i * h + k] = src[row * h + k];
      }
    }
  }
}

/* cross_entropy(_grad) with vocab_parallel: the ranks' columns joined are
 * the whole logits; the loss is every rank's, the gradient each rank's part. */
static void vocab_loss(IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  int64_t cols = last(x), V = cols * nranks, rows = count(x) / cols;
  int64_t valid = ir_attr_int(n, "valid") > 0 ? ir_attr_int(n, "valid") : V;
  IrType whole = x->type;
  whole.shape[whole.rank - 1] = V;
  real *logits = malloc(sizeof(real) * (size_t)(rows * V)), *dl = NULL;
  for (int r = 0; r < nranks; r++)
    part_copy(logits, &whole, on(r, x)->r, whole.rank - 1, r, nranks, 1, true);
  const int32_t *targets = on(0, n->in[1])->i;
  if (n->op == IR_OP_CROSS_ENTROPY) {
    real loss;
    k_cross_entropy_fwd(&loss, logits, targets, rows, V, valid);
    for (int r = 0; r < nranks; r++) on(r, y)->r[0] = loss;
  } else {
    dl = malloc(sizeof(real) * (size_t)(rows * V));
    k_cross_entropy_bwd(dl, logits, targets, on(0, n->in[2])->r, rows, V, valid);
    for (int r = 0; r < nranks; r++)
      part_copy(dl, &whole, on(r, y)->r, whole.rank - 1, r, nranks, 1, false);
  }
  free(logits);
  free(dl);
}

static bool vocab_parallel(const IrNode *n) {
  return ir_attr_has(n, "vocab_parallel") && ir_attr_int(n, "vocab_parallel") != 0;
}

static void run_ranks(IrGraph *g) {
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (ir_op_info(n->op)->flags & IR_OPF_PARALLEL) {
      collective(n);
    } else if ((n->op == IR_OP_EMBEDDING || n->op == IR_OP_EMBEDDING_GRAD) && vocab_parallel(n)) {
      vocab_embedding(n);
    } else if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) &&
               vocab_parallel(n)) {
      vocab_loss(n);
    } else {
      if (n->op == IR_OP_DROPOUT && ir_attr_float(n, "rate") != 0 && ir_attr_int(n, "per_rank"))
        die("tpsim: dropout with per-rank streams differs from one rank by design; use rate 0");
      for (int r = 0; r < nranks; r++) {
        ti_tensors = rank_tables[r];
        if (!ti_exec(n)) die("tpsim: %s runs across ranks", ir_op_info(n->op)->name);
      }
    }
  }
}

/* ---------------------------------------------------------------- setup */

static IrValue *find_named(IrVec *vals, const char *name) {
  for (int i = 0; i < vals->len; i++) {
    IrValue *v = vals->items[i];
    if (strcmp(v->name, name) == 0) return v;
  }
  die("tpsim: no value named %s in the partitioned graph", name);
}

/* The whole (padded) type of a partitioned parameter. */
static IrType whole_type(const IrValue *p) {
  IrType t = p->type;
  if (p->shard.kind == IR_SPLIT) t.shape[p->shard.dim] *= nranks;
  return t;
}

/* REF's tensor laid into the padded whole shape; padding random. */
static real *padded(const IrValue *p, const IrType *wt, const real *src) {
  real *w = malloc(sizeof(real) * (size_t)ir_type_numel(wt));
  for (int64_t i = 0; i < ir_type_numel(wt); i++) w[i] = ti_rng_normal();
  int d = p->unpadded > 0 ? p->pad_dim : 0;
  int64_t outer, n, inner;
  dims3(wt, d, &outer, &n, &inner);
  int64_t real_n = p->unpadded > 0 ? p->unpadded : n;
  k_copy2d(w, n * inner, src, real_n * inner, outer, real_n * inner);
  return w;
}

static void setup(IrGraph *ref, IrGraph *part) {
  for (int i = 0; i < ref->inputs.len; i++) {
    IrValue *v = ref->inputs.items[i], *pv = find_named(&part->inputs, v->name);
    Tensor *t = &ref_table[v->id];
    if (strcmp(v->name, "d_loss") == 0)
      t->r[0] = 1;
    else if (t->i)
      for (int64_t k = 0; k < t->n; k++) t->i[k] = (int32_t)(ti_rng_next() % (uint64_t)ti_id_bound(ref, v));
    else
      for (int64_t k = 0; k < t->n; k++) t->r[k] = ti_rng_normal();
    for (int r = 0; r < nranks; r++) {
      Tensor *q = on(r, pv);
      if (q->n != t->n) die("tpsim: input %s differs in size", v->name);
      if (t->i) memcpy(q->i, t->i, sizeof(int32_t) * (size_t)t->n);
      else memcpy(q->r, t->r, sizeof(real) * (size_t)t->n);
    }
  }
  for (int i = 0; i < ref->params.len; i++) {
    IrValue *p = ref->params.items[i], *pp = find_named(&part->params, p->name);
    Tensor *t = &ref_table[p->id];
    double base = p->init.kind == IR_INIT_ONES ? 1 : 0;
    for (int64_t k = 0; k < t->n; k++) t->r[k] = base + 0.5 * ti_rng_normal();
    IrType wt = whole_type(pp);
    real *w = padded(pp, &wt, t->r);
    for (int r = 0; r < nranks; r++) {
      if (pp->shard.kind == IR_SPLIT)
        part_copy(w, &wt, on(r, pp)->r, pp->shard.dim, r, nranks, ir_shard_blocks(&pp->shard), false);
      else
        memcpy(on(r, pp)->r, w, sizeof(real) * (size_t)count(pp));
    }
    free(w);
  }
}

/* ------------------------------------------------------------- compare */

static double rel_err(double a, double b) {
  return fabs(a - b) / fmax(fmax(fabs(a), fabs(b)), 1e-12);
}

/* One parameter's gradient on the ranks against REF's; returns whether it
 * agrees. */
static bool compare_grad(const IrValue *p, const IrValue *pp) {
  IrType wt = whole_type(pp);
  int64_t total = ir_type_numel(&wt);
  const real *want = ref_table[p->grad->id].r;
  /* Errors relative to the tensor's largest entry: some entries are zero
   * up to rounding (the gradient of a key bias), a relative error of
   * which means nothing. */
  double scale = 1e-300, worst = 0, pad_worst = 0;
  for (int64_t k = 0; k < count(p->grad); k++) scale = fmax(scale, fabs(want[k]));
  for (int r = 0; r < nranks; r++) {
    real *w = calloc((size_t)total, sizeof(real));
    if (pp->shard.kind == IR_SPLIT) {
      for (int q = 0; q < nranks; q++)
        part_copy(w, &wt, on(q, pp->grad)->r, pp->shard.dim, q, nranks,
                  ir_shard_blocks(&pp->shard), true);
    } else {
      memcpy(w, on(r, pp->grad)->r, sizeof(real) * (size_t)total);
    }
    int d = pp->unpadded > 0 ? pp->pad_dim : 0;
    int64_t outer, n, inner;
    dims3(&wt, d, &outer, &n, &inner);
    int64_t real_n = pp->unpadded > 0 ? pp->unpadded : n;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t k = 0; k < n * inner; k++) {
        double g = w[o * n * inner + k];
        if (k < real_n * inner)
          worst = fmax(worst, fabs(g - want[o * real_n * inner + k]) / scale);
        else
          pad_worst = fmax(pad_worst, fabs(g));
      }
    free(w);
    if (pp->shard.kind == IR_SPLIT) break; /* the gathered whole is the same for every rank */
  }
  bool ok = worst <= TOL && pad_worst == 0;
  const char *spec = pp->shard.kind == IR_SPLIT
                         ? ir_fmt("split(%d%s)", pp->shard.dim, ir_shard_blocks(&pp->shard) > 1 ?
                                  ir_fmt(", %d", pp->shard.blocks) : "")
                         : "replicated";
  printf("  @%-36s %-12s %s (worst error relative to the largest entry %.2g%s)\n", p->name, spec,
         ok ? "ok" : "FAIL", worst,
         pp->unpadded > 0 ? ir_fmt(", padding gradient %.2g", pad_worst) : "");
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: tpsim REF.ir PART.ir\n");
    return 2;
  }
  char *ref_text, *part_text;
  IrGraph *ref = ti_load(argv[1], &ref_text), *part = ti_load(argv[2], &part_text);
  nranks = part->mesh[IR_AXIS_TENSOR] > 1 ? part->mesh[IR_AXIS_TENSOR] : 1;
  if (nranks > MAX_RANKS) die("tpsim: at most %d ranks", MAX_RANKS);
  ti_init("tpsim");
  ref_table = ti_alloc_graph(ref);
  for (int r = 0; r < nranks; r++) rank_tables[r] = ti_alloc_graph(part);
  setup(ref, part);
  ti_tensors = ref_table;
  for (int i = 0; i < ref->nodes.len; i++) {
    IrNode *n = ref->nodes.items[i];
    if (!ti_exec(n)) die("tpsim: %s runs across ranks", ir_op_info(n->op)->name);
  }
  run_ranks(part);
  const IrValue *loss = ti_find_loss(ref), *ploss = ti_find_loss(part);
  double want = ref_table[loss->id].r[0], worst = 0;
  for (int r = 0; r < nranks; r++) worst = fmax(worst, rel_err(on(r, ploss)->r[0], want));
  int failures = worst > TOL;
  printf("%s: t = %d ranks; loss %.12g on one rank, worst relative error of the ranks' %.2g: %s\n",
         argv[2], nranks, want, worst, failures ? "FAIL" : "ok");
  for (int i = 0; i < ref->params.len; i++) {
    IrValue *p = ref->params.items[i];
    IrValue *pp = find_named(&part->params, p->name);
    if (!p->grad || !pp->grad) die("tpsim: @%s has no gradient", p->name);
    failures += !compare_grad(p, pp);
  }
  printf("%s: %d of %d gradients and the loss checked, %d wrong\n", argv[2], ref->params.len,
         ref->params.len, failures);
  free(ti_scratch);
  free(ref_text);
  free(part_text);
  ir_arena_free_all();
  return failures ? 1 : 0;
}
