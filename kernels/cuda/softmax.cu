/* Softmax over the last dimension (one block per row, the denominator in
 * double) and the causal mask of score matrices. */
#include "common.cuh"

template <typename T> __global__ void softmax_fwd_kernel(T *y, const T *x, int64_t n) {
  __shared__ float fbuf[32];
  __shared__ double dbuf[32];
  const T *xr = x + blockIdx.x * n;
  T *yr = y + blockIdx.x * n;
  float m;
  double sum;
  kc_row_max_sumexp(xr, n, fbuf, dbuf, &m, &sum);
  float inv = (float)(1.0 / sum);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    yr[j] = kc_to<T>(expf(kc_f(xr[j]) - m) * inv);
}

/* dx = y (dy - sum(y dy)). */
template <typename T> __global__ void softmax_bwd_kernel(T *dx, const T *y, const T *dy, int64_t n) {
  __shared__ double buf[32];
  int64_t o = blockIdx.x * n;
  double s = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    s += (double)kc_f(y[o + j]) * kc_f(dy[o + j]);
  float dot = (float)kc_block_sum(s, buf);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dx[o + j] = kc_to<T>(kc_f(y[o + j]) * (kc_f(dy[o + j]) - dot));
}

template <typename T>
__global__ void causal_mask_kernel(T *y, const T *x, int64_t batch, int64_t s, float fill) {
  KC_FOR_ELEMENTS(e, batch * s * s) {
    int64_t j = e % s, i = e / s % s;
    y[e] = j <= i ? x[e] : kc_to<T>(fill);
  }
}

template <typename T> static void causal_mask(T *y, const T *x, int64_t batch, int64_t s, float fill) {
  if (batch * s == 0) return;
  KC_LAUNCH(KC_GRID(batch * s * s), causal_mask_kernel)(y, x, batch, s, fill);
  KC_LAUNCHED();
}

template <typename T> static void softmax_fwd(T *y, const T *x, int64_t rows, int64_t n) {
  if (rows == 0 || n == 0) return;
  KC_REQUIRE(rows <= INT32_MAX, "softmax of %lld rows", (long long)rows);
  KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), softmax_fwd_kernel)(y, x, n);
  KC_LAUNCHED();
}
template <typename T> static void softmax_bwd(T *dx, const T *y, const T *dy, int64_t rows, int64_t n) {
  if (rows == 0 || n == 0) return;
  KC_REQUIRE(rows <= INT32_MAX, "softmax of %lld rows", (long long)rows);
  KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), softmax_bwd_kernel)(dx, y, dy, n);
  KC_LAUNCHED();
}

extern "C" {
void k_cuda_softmax_fwd(float *y, const float *x, int64_t rows, int64_t n) { softmax_fwd(y, x, rows, n); }
void k_cuda_softmax_bwd(float *dx, const float *y, const float *dy, int64_t rows, int64_t n) {
  softmax_bwd(dx, y, dy, rows, n);
}
void k_cuda_softmax_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t rows, int64_t n) {
  softmax_fwd(B16(y), CB16(x), rows, n);
}
void k_cuda_softmax_bwd_bf16(kc_bf16 *dx, const kc_bf16 *y, const kc_bf16 *dy, int64_t rows,
                             int64_t n) {
  softmax_bwd(B16(dx), CB16(y), CB16(dy), rows, n);
}
void k_cuda_causal_mask(float *y, const float *x, int64_t batch, int64_t s, float fill) {
  causal_mask(y, x, batch, s, fill);
}
void k_cuda_causal_mask_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t batch, int64_t s, float fill) {
  causal_mask(B16(y), CB16(x), batch, s, fill);
}
}
