/* The routed layer (mixtures of experts) on the GPU: the router's top-k,
 * the dispatch that groups each token's k copies by expert, the weighted
 * combine, the router's load and z-loss, and the experts' grouped
 * products, with their backward kernels. kernels/cpu/moe.c is the twin:
 * the same copies, rows and order (copy c = t * k + j of token t goes to
 * row pos[c], rows sorted by expert and by c within one), the same tie rule
 * (the first maximum among the experts not picked yet), the same drops in
 * copy order under a capacity.
 *
 * Nothing here reads a count on the host: the counts stay in device memory
 * and every launch has a shape fixed by the sizes alone, so a step queues
 * its routed layers without waiting for the GPU (and CUDA graphs can
 * capture them). Every sum runs in an order fixed by the sizes: integer
 * counts and offsets, a block's reduction, or one thread's loop. */
#include "common.cuh"
#include "formulas.cuh"

/* ------------------------------------------------------------ the router */

/* The scores of one token (softmax over E, or each logit's sigmoid) into
 * p, the softmax's denominator in double, as router_scores of moe.c. */
template <typename T>
__device__ void moe_scores(float *p, const T *l, int64_t E, int score) {
  if (score == 1) {
    for (int64_t e = 0; e < E; e++) p[e] = (float)(1.0 / (1.0 + exp(-(double)kc_f(l[e]))));
    return;
  }
  float m = -INFINITY;
  for (int64_t e = 0; e < E; e++) m = fmaxf(m, kc_f(l[e]));
  double s = 0;
  for (int64_t e = 0; e < E; e++) s += (p[e] = expf(kc_f(l[e]) - m));
  float inv = (float)(1.0 / s);
  for (int64_t e = 0; e < E; e++) p[e] *= inv;
}

/* One thread per token. */
template <typename T>
__global__ void router_fwd_kernel(T *w, int32_t *ex, const T *logits, int64_t tokens, int64_t E,
                                  int64_t k, int score, int normalize) {
  KC_FOR_ELEMENTS(t, tokens) {
    float p[K_CUDA_ROUTER_MAX];
    int32_t *et = ex + t * k;
    moe_scores(p, logits + t * E, E, score);
    k_router_pick(et, p, E, k);
    double s = 0;
    for (int64_t j = 0; j < k; j++) s += p[et[j]];
    for (int64_t j = 0; j < k; j++)
      w[t * k + j] = kc_to<T>(normalize ? (float)(p[et[j]] / s) : p[et[j]]);
  }
}

/* w_j = p_j / S (or p_j), then the scores' Jacobian, as k_router_bwd. */
template <typename T>
__global__ void router_bwd_kernel(T *dlogits, const T *logits, const int32_t *ex, const T *dw,
                                  int64_t tokens, int64_t E, int64_t k, int score, int normalize) {
  KC_FOR_ELEMENTS(t, tokens) {
    float p[K_CUDA_ROUTER_MAX], dp[K_CUDA_ROUTER_MAX];
    const int32_t *et = ex + t * k;
    const T *dwt = dw + t * k;
    moe_scores(p, logits + t * E, E, score);
    for (int64_t e = 0; e < E; e++) dp[e] = 0;
    double s = 0, wdw = 0;
    for (int64_t j = 0; j < k; j++) s += p[et[j]];
    for (int64_t j = 0; j < k; j++) wdw += (double)kc_f(dwt[j]) * p[et[j]];
    for (int64_t j = 0; j < k; j++)
      dp[et[j]] = normalize ? (float)(kc_f(dwt[j]) / s - wdw / (s * s)) : kc_f(dwt[j]);
    T *dl = dlogits + t * E;
    if (score == 1) {
      for (int64_t e = 0; e < E; e++) dl[e] = kc_to<T>(dp[e] * p[e] * (1 - p[e]));
      continue;
    }
    double d = 0;
    for (int64_t e = 0; e < E; e++) d += (double)p[e] * dp[e];
    for (int64_t e = 0; e < E; e++) dl[e] = kc_to<T>(p[e] * (float)(dp[e] - d));
  }
}

/* One block per expert e, its threads over the tokens: each token's
 * softmax scores and top-k again (O(E k) a token, no scratch), the count of
 * tokens that chose e and the sum of e's scores by block sums in double. */
