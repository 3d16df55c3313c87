/* The CUDA target's GEMMs through cuBLASLt (kernels_cuda.h k_cuda_gemm),
 * and the epilogues that fold a GELU, its gradient or a bias gradient into
 * the GEMM before them. */
#include <string.h>

#include "cuda.h"

/* ------------------------------------------------------------------ GEMMs */

/* The node's cuBLASLt workspace: its scratch, rounded up to 256 bytes. */
static void gemm_workspace(CgEmitter *e, int index) {
  emit(e, "k_cuda_gemm_init(CU_ALIGN256(TMP(%lld)), %lld);",
       (long long)e->plan->scratch_offset[index], (long long)(CUDA_GEMM_WORKSPACE - 256));
}

/* The cuBLASLt types of a product's inputs (both bf16 or both fp32) and
 * output; false, with an error, for inputs of two precisions. */
typedef struct GemmTypes {
  bool ab, c; /* bf16 */
} GemmTypes;

static bool gemm_types(CgEmitter *e, const IrNode *n, const IrValue *a, const IrValue *b,
                       const IrValue *c, GemmTypes *t) {
  t->ab = cuda_low(e, a), t->c = cuda_low(e, c);
  if (t->ab == cuda_low(e, b)) return true;
  cg_error(e, n, "bf16: a product of a bf16 and an fp32 operand");
  return false;
}

static const char *kc_type(bool bf) { return bf ? "KC_BF16" : "KC_F32"; }

/* A (strided batched when batch > 1) GEMM; fp32 throughout as k_cuda_gemm,
 * otherwise k_cuda_gemm_ex with the types. */
static void gemm_t(CgEmitter *e, GemmTypes t, int ta, int tb, int64_t batch, int64_t M, int64_t N,
                   int64_t K, const char *A, int64_t lda, int64_t sa, const char *B, int64_t ldb,
                   int64_t sb, bool add, const char *C, int64_t ldc, int64_t sc) {
  if (!t.ab && !t.c && batch == 1)
    emit(e, "k_cuda_gemm(%d, %d, %lld, %lld, %lld, 1.0f, %s, %lld, %s, %lld, %s, %s, %lld);", ta,
         tb, (long long)M, (long long)N, (long long)K, A, (long long)lda, B, (long long)ldb,
         add ? "1.0f" : "0.0f", C, (long long)ldc);
  else if (!t.ab && !t.c)
    emit(e, "k_cuda_gemm_batched(%d, %d, %lld, %lld, %lld, %lld, 1.0f, %s, %lld, %lld, %s, %lld, "
            "%lld, %s, %s, %lld, %lld);",
         ta, tb, (long long)batch, (long long)M, (long long)N, (long long)K, A, (long long)lda,
         (long long)sa, B, (long long)ldb, (long long)sb, add ? "1.0f" : "0.0f", C,
         (long long)ldc, (long long)sc);
  else
    emit(e, "k_cuda_gemm_ex(%s, %s, %d, %d, %lld, %lld, %lld, %lld, 1.0f, %s, %lld, %lld, %s, "
            "%lld, %lld, %s, %s, %lld, %lld);",
         kc_type(t.ab), kc_type(t.c), ta, tb, (long long)batch, (long long)M, (long long)N,
         (long long)K, A, (long long)lda, (long long)sa, B, (long long)ldb, (long long)sb,
         add ? "1.0f" : "0.0f", C, (long long)ldc, (long long)sc);
}

static void gemm(CgEmitter *e, GemmTypes t, int ta, int tb, int64_t M, int64_t N, int64_t K,
                 const char *A, int64_t lda, const char *B, int64_t ldb, bool add, const char *C,
                 int64_t ldc) {
  gemm_t(e, t, ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, add, C, ldc, 0);
}

/* --------------------------------------------------------- GEMM epilogues */

/* Where the graph has linear -> gelu, the GELU runs in cuBLASLt's epilogue
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
static bool epilogues_on(CgEmitter *e) { return !cg_target_arg(e, "--no-gemm-epilogue", NULL); }

static int phase_of(CgEmitter *e, int i) {
  return i >= e->plan->wboundary ? 2 : i >= e->plan->boundary ? 1 : 0;
}

/* Whether v (an output of node `at`'s successor `def`) may be written by
 * node `at` already: no other buffer overlapping its bytes is live over
 * positions at+1 .. def+1, except `skip` (a value the fused node neither
 * reads nor writes), and no node from `from` to `def` has kernel scratch
 * there: from = at for an output the GEMM writes (its cuBLASLt workspace is
 * in use meanwhile), at + 1 for one copied in after the GEMM. */
