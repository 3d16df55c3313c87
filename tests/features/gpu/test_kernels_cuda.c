/* Every CUDA kernel (kernels/cuda/kernels_cuda.h) against its CPU twin
 * (kernels/cpu/kernels.h, the f32 build) on fresh random data at several
 * shapes, odd ones included.
 *
 * Each check runs the CPU kernel and the GPU kernel on the same inputs
 * (for bf16 kernels, inputs rounded to bf16 first, so both sides see the
 * same numbers) and prints one line: kernel, shape, error, tolerance. The
 * error is normwise: max |gpu - cpu| / max |cpu|; fp32 kernels must be
 * within 1e-5, bf16 ones within 1e-2, and a NaN anywhere in the GPU's
 * output fails. Every GPU output buffer is filled with NaN bytes before
 * the kernel runs, so an element the kernel forgot to write shows up as a
 * failure. Kernels whose results must be the CPU's bits (the dropout mask,
 * the embedding backward, casts) are checked with tolerance 0.
 *
 * With --small only the first two shapes of each list run (for the runs
 * under compute-sanitizer, which are slow), with --shapes N the first N
 * (the CPU emulator of tests/features/emu runs 3); --moe runs the routed
 * layer's shapes alone; --bench-attention times the
 * attention paths instead (bench/gpu.sh). Without a CUDA device
 * (cudaGetDeviceCount fails or finds none) the program prints why and
 * exits 77, which ctest reports as skipped. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels.h"
#include "kernels_cuda.h"

#define SKIP 77
#define TOL32 1e-5
#define TOL16 1e-2
/* cuBLASLt's GELU epilogues (GELU, GELU_AUX_BIAS, DGELU) compute the tanh
 * form of GELU as k_gelu does, but its kernels may evaluate tanh with the
 * hardware's approximate instruction (tanh.approx.f32: relative error up
 * to about 2^-11), which a fused fp32 output can carry at about half that,
 * times |x|: the fused GELU outputs get this tolerance instead of TOL32.
 * The unfused forms (our kernels) keep TOL32, and bf16 keeps TOL16, which
 * is larger. */
#define TOL_GELU32 5e-4

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static int failures, checks;

/* --- memory: everything a test allocates is freed by end_test ------------ */

enum { MAXBUF = 256 };
static void *dbufs[MAXBUF], *hbufs[MAXBUF];
static int ndbufs, nhbufs;

static void *dalloc(size_t bytes) { /* poisoned: all bits set, NaN as float and bf16 */
  void *p;
  CK(cudaMalloc(&p, bytes > 0 ? bytes : 1));
  CK(cudaMemset(p, 0xff, bytes > 0 ? bytes : 1));
  if (ndbufs == MAXBUF) abort();
  return dbufs[ndbufs++] = p;
}

static void *halloc(size_t bytes) {
  void *p = calloc(bytes > 0 ? bytes : 1, 1);
  if (!p || nhbufs == MAXBUF) abort();
  return hbufs[nhbufs++] = p;
}

static void end_test(void) {
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < ndbufs; i++) CK(cudaFree(dbufs[i]));
  for (int i = 0; i < nhbufs; i++) free(hbufs[i]);
  ndbufs = nhbufs = 0;
}

/* --- data ------------------------------------------------------------------ */

static uint64_t rng = 0x6a09e667f3bcc908ull;

static double urand(void) { /* uniform in [-1, 1) */
  rng += 0x9e3779b97f4a7c15ull;
  uint64_t z = rng;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0 * 2 - 1;
}

static float *hrand(int64_t n, double scale) {
  float *x = halloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = (float)(urand() * scale);
  return x;
}

static int32_t *hids(int64_t n, int64_t lo, int64_t hi) { /* in [lo, hi) */
  int32_t *x = halloc((size_t)n * sizeof(int32_t));
  for (int64_t i = 0; i < n; i++) x[i] = (int32_t)(lo + (int64_t)((urand() + 1) / 2 * (double)(hi - lo)) % (hi - lo));
  return x;
}

static float *hcopy(const float *x, int64_t n) {
  float *y = halloc((size_t)n * sizeof(float));
  memcpy(y, x, (size_t)n * sizeof(float));
  return y;
}

