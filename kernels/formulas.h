/* The scalar formulas of the elementwise ops: the one copy of each, which
 * the CPU kernels (kernels/cpu/kernels.h), the CUDA kernels
 * (kernels/cuda/formulas.cuh) and the rank programs of both targets use.
 * The expressions that call them per op are the FORMULA lines of
 * ir/ops.def, which every target's fused loops render.
 *
 * The includer provides what differs between the places the formulas run:
 *   real       the arithmetic type (float, or double in the CPU's f64 build);
 *   k_exp, k_tanh  the primitives (the CPU's vectorisable ones, CUDA's expf
 *              and tanhf); k_erf likewise, which defaults to the C library's
 *              erf in double (math.h), rounded to real;
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

#ifndef k_erf
#define k_erf(x) ((real)erf((double)(x)))
#endif

/* The exact GELU, x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), of BERT and
 * GPT-NeoX, and its derivative times dy: Phi(x) + x phi(x). */
K_FORMULA real k_gelu_erf(real x) {
  return (real)0.5 * x * ((real)1 + k_erf(x * (real)0.7071067811865476));
}
K_FORMULA real k_gelu_erf_grad(real x, real dy) {
  real cdf = (real)0.5 * ((real)1 + k_erf(x * (real)0.7071067811865476));
  real pdf = (real)0.3989422804014327 * k_exp((real)-0.5 * x * x); /* 1/sqrt(2 pi) */
  return dy * (cdf + x * pdf);
}

/* The gelu op's `approximate` attribute picks the form: 1 tanh, 0 exact.
 * It is a constant where the loops are written, so the branch folds. */
K_FORMULA real k_gelu_as(real x, real approximate) {
  return approximate != (real)0 ? k_gelu(x) : k_gelu_erf(x);
}
K_FORMULA real k_gelu_grad_as(real x, real dy, real approximate) {
  return approximate != (real)0 ? k_gelu_grad(x, dy) : k_gelu_erf_grad(x, dy);
}

/* SiLU, x sigmoid(x), and its derivative times dy. */
K_FORMULA real k_sigmoid(real x) { return (real)1 / ((real)1 + k_exp(-x)); }
K_FORMULA real k_silu(real x) { return x * k_sigmoid(x); }
K_FORMULA real k_silu_grad(real x, real dy) {
  real s = k_sigmoid(x);
  return dy * s * ((real)1 + x * ((real)1 - s));
}

/* The router's choice of kernels/cpu/moe.c and kernels/cuda/moe.cu: the k
 * largest of E scores p, ties to the lower expert (the j-th pick is the
 * first maximum among the experts not picked yet). k <= E <=
 * K_ROUTER_PICK_MAX, which both targets check before they call it. */
#define K_ROUTER_PICK_MAX 256
K_FORMULA void k_router_pick(int32_t *ex, const real *p, int64_t E, int64_t k) {
  unsigned char taken[K_ROUTER_PICK_MAX] = {0};
  for (int64_t j = 0; j < k; j++) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; e++)
      if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
    taken[best] = 1;
    ex[j] = (int32_t)best;
  }
}

#endif
