/* The measure behind every "did you mean": the compiler's diagnostics
 * (frontend/lower.c, passes/fold.c), shardc's options (driver/options.c)
 * and a rank program's flags (runtime/base/flags.c), which the driver
 * suggests too, all count edits alike. Header only: abi/ links nothing. */
#ifndef SHARD_ABI_SUGGEST_H
#define SHARD_ABI_SUGGEST_H

/* Names longer than this are not compared, which bounds the cost: they
 * count as SUGGEST_FAR from everything, farther than any suggestion goes. */
#define SUGGEST_MAX_LEN 64
#define SUGGEST_FAR 1000

/* The edit distance between a[0..la) and b[0..lb): an insertion, a
 * deletion or a substitution counts one; with `swaps`, so does a
 * transposition of neighbours (the optimal string alignment distance). */
static inline int suggest_distance(const char *a, int la, const char *b, int lb, int swaps) {
  if (la > SUGGEST_MAX_LEN || lb > SUGGEST_MAX_LEN) return SUGGEST_FAR;
  int d[SUGGEST_MAX_LEN + 1][SUGGEST_MAX_LEN + 1];
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (swaps && i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

#endif
