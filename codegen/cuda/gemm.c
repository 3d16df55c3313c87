/* The CUDA target's GEMMs through cuBLASLt (kernels_cuda.h k_cuda_gemm),
 * with the epilogues the gemm-epilogue pass chose for them: a GELU, its gradient or a
 * bias gradient folded into the GEMM before them. */
#include <string.h>

#include "cuda.h"

/* ------------------------------------------------------------------ GEMMs */

/* The node's cuBLASLt workspace: its scratch, rounded up to 256 bytes. */
static void gemm_workspace(CgEmitter *e, int index) {
  emit(e, "k_cuda_gemm_init(CU_ALIGN256(TMP(%lld)), %lld);",
       (long long)e->plan->scratch_offset[index], (long long)(CUDA_GEMM_WORKSPACE - 256));
}

void cg_cuda_gemm_workspace(CgEmitter *e, int index) { gemm_workspace(e, index); }

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
  cg_launch_gemm(e, NULL, batch, M, N, K, lda, ldb, ldc, t.ab ? 2 : 4, t.c ? 2 : 4, add);
}

static void gemm(CgEmitter *e, GemmTypes t, int ta, int tb, int64_t M, int64_t N, int64_t K,
                 const char *A, int64_t lda, const char *B, int64_t ldb, bool add, const char *C,
                 int64_t ldc) {
  gemm_t(e, t, ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, add, C, ldc, 0);
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
  cg_launch_gemm(e, NULL, 1, M, N, K, lda, ldb, N, t.ab ? 2 : 4, t.c ? 2 : 4, add);
  bool dgelu = strstr(epi, "DGELU") != NULL;
  cg_launch_add_bytes(e, (bias && !grad ? cg_listing_bytes(e, bias) : 0) +
                             (aux && dgelu ? cg_listing_bytes(e, aux) : 0),
                      (grad ? 4.0 * (double)N : 0) + (aux && !dgelu ? cg_listing_bytes(e, aux) : 0));
  if (grad)
    emit(e, "CU_CHECK(cudaMemcpyAsync(%s, %s, %lld * sizeof(float), cudaMemcpyDeviceToDevice, "
            "k_cuda_stream()));",
         cuda_ref(e, bias), stash, (long long)cg_numel(bias));
  if (grad) cg_launch_copy(e, 4.0 * (double)N);
  e->depth--;
  emit(e, "}");
}

/* a[..., m, k] @ b[..., k, n]: one GEMM when b is shared and a's rows are
 * contiguous, a strided batched GEMM otherwise (a shared operand has
 * stride 0). */
void cg_cuda_matmul(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *a = n->in[0], *b = n->in[1], *y = n->out[0];
  CgMatmul mm;
  if (!cg_matmul_shape(e, n, &mm)) return;
  bool add = cuda_into_grads(e, y);
  GemmTypes t;
  if (!gemm_types(e, n, a, b, y, &t)) return;
  gemm_workspace(e, index);
  const char *A = cuda_ref(e, a), *B = cuda_ref(e, b), *Y = cuda_ref(e, y);
  if (mm.form == CG_MM_ONE)
    gemm(e, t, mm.ta, mm.tb, mm.m, mm.n, mm.k, A, mm.lda, B, mm.ldb, add, Y, mm.n);
  else if (mm.form == CG_MM_ROWS)
    gemm(e, t, 0, mm.tb, mm.batch * mm.m, mm.n, mm.k, A, mm.lda, B, mm.ldb, add, Y, mm.n);
  else
    gemm_t(e, t, mm.ta, mm.tb, mm.batch, mm.m, mm.n, mm.k, A, mm.lda, mm.sa, B, mm.ldb, mm.sb, add,
           Y, mm.n, mm.m * mm.n);
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
  int j = cg_cuda_epi_gelu(e, index);
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
    cg_launch_gemm(e, NULL, 1, rows, out, in, in, tr ? in : out, out, t.ab ? 2 : 4, t.c ? 2 : 4,
                   false);
    cg_launch_add_bytes(e, cg_listing_bytes(e, n->in[2]), 0);
    return;
  }
  gemm(e, t, 0, tr, rows, out, in, cuda_ref(e, x), in, cuda_ref(e, w), tr ? in : out, add,
       cuda_ref(e, y), out);
  if (n->nin == 3)
    emit(e, "k_cuda_add_bias%s(%s, %s, %lld, %lld);", cuda_sfx(e, y), cuda_ref(e, y),
         cuda_ref(e, n->in[2]), (long long)rows, (long long)out);
  if (n->nin == 3)
    cg_launch(e, CG_K_ELEMENTWISE, NULL, 0, 2 * cg_listing_bytes(e, y), cg_listing_bytes(e, y));
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
  int j = cg_cuda_epi_dgelu(e, index);
  if (j >= 0) {
    const IrNode *g = cg_node(e, j);
    const IrValue *db = cg_cuda_epi_bgrad(e, index);
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
  const IrValue *db = cg_cuda_epi_bgrad(e, index);
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
