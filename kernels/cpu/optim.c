/* The element loops of the optimizer and the gradient norm. The runtime
 * (runtime/optim.c) splits the parameters among its threads and calls these
 * on its own ranges, inside one parallel region per step. */
#include "internal.h"

#if defined(__AVX512F__) && !defined(SHARD_REAL_F64)
#include <immintrin.h>
#endif

#ifdef SHARD_REAL_F64
#define SQRT sqrt
#else
#define SQRT sqrtf
#endif

/* The scalar form, the arithmetic of torch.optim.AdamW step by step
 * (unused where the AVX-512 loop below takes every element). */
__attribute__((unused)) static inline void adamw_one(real *w, real g, real *m, real *v, const KAdamW *h) {
  real gi = g * h->grad_scale;
  *w *= h->decay;
  *m += (gi - *m) * (1 - h->beta1); /* torch's lerp */
  *v = *v * h->beta2 + (1 - h->beta2) * gi * gi;
  *w -= h->step_size * *m / (SQRT(*v) / h->bc2_sqrt + h->eps);
}

#if defined(__AVX512F__) && !defined(SHARD_REAL_F64)
/* The same operations on 16 lanes, the tail through a mask: every element
 * gets the same instructions wherever a thread's range starts, so the
 * result does not depend on the split. Spelled with intrinsics because
 * under the default -fmath-errno GCC will not vectorise sqrtf. With
 * -march=native the compiler may contract multiplies and adds into FMAs
 * here, so a machine with AVX-512 and one without can differ in the last
 * bit of an update; on one machine results never depend on threads. */
void k_adamw(real *w, const real *g, real *m, real *v, int64_t n, const KAdamW *h) {
  const __m512 scale = _mm512_set1_ps(h->grad_scale), decay = _mm512_set1_ps(h->decay);
  const __m512 c1 = _mm512_set1_ps(1 - h->beta1), b2 = _mm512_set1_ps(h->beta2);
  const __m512 c2 = _mm512_set1_ps(1 - h->beta2), step = _mm512_set1_ps(h->step_size);
  const __m512 bc2 = _mm512_set1_ps(h->bc2_sqrt), eps = _mm512_set1_ps(h->eps);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 gi = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + i), scale);
    __m512 wi = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + i), decay);
    __m512 mi = _mm512_maskz_loadu_ps(k, m + i), vi = _mm512_maskz_loadu_ps(k, v + i);
    mi = _mm512_add_ps(mi, _mm512_mul_ps(_mm512_sub_ps(gi, mi), c1));
    vi = _mm512_add_ps(_mm512_mul_ps(vi, b2), _mm512_mul_ps(_mm512_mul_ps(c2, gi), gi));
    __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    wi = _mm512_sub_ps(wi, _mm512_div_ps(_mm512_mul_ps(step, mi), den));
    _mm512_mask_storeu_ps(w + i, k, wi);
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
  }
}
#else
void k_adamw(real *w, const real *g, real *m, real *v, int64_t n, const KAdamW *h) {
  for (int64_t i = 0; i < n; i++)
    adamw_one(w + i, g[i], m + i, v + i, h);
}
#endif

/* Eight running sums, each over every eighth element, then added in a
 * fixed order: vectorised, and the same bits for the same n. */
double k_sum_squares(const real *x, int64_t n) {
  enum { LANES = 8 };
  double lane[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++)
      lane[l] += (double)x[i + l] * (double)x[i + l];
  for (; i < n; i++)
    lane[0] += (double)x[i] * (double)x[i];
  double s = 0;
  for (int l = 0; l < LANES; l++)
    s += lane[l];
  return s;
}