template <typename T>
__global__ void router_load_fwd_kernel(T *load, const T *logits, int64_t tokens, int64_t E,
                                       int64_t k) {
  __shared__ double buf[32];
  int64_t e = blockIdx.x;
  double count = 0, prob = 0;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x) {
    float p[K_CUDA_ROUTER_MAX];
    int32_t ex[K_CUDA_ROUTER_MAX];
    moe_scores(p, logits + t * E, E, 0);
    k_router_pick(ex, p, E, k);
    for (int64_t j = 0; j < k; j++) count += ex[j] == e;
    prob += p[e];
  }
  count = kc_block_sum(count, buf);
  prob = kc_block_sum(prob, buf);
  if (threadIdx.x == 0) {
    load[e] = kc_to<T>((float)(count / (double)tokens));
    load[E + e] = kc_to<T>((float)(prob / (double)tokens));
  }
}

/* One thread per token: row 1's gradient through the softmax. */
template <typename T>
__global__ void router_load_bwd_kernel(T *dlogits, const T *logits, const T *dload, int64_t tokens,
                                       int64_t E) {
  const T *dp = dload + E;
  KC_FOR_ELEMENTS(t, tokens) {
    float p[K_CUDA_ROUTER_MAX];
    moe_scores(p, logits + t * E, E, 0);
    double d = 0;
    for (int64_t e = 0; e < E; e++) d += (double)p[e] * kc_f(dp[e]);
    for (int64_t e = 0; e < E; e++)
      dlogits[t * E + e] = kc_to<T>(p[e] * (float)((kc_f(dp[e]) - d) / (double)tokens));
  }
}

/* log sum exp of one token's logits, in double as the CPU's. */
template <typename T> __device__ double moe_logsumexp(const T *l, int64_t E) {
  float m = -INFINITY;
  for (int64_t e = 0; e < E; e++) m = fmaxf(m, kc_f(l[e]));
  double s = 0;
  for (int64_t e = 0; e < E; e++) s += exp((double)kc_f(l[e]) - m);
  return m + log(s);
}

/* One block: the tokens' lse^2 summed in double (a block sum). */
template <typename T>
__global__ void router_z_loss_fwd_kernel(T *loss, const T *logits, int64_t tokens, int64_t E) {
  __shared__ double buf[32];
  double s = 0;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x) {
    double z = moe_logsumexp(logits + t * E, E);
    s += z * z;
  }
  s = kc_block_sum(s, buf);
  if (threadIdx.x == 0) loss[0] = kc_to<T>((float)(s / (double)tokens));
}

template <typename T>
__global__ void router_z_loss_bwd_kernel(T *dlogits, const T *logits, const T *dy, int64_t tokens,
                                         int64_t E) {
  KC_FOR_ELEMENTS(t, tokens) {
    const T *l = logits + t * E;
    double z = moe_logsumexp(l, E), a = 2 * z * (double)kc_f(dy[0]) / (double)tokens;
    for (int64_t e = 0; e < E; e++) dlogits[t * E + e] = kc_to<T>((float)(a * exp((double)kc_f(l[e]) - z)));
  }
}

/* --------------------------------------------------- dispatch and combine */

/* The counting sort, in one block of MOE_SORT_THREADS threads, each
 * owning a run of consecutive copies: for each expert in turn, every
 * thread counts the expert's copies in its run, a scan over the threads
 * (in shared memory, integers) gives the rank of each run's first one
 * within the expert, and the thread gives its copies their rows: the
 * offset of the expert (the rows kept by the lower experts), plus the
 * rank, while the rank is below the capacity (cap 0: always), else -1.
 * The ranks are in copy order, so the kept copies and their rows are the
 * CPU's exactly. Each thread reads its run twice an expert: E * 2 * n /
 * MOE_SORT_THREADS steps, the latency of the launch. */
#define MOE_SORT_THREADS 256
__global__ void moe_sort_kernel(int32_t *pos, int32_t *counts, const int32_t *ex, int64_t n,
                                int64_t E, int64_t cap) {
  __shared__ int64_t scan[MOE_SORT_THREADS];
  int64_t t = threadIdx.x, run = (n + blockDim.x - 1) / blockDim.x;
  int64_t c0 = t * run < n ? t * run : n, c1 = c0 + run < n ? c0 + run : n, off = 0;
  for (int64_t c = c0; c < c1; c++) KC_ASSERT(ex[c] >= 0 && ex[c] < E);
  for (int64_t e = 0; e < E; e++) {
    int64_t mine = 0;
    for (int64_t c = c0; c < c1; c++) mine += ex[c] == e;
    scan[t] = mine; /* an inclusive scan, Hillis and Steele */
    __syncthreads();
    for (unsigned d = 1; d < blockDim.x; d <<= 1) {
      int64_t v = t >= d ? scan[t - d] : 0;
      __syncthreads();
      scan[t] += v;
      __syncthreads();
    }
    int64_t rank = scan[t] - mine, total = scan[blockDim.x - 1];
    int64_t kept = cap && total > cap ? cap : total;
    for (int64_t c = c0; c < c1; c++)
      if (ex[c] == e) {
        pos[c] = !cap || rank < cap ? (int32_t)(off + rank) : -1;
        rank++;
      }
    if (t == 0) counts[e] = (int32_t)kept;
    off += kept;
    __syncthreads(); /* scan is the next expert's */
  }
}