/* bf16 by round to nearest even, and back. */
static kc_bf16 to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (kc_bf16)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (kc_bf16)(u >> 16);
}
static float from_bf16(kc_bf16 b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void round_bf16(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = from_bf16(to_bf16(x[i]));
}

/* Device copies in fp32 (bf == 0) or bf16 (bf == 1), and back to fp32. */
static void *dnew(int64_t n, int bf) { return dalloc((size_t)n * (bf ? 2 : 4)); }
static void *dput(const float *x, int64_t n, int bf) {
  void *d = dnew(n, bf);
  if (bf) {
    kc_bf16 *t = halloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) t[i] = to_bf16(x[i]);
    CK(cudaMemcpy(d, t, (size_t)n * 2, cudaMemcpyHostToDevice));
  } else {
    CK(cudaMemcpy(d, x, (size_t)n * 4, cudaMemcpyHostToDevice));
  }
  return d;
}
static void *dput_raw(const void *x, size_t bytes) {
  void *d = dalloc(bytes);
  CK(cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice));
  return d;
}
static float *dget(const void *d, int64_t n, int bf) {
  float *x = halloc((size_t)n * sizeof(float));
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());
  if (bf) {
    kc_bf16 *t = halloc((size_t)n * 2);
    CK(cudaMemcpy(t, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++) x[i] = from_bf16(t[i]);
  } else {
    CK(cudaMemcpy(x, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
  }
  return x;
}

/* --- checks ---------------------------------------------------------------- */

/* check() with the error taken relative to at least `floor`: for outputs
 * whose exact value is zero, or tiny against the terms that cancel to give
 * it (a norm's dx over one column, attention's dq and dk over one key),
 * where the CPU's result is rounding noise and max |cpu| says nothing of
 * the inputs' scale (1 in these tests). */
static void check_floor(const char *kernel, const char *shape, const float *got,
                        const float *want, int64_t n, double tol, double floor);
static void check(const char *kernel, const char *shape, const float *got, const float *want,
                  int64_t n, double tol) {
  check_floor(kernel, shape, got, want, n, tol, 0);
}
static void check_floor(const char *kernel, const char *shape, const float *got,
                        const float *want, int64_t n, double tol, double floor) {
  double diff = 0, scale = floor;
  int nan = 0;
  for (int64_t i = 0; i < n; i++) {
    if (got[i] != got[i] || (isinf(got[i]) && got[i] != want[i])) nan = 1;
    double d = fabs((double)got[i] - (double)want[i]);
    if (isinf(got[i]) && got[i] == want[i]) d = 0; /* an expected -inf (an empty max) */
    diff = d > diff ? d : diff;
    double a = isinf(want[i]) ? 0 : fabs((double)want[i]);
    scale = a > scale ? a : scale;
  }
  double err = nan ? NAN : scale > 0 ? diff / scale : diff;
  int ok = err <= tol; /* NaN fails */
  printf("%-26s %-30s err %.2e  tol %.0e  %s\n", kernel, shape, err, tol, ok ? "ok" : "FAIL");
  checks++;
  failures += !ok;
}

static char shape_buf[256];
#define SHAPE(...) (snprintf(shape_buf, sizeof shape_buf, __VA_ARGS__), shape_buf)
static const char *name(const char *base, int bf) {
  static char buf[128];
  snprintf(buf, sizeof buf, "%s%s", base, bf ? "_bf16" : "");
  return buf;
}
static double tol(int bf) { return bf ? TOL16 : TOL32; }
/* The tolerance of an output that went through cuBLASLt's GELU (unf = 0)
 * or through our GELU kernels (unf = 1). */
static double gelu_tol(int bf, int unf) { return bf ? TOL16 : unf ? TOL32 : TOL_GELU32; }

/* --- GEMM ------------------------------------------------------------------ */

/* C = alpha op(A) op(B) + beta C in all four transpositions, fp32 and bf16
 * inputs (fp32 output), plus a batched product with a shared B. */
static void test_gemm(int64_t M, int64_t N, int64_t K) {
  for (int bf = 0; bf < 2; bf++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
        int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
        float *A = hrand(na, 1), *B = hrand(nb, 1), *C = hrand(nc, 1);
        if (bf) { round_bf16(A, na); round_bf16(B, nb); }
        void *dA = dput(A, na, bf), *dB = dput(B, nb, bf);
        float *dC = dput(C, nc, 0);
        k_cuda_gemm_ex(bf ? KC_BF16 : KC_F32, KC_F32, ta, tb, 1, M, N, K, 0.75f, dA, lda, 0, dB,
                       ldb, 0, 0.5f, dC, ldc, 0);
        k_gemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.5f, C, ldc);
        check(name("gemm", bf), SHAPE("%s%s M%lld N%lld K%lld", ta ? "T" : "N", tb ? "T" : "N",
                                      (long long)M, (long long)N, (long long)K),
              dget(dC, nc, 0), C, nc, tol(bf));
        end_test();
      }
  /* Batched, B shared (stride 0), and the bf16-output form. */
  int64_t batch = 3;
  float *A = hrand(batch * M * K, 1), *B = hrand(K * N, 1), *C = hrand(batch * M * N, 1);
  float *dA = dput(A, batch * M * K, 0), *dB = dput(B, K * N, 0), *dC = dnew(batch * M * N, 0);
  k_cuda_gemm_batched(0, 0, batch, M, N, K, 1, dA, K, M * K, dB, N, 0, 0, dC, N, M * N);
  k_gemm_batched(0, 0, batch, M, N, K, 1, A, K, M * K, B, N, 0, 0, C, N, M * N);
  check("gemm_batched", SHAPE("b3 M%lld N%lld K%lld", (long long)M, (long long)N, (long long)K),
        dget(dC, batch * M * N, 0), C, batch * M * N, TOL32);
  round_bf16(A, M * K);
  round_bf16(B, K * N);
  void *hA = dput(A, M * K, 1), *hB = dput(B, K * N, 1), *hC = dnew(M * N, 1);
  k_cuda_gemm_ex(KC_BF16, KC_BF16, 0, 0, 1, M, N, K, 1, hA, K, 0, hB, N, 0, 0, hC, N, 0);
  k_gemm(0, 0, M, N, K, 1, A, K, B, N, 0, C, N);
  check("gemm_bf16_out", SHAPE("M%lld N%lld K%lld", (long long)M, (long long)N, (long long)K),
        dget(hC, M * N, 1), C, M * N, TOL16);
  end_test();
}

/* C = epi(A B + bias): cuBLASLt's bias and GELU epilogues against k_gemm,
 * k_add_bias and k_gelu; in bf16, A, B, the bias and C are bf16. Whether
 * cuBLASLt's GELU holds to the fp32 tolerance is part of what this finds
 * out (the CUDA target uses the epilogue only where it does). Each runs
 * fused and, with k_cuda_gemm_set_unfused, through the fallback that runs
 * where cuBLASLt has no algorithm for the epilogue. */
static const char *epi_label(const char *base, int bf, int unf) {
  static char buf[128];
  snprintf(buf, sizeof buf, "%s%s%s", base, bf ? "_bf16" : "", unf ? "/unf" : "");
  return buf;
}

static void test_gemm_epilogue(int64_t M, int64_t N, int64_t K) {
  for (int unf = 0; unf < 2; unf++)
    for (int bf = 0; bf < 2; bf++)
      for (int epi = KC_EPI_BIAS; epi <= KC_EPI_BIAS_GELU; epi++) {
        float *A = hrand(M * K, 1), *B = hrand(K * N, 1), *bias = hrand(N, 1), *C = halloc(M * N * 4);
        if (bf) { round_bf16(A, M * K); round_bf16(B, K * N); round_bf16(bias, N); }
        void *dA = dput(A, M * K, bf), *dB = dput(B, K * N, bf), *db = dput(bias, N, bf);
        void *dC = dnew(M * N, bf);
        KcType t = bf ? KC_BF16 : KC_F32;
        k_cuda_gemm_set_unfused(unf);
        k_cuda_gemm_epilogue(t, t, (KcEpilogue)epi, db, 0, 0, M, N, K, 1, dA, K, dB, N, 0, dC, N);
        k_gemm(0, 0, M, N, K, 1, A, K, B, N, 0, C, N);
        k_add_bias(C, bias, M, N);
        if (epi == KC_EPI_BIAS_GELU)
          for (int64_t i = 0; i < M * N; i++) C[i] = k_gelu(C[i]);
        check(epi_label(epi == KC_EPI_BIAS ? "gemm_bias" : "gemm_bias_gelu", bf, unf),
              SHAPE("M%lld N%lld K%lld", (long long)M, (long long)N, (long long)K),
              dget(dC, M * N, bf), C, M * N,
              epi == KC_EPI_BIAS_GELU ? gelu_tol(bf, unf) : tol(bf));
        end_test();
      }
  k_cuda_gemm_set_unfused(0);
}

/* The training forms. Forward: aux = A B + bias (the pre-activation the
 * backward reads), C = gelu(aux). Backward: C = gelu'(aux) (A B), and with
 * the bias gradient the sum of C's rows (fp32). N is a multiple of 8
 * (cuBLASLt's rule for aux's leading dimension). */
static void test_gemm_gelu_aux(int64_t M, int64_t N, int64_t K) {
  for (int unf = 0; unf < 2; unf++)
    for (int bf = 0; bf < 2; bf++) {
      k_cuda_gemm_set_unfused(unf);
      KcType t = bf ? KC_BF16 : KC_F32;
      const char *shape = SHAPE("M%lld N%lld K%lld", (long long)M, (long long)N, (long long)K);
      float *A = hrand(M * K, 1), *B = hrand(K * N, 1), *bias = hrand(N, 1), *pre = halloc(M * N * 4);
      if (bf) { round_bf16(A, M * K); round_bf16(B, K * N); round_bf16(bias, N); }
      void *dA = dput(A, M * K, bf), *dB = dput(B, K * N, bf), *db = dput(bias, N, bf);
      void *dC = dnew(M * N, bf), *daux = dnew(M * N, bf);
      KcGemmEpi fwd = {KC_EPI_BIAS_GELU_AUX, db, t, daux, N};
      k_cuda_gemm_fused(t, t, &fwd, 0, 0, M, N, K, 1, dA, K, dB, N, 0, dC, N);
      k_gemm(0, 0, M, N, K, 1, A, K, B, N, 0, pre, N);
      k_add_bias(pre, bias, M, N);
      float *y = halloc(M * N * 4);
      for (int64_t i = 0; i < M * N; i++) y[i] = k_gelu(pre[i]);
      check(epi_label("gemm_gelu_aux:aux", bf, unf), shape, dget(daux, M * N, bf), pre, M * N, tol(bf));
      check(epi_label("gemm_gelu_aux:y", bf, unf), shape, dget(dC, M * N, bf), y, M * N,
            gelu_tol(bf, unf));
      end_test();
      for (int bgrad = 0; bgrad < 2; bgrad++) {
        float *A2 = hrand(M * K, 1), *B2 = hrand(K * N, 1), *x = hrand(M * N, 2), *dx = halloc(M * N * 4);
        if (bf) { round_bf16(A2, M * K); round_bf16(B2, K * N); round_bf16(x, M * N); }
        void *dA2 = dput(A2, M * K, bf), *dB2 = dput(B2, K * N, bf), *dx_ = dput(x, M * N, bf);
        void *dD = dnew(M * N, bf);
        float *dbias = dnew(N, 0);
        KcGemmEpi bwd = {bgrad ? KC_EPI_DGELU_BGRAD : KC_EPI_DGELU, dbias, KC_F32, dx_, N};
        k_cuda_gemm_fused(t, t, &bwd, 0, 0, M, N, K, 1, dA2, K, dB2, N, 0, dD, N);
        k_gemm(0, 0, M, N, K, 1, A2, K, B2, N, 0, dx, N);
        for (int64_t i = 0; i < M * N; i++) dx[i] = k_gelu_grad(x[i], dx[i]);
        check(epi_label(bgrad ? "gemm_dgelu_bgrad:dx" : "gemm_dgelu", bf, unf), shape,
              dget(dD, M * N, bf), dx, M * N, gelu_tol(bf, unf));
        if (bgrad) {
          float *sum = halloc(N * 4);
          k_sum_rows(sum, dx, M, N);
          check(epi_label("gemm_dgelu_bgrad:db", bf, unf), shape, dget(dbias, N, 0), sum, N,
                gelu_tol(bf, unf));
        }
        end_test();
      }
    }
  k_cuda_gemm_set_unfused(0);
}

/* The bias gradient of an operand, as in a weight gradient: C = A^T B
 * (beta 0.5 onto an old C) and bias = the sum over k of op(A) (length M)
 * or op(B) (length N), in every transposition. */
static void test_gemm_bgrad(int64_t M, int64_t N, int64_t K) {
  for (int unf = 0; unf < 2; unf++)
    for (int bf = 0; bf < 2; bf++)
      for (int which = 0; which < 2; which++)
        for (int tr = 0; tr < 2; tr++) {
          k_cuda_gemm_set_unfused(unf);
          int ta = which == 0 ? tr : 1, tb = which == 1 ? tr : 0;
          int64_t lda = ta ? M : K, ldb = tb ? K : N, na = M * K, nb = K * N;
          float *A = hrand(na, 1), *B = hrand(nb, 1), *C = hrand(M * N, 1);
          if (bf) { round_bf16(A, na); round_bf16(B, nb); }
          void *dA = dput(A, na, bf), *dB = dput(B, nb, bf);
          float *dC = dput(C, M * N, 0), *db = dnew(which ? N : M, 0);
          KcGemmEpi x = {which ? KC_EPI_BGRAD_B : KC_EPI_BGRAD_A, db, KC_F32, NULL, 0};
          k_cuda_gemm_fused(bf ? KC_BF16 : KC_F32, KC_F32, &x, ta, tb, M, N, K, 1, dA, lda, dB, ldb,
                            0.5f, dC, N);
          k_gemm(ta, tb, M, N, K, 1, A, lda, B, ldb, 0.5f, C, N);
          int64_t n = which ? N : M;
          float *want = halloc(n * 4);
          for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
              s += which ? B[tb ? j * ldb + k : k * ldb + j] : A[ta ? k * lda + j : j * lda + k];
            want[j] = (float)s;
          }
          const char *shape = SHAPE("%s%s M%lld N%lld K%lld", ta ? "T" : "N", tb ? "T" : "N",
                                    (long long)M, (long long)N, (long long)K);
          check(epi_label(which ? "gemm_bgradb:c" : "gemm_bgrada:c", bf, unf), shape,
                dget(dC, M * N, 0), C, M * N, tol(bf));
          check(epi_label(which ? "gemm_bgradb:db" : "gemm_bgrada:db", bf, unf), shape,
                dget(db, n, 0), want, n, tol(bf));
          end_test();
        }
  k_cuda_gemm_set_unfused(0);
}

/* --- element-wise ------------------------------------------------------------ */

static void test_bias(int64_t rows, int64_t n) {
  for (int bf = 0; bf < 2; bf++) {
    float *y = hrand(rows * n, 1), *b = hrand(n, 1);
    if (bf) { round_bf16(y, rows * n); round_bf16(b, n); }
    void *dy = dput(y, rows * n, bf), *db = dput(b, n, bf);
    float *dsum = dnew(n, 0);
    if (bf) {
      k_cuda_add_bias_bf16(dy, db, rows, n);
      k_cuda_sum_rows_bf16(dsum, dy, rows, n);
    } else {
      k_cuda_add_bias(dy, db, rows, n);
      k_cuda_sum_rows(dsum, dy, rows, n);
    }
    float *got = dget(dy, rows * n, bf), *sum = halloc((size_t)n * 4);
    k_add_bias(y, b, rows, n);
    check(name("add_bias", bf), SHAPE("%lldx%lld", (long long)rows, (long long)n), got, y,
          rows * n, tol(bf));
    k_sum_rows(sum, bf ? got : y, rows, n); /* the sums of what the GPU holds */
    check(name("sum_rows", bf), SHAPE("%lldx%lld", (long long)rows, (long long)n),
          dget(dsum, n, 0), sum, n, TOL32);
    end_test();
  }
}

