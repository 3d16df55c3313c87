/* CUDA kernels: the op families of kernels/cpu/kernels.h on the GPU, one
 * family per file, the same arguments in the same order.
 *
 * Differences from the CPU kernels, all of them deliberate:
 * - Every tensor pointer is device memory, except where a comment says
 *   host. Sizes are int64_t, tensors dense row-major, as on the CPU.
 * - Launches go to the stream set by k_cuda_set_stream (the default stream
 *   until then) and return before the work is done. A kernel never
 *   allocates and never synchronises: where it needs scratch space, a
 *   k_cuda_*_scratch function says how many bytes of device memory the
 *   caller's memory plan must provide.
 * - fp32 kernels have no suffix; _bf16 kernels store activations (and the
 *   step's weight copies) as bfloat16, kc_bf16 being its 16 bits, while
 *   all arithmetic, every sum, every weight gradient and every softmax
 *   statistic stays fp32 or wider. Long sums (row statistics, softmax
 *   denominators, the loss, weight gradients, sums of squares) run in
 *   double, as on the CPU.
 * - Results are deterministic: every sum runs in an order fixed by the
 *   sizes (and the launch shape they imply), no floating-point atomics.
 * - A broken precondition the host can see (head counts, odd rope size)
 *   aborts with a message; one only the device sees (an id or target out
 *   of range) traps in debug builds, and in release gives NaN (loss) or
 *   is skipped (embedding) rather than touching memory out of bounds. */
#ifndef SHARD_KERNELS_CUDA_H
#define SHARD_KERNELS_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t kc_bf16; /* the bits of a bfloat16 */

/* The stream every later launch of this library goes to. */
void k_cuda_set_stream(cudaStream_t stream);
/* That stream, for the kernels and copies a generated program launches
 * itself. */
cudaStream_t k_cuda_stream(void);

/* --- matrix multiply (gemm.cu), through cuBLASLt ---------------------------- */
typedef enum KcType { KC_F32 = 0, KC_BF16 = 1 } KcType;
/* Once before the first GEMM: the cuBLASLt handle and the workspace
 * (device memory of the plan, k_cuda_gemm_workspace bytes at least, 256-byte
 * aligned). The algorithm of each distinct shape, type and alignment is
 * chosen by cuBLASLt's heuristics on first use and cached. */
#define K_CUDA_GEMM_WORKSPACE ((size_t)32 << 20)
void k_cuda_gemm_init(void *workspace, size_t bytes);
void k_cuda_gemm_shutdown(void);
/* C[M, N] = alpha op(A) op(B) + beta C, row-major, cblas semantics as
 * k_gemm. Accumulates in fp32 (no TF32: the fp32 GEMM gives fp32 results). */
void k_cuda_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc);
void k_cuda_gemm_batched(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, int64_t stride_a,
                         const float *B, int64_t ldb, int64_t stride_b, float beta, float *C,
                         int64_t ldc, int64_t stride_c);
/* The general form: A and B of type ab, C of type c (bf16 inputs with an
 * fp32 or bf16 output), fp32 accumulation and scalars. */
void k_cuda_gemm_ex(KcType ab, KcType c, int trans_a, int trans_b, int64_t batch, int64_t M,
                    int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                    int64_t stride_a, const void *B, int64_t ldb, int64_t stride_b, float beta,
                    void *C, int64_t ldc, int64_t stride_c);
/* C = epi(alpha op(A) op(B) + beta C + bias) with bias [N] (of C's type)
 * added to every row, and for KC_EPI_BIAS_GELU the tanh GELU of k_gelu
 * after it: a linear layer's bias and activation in cuBLASLt's epilogue. */
typedef enum KcEpilogue {
  KC_EPI_NONE = 0,
  KC_EPI_BIAS = 1,          /* C = P + bias */
  KC_EPI_BIAS_GELU = 2,     /* C = gelu(P + bias) */
  KC_EPI_BIAS_GELU_AUX = 3, /* aux = P + bias, C = gelu(aux): the forward of a training step */
  KC_EPI_DGELU = 4,         /* C = gelu'(aux) P: P is the gradient of gelu(aux) */
  KC_EPI_DGELU_BGRAD = 5,   /* as KC_EPI_DGELU, and bias[N] = the sum of C's rows */
  KC_EPI_BGRAD_A = 6,       /* bias[M] = the sum over k of op(A)[m, k] */
  KC_EPI_BGRAD_B = 7,       /* bias[N] = the sum over k of op(B)[k, n] */
  KC_EPI_COUNT
} KcEpilogue;
void k_cuda_gemm_epilogue(KcType ab, KcType c, KcEpilogue epi, const void *bias, int trans_a,
                          int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                          int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                          int64_t ldc);
