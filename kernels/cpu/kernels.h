/* CPU kernels: one op family per file, the same signatures in f32 and f64.
 *
 * Every kernel is compiled twice: `real` is float by default and double
 * with SHARD_REAL_F64 (the runtime's model.h defines it the same way). Sizes
 * are int64_t, tensors are dense row-major, and a kernel never allocates:
 * scratch space, where needed, comes from the caller's memory plan. Kernels
 * parallelise with OpenMP over their outer loops; GEMMs go to OpenBLAS.
 * Unless said otherwise an output is overwritten, not accumulated. Results
 * never depend on the number of threads: every sum runs in an order fixed by
 * the sizes alone (tests/kernels checks 1, 2 and 3 threads bit for bit).
 * Long sums (statistics, softmax denominators, the loss, weight gradients)
 * accumulate in double in both builds. A broken precondition that would
 * touch memory out of bounds (an id or target out of range, a size OpenBLAS
 * cannot take) aborts with a message. */
#ifndef SHARD_KERNELS_CPU_H
#define SHARD_KERNELS_CPU_H

#include <math.h>
#include <stdint.h>

#ifdef SHARD_REAL_F64
typedef double real;
#else
typedef float real;
#endif

/* --- embeddings (embedding.c) ---------------------------------------------- */
/* out[i, :] = table[ids[i], :] for i < n; an id outside [0, V) is a bug of the
 * caller (the data loader checks ids against the vocabulary). */
void k_embedding_fwd(real *out, const int32_t *ids, const real *table, int64_t n, int64_t h);
/* dtable = 0, then dtable[ids[i], :] += dout[i, :] in order of i. */
void k_embedding_bwd(real *dtable, const int32_t *ids, const real *dout, int64_t n, int64_t V,
                     int64_t h);
void k_arange(int32_t *out, int64_t n);
/* Vocabulary-parallel (tensor parallelism): the table is this rank's rows
 * [lo, lo + V) of the whole. Forward: rows of ids outside are zeros (the
 * ranks' results sum to the lookup). Backward: dtable = 0, then the rows
 * of ids inside get dout added, in order of i. */
void k_embedding_fwd_vp(real *out, const int32_t *ids, const real *table, int64_t n, int64_t h,
                        int64_t lo, int64_t V);
void k_embedding_bwd_vp(real *dtable, const int32_t *ids, const real *dout, int64_t n, int64_t V,
                        int64_t h, int64_t lo);

/* --- matrix multiply (gemm.c) ---------------------------------------------- */
/* C[M, N] = alpha * op(A) op(B) + beta * C, op(X) = X or X^T, row-major with
 * leading dims lda, ldb, ldc (cblas semantics). */
void k_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha, const real *A,
            int64_t lda, const real *B, int64_t ldb, real beta, real *C, int64_t ldc);
/* The same product as k_gemm, cut by the sizes alone into independent
 * blocks that the threads share (one GEMM when it is small), for a GEMM
 * outside any parallel region of the caller. Not the same bits as k_gemm
 * of the whole, but the same for any number of threads. */
void k_gemm_blocks(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha,
                   const real *A, int64_t lda, const real *B, int64_t ldb, real beta, real *C,
                   int64_t ldc);
/* Team forms of k_gemm_blocks and k_sum_rows, for a parallel region the
 * caller has open: every thread of the team must call them, in the same
 * order; each shares its blocks among the team and returns without waiting
 * for the others (the caller's region ends with a barrier). The sums are
 * k_sum_rows' bits; the GEMM's blocks are narrower than k_gemm_blocks'
 * (other work shares the team), so its bits are its own, but again the
 * same for any number of threads. */
void k_gemm_blocks_team(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha,
                        const real *A, int64_t lda, const real *B, int64_t ldb, real beta, real *C,
                        int64_t ldc);
void k_sum_rows_team(real *out, const real *x, int64_t rows, int64_t n);
/* `batch` independent GEMMs, matrices `stride_*` elements apart (stride 0:
 * the same matrix for every batch, e.g. a shared weight). C must not
 * overlap between entries. */
void k_gemm_batched(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                    real alpha, const real *A, int64_t lda, int64_t stride_a, const real *B,
                    int64_t ldb, int64_t stride_b, real beta, real *C, int64_t ldc,
                    int64_t stride_c);