static void test_activations(int64_t n) {
  for (int bf = 0; bf < 2; bf++) {
    float *x = hrand(n, 4), *u = hrand(n, 2), *dy = hrand(n, 1);
    if (bf) { round_bf16(x, n); round_bf16(u, n); round_bf16(dy, n); }
    void *dx_ = dput(x, n, bf), *du = dput(u, n, bf), *ddy = dput(dy, n, bf);
    void *y1 = dnew(n, bf), *g1 = dnew(n, bf), *y2 = dnew(n, bf), *g2 = dnew(n, bf),
         *g3 = dnew(n, bf), *y3 = dnew(n, bf);
    if (bf) {
      k_cuda_gelu_fwd_bf16(y1, dx_, n);
      k_cuda_gelu_bwd_bf16(g1, dx_, ddy, n);
      k_cuda_swiglu_fwd_bf16(y2, dx_, du, n);
      k_cuda_swiglu_bwd_bf16(g2, g3, dx_, du, ddy, n);
      k_cuda_add_bf16(y3, dx_, du, n);
    } else {
      k_cuda_gelu_fwd(y1, dx_, n);
      k_cuda_gelu_bwd(g1, dx_, ddy, n);
      k_cuda_swiglu_fwd(y2, dx_, du, n);
      k_cuda_swiglu_bwd(g2, g3, dx_, du, ddy, n);
      k_cuda_add(y3, dx_, du, n);
    }
    float *r1 = halloc(n * 4), *r2 = halloc(n * 4), *r3 = halloc(n * 4), *r4 = halloc(n * 4),
          *r5 = halloc(n * 4), *r6 = halloc(n * 4);
    for (int64_t i = 0; i < n; i++) {
      r1[i] = k_gelu(x[i]);
      r2[i] = k_gelu_grad(x[i], dy[i]);
      r3[i] = k_silu(x[i]) * u[i];
      r4[i] = k_silu_grad(x[i], dy[i] * u[i]);
      r5[i] = dy[i] * k_silu(x[i]);
      r6[i] = x[i] + u[i];
    }
    const char *sh = SHAPE("n%lld", (long long)n);
    check(name("gelu_fwd", bf), sh, dget(y1, n, bf), r1, n, tol(bf));
    check(name("gelu_bwd", bf), sh, dget(g1, n, bf), r2, n, tol(bf));
    check(name("swiglu_fwd", bf), sh, dget(y2, n, bf), r3, n, tol(bf));
    check(name("swiglu_bwd_gate", bf), sh, dget(g2, n, bf), r4, n, tol(bf));
    check(name("swiglu_bwd_up", bf), sh, dget(g3, n, bf), r5, n, tol(bf));
    check(name("add", bf), sh, dget(y3, n, bf), r6, n, tol(bf));
    end_test();
  }
  /* Accumulation into fp32, scaling, and the casts (exact). */
  float *y = hrand(n, 1), *x = hrand(n, 1), *xb = hcopy(x, n);
  round_bf16(xb, n);
  float *dy = dput(y, n, 0), *dy2 = dput(y, n, 0), *dx = dput(x, n, 0), *ds = dnew(n, 0);
  void *dxb = dput(xb, n, 1), *dcast = dnew(n, 1);
  float *dback = dnew(n, 0);
  k_cuda_accumulate(dy, dx, n);
  k_cuda_accumulate_bf16(dy2, dxb, n);
  k_cuda_scale(ds, dx, -0.375f, n);
  k_cuda_cast_f32_bf16(dcast, dx, n);
  k_cuda_cast_bf16_f32(dback, dcast, n);
  float *r1 = halloc(n * 4), *r2 = halloc(n * 4), *r3 = halloc(n * 4);
  for (int64_t i = 0; i < n; i++) {
    r1[i] = y[i] + x[i];
    r2[i] = y[i] + xb[i];
    r3[i] = -0.375f * x[i];
  }
  const char *sh = SHAPE("n%lld", (long long)n);
  check("accumulate", sh, dget(dy, n, 0), r1, n, 0);
  check("accumulate_bf16", sh, dget(dy2, n, 0), r2, n, 0);
  check("scale", sh, dget(ds, n, 0), r3, n, 0);
  check("cast_f32_bf16_f32", sh, dget(dback, n, 0), xb, n, 0);
  /* fill, and the scalar sums in launch order: in double, the host's sum
   * of the same values in the same order, to the bit (a tolerance of 0
   * on its difference). */
  float *dfill = dnew(n, 0), *rfill = halloc(n * 4);
  k_cuda_fill(dfill, 0.8125f, n);
  for (int64_t i = 0; i < n; i++) rfill[i] = 0.8125f;
  check("fill", sh, dget(dfill, n, 0), rfill, n, 0);
  double zero = 0, host = 0, got = 0;
  double *dacc = dput_raw(&zero, sizeof zero);
  int64_t nsum = n < 64 ? n : 64;
  for (int64_t i = 0; i < nsum; i++) {
    k_cuda_add_scalar(dacc, dx + i);
    host += (double)x[i];
  }
  CK(cudaMemcpy(&got, dacc, sizeof got, cudaMemcpyDeviceToHost));
  float fdiff = (float)fabs(got - host), fzero = 0;
  printf("add_scalar: %lld values summed %.17g, host %.17g\n", (long long)nsum, got, host);
  check("add_scalar", SHAPE("n%lld", (long long)nsum), &fdiff, &fzero, 1, 0);
  end_test();
}

/* --- embeddings ---------------------------------------------------------------- */

/* The GPU's forward and backward of the whole table (vp = 0) or of this
 * rank's rows [lo, lo + R) of it (vp = 1), in fp32 or bf16 rows. */
static void embedding_gpu(int vp, int bf, void *y, float *dtable, const int32_t *ids,
                          const void *table, const void *dout, int64_t n, int64_t R, int64_t h,
                          int64_t lo) {
  if (vp && bf) {
    k_cuda_embedding_fwd_vp_bf16(y, ids, table, n, h, lo, R);
    k_cuda_embedding_bwd_vp_bf16(dtable, ids, dout, n, R, h, lo);
  } else if (vp) {
    k_cuda_embedding_fwd_vp(y, ids, table, n, h, lo, R);
    k_cuda_embedding_bwd_vp(dtable, ids, dout, n, R, h, lo);
  } else if (bf) {
    k_cuda_embedding_fwd_bf16(y, ids, table, n, h);
    k_cuda_embedding_bwd_bf16(dtable, ids, dout, n, R, h);
  } else {
    k_cuda_embedding_fwd(y, ids, table, n, h);
    k_cuda_embedding_bwd(dtable, ids, dout, n, R, h);
  }
}

/* The whole table, then the vocabulary-parallel form (this rank holds rows
 * [lo, lo + Vr)); in bf16 the rows are bf16 (rounded first, for both
 * sides) and the table's gradient fp32. */
static void test_embedding(int64_t n, int64_t V, int64_t h) {
  const char *sh = SHAPE("n%lld V%lld h%lld", (long long)n, (long long)V, (long long)h);
  int64_t lo_vp = V / 3, Vr = V - lo_vp - V / 4 > 0 ? V - lo_vp - V / 4 : 1;
  for (int vp = 0; vp < 2; vp++)
    for (int bf = 0; bf < 2; bf++) {
      int64_t lo = vp ? lo_vp : 0, R = vp ? Vr : V;
      float *table = hrand(R * h, 1), *dout = hrand(n * h, 1);
      if (bf) { round_bf16(table, R * h); round_bf16(dout, n * h); }
      int32_t *ids = hids(n, 0, V);
      int32_t *dids = dput_raw(ids, (size_t)n * 4);
      void *dtable = dput(table, R * h, bf), *ddout = dput(dout, n * h, bf), *dy = dnew(n * h, bf);
      float *dgrad = dnew(R * h, 0), *y = halloc(n * h * 4), *grad = halloc(R * h * 4);
      embedding_gpu(vp, bf, dy, dgrad, dids, dtable, ddout, n, R, h, lo);
      if (vp) {
        k_embedding_fwd_vp(y, ids, table, n, h, lo, R);
        k_embedding_bwd_vp(grad, ids, dout, n, R, h, lo);
      } else {
        k_embedding_fwd(y, ids, table, n, h);
        k_embedding_bwd(grad, ids, dout, n, R, h);
      }
      check(name(vp ? "embedding_fwd_vp" : "embedding_fwd", bf), sh, dget(dy, n * h, bf), y,
            n * h, 0);
      check(name(vp ? "embedding_bwd_vp" : "embedding_bwd", bf), sh, dget(dgrad, R * h, 0), grad,
            R * h, 0);
      end_test();
    }
  int32_t *dar = dalloc((size_t)n * 4), *ar = halloc((size_t)n * 4);
  k_cuda_arange(dar, n);
  CK(cudaMemcpy(ar, dar, (size_t)n * 4, cudaMemcpyDeviceToHost));
  float *got = halloc(n * 4), *want = halloc(n * 4);
  for (int64_t i = 0; i < n; i++) { got[i] = (float)ar[i]; want[i] = (float)i; }
  check("arange", SHAPE("n%lld", (long long)n), got, want, n, 0);
  end_test();
}

/* --- normalisation ------------------------------------------------------------- */

/* The fused residual add and norm (add-norm): x = a + b with a random a,
 * the sum s and the norm against the CPU's fused kernels on the same
 * inputs (in bf16 the sum is rounded before the norm, on both sides), and
 * the backward with a residual gradient dres added to dx. */
static void test_add_norm(int layer, int bf, int64_t rows, int64_t h, const float *x,
                          const float *w, const float *b, const float *dy) {
  const char *sh = SHAPE("%lldx%lld", (long long)rows, (long long)h);
  const float eps = 1e-5f;
  int64_t n = rows * h;
  float *a = hrand(n, 1), *bb = halloc(n * 4), *dres = hrand(n, 1);
  if (bf) { round_bf16(a, n); round_bf16(dres, n); }
  for (int64_t i = 0; i < n; i++) bb[i] = x[i] - a[i];
  if (bf) round_bf16(bb, n);
  void *da = dput(a, n, bf), *dbb = dput(bb, n, bf), *dw_ = dput(w, h, bf), *db_ = dput(b, h, bf),
       *ddy = dput(dy, n, bf), *ddres = dput(dres, n, bf), *ds = dnew(n, bf), *dyo = dnew(n, bf),
       *dgx = dnew(n, bf);
  float *dgw = dnew(h, 0), *dgb = dnew(h, 0);
  void *scratch = dalloc((size_t)k_cuda_norm_bwd_scratch(rows, h));
  float *s = halloc(n * 4), *y = halloc(n * 4), *gx = halloc(n * 4), *gw = halloc(h * 4),
        *gb = halloc(h * 4);
  if (layer && bf) k_cuda_add_layernorm_fwd_bf16(ds, dyo, da, dbb, dw_, db_, rows, h, eps);
  else if (layer) k_cuda_add_layernorm_fwd(ds, dyo, da, dbb, dw_, db_, rows, h, eps);
  else if (bf) k_cuda_add_rmsnorm_fwd_bf16(ds, dyo, da, dbb, dw_, rows, h, eps);
  else k_cuda_add_rmsnorm_fwd(ds, dyo, da, dbb, dw_, rows, h, eps);
  /* The CPU side from the sum the device stored (its bf16 rounding). */
  float *got_s = dget(ds, n, bf), *sum = halloc(n * 4);
  for (int64_t i = 0; i < n; i++) sum[i] = a[i] + bb[i];
  if (bf) round_bf16(sum, n);
  if (layer) k_add_layernorm_fwd(s, y, a, bb, w, b, rows, h, eps);
  else k_add_rmsnorm_fwd(s, y, a, bb, w, rows, h, eps);
  if (bf) {
    if (layer) k_layernorm_fwd(y, sum, w, b, rows, h, eps);
    else k_rmsnorm_fwd(y, sum, w, rows, h, eps);
  }
  const char *k = layer ? "add_layernorm" : "add_rmsnorm";
  char buf[64];
  snprintf(buf, sizeof buf, "%s_fwd_sum", k);
  check(name(buf, bf), sh, got_s, sum, n, 0);
  snprintf(buf, sizeof buf, "%s_fwd", k);
  check(name(buf, bf), sh, dget(dyo, n, bf), y, n, tol(bf));
  if (layer && bf) k_cuda_layernorm_bwd_res_bf16(dgx, dgw, dgb, ddy, ds, dw_, ddres, rows, h, eps, scratch);
  else if (layer) k_cuda_layernorm_bwd_res(dgx, dgw, dgb, ddy, ds, dw_, ddres, rows, h, eps, scratch);
  else if (bf) k_cuda_rmsnorm_bwd_res_bf16(dgx, dgw, ddy, ds, dw_, ddres, rows, h, eps, scratch);
  else k_cuda_rmsnorm_bwd_res(dgx, dgw, ddy, ds, dw_, ddres, rows, h, eps, scratch);
  if (layer) k_layernorm_bwd_res(gx, gw, gb, dy, got_s, w, dres, rows, h, eps);
  else k_rmsnorm_bwd_res(gx, gw, dy, got_s, w, dres, rows, h, eps);
  snprintf(buf, sizeof buf, "%s_bwd_dx_res", k);
  check_floor(name(buf, bf), sh, dget(dgx, n, bf), gx, n, tol(bf), h == 1);
  snprintf(buf, sizeof buf, "%s_bwd_dw", k);
  check(name(buf, bf), sh, dget(dgw, h, 0), gw, h, tol(bf));
  end_test();
}

