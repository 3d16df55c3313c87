/* The `shape` pass: infers the type of every node output, in order, from
 * the rules of ops.def (ir/shape.c, which also walks repeat bodies). It
 * needs the types of the inputs and parameters, which `fold` makes
 * literal; a graph that still has symbolic ones is reported once here
 * instead of leaving every node silently unknown. */
#include "../ir/shape.h"
#include "passes.h"

/* Finds the first input or parameter (bodies included) whose type is not
 * known yet, counting them all. */
static IrValue *first_symbolic(IrGraph *g, int *count) {
  IrValue *first = NULL;
  IrVec *lists[] = {&g->inputs, &g->params};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < lists[l]->len; i++) {
      IrValue *v = lists[l]->items[i];
      if (ir_type_known(&v->type)) continue;
      if (!first) first = v;
      ++*count;
    }
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (!n->body) continue;
    IrValue *v = first_symbolic(n->body, count);
    if (!first) first = v;
  }
  return first;
}

bool pass_shape(IrGraph **g, const PassOptions *opt) {
  (void)opt;
  int count = 0;
  IrValue *v = first_symbolic(*g, &count);
  if (v) {
    char *type = ir_shape_str(&v->type);
    ir_error(v->loc, "shape: %s%s has the symbolic shape %s%s; run the fold pass first",
             v->kind == IR_VAL_PARAM ? "@" : "%", v->name ? v->name : "?", type,
             count > 1 ? ir_fmt(" (and %d more values)", count - 1) : "");
    return false;
  }
  return ir_shape_graph(*g);
}
