/* The scalar formulas of the elementwise ops: the one copy of each, which
 * the CPU kernels (kernels/cpu/kernels.h), the CUDA kernels
 * (kernels/cuda/formulas.cuh) and the rank programs of both targets use.
 * The expressions that call them per op are the FORMULA lines of
 * ir/ops.def, which every target's fused loops render.
 *
 * The includer provides what differs between the places the formulas run:
 *   real       the arithmetic type (float, or double in the CPU's f64 build);
 *   k_exp, k_tanh  the primitives (the CPU's vectorisable ones, CUDA's expf
 *              and tanhf);
 *   K_FORMULA  the qualifiers of a formula (default `static inline`; on the
 *              device `__device__ __forceinline__`).
 * Constants are written (real)c, so that a float build rounds each the way
 * a literal 0.5f would: the CPU and the GPU evaluate the same expression. */
#ifndef SHARD_KERNELS_FORMULAS_H
#define SHARD_KERNELS_FORMULAS_H

#ifndef K_FORMULA
#define K_FORMULA static inline
#endif

/* GPT-2's tanh approximation of GELU and its derivative times dy. */
K_FORMULA real k_gelu(real x) {
  const real c = (real)0.7978845608028654; /* sqrt(2/pi) */
  return (real)0.5 * x * ((real)1 + k_tanh(c * (x + (real)0.044715 * x * x * x)));
}
K_FORMULA real k_gelu_grad(real x, real dy) {
  const real c = (real)0.7978845608028654;
  real u = c * (x + (real)0.044715 * x * x * x), t = k_tanh(u);
  real du = c * ((real)1 + (real)3 * (real)0.044715 * x * x);
  return dy * ((real)0.5 * ((real)1 + t) + (real)0.5 * x * ((real)1 - t * t) * du);
}

/* SiLU, x sigmoid(x), and its derivative times dy. */
K_FORMULA real k_sigmoid(real x) { return (real)1 / ((real)1 + k_exp(-x)); }
K_FORMULA real k_silu(real x) { return x * k_sigmoid(x); }
K_FORMULA real k_silu_grad(real x, real dy) {
  real s = k_sigmoid(x);
  return dy * s * ((real)1 + x * ((real)1 - s));
}

#endif
