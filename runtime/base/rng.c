/* Random numbers; see rng.h for why there are two kinds. */
#include "rng.h"

#include <math.h>

#define GOLDEN 0x9e3779b97f4a7c15ULL

uint64_t rt_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rt_key2(uint64_t a, uint64_t b) { return rt_mix64(rt_mix64(a + GOLDEN) ^ b); }

uint64_t rt_key3(uint64_t a, uint64_t b, uint64_t c) { return rt_key2(rt_key2(a, b), c); }

uint64_t rt_hash_str(const char *s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  return h;
}

static double unit53(uint64_t x) { return (double)(x >> 11) * (1.0 / 9007199254740992.0); }

double rt_hash_unit(uint64_t key, uint64_t index) {
  return unit53(rt_mix64(key + (index + 1) * GOLDEN));
}

void rt_hash_normal2(uint64_t key, uint64_t pair, double *z0, double *z1) {
  /* 1 - u lies in (0, 1], so the logarithm is finite. */
  double u1 = 1.0 - rt_hash_unit(key, 2 * pair);
  double u2 = rt_hash_unit(key, 2 * pair + 1);
  double r = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
  *z0 = r * cos(a);
  *z1 = r * sin(a);
}

double rt_hash_normal(uint64_t key, uint64_t index) {
  double z0, z1;
  rt_hash_normal2(key, index / 2, &z0, &z1);
  return index % 2 ? z1 : z0;
}

void rt_rng_seed(RtRng *r, uint64_t seed) {
  /* xoshiro's authors recommend filling the state with splitmix64. */
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) {
    x += GOLDEN;
    r->s[i] = rt_mix64(x);
  }
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rt_rng_next(RtRng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double rt_rng_uniform(RtRng *r) { return unit53(rt_rng_next(r)); }

uint64_t rt_rng_below(RtRng *r, uint64_t n) {
  /* Rejecting the top partial block of 2^64 keeps every residue equally
   * likely. */
  uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
  do
    x = rt_rng_next(r);
  while (x >= limit);
  return x % n;
}
