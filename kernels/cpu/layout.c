/* Data movement: heads in and out of their own dimension, transposes of two
 * dimensions, and strided block copies (split and concat). */
#include <string.h>

#include "internal.h"

/* Edge of the square tiles a transpose of small elements goes through, so
 * that both the reads and the writes stay within a few cache lines. */
#define TILE 32

void k_split_heads(real *y, const real *x, int64_t b, int64_t s, int64_t H, int64_t d) {
#pragma omp parallel for schedule(static) if (kcpu_par(b * s * H * d))
  for (int64_t r = 0; r < b * H * s; r++) { /* r indexes y's rows (bi, h, t) */
    int64_t t = r % s, bh = r / s, h = bh % H, bi = bh / H;
    memcpy(y + r * d, x + ((bi * s + t) * H + h) * d, (size_t)d * sizeof(real));
  }
}

void k_merge_heads(real *y, const real *x, int64_t b, int64_t s, int64_t H, int64_t d) {
#pragma omp parallel for schedule(static) if (kcpu_par(b * s * H * d))
  for (int64_t r = 0; r < b * s * H; r++) { /* r indexes y's rows (bi, t, h) */
    int64_t h = r % H, bt = r / H, t = bt % s, bi = bt / s;
    memcpy(y + r * d, x + ((bi * H + h) * s + t) * d, (size_t)d * sizeof(real));
  }
}

/* For each (outer, mid) pair this is a transpose of an n0 x n1 matrix whose
 * elements are `inner` reals: done in TILE x TILE tiles of it. */
void k_transpose(real *y, const real *x, int64_t outer, int64_t n0, int64_t mid, int64_t n1,
                 int64_t inner) {
  int64_t t0 = (n0 + TILE - 1) / TILE, t1 = (n1 + TILE - 1) / TILE;
  int64_t units = outer * mid * t0 * t1;
  size_t bytes = (size_t)inner * sizeof(real);
#pragma omp parallel for schedule(static) if (kcpu_par(outer * n0 * mid * n1 * inner))
  for (int64_t u = 0; u < units; u++) {
    int64_t a = u % t0, rest = u / t0, c = rest % t1;
    rest /= t1;
    int64_t m = rest % mid, o = rest / mid;
    int64_t i0e = (a + 1) * TILE < n0 ? (a + 1) * TILE : n0;
    int64_t i1e = (c + 1) * TILE < n1 ? (c + 1) * TILE : n1;
    for (int64_t i1 = c * TILE; i1 < i1e; i1++)
      for (int64_t i0 = a * TILE; i0 < i0e; i0++) {
        real *dst = y + (((o * n1 + i1) * mid + m) * n0 + i0) * inner;
        const real *src = x + (((o * n0 + i0) * mid + m) * n1 + i1) * inner;
        if (inner == 1)
          *dst = *src;
        else
          memcpy(dst, src, bytes);
      }
  }
}

void k_copy2d(real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (kcpu_par(rows * cols))
  for (int64_t r = 0; r < rows; r++)
    memcpy(dst + r * ldd, src + r * lds, (size_t)cols * sizeof(real));
}
