/* A whole window through the model (window.c). */
#ifndef SHARD_RT_WINDOW_H
#define SHARD_RT_WINDOW_H

#include <stdint.h>

#include "rt.h"

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

#endif
