/* The end of a step once every backward has run (update.h): the
 * data-parallel reductions waited for, the gradient norm, clipping and the
 * optimizer, the checks that gradients and the update are finite, and the
 * faults of docs/reliability.md that tests inject around them. Below the
 * executor, which calls it at OPT_STEP; main.c's loop calls it after a
 * window of one chunk. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "device.h"
#include "dp.h"
#include "log.h"
#include "optim.h"
#include "rt.h"
#include "tp.h"
#include "update.h"
#include "util.h"
#include "zero.h"

/* Faults for the tests of docs/reliability.md, from the environment:
 * SHARDC_FAULT=RANK:STEP:KIND makes world rank RANK, as it starts step
 * STEP (1-based), raise an error (KIND error), die of SIGKILL (kill), stop
 * itself with SIGSTOP (stop), spin without progress (hang), sleep 3 s
 * (slow), put a NaN into the gradient of its last untied parameter
 * before the step's update (nan) or into its weights after the update
 * (nan-update: what an update that overflows leaves).
 * Unset, it costs a comparison per step. */
static int nan_pending, nan_update_pending;

void rt_inject_fault(int64_t step) {
  static int parsed, rank = -1;
  static long long at;
  static char kind[16];
  if (!parsed) {
    parsed = 1;
    const char *v = getenv("SHARDC_FAULT");
    if (!v || sscanf(v, "%d:%lld:%15s", &rank, &at, kind) != 3) rank = -1;
  }
  if (rank < 0 || step != at) return;
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  if ((r ? atoi(r) : 0) != rank) return;
  /* The moment, for the tests that measure the time to the job's end. */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  fprintf(stderr, "fault injected: rank %d, step %lld, %s at %.3f\n", rank, (long long)step, kind,
          (double)now.tv_sec + 1e-9 * (double)now.tv_nsec);
  fflush(stderr);
  if (!strcmp(kind, "error"))
    rt_fatal("SHARDC_FAULT", "an error injected at step %lld", (long long)step);
  if (!strcmp(kind, "kill")) raise(SIGKILL);
  if (!strcmp(kind, "stop")) raise(SIGSTOP);
  if (!strcmp(kind, "hang"))
    for (volatile int spin = 1; spin;) {}
  /* slow: this step takes 3 s more (signals do not cut it short). */
  for (double until = rt_now() + 3; !strcmp(kind, "slow") && rt_now() < until;)
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  nan_pending = !strcmp(kind, "nan");
  nan_update_pending = !strcmp(kind, "nan-update");
}

/* The faults `nan` (rt_inject_fault): once the step's gradients are
 * complete, into the gradients; `nan-update`: after the update, into the
 * weights. */
static void inject_nan(Rt *rt, int *pending, real *region, const char *what) {
  const RtModel *m = rt->model;
  int last = m->nparams - 1;
  while (last >= 0 && m->params[last].tied) last--;
  if (!*pending || last < 0) return;
  *pending = 0;
  real bad = (real)NAN;
  const RtParam *q = &m->params[last];
  rt_dev_from_host(region + q->offset, &bad, sizeof bad);
  fprintf(stderr, "fault injected: NaN in the %s of %s\n", what, q->name);
}

/* The first parameter, in table order, whose part of `dev` (an array
 * laid out like the weights, in model memory) holds a NaN or an infinity;
 * -1 when none does. */
static int first_nonfinite_param(const RtModel *m, const real *dev) {
  int64_t span = m->nweights;
  real *g = rt_xmalloc((size_t)(span > 0 ? span : 1) * sizeof *g);
  rt_dev_to_host(g, dev, span * (int64_t)sizeof *g);
  int first = -1;
  for (int i = 0; i < m->nparams && first < 0; i++)
    for (int64_t k = 0; k < m->params[i].numel; k++)
      if (!isfinite((double)g[m->params[i].offset + k])) {
        first = i;
        break;
      }
  free(g);
  return first;
}

/* Which rank names the first of the parameters the ranks found (`first`,
 * -1 for none), in pipeline-stage then table order: 1 on that rank, or on
 * world rank 0 when no rank found one (*none is set then). Collective
 * over the world. */
