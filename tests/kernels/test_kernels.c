/* Tests of the CPU kernels (kernels/cpu/kernels.h), built once per real
 * type.
 *
 * Every kernel with a forward and a backward is described by a Case: its
 * inputs, a naive double reference of its forward, and wrappers around the
 * kernels. For each case the forward is compared with the reference on fresh
 * random data, and the backward with central finite differences of
 * L = sum(dy * forward(inputs)): in the f64 build of the forward kernel itself
 * (so the pair is checked against each other at f64 precision), in the f32
 * build of the double reference (so the f32 backward is checked against
 * exact gradients). Then forward and backward are run with 1, 2 and 3 OpenMP
 * threads and must give identical bits. Kernels without a backward (GEMM
 * in its plain, blocked, team and batched forms, exp and friends, AdamW,
 * the sum of squares) and properties no gradient shows (dropout
 * statistics, exact inverses, the vocabulary-parallel ranks' partial
 * statistics and how their results add up to the whole) have tests of
 * their own at the end.
 *
 * Every check prints the error it measured and its tolerance; the program
 * exits 1 when any check is above tolerance. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#ifdef SHARD_REAL_F64
#define FLAVOUR "f64"
#define TOL_FWD 1e-12 /* kernel forward against the double reference */
#define TOL_BWD 1e-6  /* backward against finite differences */
#else
#define FLAVOUR "f32"
#define TOL_FWD 1e-5
#define TOL_BWD 1e-5
#endif
/* Balances the truncation error (step^2 times third derivatives of order 1)
 * against rounding (1e-16 |L| / step): both near 1e-9 of the gradient. */
#define FD_STEP 1e-4

static int failures;

static void check(const char *what, double err, double tol) {
  int ok = err <= tol; /* a NaN fails */
  printf("%-52s %-4s err %.3e  tol %.0e\n", what, ok ? "ok" : "FAIL", err, tol);
  failures += !ok;
}

/* --- data ------------------------------------------------------------------ */

static uint64_t rng = 0x5eed5eed12345678ull;

static double urand(void) { /* uniform in [-1, 1) */
  rng += 0x9e3779b97f4a7c15ull;
  uint64_t z = rng;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-52 - 1.0;
}

static void *xmalloc(size_t n) {
  void *p = calloc(n ? n : 1, 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static double *drandom(int64_t n, double scale) {
  double *a = xmalloc((size_t)n * sizeof *a);
  for (int64_t i = 0; i < n; i++)
    a[i] = scale * urand();
  return a;
}

static real *to_real(const double *a, int64_t n) {
  real *r = xmalloc((size_t)n * sizeof *r);
  for (int64_t i = 0; i < n; i++)
    r[i] = (real)a[i];
  return r;
}

static real *rrandom(int64_t n, double scale) {
  double *d = drandom(n, scale);
  real *r = to_real(d, n);
  free(d);
  return r;
}

static int32_t *irandom(int64_t n, int64_t bound) {
  int32_t *a = xmalloc((size_t)n * sizeof *a);
  for (int64_t i = 0; i < n; i++)
    a[i] = (int32_t)((urand() + 1) * 0.5 * (double)bound) % (int32_t)bound;
  return a;
}

/* max |a - ref| / max |ref|: an error relative to the size of the result. */
static double rel_err(const real *a, const double *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - ref[i]);
    if (e > num || e != e)
      num = e;
    den = fmax(den, fabs(ref[i]));
  }
  return den > 0 ? num / den : num;
}

/* --- the cases ------------------------------------------------------------- */

typedef struct Case Case;
struct Case {
  const char *name;
  int nin;         /* real inputs */
  int64_t len[4];  /* their elements */
  int diff[4];     /* 1: the backward gives this input's gradient */
  int64_t nout;    /* elements of the output */
  int64_t fd_max;  /* coordinates per input checked by differences; 0: all */
  double scale;    /* inputs are uniform in [-scale, scale] */
  void (*ref)(const Case *c, double *const *in, double *out);
  void (*fwd)(const Case *c, real *const *in, real *out);
  void (*bwd)(const Case *c, real *const *in, const real *dy, real *const *grad);
  int64_t b, s, H, K, d, rows, n, V, valid, n0, n1, mid, inner, ld0, ld1;
  int64_t lo, tp; /* vocabulary-parallel: first row or column of a rank, ranks */
  int causal, inverse, bias;
  double eps, theta, rate, fill;
  uint64_t seed, site;
  int32_t *ids; /* embedding ids, cross entropy targets */
  double *mask; /* dropout: the kernel's mask, for the reference */
};

static real *attention_scratch(int64_t s) {
  return xmalloc((size_t)(omp_get_max_threads() * k_attention_scratch(s)) * sizeof(real));
}

/* embedding: in[0] = table [V, n] (the ids are c->ids, rows of them) */
static void ref_embedding(const Case *c, double *const *in, double *out) {
  for (int64_t i = 0; i < c->rows; i++)
    for (int64_t j = 0; j < c->n; j++)
      out[i * c->n + j] = in[0][c->ids[i] * c->n + j];
}
static void fwd_embedding(const Case *c, real *const *in, real *out) {
  k_embedding_fwd(out, c->ids, in[0], c->rows, c->n);
}
static void bwd_embedding(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  k_embedding_bwd(g[0], c->ids, dy, c->rows, c->V, c->n);
}

/* vocabulary-parallel embedding: in[0] = this rank's rows [lo, lo + V) of
 * the table, ids over the whole vocabulary (c->valid rows) */
static void ref_embedding_vp(const Case *c, double *const *in, double *out) {
  for (int64_t i = 0; i < c->rows; i++) {
    int64_t row = c->ids[i] - c->lo;
    for (int64_t j = 0; j < c->n; j++)
      out[i * c->n + j] = row >= 0 && row < c->V ? in[0][row * c->n + j] : 0;
  }
}
static void fwd_embedding_vp(const Case *c, real *const *in, real *out) {
  k_embedding_fwd_vp(out, c->ids, in[0], c->rows, c->n, c->lo, c->V);
}
static void bwd_embedding_vp(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  k_embedding_bwd_vp(g[0], c->ids, dy, c->rows, c->V, c->n, c->lo);
}

/* bias: y = x + bias; its adjoint for the bias is k_sum_rows */
static void ref_bias(const Case *c, double *const *in, double *out) {
  for (int64_t r = 0; r < c->rows; r++)
    for (int64_t j = 0; j < c->n; j++)
      out[r * c->n + j] = in[0][r * c->n + j] + in[1][j];
}
static void fwd_bias(const Case *c, real *const *in, real *out) {
  memcpy(out, in[0], (size_t)(c->rows * c->n) * sizeof(real));
  k_add_bias(out, in[1], c->rows, c->n);
}
static void bwd_bias(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  memcpy(g[0], dy, (size_t)(c->rows * c->n) * sizeof(real));
  k_sum_rows(g[1], dy, c->rows, c->n);
}

/* layernorm (c->inverse = 0) and rmsnorm (c->inverse = 1): x [rows, n],
 * w and, for layernorm with c->bias, b [n] */
static void ref_norm(const Case *c, double *const *in, double *out) {
  for (int64_t r = 0; r < c->rows; r++) {
    const double *x = in[0] + r * c->n;
    double mean = 0, var = 0;
    if (!c->inverse) {
      for (int64_t j = 0; j < c->n; j++)
        mean += x[j];
      mean /= (double)c->n;
    }
    for (int64_t j = 0; j < c->n; j++)
      var += (x[j] - mean) * (x[j] - mean);
    double rstd = 1 / sqrt(var / (double)c->n + c->eps);
    for (int64_t j = 0; j < c->n; j++)
      out[r * c->n + j] = (x[j] - mean) * rstd * in[1][j] + (c->bias ? in[2][j] : 0);
  }
}
static void fwd_norm(const Case *c, real *const *in, real *out) {
  if (c->inverse)
    k_rmsnorm_fwd(out, in[0], in[1], c->rows, c->n, (real)c->eps);
  else
    k_layernorm_fwd(out, in[0], in[1], c->bias ? in[2] : NULL, c->rows, c->n, (real)c->eps);
}
static void bwd_norm(const Case *c, real *const *in, const real *dy, real *const *g) {
  if (c->inverse)
    k_rmsnorm_bwd(g[0], g[1], dy, in[0], in[1], c->rows, c->n, (real)c->eps);
  else
    k_layernorm_bwd(g[0], g[1], c->bias ? g[2] : NULL, dy, in[0], in[1], c->rows, c->n,
                    (real)c->eps);
}

/* softmax over rows of n */
static void ref_softmax(const Case *c, double *const *in, double *out) {
  for (int64_t r = 0; r < c->rows; r++) {
    const double *x = in[0] + r * c->n;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < c->n; j++)
      m = fmax(m, x[j]);
    for (int64_t j = 0; j < c->n; j++)
      s += exp(x[j] - m);
    for (int64_t j = 0; j < c->n; j++)
      out[r * c->n + j] = exp(x[j] - m) / s;
  }
}
static void fwd_softmax(const Case *c, real *const *in, real *out) {
  k_softmax_fwd(out, in[0], c->rows, c->n);
}
static void bwd_softmax(const Case *c, real *const *in, const real *dy, real *const *g) {
  real *y = xmalloc((size_t)(c->rows * c->n) * sizeof *y);
  k_softmax_fwd(y, in[0], c->rows, c->n);
  k_softmax_bwd(g[0], y, dy, c->rows, c->n);
  free(y);
}

