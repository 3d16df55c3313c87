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

/* Every size the compiler and the rank programs compute is a 64-bit count
 * of bytes: a tensor of more than 2^60 elements (8 bytes each, with room
 * to add) overflows one, and used to come out as a negative numel in the
 * generated tables. */
#define MAX_ELEMENTS ((int64_t)1 << 60)

/* The elements of a known type, or -1 with the dimension at which the
 * count leaves MAX_ELEMENTS in *at. */
static int64_t checked_numel(const IrType *t, int *at) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    if (t->shape[i] < 0 || __builtin_mul_overflow(n, t->shape[i], &n) || n > MAX_ELEMENTS) {
      *at = i;
      return -1;
    }
  return n;
}

static bool value_fits(const IrValue *v) {
  int at = 0;
  if (!ir_type_known(&v->type) || checked_numel(&v->type, &at) >= 0) return true;
  ir_error(v->loc, "shape: %s%s has the shape %s, more than 2^60 elements from dimension %d "
           "(%lld) on: its size overflows a 64-bit count of bytes",
           v->kind == IR_VAL_PARAM ? "@" : "%", v->name ? v->name : "?", ir_shape_str(&v->type),
           at, (long long)v->type.shape[at]);
  return false;
}

/* Every value of g (bodies included) within MAX_ELEMENTS, and the
 * parameters of all layers together too; adds g's parameter count, times
 * `times`, to *params. */
static bool sizes_fit(IrGraph *g, int64_t times, int64_t *params, IrLoc *where) {
  bool ok = true;
  IrVec *lists[] = {&g->inputs, &g->params};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < lists[l]->len; i++) {
      IrValue *v = lists[l]->items[i];
      if (!value_fits(v)) {
        ok = false;
        continue;
      }
      int at = 0;
      int64_t n = l == 1 && ir_type_known(&v->type) ? checked_numel(&v->type, &at) : 0, add;
      if (__builtin_mul_overflow(n, times, &add) || __builtin_add_overflow(*params, add, params) ||
          *params > MAX_ELEMENTS)
        *params = MAX_ELEMENTS + 1, *where = v->loc;
    }
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    for (int k = 0; k < n->nout; k++) ok &= value_fits(n->out[k]);
    if (!n->body) continue;
    int64_t count = n->op == IR_OP_REPEAT ? ir_attr_int(n, "count") : 1, sub;
    if (count < 1) count = 1;
    if (__builtin_mul_overflow(times, count, &sub)) sub = MAX_ELEMENTS + 1;
    ok &= sizes_fit(n->body, sub, params, where);
  }
  return ok;
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
  /* The inputs and parameters before inference (whose rules multiply
   * their dimensions), every result after. */
  int64_t params = 0, again = 0;
  IrLoc where = ir_cmdline;
  if (!sizes_fit(*g, 1, &params, &where)) return false;
  if (params > MAX_ELEMENTS) {
    ir_error(where, "shape: the model's parameters add up to more than 2^60 elements (at this "
             "one): their size overflows a 64-bit count of bytes");
    return false;
  }
  return ir_shape_graph(*g) && sizes_fit(*g, 1, &again, &where);
}
