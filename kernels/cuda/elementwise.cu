/* Element-wise families: biases and their gradients, GELU, SwiGLU, sums,
 * scales and casts. Each is a grid-stride loop over the elements (or, for
 * the column sums, one thread per column), templated on the storage type. */
#include "common.cuh"

#include "formulas.cuh"

template <typename T> __global__ void add_bias_kernel(T *y, const T *bias, int64_t rows, int64_t n) {
  KC_FOR_ELEMENTS(i, rows * n) y[i] = kc_to<T>(kc_f(y[i]) + kc_f(bias[i % n]));
}

/* The column sums (a bias gradient): a block takes SUMROWS_COLS columns
 * with SUMROWS_LANES threads each, lane l adding rows l, l + LANES, ... in
 * order in double, and the lanes' sums are added in lane order. One
 * thread per column would give a GPU n / 256 blocks (4 for a hidden size
 * of 1024); this gives n / 32, each warp reading 32 adjacent columns of
 * one row. The order depends on rows alone, so the bits do not change
 * from run to run; they may differ from the CPU's one sum in row order in
 * the last place of the double, which the rounding to fp32 hides. */
#define SUMROWS_COLS 32
#define SUMROWS_LANES 8 /* codegen/cuda/ops.c SUM_ROWS_LANES: the listing counts these threads */
template <typename T> __global__ void sum_rows_kernel(float *out, const T *x, int64_t rows, int64_t n) {
  __shared__ double part[SUMROWS_LANES][SUMROWS_COLS];
  int c = threadIdx.x % SUMROWS_COLS, lane = threadIdx.x / SUMROWS_COLS;
  int64_t j = blockIdx.x * (int64_t)SUMROWS_COLS + c;
  double acc = 0;
  if (j < n)
    for (int64_t r = lane; r < rows; r += SUMROWS_LANES) acc += kc_f(x[r * n + j]);
  part[lane][c] = acc;
  __syncthreads();
  if (lane == 0 && j < n) {
    double s = 0;
    for (int l = 0; l < SUMROWS_LANES; l++) s += part[l][c];
    out[j] = (float)s;
  }
}

template <typename T> __global__ void gelu_fwd_kernel(T *y, const T *x, int64_t n) {
  KC_FOR_ELEMENTS(i, n) y[i] = kc_to<T>(k_gelu(kc_f(x[i])));
}
template <typename T> __global__ void gelu_bwd_kernel(T *dx, const T *x, const T *dy, int64_t n) {
  KC_FOR_ELEMENTS(i, n) dx[i] = kc_to<T>(k_gelu_grad(kc_f(x[i]), kc_f(dy[i])));
}

template <typename T> __global__ void swiglu_fwd_kernel(T *y, const T *gate, const T *up, int64_t n) {
  KC_FOR_ELEMENTS(i, n) y[i] = kc_to<T>(k_silu(kc_f(gate[i])) * kc_f(up[i]));
}
/* d gate = dy up silu'(gate), d up = dy silu(gate): swiglu_grad's
 * formulas in ir/ops.def. */
template <typename T>
__global__ void swiglu_bwd_kernel(T *dgate, T *dup, const T *gate, const T *up, const T *dy, int64_t n) {
  KC_FOR_ELEMENTS(i, n) {
    float g = kc_f(gate[i]), u = kc_f(up[i]), d = kc_f(dy[i]);
    dgate[i] = kc_to<T>(k_silu_grad(g, d * u));
    dup[i] = kc_to<T>(d * k_silu(g));
  }
}

template <typename T> __global__ void add_kernel(T *y, const T *a, const T *b, int64_t n) {
  KC_FOR_ELEMENTS(i, n) y[i] = kc_to<T>(kc_f(a[i]) + kc_f(b[i]));
}
template <typename T> __global__ void accumulate_kernel(float *y, const T *x, int64_t n) {
  KC_FOR_ELEMENTS(i, n) y[i] += kc_f(x[i]);
}
__global__ void fill_kernel(float *y, float v, int64_t n) {
  KC_FOR_ELEMENTS(i, n) y[i] = v;
}
/* One thread: the sum keeps the order of the launches, as a host loop would. */
__global__ void add_scalar_kernel(double *acc, const float *x) { acc[0] += (double)x[0]; }
__global__ void scale_kernel(float *y, const float *x, float alpha, int64_t n) {
  KC_FOR_ELEMENTS(i, n) y[i] = alpha * x[i];
}
template <typename D, typename S> __global__ void cast_kernel(D *y, const S *x, int64_t n) {
  KC_FOR_ELEMENTS(i, n) y[i] = kc_to<D>(kc_f(x[i]));
}

