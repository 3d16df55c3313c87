/* The cost model: the time of every op of a rank program from its FLOPs
 * and bytes, collectives from an alpha-beta model over the topology, and
 * the model's per-layer costs from one layer of the partitioned,
 * differentiated program (pl_model_build).
 *
 * Everything is priced as the GPU target runs it: 16-bit activations and
 * weights (bf16), whatever dtype the graph was written in, since the
 * graph's types give element counts and the planner prices bytes; with
 * PlConfig.fp32 as the CPU target runs it, 4 bytes each (pl_elem_bytes).
 * On a CPU description a rank's rates are its share of the cores
 * (pl_hw_rank_share). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../abi/comm.h"
#include "planner.h"

double pl_elem_bytes(const PlConfig *c) { return c->fp32 ? 4 : 2; }

int pl_ranks(const PlConfig *c) {
  return (c->tp > 1 ? c->tp : 1) * (c->pp > 1 ? c->pp : 1) * (c->dp > 1 ? c->dp : 1);
}

/* ------------------------------------------------------------ topology */

/* A group of n members whose ranks are `stride` apart: inside one node when
 * it spans at most a node, else limited by the network adapters its
 * members on one node share (each GPU of a DGX node has its own). */
static PlLink group_link(const PlHw *hw, int64_t stride, int64_t n) {
  int64_t g = hw->gpus_per_node > 0 ? hw->gpus_per_node : 1;
  if (n <= 1 || stride * (n - 1) < g)
    return (PlLink){hw->intra_bw * hw->comm_eff, hw->intra_lat, hw->kernel_s};
  int64_t per_node = stride >= g ? 1 : g / stride;
  if (per_node > n) per_node = n;
  double nic = hw->inter_bw / (double)g * (double)per_node;
  double bw = nic < hw->intra_bw ? nic : hw->intra_bw;
  return (PlLink){bw * hw->comm_eff, hw->inter_lat, hw->kernel_s};
}

PlLink pl_tp_link(const PlHw *hw, const PlConfig *c) { return group_link(hw, 1, c->tp); }
PlLink pl_dp_link(const PlHw *hw, const PlConfig *c) { return group_link(hw, c->tp, c->dp); }

int pl_ep(const PlConfig *c) { return c->ep > 1 ? c->ep : 1; }
int pl_edp(const PlConfig *c) {
  int d = c->dp > 1 ? c->dp : 1;
  return d / pl_ep(c) > 1 ? d / pl_ep(c) : 1;
}
PlLink pl_edp_link(const PlHw *hw, const PlConfig *c) {
  return group_link(hw, (int64_t)(c->tp > 1 ? c->tp : 1) * pl_ep(c), pl_edp(c));
}

/* The n ranks of an expert group are t apart: those on one node reach
 * each other over NVLink, and the parts for the other nodes leave through
 * the rank's own adapter (a DGX GPU has one), both at once. */
double pl_all_to_all_s(const PlHw *hw, int t, int n, double bytes) {
  if (n <= 1) return 0;
  int64_t g = hw->gpus_per_node > 0 ? hw->gpus_per_node : 1, stride = t > 1 ? t : 1;
  int64_t per_node = stride >= g ? 1 : g / stride;
  if (per_node > n) per_node = n;
  double part = bytes / n;
  double intra = part * (double)(per_node - 1) / (hw->intra_bw * hw->comm_eff);
  double inter = part * (double)(n - per_node) / (hw->inter_bw / (double)g * hw->comm_eff);
  return hw->kernel_s + (per_node < n ? hw->inter_lat : hw->intra_lat) + (intra > inter ? intra : inter);
}

/* Neighbouring stages are t*d ranks apart; one GPU talks to its peer. */
PlLink pl_pp_link(const PlHw *hw, const PlConfig *c) {
  int64_t g = hw->gpus_per_node > 0 ? hw->gpus_per_node : 1;
  if ((int64_t)c->tp * c->dp * c->pp <= g)
    return (PlLink){hw->intra_bw * hw->comm_eff, hw->intra_lat, hw->kernel_s};
  return (PlLink){hw->inter_bw / (double)g * hw->comm_eff, hw->inter_lat, hw->kernel_s};
}

