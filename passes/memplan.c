/* The memory plan (see memplan.h): fused loops and views first, since they
 * decide which values need memory at all and when each is live; then one
 * interval first-fit per region. This file assumes no target; the runs of
 * row chunks that the CPU target's policy asks for are planned in
 * memplan_rows.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memplan_planner.h"
#include "program_passes.h"

#define ALIGN 64
static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* ------------------------------------------------------ value -> buffer map */

const PassBuf *pass_memplan_find(const PassMemPlan *p, const IrValue *v) {
  int i = v ? map_get(p->map, v) : -1;
  return i < 0 ? NULL : &p->bufs[i];
}

/* ---------------------------------------------------------------- helpers */

int64_t pass_memplan_elem_bytes(const PassMemPlan *p, IrDType t) {
  switch (t) {
  case IR_I32: return 4;
  case IR_I64: return 8;
  default: return p->real_bytes; /* every floating type computes in the program's real */
  }
}

int64_t pass_memplan_act_offset(const PassMemPlan *p, const PassBuf *b) {
  if (b->region == PASS_REGION_ACTIVATIONS) return b->offset;
  if (b->region == PASS_REGION_TEMPORARIES) return p->activations + b->offset;
  die("value %d is not in the activation buffer", b->index);
}

static bool is_real(IrDType t) { return t != IR_I32 && t != IR_I64; }

static bool is_backward(const IrNode *n) { return n->phase == IR_PHASE_BACKWARD; }

/* The shape without leading 1s: [1, 64, 96] and [64, 96] run as the same loop. */
static int core_shape(const IrType *t, const int64_t **dims) {
  int k = 0;
  while (k < t->rank - 1 && t->shape[k] == 1) k++;
  *dims = t->shape + k;
  return t->rank - k;
}

static bool same_shape(const IrType *a, const IrType *b) {
  const int64_t *da, *db;
  int ra = core_shape(a, &da), rb = core_shape(b, &db);
  return ra == rb && memcmp(da, db, (size_t)ra * sizeof *da) == 0;
}

/* ------------------------------------------------------------ checks, map */

/* The plan needs a flat graph whose every type is known. */
static bool check_graph(IrGraph *g) {
  bool ok = true;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->op == IR_OP_REPEAT) {
      ir_error(n->loc, "memplan: the graph still holds a repeat node (run unroll first)");
      return false;
    }
    for (int j = 0; j < n->nout; j++)
      if (!ir_type_known(&n->out[j]->type)) {
        ir_error(n->loc, "memplan: the type of an output of %s is not known (run shape first)",
                 ir_op_info(n->op)->name);
        ok = false;
      }
  }
  IrVec *leaves[2] = {&g->inputs, &g->params};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < leaves[k]->len; i++) {
      IrValue *v = leaves[k]->items[i];
      if (!ir_type_known(&v->type)) {
        ir_error(v->loc, "memplan: the type of %s is not known (run fold first)", v->name);
        ok = false;
      }
    }
  return ok;
}

static void add_buf(Planner *pl, const IrValue *v, int def) {
  PassMemPlan *p = pl->p;
  PassBuf *b = &p->bufs[p->nbufs];
  b->value = v;
  b->index = p->nbufs;
  b->bytes = ir_type_numel(&v->type) * pass_memplan_elem_bytes(p, v->type.dtype);
  b->first = b->last = 0;
  pl->def[p->nbufs] = def;
  ir_ptrmap_put(p->map, v, (void *)(intptr_t)(++p->nbufs));
}

