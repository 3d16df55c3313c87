/* The contract between a generated rank program and the runtime library.
 *
 * codegen writes, for each distinct rank program, a C file that defines one
 * `const RtModel rt_model` (tables as data: parameters, inputs, the memory
 * plan) plus the forward and backward functions, and whose main() calls
 * rt_main(). The runtime (training loop, data, optimizer, checkpoints,
 * sampling) only ever sees this struct, so it never depends on the model and
 * the compiler never includes the runtime's sources.
 *
 * `real` is float, or double when the program and the runtime are built
 * with SHARD_REAL_F64 (gradient checks). */
#ifndef SHARD_RT_MODEL_H
#define SHARD_RT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef SHARD_REAL_F64
typedef double real;
#define RT_REAL_NAME "f64"
#else
typedef float real;
#define RT_REAL_NAME "f32"
#endif

#define RT_MAX_RANK 8

typedef enum RtInitKind { RT_INIT_NORMAL, RT_INIT_ZEROS, RT_INIT_ONES } RtInitKind;

/* One trained tensor. Its values live at `offset` (in elements of real)
 * inside the weights region and its gradient at the same offset inside the
 * gradients region; the optimizer state mirrors the same layout. */
typedef struct RtParam {
  const char *name; /* as in the model file: "h.0.attn.c_attn.weight" */
  int rank;
  int64_t shape[RT_MAX_RANK];
  int64_t numel;
  int64_t offset;
  RtInitKind init;
  double mean, std;  /* RT_INIT_NORMAL */
  int weight_decay;  /* 1 for matrices and embeddings, 0 for biases and norms */
  /* Tensor parallelism (all zero in a program of one rank). A split
   * parameter is part tp of t of the whole (padded) tensor global_shape
   * along split_dim; with split_blocks k > 1 the whole is k equal blocks
   * along that dim and the rank holds its part of each, in block order.
   * unpadded > 0: dim pad_dim of global_shape holds `unpadded` real entries
   * (the vocabulary), the rest is padding. Initialisation, checkpoints and
   * --dump-grads deal in the whole unpadded tensor, so that they do not
   * depend on t. */
  int split;         /* 1: split over the tensor axis, 0: replicated */
  int split_dim, split_blocks;
  int64_t global_shape[RT_MAX_RANK];
  int pad_dim;
  int64_t unpadded;
} RtParam;

/* A model input (token ids, targets): int32 at `offset` bytes into the
 * activation region, shape [batch, seq]. */
typedef struct RtInput {
  const char *name;
  int rank;
  int64_t shape[RT_MAX_RANK];
  int64_t numel;
  int64_t offset_bytes;
  int is_target;     /* read from the shifted window (the next tokens) */
} RtInput;

/* Bytes of each region of the memory plan, as `shardc compile` prints them.
 * The program allocates exactly their sum, once. */
typedef struct RtPlan {
  int64_t weights, grads, optimizer, activations, temporaries;
} RtPlan;

struct RtCtx;

typedef struct RtModel {
  const char *name;          /* model name */
  const char *source;        /* model file it was compiled from */
  const char *defines;       /* the -D overrides, "layers=4 hidden=128" */
  int64_t batch, seq, vocab; /* microbatch shape and (real, unpadded) vocabulary */
  const RtParam *params;
  int nparams;
  int64_t nweights;          /* elements of real in the weights region */
  const RtInput *inputs;
  int ninputs;
  RtPlan plan;
  /* Offsets (bytes into the activation region) of the loss (one real) and
   * of the logits [batch, seq, vocab] as they stand after forward(). */
  int64_t loss_offset, logits_offset;
  /* Offset of the scalar loss gradient seed d(loss) read by backward. */
  int64_t dloss_offset;
  /* forward() computes the loss (and keeps what backward needs);
   * backward() adds this microbatch's gradients into the grads region. */
  void (*forward)(struct RtCtx *ctx);
  void (*backward)(struct RtCtx *ctx);
  /* The mesh the program was compiled for: t, p, d ranks along the tensor,
   * pipeline and data axes (0 means 1). All t tensor-parallel ranks run
   * this one program; their rank is RtCtx.tp. */
  int mesh_tp, mesh_pp, mesh_dp;
  /* Columns of this rank's logits: vocab, or with tensor parallelism its
   * part of the padded vocabulary (0 means vocab). */
  int64_t logits_cols;
} RtModel;

/* What the generated functions see. */
typedef struct RtCtx {
  const RtModel *model;
  real *weights;              /* nweights elements */
  real *grads;                /* nweights elements */
  unsigned char *activations; /* plan.activations + plan.temporaries bytes */
  uint64_t seed;              /* dropout: per step and microbatch */
  int training;               /* 0 in evaluation: dropout off */
  /* Tensor parallelism: this rank's index and the group's size (0 and 1
   * in a program of one rank), and the tensor-axis communicator of
   * runtime/comm.h that the generated collectives use (NULL when t = 1). */
  int tp, tp_size;
  struct RtComm *tp_comm;
} RtCtx;

/* The runtime's entry point: flags, training loop, checkpoints, sampling. */
int rt_main(const RtModel *model, int argc, char **argv);

#endif