/* ----------------------------------------------------------- collectives */

/* Each collective by its own algorithm, as NCCL runs them inside a node
 * and across nodes for the sizes here (rings): an all-reduce is one
 * kernel of 2(n-1) steps, a reduce-scatter's partial sums forwarded and
 * an all-gather's results, fused; a reduce-scatter and an all-gather are
 * each one kernel of n-1 steps moving bytes/n per member per step. The
 * sums of a ring are made as the bytes pass, at memory speed, far above
 * the link's, so they add no time. Each kernel costs at least the
 * launch (PlLink.launch): a reduce-scatter followed by an all-gather, as
 * sequence parallelism runs them, costs one launch more than the
 * all-reduce they replace. */
double pl_all_reduce_s(PlLink l, int n, double bytes) {
  if (n <= 1) return 0;
  return l.launch + 2.0 * (n - 1) * l.lat + 2.0 * (n - 1) / n * bytes / l.bw;
}

double pl_all_gather_s(PlLink l, int n, double bytes) {
  if (n <= 1) return 0;
  return l.launch + (n - 1) * l.lat + (double)(n - 1) / n * bytes / l.bw;
}

double pl_reduce_scatter_s(PlLink l, int n, double bytes) {
  if (n <= 1) return 0;
  return l.launch + (n - 1) * l.lat + (double)(n - 1) / n * bytes / l.bw;
}

/* -------------------------------------------------------------- roofline */

/* At F FLOPs a GEMM reaches gemm_eff * F / (F + gemm_half) of peak: its
 * time is (F + gemm_half) / (gemm_eff * peak), a fixed cost (tile waves,
 * launch, the ramp of a small problem) plus the rate of a large one. */
double pl_gemm_s(const PlHw *hw, double flops) {
  double t = (flops + hw->gemm_half) / (hw->gemm_eff * hw->peak_flops[PL_BF16]);
  return t > hw->kernel_s ? t : hw->kernel_s;
}

/* NVIDIA's wave quantization ("Matrix Multiplication Background User's
 * Guide", GPU performance background): cuBLAS cuts the M x N output into
 * tiles, 256 x 128 for the large half-precision products of these models
 * (the guide's A100 example), and the GPU runs one tile per SM at a
 * time, so a product of T tiles takes ceil(T / sms) waves of the time of
 * one. Of the two ways round of the tile, the better. 1 without SMs.
 * `count` products of one shape run as one grouped kernel (a rank's
 * experts) share the waves: their tiles are counted together. */
static double group_wave_efficiency(const PlHw *hw, double count, double m, double n) {
  if (hw->sms <= 0 || m <= 0 || n <= 0) return 1;
  double best = 0;
  for (int way = 0; way < 2; way++) {
    double tiles = count * ceil(m / (way ? 128 : 256)) * ceil(n / (way ? 256 : 128));
    double eff = tiles / (ceil(tiles / hw->sms) * hw->sms);
    if (eff > best) best = eff;
  }
  return best;
}

double pl_gemm_wave_efficiency(const PlHw *hw, double m, double n) {
  return group_wave_efficiency(hw, 1, m, n);
}

/* The waves' idle SMs add work at the plateau's rate (the FLOPs of whole
 * waves), not to the curve's fixed cost: dividing the whole time by the
 * efficiency counted a one-tile product's fixed cost once per SM (a
 * 64 x 64 x 64 product at 2.5 ms on the h100 preset). The cost report
 * prices its GEMMs the same way (program_cost.c). */
double pl_gemm_shape_s(const PlHw *hw, double m, double n, double k) {
  return pl_gemm_s(hw, 2 * m * n * k / pl_gemm_wave_efficiency(hw, m, n));
}