/* causal mask: x [b, s, s]; its adjoint is the mask with fill 0 */
static void ref_causal(const Case *c, double *const *in, double *out) {
  for (int64_t r = 0; r < c->b * c->s; r++)
    for (int64_t j = 0; j < c->s; j++)
      out[r * c->s + j] = j > r % c->s ? c->fill : in[0][r * c->s + j];
}
static void fwd_causal(const Case *c, real *const *in, real *out) {
  k_causal_mask(out, in[0], c->b, c->s, (real)c->fill);
}
static void bwd_causal(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  k_causal_mask(g[0], dy, c->b, c->s, 0);
}

/* rope: x [b, s, H * d]; its adjoint is the inverse rotation */
static void ref_rope(const Case *c, double *const *in, double *out) {
  int64_t half = c->d / 2;
  for (int64_t bi = 0; bi < c->b; bi++)
    for (int64_t t = 0; t < c->s; t++)
      for (int64_t h = 0; h < c->H; h++)
        for (int64_t i = 0; i < half; i++) {
          int64_t o = ((bi * c->s + t) * c->H + h) * c->d + i;
          double a = (double)t * pow(c->theta, -2.0 * (double)i / (double)c->d);
          double sn = c->inverse ? -sin(a) : sin(a), x1 = in[0][o], x2 = in[0][o + half];
          out[o] = x1 * cos(a) - x2 * sn;
          out[o + half] = x2 * cos(a) + x1 * sn;
        }
}
static void fwd_rope(const Case *c, real *const *in, real *out) {
  k_rope(out, in[0], c->b, c->s, c->H, c->d, (real)c->theta, c->inverse);
}
static void bwd_rope(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  k_rope(g[0], dy, c->b, c->s, c->H, c->d, (real)c->theta, !c->inverse);
}

/* attention: q [b, s, H * d], k and v [b, s, K * d] */
static void ref_attention(const Case *c, double *const *in, double *out) {
  int64_t s = c->s, d = c->d, ldq = c->H * d, ldk = c->K * d;
  double *p = xmalloc((size_t)s * sizeof *p);
  for (int64_t bi = 0; bi < c->b; bi++)
    for (int64_t h = 0; h < c->H; h++) {
      int64_t g = h / (c->H / c->K);
      for (int64_t i = 0; i < s; i++) {
        int64_t L = c->causal ? i + 1 : s;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < L; j++) {
          double dot = 0;
          for (int64_t e = 0; e < d; e++)
            dot += in[0][(bi * s + i) * ldq + h * d + e] * in[1][(bi * s + j) * ldk + g * d + e];
          p[j] = dot / sqrt((double)d);
          m = fmax(m, p[j]);
        }
        for (int64_t j = 0; j < L; j++)
          sum += p[j] = exp(p[j] - m);
        for (int64_t e = 0; e < d; e++) {
          double acc = 0;
          for (int64_t j = 0; j < L; j++)
            acc += p[j] * in[2][(bi * s + j) * ldk + g * d + e];
          out[(bi * s + i) * ldq + h * d + e] = acc / sum;
        }
      }
    }
  free(p);
}
static void fwd_attention(const Case *c, real *const *in, real *out) {
  real *scratch = attention_scratch(c->s);
  k_attention_fwd(out, in[0], in[1], in[2], c->b, c->s, c->H, c->K, c->d, c->causal, scratch);
  free(scratch);
}
static void bwd_attention(const Case *c, real *const *in, const real *dy, real *const *g) {
  real *scratch = attention_scratch(c->s), *y = xmalloc((size_t)c->nout * sizeof *y);
  k_attention_fwd(y, in[0], in[1], in[2], c->b, c->s, c->H, c->K, c->d, c->causal, scratch);
  k_attention_bwd(g[0], g[1], g[2], dy, in[0], in[1], in[2], y, c->b, c->s, c->H, c->K, c->d,
                  c->causal, scratch);
  free(scratch);
  free(y);
}

/* cross entropy: logits [rows, V] of which `valid` columns count */
static void ref_xent(const Case *c, double *const *in, double *out) {
  double total = 0;
  for (int64_t r = 0; r < c->rows; r++) {
    const double *x = in[0] + r * c->V;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < c->valid; j++)
      m = fmax(m, x[j]);
    for (int64_t j = 0; j < c->valid; j++)
      s += exp(x[j] - m);
    total += m + log(s) - x[c->ids[r]];
  }
  out[0] = total / (double)c->rows;
}
static void fwd_xent(const Case *c, real *const *in, real *out) {
  k_cross_entropy_fwd(out, in[0], c->ids, c->rows, c->V, c->valid);
}
static void bwd_xent(const Case *c, real *const *in, const real *dy, real *const *g) {
  k_cross_entropy_bwd(g[0], in[0], c->ids, dy, c->rows, c->V, c->valid);
}

/* vocabulary-parallel cross entropy over c->tp simulated ranks: in[0] is
 * the whole of the logits [rows, tp * V], rank p holds columns
 * [p V, (p + 1) V), the first `valid` of all are real. The reference is
 * the whole cross entropy; the kernels run rank by rank on copies of their
 * columns, with the caller's all-reduces (MAX, then SUMs in rank order)
 * written out here. */
typedef struct VpStats {
  real *local, *mx, *se, *tg, *part; /* local: tp slices [rows, V] */
} VpStats;

static void ref_xent_vp(const Case *c, double *const *in, double *out) {
  Case whole = *c;
  whole.V = c->tp * c->V;
  ref_xent(&whole, in, out);
}

static int64_t vp_real_cols(const Case *c, int64_t p) {
  int64_t n = c->valid - p * c->V;
  return n < 0 ? 0 : n > c->V ? c->V : n;
}

static VpStats vp_stats(const Case *c, const real *logits) {
  int64_t rows = c->rows, V = c->V;
  VpStats st = {xmalloc((size_t)(c->tp * rows * V) * sizeof(real)),
                xmalloc((size_t)rows * sizeof(real)), xmalloc((size_t)rows * sizeof(real)),
                xmalloc((size_t)rows * sizeof(real)), xmalloc((size_t)rows * sizeof(real))};
  for (int64_t p = 0; p < c->tp; p++)
    k_copy2d(st.local + p * rows * V, V, logits + p * V, c->tp * V, rows, V);
  for (int64_t p = 0; p < c->tp; p++) {
    k_ce_vp_max(st.part, st.local + p * rows * V, rows, V, vp_real_cols(c, p));
    for (int64_t r = 0; r < rows; r++)
      st.mx[r] = p == 0 || st.part[r] > st.mx[r] ? st.part[r] : st.mx[r];
  }
  for (int64_t p = 0; p < c->tp; p++) {
    real *lp = st.local + p * rows * V;
    k_ce_vp_sumexp(st.part, lp, st.mx, rows, V, vp_real_cols(c, p));
    for (int64_t r = 0; r < rows; r++)
      st.se[r] = p == 0 ? st.part[r] : st.se[r] + st.part[r];
    k_ce_vp_target(st.part, lp, c->ids, rows, V, p * V, vp_real_cols(c, p), c->valid);
    for (int64_t r = 0; r < rows; r++)
      st.tg[r] = p == 0 ? st.part[r] : st.tg[r] + st.part[r];
  }
  return st;
}

static void vp_free(VpStats *st) {
  free(st->local);
  free(st->mx);
  free(st->se);
  free(st->tg);
  free(st->part);
}

static void fwd_xent_vp(const Case *c, real *const *in, real *out) {
  VpStats st = vp_stats(c, in[0]);
  k_ce_vp_loss(out, st.mx, st.se, st.tg, c->rows);
  vp_free(&st);
}
static void bwd_xent_vp(const Case *c, real *const *in, const real *dy, real *const *g) {
  VpStats st = vp_stats(c, in[0]);
  int64_t rows = c->rows, V = c->V;
  real *dl = xmalloc((size_t)(rows * V) * sizeof *dl);
  for (int64_t p = 0; p < c->tp; p++) {
    for (int64_t i = 0; i < rows * V; i++)
      dl[i] = 7; /* whatever was there: padding must come out 0 */
    k_ce_vp_bwd(dl, st.local + p * rows * V, c->ids, dy, st.mx, st.se, rows, V, p * V,
                vp_real_cols(c, p));
    k_copy2d(g[0] + p * V, c->tp * V, dl, V, rows, V);
  }
  free(dl);
  vp_free(&st);
}

/* dropout: x [n]; the reference applies the kernel's own mask */
static void ref_dropout(const Case *c, double *const *in, double *out) {
  for (int64_t i = 0; i < c->n; i++)
    out[i] = in[0][i] * c->mask[i] / (1 - c->rate);
}
static void fwd_dropout(const Case *c, real *const *in, real *out) {
  k_dropout_fwd(out, in[0], c->n, (real)c->rate, c->seed, c->site);
}
static void bwd_dropout(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  k_dropout_bwd(g[0], dy, c->n, (real)c->rate, c->seed, c->site);
}

/* split_heads (inverse = 0) and merge_heads (inverse = 1): each the
 * other's adjoint */
