/* Rotary position embeddings and scaled dot-product attention.
 *
 * The attention kernels never write the s x s scores. Each query row (or,
 * in the backward's dk/dv pass, each key row) is one warp: its lanes hold
 * the row's d values, LANE_VALS of them each (value c on lane c % 32), and
 * the warp streams the other side's rows one at a time, a dot product
 * being a sum over the lanes. The forward keeps an online softmax (running
 * max, running denominator, output rescaled when the max grows). The
 * backward first stores each query row's log-sum-exp and sum(dy y) in the
 * scratch, then writes dq by query rows and dk, dv by key rows, each row
 * owned by one warp that adds its terms in a fixed order: no atomics. This
 * is the simple, readable form of the flash-attention idea, not a tuned
 * one: no tiles in shared memory and no tensor cores yet.
 *
 * The plain path at the end (scores by cuBLASLt, the mask and softmax
 * kernels, then GEMMs) writes the scores and exists to check the fast path
 * on the same GPU. */
#include <math.h>

#include "common.cuh"

#define ATT_WARPS 4 /* rows per block of 128 threads */

/* ------------------------------------------------------------------ rope */

/* One thread per rotated pair (bi, t, h, i): the angle in double as on the
 * CPU (t theta^(-2i/d)), rounded to fp32 before use. Each thread reads both
 * values of its pair before writing either, so y may be x. */
template <typename T>
__global__ void rope_kernel(T *y, const T *x, int64_t b, int64_t s, int64_t H, int64_t d,
                            float theta, int inverse) {
  int64_t half = d / 2;
  KC_FOR_ELEMENTS(e, b * s * H * half) {
    int64_t i = e % half, h = e / half % H, t = e / half / H % s, bi = e / half / H / s;
    double angle = (double)t * pow((double)theta, -2.0 * (double)i / (double)d);
    float c = (float)cos(angle), sn = (float)(inverse ? -sin(angle) : sin(angle));
    int64_t o = ((bi * s + t) * H + h) * d;
    float x1 = kc_f(x[o + i]), x2 = kc_f(x[o + i + half]);
    y[o + i] = kc_to<T>(x1 * c - x2 * sn);
    y[o + i + half] = kc_to<T>(x2 * c + x1 * sn);
  }
}

template <typename T>
static void rope(T *y, const T *x, int64_t b, int64_t s, int64_t H, int64_t d, float theta,
                 int inverse) {
  KC_REQUIRE(d % 2 == 0, "rope on an odd head size %lld", (long long)d);
  int64_t n = b * s * H * (d / 2);
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), rope_kernel)(y, x, b, s, H, d, theta, inverse);
  KC_LAUNCHED();
}

/* ----------------------------------------------------- rows in registers */

/* The shape facts of one attention call. */
typedef struct Att {
  int64_t b, s, H, K, d, group; /* group = H / K query heads per kv head */
  int causal;
  float scale; /* 1 / sqrt(d) */
} Att;

/* Offsets of row t of query head h (q, y, dy, dq) and of kv head g (k, v,
 * dk, dv) in batch row bi. */
__device__ __forceinline__ int64_t q_row(const Att &a, int64_t bi, int64_t t, int64_t h) {
  return ((bi * a.s + t) * a.H + h) * a.d;
}
__device__ __forceinline__ int64_t kv_row(const Att &a, int64_t bi, int64_t t, int64_t g) {
  return ((bi * a.s + t) * a.K + g) * a.d;
}

/* A row of d values spread over the warp: r[p] is value 32 p + lane. */
template <int P> struct Row {
  float v[P];
};

template <int P, typename T> __device__ __forceinline__ Row<P> load_row(const T *x, int64_t d) {
  Row<P> r;
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int p = 0; p < P; p++) {
    int64_t c = 32 * p + lane;
    r.v[p] = c < d ? kc_f(x[c]) : 0.0f;
  }
  return r;
}

template <int P, typename T> __device__ __forceinline__ void store_row(T *x, const Row<P> &r, int64_t d) {
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int p = 0; p < P; p++) {
    int64_t c = 32 * p + lane;
    if (c < d) x[c] = kc_to<T>(r.v[p]);
  }
}

/* The dot product of a register row with row x of memory, to every lane. */
template <int P, typename T>
__device__ __forceinline__ float dot_row(const Row<P> &r, const T *x, int64_t d) {
  int lane = threadIdx.x % 32;
  float s = 0;
#pragma unroll
  for (int p = 0; p < P; p++) {
    int64_t c = 32 * p + lane;
    if (c < d) s += r.v[p] * kc_f(x[c]);
  }
  return kc_warp_sum(s);
}

