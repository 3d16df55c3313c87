/* shardc compare-trace MEASURED SIMULATED: a rank program's trace (`shardc
 * run --trace`) against the simulator's (`shardc simulate --trace`) of the
 * same configuration, action type by action type and the step time. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

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

/* Reads a Chrome trace into s; false after saying what is wrong. */
static bool summarize(const char *path, Summary *s) {
  memset(s, 0, sizeof *s);
  char *text = read_text(path);
  if (!text) {
    fprintf(stderr, "shardc compare-trace: error: cannot read %s\n", path);
    return false;
  }
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  if (!cJSON_IsArray(ev)) {
    fprintf(stderr, "shardc compare-trace: error: %s is not a Chrome trace (no traceEvents)\n",
            path);
    cJSON_Delete(root);
    return false;
  }
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
  cJSON_Delete(root);
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

static const DrvOption compare_options[] = {{NULL, NULL, NULL}};

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
  if (!summarize(paths[0], &s[0]) || !summarize(paths[1], &s[1])) return 1;
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
  return 0;
}