static void ref_heads(const Case *c, double *const *in, double *out) {
  for (int64_t bi = 0; bi < c->b; bi++)
    for (int64_t t = 0; t < c->s; t++)
      for (int64_t h = 0; h < c->H; h++)
        for (int64_t e = 0; e < c->d; e++) {
          int64_t bshd = ((bi * c->s + t) * c->H + h) * c->d + e;
          int64_t bhsd = ((bi * c->H + h) * c->s + t) * c->d + e;
          if (c->inverse)
            out[bshd] = in[0][bhsd];
          else
            out[bhsd] = in[0][bshd];
        }
}
static void fwd_heads(const Case *c, real *const *in, real *out) {
  (c->inverse ? k_merge_heads : k_split_heads)(out, in[0], c->b, c->s, c->H, c->d);
}
static void bwd_heads(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  (c->inverse ? k_split_heads : k_merge_heads)(g[0], dy, c->b, c->s, c->H, c->d);
}

/* transpose of [outer, n0, mid, n1, inner] */
static void ref_transpose(const Case *c, double *const *in, double *out) {
  for (int64_t o = 0; o < c->b; o++)
    for (int64_t a = 0; a < c->n0; a++)
      for (int64_t m = 0; m < c->mid; m++)
        for (int64_t z = 0; z < c->n1; z++)
          for (int64_t e = 0; e < c->inner; e++)
            out[(((o * c->n1 + z) * c->mid + m) * c->n0 + a) * c->inner + e] =
                in[0][(((o * c->n0 + a) * c->mid + m) * c->n1 + z) * c->inner + e];
}
static void fwd_transpose(const Case *c, real *const *in, real *out) {
  k_transpose(out, in[0], c->b, c->n0, c->mid, c->n1, c->inner);
}
static void bwd_transpose(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  k_transpose(g[0], dy, c->b, c->n1, c->mid, c->n0, c->inner);
}

/* copy2d: [rows, n] from an array with leading dim ld0 into one with ld1;
 * the destination's other columns stay 0 */
static void ref_copy2d(const Case *c, double *const *in, double *out) {
  memset(out, 0, (size_t)(c->rows * c->ld1) * sizeof *out);
  for (int64_t r = 0; r < c->rows; r++)
    for (int64_t j = 0; j < c->n; j++)
      out[r * c->ld1 + j] = in[0][r * c->ld0 + j];
}
static void fwd_copy2d(const Case *c, real *const *in, real *out) {
  memset(out, 0, (size_t)(c->rows * c->ld1) * sizeof *out);
  k_copy2d(out, c->ld1, in[0], c->ld0, c->rows, c->n);
}
static void bwd_copy2d(const Case *c, real *const *in, const real *dy, real *const *g) {
  (void)in;
  memset(g[0], 0, (size_t)(c->rows * c->ld0) * sizeof(real));
  k_copy2d(g[0], c->ld0, dy, c->ld1, c->rows, c->n);
}