/* The general form, P = alpha op(A) op(B) (+ beta C): the epilogue, its
 * bias (read for KC_EPI_BIAS*, written for the *BGRAD* forms) of type
 * bias_type, and the GELU's pre-activation aux [M, N] row-major with
 * leading dimension ldaux (a multiple of 8, cuBLASLt's rule), of C's type.
 * The GELU and gradient forms take beta = 0, ldc = N and ldaux = N; the
 * bias gradients are fp32 and overwrite bias (they are not added in).
 * Where cuBLASLt's heuristics offer no algorithm for the epilogue (the
 * types, transpositions or alignment), the product runs unfused: the plain
 * GEMM, then k_cuda_add_bias, k_cuda_gelu_*, k_cuda_sum_rows (or a column
 * sum of an operand), which is what an unfused program runs; the first
 * such fallback of each epilogue is reported once on stderr. Returns 1
 * when cuBLASLt ran the epilogue, 0 when it ran unfused. */
typedef struct KcGemmEpi {
  KcEpilogue epi;
  void *bias;
  KcType bias_type;
  void *aux;
  int64_t ldaux;
} KcGemmEpi;
int k_cuda_gemm_fused(KcType ab, KcType c, const KcGemmEpi *epi, int trans_a, int trans_b,
                      int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                      const void *B, int64_t ldb, float beta, void *C, int64_t ldc);
/* The timed search: with n > 1 the first call of each problem (with
 * beta = 0, outside stream capture) runs each of the heuristics' n best
 * algorithms once, timed with events, and keeps the fastest; 0 or 1 (the
 * default) keeps the heuristics' first choice. k_cuda_gemm_init reads
 * SHARD_GEMM_SEARCH from the environment unless a call here came first
 * (the device layer's --deterministic sets 0). Algorithms may round
 * differently (split-k, the order of the k sums), so with the search on,
 * a run's bits can depend on timings: off by default. */
void k_cuda_gemm_set_search(int n);
/* With on set, every epilogue runs unfused (the fallback above), so that
 * tests check both paths and a run can compare them on one GPU. */
void k_cuda_gemm_set_unfused(int on);
/* How many shapes the algorithm cache holds now (for tests). */
int k_cuda_gemm_cached(void);

/* --- elementwise (elementwise.cu) -------------------------------------------- */
/* y[r, :] += bias[:] for r < rows. */
void k_cuda_add_bias(float *y, const float *bias, int64_t rows, int64_t n);
void k_cuda_add_bias_bf16(kc_bf16 *y, const kc_bf16 *bias, int64_t rows, int64_t n);
/* out[:] (fp32) = sum over r of x[r, :], rows in order, in double. */
void k_cuda_sum_rows(float *out, const float *x, int64_t rows, int64_t n);
void k_cuda_sum_rows_bf16(float *out, const kc_bf16 *x, int64_t rows, int64_t n);
/* The tanh GELU of kernels.h (k_gelu, k_gelu_grad): y = gelu(x),
 * dx = gelu'(x) dy. */
void k_cuda_gelu_fwd(float *y, const float *x, int64_t n);
void k_cuda_gelu_bwd(float *dx, const float *x, const float *dy, int64_t n);
void k_cuda_gelu_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t n);
void k_cuda_gelu_bwd_bf16(kc_bf16 *dx, const kc_bf16 *x, const kc_bf16 *dy, int64_t n);
/* SwiGLU: y = silu(gate) up; the backward gives both gradients. */
void k_cuda_swiglu_fwd(float *y, const float *gate, const float *up, int64_t n);
void k_cuda_swiglu_bwd(float *dgate, float *dup, const float *gate, const float *up,
                       const float *dy, int64_t n);
void k_cuda_swiglu_fwd_bf16(kc_bf16 *y, const kc_bf16 *gate, const kc_bf16 *up, int64_t n);
void k_cuda_swiglu_bwd_bf16(kc_bf16 *dgate, kc_bf16 *dup, const kc_bf16 *gate,
                            const kc_bf16 *up, const kc_bf16 *dy, int64_t n);
