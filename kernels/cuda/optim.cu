/* The optimizer over all parameters in one launch, and the sums of squares
 * of the gradient norm. */
#include "common.cuh"

/* Threads per block of the sums of squares (one block per run). */
#define SUMSQ_THREADS 512

/* torch.optim.AdamW's arithmetic, as the scalar form of kernels/cpu/optim.c.
 * Spelled with the _rn intrinsics so that nvcc does not contract the
 * multiplies and adds into FMAs: every rounding is the plain IEEE one, as
 * in C without contraction. */
__device__ __forceinline__ void adamw_one(float *w, float g, float *m, float *v, float decay,
                                          const KcAdamW h) {
  float gi = __fmul_rn(g, h.grad_scale);
  float wi = __fmul_rn(*w, decay);
  float mi = __fadd_rn(*m, __fmul_rn(__fsub_rn(gi, *m), 1.0f - h.beta1)); /* torch's lerp */
  float vi = __fadd_rn(__fmul_rn(*v, h.beta2), __fmul_rn(__fmul_rn(1.0f - h.beta2, gi), gi));
  float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), h.bc2_sqrt), h.eps);
  *w = __fsub_rn(wi, __fdiv_rn(__fmul_rn(h.step_size, mi), den));
  *m = mi;
  *v = vi;
}

__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, int64_t n, KcAdamW h) {
  KC_FOR_ELEMENTS(i, n) adamw_one(w + i, g[i], m + i, v + i, h.decay, h);
}

/* The run holding position e of the concatenation: the last with at <= e. */
__device__ __forceinline__ const KcRun *find_run(const KcRun *runs, int64_t nr, int64_t e) {
  int64_t lo = 0, hi = nr - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (runs[mid].at <= e) lo = mid;
    else hi = mid - 1;
  }
  return &runs[lo];
}

__global__ void adamw_runs_kernel(float *w, const float *g, float *m, float *v, bf16 *w_bf16,
                                  const KcRun *runs, int64_t nr, int64_t total, KcAdamW h) {
  KC_FOR_ELEMENTS(e, total) {
    const KcRun *r = find_run(runs, nr, e);
    int64_t k = e - r->at;
    KC_ASSERT(k >= 0 && k < r->n);
    int64_t x = r->w + k, st = r->s + k;
    adamw_one(w + x, g[x], m + st, v + st, r->decay ? h.decay : 1.0f, h);
    if (w_bf16) w_bf16[x] = __float2bfloat16(w[x]);
  }
}

__global__ void sgd_runs_kernel(float *w, const float *g, const KcRun *runs, int64_t nr,
                                int64_t total, float decay, float lr, float grad_scale) {
  KC_FOR_ELEMENTS(e, total) {
    const KcRun *r = find_run(runs, nr, e);
    int64_t x = r->w + (e - r->at);
    float d = r->decay ? decay : 1.0f;
    w[x] = __fsub_rn(__fmul_rn(w[x], d), __fmul_rn(__fmul_rn(lr, g[x]), grad_scale));
  }
}

__global__ void sum_squares_kernel(double *out, const float *x, const KcRun *runs) {
  __shared__ double buf[32];
  const KcRun *r = &runs[blockIdx.x];
  const float *xr = x + r->w;
  double s = 0;
  for (int64_t i = threadIdx.x; i < r->n; i += blockDim.x)
    s += (double)xr[i] * (double)xr[i];
  s = kc_block_sum(s, buf);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

/* out[r] = the sum of x[g.w], ..., x[g.w + g.n - 1] for g = groups[r], in
 * that order from 0, one thread per group: the pieces of each run of the
 * sums of squares, added in an order fixed by the run's length. */
__global__ void sum_groups_kernel(double *out, const double *x, const KcRun *groups, int64_t nr) {
  KC_FOR_ELEMENTS(r, nr) {
    double s = 0;
    for (int64_t k = 0; k < groups[r].n; k++) s += x[groups[r].w + k];
    out[r] = s;
  }
}

extern "C" {
void k_cuda_adamw(float *w, const float *g, float *m, float *v, int64_t n, const KcAdamW *h) {
  if (n == 0) return;
  KC_LAUNCH(KC_GRID(n), adamw_kernel)(w, g, m, v, n, *h);
  KC_LAUNCHED();
}
void k_cuda_adamw_runs(float *w, const float *g, float *m, float *v, kc_bf16 *w_bf16,
                       const KcRun *runs, int64_t nr, int64_t total, const KcAdamW *h) {
  if (nr == 0 || total == 0) return;
  KC_LAUNCH(KC_GRID(total), adamw_runs_kernel)(w, g, m, v, B16(w_bf16), runs, nr, total, *h);
  KC_LAUNCHED();
}
void k_cuda_sgd_runs(float *w, const float *g, const KcRun *runs, int64_t nr, int64_t total,
                     float decay, float lr, float grad_scale) {
  if (nr == 0 || total == 0) return;
  KC_LAUNCH(KC_GRID(total), sgd_runs_kernel)(w, g, runs, nr, total, decay, lr, grad_scale);
  KC_LAUNCHED();
}
void k_cuda_sum_squares_runs(double *out, const float *x, const KcRun *runs, int64_t nr) {
  if (nr == 0) return;
  KC_REQUIRE(nr <= INT32_MAX, "%lld runs", (long long)nr);
  KC_LAUNCH((unsigned)nr, SUMSQ_THREADS, 0, kc_stream(), sum_squares_kernel)(out, x, runs);
  KC_LAUNCHED();
}
void k_cuda_sum_groups(double *out, const double *x, const KcRun *groups, int64_t nr) {
  if (nr == 0) return;
  KC_LAUNCH(KC_GRID(nr), sum_groups_kernel)(out, x, groups, nr);
  KC_LAUNCHED();
}
}
