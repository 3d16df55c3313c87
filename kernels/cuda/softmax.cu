/* Softmax over the last dimension (one block per row, the forward's row
 * read once where it fits, the denominator in double) and the causal mask
 * of score matrices. */
#include "common.cuh"

/* The row read once into registers where it fits (KcRow), 16 bytes at a
 * time where the sizes and pointers allow: its max, the sum of exp(x -
 * max) in double, then y, each from the registers. */
template <typename T, int V> __global__ void softmax_fwd_kernel(T *y, const T *x, int64_t n) {
  __shared__ float fbuf[32];
  __shared__ double dbuf[32];
  int64_t off = blockIdx.x * n, nc = n / V;
  KcRow<T, V> row = {x + off, NULL, NULL};
  float v[KC_ROW_REGS][V], m = -INFINITY;
  KC_EACH_ROW_CHUNK(row, v, nc, true, {
    for (int i = 0; i < V; i++) m = fmaxf(m, o_[i]);
  });
  m = kc_block_max(m, fbuf);
  double sum = 0;
  KC_EACH_ROW_CHUNK(row, v, nc, false, {
    for (int i = 0; i < V; i++) sum += expf(o_[i] - m);
  });
  float inv = (float)(1.0 / kc_block_sum(sum, dbuf));
  KC_EACH_ROW_CHUNK(row, v, nc, false, {
    float out[V];
    for (int i = 0; i < V; i++) out[i] = expf(o_[i] - m) * inv;
    kc_stv<T, V>(y + off, c_, out);
  });
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
  const int V = 16 / sizeof(T);
  if (n % V == 0 && kc_aligned16(y) && kc_aligned16(x))
    KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), softmax_fwd_kernel<T, V>)(y, x, n);
  else
    KC_LAUNCH((unsigned)rows, KC_ROW_THREADS, 0, kc_stream(), softmax_fwd_kernel<T, 1>)(y, x, n);
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
