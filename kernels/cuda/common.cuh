/* What the CUDA kernel files share with each other and nobody else: the
 * current stream, launch checks, bounds asserts, conversions between the
 * storage types and fp32, and the block reductions. */
#ifndef SHARD_KERNELS_CUDA_COMMON_CUH
#define SHARD_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "kernels_cuda.h"
#include "launch.h"

/* Every launch goes to the stream k_cuda_set_stream chose (the default
 * stream until then). */
cudaStream_t kc_stream(void);

/* Aborts with the call, the file and line and the error string: for CUDA
 * errors and for broken preconditions of the caller, never user errors. */
__attribute__((noreturn)) void kc_die(const char *file, int line, const char *fmt, ...);
#define KC_CHECK(call)                                                                   \
  do {                                                                                   \
    cudaError_t kc_err_ = (call);                                                        \
    if (kc_err_ != cudaSuccess)                                                          \
      kc_die(__FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(kc_err_));          \
  } while (0)
/* After every launch: a bad configuration shows here, a fault inside the
 * kernel at the next synchronising call. */
#define KC_LAUNCHED() KC_CHECK(cudaGetLastError())
#define KC_REQUIRE(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond)) kc_die(__FILE__, __LINE__, __VA_ARGS__);                                \
  } while (0)

/* Bounds asserts inside kernels, in debug builds only (Release defines
 * NDEBUG): an index out of range traps with the file and line. Without
 * them the condition is still named (unevaluated), so that a parameter only
 * an assert reads is not an unused one to a host compiler. */
#ifdef NDEBUG
#define KC_ASSERT(cond) ((void)sizeof(cond))
#else
#include <assert.h>
#define KC_ASSERT(cond) assert(cond)
#endif

/* Threads per block of the row kernels (one block per row) and of the
 * element kernels. */
#define KC_ROW_THREADS 256
#define KC_ELT_THREADS 256

/* Grid for n elements at one per thread, capped so that the grid-stride
 * loops of the element kernels never ask for more blocks than a launch
 * takes. The cap depends on n alone, so results never depend on the GPU. */
static inline unsigned kc_grid(int64_t n, int threads) {
  int64_t g = (n + threads - 1) / threads;
  if (g < 1) g = 1;
  if (g > 65535 * 8) g = 65535 * 8;
  return (unsigned)g;
}

/* A grid-stride loop over n elements, and the launch configuration of an
 * element kernel on the library's stream. */
#define KC_FOR_ELEMENTS(i, n)                                                          \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);            \
       i += (int64_t)gridDim.x * blockDim.x)
#define KC_GRID(n) kc_grid(n, KC_ELT_THREADS), KC_ELT_THREADS, 0, kc_stream()

/* Storage types: float and bfloat16 (kc_bf16 in the header is its bits).
 * Arithmetic is in fp32 either way. */
typedef __nv_bfloat16 bf16;
__device__ __forceinline__ float kc_f(float x) { return x; }
__device__ __forceinline__ float kc_f(bf16 x) { return __bfloat162float(x); }
#define B16(p) ((bf16 *)(p))
#define CB16(p) ((const bf16 *)(p))
template <typename T> __device__ __forceinline__ T kc_to(float x);
template <> __device__ __forceinline__ float kc_to<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 kc_to<bf16>(float x) { return __float2bfloat16(x); }

/* The sum of v over the block, in an order fixed by blockDim alone (warp
 * shuffles, then warp 0 over the warps' sums), returned to every thread.
 * `buf` is shared memory for 32 values; blockDim is a multiple of 32. */
template <typename A> __device__ A kc_block_sum(A v, A *buf) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  __syncthreads(); /* buf may still be read from a previous call */
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  v = lane < nwarps ? buf[lane] : (A)0;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* The largest of v over the block, the same way (a max is exact). */
__device__ __forceinline__ float kc_block_max(float v, float *buf) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  v = lane < nwarps ? buf[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Max and sum(exp(x - max)) over the first n values of a row, to every
 * thread of the block (cross-entropy), in one pass over the row: each
 * thread keeps the largest value it has seen and its sum relative to it
 * (in double, rescaled when a larger value comes), then the block takes
 * the largest of the maxima and adds the threads' sums rescaled to it,
 * in an order fixed by blockDim. */
template <typename T>
__device__ void kc_row_max_sumexp(const T *x, int64_t n, float *fbuf, double *dbuf, float *m,
                               double *sum) {
  float mt = -INFINITY;
  double st = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float v = kc_f(x[j]);
    if (v > mt) {
      st = st * exp((double)mt - (double)v) + 1.0;
      mt = v;
    } else if (v > -INFINITY) {
      st += expf(v - mt);
    }
  }
  float mx = kc_block_max(mt, fbuf);
  *m = mx;
  *sum = kc_block_sum(mt > -INFINITY ? st * exp((double)mt - (double)mx) : 0.0, dbuf);
}

/* The sum over a warp, returned to every lane. */
template <typename A> __device__ __forceinline__ A kc_warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}


/* Vector access: V values of T at p + c*V, in one 16-byte load or store
 * when V > 1 (V = 16 / sizeof(T); V = 1 is a plain access). The hardware
 * faults on a 16-byte access that is not 16-byte aligned, so a launcher
 * picks V > 1 only where kc_aligned16 holds for every pointer and the row
 * length is a multiple of V; the emulator checks each access. */
