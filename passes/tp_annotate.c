/* The `tp-annotate` pass: decides how each parameter is laid out over the
 * tensor-parallel ranks, by writing its IrShard. Nothing else changes; the
 * `tp-partition` pass turns the specs into a rank's local graph.
 *
 * With --tp-strategy megatron (the default) the placement is Megatron-LM's,
 * found from the graph alone (no model-specific code):
 *   - a linear (or a matmul with a 2-D parameter weight) whose output reaches
 *     another such GEMM's input through head-wise or elementwise ops (split,
 *     rope, attention, gelu, silu, swiglu, dropout, scale, mul, the head
 *     layout ops, softmax, causal_mask and matmuls between activations) is
 *     column-parallel: its weight split on the output dim, its bias too;
 *     when its output feeds split(n) along the last dim the weight is made
 *     of n blocks (GPT-2's fused qkv), each block split over the ranks;
 *   - the GEMM so reached is row-parallel: its weight split on the input
 *     dim, its bias replicated (tp-partition adds it after the reduction);
 *   - an embedding table indexed by anything but positions (an arange) is
 *     split on dim 0, the vocabulary;
 *   - the output layer, a GEMM whose output is the logits of a
 *     cross_entropy, is split on its vocabulary dim, and its bias with it;
 *   - everything else (norm weights, position tables) stays replicated.
 * The pairs found form groups (the q, k, v and output projections of one
 * attention are one group). A parameter the model annotated keeps its
 * annotation; when that annotation differs from the placement above, the
 * rest of its group stays replicated, since half of a Megatron pair is no
 * plan at all. With --tp-strategy none only the model's annotations count.
 *
 * The pass also checks that the world size is t * p * d. With t = 1 every
 * spec becomes replicated: one rank holds everything. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"


/* A parameter spec the model fixed: any split or partial spec, or a
 * replicated one marked so. */
static bool is_fixed(const IrValue *p) {
  return p->shard.kind != IR_REPLICATED || p->shard.fixed;
}

static bool same_spec(const IrShard *a, const IrShard *b) {
  if (a->kind != b->kind || a->axis != b->axis) return false;
  return a->kind != IR_SPLIT || (a->dim == b->dim && ir_shard_blocks(a) == ir_shard_blocks(b));
}

static IrShard split_spec(int dim, int blocks) {
  return (IrShard){IR_SPLIT, IR_AXIS_TENSOR, dim, blocks > 1 ? blocks : 0, false};
}

/* ------------------------------------------------------------ proposals */

/* What megatron proposes for one parameter, and the group it belongs to. */
typedef struct Prop {
  IrValue *param;
  IrShard spec;
  int group;
} Prop;

/* A GEMM with a parameter weight, for the report: the pair it is part
 * of (its group) or, left out of every pair, why. */
typedef struct Gemm {
  IrNode *node;
  const char *prefix; /* "h.*." for a repeat body's parameters */
  int group;          /* -1: in no pair */
  const char *role;   /* "column", "row", "vocabulary" */
  const char *why;    /* in no pair: the reason */
} Gemm;

typedef struct Annot {
  IrVec props;  /* Prop* */
  int *parent;  /* union-find over groups */
  int ngroups, cap;
  int t;
  IrVec gemms;  /* Gemm* */
  bool *broken; /* per group root, after apply */
} Annot;

static int new_group(Annot *a) {
  if (a->ngroups == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 64;
    int *grown = ir_alloc(sizeof(int) * (size_t)a->cap);
    if (a->ngroups) memcpy(grown, a->parent, sizeof(int) * (size_t)a->ngroups);
    a->parent = grown;
  }
  a->parent[a->ngroups] = a->ngroups;
  return a->ngroups++;
}

static int find(Annot *a, int g) {
  while (a->parent[g] != g) g = a->parent[g] = a->parent[a->parent[g]];
  return g;
}

static void join(Annot *a, int x, int y) { a->parent[find(a, x)] = find(a, y); }

static Prop *prop_of(Annot *a, const IrValue *p) {
  for (int i = 0; i < a->props.len; i++) {
    Prop *pr = a->props.items[i];
    if (pr->param == p) return pr;
  }
  return NULL;
}

/* Records a proposal. A parameter proposed twice (a tied weight) keeps the
 * first; the same spec again joins the two groups, a different one is
 * dropped. */
