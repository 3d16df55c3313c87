/* The `ep-partition` pass: expert parallelism (--ep E). Megatron's
 * layout: the E expert ranks of a group are E consecutive data-parallel
 * ranks, so t * p * d ranks still hold one model and each expert is
 * replicated over d / E of them. Every routed layer keeps its router,
 * dispatch and combine on each rank (the tokens of the rank's own
 * microbatch) and runs only its own experts' products:
 *
 *   rows, pos, counts = moe_dispatch(x, chosen)      rows sorted by expert
 *   send, each = ep_plan(counts)                     rows for each expert rank
 *   rcounts, _ = all_to_all(counts, each)            the counts exchanged first
 *   y, received = all_to_all(rows, send)             the tokens to their experts
 *   srt, lcounts = ep_sort(y, rcounts)               by local expert, then source
 *   ... grouped_linear(srt, w[E/ep, ...], lcounts) ...
 *   back = ep_unsort(out, rcounts)                   by source again
 *   home, _ = all_to_all(back, received){rows = T*k} the outputs home
 *   moe_combine(home, pos, weights)
 *
 * The token all_to_all's result holds ep * T*k rows, the worst case (every
 * rank sends all its rows to this one), so the memory plan is static
 * whatever the router chooses and nothing grows inside a step. The expert
 * parameters (the w of every grouped_linear fed by the dispatch's counts)
 * keep their leading E / ep experts, expert rank r's [r E/ep, (r+1) E/ep),
 * and carry the spec split(data, 0): split over the expert ranks of the
 * data axis. The collectives have adjoints (autodiff.c), so the backward
 * sends the gradients back the same way.
 *
 * It runs after unroll, on the flat graph of one tensor rank. With ep = 1
 * it changes nothing. */
#include <string.h>

#include "passes.h"

typedef struct Ep {
  IrGraph *g;
  int ep;
  IrPtrMap sliced; /* expert params already cut */
} Ep;

static IrExpr *lit(int64_t v, IrLoc loc) { return ir_expr_int(v, loc); }

/* all_to_all(x, counts) over the expert ranks; rows 0: the worst case. */
static IrNode *all_to_all(Ep *P, IrValue *x, IrValue *counts, int64_t rows, IrLoc loc) {
  IrAttr attrs[3] = {{"axis", lit(IR_AXIS_DATA, loc)}, {"size", lit(P->ep, loc)},
                     {"rows", lit(rows, loc)}};
  return ir_add_node(P->g, IR_OP_ALL_TO_ALL, (IrValue *[]){x, counts}, 2, attrs, 3, 2, loc);
}

static IrNode *ep_op(Ep *P, IrOp op, IrValue *a, IrValue *b, IrLoc loc) {
  IrAttr size = {"size", lit(P->ep, loc)};
  return ir_add_node(P->g, op, (IrValue *[]){a, b}, b ? 2 : 1, &size, 1,
                     ir_op_info(op)->nout, loc);
}

/* The expert parameter w[E, ...] of a grouped product keeps this expert
 * rank's E / ep experts. Reports a w that is not a parameter. */
static bool slice_experts(Ep *P, IrNode *gl, int64_t E) {
  IrValue *w = gl->in[1];
  if (w->kind != IR_VAL_PARAM || w->type.rank < 1 || w->type.shape[0] != E ||
      w->shard.kind != IR_REPLICATED) {
    ir_error(gl->loc, "ep-partition: --ep %d places the experts of a routed layer: the weights of "
             "its grouped_linear must be a parameter [%lld, ...] replicated over the tensor axis, "
             "got %s%s", P->ep, (long long)E, w->kind == IR_VAL_PARAM ? "@" : "%",
             ir_type_str(&w->type));
    return false;
  }
  if (ir_ptrmap_get(&P->sliced, w)) return true;
  ir_ptrmap_put(&P->sliced, w, w);
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, w->type.shape, sizeof shape);
  shape[0] = E / P->ep;
  ir_type_set_shape(&w->type, w->type.dtype, w->type.rank, shape);
  w->shard = (IrShard){.kind = IR_SPLIT, .axis = IR_AXIS_DATA, .dim = 0};
  return true;
}

/* The routed layer of dispatch d, whose combine is c: the nodes that read
 * its rows and counts read the sorted ones instead, and c reads the rows
 * brought home. New nodes go where they run (g's order is rebuilt by
 * the caller around d and c). */
typedef struct Layer {
  IrNode *dispatch, *combine;
  IrValue *rcounts, *received; /* set when the dispatch side is written */
} Layer;

