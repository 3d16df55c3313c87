/* `shardc schedule`: builds and verifies the pipeline schedule of a cluster
 * shape and shows it: a summary, the tables as JSON (--json), the timeline
 * in unit time as SVG (--svg, drawn like the figures of Narayanan et al.)
 * and as a Chrome trace (--trace, for chrome://tracing or Perfetto).
 *
 * The schedule depends only on p, v and m; the model is read for its layer
 * count (every virtual stage needs a layer) and for the shape of the
 * tensor the stages pass each other (the layer stack's activation). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/schedule.h"
#include "driver.h"
#include "timeline.h"

static const DrvOption schedule_options[] = {
    DRV_DEFINE_OPTION,
    {"--pp", "P", "pipeline stages (default 1)"},
    {"--vpp", "V", "model chunks per stage, interleaving (default 1)"},
    {"--dp", "D", "data-parallel replicas (default 1)"},
    {"--tp", "T", "tensor-parallel size (default 1; with --sequence-parallel it splits messages)"},
    {"--sequence-parallel", NULL, "messages carry [b, s/t, h]"},
    {"--microbatch", "B", "sequences per microbatch (sets the model's `batch`)"},
    {"--global-batch", "N", "sequences per step; m = N / (microbatch * dp) (default: m = 8)"},
    {"--schedule", "NAME", DRV_SCHEDULE_HELP},
    DRV_SCHEDULE_OPTIONS,
    {"--list", NULL, "print the registered schedules, one a line: its name and what it does"},
    {"--fb-ratio", "R", "a backward takes R times a forward in the timeline (default 1)"},
    {"--svg", "FILE", "draw the timeline of every stage as SVG"},
    {"--trace", "FILE", "write the timeline as a Chrome trace (JSON)"},
    {"--json", NULL, "print the tables and the verifier's figures as JSON"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_schedule_command = {
    "schedule", "MODEL [options] | --list",
    "build, verify and draw the pipeline schedule of a cluster shape",
    "Builds every stage's action table for p stages, v chunks per stage and\n"
    "m microbatches, verifies all of them together (no stage waits forever,\n"
    "every message sent and received once with one shape, each backward after\n"
    "its forward) and reports the bubble of a step in unit time (a forward\n"
    "takes 1, a backward R): bubble_fraction is (step - ideal) / ideal, the\n"
    "paper's definition, which is (p - 1)/(v m) for the schedules here.\n"
    "--list shows the registered schedules (see docs/schedules.md).",
    schedule_options, drv_cmd_schedule};

/* A positive integer flag up to limit. */
static bool int_flag(int nargs, DrvArg *args, const char *name, int dflt, int limit, int *out) {
  const char *s = drv_value(nargs, args, name);
  *out = dflt;
  if (!s) return true;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end || end == s || v < 1 || v > limit) {
    drv_usage_error(&drv_schedule_command, "%s: expected a positive integer up to %d, got '%s'",
                    name, limit, s);
    return false;
  }
  *out = (int)v;
  return true;
}

/* What the command was asked for. */
typedef struct Config {
  const char *model, *name;
  int pp, vpp, dp, tp, microbatch, global_batch, m, layers, vpp_group;
  int default_m;           /* m without --global-batch: 8, or the schedule file's */
  const char *file;        /* --schedule-file */
  SchedScript *script;     /* read from it */
  bool seq_parallel;
  double fb_ratio;
  RtSchedShape shape;
} Config;

/* Reads --schedule-file; its p, v and m stand in for --pp, --vpp and
 * --global-batch when those are not given. False after an error. */
static bool read_schedule_file(int nargs, DrvArg *args, Config *c) {
  char *error;
  if (!(c->script = sched_script_load(c->file, &error))) {
    fprintf(stderr, "shardc schedule: error: %s", error);
    free(error);
    return false;
  }
  int p, v, m;
  sched_script_shape(c->script, &p, &v, &m);
  if (!drv_value(nargs, args, "--pp")) c->pp = p;
  if (!drv_value(nargs, args, "--vpp")) c->vpp = v;
  c->default_m = m, c->name = sched_script_def.name;
  return true;
}