static void index_values(Planner *pl) {
  PassMemPlan *p = pl->p;
  IrGraph *g = pl->g;
  int n = g->inputs.len + g->params.len;
  for (int i = 0; i < g->nodes.len; i++) n += ((IrNode *)g->nodes.items[i])->nout;
  if (n == 0) n = 1;
  p->bufs = ir_alloc((size_t)n * sizeof *p->bufs);
  p->map = ir_alloc(sizeof *p->map);
  p->map->arena = true;
  pl->def = calloc((size_t)n, sizeof *pl->def);
  pl->delta = calloc((size_t)n, sizeof *pl->delta);
  pl->outside = calloc((size_t)n, sizeof *pl->outside);
  pl->output = calloc((size_t)n, sizeof *pl->output);
  pl->direct = calloc((size_t)n, sizeof *pl->direct);
  pl->reg = calloc((size_t)n, sizeof *pl->reg);
  pl->wide = calloc((size_t)n, sizeof *pl->wide);
  if (!pl->def || !pl->delta || !pl->outside || !pl->output || !pl->direct || !pl->reg ||
      !pl->wide)
    die("out of memory");
  for (int i = 0; i < g->inputs.len; i++) add_buf(pl, g->inputs.items[i], -1);
  for (int i = 0; i < g->params.len; i++) add_buf(pl, g->params.items[i], -1);
  p->nleaves = p->nbufs;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *nd = g->nodes.items[i];
    for (int j = 0; j < nd->nout; j++) add_buf(pl, nd->out[j], i);
  }
}

static void planner_free(Planner *pl) {
  free(pl->def);
  free(pl->delta);
  free(pl->outside);
  free(pl->output);
  free(pl->direct);
  free(pl->reg);
  free(pl->wide);
}

/* ------------------------------------------------------- views and loops */

/* A node whose outputs are its input's bytes: reshape; tp_copy (the
 * identity forward; only its adjoint communicates); a split whose parts
 * are contiguous (nothing but 1s before the axis); dropout at rate 0, which
 * is the identity in training and evaluation alike. */
static bool node_is_view(const IrNode *n) {
  if (n->op == IR_OP_RESHAPE || n->op == IR_OP_TP_COPY) return true;
  if (n->op == IR_OP_SPLIT) {
    const IrType *t = &n->in[0]->type;
    int64_t axis = ir_attr_int(n, "axis");
    if (axis < 0) axis += t->rank;
    for (int k = 0; k < axis; k++)
      if (t->shape[k] != 1) return false;
    return true;
  }
  if (n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_GRAD) {
    IrAttr *a = ir_node_attr(n, "rate");
    return a && a->expr && ir_expr_is_literal(a->expr) &&
           (a->expr->kind == IR_EX_INT ? a->expr->i == 0 : a->expr->f == 0);
  }
  return false;
}

/* An elementwise node codegen writes inline in a loop: dropout needs its
 * kernel (the mask), sources have nothing to loop over. An op with two
 * results (swiglu_grad) a loop writes as easily as one. */
static bool node_is_fusable(const IrNode *n) {
  unsigned f = ir_op_info(n->op)->flags;
  if (!(f & IR_OPF_ELEMENTWISE) || (f & (IR_OPF_RANDOM | IR_OPF_SOURCE)) || n->nout < 1)
    return false;
  for (int j = 0; j < n->nout; j++)
    if (!is_real(n->out[j]->type.dtype) || !same_shape(&n->out[j]->type, &n->out[0]->type))
      return false;
  for (int j = 0; j < n->nin; j++)
    if (!is_real(n->in[j]->type.dtype)) return false;
  return true;
}

/* Consecutive fusable nodes of one shape and one phase form a loop. */
static void plan_groups(Planner *pl) {
  PassMemPlan *p = pl->p;
  int N = pl->g->nodes.len;
  for (int i = 0; i < N; i++) {
    IrNode *n = pl->g->nodes.items[i];
    p->fused[i] = !p->view[i] && !p->absorbed[i] && node_is_fusable(n);
    p->group_first[i] = p->group_last[i] = i;
    if (!p->fused[i] || i == 0 || !p->fused[i - 1] || i == p->boundary || i == p->wboundary)
      continue;
    /* A recomputed copy computes what its forward node did only in a loop
     * of copies alone (recompute.c). */
    if (n->recomputed != ((IrNode *)pl->g->nodes.items[i - 1])->recomputed) continue;
    IrNode *lead = pl->g->nodes.items[p->group_first[i - 1]];
    if (same_shape(&n->out[0]->type, &lead->out[0]->type)) p->group_first[i] = p->group_first[i - 1];
  }
  for (int i = N - 2; i >= 0; i--)
    if (p->group_first[i + 1] == p->group_first[i]) p->group_last[i] = p->group_last[i + 1];
}