/* acc = acc * keep + w x (x a row of memory). */
template <int P, typename T>
__device__ __forceinline__ void axpby_row(Row<P> &acc, float keep, float w, const T *x, int64_t d) {
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int p = 0; p < P; p++) {
    int64_t c = 32 * p + lane;
    acc.v[p] = acc.v[p] * keep + (c < d ? w * kc_f(x[c]) : 0.0f);
  }
}

/* The keys query row i may see: all s, or 0 .. i under the causal mask. */
__device__ __forceinline__ int64_t key_end(const Att &a, int64_t i) { return a.causal ? i + 1 : a.s; }

/* --------------------------------------------------------------- forward */

/* One warp per (bi, h, i); lse (may be NULL) gets the row's log-sum-exp. */
template <int P, typename T>
__global__ void att_fwd_kernel(T *y, const T *q, const T *k, const T *v, Att a, float *lse) {
  int64_t row = blockIdx.x * (int64_t)ATT_WARPS + threadIdx.x / 32;
  if (row >= a.b * a.H * a.s) return; /* the whole warp leaves together */
  int64_t i = row % a.s, h = row / a.s % a.H, bi = row / a.s / a.H, g = h / a.group;
  Row<P> qr = load_row<P>(q + q_row(a, bi, i, h), a.d), acc = {};
  float m = -INFINITY, l = 0;
  for (int64_t j = 0; j < key_end(a, i); j++) {
    float sc = dot_row(qr, k + kv_row(a, bi, j, g), a.d) * a.scale;
    float mn = fmaxf(m, sc), keep = expf(m - mn), e = expf(sc - mn);
    l = l * keep + e;
    axpby_row(acc, keep, e, v + kv_row(a, bi, j, g), a.d);
    m = mn;
  }
  float inv = 1.0f / l;
#pragma unroll
  for (int p = 0; p < P; p++)
    acc.v[p] *= inv;
  store_row(y + q_row(a, bi, i, h), acc, a.d);
  if (lse && threadIdx.x % 32 == 0) lse[row] = m + logf(l);
}

/* -------------------------------------------------------------- backward */

/* Pass 1, one warp per query row: lse[row] as the forward's, and
 * D[row] = sum(dy y) (fp32: at most K_CUDA_ATT_MAX_D terms). */
template <int P, typename T>
__global__ void att_stats_kernel(float *lse, float *D, const T *q, const T *k, const T *y,
                                 const T *dy, Att a) {
  int64_t row = blockIdx.x * (int64_t)ATT_WARPS + threadIdx.x / 32;
  if (row >= a.b * a.H * a.s) return;
  int64_t i = row % a.s, h = row / a.s % a.H, bi = row / a.s / a.H, g = h / a.group;
  Row<P> qr = load_row<P>(q + q_row(a, bi, i, h), a.d);
  float m = -INFINITY, l = 0;
  for (int64_t j = 0; j < key_end(a, i); j++) {
    float sc = dot_row(qr, k + kv_row(a, bi, j, g), a.d) * a.scale;
    float mn = fmaxf(m, sc);
    l = l * expf(m - mn) + expf(sc - mn);
    m = mn;
  }
  Row<P> dyr = load_row<P>(dy + q_row(a, bi, i, h), a.d);
  float dot = dot_row(dyr, y + q_row(a, bi, i, h), a.d);
  if (threadIdx.x % 32 == 0) {
    lse[row] = m + logf(l);
    D[row] = dot;
  }
}

/* Pass 2, one warp per query row: dq_i = sum_j dS_ij k_j, with
 * P_ij = exp(s_ij - lse_i), dS_ij = P_ij (dy_i . v_j - D_i) / sqrt(d). */