/* the inline elementwise functions: gelu (inverse = 0) and silu (1) */
static void ref_act(const Case *c, double *const *in, double *out) {
  for (int64_t i = 0; i < c->n; i++) {
    double x = in[0][i];
    out[i] = c->inverse ? x / (1 + exp(-x))
                        : 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
}
static void fwd_act(const Case *c, real *const *in, real *out) {
  for (int64_t i = 0; i < c->n; i++)
    out[i] = c->inverse ? k_silu(in[0][i]) : k_gelu(in[0][i]);
}
static void bwd_act(const Case *c, real *const *in, const real *dy, real *const *g) {
  for (int64_t i = 0; i < c->n; i++)
    g[0][i] = c->inverse ? k_silu_grad(in[0][i], dy[i]) : k_gelu_grad(in[0][i], dy[i]);
}

/* --- the driver -------------------------------------------------------------- */

/* L = sum(dy * forward(in)) in double: of the kernel in the f64 build, of the
 * reference in the f32 one. */
static double fd_loss(const Case *c, double *const *in, const double *dy, double *out) {
#ifdef SHARD_REAL_F64
  c->fwd(c, (real *const *)in, out);
#else
  c->ref(c, in, out);
#endif
  double L = 0;
  for (int64_t i = 0; i < c->nout; i++)
    L += dy[i] * out[i];
  return L;
}

/* The gradient of input k at up to fd_max coordinates spread over it, by
 * central differences, against the backward's `grad`. */
static double fd_error(const Case *c, double **in, int k, const double *dy, const real *grad) {
  int64_t n = c->len[k], count = c->fd_max && c->fd_max < n ? c->fd_max : n;
  double *out = xmalloc((size_t)c->nout * sizeof *out);
  double num = 0, den = 0;
  for (int64_t t = 0; t < count; t++) {
    int64_t i = count == n ? t : (t * 7919 + 13) % n;
    double keep = in[k][i];
    in[k][i] = keep + FD_STEP;
    double up = fd_loss(c, in, dy, out);
    in[k][i] = keep - FD_STEP;
    double down = fd_loss(c, in, dy, out);
    in[k][i] = keep;
    double g = (up - down) / (2 * FD_STEP), e = fabs(g - (double)grad[i]);
    if (e > num || e != e)
      num = e;
    den = fmax(den, fabs(g));
  }
  free(out);
  return den > 0 ? num / den : num;
}

/* Forward and backward with `threads` threads, all outputs in one buffer. */
static real *run_all(const Case *c, real *const *in, const real *dy, int threads, size_t *bytes) {
  size_t total = (size_t)c->nout;
  for (int k = 0; k < c->nin; k++)
    total += c->diff[k] ? (size_t)c->len[k] : 0;
  real *buf = xmalloc(total * sizeof *buf), *g[4] = {0}, *p = buf + c->nout;
  for (int k = 0; k < c->nin; k++)
    if (c->diff[k]) {
      g[k] = p;
      p += c->len[k];
    }
  omp_set_num_threads(threads);
  c->fwd(c, in, buf);
  if (c->bwd)
    c->bwd(c, in, dy, g);
  *bytes = total * sizeof *buf;
  return buf;
}

static void run_case(Case *c) {
  double *in_d[4] = {0};
  real *in_r[4] = {0}, *grad[4] = {0};
  char what[128];
  for (int k = 0; k < c->nin; k++) {
    in_d[k] = drandom(c->len[k], c->scale);
    in_r[k] = to_real(in_d[k], c->len[k]);
    grad[k] = xmalloc((size_t)c->len[k] * sizeof(real));
  }
  double *ref = xmalloc((size_t)c->nout * sizeof *ref);
  real *out = xmalloc((size_t)c->nout * sizeof *out);
  c->ref(c, in_d, ref);
  c->fwd(c, in_r, out);
  snprintf(what, sizeof what, "%s: forward vs reference", c->name);
  check(what, rel_err(out, ref, c->nout), TOL_FWD);

  double *dy = drandom(c->nout, 1.0);
  real *dy_r = to_real(dy, c->nout);
  if (c->bwd) {
    c->bwd(c, in_r, dy_r, grad);
    for (int k = 0; k < c->nin; k++)
      if (c->diff[k]) {
        snprintf(what, sizeof what, "%s: d input %d vs differences", c->name, k);
        check(what, fd_error(c, in_d, k, dy, grad[k]), TOL_BWD);
      }
  }

  size_t bytes1, bytes;
  real *one = run_all(c, in_r, dy_r, 1, &bytes1);
  for (int threads = 2; threads <= 3; threads++) {
    real *many = run_all(c, in_r, dy_r, threads, &bytes);
    snprintf(what, sizeof what, "%s: 1 vs %d threads, bits differing", c->name, threads);
    check(what, memcmp(one, many, bytes) != 0, 0);
    free(many);
  }
  omp_set_num_threads(2);
  free(one);
  for (int k = 0; k < c->nin; k++) {
    free(in_d[k]);
    free(in_r[k]);
    free(grad[k]);
  }
  free(ref);
  free(out);
  free(dy);
  free(dy_r);
}

/* --- the cases, with their sizes ------------------------------------------- */

static void case_embedding(int64_t n, int64_t V, int64_t h, int64_t fd_max) {
  Case c = {.name = "embedding", .nin = 1, .len = {V * h}, .diff = {1}, .nout = n * h,
            .fd_max = fd_max, .scale = 1, .ref = ref_embedding, .fwd = fwd_embedding,
            .bwd = bwd_embedding, .rows = n, .n = h, .V = V};
  char name[64];
  snprintf(name, sizeof name, "embedding n=%lld V=%lld h=%lld", (long long)n, (long long)V,
           (long long)h);
  c.name = name;
  c.ids = irandom(n, V);
  c.ids[n - 1] = c.ids[0]; /* at least one repeated id */
  run_case(&c);
  free(c.ids);
}

static void case_bias(int64_t rows, int64_t n, int64_t fd_max) {
  char name[64];
  snprintf(name, sizeof name, "add_bias/sum_rows %lldx%lld", (long long)rows, (long long)n);
  Case c = {.name = name, .nin = 2, .len = {rows * n, n}, .diff = {1, 1}, .nout = rows * n,
            .fd_max = fd_max, .scale = 1, .ref = ref_bias, .fwd = fwd_bias, .bwd = bwd_bias,
            .rows = rows, .n = n};
  run_case(&c);
}

static void case_norm(int rms, int bias, int64_t rows, int64_t h, int64_t fd_max) {
  char name[64];
  snprintf(name, sizeof name, "%s%s %lldx%lld", rms ? "rmsnorm" : "layernorm",
           rms ? "" : bias ? "+bias" : " no bias", (long long)rows, (long long)h);
  Case c = {.name = name, .nin = bias ? 3 : 2, .len = {rows * h, h, h}, .diff = {1, 1, 1},
            .nout = rows * h, .fd_max = fd_max, .scale = 1, .ref = ref_norm, .fwd = fwd_norm,
            .bwd = bwd_norm, .rows = rows, .n = h, .inverse = rms, .bias = bias, .eps = 1e-5};
  run_case(&c);
}

static void case_softmax(int64_t rows, int64_t n, int64_t fd_max) {
  char name[64];
  snprintf(name, sizeof name, "softmax %lldx%lld", (long long)rows, (long long)n);
  Case c = {.name = name, .nin = 1, .len = {rows * n}, .diff = {1}, .nout = rows * n,
            .fd_max = fd_max, .scale = 4, .ref = ref_softmax, .fwd = fwd_softmax,
            .bwd = bwd_softmax, .rows = rows, .n = n};
  run_case(&c);
}

static void case_causal(int64_t b, int64_t s, int64_t fd_max) {
  char name[64];
  snprintf(name, sizeof name, "causal_mask b=%lld s=%lld", (long long)b, (long long)s);
  Case c = {.name = name, .nin = 1, .len = {b * s * s}, .diff = {1}, .nout = b * s * s,
            .fd_max = fd_max, .scale = 1, .ref = ref_causal, .fwd = fwd_causal,
            .bwd = bwd_causal, .b = b, .s = s, .fill = -3};
  run_case(&c);
}

static void case_rope(int inverse, int64_t b, int64_t s, int64_t H, int64_t d, int64_t fd_max) {
  char name[64];
  snprintf(name, sizeof name, "rope%s b=%lld s=%lld H=%lld d=%lld", inverse ? " inverse" : "",
           (long long)b, (long long)s, (long long)H, (long long)d);
  Case c = {.name = name, .nin = 1, .len = {b * s * H * d}, .diff = {1}, .nout = b * s * H * d,
            .fd_max = fd_max, .scale = 1, .ref = ref_rope, .fwd = fwd_rope, .bwd = bwd_rope,
            .b = b, .s = s, .H = H, .d = d, .theta = 10000, .inverse = inverse};
  run_case(&c);
}

static void case_attention(int causal, int64_t b, int64_t s, int64_t H, int64_t K, int64_t d,
                           int64_t fd_max) {
  char name[80];
  snprintf(name, sizeof name, "attention%s b=%lld s=%lld H=%lld K=%lld d=%lld",
           causal ? " causal" : "", (long long)b, (long long)s, (long long)H, (long long)K,
           (long long)d);
  Case c = {.name = name, .nin = 3, .len = {b * s * H * d, b * s * K * d, b * s * K * d},
            .diff = {1, 1, 1}, .nout = b * s * H * d, .fd_max = fd_max, .scale = 1.5,
            .ref = ref_attention, .fwd = fwd_attention, .bwd = bwd_attention, .b = b, .s = s,
            .H = H, .K = K, .d = d, .causal = causal};
  run_case(&c);
}

static void case_xent(int64_t rows, int64_t V, int64_t valid, int64_t fd_max) {
  char name[64];
  snprintf(name, sizeof name, "cross_entropy rows=%lld V=%lld valid=%lld", (long long)rows,
           (long long)V, (long long)valid);
  Case c = {.name = name, .nin = 1, .len = {rows * V}, .diff = {1}, .nout = 1, .fd_max = fd_max,
            .scale = 3, .ref = ref_xent, .fwd = fwd_xent, .bwd = bwd_xent, .rows = rows, .V = V,
            .valid = valid};
  c.ids = irandom(rows, valid);
  run_case(&c);
  free(c.ids);
}

static void case_dropout(int64_t n, double rate, int64_t fd_max) {
  char name[64];
  snprintf(name, sizeof name, "dropout n=%lld rate=%g", (long long)n, rate);
  Case c = {.name = name, .nin = 1, .len = {n}, .diff = {1}, .nout = n, .fd_max = fd_max,
            .scale = 1, .ref = ref_dropout, .fwd = fwd_dropout, .bwd = bwd_dropout, .n = n,
            .rate = rate, .seed = 1234, .site = 7};
  real *ones = xmalloc((size_t)n * sizeof *ones), *y = xmalloc((size_t)n * sizeof *y);
  c.mask = xmalloc((size_t)n * sizeof *c.mask);
  for (int64_t i = 0; i < n; i++)
    ones[i] = 1;
  k_dropout_fwd(y, ones, n, (real)rate, c.seed, c.site);
  for (int64_t i = 0; i < n; i++)
    c.mask[i] = y[i] != 0;
  run_case(&c);
  free(ones);
  free(y);
  free(c.mask);
}

static void case_heads(int merge, int64_t b, int64_t s, int64_t H, int64_t d) {
  char name[64];
  snprintf(name, sizeof name, "%s b=%lld s=%lld H=%lld d=%lld",
           merge ? "merge_heads" : "split_heads", (long long)b, (long long)s, (long long)H,
           (long long)d);
  Case c = {.name = name, .nin = 1, .len = {b * s * H * d}, .diff = {1}, .nout = b * s * H * d,
            .fd_max = 64, .scale = 1, .ref = ref_heads, .fwd = fwd_heads, .bwd = bwd_heads,
            .b = b, .s = s, .H = H, .d = d, .inverse = merge};
  run_case(&c);
}

static void case_transpose(int64_t outer, int64_t n0, int64_t mid, int64_t n1, int64_t inner) {
  char name[64];
  snprintf(name, sizeof name, "transpose %lldx%lldx%lldx%lldx%lld", (long long)outer,
           (long long)n0, (long long)mid, (long long)n1, (long long)inner);
  int64_t n = outer * n0 * mid * n1 * inner;
  Case c = {.name = name, .nin = 1, .len = {n}, .diff = {1}, .nout = n, .fd_max = 64,
            .scale = 1, .ref = ref_transpose, .fwd = fwd_transpose, .bwd = bwd_transpose,
            .b = outer, .n0 = n0, .mid = mid, .n1 = n1, .inner = inner};
  run_case(&c);
}

static void case_copy2d(int64_t rows, int64_t cols, int64_t lds, int64_t ldd) {
  char name[64];
  snprintf(name, sizeof name, "copy2d %lldx%lld lds=%lld ldd=%lld", (long long)rows,
           (long long)cols, (long long)lds, (long long)ldd);
  Case c = {.name = name, .nin = 1, .len = {rows * lds}, .diff = {1}, .nout = rows * ldd,
            .fd_max = 64, .scale = 1, .ref = ref_copy2d, .fwd = fwd_copy2d, .bwd = bwd_copy2d,
            .rows = rows, .n = cols, .ld0 = lds, .ld1 = ldd};
  run_case(&c);
}

static void case_act(int silu, int64_t n) {
  Case c = {.name = silu ? "silu (inline)" : "gelu (inline)", .nin = 1, .len = {n}, .diff = {1},
            .nout = n, .fd_max = 0, .scale = 6, .ref = ref_act, .fwd = fwd_act, .bwd = bwd_act,
            .n = n, .inverse = silu};
  run_case(&c);
}

/* ids over the whole vocabulary of v_all rows, with ids at both edges of
 * the rank's rows and just outside them, and a repeated one */
static void case_embedding_vp(int64_t n, int64_t v_all, int64_t h, int64_t lo, int64_t V,
                              int64_t fd_max) {
  char name[80];
  snprintf(name, sizeof name, "embedding_vp n=%lld rows %lld..%lld of %lld h=%lld", (long long)n,
           (long long)lo, (long long)(lo + V), (long long)v_all, (long long)h);
  Case c = {.name = name, .nin = 1, .len = {V * h}, .diff = {1}, .nout = n * h, .fd_max = fd_max,
            .scale = 1, .ref = ref_embedding_vp, .fwd = fwd_embedding_vp,
            .bwd = bwd_embedding_vp, .rows = n, .n = h, .V = V, .lo = lo, .valid = v_all};
  c.ids = irandom(n, v_all);
  c.ids[0] = (int32_t)lo;
  c.ids[1] = (int32_t)(lo + V - 1);
  c.ids[2] = (int32_t)(lo > 0 ? lo - 1 : lo + V);
  c.ids[3] = (int32_t)(lo + V < v_all ? lo + V : lo + 1);
  c.ids[n - 1] = c.ids[1];
  run_case(&c);
  free(c.ids);
}

/* Targets include the first column of the last rank with real columns and
 * the last real column. */
static void case_xent_vp(int64_t rows, int64_t tp, int64_t V, int64_t valid, int64_t fd_max) {
  char name[80];
  snprintf(name, sizeof name, "cross_entropy_vp rows=%lld %lld ranks x V=%lld valid=%lld",
           (long long)rows, (long long)tp, (long long)V, (long long)valid);
  Case c = {.name = name, .nin = 1, .len = {rows * tp * V}, .diff = {1}, .nout = 1,
            .fd_max = fd_max, .scale = 3, .ref = ref_xent_vp, .fwd = fwd_xent_vp,
            .bwd = bwd_xent_vp, .rows = rows, .V = V, .tp = tp, .valid = valid};
  c.ids = irandom(rows, valid);
  c.ids[0] = (int32_t)((valid - 1) / V * V);
  c.ids[1] = (int32_t)(valid - 1);
  run_case(&c);
  free(c.ids);
}

/* --- tests of their own ---------------------------------------------------------- */

/* All four transpose cases, leading dims wider than the matrices, alpha and
 * beta, K = 0; the batched form with a shared B (stride 0), small entries
 * (split over threads) and large ones (threaded inside), 1 vs 2 threads. */
static double gemm_ref_err(int ta, int tb, int64_t M, int64_t N, int64_t K, const real *A,
                           int64_t lda, const real *B, int64_t ldb, const real *C0, const real *C,
                           int64_t ldc, double alpha, double beta) {
  double *ref = xmalloc((size_t)(M * N) * sizeof *ref);
  real *got = xmalloc((size_t)(M * N) * sizeof *got);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0;
      for (int64_t p = 0; p < K; p++)
        acc += (double)(ta ? A[p * lda + i] : A[i * lda + p]) *
               (double)(tb ? B[j * ldb + p] : B[p * ldb + j]);
      ref[i * N + j] = alpha * acc + beta * (double)C0[i * ldc + j];
      got[i * N + j] = C[i * ldc + j];
    }
  double e = rel_err(got, ref, M * N);
  free(ref);
  free(got);
  return e;
}