static void test_norm(int layer, int64_t rows, int64_t h) {
  const char *sh = SHAPE("%lldx%lld", (long long)rows, (long long)h);
  const float eps = 1e-5f;
  for (int bf = 0; bf < 2; bf++) {
    /* An offset mean, as real activations have, tests the two-pass variance. */
    float *x = hrand(rows * h, 2), *w = hrand(h, 1), *b = hrand(h, 1), *dy = hrand(rows * h, 1);
    for (int64_t i = 0; i < rows * h; i++) x[i] += 3;
    if (bf) { round_bf16(x, rows * h); round_bf16(w, h); round_bf16(b, h); round_bf16(dy, rows * h); }
    void *dx_ = dput(x, rows * h, bf), *dw_ = dput(w, h, bf), *db_ = dput(b, h, bf),
         *ddy = dput(dy, rows * h, bf), *dyo = dnew(rows * h, bf), *dgx = dnew(rows * h, bf);
    float *dgw = dnew(h, 0), *dgb = dnew(h, 0);
    void *scratch = dalloc((size_t)k_cuda_norm_bwd_scratch(rows, h));
    float *y = halloc(rows * h * 4), *gx = halloc(rows * h * 4), *gw = halloc(h * 4), *gb = halloc(h * 4);
    if (layer && bf) {
      k_cuda_layernorm_fwd_bf16(dyo, dx_, dw_, db_, rows, h, eps);
      k_cuda_layernorm_bwd_bf16(dgx, dgw, dgb, ddy, dx_, dw_, rows, h, eps, scratch);
    } else if (layer) {
      k_cuda_layernorm_fwd(dyo, dx_, dw_, db_, rows, h, eps);
      k_cuda_layernorm_bwd(dgx, dgw, dgb, ddy, dx_, dw_, rows, h, eps, scratch);
    } else if (bf) {
      k_cuda_rmsnorm_fwd_bf16(dyo, dx_, dw_, rows, h, eps);
      k_cuda_rmsnorm_bwd_bf16(dgx, dgw, ddy, dx_, dw_, rows, h, eps, scratch);
    } else {
      k_cuda_rmsnorm_fwd(dyo, dx_, dw_, rows, h, eps);
      k_cuda_rmsnorm_bwd(dgx, dgw, ddy, dx_, dw_, rows, h, eps, scratch);
    }
    if (layer) {
      k_layernorm_fwd(y, x, w, b, rows, h, eps);
      k_layernorm_bwd(gx, gw, gb, dy, x, w, rows, h, eps);
    } else {
      k_rmsnorm_fwd(y, x, w, rows, h, eps);
      k_rmsnorm_bwd(gx, gw, dy, x, w, rows, h, eps);
    }
    const char *k = layer ? "layernorm" : "rmsnorm";
    char buf[64];
    snprintf(buf, sizeof buf, "%s_fwd", k);
    check(name(buf, bf), sh, dget(dyo, rows * h, bf), y, rows * h, tol(bf));
    snprintf(buf, sizeof buf, "%s_bwd_dx", k);
    check_floor(name(buf, bf), sh, dget(dgx, rows * h, bf), gx, rows * h, tol(bf), h == 1);
    snprintf(buf, sizeof buf, "%s_bwd_dw", k);
    check(name(buf, bf), sh, dget(dgw, h, 0), gw, h, tol(bf));
    if (layer) {
      snprintf(buf, sizeof buf, "%s_bwd_db", k);
      check(name(buf, bf), sh, dget(dgb, h, 0), gb, h, tol(bf));
    }
    test_add_norm(layer, bf, rows, h, x, w, b, dy);
  }
}

/* --- softmax ----------------------------------------------------------------- */

static void test_softmax(int64_t rows, int64_t n) {
  const char *sh = SHAPE("%lldx%lld", (long long)rows, (long long)n);
  for (int bf = 0; bf < 2; bf++) {
    float *x = hrand(rows * n, 8), *dy = hrand(rows * n, 1);
    if (bf) { round_bf16(x, rows * n); round_bf16(dy, rows * n); }
    void *dx_ = dput(x, rows * n, bf), *ddy = dput(dy, rows * n, bf), *dyo = dnew(rows * n, bf),
         *dg = dnew(rows * n, bf);
    float *y = halloc(rows * n * 4), *g = halloc(rows * n * 4);
    if (bf) k_cuda_softmax_fwd_bf16(dyo, dx_, rows, n);
    else k_cuda_softmax_fwd(dyo, dx_, rows, n);
    k_softmax_fwd(y, x, rows, n);
    float *got = dget(dyo, rows * n, bf);
    check(name("softmax_fwd", bf), sh, got, y, rows * n, tol(bf));
    /* The backward from the same y on both sides. */
    void *dyy = dput(got, rows * n, bf);
    if (bf) k_cuda_softmax_bwd_bf16(dg, dyy, ddy, rows, n);
    else k_cuda_softmax_bwd(dg, dyy, ddy, rows, n);
    k_softmax_bwd(g, got, dy, rows, n);
    check(name("softmax_bwd", bf), sh, dget(dg, rows * n, bf), g, rows * n, tol(bf));
    end_test();
  }
  /* The mask copies or fills: exact, the bf16 form against the CPU's on
   * bf16 inputs, rounded. */
  int64_t s = n, batch = rows % 5 + 1, ne = batch * s * s;
  for (int bf = 0; bf < 2; bf++) {
    float *x = hrand(ne, 1), *y = halloc(ne * 4);
    if (bf) round_bf16(x, ne);
    void *dx = dput(x, ne, bf), *dy = dnew(ne, bf);
    if (bf) k_cuda_causal_mask_bf16(dy, dx, batch, s, -1e4f);
    else k_cuda_causal_mask(dy, dx, batch, s, -1e4f);
    k_causal_mask(y, x, batch, s, -1e4f);
    if (bf) round_bf16(y, ne);
    check(name("causal_mask", bf), SHAPE("b%lld s%lld", (long long)batch, (long long)s),
          dget(dy, ne, bf), y, ne, 0);
  }
  end_test();
}

/* --- rope ---------------------------------------------------------------------- */

static void test_rope(int64_t b, int64_t s, int64_t H, int64_t d) {
  const char *sh = SHAPE("b%lld s%lld H%lld d%lld", (long long)b, (long long)s, (long long)H,
                         (long long)d);
  int64_t n = b * s * H * d;
  for (int bf = 0; bf < 2; bf++)
    for (int inv = 0; inv < 2; inv++) {
      float *x = hrand(n, 1), *y = halloc(n * 4);
      if (bf) round_bf16(x, n);
      void *dx = dput(x, n, bf), *dy = dnew(n, bf);
      if (bf) k_cuda_rope_bf16(dy, dx, b, s, H, d, 10000.0f, inv);
      else k_cuda_rope(dy, dx, b, s, H, d, 10000.0f, inv);
      k_rope(y, x, b, s, H, d, 10000.0f, inv);
      check(name(inv ? "rope_inverse" : "rope", bf), sh, dget(dy, n, bf), y, n, tol(bf));
      /* In place. */
      if (bf) k_cuda_rope_bf16(dx, dx, b, s, H, d, 10000.0f, inv);
      else k_cuda_rope(dx, dx, b, s, H, d, 10000.0f, inv);
      check(name(inv ? "rope_inverse_inplace" : "rope_inplace", bf), sh, dget(dx, n, bf), y, n,
            tol(bf));
      end_test();
    }
}

/* --- attention ----------------------------------------------------------------- */

/* The four outputs of one attention run, on the host. */
typedef struct AttOut {
  float *y, *dq, *dk, *dv;
} AttOut;

/* The bf16 path `impl` (KC_ATT_FLASH or KC_ATT_SIMPLE) on device copies of
 * q, k, v, dy (bf16 values already), forward then backward. */
static AttOut attention_bf16(KcAttImpl impl, const float *q, const float *k, const float *v,
                             const float *dy, int64_t b, int64_t s, int64_t H, int64_t K,
                             int64_t d, int causal) {
  int64_t nq = b * s * H * d, nk = b * s * K * d;
  void *Q = dput(q, nq, 1), *Kd = dput(k, nk, 1), *Vd = dput(v, nk, 1), *DY = dput(dy, nq, 1);
  void *Y = dnew(nq, 1), *DQ = dnew(nq, 1), *DK = dnew(nk, 1), *DV = dnew(nk, 1);
  void *scratch = dalloc((size_t)k_cuda_attention_scratch(b, s, H, d));
  float *lse = dalloc((size_t)(b * H * s) * sizeof(float));
  k_cuda_attention_set_impl(impl);
  k_cuda_attention_fwd_bf16(Y, Q, Kd, Vd, b, s, H, K, d, causal, lse);
  k_cuda_attention_bwd_bf16(DQ, DK, DV, DY, Q, Kd, Vd, Y, lse, b, s, H, K, d, causal, scratch);
  k_cuda_attention_set_impl(KC_ATT_FLASH);
  AttOut o = {dget(Y, nq, 1), dget(DQ, nq, 1), dget(DK, nk, 1), dget(DV, nk, 1)};
  return o;
}

/* got against want, part by part, as base_fwd, base_bwd_dq, ... At s = 1
 * dq and dk are exactly zero, so their error has the inputs' scale as its
 * floor (check_floor). */
static void check_attention(const char *base, const char *shape, AttOut got, AttOut want,
                            int64_t nq, int64_t nk, int64_t s, double tolerance) {
  const char *part[] = {"fwd", "bwd_dq", "bwd_dk", "bwd_dv"};
  float *g[] = {got.y, got.dq, got.dk, got.dv}, *w[] = {want.y, want.dq, want.dk, want.dv};
  int64_t count[] = {nq, nq, nk, nk};
  char buf[64];
  for (int i = 0; i < 4; i++) {
    snprintf(buf, sizeof buf, "%s_%s", base, part[i]);
    check_floor(buf, shape, g[i], w[i], count[i], tolerance, s == 1 && (i == 1 || i == 2));
  }
}

/* The fast kernels in fp32 and bf16 and the plain path in fp32, forward and
 * backward, each against k_attention_fwd/bwd on the same inputs. Where the
 * bf16 calls take the flash kernels (k_cuda_attention_impl), the
 * warp-per-row kernels run on the same inputs too, and the flash results
 * are also checked against theirs. */
/* --attention: the bf16 path alone (the flash kernels and the simple ones
 * beside them). */
static int flash_only;

