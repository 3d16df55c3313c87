/* Rotary position embeddings and scaled dot-product attention.
 *
 * Attention works on blocks of ATT_TQ query rows of one head: the block's
 * scores against all keys it may see are one GEMM into the calling thread's
 * scratch, the softmax runs row by row there, and the output is a second
 * GEMM. Nothing of size s x s per head is ever stored; the backward
 * recomputes the probabilities the same way. */
#include <omp.h>
#include <string.h>

#include "internal.h"

/* Query rows per block: enough for the GEMMs to run near their peak, small
 * enough that a block's scores stay in the core's L2 cache. The memory plan
 * sizes the scratch with the same number (CPU_ATTENTION_SCRATCH of the CPU
 * target's memory policy, codegen/cpu.c), and the rank program checks that
 * the two agree. */
#define ATT_BQ 64
/* Query rows per task: the scratch holds ATT_BQ of them, but the loops cut
 * the queries finer. Under a causal mask a block computes scores against
 * every key up to its last row, so the masked half of its diagonal square
 * is wasted work; at 32 rows that waste is a quarter of what it is at 64
 * on short sequences, and the GEMMs of head sizes 16 .. 128 still run well
 * (measured: about 10% less time for s = 128, d = 32 on one thread). */
#define ATT_TQ 32
/* Partial sums of a softmax row: a vector of floats (AVX-512) or two. */
#define ATT_LANES 16
_Static_assert(ATT_TQ <= ATT_BQ, "a task's rows must fit the scratch");

void k_rope(real *y, const real *x, int64_t b, int64_t s, int64_t H, int64_t d, real theta,
            int inverse) {
  k_rope_part(y, x, b, s, H, d, d, theta, inverse);
}

/* The first r dimensions of each head rotate as a head of size r would
 * (frequencies theta^(-2i/r), GPT-NeoX's partial rotary); the other d - r
 * are copied. */
void k_rope_part(real *y, const real *x, int64_t b, int64_t s, int64_t H, int64_t d, int64_t r,
                 real theta, int inverse) {
  if (r % 2 || r > d)
    kcpu_die("rope over %lld dims of a head of %lld", (long long)r, (long long)d);
  int64_t half = r / 2, row = H * d;
#pragma omp parallel for schedule(static) if (kcpu_par(b * s * row))
  for (int64_t t = 0; t < s; t++) {
    /* The angles depend on the position only: computed once in double
     * (like the reference), then rounded to real, for every batch row and
     * head at this position. */
    real c[half > 0 ? half : 1], sn[half > 0 ? half : 1];
    for (int64_t i = 0; i < half; i++) {
      double angle = (double)t * pow((double)theta, -2.0 * (double)i / (double)r);
      c[i] = (real)cos(angle);
      sn[i] = (real)(inverse ? -sin(angle) : sin(angle));
    }
    for (int64_t bi = 0; bi < b; bi++)
      for (int64_t h = 0; h < H; h++) {
        const real *xh = x + (bi * s + t) * row + h * d;
        real *yh = y + (bi * s + t) * row + h * d;
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
          real x1 = xh[i], x2 = xh[i + half];
          yh[i] = x1 * c[i] - x2 * sn[i];
          yh[i + half] = x2 * c[i] + x1 * sn[i];
        }
        if (yh != xh)
          for (int64_t i = r; i < d; i++) yh[i] = xh[i];
      }
  }
}

int64_t k_attention_scratch(int64_t s) { return 2 * ATT_BQ * s; }

/* The shape facts every block of one attention call shares. */
typedef struct {
  int64_t d, ldq, ldk; /* head size, row strides of q (and y) and of k (and v) */
  int causal;
  real scale; /* 1 / sqrt(d) */
  const int32_t *keep; /* [b, s] key-padding mask (0: the key is padding), or NULL */
  int64_t s;           /* keys per batch row, the stride of keep */
} Att;

static void att_check(int64_t H, int64_t K) {
  if (K <= 0 || H % K)
    kcpu_die("attention with %lld query heads and %lld kv heads", (long long)H, (long long)K);
}

