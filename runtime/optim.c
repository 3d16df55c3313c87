/* The optimizer (see optim.h). */
#include "optim.h"

#include <math.h>

/* The update stays in `real` so that it vectorises in float. */
#ifdef SHARD_REAL_F64
#define SQRT sqrt
#else
#define SQRT sqrtf
#endif

double rt_lr_at(const RtFlags *f, int64_t s) {
  if (s < f->warmup) return f->lr * (double)(s + 1) / (double)f->warmup;
  if (f->lr_schedule == RT_SCHED_CONSTANT) return f->lr;
  int64_t decay = f->steps - f->warmup;
  if (decay <= 0) return f->lr;
  double r = (double)(s - f->warmup) / (double)decay;
  if (r > 1) r = 1;
  return f->lr_min + 0.5 * (1.0 + cos(M_PI * r)) * (f->lr - f->lr_min);
}

double rt_grad_norm(const real *g, int64_t n, int64_t chunk, double *partials) {
  int64_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    double s = 0;
    for (int64_t i = c * chunk; i < end; i++)
      s += (double)g[i] * (double)g[i];
    partials[c] = s;
  }
  double sum = 0;
  for (int64_t c = 0; c < nchunks; c++)
    sum += partials[c];
  return sqrt(sum);
}

double rt_clip_scale(double norm, double clip) {
  if (clip <= 0) return 1;
  double s = clip / (norm + 1e-6);
  return s < 1 ? s : 1;
}

void rt_adamw_step(const RtModel *m, real *w, const real *g, real *mom, real *vel, int64_t t,
                   double lr, double grad_scale, const RtFlags *f) {
  const real b1 = (real)f->beta1, b2 = (real)f->beta2, eps = (real)f->eps;
  const real scale = (real)grad_scale;
  const double bc1 = 1 - pow(f->beta1, (double)t), bc2 = 1 - pow(f->beta2, (double)t);
  const real step_size = (real)(lr / bc1), bc2_sqrt = (real)sqrt(bc2);
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    const real decay = (real)(prm->weight_decay ? 1 - lr * f->weight_decay : 1);
    real *pw = w + prm->offset, *pm = mom + prm->offset, *pv = vel + prm->offset;
    const real *pg = g + prm->offset;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < prm->numel; i++) {
      real gi = pg[i] * scale;
      pw[i] *= decay;
      pm[i] += (gi - pm[i]) * (1 - b1); /* torch's lerp */
      pv[i] = pv[i] * b2 + (1 - b2) * gi * gi;
      pw[i] -= step_size * pm[i] / (SQRT(pv[i]) / bc2_sqrt + eps);
    }
  }
}

void rt_sgd_step(const RtModel *m, real *w, const real *g, double lr, double grad_scale,
                 const RtFlags *f) {
  const real scale = (real)grad_scale, rate = (real)lr;
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    const real decay = (real)(prm->weight_decay ? 1 - lr * f->weight_decay : 1);
    real *pw = w + prm->offset;
    const real *pg = g + prm->offset;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < prm->numel; i++)
      pw[i] = pw[i] * decay - rate * pg[i] * scale;
  }
}
