/* Pipeline parallelism on the compiler side: `pp-partition` places the
 * unrolled forward graph on p stages x v chunks and inserts the messages
 * between them and copies a parameter that two stages share (the tied
 * GPT-2 embedding); `--report pp` prints the placement.
 *
 * Placement (Megatron-LM): chunk c of stage r is virtual stage c*p + r and
 * holds a contiguous run of layers; virtual stage 0 also holds everything
 * before the first layer (the embedding), the last one everything after
 * the last layer (final norm, output layer, loss), and a node between two
 * layers goes with the layer before it. Layers are the iterations of the
 * top-level repeats that `unroll` recorded (IrNode.layer), so the pass runs
 * after unroll in the same pipeline and before autodiff.
 *
 * How many layers each virtual stage gets: --pp-layout N0,N1,... (one
 * count per virtual stage, in virtual-stage order, summing to the layer
 * count; only the first and the last may be 0, since they still hold the
 * embedding and the head); else l / (p*v) each when p*v divides l; else
 * the contiguous split that minimises the largest stage cost, counting
 * each node's forward FLOPs from its shape (GEMMs 2mnk, attention 4bs^2h,
 * the rest one per output element), the embedding and the output layer
 * included, with at least one layer per virtual stage.
 *
 * Messages: when p > 1, a node result read on a later virtual stage
 * travels through `pp_boundary(x){src, dst}` nodes, one per boundary it
 * crosses (a residual that skips a stage is relayed by it), placed first
 * on the receiving stage. Model inputs are read by every stage and need
 * none. With p = 1 the chunks share one rank's memory and nothing is sent.
 * autodiff turns each pp_boundary into the gradient's message back.
 *
 * Scatter/gather (Narayanan et al. 2021, section 4.1): with t > 1 and no
 * sequence parallelism the activation between stages is replicated over
 * the tensor group, so the t ranks of a stage would send the same bytes t
 * times. Instead each sends its 1/t slice, tp_slice(x){dim} at the end of
 * the sending stage, and every stage that reads x all-gathers the slices
 * after it receives them (a relaying stage passes the slice on untouched).
 * dim is the first dim that t divides, the one with the least striding.
 * The adjoints give the gradient's way back for free: all_gather's is
 * tp_slice, so the receiver sends its slice of the (replicated) gradient,
 * and tp_slice's is all_gather, so the sender gathers it. Only replicated
 * float values travel this way; a split one (sequence parallelism) is
 * already 1/t, and --no-scatter-gather sends everything whole.
 *
 * Shared parameters: with p > 1 a parameter read on the first and on the
 * last virtual stage gets a second parameter for the last stage, NAME.stageK
 * tied(@NAME), read by that stage's nodes. The rank programs sum the two
 * copies' gradients in the runtime, once per step (runtime/step/exec.c
 * sum_tied), which is the one place the sum is made: the IR holds no
 * all-reduce of them, so that it shows only what the programs run. Under
 * zb-v's V both virtual stages are on the first stage: the copy is made
 * all the same (each chunk keeps its own weights and gradient slots), and
 * that stage sums its two copies itself. Any other sharing across stages
 * is an error. */
#include <stdlib.h>
#include <string.h>

#include "../abi/schedule.h"
#include "passes.h"


typedef struct Part {
  IrGraph *g;
  int p, v, nv;     /* stages, chunks, virtual stages */
  int layers;       /* l */
  int t;            /* tensor ranks that slice a replicated message (1: send whole) */
  double *cost;     /* [l + 2]: pre-layer nodes, each layer, post-layer nodes */
  int *count;       /* [nv]: layers per virtual stage */
  const char *how;  /* "even", "balanced by cost", "--pp-layout" */
} Part;

/* ---------------------------------------------------------------- cost */

/* Forward FLOPs of one node from its shapes: the GEMMs and attention
 * dominate (their ops.def FLOP rules); everything else costs one per output
 * element. */
static double node_flops(const IrNode *n) {
  if (n->nout < 1 || !ir_type_known(&n->out[0]->type)) return 0;
  double flops = ir_op_info(n->op)->flops(n), sum = 0;
  if (flops > 0) return flops;
  for (int i = 0; i < n->nout; i++)
    if (ir_type_known(&n->out[i]->type)) sum += (double)ir_type_numel(&n->out[i]->type);
  return sum;
}

