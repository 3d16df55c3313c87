/* Stand-in for CUDA's cuda_runtime.h (tests/features/emu): the runtime API of
 * cuda_runtime_api.h and, in C++, what device code needs to build as plain
 * C++ and run on the CPU: the qualifiers (nothing or inline), threadIdx and
 * friends (the running emulated thread's values), __syncthreads and the
 * warp collectives (fiber barriers, checked), atomics, the math intrinsics,
 * and kc_emu::Launch, which KC_LAUNCH (kernels/cuda/launch.h) expands to
 * under SHARD_CUDA_EMU.
 *
 * The threads of a block run as fibers on the calling OS thread, one block
 * after another (runtime.cc). __shared__ variables are static storage in
 * their own section, which the emulator fills with NaN bytes before each
 * block, so a read of shared memory nobody wrote shows. Dynamic shared
 * memory (a launch's third argument) is one buffer of the launch's size,
 * NaN bytes before each block too, that kc_emu::dynamic_shared() gives:
 * KC_DYNAMIC_SHARED (kernels/cuda/prelude.cuh) stands for `extern
 * __shared__` there. A launch may ask for at most 48 KB of it, or what
 * cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)
 * allowed the kernel, itself at most the device's opt-in limit (227 KB
 * on Hopper), as the hardware checks. */
#ifndef SHARD_EMU_CUDA_RUNTIME_H
#define SHARD_EMU_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#define __host__
#define __device__
#define __global__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static __attribute__((section("kc_emu_shared")))

#ifdef __cplusplus
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>

namespace kc_emu {

/* The emulated thread that runs now. */
struct Thread {
  uint3 idx;
  int lane, warp;
};
extern Thread *g_thread;
extern uint3 g_block;
extern dim3 g_block_dim, g_grid_dim;

void syncthreads(const char *file, int line);
/* A warp collective: every lane of `mask` deposits `value`; each gets back
 * what `op` makes of the deposits (the value of its source lane for the
 * shuffles, the vote for ballot). */
enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, SYNC };
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                         const char *file, int line);
unsigned active_mask();

template <typename T> T shuffle(WarpOp op, unsigned mask, T v, int arg, int width,
                                const char *file, int line) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "a warp shuffle moves at most 8 bytes of a trivially copyable type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_collective(op, mask, bits, arg, width, file, line);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

/* A launch: the configuration, checked as the hardware checks it, and the
 * kernel as a callable that takes the launch's arguments. */
struct Config {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
  const char *kernel, *file;
  int line;
  const void *fn; /* the kernel function, whose attributes the launch obeys */
};
void launch(const Config &c, std::function<void()> body);
/* The running block's dynamic shared memory (the launch's size of it). */
unsigned char *dynamic_shared();
/* cp.async of 16 bytes, its commit_group and wait_group (launch.cc). */
void cp_async16(void *dst, const void *src, const char *file, int line);
void cp_async_commit();
void cp_async_wait(int n);

/* A kernel's pointer argument, for the order between streams: memory
 * another stream's NCCL operation writes must have been waited for. */
template <typename A> void use_argument(const Config &c, const A &a) {
  if constexpr (std::is_pointer<A>::value) shard_emu_stream_use(c.stream, (const void *)a, 1, c.kernel);
}

template <typename K> struct Bound {
  Config c;
  K kernel;
  template <typename... A> void operator()(A... args) {
    K k = kernel;
    (use_argument(c, args), ...);
    launch(c, [k, args...]() { k(args...); });
  }
};

struct Launch {
  Config c;
  Launch(dim3 grid, dim3 block, size_t shared, cudaStream_t stream, const char *kernel = "kernel",
         const char *file = "?", int line = 0, const void *fn = nullptr)
      : c{grid, block, shared, stream, kernel, file, line, fn} {}
  template <typename K> Bound<K> operator%(K kernel) const { return Bound<K>{c, kernel}; }
};

/* Device symbols (a __device__ array) are host globals; their address is
 * recorded as device memory the first time it is asked for. */
cudaError_t symbol_address(void **ptr, const void *symbol, size_t bytes);

} // namespace kc_emu

/* CUDA's C++ form, which takes the kernel itself. */
template <typename T> cudaError_t cudaFuncSetAttribute(T *func, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute((const void *)func, attr, value);
}