/* Around a parallel loop of the caller whose iterations call k_gemm: with
 * the pthread build of OpenBLAS, which would start its own threads inside
 * every one of them, it runs on the calling thread until the matching end
 * (begin returns what end restores). A no-op with the OpenMP build. */
int k_blas_serial_begin(void);
void k_blas_serial_end(int saved);
/* y[r, :] += bias[:] for r < rows. */
void k_add_bias(real *y, const real *bias, int64_t rows, int64_t n);
/* out[:] = sum over r of x[r, :] (out has n elements): bias gradients and the
 * reduction of broadcast operands. */
void k_sum_rows(real *out, const real *x, int64_t rows, int64_t n);

/* --- normalisation (norm.c) ------------------------------------------------- */
void k_layernorm_fwd(real *y, const real *x, const real *w, const real *b, int64_t rows, int64_t h,
                     real eps); /* b may be NULL */
/* Recomputes the row statistics from x. dw and db (db may be NULL) are
 * overwritten with the sums over rows. */
void k_layernorm_bwd(real *dx, real *dw, real *db, const real *dy, const real *x, const real *w,
                     int64_t rows, int64_t h, real eps);
void k_rmsnorm_fwd(real *y, const real *x, const real *w, int64_t rows, int64_t h, real eps);
void k_rmsnorm_bwd(real *dx, real *dw, const real *dy, const real *x, const real *w, int64_t rows,
                   int64_t h, real eps);
/* The residual add fused with the norm after it: s = a + b and y = the
 * norm of s, each element's arithmetic that of an add and the norm apart. */
void k_add_layernorm_fwd(real *s, real *y, const real *a, const real *b, const real *w,
                         const real *bias, int64_t rows, int64_t h, real eps); /* bias may be NULL */
void k_add_rmsnorm_fwd(real *s, real *y, const real *a, const real *b, const real *w, int64_t rows,
                       int64_t h, real eps);
/* The backwards with dx = (the norm's dx) + dres, dres a residual's
 * gradient: the same bits as the norm's backward and an add after it. */
void k_layernorm_bwd_res(real *dx, real *dw, real *db, const real *dy, const real *x,
                         const real *w, const real *dres, int64_t rows, int64_t h, real eps);
void k_rmsnorm_bwd_res(real *dx, real *dw, const real *dy, const real *x, const real *w,
                       const real *dres, int64_t rows, int64_t h, real eps);

/* --- softmax and masks (softmax.c) ------------------------------------------ */
void k_softmax_fwd(real *y, const real *x, int64_t rows, int64_t n);
void k_softmax_bwd(real *dx, const real *y, const real *dy, int64_t rows, int64_t n);
/* x viewed as [batch, s, s]: y = x with entries j > i set to `fill`. */
void k_causal_mask(real *y, const real *x, int64_t batch, int64_t s, real fill);

/* --- attention (attention.c) ------------------------------------------------ */
/* Rotary embedding of x [b, s, H*d], rotating the pairs (i, i + d/2) of each
 * head by position * theta^(-2i/d); `inverse` rotates back (the adjoint).
 * cos and sin are computed in double and then rounded to real, as the
 * PyTorch reference does. y may be x. */
void k_rope(real *y, const real *x, int64_t b, int64_t s, int64_t H, int64_t d, real theta,
            int inverse);
/* rope over the first r dims of each head of d (r even, r <= d). */
void k_rope_part(real *y, const real *x, int64_t b, int64_t s, int64_t H, int64_t d, int64_t r,
                 real theta, int inverse);
/* y = softmax(q k^T / sqrt(d) (+ causal mask)) v per head. q and y are
 * [b, s, H*d]; k and v [b, s, K*d] with query head j reading kv head
 * j / (H / K) (K divides H). `scratch` holds k_attention_scratch(s) reals
 * per thread (omp_get_max_threads() of them): the scores of a block of 64
 * query rows and their gradient, 2 * 64 * s. Called from inside a
 * parallel region, each caller uses the slot of its thread there. */
int64_t k_attention_scratch(int64_t s);
void k_attention_fwd(real *y, const real *q, const real *k, const real *v, int64_t b, int64_t s,
                     int64_t H, int64_t K, int64_t d, int causal, real *scratch);
/* Recomputes the probabilities from q and k; writes dq, dk and dv. One
 * task per (batch row, kv head), so b * K tasks share the threads. */
void k_attention_bwd(real *dq, real *dk, real *dv, const real *dy, const real *q, const real *k,
                     const real *v, const real *y, int64_t b, int64_t s, int64_t H, int64_t K,
                     int64_t d, int causal, real *scratch);