/* The cost of the pre-layer nodes, of each layer and of the post-layer
 * nodes; a node between layers counts with the layer before it. */
static void measure(Part *P) {
  P->cost = ir_alloc(sizeof(double) * (size_t)(P->layers + 2));
  int last = -1;
  for (int i = 0; i < P->g->nodes.len; i++) {
    const IrNode *n = P->g->nodes.items[i];
    if (n->layer >= 0) last = n->layer;
    bool after = n->layer < 0 && last == P->layers - 1;
    P->cost[after ? P->layers + 1 : last + 1] += node_flops(n);
  }
}

/* ------------------------------------------------------------- layouts */

/* A comma-separated list of divisors of l, for the error messages. */
static const char *divisors(int l) {
  const char *s = "";
  for (int d = 1; d <= l; d++)
    if (l % d == 0) s = ir_fmt("%s%s%d", s, *s ? ", " : "", d);
  return s;
}

/* --pp-layout N0,N1,...: one count per virtual stage. Reports every
 * problem and returns false. */
static bool parse_layout(Part *P, const char *text) {
  int n = 0, sum = 0;
  bool ok = true;
  const char *s = text;
  while (ok) {
    char *end;
    long c = strtol(s, &end, 10);
    if (end == s || c < 0 || c > 1 << 20 || (*end && *end != ',')) {
      ir_error(ir_cmdline, "--pp-layout '%s': expected layer counts separated by commas, one per "
               "virtual stage (e.g. %s)", text,
               P->nv == 2 ? "3,2" : P->nv == 4 ? "2,3,3,2" : "4,4");
      return false;
    }
    if (n < P->nv) P->count[n] = (int)c;
    n++;
    sum += (int)c;
    if (!*end) break;
    s = end + 1;
  }
  if (n != P->nv) {
    ir_error(ir_cmdline, "--pp-layout '%s' has %d count%s, but p x v = %d x %d = %d virtual stages "
             "need one each", text, n, n == 1 ? "" : "s", P->p, P->v, P->nv);
    return false;
  }
  if (sum != P->layers) {
    ir_error(ir_cmdline, "--pp-layout '%s' places %d layers, but the model has %d", text, sum,
             P->layers);
    ok = false;
  }
  for (int k = 1; k < P->nv - 1; k++)
    if (P->count[k] == 0) {
      ir_error(ir_cmdline, "--pp-layout '%s': virtual stage %d has no layer (only the first and the "
               "last, which hold the embedding and the output layer, may have none)", text, k);
      ok = false;
    }
  return ok;
}

/* The contiguous split of the layers into nv runs of at least one layer
 * that minimises the largest stage cost (pre-layer cost on the first,
 * post-layer cost on the last): best[k][i] is the least maximum for the
 * first i layers on k + 1 stages. O(nv * l^2), ties to the longest run
 * for the later stage. */
static void balance(Part *P) {
  int l = P->layers, nv = P->nv;
  double *prefix = ir_alloc(sizeof(double) * (size_t)(l + 1));
  for (int i = 0; i < l; i++) prefix[i + 1] = prefix[i] + P->cost[i + 1];
  double *best = ir_alloc(sizeof(double) * (size_t)nv * (size_t)(l + 1));
  int *from = ir_alloc(sizeof(int) * (size_t)nv * (size_t)(l + 1));
#define AT(a, k, i) (a)[(size_t)(k) * (size_t)(l + 1) + (size_t)(i)]
  for (int k = 0; k < nv; k++)
    for (int i = k + 1; i <= l - (nv - 1 - k); i++) {
      double extra = (k == nv - 1 && i == l) ? P->cost[l + 1] : 0;
      if (k == 0) {
        AT(best, 0, i) = P->cost[0] + prefix[i] + extra;
        continue;
      }
      AT(best, k, i) = -1;
      for (int j = k; j < i; j++) {
        double here = prefix[i] - prefix[j] + extra;
        double m = AT(best, k - 1, j) > here ? AT(best, k - 1, j) : here;
        if (AT(best, k, i) < 0 || m <= AT(best, k, i)) {
          AT(best, k, i) = m;
          AT(from, k, i) = j;
        }
      }
    }
  for (int k = nv - 1, i = l; k >= 0; k--) {
    int j = k ? AT(from, k, i) : 0;
    P->count[k] = i - j;
    i = j;
  }
#undef AT
}

