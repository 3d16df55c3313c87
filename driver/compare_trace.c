/* shardc compare-trace MEASURED SIMULATED: a rank program's trace (`shardc
 * run --trace`) against the simulator's (`shardc simulate --trace`) of the
 * same configuration, action type by action type and the step time. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "timeline.h"

/* The action types compared: the simulator's categories, messages split
 * into the sends (posting to completion) and the receives (posting to the
 * end of the wait for them). */
enum { K_F, K_B, K_W, K_SEND, K_RECV, K_REDUCE, K_OPT, NKINDS };
static const char *const kind_names[NKINDS] = {
    "F (forward)", "B (backward)", "W (weight gradient)", "SEND (post to done)",
    "RECV (post to arrival)", "REDUCE_GRADS", "OPT_STEP (optimizer)"};

enum { MAX_STEPS = 64 };

typedef struct Summary {
  double sum[NKINDS];
  int n[NKINDS];
  /* Each step's first start and last end, in microseconds, by the step
   * the event names (the simulator's trace is one step, step 0). */
  double first[MAX_STEPS], last[MAX_STEPS];
  int steps;
  int ranks;
} Summary;

static int event_kind(const char *cat, const char *name) {
  if (!strcmp(cat, "F")) return K_F;
  if (!strcmp(cat, "B")) return K_B;
  if (!strcmp(cat, "W")) return K_W;
  if (!strcmp(cat, "reduce")) return K_REDUCE;
  if (!strcmp(cat, "optimizer")) return K_OPT;
  if (!strcmp(cat, "message")) return strncmp(name, "SEND", 4) ? K_RECV : K_SEND;
  return -1;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap + 1);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
  }
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

static double num(const cJSON *o, const char *key, double fallback) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

/* A Chrome trace's events, or NULL after saying what is wrong. */
static cJSON *load_trace(const char *path, cJSON **root) {
  char *text = read_text(path);
  if (!text) {
    fprintf(stderr, "shardc compare-trace: error: cannot read %s\n", path);
    return NULL;
  }
  *root = cJSON_Parse(text);
  free(text);
  cJSON *ev = cJSON_GetObjectItemCaseSensitive(*root, "traceEvents");
  if (!cJSON_IsArray(ev)) {
    fprintf(stderr, "shardc compare-trace: error: %s is not a Chrome trace (no traceEvents)\n",
            path);
    return NULL;
  }
  return ev;
}

/* Sums a trace's events into s; false after saying what is wrong. */
static bool summarize(const char *path, const cJSON *ev, Summary *s) {
  memset(s, 0, sizeof *s);
  int events = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, ev) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(ph) || !cJSON_IsString(name)) continue;
    int pid = (int)num(e, "pid", 0);
    if (pid + 1 > s->ranks) s->ranks = pid + 1;
    if (strcmp(ph->valuestring, "X") || !cJSON_IsString(cat)) continue;
    int k = event_kind(cat->valuestring, name->valuestring);
    double ts = num(e, "ts", 0), dur = num(e, "dur", 0);
    int step = (int)num(cJSON_GetObjectItemCaseSensitive(e, "args"), "step", 0);
    if (step < 0 || step >= MAX_STEPS) continue;
    if (step >= s->steps) {
      for (int i = s->steps; i <= step; i++) s->first[i] = 1e300, s->last[i] = -1e300;
      s->steps = step + 1;
    }
    if (ts < s->first[step]) s->first[step] = ts;
    if (ts + dur > s->last[step]) s->last[step] = ts + dur;
    if (k >= 0) s->sum[k] += dur, s->n[k]++;
    events++;
  }
  if (!events) {
    fprintf(stderr, "shardc compare-trace: error: %s holds no timed events\n", path);
    return false;
  }
  return true;
}

/* The mean over the steps the trace holds of their first start to last
 * end, in seconds. */
static double step_time(const Summary *s, int *nsteps) {
  double sum = 0;
  *nsteps = 0;
  for (int i = 0; i < s->steps; i++)
    if (s->last[i] >= s->first[i]) sum += s->last[i] - s->first[i], ++*nsteps;
  return *nsteps ? sum / *nsteps * 1e-6 : 0;
}


