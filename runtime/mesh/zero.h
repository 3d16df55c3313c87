/* ZeRO-1 (the distributed optimizer) as arithmetic: which elements of the
 * weights this data-parallel rank updates, and where their optimizer state
 * lies. Shared by the optimizer, the gradient reduction and checkpoints,
 * so that they agree by construction.
 *
 * With RtModel.zero, every gradient bucket (RtBucket, numel a multiple of
 * d) is reduce-scattered over the d data-parallel ranks: rank i owns the
 * i-th of its d equal parts; an expert bucket (RtBucket.expert = E) over
 * the d / E ranks that hold the same experts. The AdamW state (RtModel.plan.optimizer) then
 * holds, for m and for v, the owned parts of all buckets back to back in
 * bucket order: sum(numel / d) reals each. Without ZeRO the state mirrors
 * the weights (nweights reals each, the element at the weight's index). */
#ifndef SHARD_RT_ZERO_H
#define SHARD_RT_ZERO_H

#include "../../abi/model.h"

/* The part of bucket b that data-parallel rank i of d owns: elements
 * [*begin, *end) of the weights. */
static inline void rt_zero_part(const RtBucket *b, int i, int d, int64_t *begin, int64_t *end) {
  /* An expert bucket (--ep E) splits over the d / E ranks holding the
   * same experts, data-parallel rank i being the (i / E)-th of them. */
  int E = b->expert > 1 ? b->expert : 1;
  int64_t q = b->numel / (d / E);
  *begin = b->offset + (int64_t)(i / E) * q;
  *end = *begin + q;
}

/* Reals of m (and of v) the optimizer state holds on one rank. */
static inline int64_t rt_zero_state_numel(const RtModel *m, int d) {
  if (!m->zero || d <= 1) return m->nweights;
  int64_t n = 0;
  for (int j = 0; j < m->nbuckets; j++) {
    int64_t b, e;
    rt_zero_part(&m->buckets[j], 0, d, &b, &e);
    n += e - b;
  }
  return n;
}

/* Where the optimizer state of weight element w lies on data-parallel rank
 * i of d, or -1 when that rank does not own it. Without ZeRO, w itself. */
static inline int64_t rt_zero_state_index(const RtModel *m, int i, int d, int64_t w) {
  if (!m->zero || d <= 1) return w;
  int64_t base = 0;
  for (int j = 0; j < m->nbuckets; j++) {
    int64_t b, e;
    rt_zero_part(&m->buckets[j], i, d, &b, &e);
    if (w >= b && w < e) return base + (w - b);
    base += e - b;
  }
  return -1;
}

#endif
