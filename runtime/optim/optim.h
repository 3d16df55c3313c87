/* The optimizer: learning-rate schedule, gradient norm and clipping, AdamW
 * and SGD updates. */
#ifndef SHARD_RT_OPTIM_H
#define SHARD_RT_OPTIM_H

#include <stdint.h>

#include "device.h"
#include "flags.h"
#include "../../abi/model.h"

/* The learning rate of 0-based step s: linear warmup lr*(s+1)/warmup over
 * the first --warmup steps, then cosine from lr to --lr-min over the rest
 * of --steps (or constant). */
double rt_lr_at(const RtFlags *f, int64_t s);

/* Elements per partial sum of the gradient norm (rt_grad_norm's chunk). */
#define RT_NORM_CHUNK 65536
/* The global L2 norm of n gradients, summed in double over fixed chunks of
 * `chunk` elements: the result does not depend on the thread count.
 * partials holds ceil(n / chunk) doubles. */
double rt_grad_norm(const real *g, int64_t n, int64_t chunk, double *partials);
/* sq[p] (host) = the sum of squares of parameter p's gradients in g (the
 * grads region), for every parameter of m. */
void rt_param_sum_squares(const RtModel *m, const real *g, double *sq);
/* The factor that clips a gradient of this norm to `clip` (1 when clip is 0
 * or the norm is below it), as torch.nn.utils.clip_grad_norm_ computes it. */
double rt_clip_scale(double norm, double clip);

/* One AdamW step (t counts from 1) over every parameter, gradients taken
 * times grad_scale; weight decay only where RtParam.weight_decay. The
 * arithmetic follows torch.optim.AdamW. w, g, mom and vel are model memory
 * (device.h), as is everything these two update. */
void rt_adamw_step(const RtModel *m, real *w, const real *g, real *mom, real *vel, int64_t t,
                   double lr, double grad_scale, const RtFlags *f);
/* w -= lr * (grad_scale * g + weight_decay * w), decay as for AdamW. */
void rt_sgd_step(const RtModel *m, real *w, const real *g, double lr, double grad_scale,
                 const RtFlags *f);

/* The constants of one step of AdamW (adamw = 1; t counts from 1) or SGD
 * (adamw = 0; t unused), for rt_dev_update_params and
 * rt_dev_update_ranges: ZeRO-1's shards (dp.c) are updated with these. */
RtDevOpt rt_opt_consts(const RtFlags *f, int adamw, int64_t t, double lr, double grad_scale);

#endif
