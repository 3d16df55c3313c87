/* Stand-in for CUDA's cuda_bf16.h (tests/features/emu): __nv_bfloat16 as its 16
 * bits, with the conversions the kernels use. The round from fp32 is to
 * nearest even; a NaN stays a (quiet) NaN. */
#ifndef SHARD_EMU_CUDA_BF16_H
#define SHARD_EMU_CUDA_BF16_H

#include "cuda_runtime.h"

#ifdef __cplusplus
#include <cstring>

static inline unsigned short kc_emu_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
static inline float kc_emu_bf16_float(unsigned short b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(kc_emu_bf16_bits(f)) {}
  operator float() const { return kc_emu_bf16_float(__x); }
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) {
  __nv_bfloat16 r;
  r.__x = b;
  return r;
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __ushort_as_bfloat16(kc_emu_bf16_bits(f)); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return kc_emu_bf16_float(b.__x); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{__float2bfloat16(a), __float2bfloat16(b)};
}
static inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __floats2bfloat162_rn(v.x, v.y); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __nv_bfloat162{a, b};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 v) {
  return float2{__bfloat162float(v.x), __bfloat162float(v.y)};
}
static inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
static inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }
#else
typedef struct __nv_bfloat16 { unsigned short __x; } __nv_bfloat16;
typedef struct __nv_bfloat162 { __nv_bfloat16 x, y; } __nv_bfloat162;
#endif

#endif