static bool write_dispatch(Ep *P, Layer *L, IrNode **users, int nusers) {
  IrNode *d = L->dispatch;
  IrValue *rows = d->out[0], *counts = d->out[2];
  int64_t E = counts->type.shape[0];
  IrNode *plan = ep_op(P, IR_OP_EP_PLAN, counts, NULL, d->loc);
  IrNode *rc = all_to_all(P, counts, plan->out[1], E, d->loc);
  IrNode *tok = all_to_all(P, rows, plan->out[0], 0, d->loc);
  IrNode *srt = ep_op(P, IR_OP_EP_SORT, tok->out[0], rc->out[0], d->loc);
  L->rcounts = rc->out[0];
  L->received = tok->out[1];
  bool ok = true;
  for (int u = 0; u < nusers; u++) {
    IrNode *n = users[u];
    for (int i = 0; i < n->nin; i++) {
      if (n->in[i] == rows && n != L->combine) n->in[i] = srt->out[0];
      if (n->in[i] == counts && n->op == IR_OP_GROUPED_LINEAR && i == 2) {
        n->in[i] = srt->out[1];
        ok = slice_experts(P, n, E) && ok;
      }
    }
  }
  return ok;
}

static void write_combine(Ep *P, Layer *L) {
  IrNode *c = L->combine;
  int64_t rows = L->dispatch->out[0]->type.shape[0];
  IrNode *back = ep_op(P, IR_OP_EP_UNSORT, c->in[0], L->rcounts, c->loc);
  IrNode *home = all_to_all(P, back->out[0], L->received, rows, c->loc);
  c->in[0] = home->out[0];
}

/* The combine that reads dispatch d's pos, or NULL with an error. */
static IrNode *find_combine(IrNode **nodes, int n, int from, IrNode *d) {
  for (int i = from; i < n; i++)
    if (nodes[i]->op == IR_OP_MOE_COMBINE && nodes[i]->in[1] == d->out[1]) return nodes[i];
  ir_error(d->loc, "ep-partition: this moe_dispatch has no moe_combine of its rows: expert "
           "parallelism sends the expert outputs back to the combine");
  return NULL;
}

bool pass_ep_partition(IrGraph **gp, const PassOptions *opt) {
  IrGraph *g = *gp;
  if (!opt || opt->ep <= 1) return true;
  if (!pass_check_typed(g, "ep-partition")) return false;
  Ep P = {.g = g, .ep = opt->ep, .sliced = {.arena = true}};
  int n = g->nodes.len;
  IrNode **old = ir_alloc(sizeof(IrNode *) * (size_t)(n ? n : 1));
  memcpy(old, g->nodes.items, sizeof(IrNode *) * (size_t)n);
  Layer *layers = ir_alloc(sizeof(Layer) * (size_t)(n ? n : 1));
  int nlayers = 0;
  bool ok = true;
  for (int i = 0; i < n; i++) {
    IrNode *d = old[i];
    if (d->op == IR_OP_REPEAT) {
      ir_error(d->loc, "ep-partition: repeat '%s' is still rolled; run the unroll pass first",
               d->label ? d->label : "?");
      return false;
    }
    if (d->op != IR_OP_MOE_DISPATCH) continue;
    int64_t E = d->out[2]->type.shape[0];
    if (E % opt->ep) {
      /* Once for the layer of the model file, not for each unrolled copy. */
      if (ok) ir_error(d->loc, "ep-partition: --ep %d must divide the routed layer's %lld experts", opt->ep,
               (long long)E);
      ok = false;
      continue;
    }
    IrNode *c = find_combine(old, n, i + 1, d);
    if (!c) {
      ok = false;
      continue;
    }
    layers[nlayers++] = (Layer){.dispatch = d, .combine = c};
  }
  if (!ok) return false;
  if (nlayers == 0) {
    ir_error(ir_cmdline, "--ep %d: the model has no routed layer (moe_dispatch) whose experts "
             "could be placed", opt->ep);
    return false;
  }
  /* g's nodes again in order, the new ones after each dispatch and before
   * each combine. */
  g->nodes.len = 0;
  for (int i = 0; i < n; i++) {
    for (int l = 0; l < nlayers; l++)
      if (old[i] == layers[l].combine) write_combine(&P, &layers[l]);
    ir_vec_push(&g->nodes, old[i]);
    for (int l = 0; l < nlayers; l++)
      if (old[i] == layers[l].dispatch)
        ok = write_dispatch(&P, &layers[l], old + i + 1, n - i - 1) && ok;
  }
  if (!ok) return false;
  if (!ir_shape_graph(g)) {
    ir_error((IrLoc){0}, "ep-partition: the graph does not type-check (a bug of the pass)");
    return false;
  }
  return true;
}