static bool free_early(CgEmitter *e, const IrValue *v, int at, int def, const IrValue *skip,
                       int from) {
  const PassBuf *vb = cg_buf(e, v);
  if (vb->region == PASS_REGION_NONE || vb->region == PASS_REGION_GRADS || vb->alias)
    return false;
  if (phase_of(e, at) != phase_of(e, def)) return false;
  for (int k = 0; k < e->plan->nbufs; k++) {
    const PassBuf *b = &e->plan->bufs[k];
    if (b == vb || b->alias == v || b->region != vb->region) continue;
    if (skip && (b->value == skip || b->alias == skip)) continue;
    bool overlap = b->offset < vb->offset + vb->bytes && vb->offset < b->offset + b->bytes;
    if (overlap && b->first <= def + 1 && b->last >= at + 1) return false;
  }
  for (int m = from; m <= def && vb->region == PASS_REGION_TEMPORARIES; m++) {
    int64_t off = e->plan->scratch_offset[m], bytes = e->plan->scratch_bytes[m];
    if (off >= 0 && off < vb->offset + vb->bytes && vb->offset < off + bytes) return false;
  }
  return true;
}

static int index_of(CgEmitter *e, const IrValue *v) {
  if (v->kind != IR_VAL_NODE) return -1;
  for (int i = 0; i < e->g->nodes.len; i++)
    if (cg_node(e, i) == v->def) return i;
  return -1;
}

/* Node j as an elementwise op of its own (a fused run of one node). */
static bool alone(CgEmitter *e, int j, IrOp op) {
  const PassMemPlan *p = e->plan;
  return j >= 0 && j < e->g->nodes.len && cg_node(e, j)->op == op && p->fused[j] &&
         p->group_first[j] == j && p->group_last[j] == j && !p->view[j] && !p->absorbed[j];
}

/* The gelu that linear node i absorbs (its next node, reading its
 * output), or -1. */
static int gelu_of_linear(CgEmitter *e, int i) {
  const IrNode *n = cg_node(e, i);
  if (!epilogues_on(e) || n->op != IR_OP_LINEAR || n->nin != 3 || !alone(e, i + 1, IR_OP_GELU))
    return -1;
  const IrValue *y = n->out[0], *g = cg_node(e, i + 1)->out[0];
  if (cg_node(e, i + 1)->in[0] != y || cuda_into_grads(e, y) || cg_dim(y, -1) % 8) return -1;
  if (cuda_low(e, g) != cuda_low(e, y) || cuda_low(e, n->in[2]) != cuda_low(e, y)) return -1;
  return free_early(e, g, i, i + 1, NULL, i) ? i + 1 : -1;
}

/* The gelu_grad that linear_dx node i absorbs (the one reader of its
 * output, as the gradient), or -1. */
static int dgelu_of_linear_dx(CgEmitter *e, int i) {
  const IrNode *n = cg_node(e, i);
  if (!epilogues_on(e) || n->op != IR_OP_LINEAR_DX) return -1;
  const IrValue *dx = n->out[0];
  if (cg_buf(e, dx)->uses != 1 || cuda_into_grads(e, dx) || cg_dim(dx, -1) % 8) return -1;
  for (int j = i + 1; j < e->g->nodes.len; j++) {
    const IrNode *m = cg_node(e, j);
    bool reads = false;
    for (int k = 0; k < m->nin; k++) reads |= m->in[k] == dx;
    if (!reads) continue;
    if (!alone(e, j, IR_OP_GELU_GRAD) || m->in[1] != dx || m->in[0] == dx) return -1;
    const IrValue *x = m->in[0], *g = m->out[0];
    if (cuda_low(e, x) != cuda_low(e, dx) || cuda_low(e, g) != cuda_low(e, dx)) return -1;
    return free_early(e, g, i, j, dx, i) ? j : -1;
  }
  return -1;
}

