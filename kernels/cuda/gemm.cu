/* Matrix multiplies through cuBLASLt, row-major as cblas.
 *
 * cuBLASLt is column-major, and a row-major matrix read column-major is
 * its transpose: C = op(A) op(B) row-major is C^T = op(B)^T op(A)^T
 * column-major, so B is passed first and A second with their own
 * transposition flags, and C keeps its leading dimension. The algorithm of
 * each distinct problem (types, flags, sizes, leading dimensions, batch
 * and strides, and the alignment of the pointers, which the heuristics
 * take into account) is chosen once by cuBLASLt's heuristics and cached,
 * or with the timed search on (k_cuda_gemm_set_search) the fastest of the
 * heuristics' best few at the problem's first call. The epilogues of
 * k_cuda_gemm_fused (kernels_cuda.h) are cuBLASLt's where its heuristics
 * offer an algorithm, and the unfused composition of our own kernels
 * where they do not. */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
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
/* The most algorithms the timed search tries. */
#define GEMM_SEARCH_MAX 8

/* Compared with memcmp: no padding (eight int32 before the int64). */
typedef struct Problem {
  int32_t ab, c, trans_a, trans_b, align, epi, bias_type, pad_;
  int64_t batch, M, N, K, lda, ldb, ldc, sa, sb, sc, ldaux;
} Problem;

static_assert(sizeof(Problem) == 8 * 4 + 11 * 8, "Problem has padding");

typedef struct Entry {
  Problem p;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  /* The heuristics' best algorithms, best first, for the timed search. */
  cublasLtMatmulAlgo_t cand[GEMM_SEARCH_MAX];
  int ncand;
  bool searched; /* the search ran, or will not */
  bool unfused;  /* no algorithm for the epilogue: the product runs unfused */
} Entry;

static struct {
  cublasLtHandle_t handle;
  void *workspace;
  size_t bytes;
  Entry entry[GEMM_CACHE];
  int n;
  int search;                      /* candidates the timed search tries; <= 1: none */
  bool search_set;                 /* set by k_cuda_gemm_set_search: SHARD_GEMM_SEARCH ignored */
  bool force_unfused;              /* k_cuda_gemm_set_unfused */
  bool reported[KC_EPI_COUNT];     /* a fallback of this epilogue was reported */
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

/* Our epilogues in cuBLASLt's column-major terms (the top of the file):
 * its D is our C transposed, so its bias "along the rows of D" is ours
 * along the columns of C (one value per output feature), its "matrix A"
 * is our B and its "matrix B" our A. */
static cublasLtEpilogue_t lt_epilogue(int32_t epi) {
  switch (epi) {
  case KC_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
  case KC_EPI_BIAS_GELU: return CUBLASLT_EPILOGUE_GELU_BIAS;
  case KC_EPI_BIAS_GELU_AUX: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case KC_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
  case KC_EPI_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  case KC_EPI_BGRAD_A: return CUBLASLT_EPILOGUE_BGRADB;
  case KC_EPI_BGRAD_B: return CUBLASLT_EPILOGUE_BGRADA;
  default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

static bool has_bias(int32_t epi) { return epi != KC_EPI_NONE && epi != KC_EPI_DGELU; }
static bool has_aux(int32_t epi) {
  return epi == KC_EPI_BIAS_GELU_AUX || epi == KC_EPI_DGELU || epi == KC_EPI_DGELU_BGRAD;
}

/* The epilogue's attributes, and its pointers, which the heuristics read
 * for their alignment (and cublasLtMatmul for the data). */
static void set_epilogue(Entry *e) {
  const Problem *p = &e->p;
  if (p->epi == KC_EPI_NONE) return;
  cublasLtEpilogue_t epi = lt_epilogue(p->epi);
  KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  /* The bias (and bias gradient) is of D's type unless this says otherwise. */
  if (p->bias_type != p->c) {
    int32_t bt = (int32_t)cuda_type(p->bias_type);
    KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                             sizeof bt));
  }
  if (has_aux(p->epi))
    KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                             &p->ldaux, sizeof p->ldaux));
}

static void set_pointers(Entry *e, const KcGemmEpi *x) {
  if (has_bias(e->p.epi))
    KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x->bias,
                                             sizeof x->bias));
  if (has_aux(e->p.epi))
    KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                             &x->aux, sizeof x->aux));
}

static const char *const epi_name[KC_EPI_COUNT] = {
    "none", "bias", "bias+gelu", "bias+gelu+aux", "dgelu", "dgelu+bgrad", "bgrad(A)", "bgrad(B)"};