static void test_gemm(void) {
  const int64_t sizes[][3] = {{5, 7, 9}, {67, 45, 33}, {3, 4, 0}, {130, 129, 257}};
  char what[96];
  for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t M = sizes[z][0], N = sizes[z][1], K = sizes[z][2];
        int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
        real *A = rrandom((ta ? K : M) * lda + 1, 1), *B = rrandom((tb ? N : K) * ldb + 1, 1);
        real *C0 = rrandom(M * ldc, 1), *C = xmalloc((size_t)(M * ldc) * sizeof *C);
        memcpy(C, C0, (size_t)(M * ldc) * sizeof *C);
        k_gemm(ta, tb, M, N, K, (real)0.75, A, lda, B, ldb, (real)0.5, C, ldc);
        snprintf(what, sizeof what, "gemm %lldx%lldx%lld trans %d%d", (long long)M, (long long)N,
                 (long long)K, ta, tb);
        check(what, gemm_ref_err(ta, tb, M, N, K, A, lda, B, ldb, C0, C, ldc, 0.75, 0.5),
              TOL_FWD);
        free(A);
        free(B);
        free(C0);
        free(C);
      }

  const int64_t batched[][4] = {{40, 9, 11, 13}, {3, 70, 90, 80}, {1, 5, 6, 7}};
  for (size_t z = 0; z < sizeof batched / sizeof *batched; z++)
    for (int shared = 0; shared < 2; shared++) {
      int64_t bt = batched[z][0], M = batched[z][1], N = batched[z][2], K = batched[z][3];
      int64_t sa = M * K + 1, sb = shared ? 0 : K * N + 2, sc = M * N + 3;
      real *A = rrandom(bt * sa, 1), *B = rrandom(shared ? K * N : bt * sb, 1);
      real *C0 = rrandom(bt * sc, 1), *C = xmalloc((size_t)(bt * sc) * sizeof *C);
      real *C1 = xmalloc((size_t)(bt * sc) * sizeof *C);
      double err = 0;
      int differ = 0;
      for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        memcpy(C, C0, (size_t)(bt * sc) * sizeof *C);
        k_gemm_batched(1, shared, bt, M, N, K, (real)1.25, A, M, sa, B, shared ? K : N, sb,
                       (real)-1, C, N, sc);
        if (threads == 1)
          memcpy(C1, C, (size_t)(bt * sc) * sizeof *C);
        else
          differ = memcmp(C, C1, (size_t)(bt * sc) * sizeof *C) != 0;
      }
      for (int64_t i = 0; i < bt; i++)
        err = fmax(err, gemm_ref_err(1, shared, M, N, K, A + i * sa, M, B + i * sb,
                                     shared ? K : N, C0 + i * sc, C + i * sc, N, 1.25, -1));
      snprintf(what, sizeof what, "gemm_batched %lld x %lldx%lldx%lld%s", (long long)bt,
               (long long)M, (long long)N, (long long)K, shared ? " shared B" : "");
      check(what, err, TOL_FWD);
      snprintf(what, sizeof what, "gemm_batched %lld x ...: 1 vs 2 threads, differing",
               (long long)bt);
      check(what, differ, 0);
      free(A);
      free(B);
      free(C0);
      free(C);
      free(C1);
    }
  omp_set_num_threads(2);
}

/* k_exp, k_tanh and k_sigmoid against libm over their whole useful range. */
static void test_exp(void) {
  double ee = 0, te = 0, se = 0;
  int special = 0;
  for (int64_t i = 0; i <= 2000000; i++) {
    double x = -87.0 + 175.0 * (double)i / 2000000.0;
    real xr = (real)x;
    ee = fmax(ee, fabs((double)k_exp(xr) - exp((double)xr)) / exp((double)xr));
    if (fabs(x) < 20)
      te = fmax(te, fabs((double)k_tanh(xr) - tanh((double)xr)));
    if (fabs(x) < 40)
      se = fmax(se, fabs((double)k_sigmoid(xr) - 1 / (1 + exp(-(double)xr))));
  }
  special += k_exp((real)-INFINITY) != 0 || !isinf(k_exp((real)INFINITY));
  special += !isnan(k_exp((real)NAN)) || k_exp((real)0) != 1;
  special += k_tanh((real)50) != 1 || k_tanh((real)-50) != -1 || k_tanh((real)0) != 0;
#ifndef SHARD_REAL_F64
  /* f32 saturates where the result leaves the normal range. */
  special += k_exp(-100.0f) != 0 || !isinf(k_exp(100.0f));
#endif
#ifdef SHARD_REAL_F64
  const double tol_exp = 1e-15, tol_tanh = 1e-15;
#else
  const double tol_exp = 3e-7, tol_tanh = 3e-7;
#endif
  check("k_exp relative error on [-87, 88]", ee, tol_exp);
  check("k_tanh absolute error on [-20, 20]", te, tol_tanh);
  check("k_sigmoid absolute error on [-40, 40]", se, tol_tanh);
  check("k_exp/k_tanh at 0, +-inf, NaN, saturation: wrong", special, 0);
}

/* Rotating forward then back gives the input again; merge undoes split
 * exactly; a transpose twice is the identity. */
static void test_inverses(void) {
  int64_t b = 2, s = 37, H = 3, d = 10, n = b * s * H * d;
  real *x = rrandom(n, 1), *y = xmalloc((size_t)n * sizeof *y), *z = xmalloc((size_t)n * sizeof *z);
  double *xd = xmalloc((size_t)n * sizeof *xd);
  for (int64_t i = 0; i < n; i++)
    xd[i] = x[i];
  k_rope(y, x, b, s, H, d, 10000, 0);
  k_rope(z, y, b, s, H, d, 10000, 1);
#ifdef SHARD_REAL_F64
  check("rope then inverse rope = identity", rel_err(z, xd, n), 1e-14);
#else
  check("rope then inverse rope = identity", rel_err(z, xd, n), 1e-6);
#endif
  k_rope(y, x, b, s, H, d, 10000, 0);
  memcpy(z, x, (size_t)n * sizeof *z);
  k_rope(z, z, b, s, H, d, 10000, 0); /* in place */
  check("rope in place = out of place, differing", memcmp(y, z, (size_t)n * sizeof *z) != 0, 0);
  k_split_heads(y, x, b, s, H, d);
  k_merge_heads(z, y, b, s, H, d);
  check("merge_heads(split_heads(x)) = x, differing", memcmp(x, z, (size_t)n * sizeof *z) != 0, 0);
  k_transpose(y, x, 2, 5, 3, 37, 1);
  k_transpose(z, y, 2, 37, 3, 5, 1);
  check("transpose twice = x, differing", memcmp(x, z, (size_t)(2 * 5 * 3 * 37) * sizeof *z) != 0,
        0);
  int32_t ar[9];
  k_arange(ar, 9);
  int bad = 0;
  for (int i = 0; i < 9; i++)
    bad += ar[i] != i;
  check("arange", bad, 0);
  free(x);
  free(y);
  free(z);
  free(xd);
}

/* The mask: a fraction `rate` dropped (within 5 standard deviations), kept
 * values scaled by 1/(1 - rate), the same mask in the backward, other sites
 * and seeds independent masks, rate 0 a plain copy. */
