/* Windows of tokens into the model's inputs, and the forward/backward
 * calls of one step. */
#include <string.h>

#include "rt.h"
#include "util.h"

static real *act_real(Rt *rt, int64_t offset_bytes) {
  return (real *)(rt->ctx.activations + offset_bytes);
}

void rt_load_micro(Rt *rt, const int32_t *window, int64_t m) {
  const RtModel *model = rt->model;
  const int32_t *base = window + m * rt->rows;
  for (int i = 0; i < model->ninputs; i++) {
    const RtInput *in = &model->inputs[i];
    int32_t *dst = (int32_t *)(rt->ctx.activations + in->offset_bytes);
    memcpy(dst, base + (in->is_target ? 1 : 0), (size_t)rt->rows * sizeof *dst);
  }
}

/* The loss the forward just computed. */
static double forward_loss(Rt *rt) {
  rt->model->forward(&rt->ctx);
  return (double)*act_real(rt, rt->model->loss_offset);
}

static uint64_t dropout_seed(Rt *rt, int64_t step, int64_t m) {
  return rt_key3((uint64_t)rt->f.seed, (uint64_t)step, (uint64_t)m);
}

/* The per-op timer (log.c); a no-op unless the program asked for it. */
void rt_prof_add(const char *what, double seconds);

double rt_window_grads(Rt *rt, const int32_t *window, int64_t step) {
  double t0 = rt_now();
  memset(rt->ctx.grads, 0, (size_t)rt->model->nweights * sizeof(real));
  rt_prof_add("S zero_grads", rt_now() - t0);
  rt->ctx.training = 1;
  double sum = 0;
  for (int64_t m = 0; m < rt->micro; m++) {
    rt->ctx.seed = dropout_seed(rt, step, m);
    /* Inputs and the seed are written before every call: the memory plan
     * may reuse their bytes once the last reader is done. */
    rt_load_micro(rt, window, m);
    sum += forward_loss(rt);
    *act_real(rt, rt->model->dloss_offset) = (real)(1.0 / (double)rt->micro);
    rt->model->backward(&rt->ctx);
  }
  return sum / (double)rt->micro;
}

double rt_window_loss(Rt *rt, const int32_t *window, int64_t step, int training) {
  rt->ctx.training = training;
  double sum = 0;
  for (int64_t m = 0; m < rt->micro; m++) {
    rt->ctx.seed = dropout_seed(rt, step, m);
    rt_load_micro(rt, window, m);
    sum += forward_loss(rt);
  }
  rt->ctx.training = 1;
  return sum / (double)rt->micro;
}

double rt_eval(Rt *rt) {
  int64_t n = rt->f.eval_batches, have = rt_data_windows(rt->val);
  if (n > have) n = have;
  rt->ctx.training = 0;
  double sum = 0;
  for (int64_t k = 0; k < n; k++) {
    /* The same first windows every time, so evaluations compare. */
    rt_data_read(rt->val, k, rt->window);
    rt_load_micro(rt, rt->window, 0);
    sum += forward_loss(rt);
  }
  rt->ctx.training = 1;
  return sum / (double)n;
}

void rt_fetch_window(Rt *rt, int64_t step) {
  int64_t n = rt->micro * rt->rows + 1;
  if (!rt->train) {
    uint64_t key = rt_key2((uint64_t)rt->f.seed, 0x746f6b656e73 /* "tokens" */);
    for (int64_t i = 0; i < n; i++)
      rt->window[i] = (int32_t)(rt_hash_unit(key, (uint64_t)i) * (double)rt->model->vocab);
    return;
  }
  int64_t w = rt_data_window_at(rt->train, step, !rt->f.no_shuffle, (uint64_t)rt->f.seed);
  rt_data_read(rt->train, w, rt->window);
}
