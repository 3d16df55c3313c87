/* --trace FILE: the wall time of every action a rank runs, for a bounded
 * number of steps, gathered at the end into one Chrome trace whose events
 * are named as `shardc simulate --trace` names them (one process per rank,
 * named by its coordinates), so that `shardc compare-trace` can set the
 * measured step beside the simulated one.
 *
 * The events go into a buffer allocated once, before the first step, so
 * recording costs two clock reads and a store per action and never an
 * allocation; without --trace every call returns at once. */
#ifndef SHARD_RT_TRACE_H
#define SHARD_RT_TRACE_H

#include <stdint.h>

#include "../../abi/schedule.h"

typedef struct Rt Rt;

/* Before the first step (collective: a barrier over the world sets every
 * rank's origin of time). first: the step training starts at. */
void rt_trace_open(Rt *rt, int64_t first);
/* At the start of step s (0-based): whether its actions are recorded. */
void rt_trace_step(int64_t s);
/* The time now when this step is recorded, 0 otherwise. */
double rt_trace_now(void);
/* One action from `from` to `to` (rt_trace_now's times); nothing unless
 * this step is recorded. */
void rt_trace_add(const RtSchedAction *a, double from, double to);
/* The same for an action given by its fields. */
void rt_trace_add_kind(int kind, int chunk, int mb, double from, double to);
/* After the last step (collective): rank 0 gathers every rank's events and
 * writes the file. */
void rt_trace_close(Rt *rt);

#endif
