/* --trace FILE (see trace.h). */
#include "trace.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../abi/chrome_trace.h"
#include "comm.h"
#include "rt.h"
#include "tp.h"
#include "util.h"

/* One recorded action; times in seconds since the common origin. */
typedef struct Event {
  double from, to;
  RtSchedAction a;
  int32_t step;
} Event;

/* Doubles per event when gathered: from, to, step, kind, msg, chunk,
 * peer, mb. */
enum { WIRE = 8 };

static struct {
  const char *path;
  Event *ev;
  int n, cap, dropped;
  int64_t from, to; /* the recorded steps, [from, to) */
  int64_t step;     /* the step running now, -1: not recorded */
  double origin;
} T = {.step = -1};

void rt_trace_open(Rt *rt, int64_t first) {
  const RtFlags *f = &rt->f;
  if (!f->trace) return;
  T.path = f->trace;
  /* The first step pays for warming caches and the allocator: the steps
   * after it are the ones a prediction describes, unless there is only
   * one. */
  T.from = f->steps - first > 1 ? first + 1 : first;
  T.to = T.from + f->trace_steps;
  if (T.to > f->steps) T.to = f->steps;
  /* A step records each action of the table once (a program of one chunk:
   * every microbatch's forward and backward, and the update). */
  int64_t per = rt->model->nactions > 2 * rt->micro + 1 ? rt->model->nactions : 2 * rt->micro + 1;
  int64_t steps = T.to > T.from ? T.to - T.from : 0;
  T.cap = (int)(per * steps + 1);
  T.ev = rt_xcalloc((size_t)T.cap, sizeof *T.ev);
  /* A program of one rank has no communicators (rt_tp_comms is NULL). */
  RtComms *cs = rt_tp_comms();
  if (cs) rt_comm_barrier(cs->world);
  T.origin = rt_now();
}

void rt_trace_step(int64_t s) { T.step = T.path && s >= T.from && s < T.to ? s : -1; }

double rt_trace_now(void) { return T.step >= 0 ? rt_now() - T.origin : 0; }

void rt_trace_add(const RtSchedAction *a, double from, double to) {
  if (T.step < 0) return;
  if (T.n == T.cap) {
    T.dropped++;
    return;
  }
  T.ev[T.n++] = (Event){.from = from, .to = to, .a = *a, .step = (int32_t)T.step};
}

void rt_trace_add_kind(int kind, int chunk, int mb, double from, double to) {
  RtSchedAction a = {.kind = (uint8_t)kind, .chunk = (int16_t)chunk, .mb = mb};
  rt_trace_add(&a, from, to);
}

/* ------------------------------------------------------------ output */

/* One gathered event (WIRE doubles) as a complete ("X") event, its time
 * from the earliest event of the trace, in microseconds. */
static void add_event(cJSON *ev, int pid, const double *w, double t0) {
  RtSchedAction a = {.kind = (uint8_t)w[3], .msg = (uint8_t)w[4], .chunk = (int16_t)w[5],
                     .peer = (int16_t)w[6], .mb = (int32_t)w[7]};
  char name[96];
  cJSON *args = chrome_trace_event(ev, rt_sched_action_str(&a, name, sizeof name), &a, pid, w[0] - t0, w[1] - w[0]);
  cJSON_AddNumberToObject(args, "step", w[2] + 1);
}

static void write_json(const char *path, const int32_t *counts, const int32_t *coords,
                       const double *all, int size, int most) {
  double t0 = 1e300;
  for (int r = 0; r < size; r++)
    for (int i = 0; i < counts[r]; i++)
      if (all[((size_t)r * most + i) * WIRE] < t0) t0 = all[((size_t)r * most + i) * WIRE];
  cJSON *o = cJSON_CreateObject(), *ev = cJSON_AddArrayToObject(o, "traceEvents");
  for (int r = 0; r < size; r++) {
    char name[64];
    snprintf(name, sizeof name, "rank %d (t%d p%d d%d)", r, coords[3 * r], coords[3 * r + 1],
             coords[3 * r + 2]);
    chrome_trace_process(ev, r, name);
    for (int i = 0; i < counts[r]; i++) add_event(ev, r, &all[((size_t)r * most + i) * WIRE], t0);
  }
  if (!chrome_trace_write(o, path)) rt_error("--trace", "cannot write %s", path);
}

void rt_trace_close(Rt *rt) {
  if (!T.path) return;
  RtComms *cs = rt_tp_comms();
  RtComm *world = cs ? cs->world : NULL;
  int size = world ? rt_comm_size(world) : 1, me = world ? rt_comm_world_rank() : 0;
  if (T.dropped) rt_error("--trace", "%d events did not fit the buffer and are left out", T.dropped);
  int32_t mine[4] = {T.n, rt->coord.tp, rt->coord.pp, rt->coord.dp};
  int32_t *hdr = rt_xcalloc((size_t)size * 4, sizeof *hdr);
  if (world)
    rt_comm_allgather(world, mine, hdr, 4, RT_COMM_I32);
  else
    memcpy(hdr, mine, sizeof mine);
  int most = 1;
  for (int r = 0; r < size; r++)
    if (hdr[4 * r] > most) most = hdr[4 * r];
  double *wire = rt_xcalloc((size_t)most * WIRE, sizeof *wire);
  double *all = rt_xcalloc((size_t)size * most * WIRE, sizeof *all);
  for (int i = 0; i < T.n; i++) {
    const Event *e = &T.ev[i];
    double *w = &wire[(size_t)i * WIRE];
    w[0] = e->from, w[1] = e->to, w[2] = e->step, w[3] = e->a.kind, w[4] = e->a.msg;
    w[5] = e->a.chunk, w[6] = e->a.peer, w[7] = e->a.mb;
  }
  if (world)
    rt_comm_allgather(world, wire, all, (int64_t)most * WIRE, RT_COMM_F64);
  else
    memcpy(all, wire, (size_t)most * WIRE * sizeof *wire);
  if (me == 0) {
    int32_t *counts = rt_xcalloc((size_t)size, sizeof *counts);
    int32_t *coords = rt_xcalloc((size_t)size * 3, sizeof *coords);
    for (int r = 0; r < size; r++) {
      counts[r] = hdr[4 * r];
      for (int k = 0; k < 3; k++) coords[3 * r + k] = hdr[4 * r + 1 + k];
    }
    write_json(T.path, counts, coords, all, size, most);
    free(counts);
    free(coords);
  }
  free(hdr);
  free(wire);
  free(all);
  free(T.ev);
  T.ev = NULL;
  T.path = NULL;
}