/* y = a + b (residuals); y += x (gradient accumulation, y fp32); y = alpha x. */
void k_cuda_add(float *y, const float *a, const float *b, int64_t n);
void k_cuda_add_bf16(kc_bf16 *y, const kc_bf16 *a, const kc_bf16 *b, int64_t n);
void k_cuda_accumulate(float *y, const float *x, int64_t n);
void k_cuda_accumulate_bf16(float *y, const kc_bf16 *x, int64_t n);
void k_cuda_scale(float *y, const float *x, float alpha, int64_t n);
/* y = v (a step's constants, without a copy from the host that would wait
 * for the stream); acc[0] += x[0] in double, one thread, so a sequence of
 * calls adds in their order (the step's losses, read once a step). */
void k_cuda_fill(float *y, float v, int64_t n);
void k_cuda_add_scalar(double *acc, const float *x);
/* Casts, rounding to nearest even. */
void k_cuda_cast_f32_bf16(kc_bf16 *y, const float *x, int64_t n);
void k_cuda_cast_bf16_f32(float *y, const kc_bf16 *x, int64_t n);

/* --- embeddings (embedding.cu) ------------------------------------------------ */
/* As k_embedding_*: forward gathers rows; backward sets dtable (fp32) to
 * the sum of the dout rows of each id, added in token order with no
 * atomics (each thread owns a column of a range of ids), so its bits are
 * the CPU kernel's. */
void k_cuda_embedding_fwd(float *out, const int32_t *ids, const float *table, int64_t n,
                          int64_t h);
void k_cuda_embedding_bwd(float *dtable, const int32_t *ids, const float *dout, int64_t n,
                          int64_t V, int64_t h);
void k_cuda_embedding_fwd_bf16(kc_bf16 *out, const int32_t *ids, const kc_bf16 *table, int64_t n,
                               int64_t h);
void k_cuda_embedding_bwd_bf16(float *dtable, const int32_t *ids, const kc_bf16 *dout, int64_t n,
                               int64_t V, int64_t h);
void k_cuda_arange(int32_t *out, int64_t n);
void k_cuda_embedding_fwd_vp(float *out, const int32_t *ids, const float *table, int64_t n,
                             int64_t h, int64_t lo, int64_t V);
void k_cuda_embedding_bwd_vp(float *dtable, const int32_t *ids, const float *dout, int64_t n,
                             int64_t V, int64_t h, int64_t lo);
/* The same with bf16 rows (the gradient of the table stays fp32). */
void k_cuda_embedding_fwd_vp_bf16(kc_bf16 *out, const int32_t *ids, const kc_bf16 *table,
                                  int64_t n, int64_t h, int64_t lo, int64_t V);
void k_cuda_embedding_bwd_vp_bf16(float *dtable, const int32_t *ids, const kc_bf16 *dout,
                                  int64_t n, int64_t V, int64_t h, int64_t lo);

/* --- normalisation (norm.cu) -------------------------------------------------- */
/* One block per row; b may be NULL. The backward writes dx, overwrites dw
 * (and db, which may be NULL) with fp32 sums over rows, and needs
 * k_cuda_norm_bwd_scratch(rows, h) bytes of scratch (the row statistics
 * and per-block partial sums of the weight gradients). */
void k_cuda_layernorm_fwd(float *y, const float *x, const float *w, const float *b, int64_t rows,
                          int64_t h, float eps);
void k_cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                          const float *w, int64_t rows, int64_t h, float eps, void *scratch);
void k_cuda_rmsnorm_fwd(float *y, const float *x, const float *w, int64_t rows, int64_t h,
                        float eps);
void k_cuda_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        int64_t rows, int64_t h, float eps, void *scratch);
void k_cuda_layernorm_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, const kc_bf16 *w, const kc_bf16 *b,
                               int64_t rows, int64_t h, float eps);
void k_cuda_layernorm_bwd_bf16(kc_bf16 *dx, float *dw, float *db, const kc_bf16 *dy,
                               const kc_bf16 *x, const kc_bf16 *w, int64_t rows, int64_t h,
                               float eps, void *scratch);
void k_cuda_rmsnorm_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, const kc_bf16 *w, int64_t rows,
                             int64_t h, float eps);
void k_cuda_rmsnorm_bwd_bf16(kc_bf16 *dx, float *dw, const kc_bf16 *dy, const kc_bf16 *x,
                             const kc_bf16 *w, int64_t rows, int64_t h, float eps, void *scratch);
/* The residual add fused with the norm (the pass add-norm): s = a + b,
 * rounded to the stored type, and y the norm of s, the row read once; and
 * the backwards with dx = (the norm's dx) + dres, a residual's gradient,
 * with the bits of the unfused kernels. bias may be NULL. */
void k_cuda_add_layernorm_fwd(float *s, float *y, const float *a, const float *b, const float *w,
                              const float *bias, int64_t rows, int64_t h, float eps);
