/* The routed (mixture-of-experts) layer: the router's top-k, the dispatch
 * that groups each token's k copies by expert, the grouped product of the
 * experts and the weighted combine, with their backward kernels.
 *
 * Rows are "copies": copy c = t * k + j is token t's j-th choice. The
 * dispatch places copy c at row pos[c] of the expert-sorted rows, sorted by
 * expert and, within an expert, by c (a stable counting sort), so that every
 * result depends on the sizes and the choices alone. */
#include <string.h>

#include "internal.h"

/* The router's scores of one token: softmax over all E (Mixtral) or the
 * sigmoid of each logit (score 1). */
static void router_scores(real *p, const real *l, int64_t E, int score) {
  if (score == 1) {
    for (int64_t e = 0; e < E; e++) p[e] = (real)(1.0 / (1.0 + exp(-(double)l[e])));
    return;
  }
  real m = kcpu_max(l, E);
  acc_t s = 0;
  for (int64_t e = 0; e < E; e++) s += (p[e] = k_exp(l[e] - m));
  real inv = (real)(1.0 / s);
  for (int64_t e = 0; e < E; e++) p[e] *= inv;
}

void k_router_fwd(real *w, int32_t *ex, const real *logits, int64_t T, int64_t E, int64_t k,
                  int score, int normalize) {
  if (E > K_ROUTER_MAX || k > E) kcpu_die("router: %lld experts, top %lld", (long long)E, (long long)k);
#pragma omp parallel for schedule(static) if (kcpu_par(T * E))
  for (int64_t t = 0; t < T; t++) {
    real p[K_ROUTER_MAX];
    router_scores(p, logits + t * E, E, score);
    k_router_pick(ex + t * k, p, E, k);
    acc_t s = 0;
    for (int64_t j = 0; j < k; j++) s += p[ex[t * k + j]];
    for (int64_t j = 0; j < k; j++)
      w[t * k + j] = normalize ? (real)(p[ex[t * k + j]] / s) : p[ex[t * k + j]];
  }
}

/* w_j = p_j / S with S the sum of the picked scores (or w_j = p_j), then
 * the scores' Jacobian: softmax's y (dp - sum(y dp)), or p (1 - p). */
void k_router_bwd(real *dlogits, const real *logits, const int32_t *ex, const real *dw, int64_t T,
                  int64_t E, int64_t k, int score, int normalize) {
#pragma omp parallel for schedule(static) if (kcpu_par(T * E))
  for (int64_t t = 0; t < T; t++) {
    real p[K_ROUTER_MAX], dp[K_ROUTER_MAX] = {0};
    const int32_t *et = ex + t * k;
    const real *dwt = dw + t * k;
    router_scores(p, logits + t * E, E, score);
    acc_t s = 0, wdw = 0;
    for (int64_t j = 0; j < k; j++) s += p[et[j]];
    for (int64_t j = 0; j < k; j++) wdw += (acc_t)dwt[j] * p[et[j]];
    for (int64_t j = 0; j < k; j++)
      dp[et[j]] = normalize ? (real)(dwt[j] / s - wdw / (s * s)) : dwt[j];
    real *dl = dlogits + t * E;
    if (score == 1) {
      for (int64_t e = 0; e < E; e++) dl[e] = dp[e] * p[e] * (1 - p[e]);
      continue;
    }
    acc_t d = 0;
    for (int64_t e = 0; e < E; e++) d += (acc_t)p[e] * dp[e];
    for (int64_t e = 0; e < E; e++) dl[e] = p[e] * (real)(dp[e] - d);
  }
}

void k_router_load_fwd(real *load, const real *logits, int64_t T, int64_t E, int64_t k) {
  if (E > K_ROUTER_MAX || k > E) kcpu_die("router_load: %lld experts, top %lld", (long long)E, (long long)k);
  acc_t count[K_ROUTER_MAX] = {0}, prob[K_ROUTER_MAX] = {0};
  for (int64_t t = 0; t < T; t++) {
    real p[K_ROUTER_MAX];
    int32_t ex[K_ROUTER_MAX];
    router_scores(p, logits + t * E, E, 0);
    k_router_pick(ex, p, E, k);
    for (int64_t j = 0; j < k; j++) count[ex[j]] += 1;
    for (int64_t e = 0; e < E; e++) prob[e] += p[e];
  }
  for (int64_t e = 0; e < E; e++) load[e] = (real)(count[e] / (acc_t)T), load[E + e] = (real)(prob[e] / (acc_t)T);
}

