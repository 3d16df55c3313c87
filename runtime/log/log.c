/* Progress lines and the JSON log (see log.h). */
#include "log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "util.h"

const char *rt_fmt_duration(char *buf, int len, double seconds) {
  long long s = (long long)(seconds + 0.5);
  if (s < 60)
    snprintf(buf, (size_t)len, "%llds", s);
  else if (s < 3600)
    snprintf(buf, (size_t)len, "%lldm%02llds", s / 60, s % 60);
  else
    snprintf(buf, (size_t)len, "%lldh%02lldm", s / 3600, s / 60 % 60);
  return buf;
}

/* The step an existing log line is about, or -1 when it does not parse
 * (a line torn by a crash). */
static int64_t line_step(const char *line) {
  cJSON *j = cJSON_Parse(line);
  const cJSON *s = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
  int64_t step = cJSON_IsNumber(s) ? (int64_t)s->valuedouble : -1;
  cJSON_Delete(j);
  return step;
}

/* Rewrites the log with only the steps up to `upto`. */
static void trim_log(const char *path, int64_t upto) {
  FILE *in = fopen(path, "r");
  if (!in) return; /* no log yet: nothing to keep */
  size_t plen = strlen(path);
  char *tmp = rt_xmalloc(plen + 5);
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  FILE *out = fopen(tmp, "w");
  if (!out) rt_fatal(tmp, "cannot create: %s", strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, in)) > 0) {
    int64_t s = line_step(line);
    if (s >= 0 && s <= upto) fputs(line, out);
  }
  free(line);
  fclose(in);
  int failed = ferror(out);
  if (fclose(out) != 0 || failed) rt_fatal(tmp, "write failed: %s", strerror(errno));
  if (rename(tmp, path) != 0) rt_fatal(path, "cannot replace: %s", strerror(errno));
  free(tmp);
}

void rt_log_open(RtLog *l, const char *path, int64_t keep_upto) {
  if (!path) return;
  if (keep_upto >= 0) trim_log(path, keep_upto);
  l->json = fopen(path, keep_upto >= 0 ? "a" : "w");
  if (!l->json) rt_fatal(path, "cannot open for writing: %s", strerror(errno));
}

void rt_log_close(RtLog *l) {
  if (l->json && fclose(l->json) != 0) rt_fatal("--log-json", "write failed: %s", strerror(errno));
  l->json = NULL;
}

void rt_log_time(RtLog *l, double seconds) {
  l->run_time += seconds;
  l->run_steps++;
  l->since_time += seconds;
  l->since_steps++;
}

/* The routed layers' line of a step (log.h). */
static void log_moe(const RtStepInfo *s) {
  char drops[1024], loads[1024];
  int64_t d = 0, c = 0;
  double worst = 0;
  int a = 0, b = 0;
  for (int i = 0; i < s->moe_layers; i++) {
    d += s->moe_dropped[i], c += s->moe_copies[i];
    if (s->moe_load[i] > worst) worst = s->moe_load[i];
    if (a < (int)sizeof drops)
      a += snprintf(drops + a, sizeof drops - (size_t)a, "%s%d: %lld", i ? ", " : "", i,
                    (long long)s->moe_dropped[i]);
    if (b < (int)sizeof loads)
      b += snprintf(loads + b, sizeof loads - (size_t)b, "%s%d: %.2f", i ? ", " : "", i,
                    s->moe_load[i]);
  }
  rt_say("  moe: dropped %lld of %lld token-slots (%s) | load max/mean %.2f (%s)\n", (long long)d,
         (long long)c, drops, worst, loads);
}

void rt_log_progress(RtLog *l, const RtStepInfo *s) {
  char tps[32], eta[32];
  double rate =
      l->since_time > 0 ? (double)(l->tokens_per_step * l->since_steps) / l->since_time : 0;
  double left =
      l->run_steps ? l->run_time / (double)l->run_steps * (double)(s->steps - s->step) : 0;
  rt_say("step %lld/%lld | loss %.4f | lr %.2e | grad norm %.4g | %s tok/s | eta %s\n",
         (long long)s->step, (long long)s->steps, s->loss, s->lr, s->grad_norm,
         rt_fmt_thousands(tps, sizeof tps, (int64_t)(rate + 0.5)),
         rt_fmt_duration(eta, sizeof eta, left));
  if (s->moe_layers) log_moe(s);
  fflush(stdout);
  l->since_time = 0;
  l->since_steps = 0;
}