void k_cuda_add_rmsnorm_fwd(float *s, float *y, const float *a, const float *b, const float *w,
                            int64_t rows, int64_t h, float eps);
void k_cuda_layernorm_bwd_res(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const float *dres, int64_t rows, int64_t h,
                              float eps, void *scratch);
void k_cuda_rmsnorm_bwd_res(float *dx, float *dw, const float *dy, const float *x, const float *w,
                            const float *dres, int64_t rows, int64_t h, float eps, void *scratch);
void k_cuda_add_layernorm_fwd_bf16(kc_bf16 *s, kc_bf16 *y, const kc_bf16 *a, const kc_bf16 *b,
                                   const kc_bf16 *w, const kc_bf16 *bias, int64_t rows, int64_t h,
                                   float eps);
void k_cuda_add_rmsnorm_fwd_bf16(kc_bf16 *s, kc_bf16 *y, const kc_bf16 *a, const kc_bf16 *b,
                                 const kc_bf16 *w, int64_t rows, int64_t h, float eps);
void k_cuda_layernorm_bwd_res_bf16(kc_bf16 *dx, float *dw, float *db, const kc_bf16 *dy,
                                   const kc_bf16 *x, const kc_bf16 *w, const kc_bf16 *dres,
                                   int64_t rows, int64_t h, float eps, void *scratch);
void k_cuda_rmsnorm_bwd_res_bf16(kc_bf16 *dx, float *dw, const kc_bf16 *dy, const kc_bf16 *x,
                                 const kc_bf16 *w, const kc_bf16 *dres, int64_t rows, int64_t h,
                                 float eps, void *scratch);
int64_t k_cuda_norm_bwd_scratch(int64_t rows, int64_t h);

/* --- softmax and masks (softmax.cu) ------------------------------------------- */
void k_cuda_softmax_fwd(float *y, const float *x, int64_t rows, int64_t n);
void k_cuda_softmax_bwd(float *dx, const float *y, const float *dy, int64_t rows, int64_t n);
void k_cuda_softmax_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t rows, int64_t n);
void k_cuda_softmax_bwd_bf16(kc_bf16 *dx, const kc_bf16 *y, const kc_bf16 *dy, int64_t rows,
                             int64_t n);
void k_cuda_causal_mask(float *y, const float *x, int64_t batch, int64_t s, float fill);
/* The bf16 form: the fill rounded to bf16, the kept scores copied. */
void k_cuda_causal_mask_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t batch, int64_t s, float fill);

/* --- attention (attention.cu) ------------------------------------------------- */
/* Rotary embedding as k_rope (angles in double, rounded to fp32); y may be x. */
void k_cuda_rope(float *y, const float *x, int64_t b, int64_t s, int64_t H, int64_t d,
                 float theta, int inverse);
void k_cuda_rope_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t b, int64_t s, int64_t H, int64_t d,
                      float theta, int inverse);
/* y = softmax(q k^T / sqrt(d) (+ causal mask)) v, shapes as k_attention_fwd
 * (q, y [b, s, H*d]; k, v [b, s, K*d]; query head j reads kv head
 * j / (H / K)); d at most K_CUDA_ATT_MAX_D. The s x s scores are never
 * written: the keys stream past the query rows with an online softmax
 * (one warp a query row in the simple kernels, 16 rows a warp and tiles of
 * keys in shared memory in the flash ones, see k_cuda_attention_set_impl).
 * The forward writes each query row's log-sum-exp of its scaled scores
 * into lse[b, H, s] (fp32; NULL: not kept). The backward takes it back to
 * recompute the probabilities without a product for the statistics: a
 * pass for each row's sum(dy y) into the scratch
 * (k_cuda_attention_scratch(b, s, H, d) bytes), then, in the simple
 * kernels, dq by query rows and dk, dv by key rows (each owned by one
 * warp, summed over the query heads of its group in order), in the flash
 * ones FlashAttention-2's one pass of 5 tile products whose dq goes
 * through 4 fp32 partial sums in the scratch. No atomics: the bits repeat. */
#define K_CUDA_ATT_MAX_D 256
int64_t k_cuda_attention_scratch(int64_t b, int64_t s, int64_t H, int64_t d);
void k_cuda_attention_fwd(float *y, const float *q, const float *k, const float *v, int64_t b,
                          int64_t s, int64_t H, int64_t K, int64_t d, int causal, float *lse);
void k_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dy, const float *q,
                          const float *k, const float *v, const float *y, const float *lse,
                          int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                          void *scratch);