template <int P, typename T>
__global__ void att_dq_kernel(T *dq, const T *q, const T *k, const T *v, const T *dy,
                              const float *lse, const float *D, Att a) {
  int64_t row = blockIdx.x * (int64_t)ATT_WARPS + threadIdx.x / 32;
  if (row >= a.b * a.H * a.s) return;
  int64_t i = row % a.s, h = row / a.s % a.H, bi = row / a.s / a.H, g = h / a.group;
  Row<P> qr = load_row<P>(q + q_row(a, bi, i, h), a.d);
  Row<P> dyr = load_row<P>(dy + q_row(a, bi, i, h), a.d), acc = {};
  float li = lse[row], Di = D[row];
  for (int64_t j = 0; j < key_end(a, i); j++) {
    const T *kj = k + kv_row(a, bi, j, g);
    float p = expf(dot_row(qr, kj, a.d) * a.scale - li);
    float ds = p * (dot_row(dyr, v + kv_row(a, bi, j, g), a.d) - Di) * a.scale;
    axpby_row(acc, 1.0f, ds, kj, a.d);
  }
  store_row(dq + q_row(a, bi, i, h), acc, a.d);
}

/* Pass 3, one warp per key row j of kv head g: over the group's query
 * heads in order and the query rows that see key j in order,
 * dv_j = sum P_ij dy_i and dk_j = sum dS_ij q_i. */
template <int P, typename T>
__global__ void att_dkv_kernel(T *dk, T *dv, const T *q, const T *k, const T *v, const T *dy,
                               const float *lse, const float *D, Att a) {
  int64_t row = blockIdx.x * (int64_t)ATT_WARPS + threadIdx.x / 32;
  if (row >= a.b * a.K * a.s) return;
  int64_t j = row % a.s, g = row / a.s % a.K, bi = row / a.s / a.K;
  Row<P> kr = load_row<P>(k + kv_row(a, bi, j, g), a.d);
  Row<P> vr = load_row<P>(v + kv_row(a, bi, j, g), a.d), dkacc = {}, dvacc = {};
  for (int64_t h = g * a.group; h < (g + 1) * a.group; h++)
    for (int64_t i = a.causal ? j : 0; i < a.s; i++) {
      int64_t qi = q_row(a, bi, i, h), stat = (bi * a.H + h) * a.s + i;
      float p = expf(dot_row(kr, q + qi, a.d) * a.scale - lse[stat]);
      float ds = p * (dot_row(vr, dy + qi, a.d) - D[stat]) * a.scale;
      axpby_row(dvacc, 1.0f, p, dy + qi, a.d);
      axpby_row(dkacc, 1.0f, ds, q + qi, a.d);
    }
  store_row(dk + kv_row(a, bi, j, g), dkacc, a.d);
  store_row(dv + kv_row(a, bi, j, g), dvacc, a.d);
}

/* ------------------------------------------------------------ launching */

static Att att_make(int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal) {
  KC_REQUIRE(K > 0 && H % K == 0, "attention with %lld query heads and %lld kv heads",
             (long long)H, (long long)K);
  KC_REQUIRE(d > 0 && d <= K_CUDA_ATT_MAX_D, "attention head size %lld above %d", (long long)d,
             K_CUDA_ATT_MAX_D);
  Att a = {b, s, H, K, d, H / K, causal, (float)(1.0 / sqrt((double)d))};
  return a;
}

static unsigned att_blocks(int64_t rows) {
  int64_t n = (rows + ATT_WARPS - 1) / ATT_WARPS;
  KC_REQUIRE(n <= INT32_MAX, "attention over %lld rows", (long long)rows);
  return (unsigned)n;
}

/* Calls the instance of kernel for the register row that holds d: P = 1, 2,
 * 4 or 8 values a lane. */
#define ATT_DISPATCH(d, kernel, grid, ...)                                                    \
  do {                                                                                       \
    if ((d) <= 32) KC_LAUNCH(grid, 32 * ATT_WARPS, 0, kc_stream(), kernel<1>)(__VA_ARGS__); \
    else if ((d) <= 64) KC_LAUNCH(grid, 32 * ATT_WARPS, 0, kc_stream(), kernel<2>)(__VA_ARGS__); \
    else if ((d) <= 128) KC_LAUNCH(grid, 32 * ATT_WARPS, 0, kc_stream(), kernel<4>)(__VA_ARGS__); \
    else KC_LAUNCH(grid, 32 * ATT_WARPS, 0, kc_stream(), kernel<8>)(__VA_ARGS__); \
    KC_LAUNCHED();                                                                           \
  } while (0)

template <typename T>
static void att_fwd(T *y, const T *q, const T *k, const T *v, int64_t b, int64_t s, int64_t H,
                    int64_t K, int64_t d, int causal, void *scratch) {
  Att a = att_make(b, s, H, K, d, causal);
  if (b * H * s == 0) return;
  ATT_DISPATCH(d, att_fwd_kernel, att_blocks(b * H * s), y, q, k, v, a, (float *)scratch);
}