double pl_memory_s(const PlHw *hw, double bytes) {
  double t = bytes / (hw->mem_bw * hw->mem_eff);
  return t > hw->kernel_s ? t : hw->kernel_s;
}

double pl_update_s(const PlHw *hw, double bytes) {
  if (hw->update_bw <= 0) return pl_memory_s(hw, bytes);
  double t = bytes / hw->update_bw;
  return t > hw->kernel_s ? t : hw->kernel_s;
}

double pl_cpu_attention_flops(double full, double s, bool causal, bool backward) {
  double blocks = ceil(s / 32), frac = causal ? (blocks + 1) / (2 * blocks) : 1;
  return full * frac * (backward ? 2.5 : 1);
}

static double numel(const IrValue *v) { return (double)ir_type_numel(&v->type); }

/* Bytes an op reads and writes, `elem` bytes per element. */
static double io_bytes(const IrNode *n, double elem) {
  double e = 0;
  for (int i = 0; i < n->nin; i++) e += numel(n->in[i]);
  for (int i = 0; i < n->nout; i++) e += numel(n->out[i]);
  return e * elem;
}

/* Matrix FLOPs of a node. The forward ops have a rule in ops.def; the
 * backward GEMMs and attention's backward are counted here, as the
 * products they run: dx = dy w^T, dw = x^T dy (each the forward's
 * FLOPs), attention's backward twice its forward. */
static double node_flops(const IrNode *n) {
  switch (n->op) {
  case IR_OP_LINEAR_DX: case IR_OP_GROUPED_LINEAR_DX: {
    const IrType *dy = &n->in[0]->type;
    return 2.0 * numel(n->out[0]) * (double)dy->shape[dy->rank - 1];
  }
  case IR_OP_LINEAR_DW: {
    const IrType *x = &n->in[0]->type;
    return 2.0 * numel(n->out[0]) * numel(n->in[0]) / (double)x->shape[x->rank - 1];
  }
  case IR_OP_GROUPED_LINEAR_DW: {
    /* dw[E, out, in]: each expert's x^T dy over its own rows only. */
    const IrType *x = &n->in[0]->type, *w = &n->out[0]->type;
    return 2.0 * numel(n->out[0]) / (double)w->shape[0] * numel(n->in[0]) /
           (double)x->shape[x->rank - 1];
  }
  case IR_OP_ATTENTION_GRAD: {
    const IrType *q = &n->in[0]->type;
    return 8.0 * numel(n->in[0]) * (double)q->shape[q->rank - 2];
  }
  default:
    return ir_op_info(n->op)->flops(n);
  }
}

/* The time of one node; *comm is set for the collectives. `bias_pass`:
 * the target adds a linear layer's bias in a pass of its own after the
 * product (the CPU target's k_add_bias), reading and writing the output;
 * the GPU targets fold it into the product or the next elementwise op. */
