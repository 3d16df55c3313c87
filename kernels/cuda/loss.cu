/* Cross entropy of logits against integer targets, averaged over rows,
 * with the softmax of the logits fused in: one block per row computes the
 * row's max and sum(exp(x - max)) (in double) in one pass over the row
 * (kc_row_max_sumexp) and, in the same kernel, either the row's loss (the
 * forward: one pass over the logits) or its gradient (the backward: a
 * second pass, which writes it); the probabilities are never stored. The forward's per-row losses are then added in row order by one
 * block, so the loss has the same bits on every run. */
#include "common.cuh"

/* row[r] = log(sum) + max - x[target]; NaN for a target out of range. */
template <typename T>
__global__ void ce_rows_kernel(double *row, const T *logits, const int32_t *targets, int64_t V,
                               int64_t valid) {
  __shared__ float fbuf[32];
  __shared__ double dbuf[32];
  int64_t r = blockIdx.x;
  const T *x = logits + r * V;
  float m;
  double sum;
  kc_row_max_sumexp(x, valid, fbuf, dbuf, &m, &sum);
  if (threadIdx.x == 0) {
    int32_t t = targets[r];
    KC_ASSERT(t >= 0 && t < valid);
    row[r] = t >= 0 && t < valid ? log(sum) + (double)m - (double)kc_f(x[t]) : (double)NAN;
  }
}

/* loss[0] = the mean of x[0, rows), one block, in an order fixed by rows. */
__global__ void mean_kernel(float *loss, const double *x, int64_t rows) {
  __shared__ double buf[32];
  double s = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    s += x[r];
  s = kc_block_sum(s, buf);
  if (threadIdx.x == 0) loss[0] = rows > 0 ? (float)(s / (double)rows) : 0.0f;
}

/* dx = dloss / rows * (softmax(x) - onehot(target)) over the first n
 * columns (whose first is the whole vocabulary's column lo), 0 for the
 * padding up to V. With rowmax and sumexp given (the vocabulary-parallel
 * form), they replace the row's own statistics. */
template <typename T>
__global__ void ce_bwd_kernel(T *dlogits, const T *logits, const int32_t *targets,
                              const float *dloss, const float *rowmax, const float *sumexp,
                              int64_t rows, int64_t V, int64_t lo, int64_t n, int64_t valid) {
  __shared__ float fbuf[32];
  __shared__ double dbuf[32];
  int64_t r = blockIdx.x;
  const T *x = logits + r * V;
  T *dx = dlogits + r * V;
  float m;
  double sum;
  if (rowmax) {
    m = rowmax[r];
    sum = sumexp[r];
  } else {
    kc_row_max_sumexp(x, n, fbuf, dbuf, &m, &sum);
  }
  double dl = (double)dloss[0] / (double)rows;
  float scale = (float)(dl / sum);
  int64_t t = (int64_t)targets[r] - lo;
  if (!rowmax) KC_ASSERT(t >= 0 && t < valid);
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float g = j < n ? scale * expf(kc_f(x[j]) - m) : 0.0f;
    if (j == t && j < n) g -= (float)dl; /* a target in the padding is out of range */
    dx[j] = kc_to<T>(g);
  }
}

template <typename T>
__global__ void vp_max_kernel(float *rowmax, const T *logits, int64_t V, int64_t n) {
  __shared__ float buf[32];
  const T *x = logits + blockIdx.x * V;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    mx = fmaxf(mx, kc_f(x[j]));
  mx = kc_block_max(mx, buf);
  if (threadIdx.x == 0) rowmax[blockIdx.x] = mx;
}

template <typename T>
__global__ void vp_sumexp_kernel(float *sumexp, const T *logits, const float *rowmax, int64_t V,
                                 int64_t n) {
  __shared__ double buf[32];
  const T *x = logits + blockIdx.x * V;
  float m = rowmax[blockIdx.x];
  double s = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    s += expf(kc_f(x[j]) - m);
  s = kc_block_sum(s, buf);
  if (threadIdx.x == 0) sumexp[blockIdx.x] = (float)s;
}

template <typename T>
__global__ void vp_target_kernel(float *tgt, const T *logits, const int32_t *targets,
                                 int64_t rows, int64_t V, int64_t lo, int64_t n, int64_t valid) {
  KC_FOR_ELEMENTS(r, rows) {
    int32_t g = targets[r];
    KC_ASSERT(g >= 0 && g < valid);
    int64_t t = (int64_t)g - lo;
    tgt[r] = g < 0 || g >= valid ? NAN : t >= 0 && t < n ? kc_f(logits[r * V + t]) : 0.0f;
  }
}

/* loss[0] = the mean of log(sumexp) + rowmax - tgt over rows, one block,
 * like mean_kernel (the terms are cheap enough to form here, so the
 * vocabulary-parallel loss needs no scratch). */
__global__ void vp_loss_kernel(float *loss, const float *rowmax, const float *sumexp,
                               const float *tgt, int64_t rows) {
  __shared__ double buf[32];
  double s = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    s += log((double)sumexp[r]) + (double)rowmax[r] - (double)tgt[r];
  s = kc_block_sum(s, buf);
  if (threadIdx.x == 0) loss[0] = rows > 0 ? (float)(s / (double)rows) : 0.0f;
}

template <typename T>
static void ce_fwd(float *loss, const T *logits, const int32_t *targets, int64_t rows, int64_t V,
                   int64_t valid, void *scratch) {
  KC_REQUIRE(rows <= INT32_MAX && valid <= V, "cross entropy of %lld rows, %lld of %lld columns",
             (long long)rows, (long long)valid, (long long)V);
  if (rows > 0) {
    KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), ce_rows_kernel)((double *)scratch, logits,
                                                                       targets, V, valid);
    KC_LAUNCHED();
  }
  KC_LAUNCH(1, 1024, 0, kc_stream(), mean_kernel)(loss, (const double *)scratch, rows);
  KC_LAUNCHED();
}