/* xs[pos[c]] = x[c / k] for the kept copies, one element a thread (the
 * other rows were zeroed first). */
template <typename T>
__global__ void moe_scatter_kernel(T *xs, const T *x, const int32_t *pos, int64_t n, int64_t k,
                                   int64_t h) {
  KC_FOR_ELEMENTS(i, n * h) {
    int64_t c = i / h, col = i % h;
    if (pos[c] >= 0) xs[(int64_t)pos[c] * h + col] = x[(c / k) * h + col];
  }
}

/* y[t, i] = sum_j w[t, j] ys[pos[t k + j], i] in copy order, in fp32 as the
 * CPU's; w NULL: weights 1 (moe_undispatch). */
template <typename T>
__global__ void moe_combine_kernel(T *y, const T *ys, const int32_t *pos, const T *w,
                                   int64_t tokens, int64_t k, int64_t h) {
  KC_FOR_ELEMENTS(i, tokens * h) {
    int64_t t = i / h, col = i % h;
    float acc = 0;
    for (int64_t j = 0; j < k; j++) {
      int32_t p = pos[t * k + j];
      if (p < 0) continue; /* dropped: adds nothing */
      float a = w ? kc_f(w[t * k + j]) : 1.0f;
      acc = __fadd_rn(acc, __fmul_rn(a, kc_f(ys[(int64_t)p * h + col])));
    }
    y[i] = kc_to<T>(acc);
  }
}

/* dys[pos[c]] = w[c] dy[t] for the kept copies (the others' rows were
 * zeroed first). */
template <typename T>
__global__ void moe_combine_drows_kernel(T *dys, const int32_t *pos, const T *w, const T *dy,
                                         int64_t n, int64_t k, int64_t h) {
  KC_FOR_ELEMENTS(i, n * h) {
    int64_t c = i / h, col = i % h;
    if (pos[c] >= 0)
      dys[(int64_t)pos[c] * h + col] = kc_to<T>(kc_f(w[c]) * kc_f(dy[(c / k) * h + col]));
  }
}

/* One block per copy: dw[c] = dy[t] . ys[pos[c]], a block sum in double;
 * 0 for a dropped copy. */
template <typename T>
__global__ void moe_combine_dw_kernel(T *dw, const T *ys, const int32_t *pos, const T *dy,
                                      int64_t k, int64_t h) {
  __shared__ double buf[32];
  int64_t c = blockIdx.x;
  int32_t p = pos[c];
  double d = 0;
  if (p >= 0)
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
      d += (double)kc_f(dy[(c / k) * h + i]) * kc_f(ys[(int64_t)p * h + i]);
  d = kc_block_sum(d, buf);
  if (threadIdx.x == 0) dw[c] = kc_to<T>(p >= 0 ? (float)d : 0.0f);
}

/* --------------------------------------------------- the grouped products */

/* The products run as one strided batched cuBLASLt GEMM over E experts of
 * `per` rows each (per: the most rows one expert can hold, the capacity or
 * the tokens), on copies of the rows padded to that shape in the scratch:
 * expert e's counts[e] rows, then zeros. Padding costs the rows no expert
 * fills (per E against the N rows there are) but needs no count on the
 * host: one GEMM per expert of its own size would have to read the counts
 * back and wait for the GPU inside the step, and cuBLASLt's grouped calls
 * take their sizes from the host too. A zero row adds exact zeros to the
 * weight gradients and gives rows that the unpacking never reads. */

/* offs[e] = the first row of expert e, offs[E] = the rows kept; one thread
 * (E is small). */
__global__ void moe_offsets_kernel(int32_t *offs, const int32_t *counts, int64_t E, int64_t per) {
  int32_t at = 0;
  for (int64_t e = 0; e < E; e++) {
    KC_ASSERT(counts[e] >= 0 && counts[e] <= per);
    offs[e] = at;
    at += counts[e];
  }
  offs[E] = at;
}

/* xp[e, r, :] = r < counts[e] ? x[offs[e] + r, :] : 0, for r < per. */
template <typename T>
__global__ void moe_pack_kernel(T *xp, const T *x, const int32_t *offs, int64_t E, int64_t per,
                                int64_t cols) {
  KC_FOR_ELEMENTS(i, E * per * cols) {
    int64_t col = i % cols, r = i / cols % per, e = i / (cols * per);
    int64_t n = offs[e + 1] - offs[e];
    xp[i] = r < n ? x[((int64_t)offs[e] + r) * cols + col] : kc_to<T>(0.0f);
  }
}

