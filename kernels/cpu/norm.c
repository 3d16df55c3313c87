/* Layer normalisation and RMS normalisation over the last dimension. */
#include <omp.h>
#include <string.h>

#include "internal.h"

/* Rows per block of the backward (see norm_bwd), and the largest
 * normalised dimension, whose gradient sums must fit the stack. */
#define NORM_BLOCK 1024
#define NORM_MAX_H 65536

/* Mean and 1/sqrt(var + eps) of one row, two passes in double: the
 * one-pass formula loses digits when the mean is large next to the spread. */
static void ln_stats(const real *x, int64_t h, real eps, real *mean, real *rstd) {
  acc_t s = 0, v = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < h; j++)
    s += x[j];
  acc_t m = s / (acc_t)h;
#pragma omp simd reduction(+ : v)
  for (int64_t j = 0; j < h; j++)
    v += ((acc_t)x[j] - m) * ((acc_t)x[j] - m);
  *mean = (real)m;
  *rstd = (real)(1.0 / sqrt(v / (acc_t)h + (acc_t)eps));
}

static real rms_rstd(const real *x, int64_t h, real eps) {
  acc_t s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < h; j++)
    s += (acc_t)x[j] * x[j];
  return (real)(1.0 / sqrt(s / (acc_t)h + (acc_t)eps));
}

/* One row of each forward; the row's input x may be the row of s that the
 * fused add just wrote. */
static void ln_row(real *yr, const real *xr, const real *w, const real *b, int64_t h, real eps) {
  real mean, rstd;
  ln_stats(xr, h, eps, &mean, &rstd);
  if (b) {
#pragma omp simd
    for (int64_t j = 0; j < h; j++)
      yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < h; j++)
      yr[j] = (xr[j] - mean) * rstd * w[j];
  }
}

static void rms_row(real *yr, const real *xr, const real *w, int64_t h, real eps) {
  real rstd = rms_rstd(xr, h, eps);
#pragma omp simd
  for (int64_t j = 0; j < h; j++)
    yr[j] = xr[j] * rstd * w[j];
}

/* s = a + b, one row, while it is in cache for the norm that follows. */
static void add_row(real *sr, const real *ar, const real *br, int64_t h) {
#pragma omp simd
  for (int64_t j = 0; j < h; j++)
    sr[j] = ar[j] + br[j];
}

void k_layernorm_fwd(real *y, const real *x, const real *w, const real *b, int64_t rows, int64_t h,
                     real eps) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * h))
  for (int64_t r = 0; r < rows; r++)
    ln_row(y + r * h, x + r * h, w, b, h, eps);
}

void k_rmsnorm_fwd(real *y, const real *x, const real *w, int64_t rows, int64_t h, real eps) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * h))
  for (int64_t r = 0; r < rows; r++)
    rms_row(y + r * h, x + r * h, w, h, eps);
}

void k_add_layernorm_fwd(real *s, real *y, const real *a, const real *b, const real *w,
                         const real *bias, int64_t rows, int64_t h, real eps) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * h))
  for (int64_t r = 0; r < rows; r++) {
    add_row(s + r * h, a + r * h, b + r * h, h);
    ln_row(y + r * h, s + r * h, w, bias, h, eps);
  }
}

void k_add_rmsnorm_fwd(real *s, real *y, const real *a, const real *b, const real *w, int64_t rows,
                       int64_t h, real eps) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * h))
  for (int64_t r = 0; r < rows; r++) {
    add_row(s + r * h, a + r * h, b + r * h, h);
    rms_row(y + r * h, s + r * h, w, h, eps);
  }
}

/* One row of dx for either backward. With xhat the normalised input and
 * g = dy w:
 *   layernorm: dx = rstd (g - mean(g) - xhat mean(g xhat))
 *   rmsnorm:   dx = rstd (g - xhat mean(g xhat))
 * The row's statistics go to *mean and *rstd for the weight gradients.
 * dres (NULL: none), a residual's gradient, is added to dx once dx is
 * rounded to a real, in a loop of its own so that no multiply-add
 * contracts across the two: the same bits as a separate add. */