/* ------------------------------------------------------------------ SVG */

/* One trace's first step as the tables timeline.c draws: a row per
 * pipeline stage (the measured trace's ranks at t = 0, d = 0, whose
 * coordinates their process names give; the simulator's processes are
 * its stages), each row's events in posting order. */
typedef struct Rows {
  RtSchedule s;
  RtSchedTable *tables;
  RtSchedAction **acts;
  double **start, **end;
  int *n;
  double makespan;
} Rows;

/* Rows drawn at most, and the processes a trace may name. */
enum { MAX_ROWS = 64, MAX_PIDS = 65536 };

static int row_of(const cJSON *ev, int pid) {
  const cJSON *e;
  cJSON_ArrayForEach(e, ev) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "process_name") ||
        (int)num(e, "pid", -1) != pid)
      continue;
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"),
                                                       "name");
    int r, t, p, d;
    if (!cJSON_IsString(pn)) return pid;
    if (sscanf(pn->valuestring, "rank %d (t%d p%d d%d)", &r, &t, &p, &d) == 4)
      return t == 0 && d == 0 ? p : -1;
    if (sscanf(pn->valuestring, "stage %d", &p) == 1) return p;
    return pid;
  }
  return pid;
}

static bool event_action(const cJSON *e, RtSchedAction *a) {
  const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
  if (!cJSON_IsString(cat) || !cJSON_IsString(name)) return false;
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
  *a = (RtSchedAction){.chunk = (int16_t)num(args, "chunk", 0), .mb = (int32_t)num(args, "mb", 0)};
  int k = event_kind(cat->valuestring, name->valuestring);
  static const int kinds[NKINDS] = {RT_SCHED_F,    RT_SCHED_B,            RT_SCHED_W,
                                    RT_SCHED_SEND, RT_SCHED_RECV,         RT_SCHED_REDUCE_GRADS,
                                    RT_SCHED_OPT_STEP};
  if (k < 0) return false;
  a->kind = (uint8_t)kinds[k];
  if (k == K_SEND || k == K_RECV) {
    char msg[8] = "";
    int peer = 0;
    if (sscanf(name->valuestring, "%*[A-Z](%7[a-z], %*s %d", msg, &peer) != 2) return false;
    a->msg = strcmp(msg, "act") ? RT_SCHED_GRAD : RT_SCHED_ACT;
    a->peer = (int16_t)peer;
  }
  return true;
}

static const double *sort_ts;
static int by_start(const void *x, const void *y) {
  double a = sort_ts[*(const int *)x], b = sort_ts[*(const int *)y];
  return a < b ? -1 : a > b;
}