template <typename T>
static void ce_bwd(T *dlogits, const T *logits, const int32_t *targets, const float *dloss,
                   const float *rowmax, const float *sumexp, int64_t rows, int64_t V, int64_t lo,
                   int64_t n, int64_t valid) {
  if (rows == 0 || V == 0) return;
  KC_REQUIRE(rows <= INT32_MAX && n <= V, "cross entropy of %lld rows, %lld of %lld columns",
             (long long)rows, (long long)n, (long long)V);
  KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), ce_bwd_kernel)(
      dlogits, logits, targets, dloss, rowmax, sumexp, rows, V, lo, n, valid);
  KC_LAUNCHED();
}

template <typename T>
static void vp_max(float *rowmax, const T *logits, int64_t rows, int64_t V, int64_t n) {
  if (rows == 0) return;
  KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), vp_max_kernel)(rowmax, logits, V, n);
  KC_LAUNCHED();
}
template <typename T>
static void vp_sumexp(float *sumexp, const T *logits, const float *rowmax, int64_t rows,
                      int64_t V, int64_t n) {
  if (rows == 0) return;
  KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), vp_sumexp_kernel)(sumexp, logits,
                                                                              rowmax, V, n);
  KC_LAUNCHED();
}
template <typename T>
static void vp_target(float *tgt, const T *logits, const int32_t *targets, int64_t rows,
                      int64_t V, int64_t lo, int64_t n, int64_t valid) {
  if (rows == 0) return;
  KC_LAUNCH(KC_GRID(rows), vp_target_kernel)(tgt, logits, targets, rows, V, lo, n, valid);
  KC_LAUNCHED();
}

extern "C" {
int64_t k_cuda_ce_scratch(int64_t rows) { return (rows > 0 ? rows : 1) * (int64_t)sizeof(double); }
void k_cuda_cross_entropy_fwd(float *loss, const float *logits, const int32_t *targets,
                              int64_t rows, int64_t V, int64_t valid, void *scratch) {
  ce_fwd(loss, logits, targets, rows, V, valid, scratch);
}
void k_cuda_cross_entropy_bwd(float *dlogits, const float *logits, const int32_t *targets,
                              const float *dloss, int64_t rows, int64_t V, int64_t valid) {
  ce_bwd(dlogits, logits, targets, dloss, (const float *)NULL, (const float *)NULL, rows, V, 0,
         valid, valid);
}
void k_cuda_cross_entropy_fwd_bf16(float *loss, const kc_bf16 *logits, const int32_t *targets,
                                   int64_t rows, int64_t V, int64_t valid, void *scratch) {
  ce_fwd(loss, CB16(logits), targets, rows, V, valid, scratch);
}
void k_cuda_cross_entropy_bwd_bf16(kc_bf16 *dlogits, const kc_bf16 *logits,
                                   const int32_t *targets, const float *dloss, int64_t rows,
                                   int64_t V, int64_t valid) {
  ce_bwd(B16(dlogits), CB16(logits), targets, dloss, (const float *)NULL, (const float *)NULL,
         rows, V, 0, valid, valid);
}
void k_cuda_ce_vp_max(float *rowmax, const float *logits, int64_t rows, int64_t V, int64_t n) {
  vp_max(rowmax, logits, rows, V, n);
}
void k_cuda_ce_vp_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t rows,
                         int64_t V, int64_t n) {
  vp_sumexp(sumexp, logits, rowmax, rows, V, n);
}
void k_cuda_ce_vp_target(float *tgt, const float *logits, const int32_t *targets, int64_t rows,
                         int64_t V, int64_t lo, int64_t n, int64_t valid) {
  vp_target(tgt, logits, targets, rows, V, lo, n, valid);
}
void k_cuda_ce_vp_loss(float *loss, const float *rowmax, const float *sumexp, const float *tgt,
                       int64_t rows) {
  KC_LAUNCH(1, 1024, 0, kc_stream(), vp_loss_kernel)(loss, rowmax, sumexp, tgt, rows);
  KC_LAUNCHED();
}
void k_cuda_ce_vp_bwd(float *dlogits, const float *logits, const int32_t *targets,
                      const float *dloss, const float *rowmax, const float *sumexp, int64_t rows,
                      int64_t V, int64_t lo, int64_t n) {
  ce_bwd(dlogits, logits, targets, dloss, rowmax, sumexp, rows, V, lo, n, n);
}
void k_cuda_ce_vp_max_bf16(float *rowmax, const kc_bf16 *logits, int64_t rows, int64_t V,
                           int64_t n) {
  vp_max(rowmax, CB16(logits), rows, V, n);
}
void k_cuda_ce_vp_sumexp_bf16(float *sumexp, const kc_bf16 *logits, const float *rowmax,
                              int64_t rows, int64_t V, int64_t n) {
  vp_sumexp(sumexp, CB16(logits), rowmax, rows, V, n);
}
void k_cuda_ce_vp_target_bf16(float *tgt, const kc_bf16 *logits, const int32_t *targets,
                              int64_t rows, int64_t V, int64_t lo, int64_t n, int64_t valid) {
  vp_target(tgt, CB16(logits), targets, rows, V, lo, n, valid);
}
void k_cuda_ce_vp_bwd_bf16(kc_bf16 *dlogits, const kc_bf16 *logits, const int32_t *targets,
                           const float *dloss, const float *rowmax, const float *sumexp,
                           int64_t rows, int64_t V, int64_t lo, int64_t n) {
  ce_bwd(B16(dlogits), CB16(logits), targets, dloss, rowmax, sumexp, rows, V, lo, n, n);
}
}
