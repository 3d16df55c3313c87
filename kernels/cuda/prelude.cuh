/* What every rank program of the CUDA target (codegen/cuda/) holds before
 * its own code: the includes, the checks of CUDA calls, the launch of the
 * generated kernels and their grid, the bf16 conversions, the few kernels
 * the programs launch themselves (an embedding gradient added into its
 * slot, row sums in the CPU's order) and the per-op timer. The program
 * includes this file; codegen writes only what depends on the model: the
 * tensor-parallel scratch, CUDA graphs' step values and the fused kernels.
 * The same source builds under nvcc and, as C++, on the emulator of
 * tests/features/emu. */
#ifndef SHARD_KERNELS_CUDA_PRELUDE_CUH
#define SHARD_KERNELS_CUDA_PRELUDE_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "formulas.cuh"
#include "kernels_cuda.h"
#include "launch.h"
extern "C" {
#include "../../abi/model.h"
}

/* A failed CUDA call ends the program with the call, the file and line and
 * CUDA's error string; a launch is checked right after it. */
[[maybe_unused]] static void cu_check(cudaError_t err, const char *call, const char *file,
                                      int line) {
  if (err == cudaSuccess) return;
  fprintf(stderr, "error: cuda: %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(err));
  exit(1);
}
#define CU_CHECK(call) cu_check((call), #call, __FILE__, __LINE__)
#define CU_LAUNCHED() CU_CHECK(cudaGetLastError())
#define CU_ALIGN256(p) ((void *)(((uintptr_t)(p) + 255) & ~(uintptr_t)255))
#define CU_ALIGNED16(p) ((uintptr_t)(p) % 16 == 0)

/* bf16: the step's values are bf16 (kc_bf16, its bits), the weights are
 * read from their bf16 working copy, which the device layer keeps fresh.
 * An fp32 program leaves these unused. */
extern "C" uint16_t *rt_dev_weights_bf16(const real *w, int64_t n);
#define BF(p) ((kc_bf16 *)(p))
/* The copy is of the program's whole weights region (every chunk's). */
#define W16(elems) (rt_dev_weights_bf16(ctx->weights, ctx->model->nweights) + (elems))
__device__ __forceinline__ real cu_f(real x) { return x; }
__device__ __forceinline__ real cu_f(kc_bf16 x) { return __bfloat162float(__ushort_as_bfloat16(x)); }
__device__ __forceinline__ kc_bf16 cu_b(real x) {
  return __bfloat16_as_ushort(__float2bfloat16(x));
}
/* The two bf16 of a 32-bit word of the vector loops (the lower address in
 * the low half), widened and rounded as one at a time. */
__device__ __forceinline__ real cu_f_lo(unsigned w) { return cu_f((kc_bf16)(w & 0xffffu)); }
__device__ __forceinline__ real cu_f_hi(unsigned w) { return cu_f((kc_bf16)(w >> 16)); }
__device__ __forceinline__ unsigned cu_b2(real lo, real hi) {
  return (unsigned)cu_b(lo) | (unsigned)cu_b(hi) << 16;
}
__device__ __forceinline__ void cu_st(real *y, real x) { *y = x; }
__device__ __forceinline__ void cu_st(kc_bf16 *y, real x) { *y = cu_b(x); }
/* The shared layout calls on bf16 values (codegen's layout_prefix). */
[[maybe_unused]] static void cu_bf16_transpose(real *y, const real *x, int64_t outer, int64_t n0,
                                               int64_t mid, int64_t n1, int64_t inner) {
  k_cuda_transpose_bf16(BF(y), (const kc_bf16 *)x, outer, n0, mid, n1, inner);
}
[[maybe_unused]] static void cu_bf16_split_heads(real *y, const real *x, int64_t b, int64_t s,
                                                 int64_t H, int64_t d) {
  k_cuda_split_heads_bf16(BF(y), (const kc_bf16 *)x, b, s, H, d);
}
[[maybe_unused]] static void cu_bf16_merge_heads(real *y, const real *x, int64_t b, int64_t s,
                                                 int64_t H, int64_t d) {
  k_cuda_merge_heads_bf16(BF(y), (const kc_bf16 *)x, b, s, H, d);
}

/* The generated kernels' grid: enough blocks to fill every multiprocessor a
 * few times over, fewer for a small tensor; each thread strides through
 * the rest. No result depends on it (no kernel here reduces). */
#define CU_THREADS 256
#define CU_LAUNCH(grid, ...) KC_LAUNCH(grid, CU_THREADS, 0, k_cuda_stream(), __VA_ARGS__)
[[maybe_unused]] static unsigned cu_grid(int64_t n) {
  static int64_t most;
  if (!most) {
    int device = 0, sms = 0;
    CU_CHECK(cudaGetDevice(&device));
    CU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    most = 4 * (int64_t)(sms > 0 ? sms : 1) * (2048 / CU_THREADS);
  }
  int64_t blocks = (n + CU_THREADS - 1) / CU_THREADS;
  return (unsigned)(blocks < 1 ? 1 : blocks < most ? blocks : most);
}
/* Whether the fused kernels may take their 16-byte loops: yes unless
 * SHARD_CUDA_VECTOR=0, which runs the element-at-a-time loops instead (the
 * same bits: tests/features/gpu/run.sh's vector check compares the two). */
[[maybe_unused]] static int cu_vector(void) {
  static int on = -1;
  if (on < 0) {
    const char *s = getenv("SHARD_CUDA_VECTOR");
    on = !(s && s[0] == '0' && !s[1]);
  }
  return on;
}

/* embedding_grad added into its slot, on the whole GPU and with the CPU's
 * bits: block b owns the table rows r with r % gridDim.x == b. It walks
 * the tokens in order, CU_THREADS at a time: each thread flags whether
 * its token's row is the block's, a ballot and the warps' counts put the
 * block's tokens of the tile into a list in token order, and then the
 * block adds each listed token's dy row into its table row, thread t
 * taking columns t, t + CU_THREADS, ... Every element of the slot is thus
 * added to by one thread, in token order (equal ids never race, and the
 * sums are the CPU's), and every block's share of the work is the tokens
 * whose rows it owns. The slot holds rows [lo, lo + V) of the table;
 * other ids are another rank's. dy is real or, in a bf16 program,
 * kc_bf16. CU_EMB_OWNERS blocks: one wave of an H200's 132
 * multiprocessors, each block reading the ids once (from L2). */
#define CU_EMB_OWNERS 1024
template <typename T>
__global__ void cu_embedding_add(real *__restrict__ g, const int32_t *__restrict__ ids,
                                 const T *__restrict__ dy, int64_t rows, int64_t h, int64_t lo,
                                 int64_t V) {
  __shared__ int list[CU_THREADS];
  __shared__ int warp_count[CU_THREADS / 32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t t0 = 0; t0 < rows; t0 += CU_THREADS) {
    int64_t r = t0 + threadIdx.x, row = r < rows ? (int64_t)ids[r] - lo : -1;
    bool mine = row >= 0 && row < V && row % gridDim.x == blockIdx.x;
    unsigned b = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_count[warp] = __popc(b);
    __syncthreads();
    int base = 0, total = 0;
    for (int w = 0; w < CU_THREADS / 32; w++) {
      base += w < warp ? warp_count[w] : 0;
      total += warp_count[w];
    }
    if (mine) list[base + __popc(b & ((1u << lane) - 1u))] = threadIdx.x;
    __syncthreads();
    for (int k = 0; k < total; k++) {
      int64_t tok = t0 + list[k], trow = (int64_t)ids[tok] - lo;
      for (int64_t j = threadIdx.x; j < h; j += CU_THREADS) g[trow * h + j] += cu_f(dy[tok * h + j]);
    }
    __syncthreads(); /* list and warp_count are the next tile's */
  }
}

/* y[r] = the sum of row r of x [M, n], in order, in double: the CPU's order. */
template <typename TY, typename T>
__global__ void cu_sum_last(TY *__restrict__ y, const T *__restrict__ x, int64_t M, int64_t n) {
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < M;
       r += (int64_t)gridDim.x * blockDim.x) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += cu_f(x[r * n + j]);
    cu_st(&y[r], (real)s);
  }
}