static double node_time(const IrNode *n, const PlHw *hw, PlLink tp, double flops, double elem,
                        bool bias_pass, bool *comm) {
  *comm = false;
  switch (n->op) {
  case IR_OP_RESHAPE: case IR_OP_TP_COPY: case IR_OP_TP_SLICE: case IR_OP_ARANGE:
  case IR_OP_PP_BOUNDARY:
    return 0; /* views: no kernel */
  case IR_OP_ALL_REDUCE: case IR_OP_ALL_GATHER: case IR_OP_REDUCE_SCATTER: {
    *comm = true;
    int size = (int)ir_attr_int(n, "size");
    if (n->op == IR_OP_ALL_REDUCE) return pl_all_reduce_s(tp, size, numel(n->in[0]) * elem);
    if (n->op == IR_OP_ALL_GATHER) return pl_all_gather_s(tp, size, numel(n->out[0]) * elem);
    return pl_reduce_scatter_s(tp, size, numel(n->in[0]) * elem);
  }
  case IR_OP_ATTENTION: case IR_OP_ATTENTION_GRAD: {
    /* A CPU's efficiency is measured at the FLOPs its kernels run (the
     * model's count is that of a full square, the backward twice the
     * forward); a GPU preset's is calibrated at the model's count. */
    if (hw->cores > 0) {
      const IrType *q = &n->in[0]->type;
      bool grad = n->op == IR_OP_ATTENTION_GRAD;
      flops = pl_cpu_attention_flops(grad ? flops / 2 : flops, (double)q->shape[q->rank - 2],
                                     ir_attr_int(n, "causal") != 0, grad);
    }
    double t = flops / (hw->attn_eff * hw->peak_flops[PL_BF16]), m = pl_memory_s(hw, io_bytes(n, elem));
    return t > m ? t : m;
  }
  default:
    break;
  }
  double m = pl_memory_s(hw, io_bytes(n, elem));
  if (!(ir_op_info(n->op)->flags & IR_OPF_GEMM)) return m;
  /* The product's shape: its output [M, N] (batches folded into M) and
   * the reduction K the FLOPs imply. */
  const IrType *y = &n->out[0]->type;
  double cols = y->rank > 0 ? (double)y->shape[y->rank - 1] : 1, out = numel(n->out[0]);
  double g = out > 0 && flops > 0 ? pl_gemm_shape_s(hw, out / cols, cols, flops / (2 * out))
                                  : pl_gemm_s(hw, flops);
  if (bias_pass && n->op == IR_OP_LINEAR && n->nin > 2) g += pl_memory_s(hw, 2 * out * elem);
  return g > m ? g : m;
}

/* ------------------------------------------------------- routed layers */

/* The regions of a model, in IrNode.stage while it is costed. */
enum { R_PRE, R_LAYER, R_POST, NREGIONS };

static bool grouped(const IrNode *n) {
  return n->op == IR_OP_GROUPED_LINEAR || n->op == IR_OP_GROUPED_LINEAR_DX ||
         n->op == IR_OP_GROUPED_LINEAR_DW;
}

/* A grouped product on one of `ep` expert ranks, whose busiest rank has
 * `load` times the mean rows: one grouped kernel (cuBLASLt's grouped
 * GEMM, Megatron-LM's --moe-grouped-gemm) of E/ep products, one per
 * expert the rank holds, each over load * N * ep / E of the N rows a rank
 * dispatches (every rank of the group sends each expert its share): the
 * products' tiles share the waves, and the curve's fixed cost is paid
 * once. The weight-shaped tensors [E, ...] are the rank's E/ep experts;
 * the rows scale by load. */
static double grouped_time(const IrNode *n, const PlHw *hw, double flops, double elem, int ep,
                           double load) {
  const IrType *rows = &n->in[0]->type;
  const IrValue *w = n->op == IR_OP_GROUPED_LINEAR_DW ? n->out[0] : n->in[1];
  double E = (double)w->type.shape[0], local = E / ep, N = (double)rows->shape[0];
  double per = load * N * ep / E, m, cols;
  if (n->op == IR_OP_GROUPED_LINEAR_DW) {
    m = (double)n->out[0]->type.shape[1], cols = (double)n->out[0]->type.shape[2];
  } else {
    const IrType *y = &n->out[0]->type;
    m = per, cols = (double)y->shape[y->rank - 1];
  }
  /* This rank's FLOPs: its experts' share of the rows, at the load. */
  double mine = flops * load, g = 0;
  if (m > 0 && cols > 0)
    g = pl_gemm_s(hw, mine / group_wave_efficiency(hw, local, m, cols));
  double bytes = 0;
  for (int i = 0; i < n->nin + n->nout; i++) {
    const IrValue *v = i < n->nin ? n->in[i] : n->out[i - n->nin];
    if (v->type.dtype == IR_I32) continue; /* counts */
    bytes += v->type.rank == 3 ? numel(v) / ep : load * numel(v);
  }
  double t = g > hw->kernel_s ? g : hw->kernel_s, mem = pl_memory_s(hw, bytes * elem);
  return t > mem ? t : mem;
}

