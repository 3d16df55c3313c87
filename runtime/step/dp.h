/* Data parallelism in the runtime: the bucketed reduction of the gradients
 * over the data-parallel replicas, overlapped with the backward, ZeRO-1's
 * sharded optimizer step, and the gradient norm over the whole mesh.
 *
 * A step: rt_dp_step_begin; for every backward, rt_dp_backward_begin says
 * whether it is the last microbatch's of its chunk, and during that one the
 * generated code's bucket_ready hook starts the reduction of each bucket
 * whose gradients are complete (in place: all-reduce, or with ZeRO-1
 * reduce-scatter, both SUM, since d_loss already holds the 1/d); its poll
 * hook lets MPI progress them between the backward's nodes. The pipeline's
 * REDUCE_GRADS action starts a chunk's buckets (rt_dp_start_chunk).
 * rt_dp_backward_done ends the backward (any bucket still unstarted starts
 * then), rt_dp_start_tied starts the buckets of tied parameters once the
 * embedding group has summed them, and rt_dp_wait waits for all before the
 * optimizer. Every reduction is posted in the same order and form on all
 * replicas, every step: the sums are the same bits on all of them and in
 * every run.
 *
 * With --no-overlap nothing starts during the backward: all buckets start
 * at rt_dp_backward_done and rt_dp_wait times the whole reduction, which is
 * what the overlap saves (--dp-stats prints both timers). */
#ifndef SHARD_RT_DP_H
#define SHARD_RT_DP_H

#include "rt.h"

/* Sets up the buckets and, with d > 1, rt->dp and the ctx hooks. Call
 * after the memory is allocated and the communicators exist. */
void rt_dp_init(Rt *rt);
void rt_dp_free(Rt *rt);

void rt_dp_step_begin(Rt *rt);
/* The backward of chunk `chunk` is about to run; `last`: for the step's
 * last microbatch of that chunk (its buckets may start). */
void rt_dp_backward_begin(Rt *rt, int chunk, int last);
/* Starts every bucket of chunk `chunk` (-1: of every chunk) not started
 * yet, but those of tied parameters. Nothing with --no-overlap. */
void rt_dp_start_chunk(Rt *rt, int chunk);
/* The step's backwards are all done: starts what has not started (but the
 * tied buckets) and notes the time. */
void rt_dp_backward_done(Rt *rt);
/* Starts the buckets of tied parameters (after the embedding group's sum). */
void rt_dp_start_tied(Rt *rt);
/* Waits for every reduction of the step. */
void rt_dp_wait(Rt *rt);
/* Progress for the reductions in flight (the poll hook's work). */
void rt_dp_poll(Rt *rt);
/* Whether a reduction is still in flight, untested (what rt_dp_poll
 * tests first). */
int rt_dp_busy(const Rt *rt);

/* The global gradient norm over the mesh, equal to the one-rank norm: a
 * tensor-split parameter counts on every tensor rank and a replicated one
 * once, a tied parameter on the first pipeline stage only, and with ZeRO-1
 * each replica its own shard. Collective over the tensor, pipeline and
 * (with ZeRO-1) data communicators. */
double rt_mesh_grad_norm(Rt *rt);

/* ZeRO-1: AdamW (t counts from 1) or SGD over this replica's shard of every
 * bucket, then the all-gather of the weights over the data group. */
void rt_dp_zero_adamw(Rt *rt, int64_t t, double lr, double grad_scale);
void rt_dp_zero_sgd(Rt *rt, double lr, double grad_scale);

/* --dp-stats: one line for this rank, the timers averaged over the steps. */
void rt_dp_report(Rt *rt);
/* For the banner: "2 replicas, 5 buckets (1.23 MB), ZeRO-1, ...". */
void rt_dp_describe(const Rt *rt, char *buf, int len);
/* The most bytes MPI stages for the gradient reductions: Open MPI's
 * non-blocking collectives (libnbc) copy each bucket in flight into a
 * buffer of their own, so at most every bucket at once. Outside the plan;
 * the printed plan counts it. */
int64_t rt_dp_staging_bytes(const Rt *rt);
/* The most bytes of reductions in flight at once so far this run: the
 * staging that bound allowed for, as the buckets' timing made it. */
int64_t rt_dp_staging_peak_bytes(const Rt *rt);

#endif