static void propose(Annot *a, IrValue *p, IrShard spec, int group) {
  if (!p || p->kind != IR_VAL_PARAM) return;
  Prop *old = prop_of(a, p);
  if (old) {
    if (same_spec(&old->spec, &spec)) join(a, old->group, group);
    return;
  }
  Prop *pr = ir_alloc(sizeof *pr);
  *pr = (Prop){p, spec, group};
  ir_vec_push(&a->props, pr);
}

/* ------------------------------------------------------------ the graph */

/* Shared by tp-partition and vocab-pad (passes.h). */
IrValue *pass_gemm_weight(const IrNode *n, int *in_dim, int *out_dim) {
  IrValue *w = n->nin >= 2 ? n->in[1] : NULL;
  if (!w || w->kind != IR_VAL_PARAM || w->type.rank != 2) return NULL;
  bool tr;
  if (n->op == IR_OP_LINEAR)
    tr = ir_attr_int(n, "transposed") != 0;
  else if (n->op == IR_OP_MATMUL && n->in[0]->type.rank >= 2)
    tr = ir_attr_int(n, "transpose_b") != 0;
  else
    return NULL;
  if (in_dim) *in_dim = tr ? 1 : 0;
  *out_dim = tr ? 0 : 1;
  return w;
}

/* Ops a column-parallel output passes through on its way to the row-
 * parallel GEMM: each works head by head or element by element, or moves
 * the heads (reshape, transpose) while keeping each whole. This is the
 * Megatron annotator's own pattern, not a property of the ops, so it
 * stays here rather than in ops.def: it lists the ops inside one attention
 * or MLP block, and leaves out ops that are as local (add, sub, the norms)
 * because a residual add or a norm is where a block ends. */
static bool passes_through(const IrNode *n) {
  switch (n->op) {
  case IR_OP_SPLIT:
  case IR_OP_ROPE:
  case IR_OP_ATTENTION:
  case IR_OP_GELU:
  case IR_OP_SILU:
  case IR_OP_SWIGLU:
  case IR_OP_DROPOUT:
  case IR_OP_SCALE:
  case IR_OP_MUL:
  case IR_OP_SPLIT_HEADS:
  case IR_OP_MERGE_HEADS:
  case IR_OP_SOFTMAX:
  case IR_OP_CAUSAL_MASK:
  case IR_OP_RESHAPE:
  case IR_OP_TRANSPOSE: return true;
  case IR_OP_MATMUL: {
    int i, o;
    return !pass_gemm_weight(n, &i, &o) && n->in[1]->kind != IR_VAL_PARAM;
  }
  default: return false;
  }
}

/* The dim the column-parallel split has on n's result when an input has
 * it on d, or -1 when n would move elements between ranks (a reshape that
 * does not keep the heads whole). Shapes are global here. */
static int split_dim_after(const IrNode *n, int d, int in_rank, int t) {
  int r = n->out[0]->type.rank;
  switch (n->op) {
  case IR_OP_RESHAPE: return pass_reshape_split_dim(n, d, t);
  case IR_OP_TRANSPOSE: {
    int d0 = (int)ir_attr_int(n, "dim0"), d1 = (int)ir_attr_int(n, "dim1");
    d0 = d0 < 0 ? d0 + in_rank : d0;
    d1 = d1 < 0 ? d1 + in_rank : d1;
    return d == d0 ? d1 : d == d1 ? d0 : d;
  }
  case IR_OP_SPLIT_HEADS: return d == 2 ? 1 : d == 1 ? 2 : d;
  case IR_OP_MERGE_HEADS: return d == 1 ? 2 : d == 2 ? 1 : d == 3 ? -1 : d;
  default: return d + (r - in_rank);
  }
}

/* The GEMMs with a parameter weight whose input (in[0]) the result of node
 * `from` reaches through passes_through ops, in node order. One sweep over
 * the later nodes, marking the values reached (by id) with the dim their
 * split would have. *stop, when none is found, is the first node the
 * result reached that ends the walk (a norm, a residual add, a reshape
 * that cuts heads), and *why says why. */
