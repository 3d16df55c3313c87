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
 * columns, each at least GEMM_BLOCK_MIN wide (GEMM_BLOCK_MIN_TEAM in the
 * team form) and GEMM_BLOCK_WORK multiply-adds, a single-threaded GEMM
 * each. */
#define GEMM_BLOCKS 4
#define GEMM_BLOCK_MIN 256
#define GEMM_BLOCK_WORK ((int64_t)1 << 21)
/* The team form shares its blocks with other work of the region, so that
 * evening out the threads' shares matters more than each block's packing:
 * narrower blocks. */
#define GEMM_BLOCK_MIN_TEAM 64

/* How k_gemm_blocks cuts C: `nb` blocks of `step` rows (or columns when
 * by_cols) out of `len`; nb < 2 means one GEMM. Each block packs the
 * operand it shares with the others again, so the cut goes along the
 * dimension whose shared operand is the smaller, and blocks stay large. */
typedef struct GemmCut {
  int by_cols;
  int64_t len, step, nb;
} GemmCut;

static GemmCut gemm_cut(int64_t M, int64_t N, int64_t K, int64_t min_width) {
  GemmCut c = {.by_cols = M * K <= K * N}; /* columns share A (M x K), rows share B */
  c.len = c.by_cols ? N : M;
  c.nb = M * N * K / GEMM_BLOCK_WORK;
  if (c.nb > GEMM_BLOCKS)
    c.nb = GEMM_BLOCKS;
  if (c.nb > c.len / min_width)
    c.nb = c.len / min_width;
  if (c.nb < 2 || K == 0) {
    c.nb = 1;
    return c;
  }
  c.step = (c.len + c.nb - 1) / c.nb;
  c.step = (c.step + 15) / 16 * 16;
  c.nb = (c.len + c.step - 1) / c.step;
  return c;
}

static void gemm_block(const GemmCut *c, int64_t blk, int trans_a, int trans_b, int64_t M,
                       int64_t N, int64_t K, real alpha, const real *A, int64_t lda, const real *B,
                       int64_t ldb, real beta, real *C, int64_t ldc) {
  if (c->nb == 1) {
    k_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  int64_t at = blk * c->step, w = c->len - at < c->step ? c->len - at : c->step;
  if (c->by_cols) /* columns at..at+w of op(B) and C */
    k_gemm(trans_a, trans_b, M, w, K, alpha, A, lda, trans_b ? B + at * ldb : B + at, ldb, beta,
           C + at, ldc);
  else /* rows at..at+w of op(A) and C */
    k_gemm(trans_a, trans_b, w, N, K, alpha, trans_a ? A + at : A + at * lda, lda, B, ldb, beta,
           C + at * ldc, ldc);
}

/* Threads that take independent blocks from a shared counter keep working
 * when the machine delays one of them, where OpenBLAS's own threads move
 * in step and wait for each other. The cut depends only on the sizes: each
 * block is the same GEMM whatever the team, so the results are the same
 * bits for any number of threads. */
void k_gemm_blocks(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha,
                   const real *A, int64_t lda, const real *B, int64_t ldb, real beta, real *C,
                   int64_t ldc) {
  if (M == 0 || N == 0)
    return;
  GemmCut c = gemm_cut(M, N, K, GEMM_BLOCK_MIN);
  /* A GEMM with work for several blocks but sides too short for wide ones
   * (a weight gradient of a small layer: 256 x 128 over 1024 tokens) gets
   * narrow blocks rather than OpenBLAS's threads, which under load ran it
   * 7 times slower on 2 threads than on 1. */
  if (c.nb == 1 && M * N * K >= 2 * GEMM_BLOCK_WORK)
    c = gemm_cut(M, N, K, GEMM_BLOCK_MIN_TEAM);
  if (c.nb == 1) {
    k_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  int saved = kcpu_blas_serial_begin();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t blk = 0; blk < c.nb; blk++)
    gemm_block(&c, blk, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  kcpu_blas_serial_end(saved);
}

/* The same blocks shared by the team the caller is already running: an
 * orphaned loop without a barrier at its end (see kernels.h). */
void k_gemm_blocks_team(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha,
                        const real *A, int64_t lda, const real *B, int64_t ldb, real beta, real *C,
                        int64_t ldc) {
  if (M == 0 || N == 0)
    return;
  GemmCut c = gemm_cut(M, N, K, GEMM_BLOCK_MIN_TEAM);
#pragma omp for schedule(dynamic, 1) nowait
  for (int64_t blk = 0; blk < c.nb; blk++)
    gemm_block(&c, blk, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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

/* Columns c0 .. c0 + SUM_COLS - 1 of k_sum_rows, rows in order. */
static void sum_rows_block(real *out, const real *x, int64_t rows, int64_t n, int64_t blk) {
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

/* Parallel over column blocks, rows summed in order within each block: the
 * result is the same for any number of threads. */
void k_sum_rows(real *out, const real *x, int64_t rows, int64_t n) {
  int64_t blocks = (n + SUM_COLS - 1) / SUM_COLS;
#pragma omp parallel for schedule(static) if (kcpu_par(rows * n))
  for (int64_t blk = 0; blk < blocks; blk++)
    sum_rows_block(out, x, rows, n, blk);
}

void k_sum_rows_team(real *out, const real *x, int64_t rows, int64_t n) {
  int64_t blocks = (n + SUM_COLS - 1) / SUM_COLS;
#pragma omp for schedule(dynamic, 1) nowait
  for (int64_t blk = 0; blk < blocks; blk++)
    sum_rows_block(out, x, rows, n, blk);
}