template <typename T>
static void att_bwd(T *dq, T *dk, T *dv, const T *dy, const T *q, const T *k, const T *v,
                    const T *y, int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                    void *scratch) {
  Att a = att_make(b, s, H, K, d, causal);
  if (b * H * s == 0) return;
  float *lse = (float *)scratch, *D = lse + b * H * s;
  ATT_DISPATCH(d, att_stats_kernel, att_blocks(b * H * s), lse, D, q, k, y, dy, a);
  ATT_DISPATCH(d, att_dq_kernel, att_blocks(b * H * s), dq, q, k, v, dy, lse, D, a);
  ATT_DISPATCH(d, att_dkv_kernel, att_blocks(b * K * s), dk, dv, q, k, v, dy, lse, D, a);
}

/* ------------------------------------------------------------ plain path */

/* The heads batch: for each batch row and each place r in a kv group, one
 * strided batched GEMM over the K kv heads g, whose query heads are
 * h = g * group + r (q_h at column h*d, P_h the (bi*H + h)-th s x s block),
 * so that head h reads kv head g = h / group. Operands are given as
 * (pointer, ld, batch stride) per g. */
typedef struct Heads {
  int64_t bi, r;
} Heads;

template <typename T> static T *q_of(T *q, const Att &a, Heads x) {
  return q + (x.bi * a.s * a.H + x.r) * a.d;
}
template <typename T> static T *kv_of(T *k, const Att &a, Heads x) {
  return k + x.bi * a.s * a.K * a.d;
}
static int64_t p_at(const Att &a, Heads x) { return (x.bi * a.H + x.r) * a.s * a.s; }

/* C_g = alpha op(A_g) op(B_g) + beta C_g over the kv heads g. */
static void heads_gemm(const Att &a, int ta, int tb, int64_t M, int64_t N, int64_t K_, float alpha,
                       const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb,
                       int64_t sb, float beta, float *C, int64_t ldc, int64_t sc) {
  k_cuda_gemm_batched(ta, tb, a.K, M, N, K_, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc);
}

/* P_h (scratch, [s, s]) = softmax(mask(q_h k_g^T / sqrt(d))) for every
 * (batch row, head), by batched GEMMs and the softmax kernel over all. */
static void plain_probs(float *P, const float *q, const float *k, const Att &a) {
  int64_t s = a.s, d = a.d, G = a.group;
  for (Heads x = {0, 0}; x.bi < a.b; x.bi++)
    for (x.r = 0; x.r < G; x.r++)
      heads_gemm(a, 0, 1, s, s, d, a.scale, q_of(q, a, x), a.H * d, G * d, kv_of(k, a, x),
                 a.K * d, d, 0, P + p_at(a, x), s, G * s * s);
  if (a.causal) k_cuda_causal_mask(P, P, a.b * a.H, a.s, -INFINITY);
  k_cuda_softmax_fwd(P, P, a.b * a.H * a.s, a.s);
}

static void plain_fwd(float *y, const float *q, const float *k, const float *v, int64_t b,
                      int64_t s, int64_t H, int64_t K, int64_t d, int causal, void *scratch) {
  Att a = att_make(b, s, H, K, d, causal);
  float *P = (float *)scratch;
  int64_t G = a.group;
  plain_probs(P, q, k, a);
  for (Heads x = {0, 0}; x.bi < b; x.bi++)
    for (x.r = 0; x.r < G; x.r++)
      heads_gemm(a, 0, 0, s, d, s, 1, P + p_at(a, x), s, G * s * s, kv_of(v, a, x), K * d, d, 0,
                 q_of(y, a, x), H * d, G * d);
}

/* dP = dy_h v_g^T, dS = softmax'(P) dP / sqrt(d) (masked entries have P = 0,
 * so dS = 0 there); dq_h = dS k_g, and over the group's heads in order
 * dk_g += dS^T q_h, dv_g += P^T dy_h (the first head overwrites). */