static void reached_gemms(IrGraph *g, int from, int t, IrVec *found, const IrNode **stop,
                          const char **why) {
  int *dim = ir_alloc(sizeof(int) * (size_t)(g->next_id + 1));
  for (int i = 0; i <= g->next_id; i++) dim[i] = -1;
  IrNode *start = g->nodes.items[from];
  for (int k = 0; k < start->nout; k++) dim[start->out[k]->id] = start->out[k]->type.rank - 1;
  *stop = NULL;
  *why = NULL;
  for (int i = from + 1; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    int in_dim, out_dim, hit = -1, d = -1;
    for (int j = 0; j < n->nin && hit < 0; j++)
      if (n->in[j]->graph == g && dim[n->in[j]->id] >= 0) hit = j, d = dim[n->in[j]->id];
    if (hit < 0) continue;
    if (pass_gemm_weight(n, &in_dim, &out_dim)) {
      if (n->in[0]->graph == g && dim[n->in[0]->id] >= 0) ir_vec_push(found, n);
      continue;
    }
    int od = passes_through(n) ? split_dim_after(n, d, n->in[hit]->type.rank, t) : -1;
    if (od < 0) {
      if (!*stop) {
        *stop = n;
        *why = passes_through(n) ? "it does not keep the heads whole" : "it ends the block";
      }
      continue;
    }
    for (int k = 0; k < n->nout; k++) dim[n->out[k]->id] = od;
  }
}

/* The number of parts of a split(n) along the last dim that reads v, or 1. */
static int blocks_of(const IrGraph *g, const IrValue *v) {
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (n->op != IR_OP_SPLIT || n->in[0] != v) continue;
    int64_t axis = ir_attr_int(n, "axis");
    if (axis == -1 || axis == v->type.rank - 1) return (int)ir_attr_int(n, "n");
  }
  return 1;
}

/* Whether v is the logits of a cross_entropy, directly or through scale. */
static bool feeds_loss(const IrGraph *g, const IrValue *v, int depth) {
  for (int i = 0; i < g->nodes.len && depth < 8; i++) {
    const IrNode *n = g->nodes.items[i];
    if (n->op == IR_OP_CROSS_ENTROPY && n->in[0] == v) return true;
    if (n->op == IR_OP_SCALE && n->in[0] == v && feeds_loss(g, n->out[0], depth + 1)) return true;
  }
  return false;
}

static void add_gemm(Annot *a, IrNode *n, const char *prefix, int group, const char *role,
                     const char *why) {
  Gemm *gm = ir_alloc(sizeof *gm);
  *gm = (Gemm){n, prefix, group, role, why};
  ir_vec_push(&a->gemms, gm);
}

/* Proposes the column/row pairs of one graph. */
static void annotate_pairs(Annot *a, IrGraph *g, const char *prefix) {
  int n = g->nodes.len;
  int *role = ir_alloc(sizeof(int) * (size_t)(n ? n : 1)); /* 0 none, 1 column, 2 row */
  int *group = ir_alloc(sizeof(int) * (size_t)(n ? n : 1));
  const char **why = ir_alloc(sizeof(char *) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    IrNode *col = g->nodes.items[i];
    int in_dim, out_dim;
    IrValue *w = pass_gemm_weight(col, &in_dim, &out_dim);
    if (!w || role[i] != 0 || feeds_loss(g, col->out[0], 0)) continue;
    IrVec found = {0};
    const IrNode *stop;
    const char *stop_why;
    reached_gemms(g, i, a->t, &found, &stop, &stop_why);
    int grp = -1;
    for (int k = 0; k < found.len; k++) {
      IrNode *row = found.items[k];
      int j = 0;
      while (g->nodes.items[j] != row) j++;
      if (role[j] == 1) continue;
      if (grp < 0) grp = role[j] == 2 ? group[j] : new_group(a);
      if (role[j] == 2) join(a, group[j], grp);
      role[j] = 2;
      group[j] = grp;
      int rin = 0, rout = 0; /* set whenever pass_gemm_weight finds a weight */
      IrValue *rw = pass_gemm_weight(row, &rin, &rout);
      propose(a, rw, split_spec(rin, 1), grp);
      if (row->op == IR_OP_LINEAR && row->nin > 2)
        propose(a, row->in[2], (IrShard){IR_REPLICATED, IR_AXIS_TENSOR, 0, 0, false}, grp);
    }
    if (grp < 0) {
      why[i] = stop ? ir_fmt("its result reaches no other GEMM through the ops of one attention or "
                             "MLP block: the path stops at the %s at %d:%d, as %s",
                             ir_op_info(stop->op)->name, stop->loc.line, stop->loc.col, stop_why)
                    : "its result reaches no other GEMM with a parameter weight";
      continue;
    }
    role[i] = 1;
    group[i] = grp;
    int blocks = blocks_of(g, col->out[0]);
    propose(a, w, split_spec(out_dim, blocks), grp);
    if (col->op == IR_OP_LINEAR && col->nin > 2) propose(a, col->in[2], split_spec(0, blocks), grp);
  }
  for (int i = 0; i < n; i++) {
    IrNode *gm = g->nodes.items[i];
    int in_dim, out_dim;
    if (!pass_gemm_weight(gm, &in_dim, &out_dim) || feeds_loss(g, gm->out[0], 0)) continue;
    add_gemm(a, gm, prefix, role[i] ? group[i] : -1, role[i] == 1 ? "column" : role[i] == 2 ? "row" : NULL,
             why[i] ? why[i] : "it is a row-parallel GEMM's input only through an earlier column GEMM");
  }
}

