/* The files and comparisons of the tensor-parallel training tests:
 *
 *   tptool data OUT N VOCAB      an llm.c token shard of N tokens below
 *                                VOCAB, with structure a model can learn
 *   tptool cmp REF OTHER TOL     compares two safetensors files tensor by
 *                                tensor (same names and shapes); prints the
 *                                worst error relative to each tensor's
 *                                largest entry and fails above TOL
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "rng.h"
#include "safetensors.h"

static int usage(void) {
  fprintf(stderr, "usage: tptool data OUT N VOCAB | tptool cmp REF OTHER TOL\n");
  return 2;
}

/* Each token follows from the one before by a rule with a little noise:
 * the loss falls over the first steps, so that 10 steps compare a
 * trajectory and not a plateau. */
static int make_data(const char *out, long n, long vocab) {
  if (n < 2 || vocab < 2 || vocab > 65535) return usage();
  uint16_t *tok = malloc((size_t)n * sizeof *tok);
  if (!tok) return 1;
  uint64_t key = rt_key2(20240520, 0x7470 /* "tp" */);
  tok[0] = 1;
  for (long i = 1; i < n; i++) {
    long noise = (long)(rt_hash_unit(key, (uint64_t)i) * 4);
    tok[i] = (uint16_t)((tok[i - 1] * 7 + 3 + noise) % vocab);
  }
  int rc = rt_data_write_shard(out, tok, n);
  free(tok);
  return rc ? 1 : 0;
}

static int compare(const char *ref_path, const char *other_path, double tol) {
  RtStFile a, b;
  rt_st_open(&a, ref_path);
  rt_st_open(&b, other_path);
  double worst = 0;
  const char *worst_name = "all equal";
  int bad = 0;
  for (int i = 0; i < a.n; i++) {
    const RtStTensor *ta = &a.t[i], *tb = rt_st_find(&b, ta->name);
    int same = tb && tb->rank == ta->rank;
    for (int d = 0; same && d < ta->rank; d++) same = tb->shape[d] == ta->shape[d];
    if (!same) {
      printf("  %s: missing or of another shape in %s\n", ta->name, other_path);
      bad++;
      continue;
    }
    real *x = malloc((size_t)ta->numel * sizeof *x), *y = malloc((size_t)tb->numel * sizeof *y);
    rt_st_read(&a, ta, x);
    rt_st_read(&b, tb, y);
    double scale = 1e-30, err = 0;
    for (int64_t k = 0; k < ta->numel; k++) scale = fmax(scale, fabs((double)x[k]));
    for (int64_t k = 0; k < ta->numel; k++) err = fmax(err, fabs((double)x[k] - (double)y[k]));
    err /= scale;
    if (!(err <= worst)) worst = err, worst_name = ta->name;
    free(x);
    free(y);
  }
  if (b.n != a.n) {
    printf("  %s has %d tensors, %s %d\n", other_path, b.n, ref_path, a.n);
    bad++;
  }
  printf("%d tensors, worst error relative to the tensor's largest entry %.2e (%s)\n", a.n, worst,
         worst_name);
  rt_st_close(&a);
  rt_st_close(&b);
  return bad || !(worst <= tol);
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "data") == 0)
    return make_data(argv[2], strtol(argv[3], NULL, 10), strtol(argv[4], NULL, 10));
  if (argc == 5 && strcmp(argv[1], "cmp") == 0)
    return compare(argv[2], argv[3], strtod(argv[4], NULL));
  return usage();
}
