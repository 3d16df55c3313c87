/* Microbatches into the model (batch.c): what the executor, a window of
 * one chunk, sampling and gradient checks share. */
#ifndef SHARD_RT_BATCH_H
#define SHARD_RT_BATCH_H

#include <stdint.h>

#include "rt.h"

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
/* The step's window of training data (or seeded random tokens when there
 * is no --data, which only gradient checks do) into rt->window, and its
 * copy in model memory (staged through a slot of rt->stage) into
 * rt->window_dev; then the next step's window is copied into the other
 * slot while this step runs. The windows are those of the step numbers,
 * whenever they are read: the data order does not change. */
void rt_fetch_window(Rt *rt, int64_t step);
/* After the step: rt->window is the plain host buffer again. */
void rt_end_window(Rt *rt);

#endif