/* Views resolve to the value that owns the bytes, plus a byte offset (the
 * part of a split). */
static void plan_views(Planner *pl) {
  for (int i = 0; i < pl->g->nodes.len; i++) {
    IrNode *n = pl->g->nodes.items[i];
    pl->p->view[i] = node_is_view(n);
    if (!pl->p->view[i]) continue;
    PassBuf *in = buf_of(pl, n->in[0]);
    for (int j = 0; j < n->nout; j++) {
      PassBuf *b = buf_of(pl, n->out[j]);
      b->alias = in->alias ? in->alias : in->value;
      pl->delta[b->index] = pl->delta[in->index] + (n->op == IR_OP_SPLIT ? j * b->bytes : 0);
    }
  }
}

/* ------------------------------------------------ uses, gradients, registers */

static void count_uses(Planner *pl) {
  for (int i = 0; i < pl->g->nodes.len; i++) {
    IrNode *n = pl->g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) buf_of(pl, n->in[j])->uses++;
  }
  for (int i = 0; i < pl->g->outputs.len; i++) pl->output[buf_of(pl, pl->g->outputs.items[i])->index] = true;
}

/* Values read by a node outside the loop that computes them must be stored. */
static void mark_outside(Planner *pl) {
  PassMemPlan *p = pl->p;
  for (int i = 0; i < pl->g->nodes.len; i++) {
    IrNode *n = pl->g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) {
      int k = buf_of(pl, n->in[j])->index, d = pl->def[k];
      if (d < 0 || !p->fused[i] || !p->fused[d] || p->group_first[d] != p->group_first[i])
        pl->outside[k] = true;
    }
  }
}

/* A param's gradient goes straight into its slot of the grads region when
 * its node can add into the destination (an op flagged IR_OPF_ACCUMULATES,
 * a fused loop with +=) and nothing else reads it. The
 * sum of such partial gradients (the tied embedding's two) needs no node at
 * all: each part adds itself into the slot. Any other gradient is computed
 * into a temporary and added to the slot after its node. Either way the
 * runtime zeroes the gradients once per step and every microbatch adds its
 * share. */
static bool can_direct(Planner *pl, const IrValue *v, const IrValue *prm, int uses) {
  int k = buf_of(pl, v)->index, d = pl->def[k];
  PassBuf *b = &pl->p->bufs[k];
  if (d < pl->p->boundary || b->alias || (b->grad_of && b->grad_of != prm) || b->uses != uses ||
      pl->output[k] || b->bytes != buf_of(pl, prm)->bytes)
    return false;
  IrNode *n = pl->g->nodes.items[d];
  if (n->op == IR_OP_ADD && n->in[0] != n->in[1] && n->in[0]->kind == IR_VAL_NODE &&
      n->in[1]->kind == IR_VAL_NODE && can_direct(pl, n->in[0], prm, 1) &&
      can_direct(pl, n->in[1], prm, 1))
    return true;
  if (!pl->p->view[d] && node_is_fusable(n)) return true;
  return n->nout == 1 && (ir_op_info(n->op)->flags & IR_OPF_ACCUMULATES);
}

static void mark_direct(Planner *pl, const IrValue *v, const IrValue *prm) {
  PassBuf *b = buf_of(pl, v);
  int d = pl->def[b->index];
  IrNode *n = pl->g->nodes.items[d];
  b->grad_of = prm;
  pl->direct[b->index] = true;
  if (n->op == IR_OP_ADD && can_direct(pl, n->in[0], prm, 1) && can_direct(pl, n->in[1], prm, 1)) {
    pl->p->absorbed[d] = true;
    mark_direct(pl, n->in[0], prm);
    mark_direct(pl, n->in[1], prm);
  }
}

/* A partial gradient that a collective sums into a param's gradient (a
 * norm's weight under sequence parallelism) keeps the gradient's real in
 * a plan of low-precision values: comm.h moves one type per call, and
 * weight gradients are reduced in full precision. So does the batch sum
 * (sum_to) whose rows an embedding_grad adds into its table: the position
 * embedding's gradient, which a bf16 sum would round before it reaches
 * the fp32 gradient. */
