/* Data movement: heads in and out of their own dimension, transposes of two
 * dimensions and strided block copies, one thread per element of the
 * output (so every output element is written exactly once). */
#include "common.cuh"

/* y [b, H, s, d] from x [b, s, H, d]: output element i is (bi, h, t, c). */
template <typename T>
__global__ void split_heads_kernel(T *y, const T *x, int64_t b, int64_t s, int64_t H, int64_t d) {
  KC_FOR_ELEMENTS(i, b * H * s * d) {
    int64_t c = i % d, t = i / d % s, h = i / d / s % H, bi = i / d / s / H;
    y[i] = x[((bi * s + t) * H + h) * d + c];
  }
}

/* y [b, s, H, d] from x [b, H, s, d]: output element i is (bi, t, h, c). */
template <typename T>
__global__ void merge_heads_kernel(T *y, const T *x, int64_t b, int64_t s, int64_t H, int64_t d) {
  KC_FOR_ELEMENTS(i, b * s * H * d) {
    int64_t c = i % d, h = i / d % H, t = i / d / H % s, bi = i / d / H / s;
    y[i] = x[((bi * H + h) * s + t) * d + c];
  }
}

/* y [outer, n1, mid, n0, inner] from x [outer, n0, mid, n1, inner]. */
template <typename T>
__global__ void transpose_kernel(T *y, const T *x, int64_t outer, int64_t n0, int64_t mid,
                                 int64_t n1, int64_t inner) {
  KC_FOR_ELEMENTS(i, outer * n1 * mid * n0 * inner) {
    int64_t e = i % inner, r = i / inner, i0 = r % n0;
    r /= n0;
    int64_t m = r % mid;
    r /= mid;
    int64_t i1 = r % n1, o = r / n1;
    y[i] = x[(((o * n0 + i0) * mid + m) * n1 + i1) * inner + e];
  }
}

template <typename T>
__global__ void copy2d_kernel(T *dst, int64_t ldd, const T *src, int64_t lds, int64_t rows,
                              int64_t cols) {
  KC_FOR_ELEMENTS(i, rows * cols) {
    int64_t r = i / cols, c = i % cols;
    dst[r * ldd + c] = src[r * lds + c];
  }
}

template <typename T> static void split_heads(T *y, const T *x, int64_t b, int64_t s, int64_t H, int64_t d) {
  if (b * s * H * d == 0) return;
  KC_LAUNCH(KC_GRID(b * s * H * d), split_heads_kernel)(y, x, b, s, H, d);
  KC_LAUNCHED();
}
template <typename T> static void merge_heads(T *y, const T *x, int64_t b, int64_t s, int64_t H, int64_t d) {
  if (b * s * H * d == 0) return;
  KC_LAUNCH(KC_GRID(b * s * H * d), merge_heads_kernel)(y, x, b, s, H, d);
  KC_LAUNCHED();
}
template <typename T>
static void transpose(T *y, const T *x, int64_t outer, int64_t n0, int64_t mid, int64_t n1, int64_t inner) {
  int64_t n = outer * n0 * mid * n1 * inner;
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), transpose_kernel)(y, x, outer, n0, mid, n1, inner);
  KC_LAUNCHED();
}
template <typename T>
static void copy2d(T *dst, int64_t ldd, const T *src, int64_t lds, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  KC_LAUNCH(KC_GRID(rows * cols), copy2d_kernel)(dst, ldd, src, lds, rows, cols);
  KC_LAUNCHED();
}

extern "C" {
void k_cuda_split_heads(float *y, const float *x, int64_t b, int64_t s, int64_t H, int64_t d) {
  split_heads(y, x, b, s, H, d);
}
void k_cuda_merge_heads(float *y, const float *x, int64_t b, int64_t s, int64_t H, int64_t d) {
  merge_heads(y, x, b, s, H, d);
}
void k_cuda_transpose(float *y, const float *x, int64_t outer, int64_t n0, int64_t mid,
                      int64_t n1, int64_t inner) {
  transpose(y, x, outer, n0, mid, n1, inner);
}
void k_cuda_copy2d(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                   int64_t cols) {
  copy2d(dst, ldd, src, lds, rows, cols);
}
void k_cuda_split_heads_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t b, int64_t s, int64_t H,
                             int64_t d) {
  split_heads(B16(y), CB16(x), b, s, H, d);
}
void k_cuda_merge_heads_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t b, int64_t s, int64_t H,
                             int64_t d) {
  merge_heads(B16(y), CB16(x), b, s, H, d);
}
void k_cuda_transpose_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t outer, int64_t n0, int64_t mid,
                           int64_t n1, int64_t inner) {
  transpose(B16(y), CB16(x), outer, n0, mid, n1, inner);
}
void k_cuda_copy2d_bf16(kc_bf16 *dst, int64_t ldd, const kc_bf16 *src, int64_t lds, int64_t rows,
                        int64_t cols) {
  copy2d(B16(dst), ldd, CB16(src), lds, rows, cols);
}
}