static void test_attention(int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal) {
  const char *sh = SHAPE("b%lld s%lld H%lld K%lld d%lld%s", (long long)b, (long long)s,
                         (long long)H, (long long)K, (long long)d, causal ? " causal" : "");
  char shape[128];
  snprintf(shape, sizeof shape, "%.100s", sh);
  int64_t nq = b * s * H * d, nk = b * s * K * d;
  real *cpu_scratch = halloc((size_t)(k_attention_scratch(s) * omp_get_max_threads()) * sizeof(real));
  for (int path = 0; path < 3; path++) { /* fast fp32, fast bf16, plain fp32 */
    if (flash_only && path != 1) continue;
    int bf = path == 1;
    float *q = hrand(nq, 1), *k = hrand(nk, 1), *v = hrand(nk, 1), *dy = hrand(nq, 1);
    if (bf) { round_bf16(q, nq); round_bf16(k, nk); round_bf16(v, nk); round_bf16(dy, nq); }
    AttOut want = {halloc(nq * 4), halloc(nq * 4), halloc(nk * 4), halloc(nk * 4)};
    k_attention_fwd(want.y, q, k, v, b, s, H, K, d, causal, cpu_scratch);
    k_attention_bwd(want.dq, want.dk, want.dv, dy, q, k, v, want.y, b, s, H, K, d, causal,
                    cpu_scratch);
    if (bf) {
      k_cuda_attention_set_impl(KC_ATT_FLASH);
      int flash = k_cuda_attention_impl(d) == KC_ATT_FLASH;
      AttOut got = attention_bf16(KC_ATT_FLASH, q, k, v, dy, b, s, H, K, d, causal);
      check_attention(flash ? "attention_flash" : "attention_bf16", shape, got, want, nq, nk,
                      s, TOL16);
      if (flash) {
        AttOut simple = attention_bf16(KC_ATT_SIMPLE, q, k, v, dy, b, s, H, K, d, causal);
        check_attention("attention_simple", shape, simple, want, nq, nk, s, TOL16);
        check_attention("flash_vs_simple", shape, got, simple, nq, nk, s, TOL16);
      }
    } else {
      void *Q = dput(q, nq, 0), *Kd = dput(k, nk, 0), *Vd = dput(v, nk, 0), *DY = dput(dy, nq, 0);
      void *Y = dnew(nq, 0), *DQ = dnew(nq, 0), *DK = dnew(nk, 0), *DV = dnew(nk, 0);
      void *scratch = dalloc((size_t)(path == 2 ? k_cuda_attention_plain_scratch(b, s, H)
                                                : k_cuda_attention_scratch(b, s, H, d)));
      if (path == 0) {
        float *lse = dalloc((size_t)(b * H * s) * sizeof(float));
        k_cuda_attention_fwd(Y, Q, Kd, Vd, b, s, H, K, d, causal, lse);
        k_cuda_attention_bwd(DQ, DK, DV, DY, Q, Kd, Vd, Y, lse, b, s, H, K, d, causal, scratch);
      } else {
        k_cuda_attention_fwd_plain(Y, Q, Kd, Vd, b, s, H, K, d, causal, scratch);
        k_cuda_attention_bwd_plain(DQ, DK, DV, DY, Q, Kd, Vd, Y, b, s, H, K, d, causal, scratch);
      }
      AttOut got = {dget(Y, nq, 0), dget(DQ, nq, 0), dget(DK, nk, 0), dget(DV, nk, 0)};
      check_attention(path == 2 ? "attention_plain" : "attention", shape, got, want, nq, nk, s,
                      TOL32);
    }
    end_test();
    cpu_scratch = halloc((size_t)(k_attention_scratch(s) * omp_get_max_threads()) * sizeof(real));
  }
  end_test();
}

/* --bench-attention: forward + backward times at GPT-2 small's shape
 * (b 8, s 1024, 12 heads of 64, causal), the median of 10 after 2 warm-up
 * runs, for the flash and the simple bf16 paths and the plain fp32 path
 * (which writes the scores, 800 MiB of scratch here), and their ratios.
 * bench/gpu.sh runs it. */
static double time_attention(int path, void *const *t, int64_t b, int64_t s, int64_t H, int64_t d,
                             void *scratch) {
  double ms[10];
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int rep = -2; rep < 10; rep++) {
    CK(cudaEventRecord(e0, k_cuda_stream()));
    if (path < 2) {
      k_cuda_attention_set_impl(path == 0 ? KC_ATT_FLASH : KC_ATT_SIMPLE);
      /* The log-sum-exp behind the backward's own scratch. */
      float *lse = (float *)((char *)scratch + k_cuda_attention_scratch(b, s, H, d));
      k_cuda_attention_fwd_bf16(t[4], t[0], t[1], t[2], b, s, H, H, d, 1, lse);
      k_cuda_attention_bwd_bf16(t[5], t[6], t[7], t[3], t[0], t[1], t[2], t[4], lse, b, s, H, H,
                                d, 1, scratch);
    } else {
      k_cuda_attention_fwd_plain(t[4], t[0], t[1], t[2], b, s, H, H, d, 1, scratch);
      k_cuda_attention_bwd_plain(t[5], t[6], t[7], t[3], t[0], t[1], t[2], t[4], b, s, H, H, d, 1,
                                 scratch);
    }
    CK(cudaEventRecord(e1, k_cuda_stream()));
    CK(cudaEventSynchronize(e1));
    float m;
    CK(cudaEventElapsedTime(&m, e0, e1));
    if (rep >= 0) ms[rep] = m;
  }
  k_cuda_attention_set_impl(KC_ATT_FLASH);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  for (int i = 1; i < 10; i++) /* insertion sort for the median */
    for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
      double x = ms[j];
      ms[j] = ms[j - 1];
      ms[j - 1] = x;
    }
  return (ms[4] + ms[5]) / 2;
}

static void bench_attention(void) {
  const int64_t b = 8, s = 1024, H = 12, d = 64, n = b * s * H * d;
  double ms[3];
  const char *names[] = {"flash bf16", "simple bf16", "plain fp32"};
  for (int path = 0; path < 3; path++) {
    int bf = path < 2;
    float *x = hrand(n, 1);
    void *t[8];
    for (int i = 0; i < 8; i++) t[i] = i < 4 ? dput(x, n, bf) : dnew(n, bf);
    void *scratch = dalloc((size_t)(bf ? k_cuda_attention_scratch(b, s, H, d) + b * H * s * 4
                                       : k_cuda_attention_plain_scratch(b, s, H)));
    ms[path] = time_attention(path, t, b, s, H, d, scratch);
    printf("attention_bench %-12s b%lld s%lld H%lld d%lld causal  fwd+bwd %8.3f ms\n", names[path],
           (long long)b, (long long)s, (long long)H, (long long)d, ms[path]);
    end_test();
  }
  printf("attention_bench ratio simple/flash %.2f  plain/flash %.2f\n", ms[1] / ms[0],
         ms[2] / ms[0]);
}

/* --- loss ------------------------------------------------------------------------ */

/* Rank r of two's columns of a vocabulary of V (valid real): [lo, lo + Vr),
 * the first n of them real. */
static void vp_part(int r, int64_t V, int64_t valid, int64_t *lo, int64_t *Vr, int64_t *n) {
  int64_t half = (V + 1) / 2;
  *lo = r * half;
  *Vr = r ? V - half : half;
  *n = valid - *lo < 0 ? 0 : valid - *lo > *Vr ? *Vr : valid - *lo;
}

/* Vocabulary-parallel over two ranks: rank r holds columns [lo, lo + Vr)
 * as its own [rows, Vr] array; the all-reduces are done here, on the
 * CPU's pieces, and both sides finish from the same statistics. In bf16
 * the logits (rounded first, for both sides) and their gradient are bf16,
 * the statistics fp32. */
static void test_loss_vp(int64_t rows, int64_t V, int64_t valid, const char *shape, int bf) {
  float *x = hrand(rows * V, 6);
  if (bf) round_bf16(x, rows * V);
  int32_t *t = hids(rows, 0, valid);
  int32_t *dT = dput_raw(t, (size_t)rows * 4);
  float *gmax = halloc(rows * 4), *gsum = halloc(rows * 4), *gtgt = halloc(rows * 4);
  float *part[2], *pmax[2];
  for (int r = 0; r < 2; r++) {
    int64_t lo, Vr, n;
    vp_part(r, V, valid, &lo, &Vr, &n);
    part[r] = halloc(rows * Vr * 4);
    k_copy2d(part[r], Vr, x + lo, V, rows, Vr);
    pmax[r] = halloc(rows * 4);
    k_ce_vp_max(pmax[r], part[r], rows, Vr, n);
    void *dX = dput(part[r], rows * Vr, bf);
    float *dM = dnew(rows, 0);
    if (bf) k_cuda_ce_vp_max_bf16(dM, dX, rows, Vr, n);
    else k_cuda_ce_vp_max(dM, dX, rows, Vr, n);
    check(name("ce_vp_max", bf), SHAPE("%.100s rank%d", shape, r), dget(dM, rows, 0), pmax[r],
          rows, 0);
  }
  for (int64_t i = 0; i < rows; i++) gmax[i] = pmax[0][i] > pmax[1][i] ? pmax[0][i] : pmax[1][i];
  memset(gsum, 0, rows * 4);
  memset(gtgt, 0, rows * 4);
  float *dGM = dput(gmax, rows, 0);
  for (int r = 0; r < 2; r++) {
    int64_t lo, Vr, n;
    vp_part(r, V, valid, &lo, &Vr, &n);
    float *se = halloc(rows * 4), *tg = halloc(rows * 4);
    k_ce_vp_sumexp(se, part[r], gmax, rows, Vr, n);
    k_ce_vp_target(tg, part[r], t, rows, Vr, lo, n, valid);
    void *dX = dput(part[r], rows * Vr, bf);
    float *dS = dnew(rows, 0), *dTg = dnew(rows, 0);
    if (bf) {
      k_cuda_ce_vp_sumexp_bf16(dS, dX, dGM, rows, Vr, n);
      k_cuda_ce_vp_target_bf16(dTg, dX, dT, rows, Vr, lo, n, valid);
    } else {
      k_cuda_ce_vp_sumexp(dS, dX, dGM, rows, Vr, n);
      k_cuda_ce_vp_target(dTg, dX, dT, rows, Vr, lo, n, valid);
    }
    check(name("ce_vp_sumexp", bf), SHAPE("%.100s rank%d", shape, r), dget(dS, rows, 0), se,
          rows, TOL32);
    check(name("ce_vp_target", bf), SHAPE("%.100s rank%d", shape, r), dget(dTg, rows, 0), tg,
          rows, 0);
    for (int64_t i = 0; i < rows; i++) { gsum[i] += se[i]; gtgt[i] += tg[i]; }
  }
  float loss, dloss2 = 0.75f;
  k_ce_vp_loss(&loss, gmax, gsum, gtgt, rows);
  float *dGS = dput(gsum, rows, 0), *dGT = dput(gtgt, rows, 0), *dL = dnew(1, 0),
        *dDL = dput(&dloss2, 1, 0);
  if (!bf) {
    k_cuda_ce_vp_loss(dL, dGM, dGS, dGT, rows);
    check("ce_vp_loss", shape, dget(dL, 1, 0), &loss, 1, TOL32);
  }
  for (int r = 0; r < 2; r++) {
    int64_t lo, Vr, n;
    vp_part(r, V, valid, &lo, &Vr, &n);
    float *g = halloc(rows * Vr * 4);
    void *dX = dput(part[r], rows * Vr, bf), *dG = dnew(rows * Vr, bf);
    k_ce_vp_bwd(g, part[r], t, &dloss2, gmax, gsum, rows, Vr, lo, n);
    if (bf) k_cuda_ce_vp_bwd_bf16(dG, dX, dT, dDL, dGM, dGS, rows, Vr, lo, n);
    else k_cuda_ce_vp_bwd(dG, dX, dT, dDL, dGM, dGS, rows, Vr, lo, n);
    check(name("ce_vp_bwd", bf), SHAPE("%.100s rank%d", shape, r), dget(dG, rows * Vr, bf), g,
          rows * Vr, tol(bf));
  }
  end_test();
}