static bool build_rows(const cJSON *ev, Rows *rw) {
  memset(rw, 0, sizeof *rw);
  int n = cJSON_GetArraySize(ev), step = 1 << 30, rows = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, ev) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    if (cJSON_IsString(ph) && !strcmp(ph->valuestring, "X")) {
      int st = (int)num(cJSON_GetObjectItemCaseSensitive(e, "args"), "step", 0);
      if (st < step) step = st;
    }
  }
  RtSchedAction *acts = calloc((size_t)n + 1, sizeof *acts);
  double *from = calloc((size_t)n + 1, sizeof *from), *to = calloc((size_t)n + 1, sizeof *to);
  int *row = calloc((size_t)n + 1, sizeof *row), m = 0;
  static int rows_by_pid[MAX_PIDS];
  for (int i = 0; i < MAX_PIDS; i++) rows_by_pid[i] = -2;
  double t0 = 1e300;
  cJSON_ArrayForEach(e, ev) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X")) continue;
    if ((int)num(cJSON_GetObjectItemCaseSensitive(e, "args"), "step", 0) != step) continue;
    /* Each process's row once: row_of walks the whole trace. */
    int pid = (int)num(e, "pid", 0);
    int r = pid >= 0 && pid < MAX_PIDS ? rows_by_pid[pid] : -1;
    if (r == -2) r = rows_by_pid[pid] = row_of(ev, pid);
    if (r < 0 || r >= MAX_ROWS || !event_action(e, &acts[m])) continue;
    row[m] = r;
    from[m] = num(e, "ts", 0) * 1e-6;
    to[m] = from[m] + num(e, "dur", 0) * 1e-6;
    if (from[m] < t0) t0 = from[m];
    if (r + 1 > rows) rows = r + 1;
    m++;
  }
  if (!m) {
    free(acts), free(from), free(to), free(row);
    return false;
  }
  int *order = calloc((size_t)m, sizeof *order);
  for (int i = 0; i < m; i++) order[i] = i;
  sort_ts = from;
  qsort(order, (size_t)m, sizeof *order, by_start);
  rw->tables = calloc((size_t)rows, sizeof *rw->tables);
  rw->acts = calloc((size_t)rows, sizeof *rw->acts);
  rw->start = calloc((size_t)rows, sizeof *rw->start);
  rw->end = calloc((size_t)rows, sizeof *rw->end);
  rw->n = calloc((size_t)rows, sizeof *rw->n);
  for (int r = 0; r < rows; r++) {
    rw->acts[r] = calloc((size_t)m, sizeof **rw->acts);
    rw->start[r] = calloc((size_t)m, sizeof **rw->start);
    rw->end[r] = calloc((size_t)m, sizeof **rw->end);
  }
  int chunks = 1, micro = 1;
  for (int k = 0; k < m; k++) {
    int i = order[k], r = row[i], j = rw->n[r]++;
    rw->acts[r][j] = acts[i];
    rw->start[r][j] = from[i] - t0;
    rw->end[r][j] = to[i] - t0;
    if (to[i] - t0 > rw->makespan) rw->makespan = to[i] - t0;
    if (acts[i].kind == RT_SCHED_F) {
      if (acts[i].chunk + 1 > chunks) chunks = acts[i].chunk + 1;
      if (acts[i].mb + 1 > micro) micro = acts[i].mb + 1;
    }
  }
  for (int r = 0; r < rows; r++) rw->tables[r] = (RtSchedTable){rw->acts[r], rw->n[r]};
  rw->s = (RtSchedule){.name = "trace", .pp = rows, .vpp = chunks, .microbatches = micro,
                       .nbuckets = 1, .stages = rw->tables};
  free(acts), free(from), free(to), free(row), free(order);
  return true;
}

static void free_rows(Rows *rw) {
  for (int r = 0; r < rw->s.pp; r++) free(rw->acts[r]), free(rw->start[r]), free(rw->end[r]);
  free(rw->acts), free(rw->start), free(rw->end), free(rw->n), free(rw->tables);
}

/* Both first steps drawn by timeline.c on one time axis, the measured one
 * above the simulated one: each drawing is a complete SVG, nested in an
 * outer one at its height. */
static bool write_svg(const char *path, const cJSON *ev[2], const char *const paths[2]) {
  Rows rw[2];
  for (int k = 0; k < 2; k++)
    if (!build_rows(ev[k], &rw[k])) {
      fprintf(stderr, "shardc compare-trace: error: %s: no step to draw\n", paths[k]);
      if (k) free_rows(&rw[0]);
      return false;
    }
  double span = rw[0].makespan > rw[1].makespan ? rw[0].makespan : rw[1].makespan;
  char *parts[2] = {NULL, NULL};
  size_t sizes[2];
  double w[2] = {0, 0}, h[2] = {0, 0};
  static const char *const what[2] = {"measured", "simulated"};
  for (int k = 0; k < 2; k++) {
    FILE *mem = open_memstream(&parts[k], &sizes[k]);
    DrvTimeline t = {
        .s = &rw[k].s, .start = rw[k].start, .end = rw[k].end, .makespan = rw[k].makespan,
        .scale = 1e3, .min_unit = 1100 / (span * 1e3), .max_unit = 1100 / (span * 1e3),
        .comm = true, .time_caption = "time in ms (both drawings on the same scale)",
        .title = ir_fmt("%s step: %.4g ms", what[k], rw[k].makespan * 1e3),
        .subtitle = ir_fmt("%s (first step of the trace; one row per pipeline stage)", paths[k])};
    drv_timeline_svg(mem, &t);
    fclose(mem);
    sscanf(parts[k], "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lf\" height=\"%lf\"", &w[k],
           &h[k]);
  }
  FILE *f = fopen(path, "w");
  bool ok = f != NULL;
  if (f) {
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\">\n",
            w[0] > w[1] ? w[0] : w[1], h[0] + h[1]);
    for (int k = 0; k < 2; k++) {
      /* The nested drawing, placed by a y on its own root element; a
       * narrower one's legend may reach past its own width. */
      fprintf(f, "<svg y=\"%.0f\" overflow=\"visible\"%s", k ? h[0] : 0, parts[k] + 4);
    }
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) ok = false;
  }
  if (!ok) fprintf(stderr, "shardc compare-trace: error: cannot write %s\n", path);
  for (int k = 0; k < 2; k++) free(parts[k]), free_rows(&rw[k]);
  return ok;
}