/* y[offs[e] + r, :] = yp[e, r, :] for the rows kept, zeros from row
 * offs[E] on: one thread per element of y, which finds its expert among
 * the E + 1 offsets by bisection. */
template <typename T>
__global__ void moe_unpack_kernel(T *y, const T *yp, const int32_t *offs, int64_t rows, int64_t E,
                                  int64_t per, int64_t cols) {
  KC_FOR_ELEMENTS(i, rows * cols) {
    int64_t row = i / cols, col = i % cols;
    if (row >= offs[E]) {
      y[i] = kc_to<T>(0.0f);
      continue;
    }
    int64_t lo = 0, hi = E; /* offs[lo] <= row < offs[hi] */
    while (hi - lo > 1) {
      int64_t mid = (lo + hi) / 2;
      if (offs[mid] <= row) lo = mid;
      else hi = mid;
    }
    y[i] = yp[(lo * per + row - offs[lo]) * cols + col];
  }
}

/* The scratch's parts: the offsets (E + 1 ints), then the padded operands
 * a [E, per, ca] and b of `elt` bytes an element, each 256-byte aligned
 * for cuBLASLt. */
static int64_t moe_round256(int64_t b) { return (b + 255) / 256 * 256; }

static KcGrouped moe_parts(void *scratch, int64_t E, int64_t per, int64_t ca, int64_t elt) {
  char *p = (char *)(((uintptr_t)scratch + 255) & ~(uintptr_t)255);
  KcGrouped s;
  s.offs = (int32_t *)p;
  p += moe_round256((E + 1) * 4);
  s.a = p;
  s.b = p + moe_round256(E * per * ca * elt);
  return s;
}

template <typename T> static KcType moe_kc(void);
template <> KcType moe_kc<float>(void) { return KC_F32; }
template <> KcType moe_kc<bf16>(void) { return KC_BF16; }

/* The experts' offsets from the counts, then xp = x padded. */
template <typename T>
static void moe_pack(T *xp, const T *x, const int32_t *counts, int32_t *offs, int64_t E,
                     int64_t per, int64_t cols) {
  KC_LAUNCH(1, 1, 0, kc_stream(), moe_offsets_kernel)(offs, counts, E, per);
  KC_LAUNCHED();
  if (E * per * cols == 0) return;
  KC_LAUNCH(KC_GRID(E * per * cols), moe_pack_kernel)(xp, x, offs, E, per, cols);
  KC_LAUNCHED();
}

template <typename T>
static void moe_unpack(T *y, const T *yp, const int32_t *offs, int64_t rows, int64_t E,
                       int64_t per, int64_t cols) {
  if (rows * cols == 0) return;
  KC_LAUNCH(KC_GRID(rows * cols), moe_unpack_kernel)(y, yp, offs, rows, E, per, cols);
  KC_LAUNCHED();
}

/* The batched GEMM on padded operands, w_e being [out, in] when
 * transposed, else [in, out]: y_e = a_e op(w_e) (KC_GROUPED_Y, a [per, in]),
 * dx_e = a_e op'(w_e) (KC_GROUPED_DX, a = dy [per, out]), and the fp32
 * weight gradient dw_e = dy_e^T x_e or x_e^T dy_e (KC_GROUPED_DW, a = x,
 * b = dy), where an expert without rows multiplies zeros into zeros. */
template <typename T>
static void moe_gemm(KcGroupedOp op, void *c, const T *a, const T *b, int64_t E, int64_t per,
                     int64_t in, int64_t out, int transposed) {
  if (op == KC_GROUPED_DW) {
    if (E * in * out == 0) return;
    if (per == 0) {
      KC_CHECK(cudaMemsetAsync(c, 0, sizeof(float) * (size_t)(E * in * out), kc_stream()));
    } else if (transposed) {
      k_cuda_gemm_ex(moe_kc<T>(), KC_F32, 1, 0, E, out, in, per, 1.0f, b, out, per * out, a, in,
                     per * in, 0.0f, c, in, in * out);
    } else {
      k_cuda_gemm_ex(moe_kc<T>(), KC_F32, 1, 0, E, in, out, per, 1.0f, a, in, per * in, b, out,
                     per * out, 0.0f, c, out, in * out);
    }
    return;
  }
  int dx = op == KC_GROUPED_DX;
  int64_t ca = dx ? out : in, cb = dx ? in : out;
  if (E * per * cb == 0) return;
  /* The forward takes w_e transposed when it is [out, in], dx when not. */
  k_cuda_gemm_ex(moe_kc<T>(), moe_kc<T>(), 0, dx ? !transposed : transposed, E, per, cb, ca, 1.0f,
                 a, ca, per * ca, b, transposed ? in : out, in * out, 0.0f, c, cb, per * cb);
}

