/* Token embeddings: a row gather forward, a scatter-add backward. */
#include <string.h>

#include "internal.h"

/* Columns a thread owns in the backward scatter: two cache lines of real. */
#define EMB_COLS (128 / (int64_t)sizeof(real))

void k_embedding_fwd(real *out, const int32_t *ids, const real *table, int64_t n, int64_t h) {
#pragma omp parallel for schedule(static) if (kcpu_par(n * h))
  for (int64_t i = 0; i < n; i++)
    memcpy(out + i * h, table + (int64_t)ids[i] * h, (size_t)h * sizeof(real));
}

/* Several tokens may share an id, so rows of dtable receive several adds.
 * Splitting the work by columns gives every thread disjoint memory and keeps
 * the adds to each element in token order: no atomics, and the same bits for
 * any number of threads. The ids are checked here because a bad one would
 * write outside dtable. */
void k_embedding_bwd(real *dtable, const int32_t *ids, const real *dout, int64_t n, int64_t V,
                     int64_t h) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= V)
      kcpu_die("embedding id %d at %lld outside [0, %lld)", ids[i], (long long)i, (long long)V);
  k_embedding_bwd_vp(dtable, ids, dout, n, V, h, 0); /* every id is in range */
}

void k_arange(int32_t *out, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    out[i] = (int32_t)i;
}

/* The vocabulary-parallel forms: this rank's table holds rows [lo, lo + V)
 * of the whole; ids outside give zero rows (forward) and add nothing
 * (backward), so the ranks' results sum to the whole lookup. Ids are
 * checked against the whole vocabulary by the data loader. */
void k_embedding_fwd_vp(real *out, const int32_t *ids, const real *table, int64_t n, int64_t h,
                        int64_t lo, int64_t V) {
#pragma omp parallel for schedule(static) if (kcpu_par(n * h))
  for (int64_t i = 0; i < n; i++) {
    int64_t row = (int64_t)ids[i] - lo;
    if (row >= 0 && row < V)
      memcpy(out + i * h, table + row * h, (size_t)h * sizeof(real));
    else
      memset(out + i * h, 0, (size_t)h * sizeof(real));
  }
}

void k_embedding_bwd_vp(real *dtable, const int32_t *ids, const real *dout, int64_t n, int64_t V,
                        int64_t h, int64_t lo) {
#pragma omp parallel for schedule(static) if (kcpu_par(V * h))
  for (int64_t v = 0; v < V; v++)
    memset(dtable + v * h, 0, (size_t)h * sizeof(real));
  int64_t blocks = (h + EMB_COLS - 1) / EMB_COLS;
#pragma omp parallel for schedule(static) if (kcpu_par(n * h))
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t c0 = blk * EMB_COLS, w = h - c0 < EMB_COLS ? h - c0 : EMB_COLS;
    for (int64_t i = 0; i < n; i++) {
      int64_t row = (int64_t)ids[i] - lo;
      if (row < 0 || row >= V) continue;
      real *dst = dtable + row * h + c0;
      const real *src = dout + i * h + c0;
#pragma omp simd
      for (int64_t j = 0; j < w; j++)
        dst[j] += src[j];
    }
  }
}
