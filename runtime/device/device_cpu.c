/* The CPU device (see device.h): model memory is host memory, copies are
 * memcpy, and the optimizer and the sums of squares are the CPU kernels
 * (kernels/cpu/kernels.h) shared out over OpenMP threads. This is the one
 * runtime file that calls a kernel. */
#include "device.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../../abi/job.h"
#include "kernels.h"
#include "util.h"

/* ------------------------------------------------------------ memory */

void *rt_dev_alloc(int64_t bytes, const char *what) {
  void *mem = NULL;
  size_t n = (size_t)RT_ALIGN64(bytes > 0 ? bytes : 1);
  if (posix_memalign(&mem, 64, n) != 0)
    rt_fatal(NULL, "out of memory allocating %s (%lld bytes)", what, (long long)n);
  return mem;
}

int64_t rt_dev_mem_available(const char **source, int *host) {
  int64_t limit = rt_mem_limit_env();
  *host = 1;
  *source = limit >= 0 ? JOB_MEMORY_LIMIT_ENV : "MemAvailable in /proc/meminfo";
  return limit >= 0 ? limit : job_mem_available();
}

void rt_dev_free(void *dev) { free(dev); }

void rt_dev_zero(void *dev, int64_t bytes) {
  if (bytes > 0) memset(dev, 0, (size_t)bytes);
}

/* ------------------------------------------------------------- copies */

void rt_dev_to_host(void *host, const void *dev, int64_t bytes) {
  if (bytes > 0) memcpy(host, dev, (size_t)bytes);
}

void rt_dev_from_host(void *dev, const void *host, int64_t bytes) {
  if (bytes > 0) memcpy(dev, host, (size_t)bytes);
}

void rt_dev_copy(void *dst, const void *src, int64_t bytes) {
  if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}

void rt_dev_written(void *dst, int64_t bytes) {
  (void)dst;
  (void)bytes;
}

void rt_dev_accumulate(real *y, const real *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void rt_dev_sync(void) {}

void rt_dev_fill(real *dev, real v, int64_t n) {
  for (int64_t i = 0; i < n; i++) dev[i] = v;
}

static double loss_sum;

void rt_dev_loss_add(const real *dev) { loss_sum += (double)*dev; }

double rt_dev_loss_take(void) {
  double s = loss_sum;
  loss_sum = 0;
  return s;
}

void rt_dev_moe_count(int vstage) { k_moe_count(vstage); }

_Static_assert(sizeof(RtDevMoeStat) == sizeof(KMoeStat), "RtDevMoeStat mirrors KMoeStat");
int rt_dev_moe_take(RtDevMoeStat *out, int max) { return k_moe_take((KMoeStat *)(void *)out, max); }

/* ---------------------------------------------------------- host views */

/* Model memory is host memory: the view is the memory itself. */
void *rt_dev_view_begin(void *dev, int64_t bytes) {
  (void)bytes;
  return dev;
}

void rt_dev_view_end(void *dev, void *view, int64_t bytes, int written) {
  (void)dev, (void)view, (void)bytes, (void)written;
}

/* ------------------------------------------------------ staged windows */

/* Model memory is host memory: a slot's host buffer is its copy. */
struct RtDevStage {
  void *slot[2];
};

RtDevStage *rt_dev_stage_new(int64_t bytes) {
  RtDevStage *s = rt_xcalloc(1, sizeof *s);
  for (int k = 0; k < 2; k++) s->slot[k] = rt_dev_alloc(bytes, "a staged token window");
  return s;
}

void *rt_dev_stage_host(RtDevStage *s, int slot) { return s->slot[slot]; }
void rt_dev_stage_put(RtDevStage *s, int slot) { (void)s, (void)slot; }
const void *rt_dev_stage_get(RtDevStage *s, int slot) { return s->slot[slot]; }

void rt_dev_stage_free(RtDevStage *s) {
  if (!s) return;
  for (int k = 0; k < 2; k++) rt_dev_free(s->slot[k]);
  free(s);
}

/* ------------------------------------------------------- CUDA graphs */

/* No graphs on the CPU: every call is a plain one. */
RtDevGraphRun rt_dev_graph_call(RtDevGraphs **g, void (*fn)(RtCtx *), RtCtx *ctx) {
  (void)g;
  fn(ctx);
  return RT_DEV_GRAPH_PLAIN;
}

void rt_dev_graph_free(RtDevGraphs *g) { (void)g; }

/* --------------------------------------------------------- the optimizer */

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

/* One run of n elements: weights and gradients from w, state from s. */
static void update_run(const RtDevOpt *o, int decay, real *w, const real *g, real *mom, real *vel,
                       int64_t n) {
  const real d = decay ? o->decay : (real)1;
  if (o->adamw) {
    KAdamW h = {.grad_scale = o->grad_scale, .decay = d, .beta1 = o->beta1, .beta2 = o->beta2,
                .eps = o->eps, .step_size = o->step_size, .bc2_sqrt = o->bc2_sqrt};
    k_adamw(w, g, mom, vel, n, &h);
    return;
  }
  const real scale = o->grad_scale, rate = o->lr;
  for (int64_t i = 0; i < n; i++)
    w[i] = w[i] * d - rate * g[i] * scale;
}

void rt_dev_update_params(const RtModel *m, real *w, const real *g, real *mom, real *vel,
                          const RtDevOpt *o) {
#pragma omp parallel
  {
    int64_t lo, hi, at = 0, b, e;
    thread_share(m, &lo, &hi);
    for (int p = 0; p < m->nparams; at += m->params[p].numel, p++) {
      const RtParam *prm = &m->params[p];
      if (!param_part(prm, at, lo, hi, &b, &e)) continue;
      int64_t x = prm->offset + b;
      update_run(o, prm->weight_decay, w + x, g + x, mom ? mom + x : NULL, vel ? vel + x : NULL,
                 e - b);
    }
  }
}

/* The ranges are the unit of work: the caller cuts them small enough to
 * share out (every element is updated alone, so no cut changes a result). */
void rt_dev_update_ranges(const RtDevRange *r, int64_t nr, real *w, const real *g, real *mom,
                          real *vel, const RtDevOpt *o) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < nr; i++)
    update_run(o, r[i].decay, w + r[i].w, g + r[i].w, mom ? mom + r[i].s : NULL,
               vel ? vel + r[i].s : NULL, r[i].n);
}

/* ------------------------------------------------------ sums of squares */

void rt_dev_sum_squares(const real *x, const RtDevRange *r, int64_t nr, double *out) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < nr; i++)
    out[i] = k_sum_squares(x + r[i].w, r[i].n);
}

void rt_dev_sum_squares_chunked(const real *x, int64_t n, int64_t chunk, double *out) {
  int64_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    out[c] = k_sum_squares(x + c * chunk, end - c * chunk);
  }
}

void rt_dev_sum_squares_chunked_many(int k, const real *const *x, const int64_t *n, int64_t chunk,
                                     double *out) {
  for (int i = 0; i < k; out += (n[i] + chunk - 1) / chunk, i++)
    rt_dev_sum_squares_chunked(x[i], n[i], chunk, out);
}