/* y[j] = the sum over r of x[r, j] (rows of n), in row order, in double. */
template <typename TY, typename T>
__global__ void cu_sum_rows(TY *__restrict__ y, const T *__restrict__ x, int64_t rows, int64_t n) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n;
       j += (int64_t)gridDim.x * blockDim.x) {
    double s = 0;
    for (int64_t r = 0; r < rows; r++) s += cu_f(x[r * n + j]);
    cu_st(&y[j], (real)s);
  }
}

/* The per-op timer: built with -DSHARD_PROFILE (make EXTRA_CFLAGS=-DSHARD_PROFILE),
 * the program waits for the GPU after every node and prints where a step's
 * time goes when training ends. */
#ifdef SHARD_PROFILE
extern "C" void rt_prof_enable(void);
extern "C" void rt_prof_add(const char *what, double seconds);
static double prof_t0;
static double prof_now(void) {
  struct timespec t;
  CU_CHECK(cudaStreamSynchronize(k_cuda_stream()));
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#define PROF_START() (prof_t0 = prof_now())
#define PROF(what) \
  do { double t = prof_now(); rt_prof_add(what, t - prof_t0); prof_t0 = t; } while (0)
#else
#define PROF_START() ((void)0)
#define PROF(what) ((void)0)
#endif

#endif
