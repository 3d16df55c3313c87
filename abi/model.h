/* The contract between a generated rank program and the runtime library.
 *
 * codegen writes, for each distinct rank program (one per pipeline
 * stage), a C file that defines one `const RtModel rt_model` (tables as
 * data: parameters, the memory plan, the model chunks with their inputs
 * and messages, the gradient buckets, the stage's schedule) plus each
 * chunk's forward and backward functions, and whose main() calls
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

#include "schedule.h"

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
  /* Pipeline parallelism: 1 when the first and the last pipeline stage
   * each hold a copy of this parameter (the tied GPT-2 embedding; both
   * copies carry the same name); their gradients are summed over the
   * embedding group every step, so the copies stay identical. 2 for the
   * last virtual stage's copy when the first stage holds both (zb-v's V
   * placement; the original there is 1): that stage sums the two itself,
   * and only the original is counted in norms and checkpoints. */
  int tied;
  /* Expert parallelism (--ep E): 1 when dim 0 is this expert rank's E-th
   * part of the experts (expert rank r holds global_shape[0] / E experts
   * from r * shape[0]); such a parameter is not split over the tensor
   * axis, and its gradient is summed over the ranks that hold the same
   * experts (RtBucket.expert). */
  int expert;
} RtParam;

/* A model input (token ids, targets): int32 at location `offset_bytes` of
 * the chunk that reads it (see Locations below), shape [batch, seq]. */
typedef struct RtInput {
  const char *name;
  int rank;
  int64_t shape[RT_MAX_RANK];
  int64_t numel;
  int64_t offset_bytes;
  int is_target;     /* read from the shifted window (the next tokens) */
  /* RT_MLM_* of runtime/mlm.h: 0 the window as it is (or shifted, above);
   * 1 masked ids, 2 labels, 3 the key-padding mask of masked-LM examples
   * made from the window (a model whose loss has ignore=1). */
  int mlm;
} RtInput;

/* Bytes of each region of the memory plan, as `shardc compile` prints them.
 * activations: one microbatch's kept values of every chunk together (the
 * sum of the chunks' `activations`); temporaries: the largest chunk's. A
 * program of one chunk allocates exactly the sum of the five, once; a
 * pipeline stage holds one set of a chunk's activations per microbatch it
 * has in flight (see RtChunk). */
typedef struct RtPlan {
  int64_t weights, grads, optimizer, activations, temporaries;
} RtPlan;

/* The plan's bytes in all: what a rank of a program of one chunk
 * allocates, and what `shardc run` (driver/memcheck.c) and the program
 * itself check against the machine's memory. */
static inline int64_t rt_plan_total(const RtPlan *p) {
  return p->weights + p->grads + p->optimizer + p->activations + p->temporaries;
}

/* Locations. Every byte offset of a chunk below (inputs, loss, logits,
 * d_loss, message parts) counts through the chunk's activations and then
 * its temporaries, as if they were one buffer: an offset o below
 * RtChunk.activations is ctx->activations + o, any other is
 * ctx->temporaries + (o - RtChunk.activations). In a program of one chunk
 * the runtime allocates the two back to back, so o is simply
 * ctx->activations + o. */

/* One tensor of a pipeline message: `numel` reals (bf16 where
 * RtModel.messages_bf16 says so) at `offset`. A message is the
 * concatenation of its parts, in order. */
typedef struct RtMsgPart {
  int64_t offset;
  int64_t numel;
} RtMsgPart;

struct RtCtx;

/* One model chunk: the layers of one virtual stage (chunk c of pipeline
 * stage r is virtual stage c*p + r; a program without pipeline
 * parallelism is one chunk, virtual stage 0 of 1). forward() runs one
 * microbatch through it and keeps in the chunk's activations what
 * backward() reads; backward() adds this microbatch's gradients of the
 * chunk's parameters into the grads region.
 *
 * Each (chunk, microbatch) in flight has its own copy of the chunk's
 * activations (`activations` bytes; RtCtx.activations points at it during
 * the calls); the temporaries are one buffer that every chunk reuses
 * (RtCtx.temporaries), valid from a call's start to its end only.
 *
 * Messages (p > 1): the received activation's parts must be written at
 * recv_act before forward() (their bytes may be temporaries, so the
 * runtime receives into a buffer of its own and copies just before the
 * call); right after forward(), send_act holds the activation for the next
 * virtual stage. Likewise recv_grad is written just before backward(), and
 * right after it send_grad holds the gradient of the received activation
 * for the previous virtual stage. The loss gradient seed is written just
 * before backward() too. A part list is empty where the chunk has no such
 * message (the first virtual stage receives no activation, the last sends
 * none). */