static void test_loss(int64_t rows, int64_t V, int64_t valid) {
  const char *sh = SHAPE("rows%lld V%lld valid%lld", (long long)rows, (long long)V, (long long)valid);
  char shape[128];
  snprintf(shape, sizeof shape, "%.100s", sh);
  float dloss = 1.5f;
  for (int bf = 0; bf < 2; bf++) {
    float *x = hrand(rows * V, 6), loss, *dx = halloc(rows * V * 4);
    if (bf) round_bf16(x, rows * V);
    int32_t *t = hids(rows, 0, valid);
    void *dX = dput(x, rows * V, bf), *dG = dnew(rows * V, bf);
    int32_t *dT = dput_raw(t, (size_t)rows * 4);
    float *dL = dnew(1, 0), *dDL = dput(&dloss, 1, 0);
    void *scratch = dalloc((size_t)k_cuda_ce_scratch(rows));
    if (bf) {
      k_cuda_cross_entropy_fwd_bf16(dL, dX, dT, rows, V, valid, scratch);
      k_cuda_cross_entropy_bwd_bf16(dG, dX, dT, dDL, rows, V, valid);
    } else {
      k_cuda_cross_entropy_fwd(dL, dX, dT, rows, V, valid, scratch);
      k_cuda_cross_entropy_bwd(dG, dX, dT, dDL, rows, V, valid);
    }
    k_cross_entropy_fwd(&loss, x, t, rows, V, valid);
    k_cross_entropy_bwd(dx, x, t, &dloss, rows, V, valid);
    /* The loss is fp32 from the same inputs in both forms. */
    check(name("cross_entropy_fwd", bf), shape, dget(dL, 1, 0), &loss, 1, TOL32);
    check(name("cross_entropy_bwd", bf), shape, dget(dG, rows * V, bf), dx, rows * V, tol(bf));
    end_test();
  }
  test_loss_vp(rows, V, valid, shape, 0);
  test_loss_vp(rows, V, valid, shape, 1);
}

/* --- dropout ---------------------------------------------------------------------- */

static void test_dropout(int64_t n, float rate) {
  const char *sh = SHAPE("n%lld rate%.2f", (long long)n, rate);
  for (int bf = 0; bf < 2; bf++) {
    float *x = hrand(n, 1), *y = halloc(n * 4), *g = halloc(n * 4);
    if (bf) round_bf16(x, n);
    void *dx = dput(x, n, bf), *dy = dnew(n, bf), *dg = dnew(n, bf);
    uint64_t seed = 1234567 + (uint64_t)n, site = 42;
    if (bf) {
      k_cuda_dropout_fwd_bf16(dy, dx, n, rate, seed, site);
      k_cuda_dropout_bwd_bf16(dg, dx, n, rate, seed, site);
    } else {
      k_cuda_dropout_fwd(dy, dx, n, rate, seed, site);
      k_cuda_dropout_bwd(dg, dx, n, rate, seed, site);
    }
    k_dropout_fwd(y, x, n, rate, seed, site);
    k_dropout_bwd(g, x, n, rate, seed, site);
    if (bf) { round_bf16(y, n); round_bf16(g, n); } /* x scale, rounded once as the GPU does */
    check(name("dropout_fwd", bf), sh, dget(dy, n, bf), y, n, 0);
    check(name("dropout_bwd", bf), sh, dget(dg, n, bf), g, n, 0);
    /* The graphs' forms: the seed (here split into a step's seed and a
     * mix) and the training switch from device memory; not training, a
     * copy of x. */
    KcStep *step = dalloc(sizeof(KcStep));
    uint64_t mix = 0x9e3779b97f4a7c15ull * 3;
    void *sy = dnew(n, bf), *sg = dnew(n, bf), *sc = dnew(n, bf);
    k_cuda_step_set(step, seed ^ mix, 1);
    if (bf) {
      k_cuda_dropout_step_fwd_bf16(sy, dx, n, rate, step, mix, site);
      k_cuda_dropout_step_bwd_bf16(sg, dx, n, rate, step, mix, site);
    } else {
      k_cuda_dropout_step_fwd(sy, dx, n, rate, step, mix, site);
      k_cuda_dropout_step_bwd(sg, dx, n, rate, step, mix, site);
    }
    k_cuda_step_set(step, seed ^ mix, 0);
    if (bf) k_cuda_dropout_step_fwd_bf16(sc, dx, n, rate, step, mix, site);
    else k_cuda_dropout_step_fwd(sc, dx, n, rate, step, mix, site);
    check(name("dropout_step_fwd", bf), sh, dget(sy, n, bf), y, n, 0);
    check(name("dropout_step_bwd", bf), sh, dget(sg, n, bf), g, n, 0);
    check(name("dropout_step_off", bf), sh, dget(sc, n, bf), x, n, 0);
    end_test();
  }
}

/* --- optimizer and norms ------------------------------------------------------------ */

static void test_optim(int64_t n) {
  const char *sh = SHAPE("n%lld", (long long)n);
  char shape[128];
  snprintf(shape, sizeof shape, "%.100s", sh);
  KAdamW h = {.grad_scale = 0.8f, .decay = 1 - 1e-3f * 0.1f, .beta1 = 0.9f, .beta2 = 0.95f,
              .eps = 1e-8f, .step_size = 1e-3f / (1 - 0.9f * 0.9f), .bc2_sqrt = sqrtf(1 - 0.95f * 0.95f)};
  KcAdamW hc = {h.grad_scale, h.decay, h.beta1, h.beta2, h.eps, h.step_size, h.bc2_sqrt};
  float *w = hrand(n, 1), *g = hrand(n, 1), *m = hrand(n, 0.1), *v = hrand(n, 0.01);
  for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
  /* Runs: three parameters, the middle one without decay, and state at
   * other offsets than the weights (as ZeRO-1 has it). */
  int64_t n1 = n / 3, n2 = n / 2 - n1, n3 = n - n1 - n2;
  KcRun runs[3] = {{0, 0, n1, 0, 1, 0}, {n1, n1, n2, n1, 0, 0}, {n1 + n2, n1 + n2, n3, n1 + n2, 1, 0}};
  float *dw = dput(w, n, 0), *dg = dput(g, n, 0), *dm = dput(m, n, 0), *dv = dput(v, n, 0);
  void *dwb = dnew(n, 1);
  KcRun *druns = dput_raw(runs, sizeof runs);
  k_cuda_adamw_runs(dw, dg, dm, dv, dwb, druns, 3, n, &hc);
  for (int r = 0; r < 3; r++) {
    KAdamW hr = h;
    hr.decay = runs[r].decay ? h.decay : 1;
    k_adamw(w + runs[r].w, g + runs[r].w, m + runs[r].s, v + runs[r].s, runs[r].n, &hr);
  }
  float *gw = dget(dw, n, 0), *wb = hcopy(w, n);
  round_bf16(wb, n);
  check("adamw_runs_w", shape, gw, w, n, TOL32);
  check("adamw_runs_m", shape, dget(dm, n, 0), m, n, TOL32);
  check("adamw_runs_v", shape, dget(dv, n, 0), v, n, TOL32);
  round_bf16(gw, n);
  check("adamw_runs_w_bf16", shape, dget(dwb, n, 1), gw, n, 0);
  /* One plain range. */
  float *dw2 = dput(w, n, 0), *dm2 = dput(m, n, 0), *dv2 = dput(v, n, 0);
  k_cuda_adamw(dw2, dg, dm2, dv2, n, &hc);
  k_adamw(w, g, m, v, n, &h);
  check("adamw", shape, dget(dw2, n, 0), w, n, TOL32);
  /* SGD over the runs. */
  float *dw3 = dput(w, n, 0), *ws = hcopy(w, n);
  k_cuda_sgd_runs(dw3, dg, druns, 3, n, 0.999f, 0.01f, 0.5f);
  for (int r = 0; r < 3; r++)
    for (int64_t i = runs[r].w; i < runs[r].w + runs[r].n; i++)
      ws[i] = ws[i] * (runs[r].decay ? 0.999f : 1.0f) - 0.01f * g[i] * 0.5f;
  check("sgd_runs", shape, dget(dw3, n, 0), ws, n, TOL32);
  /* Sums of squares of each run, in double. */
  double *dss = dalloc(3 * sizeof(double)), ss[3];
  k_cuda_sum_squares_runs(dss, dg, druns, 3);
  CK(cudaMemcpy(ss, dss, sizeof ss, cudaMemcpyDeviceToHost));
  float got[3], want[3];
  for (int r = 0; r < 3; r++) {
    got[r] = (float)ss[r];
    want[r] = (float)k_sum_squares(g + runs[r].w, runs[r].n);
  }
  check("sum_squares_runs", shape, got, want, 3, TOL32);
  /* The second pass over pieces: groups of the doubles above (and an
   * empty group), each added in order from 0, exactly the host's loop. */
  KcRun groups[3] = {{0, 0, 2, 0, 0, 0}, {2, 0, 1, 0, 0, 0}, {1, 0, 0, 0, 0, 0}};
  double *dsg = dalloc(3 * sizeof(double)), sg[3];
  k_cuda_sum_groups(dsg, dss, dput_raw(groups, sizeof groups), 3);
  CK(cudaMemcpy(sg, dsg, sizeof sg, cudaMemcpyDeviceToHost));
  float gotg[3], wantg[3];
  for (int r = 0; r < 3; r++) {
    double s = 0;
    for (int64_t k = 0; k < groups[r].n; k++) s += ss[groups[r].w + k];
    gotg[r] = (float)(sg[r] - s); /* 0 when the bits are the host's */
    wantg[r] = 0;
  }
  check("sum_groups", shape, gotg, wantg, 3, 0);
  end_test();
}

/* --- layout ------------------------------------------------------------------------ */

