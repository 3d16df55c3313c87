/* `shardc plan`: searches the configurations of a model for a GPU count
 * and a global batch on a hardware description (planner/search.c) and
 * prints the fastest that fit, with why the others were dropped. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../planner/planner.h"
#include "driver.h"

static const DrvOption plan_options[] = {
    DRV_DEFINE_OPTION,
    {"--gpus", "N", "GPUs to plan for"},
    {"--global-batch", "B", "sequences per step"},
    {"--hw", "NAME|FILE", "a hardware preset (shardc hw lists them) or description file"},
    {"--top", "K", "print the K fastest configurations (default 10)"},
    {"--memory-fraction", "F", "the share of device memory a rank may plan for (default 0.9; "
     "the rest is workspaces, communication buffers and fragmentation)"},
    {"--json", NULL, "print one JSON object"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_plan_command = {
    "plan", "MODEL --gpus N --global-batch B --hw NAME|FILE [options]",
    "search t, p, d, v, microbatch, recomputation, SP and ZeRO-1; rank what fits by speed",
    "Tries every tensor-parallel size within a node, every pipeline depth and\n"
    "chunk count, microbatches of 1, 2, 4 and 8, sequence parallelism on and\n"
    "off, and for each the least recomputation that fits in the device's\n"
    "memory, without ZeRO-1 and with it. Every candidate is simulated as\n"
    "`shardc simulate` does; the list is ranked by step time. The families\n"
    "dropped are counted by reason, with an example of each.",
    plan_options, drv_cmd_plan};

/* What the search's loader needs: the model and the command's -D flags. */
typedef struct Loader {
  const char *model;
  int nargs;
  DrvArg *args;
} Loader;

static IrGraph *load(void *ctx, int microbatch) {
  Loader *L = ctx;
  static const DrvOption define = DRV_DEFINE_OPTION;
  DrvArg *args = ir_alloc(sizeof(DrvArg) * (size_t)(L->nargs + 1));
  memcpy(args, L->args, sizeof(DrvArg) * (size_t)L->nargs);
  args[L->nargs] = (DrvArg){&define, ir_fmt("batch=%d", microbatch), -1};
  return drv_load_and_check(L->model, L->nargs + 1, args);
}

static int positive(const char *s) {
  char *end;
  long v = s ? strtol(s, &end, 10) : 0;
  return s && !*end && end != s && v > 0 && v < (1 << 30) ? (int)v : 0;
}

static void print_text(const PlSearch *s, int top, double limit) {
  printf("%d configurations fit in %.1f GiB per GPU (%d simulated); the fastest:\n", s->n,
         limit / 1073741824.0, s->simulated);
  printf("rank   t   p    d   v  b  recompute  SP  zero  step s    TFLOP/s  MFU    GiB\n");
  for (int i = 0; i < s->n && i < top; i++) {
    const PlCandidate *c = &s->configs[i];
    printf("%4d  %2d  %2d  %3d  %2d  %d  %-9s  %-3s %4d  %8.4f  %7.1f  %4.1f%%  %5.1f\n", i + 1,
           c->c.tp, c->c.pp, c->c.dp, c->c.vpp, c->c.microbatch,
           pl_recompute_names[c->c.recompute], c->c.sequence_parallel ? "yes" : "no", c->c.zero,
           c->step_time, c->tflops_per_gpu, 100 * c->mfu, c->memory / 1073741824.0);
  }
  printf("dropped:\n");
  for (int k = 0; k < PL_NREJECTS; k++)
    if (s->rejected[k])
      printf("  %-34s %5d  e.g. %s\n", pl_reject_names[k], s->rejected[k], s->example[k]);
}

static void print_json(const PlSearch *s, int top) {
  cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "configs");
  for (int i = 0; i < s->n && i < top; i++) {
    const PlCandidate *c = &s->configs[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "tp", c->c.tp);
    cJSON_AddNumberToObject(e, "pp", c->c.pp);
    cJSON_AddNumberToObject(e, "dp", c->c.dp);
    cJSON_AddNumberToObject(e, "vpp", c->c.vpp);
    cJSON_AddNumberToObject(e, "microbatch", c->c.microbatch);
    cJSON_AddStringToObject(e, "recompute", pl_recompute_names[c->c.recompute]);
    cJSON_AddBoolToObject(e, "sequence_parallel", c->c.sequence_parallel);
    cJSON_AddNumberToObject(e, "zero", c->c.zero);
    cJSON_AddNumberToObject(e, "tflops_per_gpu", c->tflops_per_gpu);
    cJSON_AddNumberToObject(e, "mfu", c->mfu);
    cJSON_AddNumberToObject(e, "step_time_s", c->step_time);
    cJSON_AddNumberToObject(e, "memory_bytes_per_gpu", c->memory);
    cJSON_AddItemToArray(list, e);
  }
  cJSON_AddNumberToObject(o, "fitting", s->n);
  cJSON_AddNumberToObject(o, "simulated", s->simulated);
  cJSON *rej = cJSON_AddObjectToObject(o, "rejected");
  for (int k = 0; k < PL_NREJECTS; k++)
    if (s->rejected[k]) {
      cJSON *e = cJSON_AddObjectToObject(rej, pl_reject_names[k]);
      cJSON_AddNumberToObject(e, "count", s->rejected[k]);
      cJSON_AddStringToObject(e, "example", s->example[k]);
    }
  char *text = cJSON_Print(o);
  printf("%s\n", text);
  free(text);
  cJSON_Delete(o);
}

int drv_cmd_plan(int nargs, DrvArg *args) {
  const DrvCommand *cmd = &drv_plan_command;
  const char *model = drv_model_arg(cmd, nargs, args);
  if (!model) return 1;
  int gpus = positive(drv_value(nargs, args, "--gpus"));
  int batch = positive(drv_value(nargs, args, "--global-batch"));
  const char *top_s = drv_value(nargs, args, "--top"), *hw_name = drv_value(nargs, args, "--hw");
  int top = top_s ? positive(top_s) : 10;
  if (!gpus) return drv_usage_error(cmd, "--gpus N: a positive GPU count is required");
  if (!batch) return drv_usage_error(cmd, "--global-batch B: a positive batch is required");
  if (!top) return drv_usage_error(cmd, "--top: expected a positive integer, got '%s'", top_s);
  if (!hw_name) return drv_usage_error(cmd, "--hw NAME|FILE is required");
  const char *frac_s = drv_value(nargs, args, "--memory-fraction");
  char *end = NULL;
  double frac = frac_s ? strtod(frac_s, &end) : 0.9;
  if (frac_s && (*end || end == frac_s || !(frac > 0 && frac <= 1)))
    return drv_usage_error(cmd, "--memory-fraction: expected a number in (0, 1], got '%s'", frac_s);
  PlHw hw;
  if (!pl_hw_load(hw_name, &hw)) return 1;
  Loader L = {model, nargs, args};
  PlSearch s;
  if (!pl_search(load, &L, gpus, batch, &hw, frac * hw.mem_bytes, &s)) return 1;
  if (drv_flag(nargs, args, "--json")) print_json(&s, top);
  else print_text(&s, top, frac * hw.mem_bytes);
  bool none = s.n == 0;
  pl_search_free(&s);
  return none ? 1 : 0;
}