static bool parse_flags(int nargs, DrvArg *args, Config *c) {
  bool ok = int_flag(nargs, args, "--pp", 1, 1 << 15, &c->pp);
  ok = int_flag(nargs, args, "--vpp", 1, 1 << 15, &c->vpp) && ok;
  ok = int_flag(nargs, args, "--dp", 1, 1 << 20, &c->dp) && ok;
  ok = int_flag(nargs, args, "--tp", 1, 1 << 16, &c->tp) && ok;
  ok = int_flag(nargs, args, "--global-batch", 0, 1 << 30, &c->global_batch) && ok;
  c->fb_ratio = 1;
  const char *r = drv_value(nargs, args, "--fb-ratio");
  if (r) {
    char *end;
    c->fb_ratio = strtod(r, &end);
    if (*end || end == r || !(c->fb_ratio > 0 && c->fb_ratio <= 1000)) {
      drv_usage_error(&drv_schedule_command, "--fb-ratio: expected a number in (0, 1000], got '%s'", r);
      ok = false;
    }
  }
  ok = int_flag(nargs, args, "--microbatch", 0, 1 << 20, &c->microbatch) && ok;
  c->seq_parallel = drv_flag(nargs, args, "--sequence-parallel");
  ok = drv_schedule_options(&drv_schedule_command, nargs, args, &c->vpp_group, &c->file) && ok;
  c->name = drv_value(nargs, args, "--schedule");
  if (c->name && !sched_find(c->name)) {
    drv_usage_error(&drv_schedule_command, "--schedule: unknown schedule '%s' (known: %s)", c->name,
                    sched_names());
    ok = false;
  }
  if (!c->name) c->name = sched_default_name(c->vpp);
  c->default_m = 8;
  if (ok && c->file) ok = read_schedule_file(nargs, args, c);
  return ok;
}

/* The layer count (the repeat counts of the top-level graph) and the shape
 * of the activation the layer stack carries, which is what stages send. */
static void model_facts(IrGraph *g, Config *c) {
  c->layers = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->op != IR_OP_REPEAT) continue;
    c->layers += (int)ir_attr_int(n, "count");
    const IrType *t = n->nin > 0 ? &n->in[0]->type : NULL;
    if (c->shape.rank == 0 && t && ir_type_known(t) && t->rank <= RT_SCHED_MAX_RANK) {
      c->shape.rank = t->rank;
      for (int d = 0; d < t->rank; d++) c->shape.dims[d] = t->shape[d];
    }
  }
}

/* Microbatches per step and the checks on the model; false after an error. */
static bool derive(Config *c) {
  const char *cmd = drv_schedule_command.name;
  if (c->microbatch == 0) c->microbatch = c->shape.rank > 0 ? (int)c->shape.dims[0] : 1;
  if (c->global_batch == 0) c->global_batch = c->default_m * c->microbatch * c->dp;
  long long per = (long long)c->microbatch * c->dp;
  if (c->global_batch % per != 0) {
    fprintf(stderr,
            "shardc %s: error: --global-batch %d is not a multiple of microbatch %d x dp %d\n", cmd,
            c->global_batch, c->microbatch, c->dp);
    return false;
  }
  c->m = (int)(c->global_batch / per);
  int pv = c->pp * c->vpp;
  if (pv > 1 && c->layers < pv) {
    fprintf(stderr, "shardc %s: error: %s has %d layers, fewer than the p x v = %d virtual stages "
            "(each needs at least one layer)\n", cmd, c->model, c->layers, pv);
    return false;
  }
  if (c->seq_parallel && c->tp > 1 && c->shape.rank >= 2) {
    if (c->shape.dims[1] % c->tp != 0) {
      fprintf(stderr, "shardc %s: error: --sequence-parallel: the sequence %lld does not split "
              "over t = %d\n", cmd, (long long)c->shape.dims[1], c->tp);
      return false;
    }
    c->shape.dims[1] /= c->tp;
  }
  return true;
}

static bool is_compute(const RtSchedAction *a) {
  return a->kind == RT_SCHED_F || a->kind == RT_SCHED_B || a->kind == RT_SCHED_W;
}

/* The registered schedule's bubble formula for W tables (F = B = W = 1),
 * or a negative number where it has none. */
static double bubble_w(const RtSchedule *s) {
  const SchedDef *d = sched_find(s->name);
  return d && d->bubble_w ? d->bubble_w(s->pp, s->vpp, s->microbatches) : -1;
}

/* ------------------------------------------------------------------ SVG */