/* The same with a key-padding mask keep[b, s] (BERT's attention_mask): a
 * key whose keep is 0 gets probability 0 from every query of its batch
 * row; a query row that sees only padding has output 0 (and gradient 0). */
void k_attention_masked_fwd(real *y, const real *q, const real *k, const real *v,
                            const int32_t *keep, int64_t b, int64_t s, int64_t H, int64_t K,
                            int64_t d, int causal, real *scratch);
void k_attention_masked_bwd(real *dq, real *dk, real *dv, const real *dy, const real *q,
                            const real *k, const real *v, const real *y, const int32_t *keep,
                            int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                            real *scratch);

/* --- layout (layout.c) ------------------------------------------------------ */
/* x [b, s, H, d] (= [b, s, H*d]) -> y [b, H, s, d]; merge is the inverse. */
void k_split_heads(real *y, const real *x, int64_t b, int64_t s, int64_t H, int64_t d);
void k_merge_heads(real *y, const real *x, int64_t b, int64_t s, int64_t H, int64_t d);
/* x viewed as [outer, n0, mid, n1, inner] -> y [outer, n1, mid, n0, inner]:
 * any transpose of two dims. */
void k_transpose(real *y, const real *x, int64_t outer, int64_t n0, int64_t mid, int64_t n1,
                 int64_t inner);
/* Copies a [rows, cols] block between arrays with leading dims: split and
 * concat along any axis are one such copy per part. */
void k_copy2d(real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows, int64_t cols);

/* --- loss (loss.c) ---------------------------------------------------------- */
/* loss[0] = mean over rows of -log softmax(logits[r, :])[targets[r]]. Only
 * the first `valid` of the V columns take part (the rest is padding). */
void k_cross_entropy_fwd(real *loss, const real *logits, const int32_t *targets, int64_t rows,
                         int64_t V, int64_t valid);
/* dlogits = dloss[0] / rows * (softmax(logits) - onehot(target)); padding
 * columns get 0. Targets must lie in [0, valid). */
void k_cross_entropy_bwd(real *dlogits, const real *logits, const int32_t *targets,
                         const real *dloss, int64_t rows, int64_t V, int64_t valid);
/* The target PyTorch's cross_entropy ignores by default (ignore_index). */
#define K_IGNORE_INDEX (-100)
/* With ignore != 0, rows whose target is K_IGNORE_INDEX add nothing and get
 * a zero gradient, and the mean is over the other rows (0 when there are
 * none); ignore == 0 is k_cross_entropy_fwd/bwd. */
void k_cross_entropy_ign_fwd(real *loss, const real *logits, const int32_t *targets,
                             int64_t rows, int64_t V, int64_t valid, int ignore);
void k_cross_entropy_ign_bwd(real *dlogits, const real *logits, const int32_t *targets,
                             const real *dloss, int64_t rows, int64_t V, int64_t valid,
                             int ignore);

/* Vocabulary-parallel cross entropy (tensor parallelism): the logits
 * [rows, V] are this rank's columns [lo, lo + V) of the whole, whose first
 * n (= clamp(valid - lo, 0, V)) are real. The caller all-reduces each
 * per-row result: MAX of rowmax (-inf on a rank without real columns),
 * then SUM of sumexp (exp(x - the global rowmax), summed in double, stored
 * as real) and of tgt (the target's logit on the rank that holds it, 0
 * elsewhere; targets outside [0, valid) abort). k_ce_vp_loss is then the
 * loss of k_cross_entropy_fwd over the whole; k_ce_vp_bwd this rank's
 * columns of k_cross_entropy_bwd (padding 0). */
void k_ce_vp_max(real *rowmax, const real *logits, int64_t rows, int64_t V, int64_t n);
void k_ce_vp_sumexp(real *sumexp, const real *logits, const real *rowmax, int64_t rows, int64_t V,
                    int64_t n);
void k_ce_vp_target(real *tgt, const real *logits, const int32_t *targets, int64_t rows, int64_t V,
                    int64_t lo, int64_t n, int64_t valid);
void k_ce_vp_loss(real *loss, const real *rowmax, const real *sumexp, const real *tgt,
                  int64_t rows);
void k_ce_vp_bwd(real *dlogits, const real *logits, const int32_t *targets, const real *dloss,
                 const real *rowmax, const real *sumexp, int64_t rows, int64_t V, int64_t lo,
                 int64_t n);