#define threadIdx (static_cast<const uint3 &>(kc_emu::g_thread->idx))
#define blockIdx (static_cast<const uint3 &>(kc_emu::g_block))
#define blockDim (static_cast<const dim3 &>(kc_emu::g_block_dim))
#define gridDim (static_cast<const dim3 &>(kc_emu::g_grid_dim))
constexpr int warpSize = 32;

#define __syncthreads() kc_emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) kc_emu_syncwarp_(__FILE__, __LINE__, ##__VA_ARGS__)
static inline void kc_emu_syncwarp_(const char *file, int line, unsigned mask = 0xffffffffu) {
  kc_emu::warp_collective(kc_emu::SYNC, mask, 0, 0, 32, file, line);
}
#define KC_EMU_SHFL(op, mask, v, arg, ...)                                                    \
  kc_emu::shuffle(op, mask, v, arg, kc_emu_width_(__VA_ARGS__), __FILE__, __LINE__)
static inline int kc_emu_width_(int w = 32) { return w; }
#define __shfl_sync(mask, v, lane, ...) KC_EMU_SHFL(kc_emu::SHFL_IDX, mask, v, lane, ##__VA_ARGS__)
#define __shfl_up_sync(mask, v, d, ...) KC_EMU_SHFL(kc_emu::SHFL_UP, mask, v, d, ##__VA_ARGS__)
#define __shfl_down_sync(mask, v, d, ...) KC_EMU_SHFL(kc_emu::SHFL_DOWN, mask, v, d, ##__VA_ARGS__)
#define __shfl_xor_sync(mask, v, m, ...) KC_EMU_SHFL(kc_emu::SHFL_XOR, mask, v, m, ##__VA_ARGS__)
#define __ballot_sync(mask, pred)                                                             \
  ((unsigned)kc_emu::warp_collective(kc_emu::BALLOT, mask, (pred) != 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, pred) (__ballot_sync(mask, pred) != 0u)
#define __all_sync(mask, pred) (__ballot_sync(mask, pred) == (unsigned)(mask))
#define __activemask() kc_emu::active_mask()
static inline void __threadfence() {}
static inline void __threadfence_block() {}

/* Atomics: one OS thread runs every emulated thread and a fiber only
 * switches at a barrier, so a plain read-modify-write is atomic. */
template <typename T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static inline T atomicSub(T *p, T v) { T o = *p; *p = o - v; return o; }
template <typename T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <typename T> static inline T atomicMax(T *p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <typename T> static inline T atomicMin(T *p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <typename T> static inline T atomicCAS(T *p, T cmp, T v) {
  T o = *p;
  if (o == cmp) *p = v;
  return o;
}
template <typename T> static inline T __ldg(const T *p) { return *p; }

/* A 16-byte vector load or store of a kernel (kernels/cuda/common.cuh,
 * kc_ldv and kc_stv): the hardware faults with "misaligned address" unless
 * p is 16-byte aligned, and so does the emulator, naming the kernel's line. */
static inline void kc_emu_vector_access(const void *p, const char *file, int line) {
  if ((uintptr_t)p % 16 == 0) return;
  fprintf(stderr, "shard cuda emulator: %s:%d: misaligned 16-byte access at %p\n", file, line, p);
  abort();
}

/* Math: the host's <cmath>; the intrinsics with a rounding suffix are the
 * plain IEEE operations (the emulator builds with -ffp-contract=off, so
 * nothing is fused). */
/* glibc declares __expf and friends itself (its internal names), so these
 * are macros. */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf(x, y)
static inline float __fdividef(float x, float y) { return x / y; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
static inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
static inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }

/* Device symbols, as the runtime API's C++ overload takes them. */
template <typename T> static inline cudaError_t cudaGetSymbolAddress(void **ptr, const T &symbol) {
  return kc_emu::symbol_address(ptr, (const void *)&symbol, sizeof(T));
}
/* The typed overloads of cuda_runtime.h. */
template <typename T> static inline cudaError_t cudaMalloc(T **ptr, size_t size) {
  return cudaMalloc((void **)ptr, size);
}
template <typename T>
static inline cudaError_t cudaMallocAsync(T **ptr, size_t size, cudaStream_t stream) {
  return cudaMallocAsync((void **)ptr, size, stream);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **ptr, size_t size) {
  return cudaMallocHost((void **)ptr, size);
}
#endif /* __cplusplus */

#endif
