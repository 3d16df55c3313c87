/* Cross entropy of logits against integer targets, averaged over rows. */
#include <string.h>

#include "internal.h"

/* Rows per partial sum of the loss: at least 32, and never more than
 * CE_MAX_CHUNKS partials, so they fit the stack. It depends only on the
 * number of rows, and the partials are added in order: the loss has the same
 * bits for any number of threads. */
#define CE_MAX_CHUNKS 4096

/* Max and sum(exp(x - max)) of the first `valid` logits of a row. */
static void ce_row_stats(const real *x, int64_t valid, real *max, acc_t *sum) {
  real m = kcpu_max(x, valid);
  acc_t s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < valid; j++)
    s += k_exp(x[j] - m);
  *max = m;
  *sum = s;
}

static int32_t ce_target(const int32_t *targets, int64_t r, int64_t valid) {
  int32_t t = targets[r];
  if (t < 0 || t >= valid)
    kcpu_die("cross entropy target %d at row %lld outside [0, %lld)", t, (long long)r,
             (long long)valid);
  return t;
}

/* Rows whose target counts: all of them, or with `ignore` those whose
 * target is not K_IGNORE_INDEX. Counted in order, so exact. */
static int64_t ce_counted(const int32_t *targets, int64_t rows, int ignore) {
  if (!ignore) return rows;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; r++)
    n += targets[r] != K_IGNORE_INDEX;
  return n;
}

void k_cross_entropy_fwd(real *loss, const real *logits, const int32_t *targets, int64_t rows,
                         int64_t V, int64_t valid) {
  k_cross_entropy_ign_fwd(loss, logits, targets, rows, V, valid, 0);
}

void k_cross_entropy_bwd(real *dlogits, const real *logits, const int32_t *targets,
                         const real *dloss, int64_t rows, int64_t V, int64_t valid) {
  k_cross_entropy_ign_bwd(dlogits, logits, targets, dloss, rows, V, valid, 0);
}

void k_cross_entropy_ign_fwd(real *loss, const real *logits, const int32_t *targets,
                             int64_t rows, int64_t V, int64_t valid, int ignore) {
  int64_t chunk = (rows + CE_MAX_CHUNKS - 1) / CE_MAX_CHUNKS;
  chunk = chunk < 32 ? 32 : chunk;
  int64_t chunks = (rows + chunk - 1) / chunk;
  acc_t part[chunks > 0 ? chunks : 1];
#pragma omp parallel for schedule(static) if (kcpu_par(rows * valid))
  for (int64_t c = 0; c < chunks; c++) {
    int64_t r1 = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
    acc_t s = 0;
    for (int64_t r = c * chunk; r < r1; r++) {
      if (ignore && targets[r] == K_IGNORE_INDEX) continue;
      const real *x = logits + r * V;
      real m;
      acc_t sum;
      ce_row_stats(x, valid, &m, &sum);
      s += log(sum) + (acc_t)m - (acc_t)x[ce_target(targets, r, valid)];
    }
    part[c] = s;
  }
  acc_t total = 0;
  for (int64_t c = 0; c < chunks; c++)
    total += part[c];
  int64_t n = ce_counted(targets, rows, ignore);
  loss[0] = n > 0 ? (real)(total / (acc_t)n) : 0;
}

void k_cross_entropy_ign_bwd(real *dlogits, const real *logits, const int32_t *targets,
                             const real *dloss, int64_t rows, int64_t V, int64_t valid,
                             int ignore) {
  int64_t n = ce_counted(targets, rows, ignore);
  acc_t dl = n > 0 ? (acc_t)dloss[0] / (acc_t)n : 0;
#pragma omp parallel for schedule(static) if (kcpu_par(rows * V))
  for (int64_t r = 0; r < rows; r++) {
    const real *x = logits + r * V;
    real *dx = dlogits + r * V;
    if (ignore && targets[r] == K_IGNORE_INDEX) {
      memset(dx, 0, (size_t)V * sizeof(real));
      continue;
    }
    real m;
    acc_t sum;
    ce_row_stats(x, valid, &m, &sum);
    real scale = (real)(dl / sum);
#pragma omp simd
    for (int64_t j = 0; j < valid; j++)
      dx[j] = scale * k_exp(x[j] - m);
    dx[ce_target(targets, r, valid)] -= (real)dl;
    if (V > valid)
      memset(dx + valid, 0, (size_t)(V - valid) * sizeof(real));
  }
}

/* ---------------------------------------------- the vocabulary-parallel loss
 *
 * With the vocabulary split over t ranks each holds columns [lo, lo + V)
 * of the logits, of which its first n are real (the whole vocabulary's
 * first `valid` columns; the rest is padding). The loss never gathers the
 * logits: the caller all-reduces, one value per row each, the MAX of
 * k_ce_vp_max, then the SUM of k_ce_vp_sumexp and of k_ce_vp_target, and
 * k_ce_vp_loss (forward) or k_ce_vp_bwd (backward) finish on every rank. */

void k_ce_vp_max(real *rowmax, const real *logits, int64_t rows, int64_t V, int64_t n) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * n))
  for (int64_t r = 0; r < rows; r++)
    rowmax[r] = n > 0 ? kcpu_max(logits + r * V, n) : -INFINITY;
}

void k_ce_vp_sumexp(real *sumexp, const real *logits, const real *rowmax, int64_t rows, int64_t V,
                    int64_t n) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * n))
  for (int64_t r = 0; r < rows; r++) {
    const real *x = logits + r * V;
    real m = rowmax[r];
    acc_t s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++)
      s += k_exp(x[j] - m);
    sumexp[r] = (real)s;
  }
}

void k_ce_vp_target(real *tgt, const real *logits, const int32_t *targets, int64_t rows, int64_t V,
                    int64_t lo, int64_t n, int64_t valid) {
  for (int64_t r = 0; r < rows; r++) {
    int64_t t = ce_target(targets, r, valid) - lo;
    tgt[r] = t >= 0 && t < n ? logits[r * V + t] : 0;
  }
}

void k_ce_vp_loss(real *loss, const real *rowmax, const real *sumexp, const real *tgt,
                  int64_t rows) {
  acc_t total = 0;
  for (int64_t r = 0; r < rows; r++)
    total += log((acc_t)sumexp[r]) + (acc_t)rowmax[r] - (acc_t)tgt[r];
  loss[0] = rows > 0 ? (real)(total / (acc_t)rows) : 0;
}

void k_ce_vp_bwd(real *dlogits, const real *logits, const int32_t *targets, const real *dloss,
                 const real *rowmax, const real *sumexp, int64_t rows, int64_t V, int64_t lo,
                 int64_t n) {
  acc_t dl = rows > 0 ? (acc_t)dloss[0] / (acc_t)rows : 0;
#pragma omp parallel for schedule(static) if (kcpu_par(rows * V))
  for (int64_t r = 0; r < rows; r++) {
    const real *x = logits + r * V;
    real *dx = dlogits + r * V, m = rowmax[r];
    real scale = (real)(dl / (acc_t)sumexp[r]);
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      dx[j] = scale * k_exp(x[j] - m);
    int64_t t = (int64_t)targets[r] - lo;
    if (t >= 0 && t < n) dx[t] -= (real)dl;
    if (V > n) memset(dx + n, 0, (size_t)(V - n) * sizeof(real));
  }
}