void k_cuda_attention_fwd_bf16(kc_bf16 *y, const kc_bf16 *q, const kc_bf16 *k, const kc_bf16 *v,
                               int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                               float *lse);
void k_cuda_attention_bwd_bf16(kc_bf16 *dq, kc_bf16 *dk, kc_bf16 *dv, const kc_bf16 *dy,
                               const kc_bf16 *q, const kc_bf16 *k, const kc_bf16 *v,
                               const kc_bf16 *y, const float *lse, int64_t b, int64_t s, int64_t H,
                               int64_t K, int64_t d, int causal, void *scratch);
/* Which kernels the bf16 calls run. KC_ATT_FLASH (the default): tiles in
 * shared memory and tensor-core products (wmma, bf16 operands, fp32
 * accumulation, fp32 softmax statistics; sm_80 and later), for head sizes
 * that are a multiple of 16 up to 128 and 16-byte aligned tensors; other
 * calls, and every call under KC_ATT_SIMPLE, run the warp-per-row kernels
 * above. Both are deterministic (no atomics) and take the same scratch.
 * KC_ATT_AUTO (the state at start-up) reads the environment at the first
 * call: SHARD_ATTENTION=simple or flash (unset: flash; anything else
 * aborts). The fp32 calls always run the warp-per-row kernels.
 * k_cuda_attention_impl says which path a bf16 call of head size d takes
 * now, so that a test knows what it compared. */
typedef enum KcAttImpl { KC_ATT_AUTO = 0, KC_ATT_FLASH = 1, KC_ATT_SIMPLE = 2 } KcAttImpl;
void k_cuda_attention_set_impl(KcAttImpl impl);
KcAttImpl k_cuda_attention_impl(int64_t d);
/* The plain path, fp32, kept to check the fast one against on the same
 * GPU: per head, scores by GEMM into the scratch, the causal mask, the
 * softmax kernel, a GEMM with v (and the backward the same way). It does
 * write the scores: k_cuda_attention_plain_scratch(b, s, H) bytes. Needs
 * k_cuda_gemm_init. */
int64_t k_cuda_attention_plain_scratch(int64_t b, int64_t s, int64_t H);
void k_cuda_attention_fwd_plain(float *y, const float *q, const float *k, const float *v,
                                int64_t b, int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                                void *scratch);
void k_cuda_attention_bwd_plain(float *dq, float *dk, float *dv, const float *dy, const float *q,
                                const float *k, const float *v, const float *y, int64_t b,
                                int64_t s, int64_t H, int64_t K, int64_t d, int causal,
                                void *scratch);

/* --- layout (layout.cu) ------------------------------------------------------- */
void k_cuda_split_heads(float *y, const float *x, int64_t b, int64_t s, int64_t H, int64_t d);
void k_cuda_merge_heads(float *y, const float *x, int64_t b, int64_t s, int64_t H, int64_t d);
void k_cuda_transpose(float *y, const float *x, int64_t outer, int64_t n0, int64_t mid,
                      int64_t n1, int64_t inner);
void k_cuda_copy2d(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                   int64_t cols);
void k_cuda_split_heads_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t b, int64_t s, int64_t H,
                             int64_t d);
void k_cuda_merge_heads_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t b, int64_t s, int64_t H,
                             int64_t d);
void k_cuda_transpose_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t outer, int64_t n0, int64_t mid,
                           int64_t n1, int64_t inner);
void k_cuda_copy2d_bf16(kc_bf16 *dst, int64_t ldd, const kc_bf16 *src, int64_t lds, int64_t rows,
                        int64_t cols);

/* --- loss (loss.cu) ----------------------------------------------------------- */
/* As k_cross_entropy_*: the softmax of the logits is fused into both (the
 * backward writes softmax - onehot without storing the probabilities).
 * The forward needs k_cuda_ce_scratch(rows) bytes (one double per row,
 * added in row order). Logits may be bf16; the loss and its gradient scale
 * are fp32, the statistics double. A target outside [0, valid) gives a NaN
 * loss (and no write outside the row). */
int64_t k_cuda_ce_scratch(int64_t rows);
void k_cuda_cross_entropy_fwd(float *loss, const float *logits, const int32_t *targets,
                              int64_t rows, int64_t V, int64_t valid, void *scratch);
void k_cuda_cross_entropy_bwd(float *dlogits, const float *logits, const int32_t *targets,
                              const float *dloss, int64_t rows, int64_t V, int64_t valid);
void k_cuda_cross_entropy_fwd_bf16(float *loss, const kc_bf16 *logits, const int32_t *targets,
                                   int64_t rows, int64_t V, int64_t valid, void *scratch);
