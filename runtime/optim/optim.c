/* The optimizer (see optim.h): the host's part of a step (the learning
 * rate, the constants, clipping, adding up the norm); the elementwise work
 * is the device's (device.h). */
#include "optim.h"

#include <math.h>
#include <stdlib.h>

#include "util.h"

double rt_lr_at(const RtFlags *f, int64_t s) {
  if (s < f->warmup) return f->lr * (double)(s + 1) / (double)f->warmup;
  if (f->lr_schedule == RT_SCHED_CONSTANT) return f->lr;
  int64_t decay = f->steps - f->warmup;
  if (decay <= 0) return f->lr;
  double r = (double)(s - f->warmup) / (double)decay;
  if (r > 1) r = 1;
  return f->lr_min + 0.5 * (1.0 + cos(M_PI * r)) * (f->lr - f->lr_min);
}

/* Fixed chunks, each summed by the device and added here in order: the
 * same bits for any thread count. */
double rt_grad_norm(const real *g, int64_t n, int64_t chunk, double *partials) {
  int64_t nchunks = (n + chunk - 1) / chunk;
  rt_dev_sum_squares_chunked(g, n, chunk, partials);
  double sum = 0;
  for (int64_t c = 0; c < nchunks; c++)
    sum += partials[c];
  return sqrt(sum);
}

void rt_param_sum_squares(const RtModel *m, const real *g, double *sq) {
  RtDevRange *r = rt_xmalloc((size_t)(m->nparams > 0 ? m->nparams : 1) * sizeof *r);
  for (int p = 0; p < m->nparams; p++)
    r[p] = (RtDevRange){m->params[p].offset, 0, m->params[p].numel, 0};
  rt_dev_sum_squares(g, r, m->nparams, sq);
  free(r);
}

double rt_clip_scale(double norm, double clip) {
  if (clip <= 0) return 1;
  double s = clip / (norm + 1e-6);
  return s < 1 ? s : 1;
}

RtDevOpt rt_opt_consts(const RtFlags *f, int adamw, int64_t t, double lr, double grad_scale) {
  RtDevOpt o = {.adamw = adamw, .grad_scale = (real)grad_scale,
                .decay = (real)(1 - lr * f->weight_decay), .lr = (real)lr};
  if (adamw) {
    const double bc1 = 1 - pow(f->beta1, (double)t), bc2 = 1 - pow(f->beta2, (double)t);
    o.beta1 = (real)f->beta1;
    o.beta2 = (real)f->beta2;
    o.eps = (real)f->eps;
    o.step_size = (real)(lr / bc1);
    o.bc2_sqrt = (real)sqrt(bc2);
  }
  return o;
}

void rt_adamw_step(const RtModel *m, real *w, const real *g, real *mom, real *vel, int64_t t,
                   double lr, double grad_scale, const RtFlags *f) {
  RtDevOpt o = rt_opt_consts(f, 1, t, lr, grad_scale);
  rt_dev_update_params(m, w, g, mom, vel, &o);
}

void rt_sgd_step(const RtModel *m, real *w, const real *g, double lr, double grad_scale,
                 const RtFlags *f) {
  RtDevOpt o = rt_opt_consts(f, 0, 0, lr, grad_scale);
  rt_dev_update_params(m, w, g, NULL, NULL, &o);
}