void k_router_load_bwd(real *dlogits, const real *logits, const real *dload, int64_t T, int64_t E) {
  const real *dp = dload + E;
#pragma omp parallel for schedule(static) if (kcpu_par(T * E))
  for (int64_t t = 0; t < T; t++) {
    real p[K_ROUTER_MAX];
    router_scores(p, logits + t * E, E, 0);
    acc_t d = 0;
    for (int64_t e = 0; e < E; e++) d += (acc_t)p[e] * dp[e];
    for (int64_t e = 0; e < E; e++) dlogits[t * E + e] = p[e] * (real)((dp[e] - d) / (acc_t)T);
  }
}

/* With a capacity cap > 0 an expert keeps its first cap copies in copy
 * order and drops the rest (pos -1); the rows after the kept ones are
 * zeros. */
/* The log of the sum of exponentials of one token's logits. */
static acc_t logsumexp(const real *l, int64_t E) {
  real m = kcpu_max(l, E);
  acc_t s = 0;
  for (int64_t e = 0; e < E; e++) s += exp((acc_t)l[e] - m);
  return m + log(s);
}

void k_router_z_loss_fwd(real *loss, const real *logits, int64_t T, int64_t E) {
  acc_t s = 0;
  for (int64_t t = 0; t < T; t++) {
    acc_t z = logsumexp(logits + t * E, E);
    s += z * z;
  }
  *loss = (real)(s / (acc_t)T);
}

void k_router_z_loss_bwd(real *dlogits, const real *logits, const real *dy, int64_t T, int64_t E) {
#pragma omp parallel for schedule(static) if (kcpu_par(T * E))
  for (int64_t t = 0; t < T; t++) {
    const real *l = logits + t * E;
    acc_t z = logsumexp(l, E), a = 2 * z * (acc_t)dy[0] / (acc_t)T;
    for (int64_t e = 0; e < E; e++) dlogits[t * E + e] = (real)(a * exp((acc_t)l[e] - z));
  }
}

/* The counted slots (k_moe_count): a run has few routed layers per
 * stage, so a short list searched in order. */
enum { MOE_SLOTS = 256 };
static struct {
  int vstage, next, n;
  KMoeStat s[MOE_SLOTS];
} moe_stats = {.vstage = -1};

void k_moe_count(int vstage) {
  moe_stats.vstage = vstage;
  moe_stats.next = 0;
}

int k_moe_take(KMoeStat *out, int max) {
  int n = moe_stats.n < max ? moe_stats.n : max;
  memcpy(out, moe_stats.s, sizeof *out * (size_t)n);
  moe_stats.n = 0;
  return n;
}

static void moe_record(const int32_t *ex, int64_t n, int64_t E, int64_t kept) {
  int layer = moe_stats.next++, i = 0;
  while (i < moe_stats.n &&
         (moe_stats.s[i].vstage != moe_stats.vstage || moe_stats.s[i].layer != layer))
    i++;
  if (i == MOE_SLOTS) return;
  KMoeStat *st = &moe_stats.s[i];
  if (i == moe_stats.n) {
    memset(st, 0, sizeof *st);
    st->vstage = moe_stats.vstage, st->layer = layer, st->experts = E;
    moe_stats.n++;
  }
  st->copies += n;
  st->dropped += n - kept;
  for (int64_t c = 0; c < n; c++) st->demand[ex[c]]++;
}

void k_moe_dispatch(real *xs, int32_t *pos, int32_t *counts, const real *x, const int32_t *ex,
                    int64_t T, int64_t k, int64_t h, int64_t E, int64_t cap) {
  int64_t n = T * k;
  if (E > K_ROUTER_MAX) kcpu_die("moe_dispatch: %lld experts", (long long)E);
  for (int64_t e = 0; e < E; e++) counts[e] = 0;
  for (int64_t c = 0; c < n; c++) {
    if (ex[c] < 0 || ex[c] >= E) kcpu_die("moe_dispatch: expert %d out of [0, %lld)", ex[c], (long long)E);
    if (!cap || counts[ex[c]] < cap) counts[ex[c]]++;
  }
  int64_t next[K_ROUTER_MAX], end[K_ROUTER_MAX], at = 0;
  for (int64_t e = 0; e < E; e++) next[e] = at, at += counts[e], end[e] = at;
  if (moe_stats.vstage >= 0) moe_record(ex, n, E, at);
  for (int64_t c = 0; c < n; c++)
    pos[c] = next[ex[c]] < end[ex[c]] ? (int32_t)next[ex[c]]++ : -1;
  memset(xs + at * h, 0, sizeof(real) * (size_t)((n - at) * h));
#pragma omp parallel for schedule(static) if (kcpu_par(n * h))
  for (int64_t c = 0; c < n; c++)
    if (pos[c] >= 0) memcpy(xs + (int64_t)pos[c] * h, x + (c / k) * h, sizeof(real) * (size_t)h);
}

