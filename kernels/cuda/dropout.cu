/* Inverted dropout with the counter-based mask of kernels/cpu/dropout.c:
 * element i of site `site` is kept when splitmix64's word for (seed, site,
 * i) is at least rate * 2^64. The key and the threshold are computed on the
 * host exactly as the CPU does, and each element's word on the device with
 * the same 64-bit integer arithmetic, so the masks agree bit for bit. */
#include "common.cuh"

#define GOLDEN 0x9e3779b97f4a7c15ull

/* The splitmix64 finaliser, on either side. */
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* rate in (0, 1): scale is 1 / (1 - rate) rounded to fp32 as on the CPU. */
template <typename T>
__global__ void dropout_kernel(T *y, const T *x, int64_t n, uint64_t key, uint64_t threshold,
                               float scale) {
  KC_FOR_ELEMENTS(i, n) {
    uint64_t word = mix64(key + (uint64_t)(i + 1) * GOLDEN);
    y[i] = kc_to<T>(word >= threshold ? kc_f(x[i]) * scale : 0.0f);
  }
}

/* Rate 0 is a copy, rate >= 1 zeros, as on the CPU. */
template <typename T>
static void dropout(T *y, const T *x, int64_t n, float rate, uint64_t seed, uint64_t site) {
  if (n <= 0) return;
  size_t bytes = (size_t)n * sizeof(T);
  if (rate <= 0) {
    if (y != x) KC_CHECK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, kc_stream()));
    return;
  }
  if (rate >= 1) {
    KC_CHECK(cudaMemsetAsync(y, 0, bytes, kc_stream()));
    return;
  }
  uint64_t key = mix64(seed ^ mix64(site + GOLDEN));
  uint64_t threshold = (uint64_t)((double)rate * 18446744073709551616.0);
  float scale = (float)(1.0 / (1.0 - (double)rate));
  KC_LAUNCH(KC_GRID(n), dropout_kernel)(y, x, n, key, threshold, scale);
  KC_LAUNCHED();
}

/* The forms of a CUDA graph: the seed and the training switch come from
 * device memory (KcStep), read as the kernel runs; the key is formed there
 * from the host's word for the site, as dropout() forms it. rate >= 1
 * (all) drops everything. */
template <typename T>
__global__ void dropout_step_kernel(T *y, const T *x, int64_t n, const KcStep *step, uint64_t mix,
                                    uint64_t site_word, uint64_t threshold, float scale, int all) {
  const int on = step->training;
  const uint64_t key = mix64((step->seed ^ mix) ^ site_word);
  KC_FOR_ELEMENTS(i, n) {
    if (!on) {
      y[i] = x[i];
    } else if (all) {
      y[i] = kc_to<T>(0.0f);
    } else {
      uint64_t word = mix64(key + (uint64_t)(i + 1) * GOLDEN);
      y[i] = kc_to<T>(word >= threshold ? kc_f(x[i]) * scale : 0.0f);
    }
  }
}

/* Rate 0 is a copy whatever the step says, as in dropout(). */
template <typename T>
static void dropout_step(T *y, const T *x, int64_t n, float rate, const KcStep *step, uint64_t mix,
                         uint64_t site) {
  if (n <= 0) return;
  if (rate <= 0) {
    if (y != x)
      KC_CHECK(cudaMemcpyAsync(y, x, (size_t)n * sizeof(T), cudaMemcpyDeviceToDevice, kc_stream()));
    return;
  }
  int all = rate >= 1;
  uint64_t threshold = all ? 0 : (uint64_t)((double)rate * 18446744073709551616.0);
  float scale = all ? 0.0f : (float)(1.0 / (1.0 - (double)rate));
  KC_LAUNCH(KC_GRID(n), dropout_step_kernel)(y, x, n, step, mix, mix64(site + GOLDEN), threshold,
                                            scale, all);
  KC_LAUNCHED();
}

__global__ void step_set_kernel(KcStep *step, uint64_t seed, int32_t training) {
  step->seed = seed;
  step->training = training;
  step->unused = 0;
}

extern "C" {
void k_cuda_step_set(KcStep *step, uint64_t seed, int training) {
  KC_LAUNCH(1, 1, 0, kc_stream(), step_set_kernel)(step, seed, (int32_t)training);
  KC_LAUNCHED();
}
void k_cuda_dropout_step_fwd(float *y, const float *x, int64_t n, float rate, const KcStep *step,
                             uint64_t mix, uint64_t site) {
  dropout_step(y, x, n, rate, step, mix, site);
}
void k_cuda_dropout_step_bwd(float *dx, const float *dy, int64_t n, float rate,
                             const KcStep *step, uint64_t mix, uint64_t site) {
  dropout_step(dx, dy, n, rate, step, mix, site);
}
void k_cuda_dropout_step_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t n, float rate,
                                  const KcStep *step, uint64_t mix, uint64_t site) {
  dropout_step(B16(y), CB16(x), n, rate, step, mix, site);
}
void k_cuda_dropout_step_bwd_bf16(kc_bf16 *dx, const kc_bf16 *dy, int64_t n, float rate,
                                  const KcStep *step, uint64_t mix, uint64_t site) {
  dropout_step(B16(dx), CB16(dy), n, rate, step, mix, site);
}

void k_cuda_dropout_fwd(float *y, const float *x, int64_t n, float rate, uint64_t seed,
                        uint64_t site) {
  dropout(y, x, n, rate, seed, site);
}
/* The mask is linear in the input, so its adjoint is the same mask. */
void k_cuda_dropout_bwd(float *dx, const float *dy, int64_t n, float rate, uint64_t seed,
                        uint64_t site) {
  dropout(dx, dy, n, rate, seed, site);
}
void k_cuda_dropout_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t n, float rate, uint64_t seed,
                             uint64_t site) {
  dropout(B16(y), CB16(x), n, rate, seed, site);
}
void k_cuda_dropout_bwd_bf16(kc_bf16 *dx, const kc_bf16 *dy, int64_t n, float rate,
                             uint64_t seed, uint64_t site) {
  dropout(B16(dx), CB16(dy), n, rate, seed, site);
}
}
