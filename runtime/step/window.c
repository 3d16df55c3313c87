/* A whole window through the model: the forward/backward calls of one
 * step of a program of one chunk, and the forward-only losses of a window
 * and of validation, which a pipeline stage hands to its executor
 * (exec.c). Above the executor; below main.c's loop. */

#include "batch.h"
#include "device.h"
#include "dp.h"
#include "exec.h"
#include "graphs.h"
#include "mlm.h"
#include "rt.h"
#include "trace.h"
#include "util.h"
#include "window.h"

/* The loss the forward just computed. */
static double forward_loss(Rt *rt) {
  rt_chunk_call(rt, 0, RT_FN_FORWARD);
  return rt_chunk_loss(&rt->ctx, &rt->model->chunks[0]);
}

double rt_window_grads(Rt *rt, const int32_t *window, int64_t step) {
  const RtChunk *c = &rt->model->chunks[0];
  rt_zero_grads(rt);
  if (rt->dp) rt_dp_step_begin(rt);
  rt->ctx.training = 1;
  for (int64_t k = 0; k < rt->micro; k++) {
    int64_t g = rt_global_mb(rt, k);
    rt->ctx.seed = rt_dropout_seed(rt, step, g);
    /* Inputs and the seed are written before every call: the memory plan
     * may reuse their bytes once the last reader is done. */
    double t0 = rt_trace_now();
    rt_load_micro(rt, window, g);
    /* The loss stays on the device until the step's end: the backward is
     * queued behind the forward without the host waiting for either. */
    rt_chunk_call(rt, 0, RT_FN_FORWARD);
    rt_chunk_loss_add(&rt->ctx, c);
    double t1 = rt_trace_now();
    rt_trace_add_kind(RT_SCHED_F, 0, (int)k, t0, t1);
    rt_seed_dloss(rt, c);
    if (rt->dp) rt_dp_backward_begin(rt, 0, k == rt->micro - 1);
    rt_chunk_call(rt, 0, RT_FN_BACKWARD);
    rt_trace_add_kind(RT_SCHED_B, 0, (int)k, t1, rt_trace_now());
  }
  if (rt->dp) rt_dp_backward_done(rt);
  return rt_mesh_mean(rt, rt_dev_loss_take(), rt->micro * rt->mesh.dp);
}

double rt_window_loss(Rt *rt, const int32_t *window, int64_t step, int training) {
  if (rt->exec) return rt_exec_window_loss(rt, window, step, training);
  rt->ctx.training = training;
  double sum = 0;
  for (int64_t k = 0; k < rt->micro; k++) {
    int64_t g = rt_global_mb(rt, k);
    rt->ctx.seed = rt_dropout_seed(rt, step, g);
    rt_load_micro(rt, window, g);
    sum += forward_loss(rt);
  }
  rt->ctx.training = 1;
  return rt_mesh_mean(rt, sum, rt->micro * rt->mesh.dp);
}

double rt_eval(Rt *rt) {
  int64_t n = rt->f.eval_batches, have = rt_data_windows(rt->val);
  if (n > have) n = have;
  if (rt->exec) return rt_exec_eval(rt, n);
  rt->ctx.training = 0;
  double sum = 0;
  /* The same first windows every time, so evaluations compare; replica i
   * of d takes windows i, i + d, ... */
  for (int64_t k = rt->coord.dp; k < n; k += rt->mesh.dp) {
    rt_data_read(rt->val, k, rt->window);
    rt->window_key = rt_mlm_key((uint64_t)rt->f.seed, k, 1);
    rt_load_micro(rt, rt->window, 0);
    sum += forward_loss(rt);
  }
  rt->ctx.training = 1;
  return rt_mesh_mean(rt, sum, n);
}
