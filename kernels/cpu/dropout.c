/* Inverted dropout with a counter-based mask: element i of the tensor at
 * dropout site `site` is kept when a hash of (seed, site, i) clears a
 * threshold. Nothing is stored between forward and backward, and the mask
 * does not depend on how the elements are split among threads. */
#include <string.h>

#include "internal.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

/* The splitmix64 finaliser: a bijection of 64-bit words whose output bits
 * all depend on all input bits. */
static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Element i's word is splitmix64's i-th output from a state keyed by seed
 * and site, so neighbouring elements and neighbouring sites are unrelated. */
static inline uint64_t site_key(uint64_t seed, uint64_t site) { return mix64(seed ^ mix64(site + GOLDEN)); }

/* y = x * mask / (1 - rate). Keeping an element when its word is at least
 * rate * 2^64 keeps it with probability 1 - rate to within 2^-64. */
static void dropout(real *y, const real *x, int64_t n, real rate, uint64_t seed, uint64_t site) {
  if (rate <= 0) {
    if (y != x)
      memcpy(y, x, (size_t)n * sizeof(real));
    return;
  }
  if (rate >= 1) {
    memset(y, 0, (size_t)n * sizeof(real));
    return;
  }
  uint64_t key = site_key(seed, site);
  uint64_t threshold = (uint64_t)((double)rate * 18446744073709551616.0);
  real scale = (real)(1.0 / (1.0 - (double)rate));
#pragma omp parallel for simd schedule(static) if (kcpu_par(n))
  for (int64_t i = 0; i < n; i++) {
    uint64_t word = mix64(key + (uint64_t)(i + 1) * GOLDEN);
    y[i] = word >= threshold ? x[i] * scale : 0;
  }
}

void k_dropout_fwd(real *y, const real *x, int64_t n, real rate, uint64_t seed, uint64_t site) {
  dropout(y, x, n, rate, seed, site);
}

/* The mask is linear in the input, so its adjoint is the same mask. */
void k_dropout_bwd(real *dx, const real *dy, int64_t n, real rate, uint64_t seed, uint64_t site) {
  dropout(dx, dy, n, rate, seed, site);
}
