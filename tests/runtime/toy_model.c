/* A hand-written rank program for testing the runtime without the
 * compiler: a bigram model (embedding -> linear head -> cross-entropy) over
 * bytes, with tables laid out the way codegen lays them out.
 *
 *   x      = wte[tokens]                 [N, H]     N = BATCH * SEQ
 *   logits = x head.weight^T + head.bias [N, V]
 *   loss   = cross_entropy(logits, targets)
 */
#include "kernels.h"
#include "../../abi/model.h"

#include <stdlib.h>
#include <string.h>

enum { BATCH = 4, SEQ = 8, V = 256, H = 16, N = BATCH * SEQ };

#define AL(x) (((x) + 63) / 64 * 64)
#define R ((int64_t)sizeof(real))

/* Activations (kept for backward), bytes into ctx->activations. */
#define OFF_TOKENS 0
#define OFF_TARGETS AL(OFF_TOKENS + N * 4)
#define OFF_LOSS AL(OFF_TARGETS + N * 4)
#define OFF_DLOSS AL(OFF_LOSS + R)
#define OFF_X AL(OFF_DLOSS + R)
#define OFF_LOGITS AL(OFF_X + N * H * R)
#define ACT_BYTES AL(OFF_LOGITS + N * V * R)
/* Temporaries of the backward, after the activations: the locations of
 * abi/model.h count through both (a program of one chunk gets them as
 * one block, so ctx->activations reaches them too). */
#define OFF_DLOGITS ACT_BYTES
#define OFF_DX AL(OFF_DLOGITS + N * V * R)
#define OFF_DWTE AL(OFF_DX + N * H * R)
#define OFF_DBIAS AL(OFF_DWTE + V * H * R)
#define TMP_BYTES (AL(OFF_DBIAS + V * R) - ACT_BYTES)

/* Weights, in elements of real. */
#define W_WTE 0
#define W_HEAD (V * H)
#define W_BIAS (2 * V * H)
#define NWEIGHTS (2 * V * H + V)

#define ACT(ctx, off, type) ((type *)((ctx)->activations + (off)))

static void forward(RtCtx *ctx) {
  const int32_t *tokens = ACT(ctx, OFF_TOKENS, int32_t), *targets = ACT(ctx, OFF_TARGETS, int32_t);
  real *x = ACT(ctx, OFF_X, real), *logits = ACT(ctx, OFF_LOGITS, real);
  const real *w = ctx->weights;
  k_embedding_fwd(x, tokens, w + W_WTE, N, H);
  k_gemm(0, 1, N, V, H, 1, x, H, w + W_HEAD, H, 0, logits, V);
  k_add_bias(logits, w + W_BIAS, N, V);
  k_cross_entropy_fwd(ACT(ctx, OFF_LOSS, real), logits, targets, N, V, V);
}

static void add_into(real *dst, const real *src, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    dst[i] += src[i];
}

/* Adds this microbatch's gradients into ctx->grads. */
static void backward(RtCtx *ctx) {
  const int32_t *tokens = ACT(ctx, OFF_TOKENS, int32_t), *targets = ACT(ctx, OFF_TARGETS, int32_t);
  const real *x = ACT(ctx, OFF_X, real), *logits = ACT(ctx, OFF_LOGITS, real);
  real *dlogits = ACT(ctx, OFF_DLOGITS, real), *dx = ACT(ctx, OFF_DX, real);
  real *dwte = ACT(ctx, OFF_DWTE, real), *dbias = ACT(ctx, OFF_DBIAS, real);
  const real *w = ctx->weights;
  real *g = ctx->grads;
  k_cross_entropy_bwd(dlogits, logits, targets, ACT(ctx, OFF_DLOSS, real), N, V, V);
  k_gemm(1, 0, V, H, N, 1, dlogits, V, x, H, 1, g + W_HEAD, H);
  k_sum_rows(dbias, dlogits, N, V);
  /* A deliberate 1% error, to see the gradient check fail. */
  if (getenv("TOY_WRONG_BIAS_GRAD")) dbias[V / 2] *= (real)1.01;
  add_into(g + W_BIAS, dbias, V);
  k_gemm(0, 0, N, H, V, 1, dlogits, V, w + W_HEAD, H, 0, dx, H);
  k_embedding_bwd(dwte, tokens, dx, N, V, H);
  add_into(g + W_WTE, dwte, V * H);
}

static const RtParam params[] = {
    {"wte.weight", 2, {V, H}, V *H, W_WTE, RT_INIT_NORMAL, 0, 0.02, 1, 0, 0, 1, {0}, 0, 0, 0, 0},
    {"head.weight", 2, {V, H}, V *H, W_HEAD, RT_INIT_NORMAL, 0, 0.02, 1, 0, 0, 1, {0}, 0, 0, 0, 0},
    {"head.bias", 1, {V}, V, W_BIAS, RT_INIT_ZEROS, 0, 0, 0, 0, 0, 1, {0}, 0, 0, 0, 0},
};

static const RtInput inputs[] = {
    {"tokens", 2, {BATCH, SEQ}, N, OFF_TOKENS, 0, 0},
    {"targets", 2, {BATCH, SEQ}, N, OFF_TARGETS, 1, 0},
};

static const RtChunk chunk = {
    .vstage = 0,
    .forward = forward,
    .backward = backward,
    .activations = ACT_BYTES,
    .temporaries = TMP_BYTES,
    .inputs = inputs,
    .ninputs = 2,
    .has_loss = 1,
    .loss_offset = OFF_LOSS,
    .logits_offset = OFF_LOGITS,
    .dloss_offset = OFF_DLOSS,
    .weights_begin = 0,
    .weights_end = NWEIGHTS,
};

static const RtModel toy = {
    .name = "toy",
    .source = "toy_model.c",
    .defines = "",
    .batch = BATCH,
    .seq = SEQ,
    .vocab = V,
    .params = params,
    .nparams = 3,
    .nweights = NWEIGHTS,
    .plan = {NWEIGHTS * R, NWEIGHTS *R, 2 * NWEIGHTS *R, ACT_BYTES, TMP_BYTES},
    .chunks = &chunk,
    .nchunks = 1,
};

int main(int argc, char **argv) { return rt_main(&toy, argc, argv); }
