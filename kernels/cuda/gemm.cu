/* Matrix multiplies through cuBLASLt, row-major as cblas.
 *
 * cuBLASLt is column-major, and a row-major matrix read column-major is
 * its transpose: C = op(A) op(B) row-major is C^T = op(B)^T op(A)^T
 * column-major, so B is passed first and A second with their own
 * transposition flags, and C keeps its leading dimension. The algorithm of
 * each distinct problem (types, flags, sizes, leading dimensions, batch
 * and strides, and the alignment of the pointers, which the heuristics
 * take into account) is chosen once by cuBLASLt's heuristics and cached. */
#include <cublasLt.h>
#include <string.h>

#include "common.cuh"

#define KC_CUBLAS(call)                                                                  \
  do {                                                                                   \
    cublasStatus_t kc_st_ = (call);                                                      \
    if (kc_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      kc_die(__FILE__, __LINE__, "%s: %s", #call, cublasLtGetStatusString(kc_st_));        \
  } while (0)

/* Distinct GEMM problems a program runs: a few per layer kind. */
#define GEMM_CACHE 256

/* Compared with memcmp: no padding (six int32 before the int64). */
typedef struct Problem {
  int32_t ab, c, trans_a, trans_b, align, epi;
  int64_t batch, M, N, K, lda, ldb, ldc, sa, sb, sc;
} Problem;

static_assert(sizeof(Problem) == 6 * 4 + 10 * 8, "Problem has padding");

typedef struct Entry {
  Problem p;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
} Entry;

static struct {
  cublasLtHandle_t handle;
  void *workspace;
  size_t bytes;
  Entry entry[GEMM_CACHE];
  int n;
} g;

/* The largest power of two up to 16 that divides the address. */
static int32_t alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  int32_t al = 16;
  while (al > 1 && a % (uintptr_t)al) al /= 2;
  return al;
}

static cudaDataType_t cuda_type(int32_t t) { return t == KC_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* A column-major rows x cols layout with leading dim ld, batched. */
static cublasLtMatrixLayout_t layout(int32_t type, int64_t rows, int64_t cols, int64_t ld,
                                     int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  KC_CUBLAS(cublasLtMatrixLayoutCreate(&l, cuda_type(type), (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t b = (int32_t)batch;
    KC_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
    KC_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &stride, sizeof stride));
  }
  return l;
}

/* Descriptors and the heuristics' first algorithm for a new problem. */
static void plan(Entry *e) {
  const Problem *p = &e->p;
  KC_CUBLAS(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  /* First operand: row-major B, the second: row-major A (see the top). */
  cublasOperation_t ta = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  /* cuBLASLt's bias is one value per row of its column-major D, which is
   * one per column of our row-major C: the bias of a linear layer. Its
   * GELU is the tanh form, as k_gelu. */
  if (p->epi != KC_EPI_NONE) {
    cublasLtEpilogue_t epi = p->epi == KC_EPI_BIAS ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
    KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  }
  e->la = p->trans_b ? layout(p->ab, p->K, p->N, p->ldb, p->batch, p->sb)
                     : layout(p->ab, p->N, p->K, p->ldb, p->batch, p->sb);
  e->lb = p->trans_a ? layout(p->ab, p->M, p->K, p->lda, p->batch, p->sa)
                     : layout(p->ab, p->K, p->M, p->lda, p->batch, p->sa);
  e->lc = layout(p->c, p->N, p->M, p->ldc, p->batch, p->sc);

  cublasLtMatmulPreference_t pref;
  KC_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = g.bytes;
  uint32_t al = (uint32_t)p->align;
  KC_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws));
  cublasLtMatmulPreferenceAttributes_t aligns[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++)
    KC_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  KC_CUBLAS(cublasLtMatmulAlgoGetHeuristic(g.handle, e->desc, e->la, e->lb, e->lc, e->lc, pref, 1,
                                           &res, &found));
  KC_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
  KC_REQUIRE(found > 0, "cuBLASLt has no algorithm for a %lldx%lldx%lld GEMM", (long long)p->M,
             (long long)p->N, (long long)p->K);
  e->algo = res.algo;
}

static Entry *lookup(const Problem *p) {
  for (int i = 0; i < g.n; i++)
    if (memcmp(&g.entry[i].p, p, sizeof *p) == 0) return &g.entry[i];
  KC_REQUIRE(g.n < GEMM_CACHE, "more than %d distinct GEMMs", GEMM_CACHE);
  Entry *e = &g.entry[g.n++];
  memset(e, 0, sizeof *e);
  e->p = *p;
  plan(e);
  return e;
}

/* C = beta C over an empty inner dimension, which cuBLASLt does not take. */
__global__ void scale_c_kernel(float *C, int64_t M, int64_t N, int64_t ldc, float beta) {
  KC_FOR_ELEMENTS(i, M * N) {
    float *c = C + i / N * ldc + i % N;
    *c = beta == 0.0f ? 0.0f : beta * *c;
  }
}

extern "C" {
void k_cuda_gemm_init(void *workspace, size_t bytes) {
  if (!g.handle) KC_CUBLAS(cublasLtCreate(&g.handle));
  g.workspace = workspace;
  g.bytes = bytes;
}

void k_cuda_gemm_shutdown(void) {
  for (int i = 0; i < g.n; i++) {
    cublasLtMatrixLayoutDestroy(g.entry[i].la);
    cublasLtMatrixLayoutDestroy(g.entry[i].lb);
    cublasLtMatrixLayoutDestroy(g.entry[i].lc);
    cublasLtMatmulDescDestroy(g.entry[i].desc);
  }
  g.n = 0;
  if (g.handle) cublasLtDestroy(g.handle);
  g.handle = NULL;
}

int k_cuda_gemm_cached(void) { return g.n; }
}

/* Every GEMM of the library: the problem's cached plan, the bias (when
 * the epilogue has one) set on its descriptor just before the call. */
static void gemm(KcType ab, KcType c, KcEpilogue epi, const void *bias, int trans_a, int trans_b,
                 int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                 int64_t lda, int64_t stride_a, const void *B, int64_t ldb, int64_t stride_b,
                 float beta, void *C, int64_t ldc, int64_t stride_c) {
  KC_REQUIRE(g.handle, "k_cuda_gemm before k_cuda_gemm_init");
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {
    KC_REQUIRE(epi == KC_EPI_NONE, "an empty GEMM with an epilogue");
    KC_REQUIRE(c == KC_F32 && batch == 1, "an empty bf16 or batched GEMM");
    KC_LAUNCH(KC_GRID(M * N), scale_c_kernel)((float *)C, M, N, ldc, beta);
    KC_LAUNCHED();
    return;
  }
  int32_t al = alignment(A);
  al = alignment(B) < al ? alignment(B) : al;
  al = alignment(C) < al ? alignment(C) : al;
  if (epi != KC_EPI_NONE) al = alignment(bias) < al ? alignment(bias) : al;
  Problem p = {(int32_t)ab, (int32_t)c, trans_a != 0, trans_b != 0, al, (int32_t)epi, batch, M, N,
               K, lda, ldb, ldc, stride_a, stride_b, stride_c};
  Entry *e = lookup(&p);
  if (epi != KC_EPI_NONE)
    KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof bias));
  KC_CUBLAS(cublasLtMatmul(g.handle, e->desc, &alpha, B, e->la, A, e->lb, &beta, C, e->lc, C,
                           e->lc, &e->algo, g.workspace, g.bytes, kc_stream()));
}