static int speaks_first(Rt *rt, int first, int *none) {
  /* Lexicographic (stage, parameter, world rank), as one exact double. */
  int world = rt_tp_world_size(), me = rt_tp_world_rank();
  double nothing = 9e15, key = first < 0 ? nothing
                                         : ((double)rt->coord.pp * 65536 + first) * world + me;
  double least = rt_tp_world_min(key);
  *none = least == nothing;
  return key == least || (*none && me == 0);
}

/* The first parameter, in pipeline-stage then table order, whose
 * gradient holds a NaN or an infinity, found after the fact (only when the
 * norm was not finite): each rank scans its gradients, a reduction over
 * the world picks the first, and the rank holding it names it (it alone
 * knows the name when p > 1). Collective over the world. */
static void report_nonfinite(Rt *rt, int64_t s, double norm) {
  const RtModel *m = rt->model;
  int first = first_nonfinite_param(m, rt->ctx.grads), none;
  int speaks = speaks_first(rt, first, &none);
  const char *what = rt->f.on_nan == RT_NAN_SKIP ? "the update is dropped (--on-nan skip)"
                                                 : "the run stops (--on-nan stop)";
  char line[600];
  if (none)
    snprintf(line, sizeof line, "step %lld: the gradient norm is %g, but no gradient holds a "
             "non-finite value; %s", (long long)(s + 1), norm, what);
  else
    snprintf(line, sizeof line, "step %lld: the gradient norm is %g; the first non-finite "
             "gradient is that of %s (pipeline stage %d); %s", (long long)(s + 1), norm,
             first >= 0 ? m->params[first].name : "?", rt->coord.pp, what);
  if (speaks) rt_error(NULL, "%s", line);
  if (rt->f.on_nan == RT_NAN_STOP) {
    /* Every rank stops, after the one that knows the tensor has said it. */
    rt_tp_world_barrier();
    rt_fatal("--on-nan", "stopped at step %lld: its gradient norm is %g", (long long)(s + 1), norm);
  }
}

/* sum[i] = the sum of squares of x[i][0, n[i]) for i < k (model memory),
 * in fixed chunks added in order: not finite exactly when one of the
 * reals is not (a finite real squared stays finite in double). The k
 * arrays' chunk sums are read back together: one host wait a call. */
static void sum_squares(int k, const real *const *x, const int64_t *n, double *sum) {
  enum { CHUNK = 1 << 20 };
  static double *part;
  static int64_t cap;
  int64_t chunks = 0;
  for (int i = 0; i < k; i++) chunks += (n[i] + CHUNK - 1) / CHUNK;
  if (chunks > cap) {
    free(part);
    cap = chunks;
    part = rt_xmalloc((size_t)cap * sizeof *part);
  }
  rt_dev_sum_squares_chunked_many(k, x, n, CHUNK, part);
  const double *p = part;
  for (int i = 0; i < k; i++) {
    sum[i] = 0;
    for (int64_t c = 0; c < (n[i] + CHUNK - 1) / CHUNK; c++) sum[i] += *p++;
  }
}

/* After the update: the weights and AdamW's moments must be finite. An
 * update that made them otherwise (a learning rate far too large, an
 * overflow) cannot be taken back, so the run stops whatever --on-nan says,
 * before anything is saved: the last checkpoint stays the last finite
 * state. One read of each array on the device, their sums read back
 * together; collective over the world. */
