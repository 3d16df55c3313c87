/* Gradient check: for N seeded coordinates of every parameter tensor,
 * (loss(w + e) - loss(w - e)) / 2e with e = 1e-5 * max(1, |w|) against the
 * analytic gradient of the same batch (all microbatches, the same dropout
 * masks).
 *
 * In f64 the difference carries an absolute error of about 1e-10 (the
 * rounding of a loss near 5 divided by 2e), whatever the gradient's size.
 * The relative error |a - n| / max(|a|, |n|, floor) therefore has a floor
 * (--gradcheck-floor): gradients above it are held to the full relative
 * tolerance, smaller ones to an absolute tol * floor, so that a gradient
 * that is zero up to rounding does not count as a failure. f32 builds use
 * e = 1e-2 * max(1, |w|) instead, since a step of 1e-5 drowns in float
 * rounding there; expect errors around 1e-3. */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "batch.h"
#include "device.h"
#include "util.h"
#include "window.h"

#ifdef SHARD_REAL_F64
#define STEP 1e-5
#else
#define STEP 1e-2
#endif

/* The numeric derivative of the window's loss by weight i, which is set
 * on the device one element at a time. */
static double central_difference(Rt *rt, int64_t i) {
  real *w = rt->ctx.weights + i, w0;
  rt_dev_to_host(&w0, w, sizeof w0);
  double e = STEP * (fabs((double)w0) > 1 ? fabs((double)w0) : 1);
  real plus = (real)(w0 + e), minus = (real)(w0 - e);
  rt_dev_from_host(w, &plus, sizeof plus);
  double lp = rt_window_loss(rt, rt->window, 0, 1);
  rt_dev_from_host(w, &minus, sizeof minus);
  double lm = rt_window_loss(rt, rt->window, 0, 1);
  rt_dev_from_host(w, &w0, sizeof w0);
  /* Divide by the step the stored weights actually took. */
  return (lp - lm) / ((double)plus - (double)minus);
}

/* Checks one tensor; returns its largest relative error. */
static double check_param(Rt *rt, int p, const real *analytic, RtRng *rng) {
  const RtParam *prm = &rt->model->params[p];
  int64_t n = rt->f.gradcheck < prm->numel ? rt->f.gradcheck : prm->numel;
  double worst = 0, worst_a = 0, worst_n = 0;
  for (int64_t k = 0; k < n; k++) {
    /* Every coordinate when N covers the tensor, else seeded draws. */
    int64_t j = n == prm->numel ? k : (int64_t)rt_rng_below(rng, (uint64_t)prm->numel);
    int64_t i = prm->offset + j;
    double a = (double)analytic[i], num = central_difference(rt, i);
    double scale = fmax(fmax(fabs(a), fabs(num)), rt->f.gradcheck_floor),
           err = fabs(a - num) / scale;
    if (!(err <= worst)) worst = err, worst_a = a, worst_n = num;
  }
  char shape[200];
  printf("gradcheck %-32s %-14s %4lld coords | max rel error %.3e (analytic %.6e, numeric %.6e)\n",
         prm->name, rt_st_shape_str(shape, sizeof shape, prm->rank, prm->shape), (long long)n,
         worst, worst_a, worst_n);
  return worst;
}

int rt_gradcheck(Rt *rt) {
  const RtModel *m = rt->model;
  rt_fetch_window(rt, 0);
  double loss = rt_window_grads(rt, rt->window, 0);
  real *analytic = rt_xmalloc((size_t)m->nweights * sizeof *analytic);
  rt_dev_to_host(analytic, rt->ctx.grads, m->nweights * (int64_t)sizeof *analytic);
  printf("gradcheck: loss %.10f, %lld coordinates per tensor, tolerance %.1e, floor %.1e (%s)\n",
         loss, (long long)rt->f.gradcheck, rt->f.gradcheck_tol, rt->f.gradcheck_floor,
         RT_REAL_NAME);
  double worst = 0;
  const char *worst_name = "";
  for (int p = 0; p < m->nparams; p++) {
    RtRng rng;
    rt_rng_seed(&rng, rt_key2((uint64_t)rt->f.seed, rt_hash_str(m->params[p].name)));
    double err = check_param(rt, p, analytic, &rng);
    if (!(err <= worst)) worst = err, worst_name = m->params[p].name;
  }
  free(analytic);
  int ok = worst <= rt->f.gradcheck_tol;
  printf("gradcheck: %s: max rel error %.3e (%s) over %d tensors, tolerance %.1e\n",
         ok ? "ok" : "FAILED", worst, worst_name, m->nparams, rt->f.gradcheck_tol);
  return ok ? 0 : 1;
}
