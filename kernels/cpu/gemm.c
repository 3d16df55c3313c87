/* Matrix multiplies through OpenBLAS, and the two bias helpers that go with
 * a linear layer. */
#include <cblas.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifdef SHARD_REAL_F64
#define CBLAS_GEMM cblas_dgemm
#else
#define CBLAS_GEMM cblas_sgemm
#endif

/* Columns a thread owns in k_sum_rows: two cache lines of real, so no two
 * threads write the same line and a block's accumulators fit registers. */
#define SUM_COLS (128 / (int64_t)sizeof(real))

void kcpu_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("shard kernels: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

/* openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP. Only the
 * pthread build needs telling: it does not know it runs inside our team. */
int kcpu_blas_serial_begin(void) {
  if (openblas_get_parallel() != OPENBLAS_THREAD)
    return 0;
  int saved = openblas_get_num_threads();
  openblas_set_num_threads(1);
  return saved;
}

void kcpu_blas_serial_end(int saved) {
  if (saved > 0)
    openblas_set_num_threads(saved);
}

int k_blas_serial_begin(void) { return kcpu_blas_serial_begin(); }
void k_blas_serial_end(int saved) { kcpu_blas_serial_end(saved); }

/* The OpenBLAS on Debian takes 32-bit sizes; a larger one is a bug of the
 * memory plan, not something to wrap around silently. */
static blasint blas_int(int64_t v) {
  if (v < 0 || v > INT32_MAX)
    kcpu_die("GEMM size %lld does not fit OpenBLAS's int", (long long)v);
  return (blasint)v;
}

void k_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha, const real *A,
            int64_t lda, const real *B, int64_t ldb, real beta, real *C, int64_t ldc) {
  if (M == 0 || N == 0)
    return;
  if (K == 0) {
    /* cblas leaves this case to the implementation: spell it out. */
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++)
        C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
    return;
  }
  CBLAS_GEMM(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
             blas_int(M), blas_int(N), blas_int(K), alpha, A, blas_int(lda), B, blas_int(ldb), beta,
             C, blas_int(ldc));
}

/* k_gemm_blocks: C cut into at most GEMM_BLOCKS blocks of rows or of
 * columns, each at least GEMM_BLOCK_MIN wide and GEMM_BLOCK_WORK
 * multiply-adds, a single-threaded GEMM each. */
#define GEMM_BLOCKS 8
#define GEMM_BLOCK_MIN 64
#define GEMM_BLOCK_WORK ((int64_t)1 << 21)

/* Threads that take independent blocks from a shared counter keep working
 * when the machine delays one of them, where OpenBLAS's own threads move
 * in step and wait for each other. The cut depends only on the sizes: each
 * block is the same GEMM whatever the team, so the results are the same
 * bits for any number of threads. Each block packs the operand it shares
 * with the others again, so the cut goes along the dimension whose shared
 * operand is the smaller, and blocks stay large. */
void k_gemm_blocks(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha,
                   const real *A, int64_t lda, const real *B, int64_t ldb, real beta, real *C,
                   int64_t ldc) {
  /* Cutting the columns shares A (M x K), cutting the rows shares B. */
  int by_cols = M * K <= K * N;
  int64_t len = by_cols ? N : M, nb = M * N * K / GEMM_BLOCK_WORK;
  if (nb > GEMM_BLOCKS)
    nb = GEMM_BLOCKS;
  if (nb > len / GEMM_BLOCK_MIN)
    nb = len / GEMM_BLOCK_MIN;
  if (nb < 2 || K == 0) {
    k_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  int64_t step = (len + nb - 1) / nb;
  step = (step + 15) / 16 * 16;
  nb = (len + step - 1) / step;
  int saved = kcpu_blas_serial_begin();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t blk = 0; blk < nb; blk++) {
    int64_t at = blk * step, w = len - at < step ? len - at : step;
    if (by_cols) /* columns at..at+w of op(B) and C */
      k_gemm(trans_a, trans_b, M, w, K, alpha, A, lda, trans_b ? B + at * ldb : B + at, ldb, beta,
             C + at, ldc);
    else /* rows at..at+w of op(A) and C */
      k_gemm(trans_a, trans_b, w, N, K, alpha, trans_a ? A + at : A + at * lda, lda, B, ldb, beta,
             C + at * ldc, ldc);
  }
  kcpu_blas_serial_end(saved);
}

/* Many small matrices (attention-sized matmuls, per-head products) keep
 * every thread busy only when the batch is split across the team, each
 * thread calling a single-threaded GEMM; one large matrix per batch entry is
 * better served by OpenBLAS's own threading. Each entry is one GEMM either
 * way, so the result is the same. This OpenBLAS (0.3.21) has no
 * cblas_?gemm_batch, hence the loop. */
void k_gemm_batched(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                    real alpha, const real *A, int64_t lda, int64_t stride_a, const real *B,
                    int64_t ldb, int64_t stride_b, real beta, real *C, int64_t ldc,
                    int64_t stride_c) {
  int64_t threads = omp_get_max_threads();
  int64_t per_entry = M * N * K;
  if (batch < 2 || threads < 2 || (batch < threads && per_entry > (int64_t)1 << 21)) {
    for (int64_t i = 0; i < batch; i++)
      k_gemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
             C + i * stride_c, ldc);
    return;
  }
  int saved = kcpu_blas_serial_begin();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < batch; i++)
    k_gemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
           C + i * stride_c, ldc);
  kcpu_blas_serial_end(saved);
}

void k_add_bias(real *y, const real *bias, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * n))
  for (int64_t r = 0; r < rows; r++) {
    real *yr = y + r * n;
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      yr[j] += bias[j];
  }
}

/* Parallel over column blocks, rows summed in order within each block: the
 * result is the same for any number of threads. */
void k_sum_rows(real *out, const real *x, int64_t rows, int64_t n) {
  int64_t blocks = (n + SUM_COLS - 1) / SUM_COLS;
#pragma omp parallel for schedule(static) if (kcpu_par(rows * n))
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t c0 = blk * SUM_COLS, w = n - c0 < SUM_COLS ? n - c0 : SUM_COLS;
    acc_t acc[SUM_COLS];
    for (int64_t j = 0; j < w; j++)
      acc[j] = 0;
    for (int64_t r = 0; r < rows; r++) {
      const real *xr = x + r * n + c0;
#pragma omp simd
      for (int64_t j = 0; j < w; j++)
        acc[j] += xr[j];
    }
    for (int64_t j = 0; j < w; j++)
      out[c0 + j] = (real)acc[j];
  }
}