/* v, or what it is a copy or view of (tensor parallelism's entry copy). */
static const IrValue *through_views(const IrValue *v) {
  while (v->def && (v->def->op == IR_OP_TP_COPY || v->def->op == IR_OP_RESHAPE)) v = v->def->in[0];
  return v;
}

/* Whether v feeds a router (the router's own logits, not an expert). */
static bool routes(const IrGraph *g, const IrValue *v) {
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if ((n->op == IR_OP_ROUTER || n->op == IR_OP_ROUTER_LOAD || n->op == IR_OP_ROUTER_Z_LOSS) &&
        through_views(n->in[0]) == v)
      return true;
  }
  return false;
}

/* The routed layers of g (its moe_dispatch nodes, forward): what they
 * are, the rows they dispatch, and the load the busiest expert rank
 * carries under c: with one expert rank every rank runs every expert and
 * the total is the mean; across ranks the imbalance, capped by a capacity
 * factor (which drops the rows past it); below 1 a capacity factor
 * drops rows even when balanced. */
static void find_routed(IrGraph *g, const PlConfig *c, PlMoe *moe) {
  int64_t n_rows = 0;
  const IrValue *x = NULL; /* what the first routed layer dispatches */
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->op != IR_OP_MOE_DISPATCH || n->phase != IR_PHASE_FORWARD) continue;
    if (n->stage == R_LAYER) moe->routed++;
    if (moe->experts) continue;
    const IrType *k = &n->in[1]->type;
    moe->experts = (int)ir_attr_int(n, "experts");
    moe->top_k = k->rank > 0 ? (int)k->shape[k->rank - 1] : 1;
    moe->capacity = ir_attr_float(n, "capacity");
    moe->rows = ir_type_numel(&n->out[0]->type);
    n_rows = n->out[0]->type.shape[0];
    x = through_views(n->in[0]);
  }
  if (!moe->experts) return;
  double cap = moe->capacity > 0 ? moe->capacity : HUGE_VAL;
  double imbalance = c->moe_imbalance > 0 ? c->moe_imbalance : PL_MOE_IMBALANCE;
  moe->load = pl_ep(c) > 1 ? fmin(imbalance, cap) : fmin(1, cap);
  /* What a layer's forward keeps on the dispatched rows [T*k, ...]. */
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    const IrType *y = n->nout ? &n->out[0]->type : NULL;
    if (n->op == IR_OP_GROUPED_LINEAR && !moe->expert_ffn) moe->expert_ffn = y->shape[y->rank - 1];
    /* Shared experts: a product of the dispatched tokens themselves,
     * other than the router's logits. */
    if (n->op == IR_OP_LINEAR && n->phase == IR_PHASE_FORWARD && !moe->shared_ffn &&
        through_views(n->in[0]) == x && !routes(g, n->out[0]))
      moe->shared_ffn = y->shape[y->rank - 1];
    if (n->phase == IR_PHASE_FORWARD && n->stage == R_LAYER && y && y->rank == 2 &&
        y->shape[0] == n_rows && y->dtype != IR_I32)
      moe->row_elems += ir_type_numel(y);
  }
}

/* ------------------------------------------------------- the model's costs */

/* What the rank programs spend besides the ops' work (PlHw.op_s, the
 * start and end of one parallel region with the rank's threads): the CPU
 * target runs a stretch of consecutive ops that each compute rows from the
 * same rows (elementwise loops, and ops.def's `rows` column: linear, the
 * norms, attention on whole sequences) as one parallel loop over chunks of
 * rows (passes/memplan_rows.c), with the weight and bias gradients of the
 * stretch summed by the team after the chunks (each a barrier); every
 * other kernel is a parallel region of its own. So a wake-up of the team
 * per stretch, per reduction carried by one and per op outside them,
 * counted per region of the model and phase in program order (views run
 * nothing; a collective ends a stretch). 0 where op_s is (accelerators). */
