/* The expert-parallel routed layer's row permutations (passes/ep_partition.c):
 * an expert rank receives, by all_to_all, the rows of each source rank
 * packed in source order, each source's rows sorted by its local expert;
 * its grouped products want them by expert. */
#include <string.h>

#include "kernels.h"

void k_ep_plan(int32_t *send, int32_t *each, const int32_t *counts, int64_t E, int64_t size) {
  int64_t local = E / size;
  for (int64_t r = 0; r < size; r++) {
    int32_t s = 0;
    for (int64_t e = 0; e < local; e++) s += counts[r * local + e];
    send[r] = s;
    each[r] = (int32_t)local;
  }
}

/* unsort = 0: rows[by expert, then source] from y[by source, then expert];
 * 1: the other way. The rows past the counted ones are zeros. */
static void permute(real *dst, const real *src, const int32_t *rc, int64_t rows, int64_t h,
                    int64_t size, int64_t local, int unsort) {
  /* start[s * local + e]: where source s's rows of expert e begin in y
   * (at most K_ROUTER_MAX experts in all); the expert-major offset is
   * walked below. */
  int64_t start[K_ROUTER_MAX + 1], total = 0;
  for (int64_t i = 0; i < size * local; i++) start[i] = total, total += rc[i];
  int64_t by_expert = 0;
  for (int64_t e = 0; e < local; e++)
    for (int64_t s = 0; s < size; s++) {
      int64_t at = start[s * local + e], n = rc[s * local + e];
      real *d = dst + (unsort ? at : by_expert) * h;
      const real *f = src + (unsort ? by_expert : at) * h;
      memcpy(d, f, sizeof(real) * (size_t)(n * h));
      by_expert += n;
    }
  memset(dst + total * h, 0, sizeof(real) * (size_t)((rows - total) * h));
}

void k_ep_sort(real *rows, int32_t *counts, const real *y, const int32_t *rc, int64_t M, int64_t h,
               int64_t size, int64_t local) {
  permute(rows, y, rc, M, h, size, local, 0);
  for (int64_t e = 0; e < local; e++) {
    int32_t c = 0;
    for (int64_t s = 0; s < size; s++) c += rc[s * local + e];
    counts[e] = c;
  }
}

void k_ep_unsort(real *y, const real *rows, const int32_t *rc, int64_t M, int64_t h, int64_t size,
                 int64_t local) {
  permute(y, rows, rc, M, h, size, local, 1);
}