/* Embedding tables and output layers of one graph, then its repeat bodies. */
static void annotate_graph(Annot *a, IrGraph *g, const char *prefix) {
  annotate_pairs(a, g, prefix);
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    int in_dim, out_dim;
    IrValue *w;
    if (n->body) {
      annotate_graph(a, n->body, ir_fmt("%s%s.*.", prefix, n->label));
    } else if (n->op == IR_OP_EMBEDDING) {
      IrValue *ids = n->in[0];
      bool positions = ids->kind == IR_VAL_NODE && ids->def->op == IR_OP_ARANGE;
      if (!positions) propose(a, n->in[1], split_spec(0, 1), new_group(a));
    } else if ((w = pass_gemm_weight(n, &in_dim, &out_dim)) && feeds_loss(g, n->out[0], 0)) {
      int grp = new_group(a);
      propose(a, w, split_spec(out_dim, 1), grp);
      /* Its bias is a vocabulary-long row of the logits: split with them. */
      if (n->op == IR_OP_LINEAR && n->nin > 2) propose(a, n->in[2], split_spec(0, 1), grp);
      add_gemm(a, n, prefix, grp, "vocabulary", NULL);
    }
  }
}

/* Writes the proposals, less those of groups a fixed spec contradicts. */
static void apply(Annot *a) {
  bool *broken = a->broken = ir_alloc(sizeof(bool) * (size_t)(a->ngroups + 1));
  for (int i = 0; i < a->props.len; i++) {
    Prop *pr = a->props.items[i];
    if (is_fixed(pr->param) && !same_spec(&pr->param->shard, &pr->spec))
      broken[find(a, pr->group)] = true;
  }
  for (int i = 0; i < a->props.len; i++) {
    Prop *pr = a->props.items[i];
    if (!is_fixed(pr->param) && !broken[find(a, pr->group)]) pr->param->shard = pr->spec;
  }
}

/* ------------------------------------------------------------- the pass */

static void clear_specs(IrGraph *g) {
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i];
    p->shard = (IrShard){IR_REPLICATED, IR_AXIS_TENSOR, 0, 0, false};
  }
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->body) clear_specs(n->body);
  }
}

/* Every spec a model can write names the tensor axis; the checks of
 * tp-partition cover dims and divisibility. */
static bool check_world(const PassOptions *opt) {
  int t = pass_tp(opt), p = opt && opt->pp > 1 ? opt->pp : 1, d = opt && opt->dp > 1 ? opt->dp : 1;
  if (!opt || opt->world <= 0 || (long long)t * p * d == opt->world) return true;
  ir_error(ir_cmdline, "the world size must be t * p * d: %d ranks, but t * p * d = %d * %d * %d "
           "= %lld", opt->world, t, p, d, (long long)t * p * d);
  return false;
}

/* ------------------------------------------------------------ the report */