extern "C" {
void k_cuda_add_bias(float *y, const float *bias, int64_t rows, int64_t n) {
  if (rows * n == 0) return;
  KC_LAUNCH(KC_GRID(rows * n), add_bias_kernel)(y, bias, rows, n);
  KC_LAUNCHED();
}
void k_cuda_add_bias_bf16(kc_bf16 *y, const kc_bf16 *bias, int64_t rows, int64_t n) {
  if (rows * n == 0) return;
  KC_LAUNCH(KC_GRID(rows * n), add_bias_kernel)(B16(y), CB16(bias), rows, n);
  KC_LAUNCHED();
}
/* Blocks of the column sums: SUMROWS_COLS columns each. */
static unsigned sum_rows_grid(int64_t n) {
  KC_REQUIRE((n + SUMROWS_COLS - 1) / SUMROWS_COLS <= INT32_MAX, "column sums of %lld columns",
             (long long)n);
  return (unsigned)((n + SUMROWS_COLS - 1) / SUMROWS_COLS);
}
void k_cuda_sum_rows(float *out, const float *x, int64_t rows, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(sum_rows_grid(n), SUMROWS_COLS * SUMROWS_LANES, 0, kc_stream(), sum_rows_kernel)(
      out, x, rows, n);
  KC_LAUNCHED();
}
void k_cuda_sum_rows_bf16(float *out, const kc_bf16 *x, int64_t rows, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(sum_rows_grid(n), SUMROWS_COLS * SUMROWS_LANES, 0, kc_stream(), sum_rows_kernel)(
      out, CB16(x), rows, n);
  KC_LAUNCHED();
}
void k_cuda_gelu_fwd(float *y, const float *x, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), gelu_fwd_kernel)(y, x, n);
  KC_LAUNCHED();
}
void k_cuda_gelu_bwd(float *dx, const float *x, const float *dy, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), gelu_bwd_kernel)(dx, x, dy, n);
  KC_LAUNCHED();
}
void k_cuda_gelu_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), gelu_fwd_kernel)(B16(y), CB16(x), n);
  KC_LAUNCHED();
}
void k_cuda_gelu_bwd_bf16(kc_bf16 *dx, const kc_bf16 *x, const kc_bf16 *dy, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), gelu_bwd_kernel)(B16(dx), CB16(x), CB16(dy), n);
  KC_LAUNCHED();
}
void k_cuda_swiglu_fwd(float *y, const float *gate, const float *up, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), swiglu_fwd_kernel)(y, gate, up, n);
  KC_LAUNCHED();
}
void k_cuda_swiglu_bwd(float *dgate, float *dup, const float *gate, const float *up,
                       const float *dy, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), swiglu_bwd_kernel)(dgate, dup, gate, up, dy, n);
  KC_LAUNCHED();
}
void k_cuda_swiglu_fwd_bf16(kc_bf16 *y, const kc_bf16 *gate, const kc_bf16 *up, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), swiglu_fwd_kernel)(B16(y), CB16(gate), CB16(up), n);
  KC_LAUNCHED();
}
void k_cuda_swiglu_bwd_bf16(kc_bf16 *dgate, kc_bf16 *dup, const kc_bf16 *gate,
                            const kc_bf16 *up, const kc_bf16 *dy, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), swiglu_bwd_kernel)(B16(dgate), B16(dup), CB16(gate), CB16(up), CB16(dy), n);
  KC_LAUNCHED();
}
void k_cuda_add(float *y, const float *a, const float *b, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), add_kernel)(y, a, b, n);
  KC_LAUNCHED();
}
void k_cuda_add_bf16(kc_bf16 *y, const kc_bf16 *a, const kc_bf16 *b, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), add_kernel)(B16(y), CB16(a), CB16(b), n);
  KC_LAUNCHED();
}
void k_cuda_accumulate(float *y, const float *x, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), accumulate_kernel)(y, x, n);
  KC_LAUNCHED();
}
void k_cuda_accumulate_bf16(float *y, const kc_bf16 *x, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), accumulate_kernel)(y, CB16(x), n);
  KC_LAUNCHED();
}
void k_cuda_fill(float *y, float v, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), fill_kernel)(y, v, n);
  KC_LAUNCHED();
}
void k_cuda_add_scalar(double *acc, const float *x) {
  KC_LAUNCH(1, 1, 0, kc_stream(), add_scalar_kernel)(acc, x);
  KC_LAUNCHED();
}
void k_cuda_scale(float *y, const float *x, float alpha, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), scale_kernel)(y, x, alpha, n);
  KC_LAUNCHED();
}
void k_cuda_cast_f32_bf16(kc_bf16 *y, const float *x, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), cast_kernel)(B16(y), x, n);
  KC_LAUNCHED();
}
void k_cuda_cast_bf16_f32(float *y, const kc_bf16 *x, int64_t n) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), cast_kernel)(y, CB16(x), n);
  KC_LAUNCHED();
}
}