/* The verifier's timeline in unit time, drawn by timeline.c. */
static void write_svg(FILE *f, const RtSchedule *s, const SchedReport *rep, const Config *c) {
  DrvTimeline t = {
      .s = s, .start = rep->start, .end = rep->end, .makespan = rep->makespan, .scale = 1,
      .min_unit = 1, .max_unit = 36, .time_caption = "time in units of one forward",
      .title = ir_fmt("%s schedule: p = %d, v = %d, m = %d; bubble %.2f%% of the ideal time",
                      s->name, s->pp, s->vpp, s->microbatches, 100 * rep->bubble_fraction),
      .subtitle = ir_fmt("step %g units, ideal %g (forward 1, backward %g); idle %.2f%% of the "
                         "step; %s", rep->makespan, rep->ideal, c->fb_ratio,
                         100 * rep->idle_fraction, c->model)};
  drv_timeline_svg(f, &t);
}

/* --------------------------------------------------------- JSON, trace */

static cJSON *int_array(const int *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
  return a;
}

/* One stage's table, every action as its text form; actions that join the
 * previous one's batch start with '+'. */
static cJSON *table_json(const RtSchedTable *t) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < t->n; i++) {
    char buf[96], text[100];
    snprintf(text, sizeof text, "%s%s", t->actions[i].flags & RT_SCHED_JOIN ? "+" : "",
             rt_sched_action_str(&t->actions[i], buf, sizeof buf));
    cJSON_AddItemToArray(a, cJSON_CreateString(text));
  }
  return a;
}

static cJSON *report_json(const RtSchedule *s, const SchedReport *rep, const Config *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "schedule", s->name);
  cJSON_AddStringToObject(o, "model", c->model);
  cJSON_AddNumberToObject(o, "layers", c->layers);
  cJSON_AddNumberToObject(o, "pp", s->pp);
  cJSON_AddNumberToObject(o, "vpp", s->vpp);
  cJSON_AddNumberToObject(o, "microbatches", s->microbatches);
  cJSON_AddNumberToObject(o, "microbatch", c->microbatch);
  cJSON_AddNumberToObject(o, "global_batch", c->global_batch);
  cJSON_AddNumberToObject(o, "dp", c->dp);
  cJSON_AddNumberToObject(o, "tp", c->tp);
  cJSON *shape = cJSON_CreateArray();
  for (int d = 0; d < s->shapes[0].rank; d++)
    cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)s->shapes[0].dims[d]));
  cJSON_AddItemToObject(o, "message_shape", shape);
  cJSON_AddNumberToObject(o, "forward_time", 1);
  cJSON_AddNumberToObject(o, "backward_time", c->fb_ratio);
  cJSON_AddNumberToObject(o, "makespan", rep->makespan);
  cJSON_AddNumberToObject(o, "ideal", rep->ideal);
  cJSON_AddNumberToObject(o, "bubble_fraction", rep->bubble_fraction);
  cJSON_AddNumberToObject(o, "idle_fraction", rep->idle_fraction);
  cJSON_AddNumberToObject(o, "messages", (double)rep->messages);
  cJSON_AddItemToObject(o, "peak_stash", int_array(rep->peak_stash, s->pp));
  if (sched_has_w(s)) {
    /* A W takes one unit; the slots held until W are what the runtime keeps. */
    cJSON_AddNumberToObject(o, "weight_time", 1);
    cJSON_AddItemToObject(o, "peak_held", int_array(rep->peak_held, s->pp));
    if (bubble_w(s) >= 0) cJSON_AddNumberToObject(o, "bubble_formula", bubble_w(s));
  }
  cJSON *stages = cJSON_CreateArray();
  for (int r = 0; r < s->pp; r++) cJSON_AddItemToArray(stages, table_json(&s->stages[r]));
  cJSON_AddItemToObject(o, "stages", stages);
  return o;
}

/* chrome://tracing's format: one process, a thread per stage, a complete
 * ("X") event per compute action and per wait on a batch; one time unit
 * is shown as one millisecond. */