static void mark_wide(Planner *pl, const IrValue *v) {
  if (v->kind != IR_VAL_NODE) return;
  pl->wide[buf_of(pl, v)->index] = true;
  IrOp op = v->def->op;
  if (op == IR_OP_ALL_REDUCE || op == IR_OP_REDUCE_SCATTER || op == IR_OP_ALL_GATHER)
    mark_wide(pl, v->def->in[0]);
  const IrValue *dy = op == IR_OP_EMBEDDING_GRAD ? v->def->in[1] : NULL;
  if (dy && dy->kind == IR_VAL_NODE && dy->def->op == IR_OP_SUM_TO) mark_wide(pl, dy);
}

static void plan_grads(Planner *pl) {
  for (int i = 0; i < pl->g->params.len; i++) {
    IrValue *prm = pl->g->params.items[i];
    if (!prm->grad) continue;
    PassBuf *b = buf_of(pl, prm->grad);
    if (b->grad_of) die("one value is the gradient of both %s and %s", b->grad_of->name, prm->name);
    b->grad_of = prm;
  }
  for (int i = 0; i < pl->g->params.len; i++) {
    IrValue *prm = pl->g->params.items[i];
    if (prm->grad && can_direct(pl, prm->grad, prm, 0)) mark_direct(pl, prm->grad, prm);
    if (prm->grad) mark_wide(pl, prm->grad);
  }
}

static void plan_registers(Planner *pl) {
  PassMemPlan *p = pl->p;
  for (int k = p->nleaves; k < p->nbufs; k++) {
    PassBuf *b = &p->bufs[k];
    pl->reg[k] = p->fused[pl->def[k]] && !pl->outside[k] && !pl->output[k] && !b->grad_of;
  }
}

/* ------------------------------------------------------------- regions */

/* Each node's region is its fused loop's unless a run of row chunks holds
 * it. Row chunks are the CPU target's way to run a layer's token rows in
 * parallel (memplan_rows.c); a target whose policy does not ask for them
 * gets none. */
static void plan_regions(Planner *pl) {
  PassMemPlan *p = pl->p;
  for (int i = 0; i < pl->g->nodes.len; i++) {
    p->region_first[i] = p->group_first[i];
    p->region_last[i] = p->group_last[i];
  }
  if (p->policy.row_chunks) pass_memplan_rows(pl);
}

/* ------------------------------------------------------------- liveness */

static bool is_dloss(const IrValue *v) {
  return v->kind == IR_VAL_INPUT && v->name && strcmp(v->name, "d_loss") == 0;
}

static PassBuf *root_of(Planner *pl, PassBuf *b) { return b->alias ? buf_of(pl, b->alias) : b; }

static void extend(PassBuf *b, int pos) {
  if (pos > b->last) b->last = pos;
}

/* Intervals of the values that own memory (views extend their root). The
 * runtime writes the inputs before forward() and d_loss between forward()
 * and backward(), and reads the loss and the logits after forward(): all of
 * those must survive the boundary between the two functions. */
