/* The calls of the chunk functions, and the CUDA graphs of the CUDA
 * target's (abi/model.h RtGraphs). Every forward, backward and W the
 * runtime runs goes through rt_chunk_call: it hands the program the
 * step's values that its captured kernels read from device memory, then
 * runs the function through the device's graphs (rt_dev_graph_call) where
 * the compiler marked it capturable and --cuda-graphs is on, and as a
 * plain call otherwise. A program without a graph table (every CPU
 * program) just calls the function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "graphs.h"
#include "rt.h"
#include "util.h"

static const char *const fn_names[] = {"forward", "backward", "wgrad"};

/* One cache per chunk function ([3 * c + f]) and the calls of each kind. */
static struct {
  RtDevGraphs **cache;
  int64_t runs[3]; /* RtDevGraphRun */
} graphs;

static void (*chunk_fn(const RtModel *m, int c, RtChunkFn f))(RtCtx *) {
  if (f == RT_FN_FORWARD) return m->chunks[c].forward;
  if (f == RT_FN_BACKWARD) return m->chunks[c].backward;
  return rt_chunk_wgrad(m, c);
}

/* Why function f of chunk c runs as plain calls; NULL: as a graph. */
static const char *why_plain(const Rt *rt, int c, RtChunkFn f) {
  const RtGraphs *g = rt->model->graphs;
  if (!g) return "not a CUDA program";
  if (g->off) return g->off;
  if (rt->f.cuda_graphs == RT_GRAPHS_OFF) return "--cuda-graphs off";
  return g->why_not[3 * c + (int)f];
}

void rt_chunk_call(Rt *rt, int c, RtChunkFn f) {
  const RtModel *m = rt->model;
  void (*fn)(RtCtx *) = chunk_fn(m, c, f);
  if (!m->graphs) {
    /* A training forward's routed layers count their drops and load
     * (moe_report.c); a backward's recompute, validation and sampling
     * do not. */
    int count = f == RT_FN_FORWARD && rt->ctx.training;
    if (count) rt_dev_moe_count(m->chunks[c].vstage);
    fn(&rt->ctx);
    if (count) rt_dev_moe_count(-1);
    return;
  }
  if (m->graphs->step_values) m->graphs->step_values(&rt->ctx);
  if (why_plain(rt, c, f)) {
    fn(&rt->ctx);
    return;
  }
  if (!graphs.cache) graphs.cache = rt_xcalloc((size_t)(3 * m->nchunks), sizeof *graphs.cache);
  graphs.runs[rt_dev_graph_call(&graphs.cache[3 * c + (int)f], fn, &rt->ctx)]++;
}

/* "forward_c1" where the program has several chunks (as the generated
 * code names them). */
static void fn_name(const RtModel *m, int c, int f, char *buf, size_t len) {
  if (m->nchunks > 1) snprintf(buf, len, "%s_c%d", fn_names[f], c);
  else snprintf(buf, len, "%s", fn_names[f]);
}

/* Appends to buf (of len) at *at, keeping it terminated. */
static void add(char *buf, int len, int *at, const char *text) {
  int n = snprintf(buf + *at, (size_t)(len - *at), "%s", text);
  *at = *at + n < len ? *at + n : len - 1;
}

/* The functions whose reason to run plainly is `why` (NULL: the graphs),
 * as "forward, backward"; the number listed. */
static int list_fns(const Rt *rt, const char *why, char *buf, int len, int *at) {
  const RtModel *m = rt->model;
  int n = 0;
  char name[64];
  for (int c = 0; c < m->nchunks; c++)
    for (int f = 0; f < 3; f++) {
      if (!chunk_fn(m, c, (RtChunkFn)f)) continue;
      const char *w = why_plain(rt, c, (RtChunkFn)f);
      if (why ? !w || strcmp(w, why) != 0 : w != NULL) continue;
      fn_name(m, c, f, name, sizeof name);
      add(buf, len, at, n++ ? ", " : "");
      add(buf, len, at, name);
    }
  return n;
}

/* Whether a function before (c, f) has the same reason: each reason is
 * listed once, at its first function. */
static int seen_before(const Rt *rt, int c, int f, const char *why) {
  for (int k = 0; k < 3 * c + f; k++) {
    if (!chunk_fn(rt->model, k / 3, (RtChunkFn)(k % 3))) continue;
    const char *w = why_plain(rt, k / 3, (RtChunkFn)(k % 3));
    if (w && strcmp(w, why) == 0) return 1;
  }
  return 0;
}

void rt_graphs_describe(const Rt *rt, char *buf, int len) {
  int at = 0;
  buf[0] = 0;
  add(buf, len, &at, "replayed as graphs: ");
  if (!list_fns(rt, NULL, buf, len, &at)) add(buf, len, &at, "none");
  for (int c = 0; c < rt->model->nchunks; c++)
    for (int f = 0; f < 3; f++) {
      const char *why = chunk_fn(rt->model, c, (RtChunkFn)f) ? why_plain(rt, c, (RtChunkFn)f) : NULL;
      if (!why || seen_before(rt, c, f, why)) continue;
      add(buf, len, &at, " | plain launches (");
      add(buf, len, &at, why);
      add(buf, len, &at, "): ");
      list_fns(rt, why, buf, len, &at);
    }
}

void rt_graphs_finish(Rt *rt) {
  const RtModel *m = rt->model;
  if (!graphs.cache) return;
  rt_say("cuda graphs: %lld captured, %lld replays, %lld warm-up calls\n",
         (long long)graphs.runs[RT_DEV_GRAPH_CAPTURED], (long long)graphs.runs[RT_DEV_GRAPH_REPLAYED],
         (long long)graphs.runs[RT_DEV_GRAPH_PLAIN]);
  for (int i = 0; i < 3 * m->nchunks; i++) rt_dev_graph_free(graphs.cache[i]);
  free(graphs.cache);
  graphs.cache = NULL;
}