static void test_dropout(void) {
  int64_t n = 1000000;
  real *x = rrandom(n, 1), *y = xmalloc((size_t)n * sizeof *y), *g = xmalloc((size_t)n * sizeof *g);
  real *o = xmalloc((size_t)n * sizeof *o);
  char what[96];
  const double rates[] = {0.1, 0.5};
  for (int r = 0; r < 2; r++) {
    double rate = rates[r];
    k_dropout_fwd(y, x, n, (real)rate, 42, 3);
    k_dropout_bwd(g, x, n, (real)rate, 42, 3);
    k_dropout_fwd(o, x, n, (real)rate, 42, 4);
    int64_t dropped = 0, same_other = 0, bad = 0;
    real scale = (real)(1.0 / (1.0 - rate));
    for (int64_t i = 0; i < n; i++) {
      dropped += y[i] == 0;
      bad += y[i] != 0 && y[i] != x[i] * scale;
      bad += memcmp(&y[i], &g[i], sizeof(real)) != 0;
      same_other += (y[i] == 0) == (o[i] == 0);
    }
    double sd = sqrt(rate * (1 - rate) / (double)n);
    snprintf(what, sizeof what, "dropout %g: dropped fraction - rate, in sd", rate);
    check(what, fabs((double)dropped / (double)n - rate) / sd, 5);
    snprintf(what, sizeof what, "dropout %g: values not 0 or x/(1-rate), bwd != fwd", rate);
    check(what, (double)bad, 0);
    /* Independent masks agree on a fraction 1 - 2 rate (1 - rate). */
    double agree = 1 - 2 * rate * (1 - rate), sda = sqrt(agree * (1 - agree) / (double)n);
    snprintf(what, sizeof what, "dropout %g: other site agreement - expected, in sd", rate);
    check(what, fabs((double)same_other / (double)n - agree) / sda, 5);
  }
  k_dropout_fwd(y, x, n, 0, 42, 3);
  check("dropout rate 0 = copy, differing", memcmp(x, y, (size_t)n * sizeof *y) != 0, 0);
  k_dropout_fwd(y, x, n, (real)0.3, 42, 3);
  k_dropout_fwd(o, x, n, (real)0.3, 43, 3);
  int64_t same = 0;
  for (int64_t i = 0; i < n; i++)
    same += (y[i] == 0) == (o[i] == 0);
  double agree = 1 - 2 * 0.3 * 0.7;
  check("dropout 0.3: other seed agreement - expected, in sd",
        fabs((double)same / (double)n - agree) / sqrt(agree * (1 - agree) / (double)n), 5);
  free(x);
  free(y);
  free(g);
  free(o);
}

/* --- blocked GEMMs and the team forms -------------------------------------------- */

/* The naive product in double: alpha op(A) op(B) + beta C0, [M, N]. */
static double *gemm_ref(int ta, int tb, int64_t M, int64_t N, int64_t K, const real *A,
                        int64_t lda, const real *B, int64_t ldb, const real *C0, int64_t ldc,
                        double alpha, double beta) {
  double *ref = xmalloc((size_t)(M * N) * sizeof *ref);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0;
      for (int64_t p = 0; p < K; p++)
        acc += (double)(ta ? A[p * lda + i] : A[i * lda + p]) *
               (double)(tb ? B[j * ldb + p] : B[p * ldb + j]);
      ref[i * N + j] = alpha * acc + beta * (double)C0[i * ldc + j];
    }
  return ref;
}

/* rel_err of C (leading dim ldc) against a dense [M, N] reference; the
 * columns past N must still hold C0's. */
static double strided_err(const real *C, const real *C0, int64_t ldc, const double *ref,
                          int64_t M, int64_t N) {
  real *got = xmalloc((size_t)(M * N) * sizeof *got);
  double stray = 0;
  for (int64_t i = 0; i < M; i++) {
    memcpy(got + i * N, C + i * ldc, (size_t)N * sizeof *got);
    for (int64_t j = N; j < ldc; j++)
      stray += memcmp(&C[i * ldc + j], &C0[i * ldc + j], sizeof *C) != 0;
  }
  double e = rel_err(got, ref, M * N);
  free(got);
  return stray ? INFINITY : e;
}

typedef struct GemmJob {
  int ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  real *A, *B, *C0, *C;
  int64_t rows, n; /* the k_sum_rows_team job sharing the region */
  real *x, *sum;
} GemmJob;

/* k_gemm_blocks (team = 0) or, inside a region the way generated code
 * opens it, k_gemm_blocks_team followed by k_sum_rows_team, with
 * `threads` threads. */
static void gemm_job_run(GemmJob *j, int team, int threads) {
  memcpy(j->C, j->C0, (size_t)(j->M * j->ldc) * sizeof *j->C);
  omp_set_num_threads(threads);
  if (!team) {
    k_gemm_blocks(j->ta, j->tb, j->M, j->N, j->K, (real)0.75, j->A, j->lda, j->B, j->ldb,
                  (real)-0.5, j->C, j->ldc);
    return;
  }
  int blas = k_blas_serial_begin();
#pragma omp parallel
  {
    k_gemm_blocks_team(j->ta, j->tb, j->M, j->N, j->K, (real)0.75, j->A, j->lda, j->B, j->ldb,
                       (real)-0.5, j->C, j->ldc);
    k_sum_rows_team(j->sum, j->x, j->rows, j->n);
  }
  k_blas_serial_end(blas);
}

/* All four transposes, leading dims wider than the matrices; against the
 * double reference, and 1 vs 2 and 3 threads bit for bit. The team form's
 * k_sum_rows_team against a double sum and k_sum_rows' bits. */
static void gemm_blocks_size(int64_t M, int64_t N, int64_t K, int64_t rows, int64_t n) {
  char what[112];
  double err[2] = {0, 0}, sum_err = 0;
  int differ[2] = {0, 0}, sum_differ = 0, sum_vs_plain = 0;
  GemmJob j = {.M = M, .N = N, .K = K, .rows = rows, .n = n};
  j.x = rrandom(rows * n, 1);
  j.sum = xmalloc((size_t)n * sizeof *j.sum);
  real *plain = xmalloc((size_t)n * sizeof *plain), *sum1 = xmalloc((size_t)n * sizeof *sum1);
  k_sum_rows(plain, j.x, rows, n);
  double *sref = xmalloc((size_t)n * sizeof *sref);
  for (int64_t c = 0; c < n; c++) {
    sref[c] = 0;
    for (int64_t r = 0; r < rows; r++)
      sref[c] += (double)j.x[r * n + c];
  }
  for (int t = 0; t < 4; t++) {
    j.ta = t >> 1;
    j.tb = t & 1;
    j.lda = (j.ta ? M : K) + 3;
    j.ldb = (j.tb ? K : N) + 2;
    j.ldc = N + 5;
    j.A = rrandom((j.ta ? K : M) * j.lda + 1, 1);
    j.B = rrandom((j.tb ? N : K) * j.ldb + 1, 1);
    j.C0 = rrandom(M * j.ldc, 1);
    j.C = xmalloc((size_t)(M * j.ldc) * sizeof *j.C);
    real *C1 = xmalloc((size_t)(M * j.ldc) * sizeof *C1);
    double *ref = gemm_ref(j.ta, j.tb, M, N, K, j.A, j.lda, j.B, j.ldb, j.C0, j.ldc, 0.75, -0.5);
    for (int team = 0; team < 2; team++)
      for (int threads = 1; threads <= 3; threads++) {
        gemm_job_run(&j, team, threads);
        if (threads == 1) {
          err[team] = fmax(err[team], strided_err(j.C, j.C0, j.ldc, ref, M, N));
          memcpy(C1, j.C, (size_t)(M * j.ldc) * sizeof *C1);
          if (team) {
            sum_err = fmax(sum_err, rel_err(j.sum, sref, n));
            sum_vs_plain += memcmp(j.sum, plain, (size_t)n * sizeof *plain) != 0;
            memcpy(sum1, j.sum, (size_t)n * sizeof *sum1);
          }
        } else {
          differ[team] += memcmp(C1, j.C, (size_t)(M * j.ldc) * sizeof *C1) != 0;
          if (team)
            sum_differ += memcmp(sum1, j.sum, (size_t)n * sizeof *sum1) != 0;
        }
      }
    free(ref);
    free(C1);
    free(j.A);
    free(j.B);
    free(j.C0);
    free(j.C);
  }
  omp_set_num_threads(2);
  for (int team = 0; team < 2; team++) {
    const char *form = team ? "gemm_blocks_team" : "gemm_blocks";
    snprintf(what, sizeof what, "%s %lldx%lldx%lld, 4 transposes: vs reference", form,
             (long long)M, (long long)N, (long long)K);
    check(what, err[team], TOL_FWD);
    snprintf(what, sizeof what, "%s %lldx%lldx%lld: 1 vs 2, 3 threads, differing", form,
             (long long)M, (long long)N, (long long)K);
    check(what, differ[team], 0);
  }
  snprintf(what, sizeof what, "sum_rows_team %lldx%lld: vs reference", (long long)rows,
           (long long)n);
  check(what, sum_err, TOL_FWD);
  snprintf(what, sizeof what, "sum_rows_team %lldx%lld: vs k_sum_rows, 1/2/3 thr., differing",
           (long long)rows, (long long)n);
  check(what, sum_vs_plain + sum_differ, 0);
  free(j.x);
  free(j.sum);
  free(plain);
  free(sum1);
  free(sref);
}

/* Sizes for every path of the cut (kernels/cpu/gemm.c): one GEMM; rows cut
 * in 2 blocks (the team form too); columns cut in 4 with a narrower last
 * one; rows cut in 2 blocks but 4 narrower ones in the team form; K = 0. */
static void test_gemm_blocks(void) {
  gemm_blocks_size(5, 7, 9, 3, 5);
  gemm_blocks_size(515, 300, 37, 37, 1001);
  gemm_blocks_size(70, 1100, 131, 1000, 70);
  gemm_blocks_size(700, 97, 131, 1, 33);
  gemm_blocks_size(300, 301, 0, 0, 17);

  /* begin sets the pthread build of OpenBLAS to one thread, end restores. */
  int before = openblas_get_num_threads();
  int saved = k_blas_serial_begin();
  int during = openblas_get_num_threads();
  k_blas_serial_end(saved);
  int after = openblas_get_num_threads();
  int bad = after != before || (openblas_get_parallel() == 1 && during != 1);
  check("blas_serial_begin/end: threads not 1 inside, not restored", bad, 0);
}

/* --- optimizer ------------------------------------------------------------------- */

/* One AdamW step as the paper and torch's documentation write it, in
 * double: decoupled decay, moments, bias-corrected estimates. */
