/* gemm-epilogue: which elementwise nodes after a GEMM run in the GEMM
 * library's epilogue (cuBLASLt's, on the CUDA target), chosen once per
 * chunk from its graph and memory plan, after memplan. Where the graph has
 * linear -> gelu, the GELU runs in the linear's epilogue, which keeps the
 * pre-activation (the linear's output) for the backward; in the backward,
 * linear_dx -> gelu_grad runs as one GEMM with the GELU's gradient in the
 * epilogue, and a bias gradient (sum_to over rows) of the gelu_grad's
 * output or of a linear_dw's dy goes into that GEMM's epilogue too. The
 * absorbed nodes write no code of their own (gemm_epilogue.h).
 *
 * A fused GEMM writes an output before the node that defines it in the
 * plan: that is allowed only where no other buffer sharing its bytes is
 * live in between (free_early), and within one phase; so the choice
 * depends on the plan's offsets and runs after memplan, on the plan the
 * programs are written from. A bias gradient goes to a stash after the
 * GEMM's workspace (PassMemPolicy.gemm_workspace), which the target's
 * scratch sizes make room for. --no-gemm-epilogue (PassOptions) chooses
 * none; so does a policy without a GEMM workspace (the CPU target's). */
#include "gemm_epilogue.h"
#include "program_passes.h"

/* What the choice reads: one chunk's graph and plan, and whether
 * epilogues are on. */
typedef struct Ep {
  const IrGraph *g;
  const PassMemPlan *plan;
  bool on;
} Ep;

static const IrNode *node(const Ep *ep, int i) { return ep->g->nodes.items[i]; }

static int64_t last_dim(const IrValue *v) { return v->type.shape[v->type.rank - 1]; }

static const PassBuf *buf(const Ep *ep, const IrValue *v) {
  const PassBuf *b = pass_memplan_find(ep->plan, v);
  if (!b) die("value without a place in the memory plan");
  return b;
}

static bool into_grads(const Ep *ep, const IrValue *v) {
  return buf(ep, v)->region == PASS_REGION_GRADS;
}

static int phase_of(const Ep *ep, int i) {
  return i >= ep->plan->wboundary ? 2 : i >= ep->plan->boundary ? 1 : 0;
}

/* Whether v (an output of node `at`'s successor `def`) may be written by
 * node `at` already: no other buffer overlapping its bytes is live over
 * positions at+1 .. def+1, except `skip` (a value the fused node neither
 * reads nor writes), and no node from `from` to `def` has kernel scratch
 * there: from = at for an output the GEMM writes (its workspace is in use
 * meanwhile), at + 1 for one copied in after the GEMM. */
static bool free_early(const Ep *ep, const IrValue *v, int at, int def, const IrValue *skip,
                       int from) {
  const PassBuf *vb = buf(ep, v);
  if (vb->region == PASS_REGION_NONE || vb->region == PASS_REGION_GRADS || vb->alias)
    return false;
  if (phase_of(ep, at) != phase_of(ep, def)) return false;
  for (int k = 0; k < ep->plan->nbufs; k++) {
    const PassBuf *b = &ep->plan->bufs[k];
    if (b == vb || b->alias == v || b->region != vb->region) continue;
    if (skip && (b->value == skip || b->alias == skip)) continue;
    bool overlap = b->offset < vb->offset + vb->bytes && vb->offset < b->offset + b->bytes;
    if (overlap && b->first <= def + 1 && b->last >= at + 1) return false;
  }
  for (int m = from; m <= def && vb->region == PASS_REGION_TEMPORARIES; m++) {
    int64_t off = ep->plan->scratch_offset[m], bytes = ep->plan->scratch_bytes[m];
    if (off >= 0 && off < vb->offset + vb->bytes && vb->offset < off + bytes) return false;
  }
  return true;
}

static int index_of(const Ep *ep, const IrValue *v) {
  if (v->kind != IR_VAL_NODE) return -1;
  for (int i = 0; i < ep->g->nodes.len; i++)
    if (node(ep, i) == v->def) return i;
  return -1;
}

