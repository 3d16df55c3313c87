/* The elementwise formulas of kernels/formulas.h on the device, in fp32
 * with CUDA's expf and tanhf as the primitives: the CUDA kernels
 * (elementwise.cu) and the generated programs' fused kernels (the FORMULA
 * lines of ir/ops.def) include this one copy. Not static, so that a
 * program that leaves some unused gets no warning for it. */
#ifndef SHARD_KERNELS_CUDA_FORMULAS_CUH
#define SHARD_KERNELS_CUDA_FORMULAS_CUH

#include <math.h>

/* The programs' real (abi/model.h) is the same float. */
typedef float real;

__device__ __forceinline__ real k_exp(real x) { return expf(x); }
__device__ __forceinline__ real k_tanh(real x) { return tanhf(x); }

#define K_FORMULA __device__ __forceinline__
#include "../formulas.h"
#undef K_FORMULA

#endif