static void plan_liveness(Planner *pl) {
  PassMemPlan *p = pl->p;
  int bpos = p->boundary + 1;
  for (int k = 0; k < p->nbufs; k++) {
    PassBuf *b = &p->bufs[k];
    int d = pl->def[k];
    b->first = b->last = d >= 0 ? p->region_first[d] + 1 : is_dloss(b->value) ? bpos : 0;
  }
  for (int i = 0; i < pl->g->nodes.len; i++) {
    IrNode *n = pl->g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) {
      PassBuf *b = buf_of(pl, n->in[j]);
      extend(b, p->region_last[i] + 1);
      extend(root_of(pl, b), p->region_last[i] + 1);
    }
    /* In a run, an output nobody reads still needs its bytes until the
     * run ends: other chunks are still at earlier nodes. */
    for (int j = 0; j < n->nout && (p->chunked[i] || p->sunk[i]); j++) {
      PassBuf *b = buf_of(pl, n->out[j]);
      extend(b, p->region_last[i] + 1);
      extend(root_of(pl, b), p->region_last[i] + 1);
    }
  }
  /* Outputs survive the end of the function that computes them: forward
   * values the boundary, and the outputs of a pipeline chunk that backward()
   * computes (the gradient it sends back) or relays (a received value
   * passed on) the whole backward. */
  for (int i = 0; i < pl->g->outputs.len; i++) {
    IrValue *v = pl->g->outputs.items[i];
    bool to_end = v->kind == IR_VAL_INPUT || (v->kind == IR_VAL_NODE && is_backward(v->def));
    /* With the backward split, the runtime takes them after B. */
    extend(root_of(pl, buf_of(pl, v)), to_end ? p->wboundary : bpos);
    if (v->kind == IR_VAL_NODE && v->def->op == IR_OP_CROSS_ENTROPY)
      extend(root_of(pl, buf_of(pl, v->def->in[0])), bpos);
  }
  /* A staged gradient that exists before the backward is added at its start. */
  for (int k = 0; k < p->nbufs; k++)
    if (p->bufs[k].grad_of && !pl->direct[k] && pl->def[k] < p->boundary)
      extend(root_of(pl, &p->bufs[k]), bpos);
  for (int k = 0; k < p->nbufs; k++) {
    PassBuf *b = &p->bufs[k];
    if (!b->alias) continue;
    PassBuf *r = buf_of(pl, b->alias);
    b->first = r->first;
    b->last = r->last;
  }
}

/* ------------------------------------------------------------- placement */

/* Attention's log-sum-exp: the kernels keep it in full precision, as the
 * backward's softmax needs it to the last bit of its exponent. */
static bool is_row_statistic(const IrValue *v) {
  return v->kind == IR_VAL_NODE && v->def->op == IR_OP_ATTENTION && v->def->nout > 1 &&
         v->def->out[1] == v;
}

/* Whether buffer k holds its reals in the policy's low precision: a value
 * of the step itself (PassMemPolicy.low_bytes), or one the policy names
 * (its low_values: pipeline messages). */
static bool is_low(Planner *pl, int k) {
  const PassBuf *b = &pl->p->bufs[k];
  const PassMemPolicy *po = &pl->p->policy;
  if (po->low_bytes <= 0 || !is_real(b->value->type.dtype) || b->grad_of || pl->direct[k] ||
      pl->wide[k] || is_row_statistic(b->value))
    return false;
  if (po->low_values && ir_ptrmap_get(po->low_values, b->value)) return true;
  return b->value->kind == IR_VAL_NODE && !pl->output[k];
}

/* Whether v holds one expert rank's experts (ep-partition's split(data, 0)). */
static bool is_expert(const IrValue *v) {
  return v->shard.kind == IR_SPLIT && v->shard.axis == IR_AXIS_DATA;
}

/* Params in declaration order, each at a 64-byte boundary. Where expert
 * params (--ep) begin or end, at a multiple of d lines: their gradient
 * buckets are reduced over another group than the rest's, and with ZeRO-1
 * each bucket must split evenly over its group (codegen/layout.c). */
static void place_weights(Planner *pl) {
  PassMemPlan *p = pl->p;
  int64_t at = 0, elems_per_line = ALIGN / p->real_bytes;
  int64_t group = elems_per_line * (pl->g->mesh[IR_AXIS_DATA] > 1 ? pl->g->mesh[IR_AXIS_DATA] : 1);
  for (int i = 0; i < pl->g->params.len; i++) {
    PassBuf *b = buf_of(pl, pl->g->params.items[i]);
    if (!is_real(b->value->type.dtype))
      die("param %s is not a floating-point tensor", b->value->name);
    if (i > 0 && is_expert(b->value) != is_expert(pl->g->params.items[i - 1]))
      at = (at + group - 1) / group * group;
    b->region = PASS_REGION_WEIGHTS;
    b->offset = at * p->real_bytes;
    at += ir_type_numel(&b->value->type);
    at = (at + elems_per_line - 1) / elems_per_line * elems_per_line;
  }
  p->nweights = at;
  p->weights = p->grads = at * p->real_bytes;
  p->optimizer = 2 * p->weights;
}

