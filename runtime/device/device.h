/* The device layer: where a rank program's model memory lives, and every
 * operation the runtime performs on it.
 *
 * Model memory is the memory plan's regions (weights, gradients, optimizer
 * state, activations, temporaries), a pipeline stage's stash slots and
 * message buffers, and nothing else. It is addressed by the same pointers
 * the generated programs get in RtCtx, so a target's generated code and
 * its device agree on what a pointer means: on the CPU device they are
 * host addresses, on a GPU they would be device addresses. Above this layer
 * the runtime (training loop, executor, data parallelism, ZeRO-1,
 * checkpoints, sampling, gradient checks) never dereferences, copies or
 * zeroes model memory itself; it calls these functions, or comm.h, which
 * moves model memory between ranks.
 *
 * Host data (token windows, checkpoint tensors, logits being sampled,
 * losses, norms) crosses the layer explicitly with rt_dev_to_host and
 * rt_dev_from_host into or out of a host staging buffer, so that what is
 * written to a file never depends on the device that wrote it.
 *
 * Pointers below say where they live: `dev` (or a region name) is model
 * memory, `host` is ordinary host memory. Byte counts are int64_t; element
 * counts are of `real`. Every function may be called only from the thread
 * that runs the training loop (the one that calls comm.h). Operations that
 * write host memory are complete when they return; the others may still be
 * running on the device until rt_dev_sync (the CPU device finishes every
 * call before returning).
 *
 * A program links exactly one device: device_cpu.c for the CPU target. */
#ifndef SHARD_RT_DEVICE_H
#define SHARD_RT_DEVICE_H

#include <stdint.h>

#include "../../abi/model.h"

/* ------------------------------------------------------------ memory */

/* `bytes` of model memory, 64-byte aligned, its contents undefined (call
 * rt_dev_zero for zeros). `what` names it in the message when there is not
 * enough memory, which ends the run. The memory plan is one such
 * allocation, split by offsets (main.c); the pipeline executor allocates
 * its temporaries, stash slots and message buffers here too. */
void *rt_dev_alloc(int64_t bytes, const char *what);
/* The bytes of model memory this machine has left for its ranks
 * together: JOB_MEMORY_LIMIT_ENV when set (abi/job.h), else the host's
 * MemAvailable (CPU) or the device's free memory (cudaMemGetInfo); -1 when
 * not known. *source says which, for the message; *host whether model
 * memory is host memory (which `shardc run` has checked already). */
int64_t rt_dev_mem_available(const char **source, int *host);
/* Frees what rt_dev_alloc returned; NULL is allowed. */
void rt_dev_free(void *dev);
/* Sets `bytes` of model memory from dev on to zero. */
void rt_dev_zero(void *dev, int64_t bytes);

/* ------------------------------------------------------------- copies */

/* Model memory to host memory: `bytes` from dev into host. */
void rt_dev_to_host(void *host, const void *dev, int64_t bytes);
/* Host memory to model memory: `bytes` from host into dev. */
void rt_dev_from_host(void *dev, const void *host, int64_t bytes);
/* Model memory to model memory: `bytes` from src into dst, which do not
 * overlap (pipeline messages in and out of a chunk's locations). */
void rt_dev_copy(void *dst, const void *src, int64_t bytes);
/* Model memory: y[i] += x[i] for i < n (the two local copies of a tied
 * parameter's gradient, exec.c). */
void rt_dev_accumulate(real *y, const real *x, int64_t n);
/* Model memory at dst was written by someone other than the device layer
 * (the comm backend: ZeRO-1's all-gather of the updated weights, the tied
 * weights' broadcast), so whatever the device derives from it is stale: on
 * CUDA, the bf16 working copy of the weights is cast afresh before its next
 * use. Nothing on the CPU device. */
void rt_dev_written(void *dst, int64_t bytes);