/* Probabilities of query rows i0 .. i0 + rows - 1 against keys 0 .. jend - 1
 * into P (leading dim jend): scores by GEMM, then a stable softmax per row.
 * The keys a row may not see get -inf first, so that every loop runs over
 * the whole row (a multiple of the vector width when jend is) instead of
 * ending in a scalar remainder of a different length on every row; their
 * probabilities come out as exactly 0. */
static void att_probs(const Att *a, real *P, const real *qb, const real *kb, int64_t bi,
                      int64_t i0, int64_t rows, int64_t jend) {
  k_gemm(0, 1, rows, jend, a->d, a->scale, qb, a->ldq, kb, a->ldk, 0, P, jend);
  const int32_t *keep = a->keep ? a->keep + bi * a->s : NULL;
  for (int64_t r = 0; r < rows; r++) {
    real *p = P + r * jend;
    int64_t L = a->causal ? i0 + r + 1 : jend;
    for (int64_t j = L; j < jend; j++)
      p[j] = -INFINITY;
    if (keep)
      for (int64_t j = 0; j < L; j++)
        if (!keep[j]) p[j] = -INFINITY;
    real m = kcpu_max(p, jend);
    if (m == -INFINITY) {
      /* Every key this row may see is padding: the row reads nothing (its
       * output is 0), where a finite additive bias would average all keys. */
      memset(p, 0, (size_t)jend * sizeof(real));
      continue;
    }
    /* The sum in ATT_LANES partial sums of a fixed assignment of the
     * columns, added in double at the end: a row holds at most a few
     * hundred vectors, so a single accumulator, whose latency every vector
     * waits on, and a horizontal add of doubles cost as much as the exps. */
    real lane[ATT_LANES] = {0};
    int64_t j = 0;
    for (; j + ATT_LANES <= jend; j += ATT_LANES)
#pragma omp simd
      for (int l = 0; l < ATT_LANES; l++) {
        real e = k_exp(p[j + l] - m);
        p[j + l] = e;
        lane[l] += e;
      }
    for (int l = 0; j + l < jend; l++) {
      p[j + l] = k_exp(p[j + l] - m);
      lane[l] += p[j + l];
    }
    acc_t sum = 0;
    for (int l = 0; l < ATT_LANES; l++)
      sum += lane[l];
    real inv = (real)(1.0 / sum);
#pragma omp simd
    for (int64_t j = 0; j < jend; j++)
      p[j] *= inv;
  }
}

void k_attention_fwd(real *y, const real *q, const real *k, const real *v, int64_t b, int64_t s,
                     int64_t H, int64_t K, int64_t d, int causal, real *scratch) {
  k_attention_masked_fwd(y, q, k, v, NULL, b, s, H, K, d, causal, scratch);
}

void k_attention_masked_fwd(real *y, const real *q, const real *k, const real *v,
                            const int32_t *keep, int64_t b, int64_t s, int64_t H, int64_t K,
                            int64_t d, int causal, real *scratch) {
  att_check(H, K);
  Att a = {d, H * d, K * d, causal, (real)(1.0 / sqrt((double)d)), keep, s};
  int64_t nblk = (s + ATT_TQ - 1) / ATT_TQ, group = H / K, per_thread = k_attention_scratch(s);
  int saved = kcpu_blas_serial_begin();
  /* Every (batch row, head, query block) is independent and writes its own
   * rows of y; dynamic scheduling evens out the causal triangle. */
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < b * H * nblk; task++) {
    int64_t blk = task % nblk, h = task / nblk % H, bi = task / nblk / H, g = h / group;
    int64_t i0 = blk * ATT_TQ, rows = s - i0 < ATT_TQ ? s - i0 : ATT_TQ;
    int64_t jend = causal ? i0 + rows : s;
    real *P = scratch + kcpu_slot() * per_thread;
    const real *qb = q + (bi * s + i0) * a.ldq + h * d;
    const real *kb = k + bi * s * a.ldk + g * d, *vb = v + bi * s * a.ldk + g * d;
    att_probs(&a, P, qb, kb, bi, i0, rows, jend);
    k_gemm(0, 0, rows, d, jend, 1, P, jend, vb, a.ldk, 0, y + (bi * s + i0) * a.ldq + h * d,
           a.ldq);
  }
  kcpu_blas_serial_end(saved);
}