/* How many layers each virtual stage holds; false after an error that
 * says what would work. */
static bool choose_layout(Part *P, const char *layout) {
  P->count = ir_alloc(sizeof(int) * (size_t)P->nv);
  if (layout) {
    P->how = "--pp-layout";
    return parse_layout(P, layout);
  }
  if (P->layers < P->nv) {
    const char *also = "";
    if (P->layers >= P->nv - 2) {
      /* The first and the last virtual stage left without layers. */
      also = "; or --pp-layout with no layer on the first and last virtual stage, e.g. "
             "--pp-layout ";
      for (int k = 0; k < P->nv; k++) {
        int c = k == 0 || k == P->nv - 1 ? 0 : k == 1 ? P->layers - (P->nv - 3) : 1;
        if (P->nv == 2) c = k == 0 ? P->layers : 0;
        also = ir_fmt("%s%s%d", also, k ? "," : "", c);
      }
    }
    ir_error(ir_cmdline, "pipeline partition: the model has %d layer%s, fewer than the p x v = %d x "
             "%d = %d virtual stages, each of which needs one; use p x v <= %d (p x v one of "
             "%s splits the layers evenly)%s", P->layers, P->layers == 1 ? "" : "s", P->p, P->v,
             P->nv, P->layers, divisors(P->layers), also);
    return false;
  }
  if (P->layers % P->nv == 0) {
    P->how = "even";
    for (int k = 0; k < P->nv; k++) P->count[k] = P->layers / P->nv;
    return true;
  }
  P->how = "balanced by cost";
  balance(P);
  return true;
}

/* ----------------------------------------------------------- placement */

/* Sets every forward node's virtual stage from the layout. */
static void place(Part *P) {
  int *stage_of = ir_alloc(sizeof(int) * (size_t)(P->layers + 1));
  for (int k = 0, at = 0; k < P->nv; k++)
    for (int c = 0; c < P->count[k]; c++) stage_of[at++] = k;
  int cur = 0, last = -1;
  for (int i = 0; i < P->g->nodes.len; i++) {
    IrNode *n = P->g->nodes.items[i];
    if (n->layer >= 0) {
      last = n->layer;
      cur = stage_of[n->layer];
    } else if (last == P->layers - 1) {
      cur = P->nv - 1;
    }
    n->stage = cur;
  }
}

/* Gives the last virtual stage its own copy of every parameter that the
 * first one reads too (p > 1), on whichever stage the placement puts it.
 * A parameter shared otherwise cannot be kept in step: an error. */
static bool tie_params(Part *P) {
  IrGraph *g = P->g;
  int nparams = g->params.len;
  bool ok = true;
  for (int i = 0; i < nparams; i++) {
    IrValue *w = g->params.items[i], *copy = NULL;
    int first = -1, other = -1;
    for (int j = 0; j < g->nodes.len; j++) {
      IrNode *n = g->nodes.items[j];
      for (int k = 0; k < n->nin; k++) {
        if (n->in[k] != w) continue;
        if (first < 0) first = n->stage;
        if (n->stage == first) continue;
        if (first != 0 || n->stage != P->nv - 1) {
          if (other != n->stage)
            ir_error(w->loc, "pipeline partition: @%s is read on virtual stages %d and %d; only "
                     "the first and the last virtual stage may share a parameter (the tied "
                     "embedding)", w->name, first, n->stage);
          other = n->stage;
          ok = false;
          continue;
        }
        if (!copy) {
          const char *name = ir_fmt("%s.stage%d", w->name, P->nv - 1);
          if (ir_find_param(g, name)) die("pp-partition: a parameter @%s exists already", name);
          copy = ir_add_param(g, name, w->type, w->init, w->loc);
          copy->shard = w->shard;
          copy->pad_dim = w->pad_dim;
          copy->unpadded = w->unpadded;
          copy->tied = w;
        }
        n->in[k] = copy;
      }
    }
  }
  return ok;
}