/* Waits until every operation issued so far is complete. */
void rt_dev_sync(void);
/* y = v for n reals, queued like a kernel: no wait for the device, as a
 * copy from the host would (a step's constants, the loss's seed). */
void rt_dev_fill(real *dev, real v, int64_t n);
/* The step's loss sum, kept on the device so that a step reads it once:
 * rt_dev_loss_add queues the addition of the real at dev (a microbatch's
 * loss) to the sum, in double and in call order (the host loop's sum, to
 * the bit); rt_dev_loss_take waits for the device, returns the sum and
 * starts the next at 0. */
void rt_dev_loss_add(const real *dev);
double rt_dev_loss_take(void);
/* The routed layers' dispatch counts (kernels' k_moe_count, k_moe_take):
 * on for the forward of virtual stage vstage, -1 off; the take gives the
 * slots counted since the last one (0 where the target counts none). */
typedef struct RtDevMoeStat {
  int vstage, layer;
  int64_t experts, copies, dropped;
  int64_t demand[256];
} RtDevMoeStat;
void rt_dev_moe_count(int vstage);
int rt_dev_moe_take(RtDevMoeStat *out, int max);

/* ---------------------------------------------------------- host views */

/* Host access to `bytes` of model memory at dev, for what the host
 * computes or reads in bulk (the initial weights). Where model memory is
 * host memory (the CPU device) the view is that memory itself, so no
 * second copy of the model is ever resident beside the memory plan;
 * elsewhere it is a host buffer that holds dev's contents when this
 * returns. rt_dev_view_end releases the view, first copying it into dev
 * when `written` is non-zero. */
void *rt_dev_view_begin(void *dev, int64_t bytes);
void rt_dev_view_end(void *dev, void *view, int64_t bytes, int written);

/* ------------------------------------------------------ staged windows */

/* Token windows on their way into the model's inputs, in two slots (the
 * current step's and the next one's), each a host buffer and its copy in
 * model memory. The runtime fills a slot's host buffer, rt_dev_stage_put
 * issues the copy and returns at once, and rt_dev_stage_get hands out the
 * model-memory copy, ordered before every operation issued after it. On
 * the CUDA device the host buffers are pinned (cudaHostAlloc) and the copy
 * runs on a stream of its own, so the next window's copy overlaps the step
 * that runs meanwhile; on the CPU device a slot's host buffer is its copy
 * (ordinary memory, nothing to copy). */
typedef struct RtDevStage RtDevStage;
RtDevStage *rt_dev_stage_new(int64_t bytes);
/* Slot `slot` (0 or 1)'s host buffer, to fill: the copy the slot's last
 * put issued is complete when this returns. */
void *rt_dev_stage_host(RtDevStage *s, int slot);
/* Copies the slot's host buffer into its model memory, once everything
 * issued before (the last readers of its previous contents) is done. */
void rt_dev_stage_put(RtDevStage *s, int slot);
/* The slot's model memory, holding what its last put copied for every
 * operation issued from now on. */
const void *rt_dev_stage_get(RtDevStage *s, int slot);
void rt_dev_stage_free(RtDevStage *s);

/* The CUDA device only (device_cuda.c), for the programs of --precision
 * bf16: the bf16 working copy (the bits of n bfloat16s) of the n fp32
 * master weights at w, allocated on the first call and refreshed from
 * the masters whenever they changed since (a copy into them, the
 * optimizer's step). */
uint16_t *rt_dev_weights_bf16(const real *w, int64_t n);

/* ------------------------------------------------------- CUDA graphs */

/* The graphs of one chunk function, one per set of pointers it ran at
 * (rt_dev_graph_call); opaque to the caller. */
typedef struct RtDevGraphs RtDevGraphs;

typedef enum RtDevGraphRun {
  RT_DEV_GRAPH_PLAIN,    /* fn ran as plain calls: the warm-up of these pointers */
  RT_DEV_GRAPH_CAPTURED, /* fn was captured into a new graph, which then ran */
  RT_DEV_GRAPH_REPLAYED, /* the graph captured at these pointers ran again */
} RtDevGraphRun;