/* y = x w_e or dx = dy w_e^T: pack, one batched GEMM, unpack. */
template <typename T>
static void grouped_product(KcGroupedOp op, T *y, const T *x, const T *w, const int32_t *counts,
                            int64_t rows, int64_t E, int64_t in, int64_t out, int transposed,
                            int64_t per, void *scratch) {
  int64_t ca = op == KC_GROUPED_DX ? out : in;
  KcGrouped g = moe_parts(scratch, E, per, ca, sizeof(T));
  moe_pack((T *)g.a, x, counts, g.offs, E, per, ca);
  moe_gemm(op, g.b, (const T *)g.a, w, E, per, in, out, transposed);
  moe_unpack(y, (const T *)g.b, g.offs, rows, E, per, op == KC_GROUPED_DX ? in : out);
}

template <typename T>
static void grouped_dw(float *dw, const T *x, const T *dy, const int32_t *counts, int64_t E,
                       int64_t in, int64_t out, int transposed, int64_t per, void *scratch) {
  KcGrouped g = moe_parts(scratch, E, per, in, sizeof(T));
  moe_pack((T *)g.a, x, counts, g.offs, E, per, in);
  moe_pack((T *)g.b, dy, counts, g.offs, E, per, out);
  moe_gemm(KC_GROUPED_DW, dw, (const T *)g.a, (const T *)g.b, E, per, in, out, transposed);
}

/* ------------------------------------------------------------ launchers */

static void moe_require(int64_t E, int64_t k, const char *what) {
  KC_REQUIRE(E <= K_CUDA_ROUTER_MAX && k <= E, "%s: %lld experts, top %lld", what, (long long)E,
             (long long)k);
}

template <typename T>
static void router_fwd(T *w, int32_t *ex, const T *logits, int64_t tokens, int64_t E, int64_t k,
                       int score, int normalize) {
  moe_require(E, k, "router");
  if (tokens == 0) return;
  KC_LAUNCH(KC_GRID(tokens), router_fwd_kernel)(w, ex, logits, tokens, E, k, score, normalize);
  KC_LAUNCHED();
}

template <typename T>
static void router_bwd(T *dlogits, const T *logits, const int32_t *ex, const T *dw, int64_t tokens,
                       int64_t E, int64_t k, int score, int normalize) {
  moe_require(E, k, "router");
  if (tokens == 0) return;
  KC_LAUNCH(KC_GRID(tokens), router_bwd_kernel)(dlogits, logits, ex, dw, tokens, E, k, score,
                                                normalize);
  KC_LAUNCHED();
}

template <typename T>
static void router_load_fwd(T *load, const T *logits, int64_t tokens, int64_t E, int64_t k) {
  moe_require(E, k, "router_load");
  if (E == 0) return;
  KC_LAUNCH((unsigned)E, KC_ROW_THREADS, 0, kc_stream(), router_load_fwd_kernel)(load, logits,
                                                                                 tokens, E, k);
  KC_LAUNCHED();
}

template <typename T>
static void router_load_bwd(T *dlogits, const T *logits, const T *dload, int64_t tokens, int64_t E) {
  moe_require(E, 0, "router_load");
  if (tokens == 0) return;
  KC_LAUNCH(KC_GRID(tokens), router_load_bwd_kernel)(dlogits, logits, dload, tokens, E);
  KC_LAUNCHED();
}

template <typename T>
static void router_z_loss_fwd(T *loss, const T *logits, int64_t tokens, int64_t E) {
  KC_LAUNCH(1, KC_ROW_THREADS, 0, kc_stream(), router_z_loss_fwd_kernel)(loss, logits, tokens, E);
  KC_LAUNCHED();
}

template <typename T>
static void router_z_loss_bwd(T *dlogits, const T *logits, const T *dy, int64_t tokens, int64_t E) {
  if (tokens == 0) return;
  KC_LAUNCH(KC_GRID(tokens), router_z_loss_bwd_kernel)(dlogits, logits, dy, tokens, E);
  KC_LAUNCHED();
}

static void moe_sort(int32_t *pos, int32_t *counts, const int32_t *ex, int64_t n, int64_t E,
                     int64_t cap) {
  moe_require(E, 0, "moe_dispatch");
  if (E == 0) return;
  KC_LAUNCH(1, MOE_SORT_THREADS, 0, kc_stream(), moe_sort_kernel)(pos, counts, ex, n, E, cap);
  KC_LAUNCHED();
}