static void place_buffers(Planner *pl) {
  PassMemPlan *p = pl->p;
  int N = pl->g->nodes.len;
  PassFitItem *act = calloc((size_t)p->nbufs + 1, sizeof *act);
  PassFitItem *tmp = calloc((size_t)(p->nbufs + N) + 1, sizeof *tmp);
  if (!act || !tmp) die("out of memory");
  int nact = 0, ntmp = 0, bpos = p->boundary + 1;
  for (int k = 0; k < p->nbufs; k++) {
    PassBuf *b = &p->bufs[k];
    if (b->alias || b->value->kind == IR_VAL_PARAM) continue;
    if (is_low(pl, k)) b->bytes = ir_type_numel(&b->value->type) * p->policy.low_bytes;
    if (pl->reg[k]) {
      b->region = PASS_REGION_NONE;
    } else if (pl->direct[k]) {
      b->region = PASS_REGION_GRADS;
      b->offset = buf_of(pl, b->grad_of)->offset;
    } else {
      bool forward = pl->def[k] >= 0 ? pl->def[k] < p->boundary : !is_dloss(b->value);
      /* Kept with the microbatch: what the backward reads of the forward,
       * and what W reads of B when they are split (other microbatches run
       * in between and reuse the temporaries). */
      bool kept = (forward && b->last >= bpos) || (b->first <= p->wboundary && b->last > p->wboundary);
      b->region = kept ? PASS_REGION_ACTIVATIONS : PASS_REGION_TEMPORARIES;
      PassFitItem it = {align_up(b->bytes), 0, b->first, b->last, k};
      if (kept) act[nact++] = it;
      else tmp[ntmp++] = it;
    }
  }
  for (int i = 0; i < N; i++) {
    IrNode *n = pl->g->nodes.items[i];
    p->scratch_offset[i] = -1;
    int64_t per_thread = p->policy.scratch_reals ? p->policy.scratch_reals(n) : 0;
    if (per_thread <= 0) continue;
    if (per_thread > p->scratch_per_thread) p->scratch_per_thread = per_thread;
    p->scratch_bytes[i] = per_thread * p->threads * p->real_bytes;
    tmp[ntmp++] = (PassFitItem){align_up(p->scratch_bytes[i]), 0, p->region_first[i] + 1,
                         p->region_last[i] + 1, p->nbufs + i};
  }
  p->activations = pass_memplan_first_fit(act, nact);
  p->temporaries = pass_memplan_first_fit(tmp, ntmp);
  for (int i = 0; i < nact; i++) p->bufs[act[i].key].offset = act[i].offset;
  for (int i = 0; i < ntmp; i++) {
    if (tmp[i].key < p->nbufs) p->bufs[tmp[i].key].offset = tmp[i].offset;
    else p->scratch_offset[tmp[i].key - p->nbufs] = tmp[i].offset;
  }
  free(act);
  free(tmp);
}

/* A view lives where its root does, `delta` bytes in. */
static void place_views(Planner *pl) {
  for (int k = 0; k < pl->p->nbufs; k++) {
    PassBuf *b = &pl->p->bufs[k];
    if (!b->alias) continue;
    PassBuf *r = buf_of(pl, b->alias);
    b->region = r->region;
    b->offset = r->offset + pl->delta[k];
    /* A view of a low-precision root is one too, `delta` counted in its
     * elements. */
    if (is_low(pl, r->index)) {
      b->bytes = ir_type_numel(&b->value->type) * pl->p->policy.low_bytes;
      b->offset = r->offset + pl->delta[k] / pl->p->real_bytes * pl->p->policy.low_bytes;
    }
  }
}

/* ----------------------------------------------------------------- entry */

/* The policy a plan is made under: no scratch and no row chunks unless
 * asked, PASS_MEMPLAN_THREADS when no threads are. */
static PassMemPolicy policy_of(const PassMemPolicy *policy) {
  PassMemPolicy p = policy ? *policy : (PassMemPolicy){0};
  if (p.threads <= 0) p.threads = PASS_MEMPLAN_THREADS;
  return p;
}