/* Descriptors and the heuristics' best algorithms for a new problem. An
 * epilogue they have no algorithm for marks the problem unfused. */
static void plan(Entry *e, const KcGemmEpi *x) {
  const Problem *p = &e->p;
  KC_CUBLAS(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  /* First operand: row-major B, the second: row-major A (see the top). */
  cublasOperation_t ta = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  KC_CUBLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  /* cuBLASLt's GELU is the tanh form, as k_gelu. */
  set_epilogue(e);
  set_pointers(e, x);
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
  cublasLtMatmulHeuristicResult_t res[GEMM_SEARCH_MAX];
  int want = g.search > 1 ? (g.search < GEMM_SEARCH_MAX ? g.search : GEMM_SEARCH_MAX) : 1;
  int found = 0;
  /* An epilogue the library cannot run for these types may come back as
   * "not supported" rather than as no algorithm. */
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g.handle, e->desc, e->la, e->lb, e->lc,
                                                     e->lc, pref, want, res, &found);
  KC_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
  if (p->epi != KC_EPI_NONE && (st != CUBLAS_STATUS_SUCCESS || found == 0)) {
    e->unfused = true;
    if (!g.reported[p->epi])
      fprintf(stderr, "k_cuda_gemm: cuBLASLt has no algorithm for the %s epilogue of a "
                      "%lldx%lldx%lld %s GEMM; such products run unfused\n",
              epi_name[p->epi], (long long)p->M, (long long)p->N, (long long)p->K,
              p->c == KC_BF16 ? "bf16" : "fp32");
    g.reported[p->epi] = true;
    return;
  }
  KC_CUBLAS(st);
  KC_REQUIRE(found > 0, "cuBLASLt has no algorithm for a %lldx%lldx%lld GEMM", (long long)p->M,
             (long long)p->N, (long long)p->K);
  for (int i = 0; i < found; i++) e->cand[i] = res[i].algo;
  e->ncand = found;
  e->algo = res[0].algo;
  e->searched = found < 2;
}

static Entry *lookup(const Problem *p, const KcGemmEpi *x) {
  for (int i = 0; i < g.n; i++)
    if (memcmp(&g.entry[i].p, p, sizeof *p) == 0) return &g.entry[i];
  KC_REQUIRE(g.n < GEMM_CACHE, "more than %d distinct GEMMs", GEMM_CACHE);
  Entry *e = &g.entry[g.n++];
  memset(e, 0, sizeof *e);
  e->p = *p;
  plan(e, x);
  return e;
}

/* The operands of one call, as cublasLtMatmul takes them. */
typedef struct Call {
  float alpha, beta;
  const void *A, *B;
  void *C;
} Call;

static cublasStatus_t matmul(Entry *e, const Call *c, const cublasLtMatmulAlgo_t *algo) {
  return cublasLtMatmul(g.handle, e->desc, &c->alpha, c->B, e->la, c->A, e->lb, &c->beta, c->C,
                        e->lc, c->C, e->lc, algo, g.workspace, g.bytes, kc_stream());
}

/* The timed search at a problem's first call: each candidate once, timed
 * with events on the stream, the fastest kept. Only where running the
 * product several times leaves the same result (beta = 0: C, aux and a
 * bias gradient are overwritten, never added to) and not while the stream
 * is being captured into a graph (no synchronising then). */
static void search(Entry *e, const Call *c) {
  cudaStreamCaptureStatus cap;
  KC_CHECK(cudaStreamIsCapturing(kc_stream(), &cap));
  if (cap != cudaStreamCaptureStatusNone) return;
  e->searched = true;
  if (c->beta != 0.0f) return;
  cudaEvent_t t0, t1;
  KC_CHECK(cudaEventCreate(&t0));
  KC_CHECK(cudaEventCreate(&t1));
  float best = 0;
  bool have = false;
  for (int i = 0; i < e->ncand; i++) {
    KC_CHECK(cudaEventRecord(t0, kc_stream()));
    cublasStatus_t st = matmul(e, c, &e->cand[i]);
    KC_CHECK(cudaEventRecord(t1, kc_stream()));
    KC_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    KC_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    if (st == CUBLAS_STATUS_SUCCESS && (!have || ms < best)) best = ms, e->algo = e->cand[i], have = true;
  }
  KC_CHECK(cudaEventDestroy(t0));
  KC_CHECK(cudaEventDestroy(t1));
}

/* C = beta C over an empty inner dimension, which cuBLASLt does not take. */
__global__ void scale_c_kernel(float *C, int64_t M, int64_t N, int64_t ldc, float beta) {
  KC_FOR_ELEMENTS(i, M * N) {
    float *c = C + i / N * ldc + i % N;
    *c = beta == 0.0f ? 0.0f : beta * *c;
  }
}