static void norm_row_dx(int layer, real *dx, const real *dy, const real *x, const real *w,
                        const real *dres, int64_t h, real eps, real *mean, real *rstd) {
  *mean = 0;
  if (layer)
    ln_stats(x, h, eps, mean, rstd);
  else
    *rstd = rms_rstd(x, h, eps);
  real m = *mean, rs = *rstd;
  acc_t sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
  for (int64_t j = 0; j < h; j++) {
    real g = dy[j] * w[j];
    sg += g;
    sgx += (acc_t)g * ((x[j] - m) * rs);
  }
  real a = layer ? (real)(sg / (acc_t)h) : 0, c = (real)(sgx / (acc_t)h);
#pragma omp simd
  for (int64_t j = 0; j < h; j++)
    dx[j] = rs * (dy[j] * w[j] - a - (x[j] - m) * rs * c);
  if (dres) {
#pragma omp simd
    for (int64_t j = 0; j < h; j++)
      dx[j] += dres[j];
  }
}

/* Columns [c0, c1) of dw (and db) get the rows r0 .. r1 - 1 added, in row
 * order. */
static void norm_cols_dw(acc_t *tw, acc_t *tb, const real *dy, const real *x, const real *stat,
                         int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t h) {
  for (int64_t r = r0; r < r1; r++) {
    const real *xr = x + r * h, *dyr = dy + r * h;
    real m = stat[2 * (r - r0)], rs = stat[2 * (r - r0) + 1];
#pragma omp simd
    for (int64_t j = c0; j < c1; j++)
      tw[j] += (acc_t)dyr[j] * ((xr[j] - m) * rs);
    if (tb) {
#pragma omp simd
      for (int64_t j = c0; j < c1; j++)
        tb[j] += dyr[j];
    }
  }
}

/* Rows go in blocks of NORM_BLOCK: first dx row by row, keeping each row's
 * statistics, then the weight gradients column by column, each column
 * owned by one thread and summed in row order. The split of columns among
 * threads changes no sum, so the results are the same bits for any team. */
static void norm_bwd(int layer, real *dx, real *dw, real *db, const real *dy, const real *x,
                     const real *w, const real *dres, int64_t rows, int64_t h, real eps) {
  /* The sums live on the caller's stack (a kernel never allocates). */
  if (h > NORM_MAX_H)
    kcpu_die("normalised dimension %lld above %d", (long long)h, NORM_MAX_H);
  acc_t tw[h], tb[db ? h : 1];
  real stat[2 * NORM_BLOCK];
  memset(tw, 0, sizeof tw);
  memset(tb, 0, sizeof tb);
#pragma omp parallel if (kcpu_par(rows * h))
  {
    int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
    /* Column ranges in whole cache lines, so threads never share one. */
    int64_t unit = 64 / (int64_t)sizeof(acc_t), units = (h + unit - 1) / unit;
    int64_t c0 = units * me / team * unit, c1 = units * (me + 1) / team * unit;
    c0 = c0 < h ? c0 : h;
    c1 = c1 < h ? c1 : h;
    for (int64_t r0 = 0; r0 < rows; r0 += NORM_BLOCK) {
      int64_t r1 = r0 + NORM_BLOCK < rows ? r0 + NORM_BLOCK : rows;
#pragma omp for schedule(static)
      for (int64_t r = r0; r < r1; r++)
        norm_row_dx(layer, dx + r * h, dy + r * h, x + r * h, w, dres ? dres + r * h : NULL, h,
                    eps, &stat[2 * (r - r0)],
                    &stat[2 * (r - r0) + 1]);
      norm_cols_dw(tw, db ? tb : NULL, dy, x, stat, r0, r1, c0, c1, h);
#pragma omp barrier
    }
  }
  for (int64_t j = 0; j < h; j++)
    dw[j] = (real)tw[j];
  if (db)
    for (int64_t j = 0; j < h; j++)
      db[j] = (real)tb[j];
}

void k_layernorm_bwd(real *dx, real *dw, real *db, const real *dy, const real *x, const real *w,
                     int64_t rows, int64_t h, real eps) {
  norm_bwd(1, dx, dw, db, dy, x, w, NULL, rows, h, eps);
}

void k_rmsnorm_bwd(real *dx, real *dw, const real *dy, const real *x, const real *w, int64_t rows,
                   int64_t h, real eps) {
  norm_bwd(0, dx, dw, NULL, dy, x, w, NULL, rows, h, eps);
}

void k_layernorm_bwd_res(real *dx, real *dw, real *db, const real *dy, const real *x,
                         const real *w, const real *dres, int64_t rows, int64_t h, real eps) {
  norm_bwd(1, dx, dw, db, dy, x, w, dres, rows, h, eps);
}

void k_rmsnorm_bwd_res(real *dx, real *dw, const real *dy, const real *x, const real *w,
                       const real *dres, int64_t rows, int64_t h, real eps) {
  norm_bwd(0, dx, dw, NULL, dy, x, w, dres, rows, h, eps);
}