/* The value of v as stage k sees it: per value, its copy on each stage. */
typedef struct Relay {
  IrValue **at;  /* [nv]: the message as stage k holds it (the slice, with scatter/gather) */
  IrValue **use; /* [nv]: what stage k's nodes read: at[k], or the all-gather of it */
  int reach;     /* the last stage that reads it */
  int dim;       /* scatter/gather: the dim the message is cut along; -1: sent whole */
} Relay;

/* A tensor-parallel node of stage s on the tensor axis (t ranks), typed
 * by its shape rule. */
static IrValue *sg_node(Part *P, IrOp op, IrValue *x, int dim, int s, IrShard spec) {
  IrAttr attrs[3] = {{"dim", ir_expr_int(dim, x->loc)},
                     {"axis", ir_expr_int(IR_AXIS_TENSOR, x->loc)},
                     {"size", ir_expr_int(P->t, x->loc)}};
  IrNode *n = ir_add_node(P->g, op, &x, 1, attrs, 3, 1, x->loc);
  n->stage = s;
  if (!ir_op_info(op)->shape(n)) die("pp-partition: the shape rule of %s failed", ir_op_info(op)->name);
  n->out[0]->shard = spec;
  return n->out[0];
}

/* The dim a message x is cut along for scatter/gather, or -1 when it
 * travels whole: not a replicated float value, or no dim that t divides. */
static int sg_dim(const Part *P, const IrValue *x) {
  if (P->t <= 1 || x->shard.kind != IR_REPLICATED || !ir_dtype_is_float(x->type.dtype)) return -1;
  for (int d = 0; d < x->type.rank; d++)
    if (x->type.shape[d] % P->t == 0) return d;
  return -1;
}

/* Inserts the pp_boundary chains: the new node order is, per stage, the
 * messages it receives, then its own nodes. Returns the boundary count. */
static int insert_boundaries(Part *P) {
  IrGraph *g = P->g;
  IrPtrMap relays = {0};
  IrVec crossing = {0}; /* values in order of first crossing, for a stable order */
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    for (int k = 0; k < n->nin; k++) {
      IrValue *x = n->in[k];
      if (x->kind != IR_VAL_NODE || x->def->stage >= n->stage) continue;
      Relay *r = ir_ptrmap_get(&relays, x);
      if (!r) {
        r = ir_alloc(sizeof *r);
        r->at = ir_alloc(sizeof(IrValue *) * (size_t)P->nv);
        r->use = ir_alloc(sizeof(IrValue *) * (size_t)P->nv);
        r->at[x->def->stage] = r->use[x->def->stage] = x;
        r->dim = sg_dim(P, x);
        ir_ptrmap_put(&relays, x, r);
        ir_vec_push(&crossing, x);
      }
      if (r->reach < n->stage) r->reach = n->stage;
      r->use[n->stage] = x; /* marks a reader; the stage's own copy replaces it below */
    }
  }
  IrVec old = g->nodes;
  g->nodes = (IrVec){0};
  int next = 0, count = 0;
  for (int s = 0; s < P->nv; s++) {
    for (int c = 0; c < crossing.len; c++) {
      IrValue *x = crossing.items[c];
      Relay *r = ir_ptrmap_get(&relays, x);
      if (s <= x->def->stage || s > r->reach) continue;
      IrAttr attrs[2] = {{"src", ir_expr_int(s - 1, x->loc)}, {"dst", ir_expr_int(s, x->loc)}};
      IrNode *b = ir_add_node(g, IR_OP_PP_BOUNDARY, &r->at[s - 1], 1, attrs, 2, 1, x->loc);
      b->stage = s;
      b->out[0]->type = r->at[s - 1]->type;
      b->out[0]->shard = r->at[s - 1]->shard;
      r->at[s] = b->out[0];
      if (r->use[s])
        r->use[s] = r->dim < 0 ? r->at[s] : sg_node(P, IR_OP_ALL_GATHER, r->at[s], r->dim, s, x->shard);
      count++;
    }
    for (; next < old.len && ((IrNode *)old.items[next])->stage == s; next++) {
      IrNode *n = old.items[next];
      for (int k = 0; k < n->nin; k++) {
        Relay *r = n->in[k]->kind == IR_VAL_NODE ? ir_ptrmap_get(&relays, n->in[k]) : NULL;
        if (r && r->use[n->stage]) n->in[k] = r->use[n->stage];
      }
      ir_vec_push(&g->nodes, n);
    }
    /* The slices this stage sends, last in its chunk. */
    for (int c = 0; c < crossing.len; c++) {
      IrValue *x = crossing.items[c];
      Relay *r = ir_ptrmap_get(&relays, x);
      if (x->def->stage == s && r->dim >= 0)
        r->at[s] = sg_node(P, IR_OP_TP_SLICE, x, r->dim, s,
                           (IrShard){.kind = IR_SPLIT, .axis = IR_AXIS_TENSOR, .dim = r->dim});
    }
  }
  if (next != old.len) die("pp-partition: forward nodes out of stage order");
  ir_ptrmap_free(&relays);
  return count;
}