void k_cuda_cross_entropy_bwd_bf16(kc_bf16 *dlogits, const kc_bf16 *logits,
                                   const int32_t *targets, const float *dloss, int64_t rows,
                                   int64_t V, int64_t valid);
/* The vocabulary-parallel pieces, as k_ce_vp_* (fp32 statistics). */
void k_cuda_ce_vp_max(float *rowmax, const float *logits, int64_t rows, int64_t V, int64_t n);
void k_cuda_ce_vp_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t rows,
                         int64_t V, int64_t n);
void k_cuda_ce_vp_target(float *tgt, const float *logits, const int32_t *targets, int64_t rows,
                         int64_t V, int64_t lo, int64_t n, int64_t valid);
void k_cuda_ce_vp_loss(float *loss, const float *rowmax, const float *sumexp, const float *tgt,
                       int64_t rows);
void k_cuda_ce_vp_bwd(float *dlogits, const float *logits, const int32_t *targets,
                      const float *dloss, const float *rowmax, const float *sumexp, int64_t rows,
                      int64_t V, int64_t lo, int64_t n);
/* The same over bf16 logits (and a bf16 dlogits); the statistics stay fp32. */
void k_cuda_ce_vp_max_bf16(float *rowmax, const kc_bf16 *logits, int64_t rows, int64_t V,
                           int64_t n);
void k_cuda_ce_vp_sumexp_bf16(float *sumexp, const kc_bf16 *logits, const float *rowmax,
                              int64_t rows, int64_t V, int64_t n);
void k_cuda_ce_vp_target_bf16(float *tgt, const kc_bf16 *logits, const int32_t *targets,
                              int64_t rows, int64_t V, int64_t lo, int64_t n, int64_t valid);
void k_cuda_ce_vp_bwd_bf16(kc_bf16 *dlogits, const kc_bf16 *logits, const int32_t *targets,
                           const float *dloss, const float *rowmax, const float *sumexp,
                           int64_t rows, int64_t V, int64_t lo, int64_t n);

/* --- dropout (dropout.cu) ----------------------------------------------------- */
/* The mask of k_dropout_fwd bit for bit: a pure function of (seed, site, i)
 * through the same splitmix64 words, so CPU and GPU runs drop the same
 * elements. y may be x. */
void k_cuda_dropout_fwd(float *y, const float *x, int64_t n, float rate, uint64_t seed,
                        uint64_t site);
void k_cuda_dropout_bwd(float *dx, const float *dy, int64_t n, float rate, uint64_t seed,
                        uint64_t site);
void k_cuda_dropout_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t n, float rate, uint64_t seed,
                             uint64_t site);
void k_cuda_dropout_bwd_bf16(kc_bf16 *dx, const kc_bf16 *dy, int64_t n, float rate,
                             uint64_t seed, uint64_t site);
/* The values of one step that kernels captured in a CUDA graph read from
 * device memory when they run (a graph replays the arguments it was
 * captured with): the dropout seed, and whether the run trains. */
typedef struct KcStep {
  uint64_t seed;
  int32_t training; /* 0: dropout is the identity (evaluation, sampling) */
  int32_t unused;
} KcStep;
/* *step (device memory) = {seed, training}, by one thread on the
 * library's stream: the values travel as launch arguments, so nothing on
 * the host is read after the call returns. */
void k_cuda_step_set(KcStep *step, uint64_t seed, int training);
/* k_cuda_dropout_* with the seed and the training switch read from *step
 * (device memory) as the kernel runs: the mask of seed step->seed ^ mix
 * (mix: 0, or a tensor-parallel rank's own stream) at `rate` when
 * step->training, else a copy; the same bits as k_cuda_dropout_fwd(y, x,
 * n, training ? rate : 0, seed ^ mix, site). */
void k_cuda_dropout_step_fwd(float *y, const float *x, int64_t n, float rate, const KcStep *step,
                             uint64_t mix, uint64_t site);
void k_cuda_dropout_step_bwd(float *dx, const float *dy, int64_t n, float rate,
                             const KcStep *step, uint64_t mix, uint64_t site);
void k_cuda_dropout_step_fwd_bf16(kc_bf16 *y, const kc_bf16 *x, int64_t n, float rate,
                                  const KcStep *step, uint64_t mix, uint64_t site);
void k_cuda_dropout_step_bwd_bf16(kc_bf16 *dx, const kc_bf16 *dy, int64_t n, float rate,
                                  const KcStep *step, uint64_t mix, uint64_t site);

