/* The optimizer (see optim.h). */
#include "optim.h"

#include <math.h>
#include <omp.h>

#include "kernels.h"

double rt_lr_at(const RtFlags *f, int64_t s) {
  if (s < f->warmup) return f->lr * (double)(s + 1) / (double)f->warmup;
  if (f->lr_schedule == RT_SCHED_CONSTANT) return f->lr;
  int64_t decay = f->steps - f->warmup;
  if (decay <= 0) return f->lr;
  double r = (double)(s - f->warmup) / (double)decay;
  if (r > 1) r = 1;
  return f->lr_min + 0.5 * (1.0 + cos(M_PI * r)) * (f->lr - f->lr_min);
}

/* Fixed chunks, each summed by k_sum_squares and added in order: the same
 * bits for any thread count. */
double rt_grad_norm(const real *g, int64_t n, int64_t chunk, double *partials) {
  int64_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    partials[c] = k_sum_squares(g + c * chunk, end - c * chunk);
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

/* Each thread takes an equal share of all the elements of all the
 * parameters (in parameter order), cut at multiples of 64 elements of a
 * parameter: one parallel region per step however many tensors the model
 * has, and no barrier between them. Every element is updated alone, so the
 * split changes no result. */
#define SPLIT_UNIT 64

static void thread_share(const RtModel *m, int64_t *lo, int64_t *hi) {
  int64_t total = 0;
  for (int p = 0; p < m->nparams; p++)
    total += m->params[p].numel;
  int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
  *lo = total * me / team;
  *hi = total * (me + 1) / team;
}

/* The part of [lo, hi) (positions in the concatenation of all parameters)
 * that falls on parameter p, which starts at position `at`, as element
 * indices into p, rounded to SPLIT_UNIT so threads cut at the same places
 * whatever the team. */
static int param_part(const RtParam *prm, int64_t at, int64_t lo, int64_t hi, int64_t *b,
                      int64_t *e) {
  int64_t s = lo - at, t = hi - at;
  s = s < 0 ? 0 : (s + SPLIT_UNIT - 1) / SPLIT_UNIT * SPLIT_UNIT;
  t = t >= prm->numel ? prm->numel : (t + SPLIT_UNIT - 1) / SPLIT_UNIT * SPLIT_UNIT;
  if (t > prm->numel) t = prm->numel;
  *b = s;
  *e = t;
  return s < t;
}

/* The constants of one AdamW step. */
static KAdamW adamw_consts(int64_t t, double lr, double grad_scale, const RtFlags *f) {
  const double bc1 = 1 - pow(f->beta1, (double)t), bc2 = 1 - pow(f->beta2, (double)t);
  KAdamW h = {.grad_scale = (real)grad_scale, .beta1 = (real)f->beta1, .beta2 = (real)f->beta2,
              .eps = (real)f->eps, .step_size = (real)(lr / bc1), .bc2_sqrt = (real)sqrt(bc2)};
  return h;
}

void rt_adamw_step(const RtModel *m, real *w, const real *g, real *mom, real *vel, int64_t t,
                   double lr, double grad_scale, const RtFlags *f) {
  KAdamW h = adamw_consts(t, lr, grad_scale, f);
#pragma omp parallel firstprivate(h)
  {
    int64_t lo, hi, at = 0, b, e;
    thread_share(m, &lo, &hi);
    for (int p = 0; p < m->nparams; at += m->params[p].numel, p++) {
      const RtParam *prm = &m->params[p];
      if (!param_part(prm, at, lo, hi, &b, &e)) continue;
      h.decay = (real)(prm->weight_decay ? 1 - lr * f->weight_decay : 1);
      int64_t o = prm->offset + b;
      k_adamw(w + o, g + o, mom + o, vel + o, e - b, &h);
    }
  }
}

void rt_sgd_step(const RtModel *m, real *w, const real *g, double lr, double grad_scale,
                 const RtFlags *f) {
  const real scale = (real)grad_scale, rate = (real)lr;
#pragma omp parallel
  {
    int64_t lo, hi, at = 0, b, e;
    thread_share(m, &lo, &hi);
    for (int p = 0; p < m->nparams; at += m->params[p].numel, p++) {
      const RtParam *prm = &m->params[p];
      if (!param_part(prm, at, lo, hi, &b, &e)) continue;
      const real decay = (real)(prm->weight_decay ? 1 - lr * f->weight_decay : 1);
      real *pw = w + prm->offset;
      const real *pg = g + prm->offset;
      for (int64_t i = b; i < e; i++)
        pw[i] = pw[i] * decay - rate * pg[i] * scale;
    }
  }
}

/* The ranges are the unit of work: the caller cuts them small enough to
 * share out (every element is updated alone, so no cut changes a result). */
void rt_adamw_ranges(const RtOptRange *r, int64_t nr, real *w, const real *g, real *mom,
                     real *vel, int64_t t, double lr, double grad_scale, const RtFlags *f) {
  KAdamW h = adamw_consts(t, lr, grad_scale, f);
#pragma omp parallel for schedule(dynamic, 1) firstprivate(h)
  for (int64_t i = 0; i < nr; i++) {
    h.decay = (real)(r[i].decay ? 1 - lr * f->weight_decay : 1);
    k_adamw(w + r[i].w, g + r[i].w, mom + r[i].s, vel + r[i].s, r[i].n, &h);
  }
}

void rt_sgd_ranges(const RtOptRange *r, int64_t nr, real *w, const real *g, double lr,
                   double grad_scale, const RtFlags *f) {
  const real scale = (real)grad_scale, rate = (real)lr;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < nr; i++) {
    const real decay = (real)(r[i].decay ? 1 - lr * f->weight_decay : 1);
    real *pw = w + r[i].w;
    const real *pg = g + r[i].w;
    for (int64_t k = 0; k < r[i].n; k++)
      pw[k] = pw[k] * decay - rate * pg[k] * scale;
  }
}
