/* The machine's sgemm roof, as bench/cpu_train.sh measures it: the best
 * rate of C = A B over square N x N matrices of floats through the OpenBLAS
 * the rank programs link (the bench builds this file with the CC, CFLAGS
 * and LDLIBS of a compiled program's Makefile), on the threads that
 * OMP_NUM_THREADS and OPENBLAS_NUM_THREADS give it.
 *
 *   sgemm_roof N REPS     prints "sgemm N=... threads=... best ... GFLOP/s"
 *
 * The best of REPS calls, after one untimed call that pays for OpenBLAS's
 * buffers and the threads' start: on a machine that others share the best
 * call is the one they disturbed least, which is what a roof is. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 3 || atoi(argv[1]) < 1 || atoi(argv[2]) < 1) {
    fprintf(stderr, "usage: sgemm_roof N REPS (both at least 1)\n");
    return 2;
  }
  int n = atoi(argv[1]), reps = atoi(argv[2]);
  size_t e = (size_t)n * (size_t)n;
  float *a = malloc(e * sizeof *a), *b = malloc(e * sizeof *b), *c = malloc(e * sizeof *c);
  if (!a || !b || !c) {
    fprintf(stderr, "sgemm_roof: out of memory for N=%d\n", n);
    return 1;
  }
  for (size_t i = 0; i < e; i++) {
    a[i] = (float)(i % 17) / 17.0f - 0.5f;
    b[i] = (float)(i % 13) / 13.0f - 0.5f;
  }
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double t = now() - t0;
    if (r > 0 && t < best) best = t;
  }
  /* c read back, so no compiler may drop the calls. */
  printf("sgemm N=%d threads=%d best %.4f s %.1f GFLOP/s (c[0] %g)\n", n,
         openblas_get_num_threads(), best, 2.0 * n * (double)n * n / best / 1e9, (double)c[0]);
  free(a);
  free(b);
  free(c);
  return 0;
}
