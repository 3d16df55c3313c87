/* What the kernel files share with each other and nobody else: the
 * accumulator type, the size below which a loop is not worth a thread team,
 * and the guards around OpenBLAS calls made from inside a parallel region. */
#ifndef SHARD_KERNELS_CPU_INTERNAL_H
#define SHARD_KERNELS_CPU_INTERNAL_H

#include <omp.h>

#include "kernels.h"

/* Sums of many terms (row statistics, softmax denominators, the loss,
 * gradients of shared weights) run in double in both builds: in f32 the
 * extra precision is nearly free next to the memory traffic, and it keeps
 * the f32 results within rounding of a double reference. */
typedef double acc_t;

/* Loops over fewer elements than this run on the calling thread: waking a
 * team costs more than the work. Only the split of work changes, never the
 * order of any sum, so results do not depend on it. */
#define K_PAR_MIN 32768

/* Aborts with a message: for broken preconditions of the caller (an index
 * out of range, a size OpenBLAS cannot take), never for user errors. */
__attribute__((noreturn, format(printf, 1, 2))) void kcpu_die(const char *fmt, ...);

/* OpenBLAS called from inside our own parallel region must run on the
 * calling thread only. The OpenMP build of OpenBLAS does that by itself; the
 * pthread build would start its own workers for every call, so for the
 * duration of the region its thread count is set to 1. The value returned
 * by begin goes back to end. */
int kcpu_blas_serial_begin(void);
void kcpu_blas_serial_end(int saved);

/* The thread's scratch slot: its number in the innermost team of more
 * than one thread. A kernel called from inside the caller's parallel loop
 * runs its own region on one thread (number 0 there), and must not share
 * slot 0 with the callers on the other threads. */
static inline int kcpu_slot(void) {
  int level = omp_get_level();
  while (level > 0 && omp_get_team_size(level) == 1)
    level--;
  return level > 0 ? omp_get_ancestor_thread_num(level) : 0;
}

/* The same parallel loop bound, spelled once. */
static inline int kcpu_par(int64_t work) { return work >= K_PAR_MIN; }

/* The largest of x[0 .. n-1] (-inf when n is 0). Written as 16 running
 * maxima rather than as a reduction: GCC and clang both vectorise the
 * element-wise form, while clang gives up on a max reduction of floats.
 * A max is exact, so the order does not matter. */
static inline real kcpu_max(const real *x, int64_t n) {
  enum { LANES = 16 };
  real lane[LANES];
  for (int l = 0; l < LANES; l++)
    lane[l] = -INFINITY;
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; l++)
      lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  real m = -INFINITY;
  for (; j < n; j++)
    m = x[j] > m ? x[j] : m;
  for (int l = 0; l < LANES; l++)
    m = lane[l] > m ? lane[l] : m;
  return m;
}

#endif