static void add_wakeups(IrGraph *g, const double *times, const bool *comm, const PlHw *hw,
                        PlCost *cost) {
  if (hw->op_s <= 0) return;
  int open = -1; /* the region * 2 + phase whose stretch is open, -1 none */
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (times[i] <= 0) continue;
    int r = n->stage < NREGIONS ? n->stage : R_POST, key = r * 2 + (n->phase != IR_PHASE_FORWARD);
    PlCost *c = &cost[r];
    double before = n->phase == IR_PHASE_FORWARD ? c->fwd : c->bwd;
    double *t = n->phase == IR_PHASE_FORWARD ? &c->fwd : &c->bwd;
    IrRowRule rule = ir_op_info(n->op)->rows;
    bool rows = (ir_op_info(n->op)->flags & IR_OPF_ELEMENTWISE) ||
                (rule != IR_ROWS_NONE && rule != IR_ROWS_SUM && rule != IR_ROWS_SUM_TO);
    bool sunk = rule == IR_ROWS_SUM || rule == IR_ROWS_SUM_TO;
    if (comm[i]) {
      open = -1;
    } else if (rows) {
      if (open != key) *t += hw->op_s, open = key;
    } else if (sunk && open == key) {
      *t += hw->op_s;
    } else {
      *t += hw->op_s, open = -1;
    }
    if (n->phase != IR_PHASE_FORWARD && n->wgrad) c->bwd_w += *t - before;
  }
}

/* Rolls every top-level layer stack down to one iteration, returning the
 * iterations they had, and reads the activation shape [b, s, h] and the
 * heads of the first. False when the graph has no layer stack. */
static bool one_layer(IrGraph *g, PlModel *m) {
  m->layers = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->op != IR_OP_REPEAT) continue;
    IrAttr *count = ir_node_attr(n, "count");
    if (m->layers == 0 && n->body->args.len > 0) {
      const IrType *x = &((IrValue *)n->body->args.items[0])->type;
      if (x->rank == 3) m->b = x->shape[0], m->s = x->shape[1], m->h = x->shape[2];
      for (int j = 0; j < n->body->nodes.len; j++) {
        IrNode *a = n->body->nodes.items[j];
        if (a->op == IR_OP_ATTENTION && !m->heads) m->heads = ir_attr_int(a, "heads");
      }
    }
    m->layers += (int)ir_attr_int(n, "count");
    count->expr = ir_expr_int(1, n->loc);
  }
  if (m->layers == 0 || m->h == 0) {
    ir_error(ir_cmdline, "simulate: the model has no layer stack (a repeat over [b, s, h]) to "
             "cost and multiply");
    return false;
  }
  return true;
}

/* Marks each forward node with its region in `stage` (before the layer,
 * the layer, after it), which autodiff copies onto the backward nodes. */
static void mark_regions(IrGraph *g) {
  bool after = false;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->layer >= 0) after = true;
    n->stage = n->layer >= 0 ? R_LAYER : after ? R_POST : R_PRE;
  }
}

/* Which regions read each parameter, as bits. A routed layer's experts
 * (the weights of its grouped products) are E/ep of them on a rank. */
static void count_params(IrGraph *g, int ep, PlCost *cost, int64_t *tied) {
  *tied = 0;
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i];
    unsigned mask = 0;
    bool expert = false;
    for (int j = 0; j < g->nodes.len; j++) {
      IrNode *n = g->nodes.items[j];
      for (int k = 0; k < n->nin && n->phase == IR_PHASE_FORWARD; k++)
        if (n->in[k] == p) mask |= 1u << n->stage, expert |= n->op == IR_OP_GROUPED_LINEAR;
    }
    if (!mask) mask = 1u << R_PRE;
    int64_t held = ir_type_numel(&p->type) / (expert ? ep : 1);
    for (int r = 0; r < NREGIONS; r++)
      if (mask & (1u << r)) cost[r].params += held, cost[r].expert_params += expert ? held : 0;
    if ((mask & (1u << R_PRE)) && (mask & (1u << R_POST))) *tied += ir_type_numel(&p->type);
  }
}