typedef struct RtChunk {
  int vstage;
  void (*forward)(struct RtCtx *ctx);
  void (*backward)(struct RtCtx *ctx);
  int64_t activations; /* bytes of one microbatch's kept values */
  int64_t temporaries; /* bytes of temporaries it needs */
  const RtInput *inputs; /* the model inputs it reads (ids, targets) */
  int ninputs;
  /* The last virtual stage computes the loss: has_loss, and the locations
   * of the loss (one real), of the logits
   * [batch, seq, logits_cols] as they stand after forward() and of the
   * loss gradient seed d(loss) that backward() reads. */
  int has_loss;
  int64_t loss_offset, logits_offset, dloss_offset;
  const RtMsgPart *recv_act, *send_act, *recv_grad, *send_grad;
  int nrecv_act, nsend_act, nrecv_grad, nsend_grad;
  /* Its parameters: elements [weights_begin, weights_end) of the weights. */
  int64_t weights_begin, weights_end;
} RtChunk;

/* A gradient bucket of data parallelism: elements [offset, offset+numel)
 * of the grads region, reduced over the data-parallel group in one call
 * as soon as every gradient in it is final (the generated backward calls
 * RtCtx.bucket_ready after the node that completes the last of them). With
 * ZeRO-1 numel is a multiple of the data-parallel size d and the bucket is
 * reduce-scattered: data-parallel rank i owns elements
 * [offset + i*numel/d, offset + (i+1)*numel/d). Buckets are disjoint,
 * in order of offset, and cover every parameter; `chunk` is the chunk
 * whose parameters it holds; `tied` is 1 when it holds a tied parameter
 * (whose gradient is summed over the embedding group first). */
typedef struct RtBucket {
  int chunk;
  int tied;
  int64_t offset, numel;
  /* E > 1 (the expert ranks of --ep): the bucket holds expert parameters
   * (RtParam.expert) only, and is reduced over the d / E data-parallel
   * ranks that hold the same experts instead of the whole data-parallel
   * group; with ZeRO-1 numel is a multiple of d and the bucket is split
   * over those d / E ranks (runtime/mesh/zero.h). 0: an ordinary bucket. */
  int expert;
} RtBucket;

typedef struct RtModel {
  const char *name;          /* model name */
  const char *source;        /* model file it was compiled from */
  const char *defines;       /* the -D overrides, "layers=4 hidden=128" */
  int64_t batch, seq, vocab; /* microbatch shape and (real, unpadded) vocabulary */
  const RtParam *params;     /* every chunk's, in chunk order */
  int nparams;
  int64_t nweights;          /* elements of real in the weights region */
  RtPlan plan;
  /* The chunks this program runs, by chunk index c (virtual stage c*p + stage). */
  const RtChunk *chunks;
  int nchunks;
  /* The mesh the program was compiled for: t, p, d ranks along the tensor,
   * pipeline and data axes (0 means 1). All t*d ranks of one pipeline
   * stage run one program; `stage` is the stage it is for. */
  int mesh_tp, mesh_pp, mesh_dp;
  int stage;
  /* Columns of this rank's logits: vocab, or with tensor parallelism its
   * part of the padded vocabulary (0 means vocab). */
  int64_t logits_cols;
  /* 1 where the logits are bf16, 2 bytes a column (the CUDA target's
   * --precision bf16); 0: reals. */
  int logits_bf16;
  /* 1 where the pipeline messages are bf16: every RtMsgPart counts
   * elements of 2 bytes, and the runtime sends them as RT_COMM_BF16 (the
   * CUDA target's --precision bf16); 0: reals. */
  int messages_bf16;
  /* Pipeline parallelism (p > 1): this stage's action table
   * (abi/schedule.h), built for `microbatches` microbatches per step
   * on each data-parallel replica. NULL when p = 1: the runtime then runs
   * the microbatches one after the other. */
  const char *schedule;      /* "1f1b", "interleaved", ... */
  const RtSchedAction *actions;
  int32_t nactions;
  int microbatches;
  /* Data parallelism (d > 1): the gradient buckets; zero = 1 with ZeRO-1
   * (the optimizer state holds this rank's shard of every bucket:
   * plan.optimizer = 2 * sum(numel / d) reals). */
  const RtBucket *buckets;
  int nbuckets;
  int zero;
  /* Zero-bubble schedules (W actions): per chunk, the function that runs
   * its W, the parameter gradients its backward() (then B, the input
   * gradient) leaves out. NULL when backward() computes them all. */
  void (*const *wgrad)(struct RtCtx *ctx);
  /* 1: the chunks sit in the V placement of zb-v (abi/schedule.h
   * rt_vstage), where virtual stages p - 1 and p share the last stage and
   * pass their tensors in memory; 0: chunk c is virtual stage c p + stage. */
  int vshape;
  /* CUDA graphs (the CUDA target; NULL in every other program): which
   * chunk functions may be captured once and replayed, and how the values
   * of a step reach the captured kernels. */
  const struct RtGraphs *graphs;
  /* Expert parallelism: the expert ranks E of each group of E consecutive
   * data-parallel ranks (0 or 1: none). */
  int mesh_ep;
} RtModel;

