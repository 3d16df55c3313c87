/* The `tp-fuse` pass: tp_slice(all_reduce(x)), where nothing else reads
 * the all-reduced value, becomes reduce_scatter(x): each rank receives only
 * the part of the sum it keeps, (t-1)/t of the all-reduce's traffic.
 *
 * tp-partition writes the pair wherever a partial sum is resolved to a
 * split (the sequence-parallel reduction after a row-parallel linear), and
 * autodiff writes it for the gradient of a sequence-parallel all_gather
 * (tp_copy's all_reduce, then all_gather's tp_slice). The pass runs after
 * each of them; it works in repeat bodies too, and changes nothing where
 * the pattern does not occur (t = 1). */
#include <string.h>

#include "passes.h"

/* Both nodes have attribute `name` as the same integer (a hand-written
 * graph may hold anything else, which is then left alone). */
static bool same_attr(const IrNode *a, const IrNode *b, const char *name) {
  const IrAttr *x = ir_node_attr(a, name), *y = ir_node_attr(b, name);
  return x && y && x->expr && y->expr && x->expr->kind == IR_EX_INT &&
         y->expr->kind == IR_EX_INT && x->expr->i == y->expr->i;
}

static void fuse_graph(IrGraph *g) {
  int *uses = ir_count_uses(g);
  IrVec kept = {0};
  bool *dead = ir_alloc(sizeof(bool) * (size_t)(g->nodes.len + 1));
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->body) fuse_graph(n->body);
    IrValue *x = n->op == IR_OP_TP_SLICE ? n->in[0] : NULL;
    IrNode *ar = x && x->kind == IR_VAL_NODE ? x->def : NULL;
    if (!ar || ar->op != IR_OP_ALL_REDUCE || uses[x->id] != 1 || !same_attr(ar, n, "axis") ||
        !same_attr(ar, n, "size"))
      continue;
    n->op = IR_OP_REDUCE_SCATTER;
    n->in[0] = ar->in[0];
    for (int j = 0; j < i; j++)
      if (g->nodes.items[j] == ar) dead[j] = true;
  }
  for (int i = 0; i < g->nodes.len; i++)
    if (!dead[i]) ir_vec_push(&kept, g->nodes.items[i]);
  g->nodes = kept;
}

bool pass_tp_fuse(IrGraph **gp, const PassOptions *opt) {
  (void)opt;
  fuse_graph(ir_top(*gp));
  return true;
}