static bool body_divides(const IrGraph *body, int t) {
  for (int i = 0; i < body->nodes.len; i++) {
    const IrNode *n = body->nodes.items[i];
    if (n->op == IR_OP_REPEAT && !body_divides(n->body, t)) return false;
    if (n->op == IR_OP_ATTENTION) {
      if (ir_attr_int(n, "heads") % t || ir_attr_int(n, "kv_heads") % t) return false;
    }
    int in, out;
    const IrValue *w = pass_gemm_weight(n, &in, &out);
    if (w && (w->type.shape[0] % t || w->type.shape[1] % t)) return false;
  }
  return true;
}

bool pl_tp_divides(const IrGraph *g, int t) {
  if (t <= 1) return true;
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (n->op == IR_OP_REPEAT && !body_divides(n->body, t)) return false;
  }
  return true;
}

/* The backward collectives a weight-gradient GEMM can hide (PlCost.
 * bwd_hidden): the all-reduce (or, with sequence parallelism, the
 * reduce-scatter) of an input gradient dx = dy w^T runs while dw = x^T dy,
 * which reads the same dy and not dx, computes; each GEMM hides at most
 * its own time. times[i] is node i's. */
static void hide_behind_wgrad(IrGraph *g, const double *times, PlCost *cost) {
  int n = g->nodes.len;
  double *left = malloc(sizeof(double) * ((size_t)n + 1));
  for (int i = 0; i < n; i++) left[i] = times[i];
  for (int i = 0; i < n; i++) {
    IrNode *c = g->nodes.items[i];
    if (c->phase == IR_PHASE_FORWARD ||
        (c->op != IR_OP_ALL_REDUCE && c->op != IR_OP_REDUCE_SCATTER))
      continue;
    const IrNode *dx = c->in[0]->def;
    if (!dx || dx->op != IR_OP_LINEAR_DX) continue;
    double comm = times[i];
    for (int j = 0; j < n && comm > 0; j++) {
      IrNode *w = g->nodes.items[j];
      if (w->op != IR_OP_LINEAR_DW || w->nin < 2 || w->in[1] != dx->in[0] || left[j] <= 0)
        continue;
      double h = comm < left[j] ? comm : left[j];
      left[j] -= h, comm -= h;
      cost[c->stage < NREGIONS ? c->stage : R_POST].bwd_hidden += h;
    }
  }
  free(left);
}