/* --- optimizer (optim.cu) ----------------------------------------------------- */
/* The constants of one step, as KAdamW (host memory, passed by value). */
typedef struct KcAdamW {
  float grad_scale, decay, beta1, beta2, eps, step_size, bc2_sqrt;
} KcAdamW;
/* A run of n elements: weights and gradients from element w, optimizer
 * state from s, weight decay applied when `decay` is set; `at` is the
 * run's first position in the concatenation of all runs (the caller's
 * prefix sum, ascending). */
typedef struct KcRun {
  int64_t w, s, n, at;
  int32_t decay, pad_;
} KcRun;
/* One AdamW update of n elements, torch.optim.AdamW's arithmetic as k_adamw. */
void k_cuda_adamw(float *w, const float *g, float *m, float *v, int64_t n, const KcAdamW *h);
/* The same over every run of `runs` (device memory, nr of them, total
 * elements in all) in one launch; decay is h->decay for runs with decay
 * set and exactly 1 otherwise. w_bf16, when not NULL, gets the updated
 * weights rounded to bf16 at the same offsets (the step's copy). */
void k_cuda_adamw_runs(float *w, const float *g, float *m, float *v, kc_bf16 *w_bf16,
                       const KcRun *runs, int64_t nr, int64_t total, const KcAdamW *h);
/* SGD over runs: w = w * decay - lr * g * grad_scale. */
void k_cuda_sgd_runs(float *w, const float *g, const KcRun *runs, int64_t nr, int64_t total,
                     float decay, float lr, float grad_scale);
/* out[i] (device, double) = the sum of x[runs[i].w + k]^2 over k < runs[i].n,
 * one block per run, in an order fixed by its n. */
void k_cuda_sum_squares_runs(double *out, const float *x, const KcRun *runs, int64_t nr);
/* out[r] (device, double) = x[groups[r].w] + ... + x[groups[r].w + groups[r].n - 1],
 * added in that order from 0 (only w and n of a group are read): the
 * second pass of sums of squares taken over pieces of their runs, so that
 * a long run spreads over many blocks and still sums in an order fixed by
 * its length (runtime/device_cuda.c). */
void k_cuda_sum_groups(double *out, const double *x, const KcRun *groups, int64_t nr);

/* --- routed layers (moe.cu) ---------------------------------------------------- */
/* As k_router_*, k_moe_* and k_grouped_linear* of kernels/cpu/kernels.h
 * (moe.c), the same arguments; each also in a _bf16 form whose float
 * tensors are all bf16 (the weight gradient of grouped_linear_dw stays
 * fp32), arithmetic in fp32 and the sums in double as on the CPU. The
 * counts never leave the device: a launch's shape depends on the sizes
 * alone. The dispatch's rows are the CPU's exactly (an integer counting
 * sort in copy order, drops past cap in copy order). The grouped products
 * run as one strided batched GEMM over E experts of `per` rows each (the
 * most rows one expert can hold: min(rows, cap), or the tokens when each
 * token's experts are distinct), on padded copies in the scratch of
 * k_cuda_grouped_scratch(E, per, in, out, bf16) bytes; they need
 * k_cuda_gemm_init. E at most K_CUDA_ROUTER_MAX.
 *
 * The pieces, which a generated program calls one by one (one launch
 * record each): k_cuda_moe_sort (pos and counts: the dispatch's counting
 * sort) and k_cuda_moe_scatter (the rows); and for a grouped product, the
 * scratch's parts (host arithmetic, no launch), k_cuda_grouped_pack (the
 * experts' offsets from the counts, then cols columns padded to per rows
 * an expert), k_cuda_grouped_gemm (the batched GEMM on padded operands)
 * and k_cuda_grouped_unpack (back to the sorted rows, zeros past the kept
 * ones). The whole calls above are exactly these in that order. */
#define K_CUDA_ROUTER_MAX 256 /* = K_ROUTER_PICK_MAX of kernels/formulas.h */
typedef struct KcGrouped {
  int32_t *offs; /* [E + 1] */
  void *a, *b;   /* a [E, per, ca], then b */
} KcGrouped;
/* Which product k_cuda_grouped_gemm runs: y = a op(w) (a the rows, b w),
 * dx = a op'(w) (a dy, b w), both into c (of a's type), or the fp32 weight
 * gradient into c (a x, b dy). */