extern "C" {
void k_cuda_gemm_ex(KcType ab, KcType c, int trans_a, int trans_b, int64_t batch, int64_t M,
                    int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                    int64_t stride_a, const void *B, int64_t ldb, int64_t stride_b, float beta,
                    void *C, int64_t ldc, int64_t stride_c) {
  gemm(ab, c, KC_EPI_NONE, NULL, trans_a, trans_b, batch, M, N, K, alpha, A, lda, stride_a, B, ldb,
       stride_b, beta, C, ldc, stride_c);
}

void k_cuda_gemm_epilogue(KcType ab, KcType c, KcEpilogue epi, const void *bias, int trans_a,
                          int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                          int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                          int64_t ldc) {
  gemm(ab, c, epi, bias, trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
       0);
}

void k_cuda_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc) {
  k_cuda_gemm_ex(KC_F32, KC_F32, trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta,
                 C, ldc, 0);
}

void k_cuda_gemm_batched(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, int64_t stride_a,
                         const float *B, int64_t ldb, int64_t stride_b, float beta, float *C,
                         int64_t ldc, int64_t stride_c) {
  k_cuda_gemm_ex(KC_F32, KC_F32, trans_a, trans_b, batch, M, N, K, alpha, A, lda, stride_a, B,
                 ldb, stride_b, beta, C, ldc, stride_c);
}
}