void rt_log_json(RtLog *l, const RtStepInfo *s) {
  if (!l->json) return;
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "step", (double)s->step);
  cJSON_AddNumberToObject(j, "loss", s->loss);
  cJSON_AddNumberToObject(j, "lr", s->lr);
  cJSON_AddNumberToObject(j, "grad_norm", s->grad_norm);
  cJSON_AddNumberToObject(j, "tokens_per_s", s->tokens_per_s);
  if (s->has_val) cJSON_AddNumberToObject(j, "val_loss", s->val_loss);
  if (s->moe_layers) {
    cJSON *dropped = cJSON_AddArrayToObject(j, "moe_dropped");
    cJSON *slots = cJSON_AddArrayToObject(j, "moe_slots");
    cJSON *load = cJSON_AddArrayToObject(j, "moe_load");
    for (int i = 0; i < s->moe_layers; i++) {
      cJSON_AddItemToArray(dropped, cJSON_CreateNumber((double)s->moe_dropped[i]));
      cJSON_AddItemToArray(slots, cJSON_CreateNumber((double)s->moe_copies[i]));
      cJSON_AddItemToArray(load, cJSON_CreateNumber(s->moe_load[i]));
    }
  }
  char *text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!text) rt_fatal("--log-json", "out of memory");
  /* A line per step, flushed, so a crash loses at most the step at hand;
   * a write that fails (a full file system) is an error, not a log cut
   * short in silence. */
  if (fprintf(l->json, "%s\n", text) < 0 || fflush(l->json) != 0)
    rt_fatal("--log-json", "write failed at step %lld: %s (the log holds the steps before it, "
             "perhaps the start of this one)", (long long)s->step, strerror(errno));
  free(text);
}

/* ------------------------------------------------------------ profiling */

/* The per-op timer (see log.h). */
#define PROF_MAX 1024

typedef struct ProfEntry {
  const char *what;
  double seconds;
  int64_t calls;
} ProfEntry;

static struct {
  int on;
  int n;
  ProfEntry e[PROF_MAX];
} prof;

void rt_prof_enable(void) { prof.on = 1; }

void rt_prof_add(const char *what, double seconds) {
  if (!prof.on) return;
  for (int i = 0; i < prof.n; i++)
    if (prof.e[i].what == what || strcmp(prof.e[i].what, what) == 0) {
      prof.e[i].seconds += seconds;
      prof.e[i].calls++;
      return;
    }
  if (prof.n == PROF_MAX) return;
  prof.e[prof.n++] = (ProfEntry){what, seconds, 1};
}

static int by_time(const void *a, const void *b) {
  double x = ((const ProfEntry *)a)->seconds, y = ((const ProfEntry *)b)->seconds;
  return (x < y) - (x > y);
}

/* The label's first two words: its phase and op. */
static const char *prof_group(const char *what, char *buf, size_t len) {
  const char *sp = strchr(what, ' ');
  sp = sp ? strchr(sp + 1, ' ') : NULL;
  size_t n = sp ? (size_t)(sp - what) : strlen(what);
  if (n >= len) n = len - 1;
  memcpy(buf, what, n);
  buf[n] = 0;
  return buf;
}

static void prof_table(const char *title, ProfEntry *e, int n, double total, int64_t steps) {
  qsort(e, (size_t)n, sizeof *e, by_time);
  fprintf(stderr, "%s\n%10s %6s %8s  %s\n", title, "ms/step", "%", "calls", "what");
  for (int i = 0; i < n; i++)
    fprintf(stderr, "%10.2f %6.1f %8lld  %s\n", 1e3 * e[i].seconds / (double)steps,
            100 * e[i].seconds / total, (long long)(e[i].calls / steps), e[i].what);
}

void rt_prof_report(int64_t steps) {
  if (!prof.on || prof.n == 0 || steps <= 0) return;
  static ProfEntry groups[PROF_MAX];
  static char names[PROF_MAX][64];
  int ng = 0;
  double total = 0;
  for (int i = 0; i < prof.n; i++) {
    char buf[64];
    prof_group(prof.e[i].what, buf, sizeof buf);
    total += prof.e[i].seconds;
    int g = 0;
    while (g < ng && strcmp(names[g], buf) != 0) g++;
    if (g == ng) {
      memcpy(names[ng], buf, sizeof buf);
      groups[ng++] = (ProfEntry){names[g], 0, 0};
    }
    groups[g].seconds += prof.e[i].seconds;
    groups[g].calls += prof.e[i].calls;
  }
  fprintf(stderr, "profile over %lld steps: %.1f ms/step timed\n", (long long)steps,
          1e3 * total / (double)steps);
  prof_table("by op (F forward, B backward, S step):", groups, ng, total, steps);
  prof_table("by op and shape:", prof.e, prof.n, total, steps);
}
