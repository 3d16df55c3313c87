/* Text generation from a byte-level model. */
#ifndef SHARD_RT_SAMPLE_H
#define SHARD_RT_SAMPLE_H

#include "rt.h"

/* Continues --sample-prompt by --sample-tokens bytes and prints prompt and
 * continuation on stdout. */
void rt_sample(Rt *rt);

/* Picks a token from logits[0..n) with the temperature (0: the largest)
 * and top-k (0: all) of the flags; scratch holds 2n doubles. */
int rt_sample_pick(const real *logits, int n, double temperature, int64_t top_k, RtRng *rng,
                   double *scratch);

#endif