/* A GEMM's epilogue writes a bias gradient into a stash after its cuBLASLt
 * workspace (in its scratch: cuda_scratch_bytes), from where it is copied
 * to the sum_to's own buffer once the GEMM is done: the plan may well have
 * put that buffer over the workspace, which the GEMM is using. */
int64_t cg_cuda_stash_bytes(int64_t n) { return (n * 4 + 255) / 256 * 256; }

/* Whether node i's stash (the end of its scratch) leaves y alone. */
static bool clear_of_stash(CgEmitter *e, const IrValue *y, int i) {
  const PassBuf *b = cg_buf(e, y);
  int64_t lo = e->plan->scratch_offset[i] + CUDA_GEMM_WORKSPACE - 256;
  int64_t hi = e->plan->scratch_offset[i] + e->plan->scratch_bytes[i];
  return b->region != PASS_REGION_TEMPORARIES || b->offset >= hi || b->offset + b->bytes <= lo;
}

static bool bgrad_fits(CgEmitter *e, const IrValue *y, int i, int k) {
  return e->plan->scratch_bytes[i] >= CUDA_GEMM_WORKSPACE + cg_cuda_stash_bytes(cg_numel(y)) &&
         clear_of_stash(e, y, i) && free_early(e, y, i, k, NULL, i + 1);
}

/* The node that computes bias gradient k (a sum_to over the rows of a
 * gelu_grad's output or of a linear_dw's dy, into an fp32 temporary that
 * is added to its slot after k) in its epilogue, or -1. */
static int bgrad_owner(CgEmitter *e, int k) {
  const IrNode *n = cg_node(e, k);
  if (!epilogues_on(e) || n->op != IR_OP_SUM_TO || e->plan->view[k] || e->plan->chunked[k])
    return -1;
  const IrValue *x = n->in[0], *y = n->out[0];
  if (cg_bcast(&y->type, &x->type).kind != CG_BC_SUFFIX || cg_dim(y, -1) != cg_dim(x, -1) ||
      cuda_low(e, y))
    return -1;
  int j = index_of(e, x);
  if (j > 0 && cg_node(e, j)->op == IR_OP_GELU_GRAD)
    for (int i = 0; i < j; i++)
      if (cg_node(e, i)->op == IR_OP_LINEAR_DX && dgelu_of_linear_dx(e, i) == j &&
          bgrad_fits(e, y, i, k))
        return i;
  for (int i = 0; i < k; i++) {
    const IrNode *m = cg_node(e, i);
    if (m->op == IR_OP_LINEAR_DW && m->in[1] == x && bgrad_fits(e, y, i, k)) return i;
  }
  return -1;
}

/* The bias gradient node i computes in its epilogue, or NULL. */
static const IrValue *bgrad_of(CgEmitter *e, int i, const IrValue *summed) {
  for (int k = i + 1; k < e->g->nodes.len; k++)
    if (cg_node(e, k)->op == IR_OP_SUM_TO && cg_node(e, k)->in[0] == summed &&
        bgrad_owner(e, k) == i)
      return cg_node(e, k)->out[0];
  return NULL;
}

/* Whether node j's code is written by an earlier GEMM's epilogue. */
bool cg_cuda_in_epilogue(CgEmitter *e, int j) {
  const IrNode *n = cg_node(e, j);
  if (n->op == IR_OP_GELU) return j > 0 && gelu_of_linear(e, j - 1) == j;
  if (n->op == IR_OP_GELU_GRAD) {
    int i = index_of(e, n->in[1]);
    return i >= 0 && dgelu_of_linear_dx(e, i) == j;
  }
  if (n->op == IR_OP_SUM_TO) return bgrad_owner(e, j) >= 0;
  return false;
}

/* One k_cuda_gemm_fused call of node `index`: C = epi(op(A) op(B)) with
 * the epilogue's bias (read) or bias gradient (fp32, by way of the stash)
 * and aux; leading dims those of dense row-major operands. */