typedef enum KcGroupedOp { KC_GROUPED_Y = 0, KC_GROUPED_DX = 1, KC_GROUPED_DW = 2 } KcGroupedOp;
KcGrouped k_cuda_grouped_parts(void *scratch, int64_t E, int64_t per, int64_t ca, int bf16);
void k_cuda_moe_sort(int32_t *pos, int32_t *counts, const int32_t *ex, int64_t n, int64_t E,
                     int64_t cap);
#define MOE_DECLS(S, CT)                                                                        \
  void k_cuda_router_fwd##S(CT *w, int32_t *ex, const CT *logits, int64_t tokens, int64_t E,   \
                            int64_t k, int score, int normalize);                              \
  void k_cuda_router_bwd##S(CT *dlogits, const CT *logits, const int32_t *ex, const CT *dw,    \
                            int64_t tokens, int64_t E, int64_t k, int score, int normalize);   \
  void k_cuda_router_load_fwd##S(CT *load, const CT *logits, int64_t tokens, int64_t E,        \
                                 int64_t k);                                                   \
  void k_cuda_router_load_bwd##S(CT *dlogits, const CT *logits, const CT *dload,               \
                                 int64_t tokens, int64_t E);                                   \
  void k_cuda_router_z_loss_fwd##S(CT *loss, const CT *logits, int64_t tokens, int64_t E);     \
  void k_cuda_router_z_loss_bwd##S(CT *dlogits, const CT *logits, const CT *dy,                \
                                   int64_t tokens, int64_t E);                                 \
  void k_cuda_moe_dispatch##S(CT *xs, int32_t *pos, int32_t *counts, const CT *x,              \
                              const int32_t *ex, int64_t tokens, int64_t k, int64_t h,         \
                              int64_t E, int64_t cap);                                         \
  void k_cuda_moe_scatter##S(CT *xs, const CT *x, const int32_t *pos, int64_t n, int64_t k,    \
                             int64_t h);                                                       \
  void k_cuda_grouped_pack##S(CT *xp, const CT *x, const int32_t *counts, int32_t *offs,       \
                              int64_t E, int64_t per, int64_t cols);                           \
  void k_cuda_grouped_unpack##S(CT *y, const CT *yp, const int32_t *offs, int64_t rows,        \
                                int64_t E, int64_t per, int64_t cols);                         \
  void k_cuda_grouped_gemm##S(KcGroupedOp op, void *c, const CT *a, const CT *b, int64_t E,    \
                              int64_t per, int64_t in, int64_t out, int transposed);           \
  void k_cuda_moe_combine##S(CT *y, const CT *ys, const int32_t *pos, const CT *w,             \
                             int64_t tokens, int64_t k, int64_t h);                            \
  void k_cuda_moe_combine_bwd##S(CT *dys, CT *dw, const CT *ys, const int32_t *pos,            \
                                 const CT *w, const CT *dy, int64_t tokens, int64_t k,         \
                                 int64_t h);                                                   \
  void k_cuda_grouped_linear##S(CT *y, const CT *x, const CT *w, const int32_t *counts,        \
                                int64_t rows, int64_t E, int64_t in, int64_t out,              \
                                int transposed, int64_t per, void *scratch);                   \
  void k_cuda_grouped_linear_dx##S(CT *dx, const CT *dy, const CT *w, const int32_t *counts,   \
                                   int64_t rows, int64_t E, int64_t in, int64_t out,           \
                                   int transposed, int64_t per, void *scratch);                \
  void k_cuda_grouped_linear_dw##S(float *dw, const CT *x, const CT *dy, const int32_t *counts, \
                                   int64_t rows, int64_t E, int64_t in, int64_t out,           \
                                   int transposed, int64_t per, void *scratch);
MOE_DECLS(, float)
MOE_DECLS(_bf16, kc_bf16)
#undef MOE_DECLS
int64_t k_cuda_grouped_scratch(int64_t E, int64_t per, int64_t in, int64_t out, int bf16);
/* --ep: as k_ep_plan, k_ep_sort and k_ep_unsort of kernels/cpu/kernels.h
 * (moe_ep.c), the same arguments, the counts in device memory, and the
 * rows' elements of elt bytes (4: fp32, 2: bf16), which only move. */
void k_cuda_ep_plan(int32_t *send, int32_t *each, const int32_t *counts, int64_t E, int64_t size);
void k_cuda_ep_sort(void *rows, int32_t *counts, const void *y, const int32_t *rc, int64_t M,
                    int64_t h, int64_t size, int64_t local, int64_t elt);
void k_cuda_ep_unsort(void *y, const void *rows, const int32_t *rc, int64_t M, int64_t h,
                      int64_t size, int64_t local, int64_t elt);

#ifdef __cplusplus
}
#endif

#endif