static void warn(IrLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(IrLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(loc, "warning", fmt, ap);
  va_end(ap);
}

/* Why GEMM gm's weight is replicated after apply. */
static const char *replicated_why(Annot *a, const Gemm *gm, const IrValue *w) {
  if (gm->group < 0) return gm->why;
  if (is_fixed(w)) return "the model annotates its weight";
  for (int i = 0; i < a->props.len; i++) {
    Prop *pr = a->props.items[i];
    if (find(a, pr->group) == find(a, gm->group) && is_fixed(pr->param) &&
        !same_spec(&pr->param->shard, &pr->spec))
      return ir_fmt("it pairs with %s, which the model annotates otherwise, so the pair stays whole",
                    pr->param->name);
  }
  return "its pair stays whole";
}

/* Whether no warning was given at loc yet in this process: the planner
 * compiles a model for many layouts, and one warning per GEMM says it. */
static bool first_warning(IrLoc loc) {
  static struct { const char *file; int line, col; } seen[256];
  static int nseen;
  for (int i = 0; i < nseen; i++)
    if (seen[i].line == loc.line && seen[i].col == loc.col &&
        (seen[i].file == loc.file || (seen[i].file && loc.file && !strcmp(seen[i].file, loc.file))))
      return false;
  if (nseen < 256) {
    /* The name outlives the arena of one compile. */
    seen[nseen].file = loc.file ? strdup(loc.file) : NULL;
    seen[nseen].line = loc.line, seen[nseen++].col = loc.col;
  }
  return true;
}

/* The placement of every GEMM with a parameter weight (--report tp), and
 * a warning for each one the strategy left replicated without the model
 * asking for it: such a GEMM runs whole on every rank, silently, unless
 * said. */
static void report(Annot *a, const PassOptions *opt) {
  FILE *out = opt->tp_report;
  int split = 0, whole = 0;
  for (int i = 0; i < a->gemms.len; i++) {
    Gemm *gm = a->gemms.items[i];
    int in_dim, out_dim;
    IrValue *w = pass_gemm_weight(gm->node, &in_dim, &out_dim);
    if (w->shard.kind == IR_SPLIT) split++;
    else whole++;
  }
  if (out)
    fprintf(out, "tensor parallelism (t = %d, megatron): %d GEMMs with a parameter weight, %d split, "
            "%d replicated\n", a->t, split + whole, split, whole);
  for (int i = 0; i < a->gemms.len; i++) {
    Gemm *gm = a->gemms.items[i];
    int in_dim, out_dim;
    IrValue *w = pass_gemm_weight(gm->node, &in_dim, &out_dim);
    const char *name = ir_fmt("%s%s", gm->prefix, w->name);
    IrLoc at = gm->node->loc;
    const char *where = at.file ? ir_fmt("%s:%d", at.file, at.line) : "?";
    if (w->shard.kind == IR_SPLIT) {
      int k = ir_shard_blocks(&w->shard);
      const char *role = w->shard.dim == in_dim ? "row" : gm->role && !strcmp(gm->role, "vocabulary")
                         ? "vocabulary" : "column";
      if (out)
        fprintf(out, "  %-10s %-32s %s split on dim %d%s  (%s)\n", role, name,
                ir_shape_str(&w->type), w->shard.dim, k > 1 ? ir_fmt(" in %d blocks", k) : "", where);
      continue;
    }
    const char *why = replicated_why(a, gm, w);
    if (out) fprintf(out, "  %-10s %-32s %s: %s  (%s)\n", "replicated", name, ir_shape_str(&w->type), why, where);
    if (gm->group < 0 && first_warning(at))
      warn(at, "tensor parallelism (t = %d) leaves the GEMM of %s replicated: %s "
                   "(`--report tp` lists every GEMM)", a->t, name, why);
  }
}

bool pass_tp_annotate(IrGraph **gp, const PassOptions *opt) {
  IrGraph *g = ir_top(*gp);
  if (!check_world(opt)) return false;
  if (pass_tp(opt) == 1) {
    clear_specs(g);
    if (opt && opt->tp_report) fprintf(opt->tp_report, "tensor parallelism: t = 1, every GEMM is whole\n");
    return true;
  }
  if (opt->tp_strategy == PASS_TP_NONE) {
    if (opt->tp_report)
      fprintf(opt->tp_report, "tensor parallelism (t = %d, --tp-strategy none): the model's "
              "annotations only\n", pass_tp(opt));
    return true;
  }
  if (!pass_check_typed(g, "tp-annotate")) return false;
  Annot a = {.t = pass_tp(opt)};
  annotate_graph(&a, g, "");
  apply(&a);
  report(&a, opt);
  return true;
}