static void test_layout(int64_t b, int64_t s, int64_t H, int64_t d) {
  const char *sh = SHAPE("b%lld s%lld H%lld d%lld", (long long)b, (long long)s, (long long)H,
                         (long long)d);
  char shape[128];
  snprintf(shape, sizeof shape, "%.100s", sh);
  int64_t n = b * s * H * d;
  for (int bf = 0; bf < 2; bf++) {
    float *x = hrand(n, 1), *y = halloc(n * 4);
    if (bf) round_bf16(x, n);
    void *dx = dput(x, n, bf), *d1 = dnew(n, bf), *d2 = dnew(n, bf), *d3 = dnew(n, bf),
         *d4 = dnew(n, bf);
    if (bf) {
      k_cuda_split_heads_bf16(d1, dx, b, s, H, d);
      k_cuda_merge_heads_bf16(d2, dx, b, s, H, d);
      k_cuda_transpose_bf16(d3, dx, b, s, H, d, 1);
      k_cuda_copy2d_bf16(d4, H * d, dx, H * d, b * s, H * d - 1);
    } else {
      k_cuda_split_heads(d1, dx, b, s, H, d);
      k_cuda_merge_heads(d2, dx, b, s, H, d);
      k_cuda_transpose(d3, dx, b, s, H, d, 1);
      k_cuda_copy2d(d4, H * d, dx, H * d, b * s, H * d - 1);
    }
    k_split_heads(y, x, b, s, H, d);
    check(name("split_heads", bf), shape, dget(d1, n, bf), y, n, 0);
    k_merge_heads(y, x, b, s, H, d);
    check(name("merge_heads", bf), shape, dget(d2, n, bf), y, n, 0);
    k_transpose(y, x, b, s, H, d, 1);
    check(name("transpose", bf), shape, dget(d3, n, bf), y, n, 0);
    /* copy2d leaves the last column of each row unwritten: compare the
     * written ones only, through the same strided view. */
    float *got = dget(d4, n, bf), *a = halloc(n * 4), *e = halloc(n * 4);
    k_copy2d(a, H * d - 1, got, H * d, b * s, H * d - 1);
    k_copy2d(e, H * d - 1, x, H * d, b * s, H * d - 1);
    check(name("copy2d", bf), shape, a, e, b * s * (H * d - 1), 0);
    end_test();
  }
}

/* --- main ------------------------------------------------------------------------ */

/* How many of a list of `n` shapes to run. */
static size_t small;
static size_t shapes(size_t n) { return small && n > small ? small : n; }
#define EACH(i, list) for (size_t i = 0; i < shapes(sizeof list / sizeof list[0]); i++)

/* Shapes for the flash kernels (d a multiple of 16): s off the tiles of
 * 32 and 64, one head per kv head and groups of 2 and 3, both masks; the
 * last two have more key tiles than the backward has dq splits, so a
 * block takes several in turn. --attention runs all of them and nothing
 * else. */
static void test_flash_shapes(void) {
  static const int64_t flash[][6] = {{1, 31, 2, 1, 16, 1},  {2, 33, 4, 2, 64, 0},
                                     {1, 100, 3, 3, 128, 1}, {1, 100, 4, 2, 16, 0},
                                     {2, 31, 2, 2, 128, 0},  {1, 97, 6, 2, 64, 1},
                                     {1, 130, 2, 1, 128, 1}, {1, 150, 2, 1, 64, 0}};
  EACH(i, flash)
    test_attention(flash[i][0], flash[i][1], flash[i][2], flash[i][3], flash[i][4],
                   (int)flash[i][5]);
}

/* --- routed layers ------------------------------------------------------------- */