bool pass_memplan_made_for(const PassMemPlan *p, int real_bytes, const PassMemPolicy *policy) {
  PassMemPolicy q = policy_of(policy);
  return p && p->real_bytes == real_bytes && p->policy.threads == q.threads &&
         p->policy.scratch_reals == q.scratch_reals && p->policy.row_chunks == q.row_chunks &&
         p->policy.low_bytes == q.low_bytes;
}

PassMemPolicy pass_memplan_policy(const PassMemPolicy *target, int threads, int low_bytes) {
  PassMemPolicy p = target ? *target : (PassMemPolicy){0};
  if (threads > 0) p.threads = threads;
  if (low_bytes) p.low_bytes = low_bytes;
  return p;
}

PassMemPlan *pass_memplan_build(IrGraph *g, int real_bytes, const PassMemPolicy *policy) {
  if (real_bytes != 4 && real_bytes != 8) die("real of %d bytes", real_bytes);
  if (!check_graph(g)) return NULL;
  PassMemPlan *p = ir_alloc(sizeof *p);
  int N = g->nodes.len;
  p->real_bytes = real_bytes;
  p->policy = policy_of(policy);
  p->threads = p->policy.threads;
  p->nnodes = N;
  p->boundary = p->wboundary = N;
  for (int i = N - 1; i >= 0; i--) {
    IrNode *n = g->nodes.items[i];
    if (is_backward(n)) p->boundary = i;
    if (g->wsplit && is_backward(n) && n->wgrad) p->wboundary = i;
  }
  size_t n1 = (size_t)(N > 0 ? N : 1);
  p->group_first = ir_alloc(n1 * sizeof *p->group_first);
  p->group_last = ir_alloc(n1 * sizeof *p->group_last);
  p->fused = ir_alloc(n1 * sizeof *p->fused);
  p->view = ir_alloc(n1 * sizeof *p->view);
  p->absorbed = ir_alloc(n1 * sizeof *p->absorbed);
  p->scratch_offset = ir_alloc(n1 * sizeof *p->scratch_offset);
  p->scratch_bytes = ir_alloc(n1 * sizeof *p->scratch_bytes);
  p->region_first = ir_alloc(n1 * sizeof *p->region_first);
  p->region_last = ir_alloc(n1 * sizeof *p->region_last);
  p->chunked = ir_alloc(n1 * sizeof *p->chunked);
  p->sunk = ir_alloc(n1 * sizeof *p->sunk);
  Planner pl = {.p = p, .g = g};
  index_values(&pl);
  plan_views(&pl);
  count_uses(&pl);
  plan_grads(&pl);
  plan_groups(&pl);
  mark_outside(&pl);
  plan_registers(&pl);
  plan_regions(&pl);
  plan_liveness(&pl);
  place_weights(&pl);
  place_buffers(&pl);
  place_views(&pl);
  planner_free(&pl);
  g->memplan = p;
  return p;
}

static void print_line(FILE *out, const char *what, int64_t bytes) {
  fprintf(out, "  %-34s %14lld bytes %10.1f MiB\n", what, (long long)bytes,
          (double)bytes / (1024.0 * 1024.0));
}

void pass_memplan_print_regions(FILE *out, int real_bytes, int threads, const int64_t r[5],
                                int64_t act_without) {
  fprintf(out, "memory plan (%s, kernel scratch for %d threads):\n", real_bytes == 8 ? "f64" : "f32",
          threads);
  print_line(out, "weights", r[0]);
  print_line(out, "gradients", r[1]);
  print_line(out, "optimizer state (AdamW m, v)", r[2]);
  print_line(out, "activations kept for backward", r[3]);
  if (act_without >= 0) print_line(out, "  without recomputation", act_without);
  print_line(out, "temporaries", r[4]);
  print_line(out, "total", r[0] + r[1] + r[2] + r[3] + r[4]);
}

