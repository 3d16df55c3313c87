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
  if (fclose(out) != 0) rt_fatal(tmp, "write failed: %s", strerror(errno));
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
  char *text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!text) rt_fatal("--log-json", "out of memory");
  /* A line per step, flushed, so a crash loses at most the step at hand. */
  fprintf(l->json, "%s\n", text);
  fflush(l->json);
  free(text);
}