/* --- dropout (dropout.c) ---------------------------------------------------- */
/* y = x * keep / (1 - rate), keep = 1 with probability 1 - rate. The mask is
 * a pure function of (seed, site, i), so the backward recomputes it instead
 * of storing it, and results do not depend on the thread count. Rate 0 is a
 * copy, rate >= 1 gives zeros. y may be x. */
void k_dropout_fwd(real *y, const real *x, int64_t n, real rate, uint64_t seed, uint64_t site);
void k_dropout_bwd(real *dx, const real *dy, int64_t n, real rate, uint64_t seed, uint64_t site);

/* --- optimizer (optim.c) ----------------------------------------------------- */
/* Serial loops over one range: the runtime splits the parameters among its
 * threads and calls these from inside its own parallel region. */
typedef struct KAdamW {
  real grad_scale; /* clipping: the gradient is taken times this */
  real decay;      /* 1 - lr * weight_decay, or 1 */
  real beta1, beta2, eps;
  real step_size;  /* lr / (1 - beta1^t) */
  real bc2_sqrt;   /* sqrt(1 - beta2^t) */
} KAdamW;
/* One AdamW update of n elements, torch.optim.AdamW's arithmetic:
 * w *= decay; m = lerp(m, g', 1 - beta1); v = beta2 v + (1 - beta2) g'^2;
 * w -= step_size m / (sqrt(v) / bc2_sqrt + eps), with g' = g grad_scale. */
void k_adamw(real *w, const real *g, real *m, real *v, int64_t n, const KAdamW *h);
/* The sum of x[i]^2 in double, in an order fixed by n. */
double k_sum_squares(const real *x, int64_t n);

/* --- elementwise (inline, for the fused loops codegen writes) ------------- */
/* exp and tanh without a libm call in f32, so that loops calling them
 * vectorise: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite), e^r by the Cephes
 * polynomial, 2^n written into the exponent bits. About 1 ulp on
 * [-87.3, 88.3]; 0 below, +inf above, NaN stays NaN. In f64 (the gradient
 * checks) the libm functions are exact enough and speed does not matter. */
#ifdef SHARD_REAL_F64
static inline real k_exp(real x) { return exp(x); }
static inline real k_tanh(real x) { return tanh(x); }
#else
static inline float k_exp(float x) {
  /* Comparisons rather than fminf/fmaxf, which stay library calls without
   * -ffast-math and would stop the vectorisation this function exists for
   * (see -fno-trapping-math in kernels/CMakeLists.txt). */
  float xc = x > -87.3f ? x : -87.3f; /* NaN lands here: never an int overflow */
  xc = xc < 88.3f ? xc : 88.3f;
  /* floor(t + 0.5) through a positive truncation: branch-free, and t is
   * within [-126, 128] after the clamp. */
  int32_t n = (int32_t)(xc * 1.44269504088896341f + 200.5f) - 200;
  float fn = (float)n;
  float r = xc - fn * 0.693359375f;
  r = r + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { int32_t i; float f; } scale = {.i = (n + 127) * (1 << 23)};
  float y = p * scale.f;
  y = x > 88.3f ? INFINITY : y;
  y = x < -87.3f ? 0.0f : y;
  return x == x ? y : x;
}
/* tanh(x) = sign(x) (1 - e) / (1 + e) with e = exp(-2|x|): never overflows.
 * Near 0 the absolute error stays about 1e-7, which is what the callers
 * (gelu and its gradient, where tanh is added to 1) care about. */
static inline float k_tanh(float x) {
  float e = k_exp(-2.0f * fabsf(x));
  return copysignf((1.0f - e) / (1.0f + e), x);
}
#endif

/* The elementwise formulas over k_exp and k_tanh (kernels/formulas.h). */
#include "../formulas.h"

/* --- routed layers (moe.c) --------------------------------------------------- */
/* The most experts a router chooses among. */
#define K_ROUTER_MAX K_ROUTER_PICK_MAX
/* Per token t of logits[T, E]: scores (score 0 softmax, 1 sigmoid), the
 * top k experts ex[T, k] (ties to the lower index) and their weights
 * w[T, k], divided by their sum when normalize. bwd: dlogits from dw. */
void k_router_fwd(real *w, int32_t *ex, const real *logits, int64_t T, int64_t E, int64_t k,
                  int score, int normalize);