/* dS = P (dP - rowsum(dy y)) / sqrt(d), dP = dy v^T: the softmax backward
 * folded with the score scale, in place of dP in G. */
static void att_dscores(const Att *a, real *G, const real *P, const real *dyb, const real *yb,
                        int64_t rows, int64_t jend) {
  for (int64_t r = 0; r < rows; r++) {
    const real *dyr = dyb + r * a->ldq, *yr = yb + r * a->ldq, *p = P + r * jend;
    real *gr = G + r * jend;
    acc_t dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < a->d; c++)
      dot += (acc_t)dyr[c] * yr[c];
    real D = (real)dot;
    /* P is 0 where the row may not look (att_probs): so is the gradient. */
#pragma omp simd
    for (int64_t j = 0; j < jend; j++)
      gr[j] = p[j] * (gr[j] - D) * a->scale;
  }
}

/* One task per (batch row, kv head): it owns that kv head's rows of dk and
 * dv and visits the query heads that read it, block by block in a fixed
 * order, so the accumulation into dk and dv needs no atomics and gives the
 * same bits for any number of threads. */
void k_attention_bwd(real *dq, real *dk, real *dv, const real *dy, const real *q, const real *k,
                     const real *v, const real *y, int64_t b, int64_t s, int64_t H, int64_t K,
                     int64_t d, int causal, real *scratch) {
  k_attention_masked_bwd(dq, dk, dv, dy, q, k, v, y, NULL, b, s, H, K, d, causal, scratch);
}

void k_attention_masked_bwd(real *dq, real *dk, real *dv, const real *dy, const real *q,
                            const real *k, const real *v, const real *y, const int32_t *keep,
                            int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                            real *scratch) {
  att_check(H, K);
  Att a = {d, H * d, K * d, causal, (real)(1.0 / sqrt((double)d)), keep, s};
  int64_t nblk = (s + ATT_TQ - 1) / ATT_TQ, group = H / K, per_thread = k_attention_scratch(s);
  int saved = kcpu_blas_serial_begin();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < b * K; task++) {
    int64_t g = task % K, bi = task / K;
    real *P = scratch + kcpu_slot() * per_thread, *G = P + ATT_BQ * s;
    const real *kb = k + bi * s * a.ldk + g * d, *vb = v + bi * s * a.ldk + g * d;
    real *dkb = dk + bi * s * a.ldk + g * d, *dvb = dv + bi * s * a.ldk + g * d;
    for (int64_t t = 0; t < s; t++) {
      memset(dkb + t * a.ldk, 0, (size_t)d * sizeof(real));
      memset(dvb + t * a.ldk, 0, (size_t)d * sizeof(real));
    }
    for (int64_t h = g * group; h < (g + 1) * group; h++)
      for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t i0 = blk * ATT_TQ, rows = s - i0 < ATT_TQ ? s - i0 : ATT_TQ;
        int64_t jend = causal ? i0 + rows : s, off = (bi * s + i0) * a.ldq + h * d;
        att_probs(&a, P, q + off, kb, bi, i0, rows, jend);
        k_gemm(0, 1, rows, jend, d, 1, dy + off, a.ldq, vb, a.ldk, 0, G, jend);
        att_dscores(&a, G, P, dy + off, y + off, rows, jend);
        k_gemm(1, 0, jend, d, rows, 1, P, jend, dy + off, a.ldq, 1, dvb, a.ldk);
        k_gemm(0, 0, rows, d, jend, 1, G, jend, kb, a.ldk, 0, dq + off, a.ldq);
        k_gemm(1, 0, jend, d, rows, 1, G, jend, q + off, a.ldq, 1, dkb, a.ldk);
      }
  }
  kcpu_blas_serial_end(saved);
}
