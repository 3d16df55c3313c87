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
 *     cross_entropy, is split on its vocabulary dim;
 *   - everything else (norm weights, position tables) stays replicated.
 * The pairs found form groups (the q, k, v and output projections of one
 * attention are one group). A parameter the model annotated keeps its
 * annotation; when that annotation differs from the placement above, the
 * rest of its group stays replicated, since half of a Megatron pair is no
 * plan at all. With --tp-strategy none only the model's annotations count.
 *
 * The pass also checks that the world size is t * p * d. With t = 1 every
 * spec becomes replicated: one rank holds everything. */
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

typedef struct Annot {
  IrVec props;  /* Prop* */
  int *parent;  /* union-find over groups */
  int ngroups, cap;
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
 * parallel GEMM: each works head by head or element by element. This is
 * the Megatron annotator's own pattern, not a property of the ops, so it
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
  case IR_OP_CAUSAL_MASK: return true;
  case IR_OP_MATMUL: {
    int i, o;
    return !pass_gemm_weight(n, &i, &o) && n->in[1]->kind != IR_VAL_PARAM;
  }
  default: return false;
  }
}

/* The GEMMs with a parameter weight whose input (in[0]) the result of node
 * `from` reaches through passes_through ops, in node order. One sweep over
 * the later nodes, marking the values reached (by id). */
static void reached_gemms(IrGraph *g, int from, IrVec *found) {
  bool *reached = ir_alloc(sizeof(bool) * (size_t)(g->next_id + 1));
  IrNode *start = g->nodes.items[from];
  for (int k = 0; k < start->nout; k++) reached[start->out[k]->id] = true;
  for (int i = from + 1; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    int in_dim, out_dim;
    bool hit = false;
    for (int j = 0; j < n->nin && !hit; j++) hit = n->in[j]->graph == g && reached[n->in[j]->id];
    if (!hit) continue;
    if (pass_gemm_weight(n, &in_dim, &out_dim)) {
      if (n->in[0]->graph == g && reached[n->in[0]->id]) ir_vec_push(found, n);
    } else if (passes_through(n)) {
      for (int k = 0; k < n->nout; k++) reached[n->out[k]->id] = true;
    }
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

/* Proposes the column/row pairs of one graph. */
static void annotate_pairs(Annot *a, IrGraph *g) {
  int n = g->nodes.len;
  int *role = ir_alloc(sizeof(int) * (size_t)(n ? n : 1)); /* 0 none, 1 column, 2 row */
  int *group = ir_alloc(sizeof(int) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    IrNode *col = g->nodes.items[i];
    int in_dim, out_dim;
    IrValue *w = pass_gemm_weight(col, &in_dim, &out_dim);
    if (!w || role[i] != 0 || feeds_loss(g, col->out[0], 0)) continue;
    IrVec found = {0};
    reached_gemms(g, i, &found);
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
    if (grp < 0) continue;
    role[i] = 1;
    group[i] = grp;
    int blocks = blocks_of(g, col->out[0]);
    propose(a, w, split_spec(out_dim, blocks), grp);
    if (col->op == IR_OP_LINEAR && col->nin > 2) propose(a, col->in[2], split_spec(0, blocks), grp);
  }
}

/* Embedding tables and output layers of one graph, then its repeat bodies. */
static void annotate_graph(Annot *a, IrGraph *g) {
  annotate_pairs(a, g);
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    int in_dim, out_dim;
    IrValue *w;
    if (n->body) {
      annotate_graph(a, n->body);
    } else if (n->op == IR_OP_EMBEDDING) {
      IrValue *ids = n->in[0];
      bool positions = ids->kind == IR_VAL_NODE && ids->def->op == IR_OP_ARANGE;
      if (!positions) propose(a, n->in[1], split_spec(0, 1), new_group(a));
    } else if ((w = pass_gemm_weight(n, &in_dim, &out_dim)) && feeds_loss(g, n->out[0], 0)) {
      propose(a, w, split_spec(out_dim, 1), new_group(a));
    }
  }
}

/* Writes the proposals, less those of groups a fixed spec contradicts. */
static void apply(Annot *a) {
  bool *broken = ir_alloc(sizeof(bool) * (size_t)(a->ngroups + 1));
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

bool pass_tp_annotate(IrGraph **gp, const PassOptions *opt) {
  IrGraph *g = ir_top(*gp);
  if (!check_world(opt)) return false;
  if (pass_tp(opt) == 1) {
    clear_specs(g);
    return true;
  }
  if (opt->tp_strategy == PASS_TP_NONE) return true;
  if (!pass_check_typed(g, "tp-annotate")) return false;
  Annot a = {0};
  annotate_graph(&a, g);
  apply(&a);
  return true;
}