static void gemm_fused(CgEmitter *e, int index, GemmTypes t, const char *epi, const IrValue *bias,
                       const IrValue *aux, int ta, int tb, int64_t M, int64_t N, int64_t K,
                       const char *A, int64_t lda, const char *B, int64_t ldb, bool add,
                       const char *C) {
  bool grad = strstr(epi, "BGRAD") != NULL;
  const char *stash = ir_fmt("(float *)((char *)CU_ALIGN256(TMP(%lld)) + %lld)",
                             (long long)e->plan->scratch_offset[index],
                             (long long)(CUDA_GEMM_WORKSPACE - 256));
  emit(e, "{");
  e->depth++;
  emit(e, "const KcGemmEpi epi = {%s, %s, %s, %s, %lld};", epi,
       grad   ? stash
       : bias ? ir_fmt("(void *)%s", cuda_ref(e, bias))
              : "NULL",
       kc_type(!grad && bias && cuda_low(e, bias)),
       aux ? ir_fmt("(void *)%s", cuda_ref(e, aux)) : "NULL", (long long)(aux ? N : 0));
  emit(e, "k_cuda_gemm_fused(%s, %s, &epi, %d, %d, %lld, %lld, %lld, 1.0f, %s, %lld, %s, %lld, "
          "%s, %s, %lld);",
       kc_type(t.ab), kc_type(t.c), ta, tb, (long long)M, (long long)N, (long long)K, A,
       (long long)lda, B, (long long)ldb, add ? "1.0f" : "0.0f", C, (long long)N);
  if (grad)
    emit(e, "CU_CHECK(cudaMemcpyAsync(%s, %s, %lld * sizeof(float), cudaMemcpyDeviceToDevice, "
            "k_cuda_stream()));",
         cuda_ref(e, bias), stash, (long long)cg_numel(bias));
  e->depth--;
  emit(e, "}");
}

/* a[..., m, k] @ b[..., k, n]: one GEMM when b is shared and a's rows are
 * contiguous, a strided batched GEMM otherwise (a shared operand has
 * stride 0). */
void cg_cuda_matmul(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *a = n->in[0], *b = n->in[1], *y = n->out[0];
  if (a->type.rank < 2 || b->type.rank < 2 || y->type.rank < 2) {
    cg_error(e, n, "operands of rank below 2");
    return;
  }
  int ta = (int)ir_attr_int(n, "transpose_a"), tb = (int)ir_attr_int(n, "transpose_b");
  int64_t m = cg_dim(y, -2), nn = cg_dim(y, -1), k = ta ? cg_dim(a, -2) : cg_dim(a, -1);
  int64_t batch = cg_numel(y) / (m * nn), ba = cg_numel(a) / (m * k), bb = cg_numel(b) / (k * nn);
  int64_t lda = ta ? m : k, ldb = tb ? k : nn;
  bool add = cuda_into_grads(e, y);
  GemmTypes t;
  if (!gemm_types(e, n, a, b, y, &t)) return;
  gemm_workspace(e, index);
  if (batch == 1) {
    gemm(e, t, ta, tb, m, nn, k, cuda_ref(e, a), lda, cuda_ref(e, b), ldb, add, cuda_ref(e, y), nn);
  } else if (bb == 1 && !ta && ba == batch) {
    gemm(e, t, 0, tb, batch * m, nn, k, cuda_ref(e, a), lda, cuda_ref(e, b), ldb, add,
         cuda_ref(e, y), nn);
  } else if ((ba == 1 || ba == batch) && (bb == 1 || bb == batch)) {
    gemm_t(e, t, ta, tb, batch, m, nn, k, cuda_ref(e, a), lda, ba == 1 ? 0 : m * k, cuda_ref(e, b),
           ldb, bb == 1 ? 0 : k * nn, add, cuda_ref(e, y), nn, m * nn);
  } else {
    cg_error(e, n, "batch dims that neither match nor are shared");
  }
}

/* x[..., in] @ w + bias; w is [in, out], or [out, in] when transposed. The
 * bias goes into cuBLASLt's epilogue unless the output is added into a
 * gradient slot (the epilogue would add it on every call). */