#ifdef SHARD_CUDA_EMU
#define KC_VECTOR_ACCESS(p) kc_emu_vector_access(p, __FILE__, __LINE__)
#else
#define KC_VECTOR_ACCESS(p) ((void)0)
#endif
static inline bool kc_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* A kernel's dynamic shared memory (the launch's third argument), as
 * bytes aligned for 16-byte accesses. Above 48 KB the kernel must be
 * allowed it first (cudaFuncSetAttribute, MaxDynamicSharedMemorySize)
 * and launched with KC_LAUNCH_FN; the emulator refuses otherwise, as the
 * hardware does. */
#ifdef SHARD_CUDA_EMU
#define KC_DYNAMIC_SHARED(name) unsigned char *name = kc_emu::dynamic_shared()
#else
#define KC_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif

/* Asynchronous copies of 16 bytes from global into shared memory
 * (cp.async, sm_80 on): issued, committed as a group, and waited for
 * until at most N groups are still in flight; a barrier after the wait
 * publishes them to the block. Both addresses 16-byte aligned. The
 * emulator lands a copy only at its wait. */
#ifdef SHARD_CUDA_EMU
#define kc_cp_async16(dst, src) kc_emu::cp_async16((dst), (src), __FILE__, __LINE__)
__device__ __forceinline__ void kc_cp_async_commit() { kc_emu::cp_async_commit(); }
template <int N> __device__ __forceinline__ void kc_cp_async_wait() { kc_emu::cp_async_wait(N); }
#else
__device__ __forceinline__ void kc_cp_async16(void *dst, const void *src) {
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void kc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void kc_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

template <typename T, int V>
__device__ __forceinline__ void kc_ldv(const T *p, int64_t c, float *o) {
  if (V == 1) {
    o[0] = kc_f(p[c]);
    return;
  }
  const T *q = p + c * V;
  KC_VECTOR_ACCESS(q);
  uint4 u = *(const uint4 *)q;
  T e[V];
  memcpy(e, &u, sizeof u);
  for (int i = 0; i < V; i++) o[i] = kc_f(e[i]);
}

template <typename T, int V>
__device__ __forceinline__ void kc_stv(T *p, int64_t c, const float *v) {
  if (V == 1) {
    p[c] = kc_to<T>(v[0]);
    return;
  }
  T *q = p + c * V, e[V];
  for (int i = 0; i < V; i++) e[i] = kc_to<T>(v[i]);
  uint4 u;
  memcpy(&u, e, sizeof u);
  KC_VECTOR_ACCESS(q);
  *(uint4 *)q = u;
}


/* --- rows held in registers (the norms, softmax) ---------------------- */

/* Chunks of V values a thread keeps in registers: rows of up to
 * KC_ROW_REGS * V * KC_ROW_THREADS elements (8192 in fp32, 16384 in
 * bf16) are read from memory once; the chunks beyond are read again for
 * each pass over the row. */
#define KC_ROW_REGS 8
/* The register slots must be unrolled for the array to stay in registers;
 * the emulator's host compiler takes no such pragma. */
#ifdef SHARD_CUDA_EMU
#define KC_UNROLL
#else
#define KC_UNROLL _Pragma("unroll")
#endif

/* A row kernel's row: x, or (the norms fused with the residual add) the
 * sum s = a + b that it writes, rounded to the stored type, which the
 * kernel then reads, as when the add runs alone. V values per 16-byte
 * access, or 1. */
template <typename T, int V> struct KcRow {
  const T *x, *b; /* b: the other term of the sum, or NULL */
  T *s;           /* where the sum goes (with b) */

  /* Chunk c: loaded (and summed and stored) the first time... */
  __device__ __forceinline__ void first(int64_t c, float *o) const {
    kc_ldv<T, V>(x, c, o);
    if (!b) return;
    float q[V];
    kc_ldv<T, V>(b, c, q);
    for (int i = 0; i < V; i++) o[i] = kc_f(kc_to<T>(__fadd_rn(o[i], q[i])));
    kc_stv<T, V>(s, c, o);
  }
  /* ...and read back from memory where no register holds it. */
  __device__ __forceinline__ void again(int64_t c, float *o) const {
    kc_ldv<T, V>(b ? s : x, c, o);
  }
};

/* Thread t owns chunks t, t + blockDim, ... of the row's n chunks, the
 * first KC_ROW_REGS of them in registers; the code after `is_first` sees every
 * chunk's values (o_) in that order, so each thread's sums run in an order
 * fixed by the sizes. `is_first`: the pass that reads (and sums) the row.
 * k_ is the chunk's register slot, KC_ROW_REGS for one beyond them. */
#define KC_EACH_ROW_CHUNK(row, v, n, is_first, ...)                                   \
  do {                                                                                \
    KC_UNROLL for (int k_ = 0; k_ < KC_ROW_REGS; k_++) {                              \
      int64_t c_ = threadIdx.x + (int64_t)k_ * blockDim.x;                            \
      if (c_ < (n)) {                                                                 \
        float *o_ = v[k_];                                                            \
        if (is_first) row.first(c_, o_);                                              \
        __VA_ARGS__;                                                                  \
      }                                                                               \
    }                                                                                 \
    for (int64_t c_ = threadIdx.x + (int64_t)KC_ROW_REGS * blockDim.x; c_ < (n);      \
         c_ += blockDim.x) {                                                          \
      const int k_ = KC_ROW_REGS; /* no register holds this chunk */                  \
      (void)k_;                                                                       \
      float t_[V], *o_ = t_;                                                          \
      if (is_first) row.first(c_, o_);                                                \
      else row.again(c_, o_);                                                         \
      __VA_ARGS__;                                                                    \
    }                                                                                 \
  } while (0)

#endif