static void check_update(Rt *rt, int64_t s) {
  const RtModel *m = rt->model;
  int64_t ns = rt->adam_m ? rt_zero_state_numel(m, rt->mesh.dp) : 0;
  const real *x[3] = {rt->ctx.weights, rt->adam_m, rt->adam_v};
  int64_t n[3] = {m->nweights, ns, ns};
  double sum[3];
  sum_squares(ns > 0 ? 3 : 1, x, n, sum);
  int w_bad = !isfinite(sum[0]);
  int s_bad = ns > 0 && !isfinite(sum[1] + sum[2]);
  if (!rt_tp_world_any(w_bad || s_bad)) return;
  /* Name the tensor: in the weights, or (without ZeRO, where the moments
   * mirror the weights) in the moments. */
  int zero = rt->dp && m->zero, first = -1;
  const char *of = "the weights";
  if (w_bad) first = first_nonfinite_param(m, rt->ctx.weights);
  if (first < 0 && s_bad && !zero) {
    of = "AdamW's moments";
    first = first_nonfinite_param(m, rt->adam_m);
    if (first < 0) first = first_nonfinite_param(m, rt->adam_v);
  }
  int none, speaks = speaks_first(rt, first, &none);
  if (speaks && first >= 0)
    rt_error(NULL, "step %lld: the update made %s of %s non-finite (pipeline stage %d; --lr %g): "
             "it cannot be undone, so the run stops before anything is saved (the last "
             "checkpoint is the last finite state)", (long long)(s + 1), of,
             m->params[first].name, rt->coord.pp, rt->f.lr);
  else if (speaks)
    rt_error(NULL, "step %lld: the update made the optimizer state non-finite (--lr %g): it "
             "cannot be undone, so the run stops before anything is saved (the last checkpoint "
             "is the last finite state)", (long long)(s + 1), rt->f.lr);
  rt_tp_world_barrier();
  rt_fatal("--on-nan", "stopped at step %lld: its update is not finite", (long long)(s + 1));
}

void rt_update(Rt *rt, int64_t s, int dump, RtStepInfo *info) {
  const RtModel *m = rt->model;
  if (rt->dp) {
    rt_dp_start_tied(rt);
    rt_dp_wait(rt);
  }
  inject_nan(rt, &nan_pending, rt->ctx.grads, "gradient");
  if (dump) {
    double t = rt_now();
    rt_ckpt_dump_grads(rt, rt->f.dump_grads);
    rt->skipped += rt_now() - t;
  }
  double t1 = rt_now();
  /* One stage and one replica keep their own paths, bit for bit as
   * before; anything larger sums over the mesh. */
  if (rt->mesh.pp > 1 || rt->mesh.dp > 1)
    info->grad_norm = rt_mesh_grad_norm(rt);
  else if (rt_tp_size() > 1)
    info->grad_norm = rt_tp_grad_norm(rt);
  else
    info->grad_norm = rt_grad_norm(rt->ctx.grads, m->nweights, RT_NORM_CHUNK, rt->norm_partials);
  double scale = rt_clip_scale(info->grad_norm, rt->f.clip);
  info->lr = rt_lr_at(&rt->f, s);
  double t2 = rt_now();
  rt_prof_add("S grad_norm", t2 - t1);
  /* Whether any rank's norm is not finite (a replicated parameter's
   * gradient counts on one tensor-parallel rank only, so the ranks' norms
   * can differ): every rank drops the same updates. */
  if (rt_tp_world_any(!isfinite(info->grad_norm))) {
    report_nonfinite(rt, s, info->grad_norm);
    info->grad_norm = NAN;
    if (++rt->nan_steps > rt->f.max_skipped)
      rt_fatal("--max-skipped", "stopped at step %lld: %lld updates were dropped, more than "
               "--max-skipped %lld; the last checkpoint is kept", (long long)(s + 1),
               (long long)rt->nan_steps, (long long)rt->f.max_skipped);
    return;
  }
  int zero = rt->dp && m->zero;
  if (rt->f.optimizer == RT_OPT_ADAMW) {
    if (zero)
      rt_dp_zero_adamw(rt, s + 1, info->lr, scale);
    else
      rt_adamw_step(m, rt->ctx.weights, rt->ctx.grads, rt->adam_m, rt->adam_v, s + 1, info->lr,
                    scale, &rt->f);
  } else {
    if (zero)
      rt_dp_zero_sgd(rt, info->lr, scale);
    else
      rt_sgd_step(m, rt->ctx.weights, rt->ctx.grads, info->lr, scale, &rt->f);
  }
  inject_nan(rt, &nan_update_pending, rt->ctx.weights, "weights");
  check_update(rt, s);
  rt_prof_add("S optimizer", rt_now() - t2);
}