static void plain_bwd(float *dq, float *dk, float *dv, const float *dy, const float *q,
                      const float *k, const float *v, int64_t b, int64_t s, int64_t H, int64_t K,
                      int64_t d, int causal, void *scratch) {
  Att a = att_make(b, s, H, K, d, causal);
  float *P = (float *)scratch, *G = P + b * H * s * s;
  int64_t g = a.group;
  plain_probs(P, q, k, a);
  for (Heads x = {0, 0}; x.bi < b; x.bi++)
    for (x.r = 0; x.r < g; x.r++)
      heads_gemm(a, 0, 1, s, s, d, 1, q_of(dy, a, x), H * d, g * d, kv_of(v, a, x), K * d, d, 0,
                 G + p_at(a, x), s, g * s * s);
  k_cuda_softmax_bwd(G, P, G, b * H * s, s);
  k_cuda_scale(G, G, a.scale, b * H * s * s);
  for (Heads x = {0, 0}; x.bi < b; x.bi++)
    for (x.r = 0; x.r < g; x.r++) {
      const float *Gh = G + p_at(a, x), *Ph = P + p_at(a, x);
      float beta = x.r ? 1.0f : 0.0f;
      heads_gemm(a, 0, 0, s, d, s, 1, Gh, s, g * s * s, kv_of(k, a, x), K * d, d, 0,
                 q_of(dq, a, x), H * d, g * d);
      heads_gemm(a, 1, 0, s, d, s, 1, Gh, s, g * s * s, q_of(q, a, x), H * d, g * d, beta,
                 kv_of(dk, a, x), K * d, d);
      heads_gemm(a, 1, 0, s, d, s, 1, Ph, s, g * s * s, q_of(dy, a, x), H * d, g * d, beta,
                 kv_of(dv, a, x), K * d, d);
    }
}

extern "C" {
void k_cuda_rope(float *y, const float *x, int64_t b, int64_t s, int64_t H, int64_t d,
                 float theta, int inverse) {
  rope(y, x, b, s, H, d, theta, inverse);
}
void k_cuda_rope_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t b, int64_t s, int64_t H, int64_t d,
                      float theta, int inverse) {
  rope(B16(y), CB16(x), b, s, H, d, theta, inverse);
}
int64_t k_cuda_attention_scratch(int64_t b, int64_t s, int64_t H) {
  return 2 * b * H * s * (int64_t)sizeof(float);
}
void k_cuda_attention_fwd(float *y, const float *q, const float *k, const float *v, int64_t b,
                          int64_t s, int64_t H, int64_t K, int64_t d, int causal, void *scratch) {
  att_fwd(y, q, k, v, b, s, H, K, d, causal, scratch);
}
void k_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dy, const float *q,
                          const float *k, const float *v, const float *y, int64_t b, int64_t s,
                          int64_t H, int64_t K, int64_t d, int causal, void *scratch) {
  att_bwd(dq, dk, dv, dy, q, k, v, y, b, s, H, K, d, causal, scratch);
}
void k_cuda_attention_fwd_bf16(kc_bf16 *y, const kc_bf16 *q, const kc_bf16 *k, const kc_bf16 *v,
                               int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                               void *scratch) {
  att_fwd(B16(y), CB16(q), CB16(k), CB16(v), b, s, H, K, d, causal, scratch);
}
void k_cuda_attention_bwd_bf16(kc_bf16 *dq, kc_bf16 *dk, kc_bf16 *dv, const kc_bf16 *dy,
                               const kc_bf16 *q, const kc_bf16 *k, const kc_bf16 *v,
                               const kc_bf16 *y, int64_t b, int64_t s, int64_t H, int64_t K,
                               int64_t d, int causal, void *scratch) {
  att_bwd(B16(dq), B16(dk), B16(dv), CB16(dy), CB16(q), CB16(k), CB16(v), CB16(y), b, s, H, K, d,
          causal, scratch);
}
int64_t k_cuda_attention_plain_scratch(int64_t b, int64_t s, int64_t H) {
  return 2 * b * H * s * s * (int64_t)sizeof(float);
}
void k_cuda_attention_fwd_plain(float *y, const float *q, const float *k, const float *v,
                                int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                                void *scratch) {
  if (b * H * s == 0) return;
  plain_fwd(y, q, k, v, b, s, H, K, d, causal, scratch);
}
void k_cuda_attention_bwd_plain(float *dq, float *dk, float *dv, const float *dy, const float *q,
                                const float *k, const float *v, const float *y, int64_t b,
                                int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                                void *scratch) {
  (void)y; /* the plain backward takes sum(dy y) as sum(P dP), which softmax_bwd forms */
  if (b * H * s == 0) return;
  plain_bwd(dq, dk, dv, dy, q, k, v, b, s, H, K, d, causal, scratch);
}
}