static cJSON *trace_json(const RtSchedule *s, const SchedReport *rep) {
  cJSON *o = cJSON_CreateObject(), *ev = cJSON_CreateArray();
  char name[128];
  snprintf(name, sizeof name, "%s p=%d v=%d m=%d", s->name, s->pp, s->vpp, s->microbatches);
  cJSON *meta = cJSON_CreateObject();
  cJSON_AddStringToObject(meta, "name", "process_name");
  cJSON_AddStringToObject(meta, "ph", "M");
  cJSON_AddNumberToObject(meta, "pid", 0);
  cJSON_AddItemToObject(meta, "args", cJSON_CreateObject());
  cJSON_AddStringToObject(cJSON_GetObjectItem(meta, "args"), "name", name);
  cJSON_AddItemToArray(ev, meta);
  for (int r = 0; r < s->pp; r++) {
    cJSON *t = cJSON_CreateObject(), *args = cJSON_CreateObject();
    snprintf(name, sizeof name, "stage %d", r);
    cJSON_AddStringToObject(t, "name", "thread_name");
    cJSON_AddStringToObject(t, "ph", "M");
    cJSON_AddNumberToObject(t, "pid", 0);
    cJSON_AddNumberToObject(t, "tid", r);
    cJSON_AddStringToObject(args, "name", name);
    cJSON_AddItemToObject(t, "args", args);
    cJSON_AddItemToArray(ev, t);
    for (int i = 0; i < s->stages[r].n; i++) {
      const RtSchedAction *a = &s->stages[r].actions[i];
      double dur = rep->end[r][i] - rep->start[r][i];
      bool wait = !is_compute(a) && dur > 0 && !(a->flags & RT_SCHED_JOIN);
      if (!is_compute(a) && !wait) continue;
      cJSON *e = cJSON_CreateObject(), *ea = cJSON_CreateObject();
      char buf[96];
      if (wait) snprintf(name, sizeof name, "wait %s", rt_sched_action_str(a, buf, sizeof buf));
      else snprintf(name, sizeof name, "%s%dc%d", rt_sched_kind_name(a->kind), a->mb, a->chunk);
      cJSON_AddStringToObject(e, "name", name);
      cJSON_AddStringToObject(e, "cat", wait ? "wait" : rt_sched_kind_name(a->kind));
      cJSON_AddStringToObject(e, "ph", "X");
      cJSON_AddNumberToObject(e, "pid", 0);
      cJSON_AddNumberToObject(e, "tid", r);
      cJSON_AddNumberToObject(e, "ts", rep->start[r][i] * 1000);
      cJSON_AddNumberToObject(e, "dur", dur * 1000);
      cJSON_AddNumberToObject(ea, "chunk", a->chunk);
      cJSON_AddNumberToObject(ea, "mb", a->mb);
      cJSON_AddItemToObject(e, "args", ea);
      cJSON_AddItemToArray(ev, e);
    }
  }
  cJSON_AddItemToObject(o, "traceEvents", ev);
  cJSON_AddStringToObject(o, "displayTimeUnit", "ms");
  return o;
}

/* ----------------------------------------------------------------- text */

static void print_text(const RtSchedule *s, const SchedReport *rep, const Config *c) {
  printf("schedule %s: p = %d, v = %d, m = %d (global batch %d = microbatch %d x dp %d x m)\n",
         s->name, s->pp, s->vpp, s->microbatches, c->global_batch, c->microbatch, c->dp);
  int pv = s->pp * s->vpp;
  printf("model %s: %d layers over %d virtual stages (%s)\n", c->model, c->layers, pv,
         c->layers % pv == 0 ? "an even split" : "uneven: split by cost");
  if (rep->messages == 0) {
    printf("messages: none (one stage)\n");
  } else if (s->shapes[0].rank > 0) {
    printf("messages: %lld per step, each [", (long long)rep->messages);
    for (int d = 0; d < s->shapes[0].rank; d++) printf("%s%lld", d ? ", " : "", (long long)s->shapes[0].dims[d]);
    printf("]\n");
  }
  printf("verified: every stage completes; step %g units (forward 1, backward %g), ideal %g\n",
         rep->makespan, c->fb_ratio, rep->ideal);
  bool w = sched_has_w(s);
  if (w && bubble_w(s) >= 0)
    printf("bubble_fraction %.6f (bubble / ideal; a W takes 1; %s's formula %.6f), idle %.6f of "
           "the step\n", rep->bubble_fraction, s->name, bubble_w(s), rep->idle_fraction);
  else if (w)
    printf("bubble_fraction %.6f (bubble / ideal; a W takes 1), idle %.6f of the step\n",
           rep->bubble_fraction, rep->idle_fraction);
  else
    printf("bubble_fraction %.6f (bubble / ideal; (p - 1)/(v m) = %.6f), idle %.6f of the step\n",
           rep->bubble_fraction, (double)(s->pp - 1) / ((double)s->vpp * s->microbatches),
           rep->idle_fraction);
  bool orders = (int64_t)s->vpp * s->microbatches <= 32;
  printf("stage  peak stash%s%s\n", w ? "  held to W" : "", orders ? "  order" : "");
  for (int r = 0; r < s->pp; r++) {
    printf("%5d  %10d%s", r, rep->peak_stash[r], orders ? " " : "");
    if (w) printf("%10d%s", rep->peak_held[r], orders ? "  " : "");
    for (int i = 0; orders && i < s->stages[r].n; i++) {
      char buf[96];
      if (is_compute(&s->stages[r].actions[i]))
        printf(" %s", rt_sched_action_str(&s->stages[r].actions[i], buf, sizeof buf));
    }
    printf("\n");
  }
}