void k_moe_combine(real *y, const real *ys, const int32_t *pos, const real *w, int64_t T, int64_t k,
                   int64_t h) {
#pragma omp parallel for schedule(static) if (kcpu_par(T * k * h))
  for (int64_t t = 0; t < T; t++) {
    real *yt = y + t * h;
    for (int64_t i = 0; i < h; i++) yt[i] = 0;
    for (int64_t j = 0; j < k; j++) {
      if (pos[t * k + j] < 0) continue; /* dropped: adds nothing */
      const real *r = ys + (int64_t)pos[t * k + j] * h;
      real a = w ? w[t * k + j] : 1;
#pragma omp simd
      for (int64_t i = 0; i < h; i++) yt[i] += a * r[i];
    }
  }
}

void k_moe_combine_bwd(real *dys, real *dw, const real *ys, const int32_t *pos, const real *w,
                       const real *dy, int64_t T, int64_t k, int64_t h) {
  /* Rows no copy holds (past the kept ones) get zeros. */
  memset(dys, 0, sizeof(real) * (size_t)(T * k * h));
#pragma omp parallel for schedule(static) if (kcpu_par(T * k * h))
  for (int64_t t = 0; t < T; t++) {
    const real *dyt = dy + t * h;
    for (int64_t j = 0; j < k; j++) {
      if (pos[t * k + j] < 0) {
        dw[t * k + j] = 0;
        continue;
      }
      int64_t row = (int64_t)pos[t * k + j] * h;
      real a = w[t * k + j];
      acc_t d = 0;
      for (int64_t i = 0; i < h; i++) {
        dys[row + i] = a * dyt[i];
        d += (acc_t)dyt[i] * ys[row + i];
      }
      dw[t * k + j] = (real)d;
    }
  }
}

/* One GEMM per expert with rows: rows [off, off + counts[e]) times w[e]
 * ([out, in] when transposed, else [in, out]). */
void k_grouped_linear(real *y, const real *x, const real *w, const int32_t *counts, int64_t rows,
                      int64_t E, int64_t in, int64_t out, int transposed) {
  int64_t off = 0;
  for (int64_t e = 0; e < E; off += counts[e], e++)
    if (counts[e] > 0)
      k_gemm(0, transposed, counts[e], out, in, 1, x + off * in, in, w + e * in * out,
             transposed ? in : out, 0, y + off * out, out);
  memset(y + off * out, 0, sizeof(real) * (size_t)((rows - off) * out));
}

void k_grouped_linear_dx(real *dx, const real *dy, const real *w, const int32_t *counts,
                         int64_t rows, int64_t E, int64_t in, int64_t out, int transposed) {
  int64_t off = 0;
  for (int64_t e = 0; e < E; off += counts[e], e++)
    if (counts[e] > 0)
      k_gemm(0, !transposed, counts[e], in, out, 1, dy + off * out, out, w + e * in * out,
             transposed ? in : out, 0, dx + off * in, in);
  memset(dx + off * in, 0, sizeof(real) * (size_t)((rows - off) * in));
}

/* dw[e] = x_e^T dy_e ([in, out]) or dy_e^T x_e ([out, in]); an expert
 * without rows gets zeros. */
void k_grouped_linear_dw(real *dw, const real *x, const real *dy, const int32_t *counts,
                         int64_t rows, int64_t E, int64_t in, int64_t out, int transposed) {
  (void)rows; /* the rows past the kept ones add nothing */
  int64_t off = 0;
  for (int64_t e = 0; e < E; off += counts[e], e++) {
    real *d = dw + e * in * out;
    if (counts[e] == 0) memset(d, 0, sizeof(real) * (size_t)(in * out));
    else if (transposed)
      k_gemm(1, 0, out, in, counts[e], 1, dy + off * out, out, x + off * in, in, 0, d, in);
    else
      k_gemm(1, 0, in, out, counts[e], 1, x + off * in, in, dy + off * out, out, 0, d, out);
  }
}