/* ------------------------------------------------------------ the pass */

/* What pp-partition needs: an unrolled, typed forward graph not yet
 * partitioned into stages, with layers recorded by unroll. */
static bool check_input(IrGraph *g, int *layers) {
  if (g->mesh[IR_AXIS_PIPELINE] > 1 || g->vpp > 1) {
    ir_error(ir_cmdline, "pp-partition: the graph is partitioned into pipeline stages already");
    return false;
  }
  *layers = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->op == IR_OP_REPEAT) {
      ir_error(n->loc, "pp-partition: repeat '%s' is still rolled; run the unroll pass first",
               n->label ? n->label : "?");
      return false;
    }
    if (n->phase == IR_PHASE_BACKWARD) {
      ir_error(n->loc, "pp-partition: the graph has backward nodes; partition before autodiff");
      return false;
    }
    if (n->layer + 1 > *layers) *layers = n->layer + 1;
  }
  if (*layers == 0) {
    ir_error(ir_cmdline, "pp-partition: the model has no layers to place (they are the iterations "
             "of its repeats, which unroll records: run unroll in the same pipeline)");
    return false;
  }
  return pass_check_typed(g, "pp-partition");
}

bool pass_pp_partition(IrGraph **gp, const PassOptions *opt) {
  IrGraph *g = ir_top(*gp);
  Part P = {.g = g, .p = opt && opt->pp > 1 ? opt->pp : 1, .v = opt && opt->vpp > 1 ? opt->vpp : 1};
  bool sliced = g->mesh[IR_AXIS_TENSOR] > 1 && !(opt && (opt->sequence_parallel || opt->no_scatter_gather));
  P.t = sliced ? g->mesh[IR_AXIS_TENSOR] : 1;
  P.nv = P.p * P.v;
  const char *layout = opt ? opt->pp_layout : NULL;
  if (P.nv == 1 && !layout) return true;
  if (!check_input(g, &P.layers)) return false;
  measure(&P);
  if (!choose_layout(&P, layout)) return false;
  place(&P);
  g->mesh[IR_AXIS_PIPELINE] = P.p;
  g->vpp = P.v;
  if (P.p == 1) return true;
  /* zb-v's V: the layers stay in virtual-stage order; only which stage
   * holds each virtual stage changes (abi/schedule.h rt_vstage). */
  g->pp_vshape = opt && opt->pp_vshape;
  if (!tie_params(&P)) return false;
  insert_boundaries(&P);
  return true;
}

/* ------------------------------------------------------------ --report pp */

/* The nodes that scatter/gather adds around the messages (the slice a
 * message carries, the all-gather after it), which belong to no layer. */
static IrPtrMap message_parts(IrGraph *g, int *sliced) {
  IrPtrMap parts = {0};
  *sliced = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    IrNode *from = n->nin ? n->in[0]->def : NULL;
    if (n->op == IR_OP_ALL_GATHER && from && from->op == IR_OP_PP_BOUNDARY)
      ir_ptrmap_put(&parts, n, n);
    if (n->op == IR_OP_PP_BOUNDARY && from && from->op == IR_OP_TP_SLICE &&
        n->phase == IR_PHASE_FORWARD) {
      ir_ptrmap_put(&parts, from, from);
      (*sliced)++;
    }
  }
  return parts;
}