static const DrvOption compare_options[] = {
    {"--svg", "FILE", "draw the first step of both, measured above simulated, on one time axis"},
    {NULL, NULL, NULL}};

const DrvCommand drv_compare_trace_command = {
    "compare-trace", "MEASURED SIMULATED",
    "compare a measured trace (shardc run --trace) with a simulated one",
    "Reads two Chrome traces: one written by the rank programs (`shardc run\n"
    "--trace FILE`) and one by `shardc simulate --trace FILE` of the same\n"
    "configuration. Prints, for each action type, the mean duration in each\n"
    "and their ratio (measured / simulated), and the step time of each (the\n"
    "first event's start to the last event's end, averaged over the measured\n"
    "steps) with the simulation's error relative to the measurement.",
    compare_options, drv_cmd_compare_trace};

int drv_cmd_compare_trace(int nargs, DrvArg *args) {
  const char *paths[2] = {NULL, NULL};
  int npaths = 0;
  for (int i = 0; i < nargs; i++)
    if (!args[i].opt && npaths < 3) {
      if (npaths < 2) paths[npaths] = args[i].value;
      npaths++;
    }
  if (npaths != 2)
    return drv_usage_error(&drv_compare_trace_command, "expected MEASURED and SIMULATED traces");
  Summary s[2];
  cJSON *root[2] = {NULL, NULL};
  const cJSON *ev[2];
  bool ok = true;
  for (int k = 0; k < 2 && ok; k++)
    ok = (ev[k] = load_trace(paths[k], &root[k])) && summarize(paths[k], ev[k], &s[k]);
  const char *svg = drv_value(nargs, args, "--svg");
  if (ok && svg && !write_svg(svg, ev, paths)) ok = false;
  if (!ok) {
    cJSON_Delete(root[0]);
    cJSON_Delete(root[1]);
    return 1;
  }
  printf("%-24s %14s %14s %10s\n", "mean duration (ms)", "measured", "simulated", "ratio");
  for (int k = 0; k < NKINDS; k++) {
    if (!s[0].n[k] && !s[1].n[k]) continue;
    double m = s[0].n[k] ? s[0].sum[k] / s[0].n[k] * 1e-3 : 0;
    double p = s[1].n[k] ? s[1].sum[k] / s[1].n[k] * 1e-3 : 0;
    char ratio[32] = "-";
    if (s[0].n[k] && s[1].n[k] && p > 0) snprintf(ratio, sizeof ratio, "%.3f", m / p);
    printf("%-24s %9.4g (%3d) %9.4g (%3d) %10s\n", kind_names[k], m, s[0].n[k], p, s[1].n[k],
           ratio);
  }
  int nm, ns;
  double tm = step_time(&s[0], &nm), ts = step_time(&s[1], &ns);
  printf("step time: measured %.4g ms (mean of %d step%s, %d rank%s), simulated %.4g ms "
         "(%d process%s)\n", tm * 1e3, nm, nm == 1 ? "" : "s", s[0].ranks,
         s[0].ranks == 1 ? "" : "s", ts * 1e3, s[1].ranks, s[1].ranks == 1 ? "" : "es");
  if (tm > 0 && ts > 0)
    printf("ratio measured / simulated %.3f; simulated step time error %+.1f%%\n", tm / ts,
           100 * (ts - tm) / tm);
  cJSON_Delete(root[0]);
  cJSON_Delete(root[1]);
  return 0;
}