template <typename T>
static void moe_scatter(T *xs, const T *x, const int32_t *pos, int64_t n, int64_t k, int64_t h) {
  if (n * h == 0) return;
  KC_CHECK(cudaMemsetAsync(xs, 0, sizeof(T) * (size_t)(n * h), kc_stream()));
  KC_LAUNCH(KC_GRID(n * h), moe_scatter_kernel)(xs, x, pos, n, k, h);
  KC_LAUNCHED();
}

template <typename T>
static void moe_combine(T *y, const T *ys, const int32_t *pos, const T *w, int64_t tokens,
                        int64_t k, int64_t h) {
  if (tokens * h == 0) return;
  KC_LAUNCH(KC_GRID(tokens * h), moe_combine_kernel)(y, ys, pos, w, tokens, k, h);
  KC_LAUNCHED();
}

template <typename T>
static void moe_combine_bwd(T *dys, T *dw, const T *ys, const int32_t *pos, const T *w, const T *dy,
                            int64_t tokens, int64_t k, int64_t h) {
  int64_t n = tokens * k;
  if (n == 0) return;
  if (h > 0) {
    KC_CHECK(cudaMemsetAsync(dys, 0, sizeof(T) * (size_t)(n * h), kc_stream()));
    KC_LAUNCH(KC_GRID(n * h), moe_combine_drows_kernel)(dys, pos, w, dy, n, k, h);
    KC_LAUNCHED();
  }
  KC_REQUIRE(n <= INT32_MAX, "moe_combine of %lld copies", (long long)n);
  KC_LAUNCH((unsigned)n, 128, 0, kc_stream(), moe_combine_dw_kernel)(dw, ys, pos, dy, k, h);
  KC_LAUNCHED();
}