/* Runs fn(ctx), a chunk function the compiler marked capturable
 * (RtGraphs), through a graph of its launches: *g holds its graphs (NULL
 * before the first call). A graph is keyed by the pointers fn bakes into
 * its launches: ctx's weights, grads, activations and temporaries, and
 * the device's own (the bf16 working copy of the weights, which is cast
 * afresh before every call where it is stale, since a graph cannot). The
 * first call at a key runs fn plainly, the second captures and runs it,
 * later ones replay it. A capture that fails ends the run with CUDA's
 * error. Devices without graphs (the CPU) always run fn plainly. */
RtDevGraphRun rt_dev_graph_call(RtDevGraphs **g, void (*fn)(RtCtx *), RtCtx *ctx);
/* Frees every graph of *g; NULL is allowed. */
void rt_dev_graph_free(RtDevGraphs *g);

/* ---------------------------------------------- the optimizer and norms */

/* A run of n elements of the weights (and gradients) from element w on,
 * inside one parameter whose RtParam.weight_decay is `decay`; its AdamW
 * state starts at element s of m and v. ZeRO-1 updates its shard as such
 * runs (dp.c); the sums of squares below read only w and n. */
typedef struct RtDevRange {
  int64_t w, s, n;
  int decay;
} RtDevRange;

/* The constants of one optimizer step, computed on the host (optim.c) and
 * the same for every element. */
typedef struct RtDevOpt {
  int adamw;         /* 1: AdamW, 0: SGD */
  real grad_scale;   /* clipping: the gradient is taken times this */
  real decay;        /* 1 - lr * weight_decay: the factor of a decayed weight */
  real lr;           /* SGD's rate */
  real beta1, beta2, eps;
  real step_size;    /* AdamW: lr / (1 - beta1^t) */
  real bc2_sqrt;     /* AdamW: sqrt(1 - beta2^t) */
} RtDevOpt;

/* One optimizer step over every parameter of m, in place: w (weights),
 * g (gradients), mom and vel (AdamW's m and v, laid out like the weights;
 * unused and possibly NULL for SGD) are all model memory. A parameter
 * whose weight_decay is 0 is updated with a decay factor of exactly 1.
 * AdamW follows torch.optim.AdamW (kernels' k_adamw); SGD is
 * w = w * decay - lr * g * grad_scale. */
void rt_dev_update_params(const RtModel *m, real *w, const real *g, real *mom, real *vel,
                          const RtDevOpt *o);
/* The same step over the nr runs r (a host array) only; each run's state
 * is at r->s of mom and vel. Element by element the same arithmetic as
 * rt_dev_update_params, so ZeRO-1 and the unsharded update agree. */
void rt_dev_update_ranges(const RtDevRange *r, int64_t nr, real *w, const real *g, real *mom,
                          real *vel, const RtDevOpt *o);

/* out[i] (host) = the sum of x[r[i].w + k]^2 over k < r[i].n, in double,
 * for i < nr: x is model memory, r a host array. Each sum is added in an
 * order fixed by its n alone, so the results do not depend on the thread
 * count or on the other runs; callers add them up in a fixed order. */
void rt_dev_sum_squares(const real *x, const RtDevRange *r, int64_t nr, double *out);
/* The same over the fixed chunks [c * chunk, min((c + 1) * chunk, n)) of
 * x[0, n): out (host) holds ceil(n / chunk) doubles. */
void rt_dev_sum_squares_chunked(const real *x, int64_t n, int64_t chunk, double *out);
/* The same over k arrays x[i][0, n[i]) at once: out (host) holds each
 * array's ceil(n[i] / chunk) doubles in turn, the bits of one call each,
 * read back together (one host wait on a GPU where k calls take k). */
void rt_dev_sum_squares_chunked_many(int k, const real *const *x, const int64_t *n, int64_t chunk,
                                     double *out);

#endif