bool pass_pp_report(FILE *out, IrGraph *g, const PassOptions *opt) {
  (void)opt;
  g = ir_top(g);
  int p = g->mesh[IR_AXIS_PIPELINE] > 1 ? g->mesh[IR_AXIS_PIPELINE] : 1;
  int v = g->vpp > 1 ? g->vpp : 1, nv = p * v;
  if (nv == 1) {
    fprintf(out, "pipeline: one stage (run pp-partition with --pp or --vpp to place layers)\n");
    return true;
  }
  bool vs = g->pp_vshape;
  fprintf(out, "pipeline: p = %d stages x v = %d chunks = %d virtual stages (chunk c of stage r "
          "is virtual stage %s)\n", p, v, nv, vs ? "c*p + r, or c*p + p-1-r for odd c (the V)" : "c*p + r");
  fprintf(out, "  %-7s %-5s %-5s %-12s %14s  %-10s %-10s %s\n", "vstage", "stage", "chunk",
          "layers", "fwd flops", "sends f+b", "recvs f+b", "holds");
  int fwd = 0, bwd = 0, sliced;
  const char **ranges = ir_alloc(sizeof(char *) * (size_t)nv);
  IrPtrMap parts = message_parts(g, &sliced);
  for (int s = 0; s < nv; s++) {
    int lo = -1, hi = -1, sends[2] = {0, 0}, recvs[2] = {0, 0};
    bool pre = false, post = false, seen_layer = false;
    double flops = 0;
    for (int i = 0; i < g->nodes.len; i++) {
      IrNode *n = g->nodes.items[i];
      bool b = n->phase == IR_PHASE_BACKWARD;
      if (n->op == IR_OP_PP_BOUNDARY) {
        if (ir_attr_int(n, "src") == s) sends[b]++;
        if (ir_attr_int(n, "dst") == s) recvs[b]++;
      }
      if (n->stage != s || b || ir_ptrmap_get(&parts, n)) continue;
      flops += node_flops(n);
      if (n->layer >= 0) {
        if (lo < 0) lo = n->layer;
        hi = n->layer;
        seen_layer = true;
      } else if (n->op != IR_OP_PP_BOUNDARY) {
        if (seen_layer) post = true; else pre = true;
      }
    }
    fwd += sends[0];
    bwd += sends[1];
    const char *layers = lo < 0 ? "-" : lo == hi ? ir_fmt("%d", lo) : ir_fmt("%d-%d", lo, hi);
    const char *holds = pre && post ? "embedding, head" : pre && s == 0 ? "embedding"
                      : (post || (pre && s == nv - 1)) ? "head" : "";
    const char *sent = ir_fmt("%d+%d", sends[0], sends[1]), *got = ir_fmt("%d+%d", recvs[0], recvs[1]);
    fprintf(out, "  %-7d %-5d %-5d %-12s %14.0f  %-10s %s%s%s\n", s, rt_vstage_stage(p, vs, s), s / p, layers,
            flops, sent, got, *holds ? ir_fmt("%*s", 11 - (int)strlen(got), "") : "", holds);
    ranges[s] = layers;
  }
  for (int r = 0; r < p; r++) {
    fprintf(out, "stage %d holds layers", r);
    for (int c = 0; c < v; c++) fprintf(out, "%s %s", c ? "," : "", ranges[rt_vstage(p, vs, r, c)]);
    fputc('\n', out);
  }
  fprintf(out, "messages per microbatch: %d activations forward, %d gradients backward\n", fwd,
          bwd);
  if (sliced)
    fprintf(out, "scatter/gather: %d of the activations (and their gradients) travel as each tensor "
            "rank's 1/%d slice, all-gathered on arrival\n", sliced, g->mesh[IR_AXIS_TENSOR]);
  ir_ptrmap_free(&parts);
  for (int i = 0; i < g->params.len; i++) {
    IrValue *w = g->params.items[i];
    if (w->tied)
      fprintf(out, "tied: @%s (virtual stage %d) copies @%s (virtual stage 0); gradients %s\n",
              w->name, nv - 1, w->tied->name,
              w->grad && w->grad->kind == IR_VAL_NODE && w->grad->def->op == IR_OP_ALL_REDUCE
                  ? "all-reduced over the embedding group"
              : vs ? "summed on stage 0, which holds both, by the runtime, once per step"
                   : "summed over the embedding group by the runtime, once per step");
  }
  return true;
}
