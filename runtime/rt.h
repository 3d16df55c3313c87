/* What the runtime's files share: the state of one run. Nothing here is
 * seen by generated programs (they see model.h only). */
#ifndef SHARD_RT_H
#define SHARD_RT_H

#include <stdint.h>

#include "data.h"
#include "flags.h"
#include "log.h"
#include "../abi/mesh.h"
#include "../abi/model.h"
#include "rng.h"
#include "safetensors.h"

typedef struct RtDp RtDp;     /* dp.c */
typedef struct RtExec RtExec; /* exec.c */

typedef struct Rt {
  const RtModel *model;
  RtFlags f;
  RtCtx ctx;
  /* The one allocation of the memory plan: weights, grads and optimizer
   * state, and with one chunk (p = 1) its activations and temporaries
   * right after each other. A pipeline stage's activations (one slot per
   * microbatch in flight) and temporaries belong to the executor. */
  unsigned char *mem;
  /* AdamW's m and v inside the optimizer region, rt_zero_state_numel
   * reals each in the layout of zero.h (this rank's shard of every bucket
   * with ZeRO-1, else mirroring the weights); NULL for sgd. */
  real *adam_m, *adam_v;
  /* The mesh the program runs on and this rank's place in it: {1, 1, 1}
   * and all 0 for a program of one rank. */
  RtMesh mesh;
  RtCoord coord;
  int64_t micro;         /* microbatches per step on each data-parallel replica: m */
  int64_t rows;          /* tokens per microbatch: batch * seq */
  RtData *train, *val;
  int32_t *window;       /* the step's global_batch * seq + 1 tokens */
  /* During a step, window is the host buffer of a slot of `stage` (a new
   * struct RtDevStage of device.h, set up by the first rt_fetch_window) and
   * window_dev its copy in model memory, from which the inputs are loaded;
   * rt_end_window puts back `window_buf`, the buffer evaluation and
   * sampling fill themselves, and clears window_dev. */
  int32_t *window_buf;
  const int32_t *window_dev;
  struct RtDevStage *stage;
  int64_t stage_step[2]; /* the step whose window each slot holds; -1: none */
  double *norm_partials; /* one per chunk of the gradient norm */
  int64_t norm_chunks;
  int64_t step;          /* optimizer steps completed */
  RtRng rng;             /* sampling's stream, carried by checkpoints */
  RtStFile resume;       /* the state file while resuming */
  double skipped;        /* seconds of this step spent on --dump-grads */
  int64_t nan_steps;     /* steps whose update --on-nan skip dropped */
  int preempted;         /* SIGTERM or SIGINT stopped training after rt->step */
  RtDp *dp;              /* data parallelism (dp.c); NULL when d = 1 */
  RtExec *exec;          /* the pipeline executor (exec.c); NULL when p = 1 */
  /* The run's identity in its checkpoints (CKPT_RUN_ID_KEY): random at a
   * fresh start, the checkpoint's on --resume. */
  char run_id[40];
  int lock_fd;           /* world rank 0: the lock held on --save DIR, -1 none */
} Rt;

/* batch.c: moving windows into the model and running it. */
/* Where location o of chunk c lies (model.h): in the running (chunk,
 * microbatch)'s activations below c->activations, in the temporaries
 * above. */
static inline unsigned char *rt_loc(const RtCtx *ctx, const RtChunk *c, int64_t o) {
  return o < c->activations ? ctx->activations + o : ctx->temporaries + (o - c->activations);
}
/* Loads global microbatch g of a window into chunk c's inputs: inputs are
 * its tokens from g*rows on, targets the tokens one further. */
void rt_load_inputs(Rt *rt, const RtChunk *c, const int32_t *window, int64_t g);
/* rt_load_inputs of a program of one chunk. */
void rt_load_micro(Rt *rt, const int32_t *window, int64_t m);
/* The loss chunk c (the last virtual stage) left after its forward, copied
 * out of the device. */
