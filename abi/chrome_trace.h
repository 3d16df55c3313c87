/* The Chrome trace (chrome://tracing, Perfetto) of a step's actions, as
 * both a rank program's --trace (runtime/trace/trace.c: measured wall
 * times) and the simulator's `shardc simulate --trace` (driver/simulate.c:
 * modelled times) write it, so that `shardc compare-trace` reads the two
 * alike: one process per rank or stage, each with the three rows below,
 * one complete ("X") event per action, times in microseconds. Header only,
 * on cJSON, which both sides link. */
#ifndef SHARD_ABI_CHROME_TRACE_H
#define SHARD_ABI_CHROME_TRACE_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "schedule.h"

/* The row (thread id) of an action of `kind` and its category: compute,
 * pipeline messages, the data-parallel stream. */
static inline int chrome_trace_row(int kind, const char **cat) {
  switch (kind) {
  case RT_SCHED_SEND: case RT_SCHED_RECV: *cat = "message"; return 1;
  case RT_SCHED_REDUCE_GRADS: *cat = "reduce"; return 2;
  case RT_SCHED_OPT_STEP: *cat = "optimizer"; return 0;
  default: *cat = rt_sched_kind_name(kind); return 0;
  }
}

/* A metadata ("M") event: `what` (process_name, thread_name) of pid/tid. */
static inline void chrome_trace_meta(cJSON *ev, const char *what, int pid, int tid,
                                     const char *name) {
  cJSON *e = cJSON_CreateObject(), *args = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "name", what);
  cJSON_AddStringToObject(e, "ph", "M");
  cJSON_AddNumberToObject(e, "pid", pid);
  cJSON_AddNumberToObject(e, "tid", tid);
  cJSON_AddStringToObject(args, "name", name);
  cJSON_AddItemToObject(e, "args", args);
  cJSON_AddItemToArray(ev, e);
}

/* Process pid, named `name`, with its three rows named. */
static inline void chrome_trace_process(cJSON *ev, int pid, const char *name) {
  static const char *const rows[] = {"compute", "pipeline messages", "data-parallel stream"};
  chrome_trace_meta(ev, "process_name", pid, 0, name);
  for (int k = 0; k < 3; k++) chrome_trace_meta(ev, "thread_name", pid, k, rows[k]);
}

/* A complete ("X") event of action `a`, named `name`, on its row of
 * process pid, `start` seconds from the trace's origin, lasting `dur`
 * seconds. Returns its args (chunk, mb), to which a caller may add. */
static inline cJSON *chrome_trace_event(cJSON *ev, const char *name, const RtSchedAction *a,
                                        int pid, double start, double dur) {
  const char *cat;
  int tid = chrome_trace_row(a->kind, &cat);
  cJSON *e = cJSON_CreateObject(), *args = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "name", name);
  cJSON_AddStringToObject(e, "cat", cat);
  cJSON_AddStringToObject(e, "ph", "X");
  cJSON_AddNumberToObject(e, "pid", pid);
  cJSON_AddNumberToObject(e, "tid", tid);
  cJSON_AddNumberToObject(e, "ts", start * 1e6);
  cJSON_AddNumberToObject(e, "dur", dur * 1e6);
  cJSON_AddNumberToObject(args, "chunk", a->chunk);
  cJSON_AddNumberToObject(args, "mb", a->mb);
  cJSON_AddItemToObject(e, "args", args);
  cJSON_AddItemToArray(ev, e);
  return args;
}

/* Writes trace `o` (its "traceEvents" filled) to path on one line and
 * frees it; 0 when the file could not be written. */
static inline int chrome_trace_write(cJSON *o, const char *path) {
  cJSON_AddStringToObject(o, "displayTimeUnit", "ms");
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  FILE *f = fopen(path, "w");
  int ok = f && fprintf(f, "%s\n", text) >= 0;
  if (f && fclose(f) != 0) ok = 0;
  free(text);
  return ok;
}

#endif