extern "C" {
int64_t k_cuda_grouped_scratch(int64_t E, int64_t per, int64_t in, int64_t out, int bf16) {
  int64_t elt = bf16 ? 2 : 4;
  return 256 + moe_round256((E + 1) * 4) + moe_round256(E * per * in * elt) +
         moe_round256(E * per * out * elt);
}
KcGrouped k_cuda_grouped_parts(void *scratch, int64_t E, int64_t per, int64_t ca, int bf16) {
  return moe_parts(scratch, E, per, ca, bf16 ? 2 : 4);
}
void k_cuda_moe_sort(int32_t *pos, int32_t *counts, const int32_t *ex, int64_t n, int64_t E,
                     int64_t cap) {
  moe_sort(pos, counts, ex, n, E, cap);
}

/* The fp32 and bf16 forms of every launcher: the same template. */
#define MOE_FORMS(T, S, CT)                                                                    \
  void k_cuda_router_fwd##S(CT *w, int32_t *ex, const CT *logits, int64_t tokens, int64_t E,    \
                            int64_t k, int score, int normalize) {                              \
    router_fwd((T *)w, ex, (const T *)logits, tokens, E, k, score, normalize);                  \
  }                                                                                             \
  void k_cuda_router_bwd##S(CT *dlogits, const CT *logits, const int32_t *ex, const CT *dw,     \
                            int64_t tokens, int64_t E, int64_t k, int score, int normalize) {   \
    router_bwd((T *)dlogits, (const T *)logits, ex, (const T *)dw, tokens, E, k, score,         \
               normalize);                                                                      \
  }                                                                                             \
  void k_cuda_router_load_fwd##S(CT *load, const CT *logits, int64_t tokens, int64_t E,         \
                                 int64_t k) {                                                   \
    router_load_fwd((T *)load, (const T *)logits, tokens, E, k);                                \
  }                                                                                             \
  void k_cuda_router_load_bwd##S(CT *dlogits, const CT *logits, const CT *dload, int64_t tokens, \
                                 int64_t E) {                                                   \
    router_load_bwd((T *)dlogits, (const T *)logits, (const T *)dload, tokens, E);              \
  }                                                                                             \
  void k_cuda_router_z_loss_fwd##S(CT *loss, const CT *logits, int64_t tokens, int64_t E) {     \
    router_z_loss_fwd((T *)loss, (const T *)logits, tokens, E);                                 \
  }                                                                                             \
  void k_cuda_router_z_loss_bwd##S(CT *dlogits, const CT *logits, const CT *dy, int64_t tokens, \
                                   int64_t E) {                                                 \
    router_z_loss_bwd((T *)dlogits, (const T *)logits, (const T *)dy, tokens, E);               \
  }                                                                                             \
  void k_cuda_moe_scatter##S(CT *xs, const CT *x, const int32_t *pos, int64_t n, int64_t k,     \
                             int64_t h) {                                                       \
    moe_scatter((T *)xs, (const T *)x, pos, n, k, h);                                           \
  }                                                                                             \
  void k_cuda_moe_dispatch##S(CT *xs, int32_t *pos, int32_t *counts, const CT *x,               \
                              const int32_t *ex, int64_t tokens, int64_t k, int64_t h,          \
                              int64_t E, int64_t cap) {                                         \
    moe_sort(pos, counts, ex, tokens * k, E, cap);                                              \
    moe_scatter((T *)xs, (const T *)x, pos, tokens * k, k, h);                                  \
  }                                                                                             \
  void k_cuda_grouped_pack##S(CT *xp, const CT *x, const int32_t *counts, int32_t *offs,        \
                              int64_t E, int64_t per, int64_t cols) {                           \
    moe_pack((T *)xp, (const T *)x, counts, offs, E, per, cols);                                \
  }                                                                                             \
  void k_cuda_grouped_unpack##S(CT *y, const CT *yp, const int32_t *offs, int64_t rows,         \
                                int64_t E, int64_t per, int64_t cols) {                         \
    moe_unpack((T *)y, (const T *)yp, offs, rows, E, per, cols);                                \
  }                                                                                             \
  void k_cuda_grouped_gemm##S(KcGroupedOp op, void *c, const CT *a, const CT *b, int64_t E,     \
                              int64_t per, int64_t in, int64_t out, int transposed) {           \
    moe_gemm(op, c, (const T *)a, (const T *)b, E, per, in, out, transposed);                   \
  }                                                                                             \
  void k_cuda_moe_combine##S(CT *y, const CT *ys, const int32_t *pos, const CT *w,              \
                             int64_t tokens, int64_t k, int64_t h) {                            \
    moe_combine((T *)y, (const T *)ys, pos, (const T *)w, tokens, k, h);                        \
  }                                                                                             \
  void k_cuda_moe_combine_bwd##S(CT *dys, CT *dw, const CT *ys, const int32_t *pos,             \
                                 const CT *w, const CT *dy, int64_t tokens, int64_t k,          \
                                 int64_t h) {                                                   \
    moe_combine_bwd((T *)dys, (T *)dw, (const T *)ys, pos, (const T *)w, (const T *)dy, tokens, \
                    k, h);                                                                      \
  }                                                                                             \
  void k_cuda_grouped_linear##S(CT *y, const CT *x, const CT *w, const int32_t *counts,         \
                                int64_t rows, int64_t E, int64_t in, int64_t out,               \
                                int transposed, int64_t per, void *scratch) {                   \
    grouped_product(KC_GROUPED_Y, (T *)y, (const T *)x, (const T *)w, counts, rows, E, in, out, \
                    transposed, per, scratch);                                                  \
  }                                                                                             \
  void k_cuda_grouped_linear_dx##S(CT *dx, const CT *dy, const CT *w, const int32_t *counts,    \
                                   int64_t rows, int64_t E, int64_t in, int64_t out,            \
                                   int transposed, int64_t per, void *scratch) {                \
    grouped_product(KC_GROUPED_DX, (T *)dx, (const T *)dy, (const T *)w, counts, rows, E, in,   \
                    out, transposed, per, scratch);                                             \
  }                                                                                             \
  void k_cuda_grouped_linear_dw##S(float *dw, const CT *x, const CT *dy, const int32_t *counts, \
                                   int64_t rows, int64_t E, int64_t in, int64_t out,            \
                                   int transposed, int64_t per, void *scratch) {                \
    (void)rows; /* the rows past the kept ones add nothing */                                  \
    grouped_dw(dw, (const T *)x, (const T *)dy, counts, E, in, out, transposed, per, scratch);  \
  }

MOE_FORMS(float, , float)
MOE_FORMS(bf16, _bf16, kc_bf16)
}

/* ------------------------------------------- expert parallelism (--ep) */

/* The expert-parallel routed layer's row permutations, as
 * kernels/cpu/moe_ep.c: an expert rank receives, by all_to_all, each
 * source rank's rows packed in source order, each source's sorted by its
 * local expert; the grouped products want them by expert. The counts rc
 * ([size][local], the rows each source sends of each local expert) stay
 * in device memory, so the launches have shapes fixed by the sizes. */

/* A block per row j of the expert-major order (grid-stride). The block's
 * thread 0 first lays out the runs in shared memory: run i = e * size + s
 * (source s's rows of local expert e) starts at dst[i] in the
 * expert-major order and at src[i] in the source-major one; then for each
 * row it finds the row's run by bisection, and the block moves the row's
 * h elements (unsort = 0: out[j] = in[at]; 1: out[at] = in[j]). The rows
 * past the counted ones are zeros. The elements only move: T is a word of
 * their size. size * local is at most K_CUDA_ROUTER_MAX. */
