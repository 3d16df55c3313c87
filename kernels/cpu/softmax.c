/* Softmax over the last dimension and the causal mask of score matrices. */
#include "internal.h"

void k_softmax_fwd(real *y, const real *x, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * n))
  for (int64_t r = 0; r < rows; r++) {
    const real *xr = x + r * n;
    real *yr = y + r * n;
    real m = kcpu_max(xr, n);
    acc_t s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++) {
      yr[j] = k_exp(xr[j] - m);
      s += yr[j];
    }
    real inv = (real)(1.0 / s);
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      yr[j] *= inv;
  }
}

/* dx = y (dy - sum(y dy)): the Jacobian of softmax applied to dy. */
void k_softmax_bwd(real *dx, const real *y, const real *dy, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * n))
  for (int64_t r = 0; r < rows; r++) {
    const real *yr = y + r * n, *dyr = dy + r * n;
    real *dxr = dx + r * n;
    acc_t s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++)
      s += (acc_t)yr[j] * dyr[j];
    real dot = (real)s;
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      dxr[j] = yr[j] * (dyr[j] - dot);
  }
}

void k_causal_mask(real *y, const real *x, int64_t batch, int64_t s, real fill) {
#pragma omp parallel for schedule(static) if (kcpu_par(batch * s * s))
  for (int64_t r = 0; r < batch * s; r++) {
    int64_t i = r % s;
    const real *xr = x + r * s;
    real *yr = y + r * s;
    for (int64_t j = 0; j <= i; j++)
      yr[j] = xr[j];
    for (int64_t j = i + 1; j < s; j++)
      yr[j] = fill;
  }
}
