/* Random numbers: a counter-based hash (pure functions of a key and an
 * index, for anything that must not depend on order or thread count) and
 * xoshiro256** (a sequential stream whose state a checkpoint can carry). */
#ifndef SHARD_RT_RNG_H
#define SHARD_RT_RNG_H

#include <stdint.h>

typedef struct RtRng {
  uint64_t s[4];
} RtRng;

/* splitmix64's finaliser: a bijective mix of 64 bits. */
uint64_t rt_mix64(uint64_t x);
/* A key made from several values, e.g. (seed, epoch) or (seed, name hash). */
uint64_t rt_key2(uint64_t a, uint64_t b);
uint64_t rt_key3(uint64_t a, uint64_t b, uint64_t c);
/* FNV-1a of a string, so that keys can come from names. */
uint64_t rt_hash_str(const char *s);
/* The index-th value of the stream named by key, in [0, 1) (53 bits). */
double rt_hash_unit(uint64_t key, uint64_t index);
/* The index-th N(0, 1) value of the stream named by key (Box-Muller on the
 * pair index/2, so neighbouring values share one pair of uniforms). */
double rt_hash_normal(uint64_t key, uint64_t index);
/* Values 2*pair and 2*pair + 1 of that stream at once (half the work). */
void rt_hash_normal2(uint64_t key, uint64_t pair, double *z0, double *z1);

void rt_rng_seed(RtRng *r, uint64_t seed);
uint64_t rt_rng_next(RtRng *r);
/* Uniform in [0, 1) with 53 random bits. */
double rt_rng_uniform(RtRng *r);
/* Uniform in [0, n), without modulo bias; n > 0. */
uint64_t rt_rng_below(RtRng *r, uint64_t n);

#endif