/* A CUDA program's chunk functions as graphs (runtime/step/graphs.c). The
 * compiler decides which functions may be captured: those that launch
 * kernels, cuBLASLt calls and device-to-device copies on the compute
 * stream only, at pointers and sizes that are the same at every call
 * given the same RtCtx pointers. A function that talks to the host in the
 * middle (a collective over rt_comm, the data-parallel BUCKET_READY and
 * POLL hooks) is not. The runtime captures a function on its second call
 * for each set of pointers (the first is the warm-up that fills cuBLASLt's
 * algorithm cache and the program's other lazy state) and replays it
 * afterwards. */
typedef struct RtGraphs {
  /* [3 * c + f] for chunk c and f = 0 forward, 1 backward, 2 wgrad: NULL
   * where that function may be captured, else why not (for the start-up
   * log); a wgrad that does not exist reads "no W". */
  const char *const *why_not;
  /* Writes the values of one step that captured kernels read from device
   * memory (ctx->seed and ctx->training, for dropout) into that memory,
   * on the compute stream; the runtime calls it before every call of a
   * chunk function, captured or not. NULL: the program reads none. */
  void (*step_values)(const struct RtCtx *ctx);
  /* Why this build captures nothing at all (the per-op timer of
   * SHARD_PROFILE waits for the GPU after every node); NULL otherwise. */
  const char *off;
} RtGraphs;

/* Chunk c's W function, or NULL when its backward is not split. */
static inline void (*rt_chunk_wgrad(const RtModel *m, int c))(struct RtCtx *) {
  return m->wgrad ? m->wgrad[c] : 0;
}

/* What the generated functions see. */
typedef struct RtCtx {
  const RtModel *model;
  real *weights;              /* nweights elements */
  real *grads;                /* nweights elements */
  unsigned char *activations; /* the running (chunk, microbatch)'s kept values */
  unsigned char *temporaries; /* shared scratch */
  uint64_t seed;              /* dropout: per step and microbatch */
  int training;               /* 0 in evaluation: dropout off */
  /* Tensor parallelism: this rank's index and the group's size (0 and 1
   * in a program of one rank), and the tensor-axis communicator of
   * runtime/comm/comm.h that the generated collectives use (NULL when t = 1). */
  int tp, tp_size;
  struct RtComm *tp_comm;
  /* Data parallelism: the generated backward calls bucket_ready(ctx, b)
   * once bucket b's gradients of this microbatch are complete, and poll()
   * between its nodes, so that reductions in flight progress. Either may
   * be NULL. */
  void (*bucket_ready)(struct RtCtx *ctx, int bucket);
  void (*poll)(struct RtCtx *ctx);
  void *runtime; /* the runtime's state, for the hooks */
  /* Expert parallelism (--ep E): this rank's index among the E expert
   * ranks of its group (E consecutive data-parallel ranks), E, and the
   * group's communicator, on which the generated all_to_all moves tokens
   * (NULL when E = 1). */
  int ep, ep_size;
  struct RtComm *ep_comm;
} RtCtx;

/* The runtime's entry point: flags, training loop, checkpoints, sampling. */
int rt_main(const RtModel *model, int argc, char **argv);

#endif
