/* The CUDA target's GEMM epilogues, chosen once per chunk from its graph
 * and memory plan alone (a pass in all but its place: it runs on the plan
 * the layout made of each chunk, and codegen/cuda/gemm.c writes what it
 * chose). Where the graph has linear -> gelu, the GELU runs in cuBLASLt's epilogue
 * (keeping the pre-activation, the linear's output, for the backward); in
 * the backward, linear_dx -> gelu_grad runs as one GEMM with the GELU's
 * gradient in the epilogue, and a bias gradient (sum_to over rows) of the
 * gelu_grad's output or of a linear_dw's dy goes into that GEMM's
 * epilogue too. The absorbed nodes write no code of their own. A fused
 * GEMM writes an output before the node that defines it in the plan: that
 * is allowed only where no other buffer sharing its bytes is live in
 * between (free_early), and within one phase. --no-gemm-epilogue turns it
 * all off; kernels/cuda/gemm.cu runs an epilogue unfused where cuBLASLt has
 * no algorithm for it. */
#include "cuda.h"

/* What the choice reads: one chunk's graph and plan, and whether
 * epilogues are on (not --no-gemm-epilogue). */
typedef struct Ep {
  const IrGraph *g;
  const PassMemPlan *plan;
  bool on;
} Ep;

static const IrNode *node(const Ep *ep, int i) { return ep->g->nodes.items[i]; }

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
 * there: from = at for an output the GEMM writes (its cuBLASLt workspace is
 * in use meanwhile), at + 1 for one copied in after the GEMM. */
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

/* The gelu that linear node i absorbs (its next node, reading its
 * output), or -1. */
static int gelu_of_linear(const Ep *ep, int i) {
  const IrNode *n = node(ep, i);
  if (!ep->on || n->op != IR_OP_LINEAR || n->nin != 3 || !alone(ep, i + 1, IR_OP_GELU))
    return -1;
  const IrValue *y = n->out[0], *g = node(ep, i + 1)->out[0];
  if (node(ep, i + 1)->in[0] != y || into_grads(ep, y) || cg_dim(y, -1) % 8) return -1;
  if (cuda_low_in(ep->plan, g) != cuda_low_in(ep->plan, y) ||
      cuda_low_in(ep->plan, n->in[2]) != cuda_low_in(ep->plan, y))
    return -1;
  return free_early(ep, g, i, i + 1, NULL, i) ? i + 1 : -1;
}

/* The gelu_grad that linear_dx node i absorbs (the one reader of its
 * output, as the gradient), or -1. */
static int dgelu_of_linear_dx(const Ep *ep, int i) {
  const IrNode *n = node(ep, i);
  if (!ep->on || n->op != IR_OP_LINEAR_DX) return -1;
  const IrValue *dx = n->out[0];
  if (buf(ep, dx)->uses != 1 || into_grads(ep, dx) || cg_dim(dx, -1) % 8) return -1;
  for (int j = i + 1; j < ep->g->nodes.len; j++) {
    const IrNode *m = node(ep, j);
    bool reads = false;
    for (int k = 0; k < m->nin; k++) reads |= m->in[k] == dx;
    if (!reads) continue;
    if (!alone(ep, j, IR_OP_GELU_GRAD) || m->in[1] != dx || m->in[0] == dx) return -1;
    const IrValue *x = m->in[0], *g = m->out[0];
    if (cuda_low_in(ep->plan, x) != cuda_low_in(ep->plan, dx) ||
        cuda_low_in(ep->plan, g) != cuda_low_in(ep->plan, dx))
      return -1;
    return free_early(ep, g, i, j, dx, i) ? j : -1;
  }
  return -1;
}

/* A GEMM's epilogue writes a bias gradient into a stash after its cuBLASLt
 * workspace (in its scratch: cuda_scratch_bytes), from where it is copied
 * to the sum_to's own buffer once the GEMM is done: the plan may well have
 * put that buffer over the workspace, which the GEMM is using. */
int64_t cg_cuda_stash_bytes(int64_t n) { return (n * 4 + 255) / 256 * 256; }

/* Whether node i's stash (the end of its scratch) leaves y alone. */
static bool clear_of_stash(const Ep *ep, const IrValue *y, int i) {
  const PassBuf *b = buf(ep, y);
  int64_t lo = ep->plan->scratch_offset[i] + CUDA_GEMM_WORKSPACE - 256;
  int64_t hi = ep->plan->scratch_offset[i] + ep->plan->scratch_bytes[i];
  return b->region != PASS_REGION_TEMPORARIES || b->offset >= hi || b->offset + b->bytes <= lo;
}

