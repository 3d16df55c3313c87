/* Interval first-fit for the memory plan's regions (memplan_planner.h:
 * pass_memplan_first_fit), in time near-linear in the buffers.
 *
 * The rule is the plain one: largest first, each buffer at the lowest
 * offset where it overlaps no placed buffer that is live at the same time.
 * The plain way scans every placed buffer for each buffer it places, which
 * made a model of 4,000 layers take 45 s to compile. Two facts make most
 * of that scan unnecessary while giving the very same offsets:
 *
 * - The answer depends only on the placed buffers live at the same time
 *   (call them S), taken in offset order. Buffers that live a short time,
 *   the temporaries, see a handful of others; an index over time finds
 *   them without looking at the rest.
 * - The placed buffers, taken together, always cover [0, top) without a
 *   hole: each goes at or below the top of those it must avoid, so at or
 *   below `top`. When S is every placed buffer (activations kept for the
 *   backward: all of them are live across the forward-backward boundary),
 *   the lowest free offset is therefore `top` itself, without a scan.
 *
 * Offsets equal to the plain scan's are what the golden plans check
 * (tests/codegen/plan_*.expected), and tests/passes/memplan_fit.c compares
 * the two on random lifetimes. */
#include <stdlib.h>
#include <string.h>

#include "memplan_planner.h"

#define ALIGN 64
static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* A growable list of item indices. */
typedef struct List {
  int *v;
  int n, cap;
} List;

static void list_push(List *l, int x) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 4;
    l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    if (!l->v) die("out of memory");
  }
  l->v[l->n++] = x;
}

/* Which placed items are live at a time, and which start at a time: an
 * item is live during [a, b] of another exactly when it is live at a, or
 * it starts in (a, b]. `stab` is a segment tree over time whose nodes hold
 * the items whose lifetime covers the node's whole range (each item in at
 * most 2 log T nodes); the items live at t are those of the nodes on the
 * path from the leaf t to the root. */
typedef struct TimeIndex {
  int size;    /* leaves: a power of two above the last time */
  List *stab;  /* 2 * size nodes */
  List *start; /* size lists: the items that start at t */
} TimeIndex;

static void index_add(TimeIndex *x, int id, int first, int last) {
  for (int l = first + x->size, r = last + x->size + 1; l < r; l >>= 1, r >>= 1) {
    if (l & 1) list_push(&x->stab[l++], id);
    if (r & 1) list_push(&x->stab[--r], id);
  }
  list_push(&x->start[first], id);
}

static int cmp_item(const void *a, const void *b) {
  const PassFitItem *x = a, *y = b;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return (x->key > y->key) - (x->key < y->key);
}

/* Where a placed item lies. */
typedef struct Span {
  int64_t offset, end;
} Span;

static int cmp_span(const void *a, const void *b) {
  int64_t x = ((const Span *)a)->offset, y = ((const Span *)b)->offset;
  return (x > y) - (x < y);
}

static Span span_of(const PassFitItem *q) { return (Span){q->offset, q->offset + q->size}; }

/* The lowest offset for `size` bytes among the placed items S[0..ns) that
 * live with it, in offset order: the plain scan, over S alone. Items of
 * equal offset may come in any order: the scan's result does not depend
 * on it. */
static int64_t scan(const Span *S, int ns, int64_t size) {
  int64_t off = 0;
  for (int j = 0; j < ns; j++) {
    if (S[j].offset >= off + size) break;
    if (S[j].end > off) off = S[j].end;
  }
  return off;
}

int64_t pass_memplan_first_fit(PassFitItem *items, int n) {
  qsort(items, (size_t)n, sizeof *items, cmp_item);
  int tmax = 0;
  for (int i = 0; i < n; i++) {
    if (items[i].first < 0 || items[i].last < items[i].first) die("a lifetime out of order");
    if (items[i].last > tmax) tmax = items[i].last;
  }
  TimeIndex x = {1, NULL, NULL};
  while (x.size <= tmax) x.size *= 2;
  x.stab = calloc((size_t)2 * x.size, sizeof *x.stab);
  x.start = calloc((size_t)x.size, sizeof *x.start);
  Span *S = malloc((size_t)(n > 0 ? n : 1) * sizeof *S);
  if (!x.stab || !x.start || !S) die("out of memory");
  int64_t top = 0;
  int min_last = 0, max_first = 0; /* over the placed items */
  for (int i = 0; i < n; i++) {
    PassFitItem *it = &items[i];
    int64_t off;
    if (i == 0 || it->size == 0) {
      off = 0; /* what the scan gives: an empty range overlaps nothing */
    } else if (max_first <= it->last && it->first <= min_last) {
      off = top; /* live with every placed item, which cover [0, top) */
    } else {
      int ns = 0;
      for (int v = it->first + x.size; v >= 1; v >>= 1)
        for (int j = 0; j < x.stab[v].n; j++) S[ns++] = span_of(&items[x.stab[v].v[j]]);
      for (int t = it->first + 1; t <= it->last; t++)
        for (int j = 0; j < x.start[t].n; j++) S[ns++] = span_of(&items[x.start[t].v[j]]);
      qsort(S, (size_t)ns, sizeof *S, cmp_span);
      off = scan(S, ns, it->size);
    }
    it->offset = off;
    if (off + it->size > top) top = off + it->size;
    if (i == 0 || it->last < min_last) min_last = it->last;
    if (i == 0 || it->first > max_first) max_first = it->first;
    index_add(&x, i, it->first, it->last);
  }
  for (int v = 0; v < 2 * x.size; v++) free(x.stab[v].v);
  for (int t = 0; t < x.size; t++) free(x.start[t].v);
  free(x.stab);
  free(x.start);
  free(S);
  return align_up(top);
}
