/* The `add-norm` pass: a residual add and the norm that reads its sum
 * become one op, forward and backward, so that the rows of the residual
 * stream are read once where they were read three times (the add's two
 * inputs, its sum written, the sum read back by the norm).
 *
 * Forward: s = add(a, b) followed by y = layernorm(s, w[, bias]) (or
 * rmsnorm) becomes (s, y) = add_layernorm(a, b, w[, bias]) at the add's
 * place; every other reader of s (the next residual add) reads the fused
 * op's first result.
 *
 * Backward: the gradient of s is the norm gradient's dx plus what reached
 * s from its other readers, which autodiff sums with an add right after
 * the norm gradient; the pass gives that other term to the norm gradient
 * as its fourth input (dres), which the kernel adds to dx in the same
 * pass over the row, and drops the add.
 *
 * The pass runs after autodiff and recompute, on the graph that the
 * memory plan and codegen see, so that both patterns are matched in the
 * forward, in the backward and in recomputed copies alike. Each element's
 * arithmetic stays what it was: the sum a + b, the norm of the stored sum,
 * and dx + dres after dx is rounded to the stored type, so the results are
 * the same bits as without the pass. Nodes are fused only within one
 * phase, stage and kind (recomputed copies with recomputed copies; the
 * memory plan keeps those apart). A pipeline without the pass (--passes)
 * runs the unfused ops, for comparison. */
#include "passes.h"

/* Node positions by value: the index of the node that defines each value
 * of g, -1 for inputs and params. */
static int *def_index(const IrGraph *g) {
  int *at = ir_alloc(sizeof(int) * (size_t)(g->next_id + 1));
  for (int i = 0; i <= g->next_id; i++) at[i] = -1;
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nout; j++) at[n->out[j]->id] = i;
  }
  return at;
}

/* Whether two nodes run together: one phase, one stage, the same kind of
 * node for recompute and the zero-bubble split. */
static bool same_place(const IrNode *a, const IrNode *b) {
  return a->phase == b->phase && a->stage == b->stage && a->recomputed == b->recomputed &&
         a->wgrad == b->wgrad;
}

/* The node defining v, or NULL for an input or a param. */
static IrNode *producer(const IrValue *v) { return v->kind == IR_VAL_NODE ? v->def : NULL; }

static IrOp fused_forward(IrOp norm) {
  return norm == IR_OP_LAYERNORM ? IR_OP_ADD_LAYERNORM
         : norm == IR_OP_RMSNORM ? IR_OP_ADD_RMSNORM
                                 : IR_OP_COUNT;
}

/* Norm node n (index i) reading the sum of an add: the add turns into the
 * fused op and n dies. The norm's parameters must exist at the add's
 * place, and the add must have no broadcast. */
static bool fuse_forward(IrNode *n, int *at, bool *dead, int i) {
  IrNode *add = producer(n->in[0]);
  if (!add || add->op != IR_OP_ADD || add->nout != 1 || !same_place(add, n)) return false;
  if (!ir_type_same(&add->in[0]->type, &add->in[1]->type) ||
      !ir_type_same(&add->in[0]->type, &add->out[0]->type))
    return false;
  int a = at[add->out[0]->id];
  for (int k = 1; k < n->nin; k++)
    if (at[n->in[k]->id] >= a) return false;
  IrValue **in = ir_alloc(sizeof(IrValue *) * (size_t)(n->nin + 1));
  in[0] = add->in[0], in[1] = add->in[1];
  for (int k = 1; k < n->nin; k++) in[k + 1] = n->in[k];
  IrValue **out = ir_alloc(sizeof(IrValue *) * 2);
  out[0] = add->out[0], out[1] = n->out[0];
  out[1]->def = add, out[1]->def_index = 1;
  at[out[1]->id] = a;
  add->op = fused_forward(n->op);
  add->in = in, add->nin = n->nin + 1;
  add->out = out, add->nout = 2;
  add->attrs = n->attrs, add->nattr = n->nattr;
  add->loc = n->loc;
  dead[i] = true;
  return true;
}

/* An add (node index i) of a norm gradient's dx and another term dres:
 * the norm gradient takes dres as its fourth input and writes the sum as
 * its dx; the add dies. dx must be read by the add alone, and dres exist
 * where the norm gradient runs. */
static bool fuse_backward(IrNode *add, int *at, const int *uses, bool *dead, int i) {
  if (add->op != IR_OP_ADD || !ir_type_same(&add->in[0]->type, &add->in[1]->type)) return false;
  for (int k = 0; k < 2; k++) {
    IrValue *dx = add->in[k], *dres = add->in[1 - k];
    IrNode *g = producer(dx);
    if (!g || (g->op != IR_OP_LAYERNORM_GRAD && g->op != IR_OP_RMSNORM_GRAD) || g->nin != 3 ||
        dx->def_index != 0 || uses[dx->id] != 1 || dres == dx || !same_place(g, add))
      continue;
    if (!ir_type_same(&dx->type, &add->out[0]->type) || at[dres->id] >= at[dx->id]) continue;
    IrValue **in = ir_alloc(sizeof(IrValue *) * 4);
    for (int m = 0; m < 3; m++) in[m] = g->in[m];
    in[3] = dres;
    g->in = in, g->nin = 4;
    g->out[0] = add->out[0];
    g->out[0]->def = g, g->out[0]->def_index = 0;
    at[g->out[0]->id] = at[dx->id];
    dead[i] = true;
    return true;
  }
  return false;
}

static int fuse_graph(IrGraph *g) {
  int fused = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->body) fused += fuse_graph(n->body);
  }
  int *at = def_index(g), *uses = ir_count_uses(g);
  bool *dead = ir_alloc(sizeof(bool) * (size_t)(g->nodes.len + 1));
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->op == IR_OP_LAYERNORM || n->op == IR_OP_RMSNORM) fused += fuse_forward(n, at, dead, i);
    else fused += fuse_backward(n, at, uses, dead, i);
  }
  IrVec kept = {0};
  for (int i = 0; i < g->nodes.len; i++)
    if (!dead[i]) ir_vec_push(&kept, g->nodes.items[i]);
  g->nodes = kept;
  return fused;
}

bool pass_add_norm(IrGraph **gp, const PassOptions *opt) {
  (void)opt;
  fuse_graph(ir_top(*gp));
  return true;
}