/* Integers as floats, for check() at tolerance 0. */
static float *ints_f(const int32_t *x, int64_t n) {
  float *y = halloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
  return y;
}
static float *dget_ints(const int32_t *d, int64_t n) {
  int32_t *x = halloc((size_t)n * 4);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(x, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
  return ints_f(x, n);
}

/* The router's top k of E for T tokens (scores softmax or sigmoid, the
 * weights renormalised or not), its load and z-loss, the dispatch (with a
 * capacity factor capf > 0, drops), combine and their backwards, and the
 * grouped products [h -> f] both ways round, each against moe.c on the
 * same inputs. Experts, positions and counts must be the CPU's exactly,
 * and so must the dispatched rows (copies). */
static void test_moe(int64_t T, int64_t E, int64_t k, int64_t h, int64_t f, int score,
                     int normalize, double capf) {
  const char *sh = SHAPE("T%lld E%lld k%lld h%lld f%lld s%d n%d c%.2g", (long long)T, (long long)E,
                         (long long)k, (long long)h, (long long)f, score, normalize, capf);
  int64_t n = T * k, cap = capf > 0 ? (int64_t)ceil(capf * (double)n / (double)E) : 0;
  int64_t per = cap > 0 && cap < T ? cap : T; /* a token's k experts are distinct */
  for (int bf = 0; bf < 2; bf++) {
    double tl = tol(bf);
    float *logits = hrand(T * E, 2), *x = hrand(T * h, 1), *dwt = hrand(n, 1);
    float *dy = hrand(T * h, 1), *dload = hrand(2 * E, 1), *dz = hrand(1, 1);
    float *w1 = hrand(E * f * h, 0.5), *w2 = hrand(E * h * f, 0.5), *dyf = hrand(n * f, 1);
    float *ys = hrand(n * h, 1);
    float *all[] = {logits, x, dwt, dy, dload, dz, w1, w2, dyf, ys};
    int64_t sizes[] = {T * E, T * h, n, T * h, 2 * E, 1, E * f * h, E * h * f, n * f, n * h};
    if (bf)
      for (int i = 0; i < 10; i++) round_bf16(all[i], sizes[i]);
    /* The CPU's router, dispatch and combine. */
    float *w = halloc(n * 4), *dl = halloc(T * E * 4), *load = halloc(2 * E * 4), z;
    float *dll = halloc(T * E * 4), *dlz = halloc(T * E * 4), *xs = halloc(n * h * 4);
    float *yc = halloc(T * h * 4), *dys = halloc(n * h * 4), *dw = halloc(n * 4);
    float *xu = halloc(T * h * 4);
    int32_t *ex = halloc(n * 4), *pos = halloc(n * 4), *counts = halloc(E * 4);
    k_router_fwd(w, ex, logits, T, E, k, score, normalize);
    k_router_bwd(dl, logits, ex, dwt, T, E, k, score, normalize);
    k_router_load_fwd(load, logits, T, E, k);
    k_router_load_bwd(dll, logits, dload, T, E);
    k_router_z_loss_fwd(&z, logits, T, E);
    k_router_z_loss_bwd(dlz, logits, dz, T, E);
    k_moe_dispatch(xs, pos, counts, x, ex, T, k, h, E, cap);
    /* The GPU's combine reads the CPU's weights, rounded as it stores them. */
    if (bf) round_bf16(w, n);
    k_moe_combine(yc, ys, pos, w, T, k, h);
    k_moe_combine_bwd(dys, dw, ys, pos, w, dy, T, k, h);
    k_moe_combine(xu, ys, pos, NULL, T, k, h);
    /* The GPU's. */
    void *dlog = dput(logits, T * E, bf), *ddwt = dput(dwt, n, bf), *dx = dput(x, T * h, bf);
    void *ddload = dput(dload, 2 * E, bf), *ddz = dput(dz, 1, bf), *dys_in = dput(ys, n * h, bf);
    void *dw_in = dput(w, n, bf), *ddy = dput(dy, T * h, bf);
    void *gw = dnew(n, bf), *gdl = dnew(T * E, bf), *gload = dnew(2 * E, bf), *gz = dnew(1, bf);
    void *gdll = dnew(T * E, bf), *gdlz = dnew(T * E, bf), *gxs = dnew(n * h, bf);
    void *gyc = dnew(T * h, bf), *gdys = dnew(n * h, bf), *gdw = dnew(n, bf), *gxu = dnew(T * h, bf);
    int32_t *gex = dalloc(n * 4), *gpos = dalloc(n * 4), *gcounts = dalloc(E * 4);
    int32_t *dex = dput_raw(ex, n * 4), *dpos = dput_raw(pos, n * 4);
    if (bf) {
      k_cuda_router_fwd_bf16(gw, gex, dlog, T, E, k, score, normalize);
      k_cuda_router_bwd_bf16(gdl, dlog, dex, ddwt, T, E, k, score, normalize);
      k_cuda_router_load_fwd_bf16(gload, dlog, T, E, k);
      k_cuda_router_load_bwd_bf16(gdll, dlog, ddload, T, E);
      k_cuda_router_z_loss_fwd_bf16(gz, dlog, T, E);
      k_cuda_router_z_loss_bwd_bf16(gdlz, dlog, ddz, T, E);
      k_cuda_moe_dispatch_bf16(gxs, gpos, gcounts, dx, dex, T, k, h, E, cap);
      k_cuda_moe_combine_bwd_bf16(gdys, gdw, dys_in, dpos, dw_in, ddy, T, k, h);
      k_cuda_moe_combine_bf16(gyc, dys_in, dpos, dw_in, T, k, h);
      k_cuda_moe_combine_bf16(gxu, dys_in, dpos, NULL, T, k, h);
    } else {
      k_cuda_router_fwd(gw, gex, dlog, T, E, k, score, normalize);
      k_cuda_router_bwd(gdl, dlog, dex, ddwt, T, E, k, score, normalize);
      k_cuda_router_load_fwd(gload, dlog, T, E, k);
      k_cuda_router_load_bwd(gdll, dlog, ddload, T, E);
      k_cuda_router_z_loss_fwd(gz, dlog, T, E);
      k_cuda_router_z_loss_bwd(gdlz, dlog, ddz, T, E);
      k_cuda_moe_dispatch(gxs, gpos, gcounts, dx, dex, T, k, h, E, cap);
      k_cuda_moe_combine_bwd(gdys, gdw, dys_in, dpos, dw_in, ddy, T, k, h);
      k_cuda_moe_combine(gyc, dys_in, dpos, dw_in, T, k, h);
      k_cuda_moe_combine(gxu, dys_in, dpos, NULL, T, k, h);
    }
    check(name("router_experts", bf), sh, dget_ints(gex, n), ints_f(ex, n), n, 0);
    check(name("router_fwd", bf), sh, dget(gw, n, bf), w, n, tl);
    check(name("router_bwd", bf), sh, dget(gdl, T * E, bf), dl, T * E, tl);
    check(name("router_load_fwd", bf), sh, dget(gload, 2 * E, bf), load, 2 * E, tl);
    check(name("router_load_bwd", bf), sh, dget(gdll, T * E, bf), dll, T * E, tl);
    check(name("router_z_loss_fwd", bf), sh, dget(gz, 1, bf), &z, 1, tl);
    check(name("router_z_loss_bwd", bf), sh, dget(gdlz, T * E, bf), dlz, T * E, tl);
    check(name("moe_dispatch_pos", bf), sh, dget_ints(gpos, n), ints_f(pos, n), n, 0);
    check(name("moe_dispatch_counts", bf), sh, dget_ints(gcounts, E), ints_f(counts, E), E, 0);
    check(name("moe_dispatch_rows", bf), sh, dget(gxs, n * h, bf), xs, n * h, 0);
    check(name("moe_combine", bf), sh, dget(gyc, T * h, bf), yc, T * h, tl);
    check(name("moe_undispatch", bf), sh, dget(gxu, T * h, bf), xu, T * h, tl);
    check(name("moe_combine_bwd_rows", bf), sh, dget(gdys, n * h, bf), dys, n * h, tl);
    check(name("moe_combine_bwd_w", bf), sh, dget(gdw, n, bf), dw, n, tl);
    /* The grouped products on the dispatched rows, w[E, f, h] read
     * transposed and w[E, h, f] not. */
    void *scratch = dalloc((size_t)k_cuda_grouped_scratch(E, per, h, f, bf));
    void *dxs = dput(xs, n * h, bf), *ddyf = dput(dyf, n * f, bf);
    int32_t *dcounts = dput_raw(counts, E * 4);
    for (int tr = 1; tr >= 0; tr--) {
      float *wt = tr ? w1 : w2;
      float *y = halloc(n * f * 4), *dxr = halloc(n * h * 4), *dwe = halloc(E * h * f * 4);
      k_grouped_linear(y, xs, wt, counts, n, E, h, f, tr);
      k_grouped_linear_dx(dxr, dyf, wt, counts, n, E, h, f, tr);
      k_grouped_linear_dw(dwe, xs, dyf, counts, n, E, h, f, tr);
      void *dwt_d = dput(wt, E * h * f, bf), *gy = dnew(n * f, bf), *gdx = dnew(n * h, bf);
      float *gdwe = dnew(E * h * f, 0);
      if (bf) {
        k_cuda_grouped_linear_bf16(gy, dxs, dwt_d, dcounts, n, E, h, f, tr, per, scratch);
        k_cuda_grouped_linear_dx_bf16(gdx, ddyf, dwt_d, dcounts, n, E, h, f, tr, per, scratch);
        k_cuda_grouped_linear_dw_bf16(gdwe, dxs, ddyf, dcounts, n, E, h, f, tr, per, scratch);
      } else {
        k_cuda_grouped_linear(gy, dxs, dwt_d, dcounts, n, E, h, f, tr, per, scratch);
        k_cuda_grouped_linear_dx(gdx, ddyf, dwt_d, dcounts, n, E, h, f, tr, per, scratch);
        k_cuda_grouped_linear_dw(gdwe, dxs, ddyf, dcounts, n, E, h, f, tr, per, scratch);
      }
      check(name(tr ? "grouped_linear_t" : "grouped_linear", bf), sh, dget(gy, n * f, bf), y, n * f, tl);
      check(name(tr ? "grouped_linear_dx_t" : "grouped_linear_dx", bf), sh, dget(gdx, n * h, bf),
            dxr, n * h, tl);
      check(name(tr ? "grouped_linear_dw_t" : "grouped_linear_dw", bf), sh,
            dget(gdwe, E * h * f, 0), dwe, E * h * f, tl);
    }
    end_test();
  }
}

/* --ep's permutations (k_cuda_ep_plan, _sort, _unsort) against moe_ep.c,
 * exact (the rows only move): `size` source ranks of `local` experts each,
 * counts of 0 to 3 rows (zeros among them), M rows of which 3 past the
 * counted ones, fp32 and bf16 elements. */
static void test_ep(int64_t size, int64_t local, int64_t h) {
  const char *sh = SHAPE("size%lld local%lld h%lld", (long long)size, (long long)local, (long long)h);
  int64_t E = size * local;
  for (int bf = 0; bf < 2; bf++) { /* end_test frees the host buffers */
    int32_t *rc = halloc(E * 4), *counts = halloc(local * 4), *send = halloc(size * 4);
    int32_t *each = halloc(size * 4);
    int64_t M = 3;
    for (int64_t i = 0; i < E; i++) M += rc[i] = (int32_t)((i * 7 + size * 3 + local) % 4);
    float *y = hrand(M * h, 1), *rows = halloc(M * h * 4), *back = halloc(M * h * 4);
    if (bf) round_bf16(y, M * h);
    k_ep_sort(rows, counts, y, rc, M, h, size, local);
    k_ep_unsort(back, rows, rc, M, h, size, local);
    k_ep_plan(send, each, rc, E, size);
    int64_t elt = bf ? 2 : 4;
    void *dy = dput(y, M * h, bf), *grows = dnew(M * h, bf), *gback = dnew(M * h, bf);
    int32_t *drc = dput_raw(rc, E * 4), *gcounts = dalloc(local * 4), *gsend = dalloc(size * 4);
    int32_t *geach = dalloc(size * 4);
    k_cuda_ep_sort(grows, gcounts, dy, drc, M, h, size, local, elt);
    k_cuda_ep_unsort(gback, grows, drc, M, h, size, local, elt);
    k_cuda_ep_plan(gsend, geach, drc, E, size);
    check(name("ep_sort_rows", bf), sh, dget(grows, M * h, bf), rows, M * h, 0);
    check(name("ep_sort_counts", bf), sh, dget_ints(gcounts, local), ints_f(counts, local), local, 0);
    check(name("ep_unsort", bf), sh, dget(gback, M * h, bf), back, M * h, 0);
    check(name("ep_plan_send", bf), sh, dget_ints(gsend, size), ints_f(send, size), size, 0);
    check(name("ep_plan_each", bf), sh, dget_ints(geach, size), ints_f(each, size), size, 0);
    end_test();
  }
}

/* The routed shapes: one token, odd sizes, softmax and sigmoid scores with
 * and without renormalising, capacity factors that drop copies (0.5) and
 * that keep every one (2), fine-grained experts (64 of them, top 6), a
 * row longer than a block, more copies than the dispatch's sort has
 * threads (256), with and without drops. --moe runs all of them and nothing else. */
static void test_moe_shapes(void) {
  static const int64_t moe[][7] = {{1, 4, 2, 8, 12, 0, 1},   {37, 8, 2, 33, 20, 0, 1},
                                   {50, 8, 2, 16, 24, 1, 0}, {64, 64, 6, 32, 16, 0, 0},
                                   {129, 16, 4, 300, 40, 1, 1}};
  EACH(i, moe) test_moe(moe[i][0], moe[i][1], moe[i][2], moe[i][3], moe[i][4], (int)moe[i][5],
                        (int)moe[i][6], 0);
  test_moe(40, 8, 2, 16, 24, 0, 1, 0.5);
  test_moe(300, 8, 2, 8, 8, 0, 1, 0.5); /* more copies than the sort's threads */
  test_moe(33, 4, 2, 16, 8, 1, 1, 2.0);
  /* One rank, two, four, eight of 64 experts; a row longer than a block (300). */
  test_ep(1, 4, 8);
  test_ep(2, 4, 33);
  test_ep(4, 2, 300);
  test_ep(8, 8, 5);
}

/* Every kernel on the shapes of its lists. */
static void test_every_kernel(void) {
  static const int64_t gemm[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 96, 128}, {257, 129, 300}};
  EACH(i, gemm) test_gemm(gemm[i][0], gemm[i][1], gemm[i][2]);
  /* The timed search (SHARD_GEMM_SEARCH) on shapes not seen yet: whichever
   * candidate wins, the product is right (beta = 0.5 problems keep the
   * heuristics' choice; the bf16-output ones have beta = 0). */
  printf("GEMM timed search over 4 candidates:\n");
  k_cuda_gemm_set_search(4);
  test_gemm(33, 65, 47);
  k_cuda_gemm_set_search(0);
  static const int64_t mat[][2] = {{1, 1}, {3, 31}, {64, 768}, {129, 1000}, {300, 4097}};
  EACH(i, mat) {
    test_bias(mat[i][0], mat[i][1]);
    test_norm(1, mat[i][0], mat[i][1]);
    test_norm(0, mat[i][0], mat[i][1]);
    test_softmax(mat[i][0], mat[i][1] > 600 ? mat[i][1] / 8 : mat[i][1]);
  }
  /* Rows longer than the norms' registers hold (8192 fp32 values): 16-byte
   * loads, the tail read again. */
  test_norm(1, 2, 20000);
  test_norm(0, 2, 20000);
  static const int64_t elt[] = {1, 31, 4096, 100003};
  EACH(i, elt) {
    test_activations(elt[i]);
    test_optim(elt[i] < 3 ? 3 : elt[i]);
    test_dropout(elt[i], 0.1f);
  }
  test_dropout(1000, 0.0f);
  test_dropout(1000, 0.5f);
  test_dropout(1000, 1.0f);
  static const int64_t emb[][3] = {{1, 1, 1}, {37, 11, 5}, {256, 1000, 64}, {2048, 50257, 48}};
  EACH(i, emb) test_embedding(emb[i][0], emb[i][1], emb[i][2]);
  static const int64_t rope[][4] = {{1, 1, 1, 2}, {2, 17, 3, 10}, {2, 128, 4, 64}};
  EACH(i, rope) {
    test_rope(rope[i][0], rope[i][1], rope[i][2], rope[i][3]);
    test_layout(rope[i][0], rope[i][1], rope[i][2], rope[i][3]);
  }
  static const int64_t att[][6] = {{1, 1, 1, 1, 8, 1},   {2, 37, 4, 2, 32, 1},
                                   {1, 128, 4, 4, 64, 0}, {2, 65, 6, 2, 80, 1},
                                   {1, 200, 2, 1, 128, 1}, {1, 33, 2, 2, 256, 1}};
  EACH(i, att)
    test_attention(att[i][0], att[i][1], att[i][2], att[i][3], att[i][4], (int)att[i][5]);
  test_flash_shapes();
  static const int64_t ce[][3] = {{1, 2, 1}, {7, 33, 30}, {64, 1024, 1024}, {33, 50304, 50257}};
  EACH(i, ce) test_loss(ce[i][0], ce[i][1], ce[i][2]);

  /* An epilogue cuBLASLt has no algorithm for runs unfused, reported once. */
  static const int64_t epi[][3] = {{8, 16, 8}, {37, 24, 19}, {64, 96, 128}, {200, 72, 40},
                                   {129, 520, 300}};
  EACH(i, epi) {
    test_gemm_epilogue(epi[i][0], epi[i][1], epi[i][2]);
    test_gemm_gelu_aux(epi[i][0], epi[i][1], epi[i][2]);
  }
  static const int64_t bgrad[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 96, 128}, {129, 37, 300}};
  EACH(i, bgrad) test_gemm_bgrad(bgrad[i][0], bgrad[i][1], bgrad[i][2]);
  test_moe_shapes();
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--small") == 0) small = 2;
  if (argc > 2 && strcmp(argv[1], "--shapes") == 0) small = (size_t)atoi(argv[2]);
  int bench = argc > 1 && strcmp(argv[1], "--bench-attention") == 0;
  int attention = argc > 1 && strcmp(argv[1], "--attention") == 0;
  int moe = argc > 1 && strcmp(argv[1], "--moe") == 0;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    printf("SKIP: no CUDA device (cudaGetDeviceCount: %s)\n",
           err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return SKIP;
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device 0: %s, compute capability %d.%d, %d multiprocessors\n", prop.name, prop.major,
         prop.minor, prop.multiProcessorCount);
  void *ws = dalloc(K_CUDA_GEMM_WORKSPACE);
  ndbufs = 0; /* the workspace lives to the end */
  k_cuda_gemm_init(ws, K_CUDA_GEMM_WORKSPACE);
  if (bench) {
    bench_attention();
    k_cuda_gemm_shutdown();
    CK(cudaFree(ws));
    return 0;
  }
  if (attention) {
    small = 0, flash_only = 1; /* every flash shape, nothing else */
    test_flash_shapes();
  } else if (moe) {
    test_moe_shapes();
  } else {
    test_every_kernel();
  }
  printf("GEMM algorithm cache: %d shapes\n", k_cuda_gemm_cached());
  k_cuda_gemm_shutdown();
  CK(cudaFree(ws));
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
