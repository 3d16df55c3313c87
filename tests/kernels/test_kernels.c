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
 * threads and must give identical bits. Kernels without a backward (GEMM,
 * exp and friends) and properties no gradient shows (dropout statistics,
 * exact inverses) have tests of their own at the end.
 *
 * Every check prints the error it measured and its tolerance; the program
 * exits 1 when any check is above tolerance. */
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

/* k_exp and k_tanh against libm over their whole useful range. */
static void test_exp(void) {
  double ee = 0, te = 0;
  int special = 0;
  for (int64_t i = 0; i <= 2000000; i++) {
    double x = -87.0 + 175.0 * (double)i / 2000000.0;
    real xr = (real)x;
    ee = fmax(ee, fabs((double)k_exp(xr) - exp((double)xr)) / exp((double)xr));
    if (fabs(x) < 20)
      te = fmax(te, fabs((double)k_tanh(xr) - tanh((double)xr)));
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

  /* Odd sizes with every coordinate checked, then sizes large enough for
   * the parallel paths (there the differences check a sample). */
  case_embedding(9, 13, 6, 0);
  case_embedding(600, 50, 100, 40);
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
