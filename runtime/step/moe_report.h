/* What a run says of its routed layers (moe_report.c): per step, the
 * token-slots (a token's copy for one of its top-k experts) each layer
 * dropped past its experts' capacity, and its load balance, the most
 * copies any expert was given over the mean; at the end, the totals. */
#ifndef SHARD_RT_MOE_REPORT_H
#define SHARD_RT_MOE_REPORT_H

#include "log.h"

/* After each training step: the step's counts of every routed layer of
 * the model (summed over the microbatches and the data-parallel
 * replicas, gathered from the pipeline stages) into s, nothing for a
 * model without routed layers. Collective over the world. */
void rt_moe_step(RtStepInfo *s);
/* The run's totals, one line on world rank 0 (none without routed layers). */
void rt_moe_report(void);

#endif