/* Node j as an elementwise op of its own (a fused run of one node). */
static bool alone(const Ep *ep, int j, IrOp op) {
  const PassMemPlan *p = ep->plan;
  return j >= 0 && j < ep->g->nodes.len && node(ep, j)->op == op && p->fused[j] &&
         p->group_first[j] == j && p->group_last[j] == j && !p->view[j] && !p->absorbed[j];
}

/* Whether the kernels see a and b in the same precision. */
static bool same_low(const Ep *ep, const IrValue *a, const IrValue *b) {
  return pass_memplan_low(ep->plan, a) == pass_memplan_low(ep->plan, b);
}

/* The gelu that linear node i absorbs (its next node, reading its
 * output), or -1. The epilogue needs an output width that is a multiple
 * of 8 and the bias, the output and the pre-activation in one precision. */
static int gelu_of_linear(const Ep *ep, int i) {
  const IrNode *n = node(ep, i);
  if (!ep->on || n->op != IR_OP_LINEAR || n->nin != 3 || !alone(ep, i + 1, IR_OP_GELU))
    return -1;
  const IrValue *y = n->out[0], *g = node(ep, i + 1)->out[0];
  if (node(ep, i + 1)->in[0] != y || into_grads(ep, y) || last_dim(y) % 8) return -1;
  if (!ir_attr_int(node(ep, i + 1), "approximate")) return -1; /* the epilogue's GELU is tanh's */
  if (!same_low(ep, g, y) || !same_low(ep, n->in[2], y)) return -1;
  return free_early(ep, g, i, i + 1, NULL, i) ? i + 1 : -1;
}

/* The gelu_grad that linear_dx node i absorbs (the one reader of its
 * output, as the gradient), or -1. */
static int dgelu_of_linear_dx(const Ep *ep, int i) {
  const IrNode *n = node(ep, i);
  if (!ep->on || n->op != IR_OP_LINEAR_DX) return -1;
  const IrValue *dx = n->out[0];
  if (buf(ep, dx)->uses != 1 || into_grads(ep, dx) || last_dim(dx) % 8) return -1;
  for (int j = i + 1; j < ep->g->nodes.len; j++) {
    const IrNode *m = node(ep, j);
    bool reads = false;
    for (int k = 0; k < m->nin; k++) reads |= m->in[k] == dx;
    if (!reads) continue;
    if (!alone(ep, j, IR_OP_GELU_GRAD) || m->in[1] != dx || m->in[0] == dx) return -1;
    if (!ir_attr_int(m, "approximate")) return -1; /* the epilogue's GELU is tanh's */
    const IrValue *x = m->in[0], *g = m->out[0];
    if (!same_low(ep, x, dx) || !same_low(ep, g, dx)) return -1;
    return free_early(ep, g, i, j, dx, i) ? j : -1;
  }
  return -1;
}

/* Whether node i's stash (the end of its scratch) leaves y alone. */
static bool clear_of_stash(const Ep *ep, const IrValue *y, int i) {
  const PassBuf *b = buf(ep, y);
  int64_t lo = ep->plan->scratch_offset[i] + ep->plan->policy.gemm_workspace - 256;
  int64_t hi = ep->plan->scratch_offset[i] + ep->plan->scratch_bytes[i];
  return b->region != PASS_REGION_TEMPORARIES || b->offset >= hi || b->offset + b->bytes <= lo;
}

static bool bgrad_fits(const Ep *ep, const IrValue *y, int i, int k) {
  return ep->plan->scratch_bytes[i] >=
             ep->plan->policy.gemm_workspace + pass_gemm_stash_bytes(ir_type_numel(&y->type)) &&
         clear_of_stash(ep, y, i) && free_early(ep, y, i, k, NULL, i + 1);
}

/* The GEMM that computes bias gradient k (a sum_to over the rows of a
 * gelu_grad's output or of a linear_dw's dy, into an fp32 temporary that
 * is added to its slot after k) in its epilogue, or -1. `dgelu` holds the
 * choice of every linear_dx already. */
