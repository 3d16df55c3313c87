/* Windows of tokens into the model's inputs, and the forward/backward
 * calls of one step of a program of one chunk (a pipeline stage's steps
 * are exec.c's). */

#include "comm.h"
#include "device.h"
#include "dp.h"
#include "exec.h"
#include "rt.h"
#include "tp.h"
#include "trace.h"
#include "util.h"

/* The step's staged window is already in model memory: its microbatches
 * are device copies, which need not wait for the step's work so far. */
void rt_load_inputs(Rt *rt, const RtChunk *c, const int32_t *window, int64_t g) {
  const int32_t *dev = rt->window_dev && window == rt->window ? rt->window_dev : NULL;
  const int32_t *base = (dev ? dev : window) + g * rt->rows;
  for (int i = 0; i < c->ninputs; i++) {
    const RtInput *in = &c->inputs[i];
    void *dst = rt_loc(&rt->ctx, c, in->offset_bytes);
    int64_t bytes = rt->rows * (int64_t)sizeof *base;
    if (dev) rt_dev_copy(dst, base + (in->is_target ? 1 : 0), bytes);
    else rt_dev_from_host(dst, base + (in->is_target ? 1 : 0), bytes);
  }
}

void rt_load_micro(Rt *rt, const int32_t *window, int64_t m) {
  rt_load_inputs(rt, &rt->model->chunks[0], window, m);
}

uint64_t rt_dropout_seed(const Rt *rt, int64_t step, int64_t g) {
  return rt_key3((uint64_t)rt->f.seed, (uint64_t)step, (uint64_t)g);
}

double rt_chunk_loss(const RtCtx *ctx, const RtChunk *c) {
  real loss;
  rt_dev_to_host(&loss, rt_loc(ctx, c, c->loss_offset), sizeof loss);
  return (double)loss;
}

void rt_chunk_loss_add(const RtCtx *ctx, const RtChunk *c) {
  rt_dev_loss_add((const real *)rt_loc(ctx, c, c->loss_offset));
}

void rt_seed_dloss(Rt *rt, const RtChunk *c) {
  /* The seed 1/(m*d): the data-parallel sum of the replicas' gradients is
   * then the gradient of the whole window's mean loss. A fill, not a copy
   * from the host, which would wait for the device. */
  const real dloss = (real)(1.0 / (double)(rt->micro * rt->mesh.dp));
  rt_dev_fill((real *)rt_loc(&rt->ctx, c, c->dloss_offset), dloss, 1);
}

void rt_zero_grads(Rt *rt) {
  double t0 = rt_now();
  rt_dev_zero(rt->ctx.grads, rt->model->nweights * (int64_t)sizeof(real));
  rt_prof_add("S zero_grads", rt_now() - t0);
}

/* The loss the forward just computed. */
static double forward_loss(Rt *rt) {
  rt_chunk_call(rt, 0, RT_FN_FORWARD);
  return rt_chunk_loss(&rt->ctx, &rt->model->chunks[0]);
}

double rt_mesh_mean(Rt *rt, double sum, int64_t count) {
  if (rt->mesh.pp == 1 && rt->mesh.dp == 1) return sum / (double)count;
  /* Each data-parallel replica's loss stage holds its part of the sum
   * (every tensor-parallel rank of it the same value: one of them speaks
   * for the group); one reduction over the world hands the mean to all. */
  int holds = 0; /* the stage with the loss: the last, or the first under zb-v's V */
  for (int c = 0; c < rt->model->nchunks; c++) holds |= rt->model->chunks[c].has_loss;
  holds = holds && rt->coord.tp == 0;
  double part = holds ? sum / (double)count : 0;
  RtComms *cs = rt_tp_comms();
  if (cs) rt_comm_allreduce(cs->world, &part, &part, 1, RT_COMM_F64, RT_COMM_SUM);
  return part;
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
    rt_load_micro(rt, rt->window, 0);
    sum += forward_loss(rt);
  }
  rt->ctx.training = 1;
  return rt_mesh_mean(rt, sum, n);
}

/* The window of `step` into host buffer w. */
static void read_window(Rt *rt, int64_t step, int32_t *w) {
  int64_t n = rt->f.global_batch * rt->model->seq + 1;
  if (!rt->train) {
    uint64_t key = rt_key2((uint64_t)rt->f.seed, 0x746f6b656e73 /* "tokens" */);
    for (int64_t i = 0; i < n; i++)
      w[i] = (int32_t)(rt_hash_unit(key, (uint64_t)i) * (double)rt->model->vocab);
    return;
  }
  int64_t k = rt_data_window_at(rt->train, step, !rt->f.no_shuffle, (uint64_t)rt->f.seed);
  rt_data_read(rt->train, k, w);
}

static void stage_window(Rt *rt, int slot, int64_t step) {
  read_window(rt, step, rt_dev_stage_host(rt->stage, slot));
  rt_dev_stage_put(rt->stage, slot);
  rt->stage_step[slot] = step;
}

void rt_fetch_window(Rt *rt, int64_t step) {
  if (!rt->stage) {
    int64_t n = rt->f.global_batch * rt->model->seq + 1;
    rt->stage = rt_dev_stage_new(n * (int64_t)sizeof(int32_t));
    rt->stage_step[0] = rt->stage_step[1] = -1;
    rt->window_buf = rt->window;
  }
  int slot = rt->stage_step[0] == step ? 0 : rt->stage_step[1] == step ? 1 : -1;
  if (slot < 0) stage_window(rt, slot = 0, step);
  rt->window = rt_dev_stage_host(rt->stage, slot);
  rt->window_dev = rt_dev_stage_get(rt->stage, slot);
  if (step + 1 < rt->f.steps) stage_window(rt, 1 - slot, step + 1);
}

void rt_end_window(Rt *rt) {
  if (rt->window_buf) rt->window = rt->window_buf;
  rt->window_dev = NULL;
}