void pass_memplan_print(FILE *out, const PassMemPlan *p) {
  int64_t r[5] = {p->weights, p->grads, p->optimizer, p->activations, p->temporaries};
  pass_memplan_print_regions(out, p->real_bytes, p->threads, r, -1);
}

/* The policy chunk c is planned under: the program's, and with
 * low-precision values (bf16) the chunk's pipeline messages among them, so
 * that activations and their gradients travel between stages in bf16. */
static PassMemPolicy chunk_policy(PassMemPolicy p, const PassChunk *c) {
  const IrVec *parts[] = {&c->recv_act, &c->send_act, &c->recv_grad, &c->send_grad};
  if (!p.low_bytes || !(parts[0]->len + parts[1]->len + parts[2]->len + parts[3]->len)) return p;
  IrPtrMap *m = ir_alloc(sizeof *m);
  memset(m, 0, sizeof *m);
  m->arena = true;
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < parts[k]->len; i++) ir_ptrmap_put(m, parts[k]->items[i], m);
  p.low_values = m;
  return p;
}

/* The registered pass: a plan for every chunk of the program (the whole
 * graph before pp-split), for the real and under the policy of the target
 * the pipeline runs for. Planned once, after bw-split, so that what W
 * reads of B stays with the microbatch. */
bool pass_memplan(PassProgram *prog, const PassOptions *opt) {
  int rb = opt && opt->real_bytes ? opt->real_bytes : 4;
  if (rb != 4 && rb != 8) {
    ir_error(ir_cmdline, "memplan: reals of %d bytes; the plans hold reals of 4 or 8", rb);
    return false;
  }
  PassMemPolicy base =
      pass_memplan_policy(opt ? opt->memplan : NULL, opt ? opt->threads : 0, opt ? opt->low_bytes : 0);
  int n;
  PassChunk *chunks = pass_program_chunks(prog, &n);
  for (int k = 0; k < n; k++) {
    PassMemPolicy policy = chunk_policy(base, &chunks[k]);
    if (!pass_memplan_build(chunks[k].g, rb, &policy)) return false;
  }
  return true;
}

void pass_memplan_print_program(FILE *out, PassProgram *prog) {
  pass_print_program(out, prog);
  int n;
  PassChunk *chunks = pass_program_chunks(prog, &n);
  for (int k = 0; k < n; k++) {
    if (n > 1) fprintf(out, "// virtual stage %d: ", chunks[k].vstage);
    else fprintf(out, "// ");
    pass_memplan_print(out, chunks[k].g->memplan);
  }
}

/* The bytes of region r of plan p. */
static int64_t region_bytes(const PassMemPlan *p, PassRegion r) {
  switch (r) {
  case PASS_REGION_WEIGHTS: return p->weights;
  case PASS_REGION_GRADS: return p->grads;
  case PASS_REGION_ACTIVATIONS: return p->activations;
  case PASS_REGION_TEMPORARIES: return p->temporaries;
  case PASS_REGION_NONE: return 0;
  }
  unreachable();
}

bool pass_memplan_verify(PassProgram *prog, const char *who) {
  if (!pass_verify_chunks(prog, who)) return false;
  int n;
  PassChunk *chunks = pass_program_chunks(prog, &n);
  for (int k = 0; k < n; k++) {
    const IrGraph *g = chunks[k].g;
    const PassMemPlan *p = g->memplan;
    if (!p || p->nnodes != g->nodes.len) {
      ir_error(ir_cmdline, "%s: virtual stage %d has %s", who, chunks[k].vstage,
               p ? "a memory plan made for other nodes" : "no memory plan");
      return false;
    }
    for (int i = 0; i < p->nbufs; i++) {
      const PassBuf *b = &p->bufs[i];
      if (b->region == PASS_REGION_NONE) continue;
      if (b->offset < 0 || b->offset + b->bytes > region_bytes(p, b->region)) {
        ir_error(ir_cmdline, "%s: virtual stage %d: buffer %d (%lld bytes at %lld) lies outside "
                 "its region of %lld bytes", who, chunks[k].vstage, i, (long long)b->bytes,
                 (long long)b->offset, (long long)region_bytes(p, b->region));
        return false;
      }
    }
  }
  return true;
}