template <typename T>
__global__ void ep_permute_kernel(T *out, const T *in, const int32_t *rc, int64_t rows,
                                  int64_t h, int64_t size, int64_t local, int unsort) {
  __shared__ int64_t dst[K_CUDA_ROUTER_MAX + 1], src[K_CUDA_ROUTER_MAX];
  __shared__ int64_t at;
  int64_t runs = size * local;
  if (threadIdx.x == 0) {
    int64_t total = 0;
    for (int64_t q = 0; q < runs; q++) src[q] = total, total += rc[q]; /* q = s * local + e */
    total = 0;
    for (int64_t i = 0; i < runs; i++) dst[i] = total, total += rc[(i % size) * local + i / size];
    dst[runs] = total;
  }
  __syncthreads();
  for (int64_t j = blockIdx.x; j < rows; j += gridDim.x) {
    if (threadIdx.x == 0) {
      at = -1;
      if (j < dst[runs]) {
        int64_t lo = 0, hi = runs; /* the last run starting at or before j with rows */
        while (hi - lo > 1) {
          int64_t mid = (lo + hi) / 2;
          if (dst[mid] <= j) lo = mid;
          else hi = mid;
        }
        at = src[(lo % size) * local + lo / size] + j - dst[lo];
      }
    }
    __syncthreads();
    int64_t a = at;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      if (a < 0) out[j * h + c] = 0;
      else if (unsort) out[a * h + c] = in[j * h + c];
      else out[j * h + c] = in[a * h + c];
    }
    __syncthreads(); /* `at` is the next row's */
  }
}

/* counts[e] = the rows of local expert e from every source. */
__global__ void ep_counts_kernel(int32_t *counts, const int32_t *rc, int64_t size, int64_t local) {
  KC_FOR_ELEMENTS(e, local) {
    int32_t c = 0;
    for (int64_t s = 0; s < size; s++) c += rc[s * local + e];
    counts[e] = c;
  }
}

/* send[r] = the rows for expert rank r (its E/size experts' counts),
 * each[r] = E/size. */
__global__ void ep_plan_kernel(int32_t *send, int32_t *each, const int32_t *counts, int64_t E,
                               int64_t size) {
  int64_t local = E / size;
  KC_FOR_ELEMENTS(r, size) {
    int32_t s = 0;
    for (int64_t e = 0; e < local; e++) s += counts[r * local + e];
    send[r] = s;
    each[r] = (int32_t)local;
  }
}

static void ep_permute(void *dst, const void *src, const int32_t *rc, int64_t rows, int64_t h,
                       int64_t size, int64_t local, int64_t elt, int unsort) {
  KC_REQUIRE(size * local <= K_CUDA_ROUTER_MAX && (elt == 2 || elt == 4),
             "ep_sort, ep_unsort: %lld ranks of %lld experts, elements of %lld bytes", (long long)size,
             (long long)local, (long long)elt);
  if (rows * h == 0) return;
  unsigned blocks = rows < 65535 ? (unsigned)rows : 65535;
  if (elt == 2) {
    KC_LAUNCH(blocks, KC_ROW_THREADS, 0, kc_stream(), ep_permute_kernel)(
        (uint16_t *)dst, (const uint16_t *)src, rc, rows, h, size, local, unsort);
  } else {
    KC_LAUNCH(blocks, KC_ROW_THREADS, 0, kc_stream(), ep_permute_kernel)(
        (uint32_t *)dst, (const uint32_t *)src, rc, rows, h, size, local, unsort);
  }
  KC_LAUNCHED();
}

extern "C" {
void k_cuda_ep_plan(int32_t *send, int32_t *each, const int32_t *counts, int64_t E, int64_t size) {
  if (size == 0) return;
  KC_LAUNCH(KC_GRID(size), ep_plan_kernel)(send, each, counts, E, size);
  KC_LAUNCHED();
}

void k_cuda_ep_sort(void *rows, int32_t *counts, const void *y, const int32_t *rc, int64_t M,
                    int64_t h, int64_t size, int64_t local, int64_t elt) {
  ep_permute(rows, y, rc, M, h, size, local, elt, 0);
  if (local == 0) return;
  KC_LAUNCH(KC_GRID(local), ep_counts_kernel)(counts, rc, size, local);
  KC_LAUNCHED();
}

void k_cuda_ep_unsort(void *y, const void *rows, const int32_t *rc, int64_t M, int64_t h,
                      int64_t size, int64_t local, int64_t elt) {
  ep_permute(y, rows, rc, M, h, size, local, elt, 1);
}
}