static bool bgrad_fits(const Ep *ep, const IrValue *y, int i, int k) {
  return ep->plan->scratch_bytes[i] >= CUDA_GEMM_WORKSPACE + cg_cuda_stash_bytes(cg_numel(y)) &&
         clear_of_stash(ep, y, i) && free_early(ep, y, i, k, NULL, i + 1);
}

/* The node that computes bias gradient k (a sum_to over the rows of a
 * gelu_grad's output or of a linear_dw's dy, into an fp32 temporary that
 * is added to its slot after k) in its epilogue, or -1. */
static int bgrad_owner(const Ep *ep, int k) {
  const IrNode *n = node(ep, k);
  if (!ep->on || n->op != IR_OP_SUM_TO || ep->plan->view[k] || ep->plan->chunked[k])
    return -1;
  const IrValue *x = n->in[0], *y = n->out[0];
  if (cg_bcast(&y->type, &x->type).kind != CG_BC_SUFFIX || cg_dim(y, -1) != cg_dim(x, -1) ||
      cuda_low_in(ep->plan, y))
    return -1;
  int j = index_of(ep, x);
  if (j > 0 && node(ep, j)->op == IR_OP_GELU_GRAD)
    for (int i = 0; i < j; i++)
      if (node(ep, i)->op == IR_OP_LINEAR_DX && dgelu_of_linear_dx(ep, i) == j &&
          bgrad_fits(ep, y, i, k))
        return i;
  for (int i = 0; i < k; i++) {
    const IrNode *m = node(ep, i);
    if (m->op == IR_OP_LINEAR_DW && m->in[1] == x && bgrad_fits(ep, y, i, k)) return i;
  }
  return -1;
}

/* The epilogues of one chunk, per node index: the gelu a linear absorbs,
 * the gelu_grad a linear_dx absorbs, the GEMM that computes a sum_to in
 * its epilogue (-1 each where none), and whether a node's code is an
 * earlier GEMM's epilogue. */
struct CudaEpilogues {
  const PassMemPlan *plan; /* whose they are */
  int *gelu, *dgelu, *bgrad;
  bool *absorbed;
  struct CudaEpilogues *next;
};

static CudaEpilogues *choose(const Ep *ep) {
  int N = ep->g->nodes.len;
  CudaEpilogues *c = ir_alloc(sizeof *c);
  c->plan = ep->plan;
  c->gelu = ir_alloc(sizeof(int) * (size_t)(N + 1));
  c->dgelu = ir_alloc(sizeof(int) * (size_t)(N + 1));
  c->bgrad = ir_alloc(sizeof(int) * (size_t)(N + 1));
  c->absorbed = ir_alloc(sizeof(bool) * (size_t)(N + 1));
  c->next = NULL;
  for (int i = 0; i < N; i++) {
    c->gelu[i] = gelu_of_linear(ep, i);
    c->dgelu[i] = dgelu_of_linear_dx(ep, i);
    c->bgrad[i] = bgrad_owner(ep, i);
  }
  for (int j = 0; j < N; j++) {
    const IrNode *n = node(ep, j);
    int i = n->op == IR_OP_GELU_GRAD ? index_of(ep, n->in[1]) : -1;
    c->absorbed[j] = (n->op == IR_OP_GELU && j > 0 && c->gelu[j - 1] == j) ||
                     (n->op == IR_OP_GELU_GRAD && i >= 0 && c->dgelu[i] == j) ||
                     (n->op == IR_OP_SUM_TO && c->bgrad[j] >= 0);
  }
  return c;
}

/* The epilogues of the chunk being written, chosen the first time it is
 * asked for and kept in the target's state. */
static const CudaEpilogues *epilogues(CgEmitter *e) {
  CudaState *st = cuda_state(e);
  for (CudaEpilogues *c = st->epilogues; c; c = c->next)
    if (c->plan == e->plan) return c;
  Ep ep = {e->g, e->plan, !cg_target_arg(e, "--no-gemm-epilogue", NULL)};
  CudaEpilogues *c = choose(&ep);
  c->next = st->epilogues;
  st->epilogues = c;
  return c;
}

int cg_cuda_epi_gelu(CgEmitter *e, int i) { return epilogues(e)->gelu[i]; }

int cg_cuda_epi_dgelu(CgEmitter *e, int i) { return epilogues(e)->dgelu[i]; }

const IrValue *cg_cuda_epi_bgrad(CgEmitter *e, int i, const IrValue *summed) {
  const CudaEpilogues *c = epilogues(e);
  for (int k = i + 1; k < e->g->nodes.len; k++)
    if (cg_node(e, k)->op == IR_OP_SUM_TO && cg_node(e, k)->in[0] == summed && c->bgrad[k] == i)
      return cg_node(e, k)->out[0];
  return NULL;
}

bool cg_cuda_in_epilogue(CgEmitter *e, int j) { return epilogues(e)->absorbed[j]; }