void cg_cuda_linear(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *w = n->in[1], *y = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t in = cg_dim(x, -1), out = cg_dim(y, -1), rows = cg_rows(x);
  bool add = cuda_into_grads(e, y);
  GemmTypes t;
  if (!gemm_types(e, n, x, w, y, &t)) return;
  gemm_workspace(e, index);
  int j = gelu_of_linear(e, index);
  if (j >= 0) {
    gemm_fused(e, index, t, "KC_EPI_BIAS_GELU_AUX", n->in[2], y, 0, tr, rows, out, in,
               cuda_ref(e, x), in, cuda_ref(e, w), tr ? in : out, false,
               cuda_ref(e, cg_node(e, j)->out[0]));
    return;
  }
  /* The epilogue's bias is of the output's type. */
  if (n->nin == 3 && !add && cuda_low(e, n->in[2]) == t.c) {
    emit(e, "k_cuda_gemm_epilogue(%s, %s, KC_EPI_BIAS, %s, 0, %d, %lld, %lld, %lld, 1.0f, "
            "%s, %lld, %s, %lld, 0.0f, %s, %lld);",
         kc_type(t.ab), kc_type(t.c), cuda_ref(e, n->in[2]), tr, (long long)rows, (long long)out,
         (long long)in, cuda_ref(e, x), (long long)in, cuda_ref(e, w), (long long)(tr ? in : out),
         cuda_ref(e, y), (long long)out);
    return;
  }
  gemm(e, t, 0, tr, rows, out, in, cuda_ref(e, x), in, cuda_ref(e, w), tr ? in : out, add,
       cuda_ref(e, y), out);
  if (n->nin == 3)
    emit(e, "k_cuda_add_bias%s(%s, %s, %lld, %lld);", cuda_sfx(e, y), cuda_ref(e, y),
         cuda_ref(e, n->in[2]), (long long)rows, (long long)out);
}

/* dx[..., in] = dy[..., out] w^T (w^T^T = w when transposed). */
void cg_cuda_linear_dx(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *dy = n->in[0], *w = n->in[1], *dx = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t out = cg_dim(dy, -1), in = cg_dim(dx, -1);
  GemmTypes t;
  if (!gemm_types(e, n, dy, w, dx, &t)) return;
  gemm_workspace(e, index);
  int j = dgelu_of_linear_dx(e, index);
  if (j >= 0) {
    const IrNode *g = cg_node(e, j);
    const IrValue *db = bgrad_of(e, index, g->out[0]);
    gemm_fused(e, index, t, db ? "KC_EPI_DGELU_BGRAD" : "KC_EPI_DGELU", db, g->in[0], 0, !tr,
               cg_rows(dy), in, out, cuda_ref(e, dy), out, cuda_ref(e, w), tr ? in : out, false,
               cuda_ref(e, g->out[0]));
    return;
  }
  gemm(e, t, 0, !tr, cg_rows(dy), in, out, cuda_ref(e, dy), out, cuda_ref(e, w), tr ? in : out,
       cuda_into_grads(e, dx), cuda_ref(e, dx), in);
}

/* dw = x^T dy [in, out], or dy^T x [out, in] when transposed, summed over
 * every leading dim by the GEMM's inner dimension. */
void cg_cuda_linear_dw(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *dy = n->in[1], *dw = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t in = cg_dim(x, -1), out = cg_dim(dy, -1), rows = cg_rows(x);
  bool add = cuda_into_grads(e, dw);
  GemmTypes t;
  if (!gemm_types(e, n, x, dy, dw, &t)) return;
  gemm_workspace(e, index);
  /* dy's bias gradient: the sum over the GEMM's k of its dy operand. */
  const IrValue *db = bgrad_of(e, index, dy);
  if (db && tr)
    gemm_fused(e, index, t, "KC_EPI_BGRAD_A", db, NULL, 1, 0, out, in, rows, cuda_ref(e, dy), out,
               cuda_ref(e, x), in, add, cuda_ref(e, dw));
  else if (db)
    gemm_fused(e, index, t, "KC_EPI_BGRAD_B", db, NULL, 1, 0, in, out, rows, cuda_ref(e, x), in,
               cuda_ref(e, dy), out, add, cuda_ref(e, dw));
  else if (tr)
    gemm(e, t, 1, 0, out, in, rows, cuda_ref(e, dy), out, cuda_ref(e, x), in, add, cuda_ref(e, dw),
         in);
  else
    gemm(e, t, 1, 0, in, out, rows, cuda_ref(e, x), in, cuda_ref(e, dy), out, add, cuda_ref(e, dw),
         out);
}