static int bgrad_owner(const Ep *ep, const int *dgelu, int k) {
  const IrNode *n = node(ep, k);
  if (!ep->on || n->op != IR_OP_SUM_TO || ep->plan->view[k] || ep->plan->chunked[k])
    return -1;
  const IrValue *x = n->in[0], *y = n->out[0];
  if (!pass_sum_of_rows(n) || ir_type_numel(&y->type) == 1 || last_dim(y) != last_dim(x) ||
      pass_memplan_low(ep->plan, y))
    return -1;
  int j = index_of(ep, x);
  if (j > 0 && node(ep, j)->op == IR_OP_GELU_GRAD)
    for (int i = 0; i < j; i++)
      if (node(ep, i)->op == IR_OP_LINEAR_DX && dgelu[i] == j && bgrad_fits(ep, y, i, k)) return i;
  for (int i = 0; i < k; i++) {
    const IrNode *m = node(ep, i);
    if (m->op == IR_OP_LINEAR_DW && m->in[1] == x && bgrad_fits(ep, y, i, k)) return i;
  }
  return -1;
}

static int *minus_ones(int n) {
  int *a = ir_alloc(sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i <= n; i++) a[i] = -1;
  return a;
}

static void choose(const Ep *ep, PassEpilogues *c) {
  int N = ep->g->nodes.len;
  c->g = ep->g;
  c->plan = ep->plan;
  c->on = ep->on;
  c->gelu = minus_ones(N), c->dgelu = minus_ones(N);
  c->bgrad = minus_ones(N), c->owner = minus_ones(N);
  for (int i = 0; i < N; i++) {
    c->gelu[i] = gelu_of_linear(ep, i);
    c->dgelu[i] = dgelu_of_linear_dx(ep, i);
    if (c->gelu[i] >= 0) c->owner[c->gelu[i]] = i;
    if (c->dgelu[i] >= 0) c->owner[c->dgelu[i]] = i;
  }
  /* A GEMM's epilogue computes one bias gradient: the first it can. */
  for (int k = 0; k < N; k++) {
    int i = bgrad_owner(ep, c->dgelu, k);
    if (i < 0 || c->bgrad[i] >= 0) continue;
    c->bgrad[i] = k;
    c->owner[k] = i;
  }
}

bool pass_gemm_epilogue(PassProgram *p, const PassOptions *opt) {
  int n;
  PassChunk *chunks = pass_program_chunks(p, &n);
  for (int k = 0; k < n; k++) {
    const IrGraph *g = chunks[k].g;
    if (!g->memplan || g->memplan->nnodes != g->nodes.len) {
      ir_error(ir_cmdline, "gemm-epilogue: virtual stage %d has no memory plan of its nodes; run "
               "the memplan pass first", chunks[k].vstage);
      return false;
    }
  }
  PassEpilogues *all = ir_alloc(sizeof *all * (size_t)n);
  for (int k = 0; k < n; k++) {
    const PassMemPlan *plan = chunks[k].g->memplan;
    Ep ep = {chunks[k].g, plan, !(opt && opt->no_gemm_epilogue) && plan->policy.gemm_workspace > 0};
    choose(&ep, &all[k]);
  }
  p->epilogues = all;
  p->nepilogues = n;
  return true;
}

/* ------------------------------------------------------- print, verify */

/* The value as the printer numbers it: node outputs in node order (an
 * unrolled graph's). */
static const char *name_of(const PassMemPlan *plan, const IrValue *v) {
  const PassBuf *b = pass_memplan_find(plan, v);
  if (v->kind == IR_VAL_NODE && b) return ir_fmt("%%%d", b->index - plan->nleaves);
  return ir_fmt("%%%s", v->name ? v->name : "?");
}

static const char *node_str(const PassEpilogues *c, int i) {
  const IrNode *n = c->g->nodes.items[i];
  return ir_fmt("%s %s", ir_op_info(n->op)->name, name_of(c->plan, n->out[0]));
}