bool pl_model_build(IrGraph *g, const PlConfig *c, const PlHw *node, PlModel *out) {
  *out = (PlModel){0};
  PlHw share = pl_hw_rank_share(node, pl_ranks(c));
  const PlHw *hw = &share;
  if (!one_layer(g, out)) return false;
  PassOptions opt = {.tp = c->tp, .pp = 1, .dp = 1, .vocab_multiple = 128,
                     .sequence_parallel = c->sequence_parallel};
  PassManagerFlags flags = {.print_stream = stdout};
  if (!pass_run_pipeline(&g, "tp-annotate,vocab-pad,tp-partition,tp-fuse,unroll", &opt, &flags))
    return false;
  mark_regions(g);
  if (!pass_run_pipeline(&g, "autodiff,tp-fuse", &opt, &flags)) return false;
  PlCost cost[NREGIONS] = {{0}};
  PlLink tp = pl_tp_link(hw, c);
  find_routed(g, c, &out->moe);
  PlMoe *moe = &out->moe;
  double elem = pl_elem_bytes(c);
  /* Each routed layer's tokens go to their experts' ranks and back, an
   * all-to-all each way in the forward and the two reverse ones in the
   * backward; the busiest rank receives and returns load times the mean. */
  if (moe->experts && pl_ep(c) > 1) {
    moe->a2a_s = pl_all_to_all_s(hw, c->tp, pl_ep(c), moe->load * (double)moe->rows * elem);
    moe->a2a_bytes = rt_comm_ring_bytes(RT_COMM_ALLTOALL, pl_ep(c),
                                        (int64_t)((double)moe->rows / pl_ep(c) * elem));
  }
  double *times = calloc((size_t)g->nodes.len + 1, sizeof(double));
  bool *comms = calloc((size_t)g->nodes.len + 1, sizeof(bool));
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    double flops = node_flops(n);
    bool comm;
    double t = times[i] = grouped(n) ? (comm = false, grouped_time(n, hw, flops, elem, pl_ep(c),
                                                                     moe->load))
                                      : node_time(n, hw, tp, flops, elem, c->fp32, &comm);
    comms[i] = comm;
    PlCost *r = &cost[n->stage < NREGIONS ? n->stage : R_POST];
    if (n->op == IR_OP_MOE_DISPATCH && n->phase == IR_PHASE_FORWARD)
      r->fwd += 2 * moe->a2a_s, r->fwd_comm += 2 * moe->a2a_s, r->bwd += 2 * moe->a2a_s,
      r->bwd_comm += 2 * moe->a2a_s;
    int64_t outs = 0;
    for (int k = 0; k < n->nout; k++) outs += ir_type_numel(&n->out[k]->type);
    if (!comm && t > 0 && outs > r->temp) r->temp = outs;
    if (n->phase == IR_PHASE_FORWARD) {
      r->fwd += t, r->fwd_flops += flops;
      if (n->op == IR_OP_ATTENTION) r->attn_fwd += t, r->attn_flops += flops;
      if (comm) r->fwd_comm += t;
    } else {
      r->bwd += t, r->bwd_flops += flops;
      if (comm) r->bwd_comm += t;
      if (n->wgrad) r->bwd_w += t;
    }
  }
  hide_behind_wgrad(g, times, cost);
  add_wakeups(g, times, comms, hw, cost);
  free(times), free(comms);
  count_params(g, pl_ep(c), cost, &out->tied);
  out->pre = cost[R_PRE], out->layer = cost[R_LAYER], out->post = cost[R_POST];
  int t = c->tp > 1 ? c->tp : 1;
  out->msg_elems = out->b * out->s * out->h / (c->sequence_parallel ? t : 1);
  out->flops_per_mb =
      (out->pre.fwd_flops + out->layers * out->layer.fwd_flops + out->post.fwd_flops) * t;
  return true;
}

/* Korthikanti et al. (REFERENCE.md): s b h (34 + 5 a s / h) without
 * parallelism; with t-way tensor parallelism the parts inside the
 * parallel regions divide by t, and sequence parallelism divides the rest.
 * Selective recomputation drops the attention core's 5 a s / h; full
 * recomputation keeps only the layer's input, 2 s b h (/t with SP). */
double pl_layer_activation_bytes(const PlModel *m, int tp, bool sequence_parallel,
                                 PlRecompute recompute) {
  double sbh = (double)m->s * (double)m->b * (double)m->h, t = tp > 1 ? tp : 1;
  double as_h = m->h ? 5.0 * (double)m->heads * (double)m->s / (double)m->h : 0;
  if (recompute == PL_RECOMPUTE_SELECTIVE) as_h = 0;
  if (recompute == PL_RECOMPUTE_FULL) return 2 * sbh / (sequence_parallel ? t : 1);
  /* A routed layer keeps its dispatched rows and its experts' outputs
   * instead of the dense MLP's two 4h intermediates (16 sbh / t), the
   * busiest expert rank load times the mean (PlMoe.row_elems, 16-bit). */
  double routed = 0;
  if (m->moe.routed) routed = 2 * m->moe.load * (double)m->moe.row_elems - 16 * sbh / t;
  if (sequence_parallel) return sbh * (34 + as_h) / t + routed;
  return sbh * (10 + 24 / t + as_h / t) + routed;
}