/* out[j] = the sum over k < K of x[j, k] (rows) or x[k, j] (columns) with
 * leading dimension ld: one thread per output, k in order, in double, as
 * k_cuda_sum_rows. The bias gradient of an operand, unfused. */
template <typename T>
__global__ void sum_k_kernel(float *out, const T *x, int64_t ld, int64_t n, int64_t K, int rows) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= n) return;
  double acc = 0;
  for (int64_t k = 0; k < K; k++) acc += kc_f(x[rows ? j * ld + k : k * ld + j]);
  out[j] = (float)acc;
}

static void sum_k(KcType t, float *out, const void *x, int64_t ld, int64_t n, int64_t K, int rows) {
  if (n == 0) return;
  if (t == KC_BF16) KC_LAUNCH(KC_GRID(n), sum_k_kernel<bf16>)(out, CB16(x), ld, n, K, rows);
  else KC_LAUNCH(KC_GRID(n), sum_k_kernel<float>)(out, (const float *)x, ld, n, K, rows);
  KC_LAUNCHED();
}

extern "C" {
void k_cuda_gemm_set_search(int n) {
  g.search = n;
  g.search_set = true;
}
void k_cuda_gemm_set_unfused(int on) { g.force_unfused = on != 0; }

void k_cuda_gemm_init(void *workspace, size_t bytes) {
  if (!g.handle) {
    KC_CUBLAS(cublasLtCreate(&g.handle));
    const char *s = getenv("SHARD_GEMM_SEARCH");
    if (s && *s && !g.search_set) g.search = atoi(s);
  }
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

static int gemm(KcType ab, KcType c, const KcGemmEpi *x, int trans_a, int trans_b, int64_t batch,
                int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                int64_t stride_a, const void *B, int64_t ldb, int64_t stride_b, float beta,
                void *C, int64_t ldc, int64_t stride_c);

/* The product of an epilogue cuBLASLt cannot run, unfused: the plain GEMM
 * and the kernels an unfused program would call after it. */
static void unfused(KcType ab, KcType c, const KcGemmEpi *x, int ta, int tb, int64_t M, int64_t N,
                    int64_t K, float alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                    float beta, void *C, int64_t ldc) {
  bool bf = c == KC_BF16;
  int64_t n = M * N;
  void *out = x->epi == KC_EPI_BIAS_GELU_AUX ? x->aux : C;
  gemm(ab, c, NULL, ta, tb, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, out, out == C ? ldc : N,
       0);
  switch (x->epi) {
  case KC_EPI_BIAS:
  case KC_EPI_BIAS_GELU:
  case KC_EPI_BIAS_GELU_AUX:
    KC_REQUIRE(x->bias_type == c && ldc == N, "an unfused bias epilogue needs the bias of C's "
                                              "type and ldc = N");
    if (bf) k_cuda_add_bias_bf16((kc_bf16 *)out, (const kc_bf16 *)x->bias, M, N);
    else k_cuda_add_bias((float *)out, (const float *)x->bias, M, N);
    if (x->epi == KC_EPI_BIAS) break;
    if (bf) k_cuda_gelu_fwd_bf16((kc_bf16 *)C, (const kc_bf16 *)out, n);
    else k_cuda_gelu_fwd((float *)C, (const float *)out, n);
    break;
  case KC_EPI_DGELU:
  case KC_EPI_DGELU_BGRAD:
    if (bf) k_cuda_gelu_bwd_bf16((kc_bf16 *)C, (const kc_bf16 *)x->aux, (const kc_bf16 *)C, n);
    else k_cuda_gelu_bwd((float *)C, (const float *)x->aux, (const float *)C, n);
    if (x->epi == KC_EPI_DGELU) break;
    if (bf) k_cuda_sum_rows_bf16((float *)x->bias, (const kc_bf16 *)C, M, N);
    else k_cuda_sum_rows((float *)x->bias, (const float *)C, M, N);
    break;
  /* op(A)[m, k] is A[m, k] (a row sum) or, transposed, A[k, m]. */
  case KC_EPI_BGRAD_A: sum_k(ab, (float *)x->bias, A, lda, M, K, !ta); break;
  case KC_EPI_BGRAD_B: sum_k(ab, (float *)x->bias, B, ldb, N, K, tb); break;
  default: break;
  }
}

/* What an epilogue needs of its arguments (kernels_cuda.h). */
static void check_epilogue(const KcGemmEpi *x, int64_t batch, int64_t N, float beta, int64_t ldc) {
  const char *name = epi_name[x->epi];
  KC_REQUIRE(x->epi > KC_EPI_NONE && x->epi < KC_EPI_COUNT, "epilogue %d", (int)x->epi);
  KC_REQUIRE(batch == 1, "a batched GEMM with the %s epilogue", name);
  KC_REQUIRE(!has_bias(x->epi) || x->bias, "the %s epilogue without its bias", name);
  if (x->epi >= KC_EPI_DGELU_BGRAD)
    KC_REQUIRE(x->bias_type == KC_F32, "the %s epilogue writes an fp32 bias gradient", name);
  /* The operands' bias gradients leave C to the GEMM: any beta and ldc. */
  if (x->epi < KC_EPI_BIAS_GELU_AUX || x->epi >= KC_EPI_BGRAD_A) return;
  KC_REQUIRE(beta == 0.0f && ldc == N, "the %s epilogue takes beta = 0 and ldc = N", name);
  if (has_aux(x->epi))
    KC_REQUIRE(x->aux && x->ldaux == N && N % 8 == 0,
               "the %s epilogue needs aux with ldaux = N, a multiple of 8 (N = %lld)", name,
               (long long)N);
}

/* Every GEMM of the library: the problem's cached plan, the epilogue's
 * pointers set on its descriptor just before the call. Returns whether
 * cuBLASLt ran the epilogue (1 without one). */
static int gemm(KcType ab, KcType c, const KcGemmEpi *x, int trans_a, int trans_b, int64_t batch,
                int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                int64_t stride_a, const void *B, int64_t ldb, int64_t stride_b, float beta,
                void *C, int64_t ldc, int64_t stride_c) {
  KC_REQUIRE(g.handle, "k_cuda_gemm before k_cuda_gemm_init");
  KcEpilogue epi = x ? x->epi : KC_EPI_NONE;
  if (epi != KC_EPI_NONE) check_epilogue(x, batch, N, beta, ldc);
  if (batch == 0 || M == 0 || N == 0) return 1;
  if (K == 0) {
    KC_REQUIRE(epi == KC_EPI_NONE, "an empty GEMM with an epilogue");
    KC_REQUIRE(c == KC_F32 && batch == 1, "an empty bf16 or batched GEMM");
    KC_LAUNCH(KC_GRID(M * N), scale_c_kernel)((float *)C, M, N, ldc, beta);
    KC_LAUNCHED();
    return 1;
  }
  int32_t al = alignment(A);
  al = alignment(B) < al ? alignment(B) : al;
  al = alignment(C) < al ? alignment(C) : al;
  if (has_bias(epi)) al = alignment(x->bias) < al ? alignment(x->bias) : al;
  if (has_aux(epi)) al = alignment(x->aux) < al ? alignment(x->aux) : al;
  Problem p = {(int32_t)ab, (int32_t)c, trans_a != 0, trans_b != 0, al, (int32_t)epi,
               (int32_t)(x ? x->bias_type : c), 0, batch, M, N, K, lda, ldb, ldc, stride_a,
               stride_b, stride_c, has_aux(epi) ? x->ldaux : 0};
  Entry *e = lookup(&p, x);
  if (e->unfused || (epi != KC_EPI_NONE && g.force_unfused)) {
    unfused(ab, c, x, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return 0;
  }
  if (epi != KC_EPI_NONE) set_pointers(e, x);
  Call call = {alpha, beta, A, B, C};
  if (!e->searched) search(e, &call);
  KC_CUBLAS(matmul(e, &call, &e->algo));
  return 1;
}

extern "C" {
void k_cuda_gemm_ex(KcType ab, KcType c, int trans_a, int trans_b, int64_t batch, int64_t M,
                    int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                    int64_t stride_a, const void *B, int64_t ldb, int64_t stride_b, float beta,
                    void *C, int64_t ldc, int64_t stride_c) {
  gemm(ab, c, NULL, trans_a, trans_b, batch, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
       beta, C, ldc, stride_c);
}

int k_cuda_gemm_fused(KcType ab, KcType c, const KcGemmEpi *epi, int trans_a, int trans_b,
                      int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                      const void *B, int64_t ldb, float beta, void *C, int64_t ldc) {
  return gemm(ab, c, epi, trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
              0);
}

void k_cuda_gemm_epilogue(KcType ab, KcType c, KcEpilogue epi, const void *bias, int trans_a,
                          int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                          int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                          int64_t ldc) {
  KcGemmEpi x = {epi, (void *)bias, c, NULL, 0};
  gemm(ab, c, &x, trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0);
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