typedef struct AdamRef {
  double lr, wd, beta1, beta2, eps, grad_scale;
  int decay;
} AdamRef;

static void adamw_ref(const AdamRef *a, int64_t t, double *w, const double *g, double *m,
                      double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double gi = g[i] * a->grad_scale;
    if (a->decay)
      w[i] -= a->lr * a->wd * w[i];
    m[i] = a->beta1 * m[i] + (1 - a->beta1) * gi;
    v[i] = a->beta2 * v[i] + (1 - a->beta2) * gi * gi;
    double mhat = m[i] / (1 - pow(a->beta1, (double)t));
    double vhat = v[i] / (1 - pow(a->beta2, (double)t));
    w[i] -= a->lr * mhat / (sqrt(vhat) + a->eps);
  }
}

/* The kernel's hyperparameters, derived from the reference's in double the
 * way runtime/optim.c does. */
static KAdamW adamw_params(const AdamRef *a, int64_t t) {
  double bc1 = 1 - pow(a->beta1, (double)t), bc2 = 1 - pow(a->beta2, (double)t);
  return (KAdamW){.grad_scale = (real)a->grad_scale,
                  .decay = (real)(a->decay ? 1 - a->lr * a->wd : 1),
                  .beta1 = (real)a->beta1, .beta2 = (real)a->beta2, .eps = (real)a->eps,
                  .step_size = (real)(a->lr / bc1), .bc2_sqrt = (real)sqrt(bc2)};
}

static double *to_double(const real *a, int64_t n) {
  double *d = xmalloc((size_t)n * sizeof *d);
  for (int64_t i = 0; i < n; i++)
    d[i] = (double)a[i];
  return d;
}

/* Steps 1, 2, 3 from zero moments, then step 1000 from random ones, each
 * compared with the reference started from the kernel's state before it;
 * decay on and off, with and without a clipping scale; odd n (a masked
 * tail). */
static void test_adamw(void) {
  const int64_t n = 4099;
  const int64_t steps[] = {1, 2, 3, 1000};
  char what[112];
  for (int decay = 0; decay < 2; decay++)
    for (int clip = 0; clip < 2; clip++) {
      /* Hyperparameters as real sees them, so that both sides start from
       * the same numbers (the rounding of 0.999 alone moves 1 - beta2 by
       * 1e-5 in f32). */
      AdamRef a = {.lr = (double)(real)3e-3, .wd = (double)(real)0.1,
                   .beta1 = (double)(real)0.9, .beta2 = (double)(real)0.999,
                   .eps = (double)(real)1e-8, .grad_scale = clip ? (double)(real)0.37 : 1,
                   .decay = decay};
      real *w = rrandom(n, 1), *m = xmalloc((size_t)n * sizeof *m);
      real *v = xmalloc((size_t)n * sizeof *v);
      double ew = 0, em = 0, ev = 0;
      for (size_t s = 0; s < sizeof steps / sizeof *steps; s++) {
        int64_t t = steps[s];
        real *g = rrandom(n, 2);
        g[5] = 0; /* a zero gradient with zero moments: eps alone */
        if (t == 1000)
          for (int64_t i = 0; i < n; i++) {
            m[i] = (real)(0.1 * urand());
            v[i] = (real)(0.01 * fabs(urand()));
          }
        double *wd = to_double(w, n), *md = to_double(m, n), *vd = to_double(v, n);
        double *gd = to_double(g, n);
        adamw_ref(&a, t, wd, gd, md, vd, n);
        KAdamW h = adamw_params(&a, t);
        k_adamw(w, g, m, v, n, &h);
        ew = fmax(ew, rel_err(w, wd, n));
        em = fmax(em, rel_err(m, md, n));
        ev = fmax(ev, rel_err(v, vd, n));
        free(wd);
        free(md);
        free(vd);
        free(gd);
        free(g);
      }
      snprintf(what, sizeof what, "adamw decay %s, scale %g, steps 1-3, 1000: w",
               decay ? "on" : "off", a.grad_scale);
      check(what, ew, TOL_FWD);
      snprintf(what, sizeof what, "adamw decay %s, scale %g, steps 1-3, 1000: m, v",
               decay ? "on" : "off", a.grad_scale);
      check(what, fmax(em, ev), TOL_FWD);
      free(w);
      free(m);
      free(v);
    }
}

/* The runtime splits the range among its threads at multiples of 64; any
 * split must do. Past the end of each array lie 16 guards that no call may
 * write (the vector form's masked tail). */
static void test_adamw_split(void) {
  const int64_t n = 4099;
  AdamRef a = {.lr = 1e-2, .wd = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
               .grad_scale = 0.8, .decay = 1};
  KAdamW h = adamw_params(&a, 7);
  enum { GUARDS = 16 };
  real *g = rrandom(n, 1), *st[2][3];
  for (int k = 0; k < 3; k++) {
    st[0][k] = rrandom(n + GUARDS, 1);
    for (int64_t i = 0; i < n + GUARDS; i++)
      st[0][k][i] = i >= n ? 12345 : k == 2 ? st[0][k][i] * st[0][k][i] : st[0][k][i];
    st[1][k] = xmalloc((size_t)(n + GUARDS) * sizeof(real));
    memcpy(st[1][k], st[0][k], (size_t)(n + GUARDS) * sizeof(real));
  }
  k_adamw(st[0][0], g, st[0][1], st[0][2], n, &h);
  const int64_t cut[] = {0, 5, 21, 22, 1000, 1063, n};
  for (size_t c = 0; c + 1 < sizeof cut / sizeof *cut; c++) {
    int64_t o = cut[c];
    k_adamw(st[1][0] + o, g + o, st[1][1] + o, st[1][2] + o, cut[c + 1] - o, &h);
  }
  int differ = 0, guards = 0;
  for (int k = 0; k < 3; k++) {
    differ += memcmp(st[0][k], st[1][k], (size_t)n * sizeof(real)) != 0;
    for (int64_t i = n; i < n + GUARDS; i++)
      guards += (st[0][k][i] != 12345) + (st[1][k][i] != 12345);
    free(st[0][k]);
    free(st[1][k]);
  }
  free(g);
  check("adamw: whole range vs split at odd places, differing", differ, 0);
  check("adamw: elements written past the end of the range", guards, 0);
}

/* Against a compensated double sum (exact well below the tolerance, which
 * allows n ulps of the eight lanes' plain double sums: an accumulator in
 * real would be 1e-4 off in f32); the same bits again for the same n; 0
 * for n 0. */
static void test_sum_squares(void) {
  const int64_t sizes[] = {1, 7, 8, 9, 17, 1000003};
  double worst = 0;
  int bad = k_sum_squares(NULL, 0) != 0;
  for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
    int64_t n = sizes[z];
    real *x = rrandom(n, 3);
    double s = 0, comp = 0;
    for (int64_t i = 0; i < n; i++) { /* Kahan */
      double y = (double)x[i] * (double)x[i] - comp, t = s + y;
      comp = (t - s) - y;
      s = t;
    }
    double got = k_sum_squares(x, n), again = k_sum_squares(x, n);
    worst = fmax(worst, fabs(got - s) / s);
    bad += memcmp(&got, &again, sizeof got) != 0;
    free(x);
  }
  check("sum_squares n=1..1000003: vs compensated double sum", worst, 1e-11);
  check("sum_squares: n=0 not 0, same input different bits", bad, 0);
}

/* --- expert parallelism (moe_ep.c) ------------------------------------------------ */

/* 3 source ranks of 4 local experts each, some of them without rows: the
 * sort puts row j of source s's block for expert e where a naive walk by
 * (expert, source) says, zeros the tail and counts each expert's rows; the
 * unsort gives back y's counted rows exactly; the plan sums the counts of
 * each expert rank. Copies only, so every difference must be 0. */
static void test_ep_permute(void) {
  enum { S = 3, L = 4, H = 5, M = 40 };
  const int32_t rc[S * L] = {2, 0, 3, 1, 0, 4, 1, 0, 5, 2, 0, 1}; /* [source][expert] */
  real *y = rrandom(M * H, 1), *rows = rrandom(M * H, 1), *back = rrandom(M * H, 1);
  int32_t counts[L], send[S], each[S];
  k_ep_sort(rows, counts, y, rc, M, H, S, L);
  k_ep_unsort(back, rows, rc, M, H, S, L);
  double err = 0;
  int64_t at = 0, total = 0;
  for (int e = 0; e < L; e++)
    for (int s = 0; s < S; s++)
      for (int j = 0; j < rc[s * L + e]; j++, at++) {
        int64_t from = j;
        for (int i = 0; i < s * L + e; i++) from += rc[i];
        for (int h = 0; h < H; h++) err = fmax(err, fabs((double)(rows[at * H + h] - y[from * H + h])));
      }
  for (int i = 0; i < S * L; i++) total += rc[i];
  for (int64_t i = total * H; i < M * H; i++) err = fmax(err, fabs((double)rows[i]) + fabs((double)back[i]));
  for (int64_t i = 0; i < total * H; i++) err = fmax(err, fabs((double)(back[i] - y[i])));
  for (int e = 0; e < L; e++) err += abs(counts[e] - (rc[e] + rc[L + e] + rc[2 * L + e]));
  int32_t experts[S * L];
  for (int i = 0; i < S * L; i++) experts[i] = rc[i];
  k_ep_plan(send, each, experts, S * L, S);
  for (int s = 0; s < S; s++) {
    int32_t want = 0;
    for (int e = 0; e < L; e++) want += rc[s * L + e];
    err += abs(send[s] - want) + abs(each[s] - L);
  }
  check("ep_sort/unsort/plan: 3 sources x 4 experts, exact", err, 0);
  free(y), free(rows), free(back);
}

