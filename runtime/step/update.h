/* The end of a step (update.c), and the faults tests inject into steps. */
#ifndef SHARD_RT_UPDATE_H
#define SHARD_RT_UPDATE_H

#include <stdint.h>

#include "rt.h"

/* The end of a step once every backward has run: the data-parallel
 * reductions are waited for, --dump-grads written (when dump), then the
 * gradient norm, clipping and the optimizer (with ZeRO-1 the update of
 * this rank's shard and the all-gather of the weights). Fills
 * info->grad_norm and info->lr. */
void rt_update(Rt *rt, int64_t step, int dump, RtStepInfo *info);

/* The fault SHARDC_FAULT asks for (docs/reliability.md), as step `step`
 * (1-based) starts; the NaNs of gradients and weights it arms are put in
 * by rt_update. */
void rt_inject_fault(int64_t step);

#endif
