/* memplan_fit: the memory plan's fast first-fit (passes/memplan_fit.c)
 * against the plain scan it replaced, on random regions: every offset and
 * every region size must be equal. The shapes of lifetime cover what the
 * fast paths rely on: short temporaries, nested activations that are all
 * live across one boundary, two such groups (a B/W split), long ones that
 * live with some but not all, and buffers of 0 bytes. Then a timing: a
 * the two regions of 10,000 layers (200,000 buffers each) must place in well
 * under a second (the plain scan took minutes). Prints the cases, the
 * differences and the time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "passes/memplan_planner.h"

/* The plain scan (the plan's first-fit before memplan_fit.c), verbatim
 * but for its names. */
static int cmp_ref(const void *a, const void *b) {
  const PassFitItem *x = a, *y = b;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return (x->key > y->key) - (x->key < y->key);
}

static int64_t ref_first_fit(PassFitItem *items, int n) {
  qsort(items, (size_t)n, sizeof *items, cmp_ref);
  PassFitItem **placed = malloc((size_t)(n > 0 ? n : 1) * sizeof *placed);
  int np = 0;
  int64_t top = 0;
  for (int i = 0; i < n; i++) {
    PassFitItem *it = &items[i];
    int64_t off = 0;
    for (int j = 0; j < np; j++) {
      PassFitItem *q = placed[j];
      if (q->last < it->first || it->last < q->first) continue;
      if (q->offset >= off + it->size) break;
      if (q->offset + q->size > off) off = q->offset + q->size;
    }
    int at = 0;
    while (at < np && placed[at]->offset <= off) at++;
    memmove(placed + at + 1, placed + at, (size_t)(np - at) * sizeof *placed);
    placed[at] = it;
    np++;
    it->offset = off;
    if (off + it->size > top) top = off + it->size;
  }
  free(placed);
  return (top + 63) / 64 * 64;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static int below(int n) { return (int)(next() % (uint64_t)n); }

/* n random items of lifetime shape `kind` over T times. */
static void make(PassFitItem *it, int n, int T, int kind) {
  for (int i = 0; i < n; i++) {
    int64_t sizes[] = {0, 64, 128, 192, 1024, 4096, 64 * below(40)};
    it[i].size = sizes[below(7)];
    int a = below(T), len;
    switch (kind) {
    case 0: len = below(6); break;                 /* temporaries */
    case 1: a = below(T / 2); len = 2 * (T / 2 - a) + below(3); break; /* nested, one boundary */
    case 2: a = below(T / 2) + (i % 2) * (T / 4); len = T / 4 + below(T / 4); break; /* two groups */
    default: len = below(3) ? below(8) : below(T); break; /* short and long mixed */
    }
    it[i].first = a;
    it[i].last = a + len;
    it[i].key = i;
    it[i].offset = -1;
  }
}

int main(void) {
  int bad = 0, cases = 0;
  for (int kind = 0; kind < 4; kind++) {
    for (int rep = 0; rep < 60; rep++) {
      int n = 1 + below(rep < 30 ? 40 : 1500), T = 4 + below(400);
      PassFitItem *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
      make(a, n, T, kind);
      memcpy(b, a, (size_t)n * sizeof *a);
      int64_t ra = ref_first_fit(a, n), rb = pass_memplan_first_fit(b, n);
      int diff = ra != rb;
      for (int i = 0; i < n; i++)
        if (a[i].key != b[i].key || a[i].offset != b[i].offset) diff++;
      if (diff && bad < 5)
        printf("  kind %d, %d items: region %lld against %lld, %d differences\n", kind, n,
               (long long)rb, (long long)ra, diff);
      bad += diff != 0;
      cases++;
      free(a);
      free(b);
    }
  }
  printf("memplan_fit: %d random regions, %d differ from the plain scan\n", cases, bad);

  /* 10,000 layers, planned as memplan.c plans them, one region at a time:
   * per layer 20 temporaries that live a few nodes, and 20 activations
   * kept from the layer's forward to its backward. */
  int L = 10000, per = 20, n = L * per, T = 2 * L * 50;
  PassFitItem *tmp = malloc((size_t)n * sizeof *tmp), *act = malloc((size_t)n * sizeof *act);
  for (int l = 0, k = 0; l < L; l++)
    for (int j = 0; j < per; j++, k++) {
      int at = l * 50 + 2 * j;
      tmp[k] = (PassFitItem){64 * (1 + j % 7), -1, at, at + 1 + j % 3, k};
      act[k] = (PassFitItem){64 * (1 + j % 5), -1, at, T - 1 - at, k};
    }
  clock_t t0 = clock();
  int64_t bytes = pass_memplan_first_fit(tmp, n) + pass_memplan_first_fit(act, n);
  double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
  printf("memplan_fit: 2 x %d buffers of 10,000 layers placed in %.3f s of CPU (bound 1 s), "
         "%lld bytes\n", n, s, (long long)bytes);
  free(tmp);
  free(act);
  if (bad || s > 1.0) {
    printf("FAIL\n");
    return 1;
  }
  printf("PASS\n");
  return 0;
}