/* --- vocabulary-parallel pieces -------------------------------------------------- */

/* The ranks' forward results, added, are the whole lookup, and their
 * gradients, stacked, the whole gradient: bit for bit, for ranks of
 * unequal widths. */
static void test_embedding_vp_split(void) {
  const int64_t n = 300, v_all = 61, h = 37, lo[] = {0, 7, 8, 40, v_all};
  int32_t *ids = irandom(n, v_all);
  real *table = rrandom(v_all * h, 1), *dout = rrandom(n * h, 1);
  real *whole = xmalloc((size_t)(n * h) * sizeof *whole);
  real *sum = xmalloc((size_t)(n * h) * sizeof *sum);
  real *part = xmalloc((size_t)(n * h) * sizeof *part);
  real *dwhole = xmalloc((size_t)(v_all * h) * sizeof *dwhole);
  real *dstack = xmalloc((size_t)(v_all * h) * sizeof *dstack);
  k_embedding_fwd(whole, ids, table, n, h);
  k_embedding_bwd(dwhole, ids, dout, n, v_all, h);
  for (size_t p = 0; p + 1 < sizeof lo / sizeof *lo; p++) {
    int64_t V = lo[p + 1] - lo[p];
    k_embedding_fwd_vp(part, ids, table + lo[p] * h, n, h, lo[p], V);
    for (int64_t i = 0; i < n * h; i++)
      sum[i] = p == 0 ? part[i] : sum[i] + part[i];
    k_embedding_bwd_vp(dstack + lo[p] * h, ids, dout, n, V, h, lo[p]);
  }
  int differ = memcmp(sum, whole, (size_t)(n * h) * sizeof *sum) != 0;
  differ += memcmp(dstack, dwhole, (size_t)(v_all * h) * sizeof *dstack) != 0;
  check("embedding_vp: 4 ranks summed/stacked vs whole, differing", differ, 0);
  free(ids);
  free(table);
  free(dout);
  free(whole);
  free(sum);
  free(part);
  free(dwhole);
  free(dstack);
}

/* The partial statistics of each rank on their own: the max of its real
 * columns (padding set larger than any, and -inf on a rank without real
 * columns), its sum of exp(x - global max) against a double sum, the
 * target's logit on its holder and 0 elsewhere; then the finished loss
 * and gradient against the whole-vocabulary kernels. */
static void test_ce_vp_partials(void) {
  const int64_t rows = 6, tp = 3, V = 40, valid = 75, W = tp * V;
  real *logits = rrandom(rows * W, 3);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = valid; j < W; j++)
      logits[r * W + j] = 50;
  Case c = {.rows = rows, .V = V, .tp = tp, .valid = valid};
  c.ids = irandom(rows, valid);
  c.ids[0] = 40;
  c.ids[1] = 74;
  c.ids[2] = 39;
  VpStats st = vp_stats(&c, logits);
  int bad = 0;
  double se_err = 0;
  real *mx = xmalloc((size_t)rows * sizeof *mx), *se = xmalloc((size_t)rows * sizeof *se);
  real *tg = xmalloc((size_t)rows * sizeof *tg);
  for (int64_t p = 0; p < tp; p++) {
    const real *lp = st.local + p * rows * V;
    int64_t n = vp_real_cols(&c, p);
    k_ce_vp_max(mx, lp, rows, V, n);
    k_ce_vp_sumexp(se, lp, st.mx, rows, V, n);
    k_ce_vp_target(tg, lp, c.ids, rows, V, p * V, n, valid);
    for (int64_t r = 0; r < rows; r++) {
      real m = -INFINITY;
      double s = 0;
      for (int64_t j = 0; j < n; j++) {
        m = lp[r * V + j] > m ? lp[r * V + j] : m;
        s += exp((double)lp[r * V + j] - (double)st.mx[r]);
      }
      int64_t t = c.ids[r] - p * V;
      bad += mx[r] != m || (n == 0 && se[r] != 0);
      bad += tg[r] != (t >= 0 && t < n ? lp[r * V + t] : 0);
      se_err = fmax(se_err, n ? fabs((double)se[r] - s) / s : 0);
    }
  }
  check("ce_vp partials: max, target, empty rank wrong", bad, 0);
  check("ce_vp partials: sumexp vs double sum", se_err, TOL_FWD);

  real loss_vp, loss, one = 1;
  k_ce_vp_loss(&loss_vp, st.mx, st.se, st.tg, rows);
  k_cross_entropy_fwd(&loss, logits, c.ids, rows, W, valid);
  check("ce_vp loss vs cross_entropy_fwd of the whole", fabs((double)loss_vp - loss) / fabs(loss),
        TOL_FWD);
  real *g = xmalloc((size_t)(rows * W) * sizeof *g), *gv = xmalloc((size_t)(rows * W) * sizeof *gv);
  k_cross_entropy_bwd(g, logits, c.ids, &one, rows, W, valid);
  bwd_xent_vp(&c, (real *const[]){logits}, &one, (real *const[]){gv});
  double *gd = to_double(g, rows * W);
  check("ce_vp bwd vs cross_entropy_bwd of the whole", rel_err(gv, gd, rows * W), TOL_FWD);
  free(gd);
  free(g);
  free(gv);
  free(mx);
  free(se);
  free(tg);
  free(logits);
  free(c.ids);
  vp_free(&st);
}

/* Padding columns of the logits get a gradient of exactly 0. */
static void test_xent_padding(void) {
  int64_t rows = 5, V = 97, valid = 90;
  real *logits = rrandom(rows * V, 3), *dl = xmalloc((size_t)(rows * V) * sizeof *dl);
  int32_t *t = irandom(rows, valid);
  real dloss = 1;
  for (int64_t i = 0; i < rows * V; i++)
    dl[i] = 1;
  k_cross_entropy_bwd(dl, logits, t, &dloss, rows, V, valid);
  int bad = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = valid; j < V; j++)
      bad += dl[r * V + j] != 0;
  check("cross_entropy: padding gradients not 0", bad, 0);
  free(logits);
  free(dl);
  free(t);
}

int main(void) {
  printf("kernels (%s), up to %d threads\n", FLAVOUR, omp_get_max_threads());
  omp_set_num_threads(2);
  test_exp();
  test_gemm();
  test_inverses();
  test_dropout();
  test_xent_padding();
  test_gemm_blocks();
  test_adamw_split();
  test_adamw();
  test_sum_squares();
  test_ep_permute();
  test_embedding_vp_split();
  test_ce_vp_partials();

  /* Odd sizes with every coordinate checked, then sizes large enough for
   * the parallel paths (there the differences check a sample). */
  case_embedding(9, 13, 6, 0);
  case_embedding(600, 50, 100, 40);
  case_embedding_vp(9, 13, 6, 0, 5, 0);
  case_embedding_vp(9, 13, 6, 5, 8, 0);
  case_embedding_vp(600, 1000, 100, 333, 334, 40);
  case_bias(5, 7, 0);
  case_bias(1000, 70, 40);
  for (int rms = 0; rms < 2; rms++)
    for (int bias = rms ? 0 : 1; bias >= 0; bias--) {
      case_norm(rms, bias, 5, 6, 0);
      case_norm(rms, bias, 70, 37, 60);
      case_norm(rms, bias, 1100, 40, 40);
    }
  case_softmax(5, 7, 0);
  case_softmax(300, 130, 40);
  case_causal(2, 7, 0);
  case_causal(3, 120, 40);
  for (int inverse = 0; inverse < 2; inverse++) {
    case_rope(inverse, 2, 7, 2, 6, 0);
    case_rope(inverse, 2, 64, 4, 64, 40);
  }
  for (int causal = 0; causal < 2; causal++) {
    case_attention(causal, 2, 7, 4, 2, 6, 0); /* GQA */
    case_attention(causal, 1, 7, 3, 3, 6, 0); /* one kv head per query head */
    case_attention(causal, 2, 5, 4, 1, 6, 0); /* one kv head for all */
    case_attention(causal, 1, 133, 2, 1, 8, 30); /* several query blocks */
    case_attention(causal, 2, 80, 4, 2, 16, 30);
  }
  case_xent(5, 97, 90, 0);
  case_xent(5, 97, 97, 0);
  case_xent(64, 1000, 999, 40);
  case_xent_vp(5, 3, 40, 75, 0);   /* a rank without real columns */
  case_xent_vp(7, 2, 53, 106, 0);  /* no padding */
  case_xent_vp(64, 3, 700, 2000, 40);
  case_dropout(101, 0.1, 0);
  case_dropout(100000, 0.25, 40);
  for (int merge = 0; merge < 2; merge++) {
    case_heads(merge, 2, 7, 3, 6);
    case_heads(merge, 4, 64, 8, 32);
  }
  case_transpose(2, 5, 3, 7, 4);
  case_transpose(3, 70, 2, 90, 1);
  case_copy2d(5, 6, 9, 7);
  case_copy2d(300, 200, 250, 333);
  case_act(0, 2001);
  case_act(1, 2001);

  if (failures)
    printf("%d check(s) FAILED\n", failures);
  else
    printf("all checks passed\n");
  return failures ? 1 : 0;
}