void k_router_bwd(real *dlogits, const real *logits, const int32_t *ex, const real *dw, int64_t T,
                  int64_t E, int64_t k, int score, int normalize);
/* load[2, E] of logits[T, E]: row 0 each expert's share of the top-k
 * choices (count / T), row 1 its mean softmax score; bwd: dlogits from row 1 of dload. */
void k_router_load_fwd(real *load, const real *logits, int64_t T, int64_t E, int64_t k);
void k_router_load_bwd(real *dlogits, const real *logits, const real *dload, int64_t T, int64_t E);
/* The mean over tokens of logsumexp(logits[t, :])^2 (the router z-loss);
 * bwd: dlogits = dy * 2 lse softmax / T. */
void k_router_z_loss_fwd(real *loss, const real *logits, int64_t T, int64_t E);
void k_router_z_loss_bwd(real *dlogits, const real *logits, const real *dy, int64_t T, int64_t E);
/* Copy c = t * k + j of token t goes to row pos[c] of xs[T * k, h], rows
 * sorted by expert ex[c], stable; counts[E] the rows of each expert. With
 * cap > 0 an expert keeps its first cap copies (in copy order) and drops
 * the others (pos -1, adding nothing); the rows after the kept ones are 0. */
void k_moe_dispatch(real *xs, int32_t *pos, int32_t *counts, const real *x, const int32_t *ex,
                    int64_t T, int64_t k, int64_t h, int64_t E, int64_t cap);
/* What the dispatches did, for the run's report of drops and load: while
 * k_moe_count(vstage) is on (vstage >= 0, the forward of that virtual
 * stage; -1 off: backward recomputes, evaluation), the n-th dispatch of
 * the stage's forward adds to slot (vstage, n) its copies (tokens x k),
 * the copies it dropped, and each expert's demand (its copies before the
 * capacity). k_moe_take copies out the slots (at most max, by vstage
 * then n) and clears them. */
typedef struct KMoeStat {
  int vstage, layer;
  int64_t experts, copies, dropped;
  int64_t demand[K_ROUTER_MAX];
} KMoeStat;
void k_moe_count(int vstage);
int k_moe_take(KMoeStat *out, int max);
/* y[t] = sum_j w[t, j] ys[pos[t * k + j]] (w NULL: weights 1, the
 * dispatch's adjoint); bwd: dys[pos[c]] = w[c] dy[t], dw[c] = dy[t] . ys[pos[c]]. */
void k_moe_combine(real *y, const real *ys, const int32_t *pos, const real *w, int64_t T, int64_t k,
                   int64_t h);
void k_moe_combine_bwd(real *dys, real *dw, const real *ys, const int32_t *pos, const real *w,
                       const real *dy, int64_t T, int64_t k, int64_t h);
/* Expert e's rows (counts[e] of them, in order) of x[rows, in] times w[e]
 * (w[E, out, in] when transposed, else [E, in, out]) -> y[rows, out], the
 * rows past the experts' zeros; dx likewise, and dw (dw[e] zero for an
 * expert without rows). */
void k_grouped_linear(real *y, const real *x, const real *w, const int32_t *counts, int64_t rows,
                      int64_t E, int64_t in, int64_t out, int transposed);
void k_grouped_linear_dx(real *dx, const real *dy, const real *w, const int32_t *counts,
                         int64_t rows, int64_t E, int64_t in, int64_t out, int transposed);
void k_grouped_linear_dw(real *dw, const real *x, const real *dy, const int32_t *counts,
                         int64_t rows, int64_t E, int64_t in, int64_t out, int transposed);

/* --- expert parallelism (moe_ep.c) -------------------------------------------- */
/* send[r]: the rows of counts[E] for expert rank r's E/size experts; each[r] = E/size. */
void k_ep_plan(int32_t *send, int32_t *each, const int32_t *counts, int64_t E, int64_t size);
/* rc[size][local]: the rows of each source rank for each local expert. sort:
 * y[M, h] by source then expert -> rows by expert then source, counts[local];
 * unsort the inverse. Rows past the counted ones are zeros. */
void k_ep_sort(real *rows, int32_t *counts, const real *y, const int32_t *rc, int64_t M, int64_t h,
               int64_t size, int64_t local);
void k_ep_unsort(real *y, const real *rows, const int32_t *rc, int64_t M, int64_t h, int64_t size,
                 int64_t local);

#endif