/* Writes text to path; false after reporting why not. */
static bool write_file(const char *path, const RtSchedule *s, const SchedReport *rep,
                       const Config *c, char *json) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "shardc schedule: error: cannot write %s: %s\n", path, strerror(errno));
    return false;
  }
  if (json) fprintf(f, "%s\n", json);
  else write_svg(f, s, rep, c);
  if (fclose(f) != 0) {
    fprintf(stderr, "shardc schedule: error: cannot write %s: %s\n", path, strerror(errno));
    return false;
  }
  return true;
}

static void print_error(const char *msg) {
  size_t n = strlen(msg);
  fprintf(stderr, "shardc schedule: error: %s%s", msg, n && msg[n - 1] == '\n' ? "" : "\n");
}

/* The registry, names aligned, for people and for scripts (the first
 * word of each line is a name). */
static int list_schedules(void) {
  int width = 0;
  for (const SchedDef *d = sched_registry; d->name; d++)
    if ((int)strlen(d->name) > width) width = (int)strlen(d->name);
  for (const SchedDef *d = sched_registry; d->name; d++)
    printf("%-*s  %s\n", width, d->name, d->doc);
  return 0;
}

int drv_cmd_schedule(int nargs, DrvArg *args) {
  const DrvCommand *cmd = &drv_schedule_command;
  if (drv_flag(nargs, args, "--list")) return list_schedules();
  Config c = {0};
  if (!(c.model = drv_model_arg(cmd, nargs, args)) || !parse_flags(nargs, args, &c)) return 1;
  if (!drv_apply_microbatch(cmd, &nargs, &args)) return 1;
  IrGraph *g = drv_load_and_check(c.model, nargs, args);
  if (!g) return 1;
  model_facts(g, &c);
  if (!derive(&c)) return 1;
  const char *svg = drv_value(nargs, args, "--svg"), *trace = drv_value(nargs, args, "--trace");
  SchedOptions o = {.pp = c.pp, .vpp = c.vpp, .microbatches = c.m, .dp = c.dp,
                    .vpp_group = c.vpp_group, .shape = c.shape, .script = c.script};
  SchedTimes t = {1, c.fb_ratio, 1};
  SchedReport rep;
  RtSchedule *s = c.script ? sched_build_script(c.script, &o, &t, svg || trace, &rep)
                           : sched_build(sched_find(c.name), &o, &t, svg || trace, &rep);
  sched_script_free(c.script);
  if (s && c.file) s->name = c.file; /* the summary and --json name the file */
  if (!s) {
    print_error(rep.error);
    sched_report_free(&rep);
    return 1;
  }
  bool ok = true;
  if (svg) ok = write_file(svg, s, &rep, &c, NULL);
  if (trace) {
    cJSON *tj = trace_json(s, &rep);
    char *text = cJSON_PrintUnformatted(tj);
    ok = write_file(trace, s, &rep, &c, text) && ok;
    free(text);
    cJSON_Delete(tj);
  }
  if (!ok) {
    /* write_file said why; a summary after it would hide the error. */
  } else if (drv_flag(nargs, args, "--json")) {
    cJSON *j = report_json(s, &rep, &c);
    char *text = cJSON_Print(j);
    printf("%s\n", text);
    free(text);
    cJSON_Delete(j);
  } else {
    print_text(s, &rep, &c);
  }
  sched_report_free(&rep);
  sched_free(s);
  return ok ? 0 : 1;
}