/* One line per GEMM with an epilogue, then the counts. */
static void print_chunk(FILE *out, const PassEpilogues *c) {
  int gelu = 0, dgelu = 0, bgrad = 0;
  for (int i = 0; i < c->g->nodes.len; i++) {
    if (c->gelu[i] < 0 && c->dgelu[i] < 0 && c->bgrad[i] < 0) continue;
    fprintf(out, "// epilogue of %s:", node_str(c, i));
    if (c->gelu[i] >= 0) fprintf(out, " bias+gelu %s", node_str(c, c->gelu[i])), gelu++;
    if (c->dgelu[i] >= 0) fprintf(out, " dgelu %s", node_str(c, c->dgelu[i])), dgelu++;
    if (c->bgrad[i] >= 0) fprintf(out, " bgrad %s", node_str(c, c->bgrad[i])), bgrad++;
    fputc('\n', out);
  }
  if (!c->on)
    fprintf(out, "// epilogues: off (%s)\n", c->plan->policy.gemm_workspace > 0
                                                 ? "--no-gemm-epilogue"
                                                 : "the memory policy has no GEMM workspace");
  else
    fprintf(out, "// epilogues: %d bias+gelu, %d dgelu, %d bias gradients\n", gelu, dgelu, bgrad);
}

void pass_gemm_epilogue_print(FILE *out, PassProgram *p) {
  pass_print_program(out, p);
  for (int k = 0; k < p->nepilogues; k++) {
    const PassEpilogues *c = &p->epilogues[k];
    if (p->nepilogues > 1) fprintf(out, "// virtual stage %d\n", p->chunks[k].vstage);
    print_chunk(out, c);
  }
}

/* Whether node i is of op `op` and j absorbed by it, with j after i. */
static bool owned(const PassEpilogues *c, int i, IrOp op, int j) {
  const IrNode *n = c->g->nodes.items[i];
  return n->op == op && j > i && j < c->g->nodes.len && c->owner[j] == i;
}

bool pass_gemm_epilogue_verify(PassProgram *p, const char *who) {
  if (!pass_verify_chunks(p, who)) return false;
  int n;
  PassChunk *chunks = pass_program_chunks(p, &n);
  if (p->nepilogues != n) {
    ir_error(ir_cmdline, "%s: epilogues of %d chunks for %d", who, p->nepilogues, n);
    return false;
  }
  for (int k = 0; k < n; k++) {
    const PassEpilogues *c = &p->epilogues[k];
    const IrGraph *g = chunks[k].g;
    if (c->g != g || c->plan != g->memplan) {
      ir_error(ir_cmdline, "%s: virtual stage %d: epilogues chosen on another graph or plan", who,
               chunks[k].vstage);
      return false;
    }
    int N = g->nodes.len, claims = 0, absorbed = 0;
    for (int i = 0; i < N; i++) {
      bool ok = (c->gelu[i] < 0 || owned(c, i, IR_OP_LINEAR, c->gelu[i])) &&
                (c->dgelu[i] < 0 || owned(c, i, IR_OP_LINEAR_DX, c->dgelu[i])) &&
                (c->bgrad[i] < 0 || (owned(c, i, IR_OP_LINEAR_DX, c->bgrad[i]) && c->dgelu[i] >= 0) ||
                 owned(c, i, IR_OP_LINEAR_DW, c->bgrad[i]));
      if (!ok) {
        ir_error(ir_cmdline, "%s: virtual stage %d: node %d's epilogue computes a node it does "
                 "not own", who, chunks[k].vstage, i);
        return false;
      }
      claims += (c->gelu[i] >= 0) + (c->dgelu[i] >= 0) + (c->bgrad[i] >= 0);
      absorbed += c->owner[i] >= 0;
    }
    if (claims != absorbed) {
      ir_error(ir_cmdline, "%s: virtual stage %d: %d nodes absorbed by %d epilogue parts", who,
               chunks[k].vstage, absorbed, claims);
      return false;
    }
  }
  return true;
}