double rt_chunk_loss(const RtCtx *ctx, const RtChunk *c);
/* Writes the loss gradient seed 1/(m*d) that chunk c's backward reads. */
void rt_seed_dloss(Rt *rt, const RtChunk *c);
/* Adds the loss chunk c just computed to the step's sum on the device
 * (rt_dev_loss_add), which the step reads once, at its end. */
void rt_chunk_loss_add(const RtCtx *ctx, const RtChunk *c);
/* Zeroes the grads region at the start of a step (profiled as
 * "S zero_grads"). */
void rt_zero_grads(Rt *rt);
/* The dropout seed of global microbatch g of a step: the same whatever the
 * mesh, so that every layout trains the same model. */
uint64_t rt_dropout_seed(const Rt *rt, int64_t step, int64_t g);
/* The global microbatch index of this replica's microbatch k. */
static inline int64_t rt_global_mb(const Rt *rt, int64_t k) {
  return (int64_t)rt->coord.dp * rt->micro + k;
}
/* The mean of a quantity the last pipeline stage sums (losses): `sum` is
 * this rank's part, `count` the number of terms over all data-parallel
 * replicas. Every rank gets the mean; on a mesh of one stage and one
 * replica it is just sum / count. */
double rt_mesh_mean(Rt *rt, double sum, int64_t count);
/* The gradient of a whole step's window into the grads region: this
 * replica's m microbatches, d_loss = 1/(m*d) each, the data-parallel
 * reductions started as their gradients complete. Returns the step's mean
 * loss over all replicas. The dropout seed depends on (seed, step, global
 * microbatch) only. One chunk only (p = 1); a pipeline runs exec.c. */
double rt_window_grads(Rt *rt, const int32_t *window, int64_t step);
/* The mean loss of a window, forward only, with the same dropout seeds
 * (training = 1) as rt_window_grads or without dropout (training = 0). */
double rt_window_loss(Rt *rt, const int32_t *window, int64_t step, int training);
/* Mean loss over --eval-batches windows of --val-data, dropout off; the
 * data-parallel replicas share the windows out. */
double rt_eval(Rt *rt);
/* The step's window of training data (or seeded random tokens when there
 * is no --data, which only gradient checks do) into rt->window, and its
 * copy in model memory (staged through a slot of rt->stage) into
 * rt->window_dev; then the next step's window is copied into the other
 * slot while this step runs. The windows are those of the step numbers,
 * whenever they are read: the data order does not change. */
void rt_fetch_window(Rt *rt, int64_t step);
/* After the step: rt->window is the plain host buffer again. */
void rt_end_window(Rt *rt);

/* graphs.c: the calls of the chunk functions. */
typedef enum RtChunkFn { RT_FN_FORWARD, RT_FN_BACKWARD, RT_FN_WGRAD } RtChunkFn;
/* Runs function f of chunk c on rt->ctx: as a CUDA graph where the
 * program says it may be captured (RtModel.graphs) and --cuda-graphs is
 * on, else as a plain call; first the step's values the program's
 * captured kernels read (RtGraphs.step_values). */
void rt_chunk_call(Rt *rt, int c, RtChunkFn f);
/* For the banner of a CUDA program: which functions run as graphs, which
 * do not and why. */
void rt_graphs_describe(const Rt *rt, char *buf, int len);
/* Prints how many graphs were captured and replayed (when any function
 * ran through them) and frees them. */
void rt_graphs_finish(Rt *rt);

/* main.c: the end of a step once every backward has run: the
 * data-parallel reductions are waited for, --dump-grads written (when
 * dump), then the gradient norm, clipping and the optimizer (with ZeRO-1
 * the update of this rank's shard and the all-gather of the weights).
 * Fills info->grad_norm and info->lr. */
void rt_update(Rt *rt, int64_t step, int dump, RtStepInfo *info);

/* init.c: the initial weights, a function of --seed and each name, into a
 * host array laid out like the weights region (main.c copies it to the
 * device). */
void rt_init_params(const RtModel *m, real *weights, uint64_t seed);

#endif
