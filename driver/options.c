/* Flag parsing and help text shared by every subcommand. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../abi/suggest.h"
#include "../codegen/codegen.h"
#include "../passes/schedule.h"
#include "driver.h"

int drv_usage_error(const DrvCommand *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "shardc %s: error: ", cmd->name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(see `shardc %s --help`)\n", cmd->name);
  return 1;
}

const char DRV_SCHEDULE_HELP[] = "pipeline schedule";

static const char *schedule_help(void) {
  return ir_fmt("pipeline schedule: %s (default %s; %s when V > 1)", sched_names(),
                sched_default_name(1), sched_default_name(2));
}

const char DRV_TARGET_OPTIONS_NAME[] = "<the targets' options>";

/* The command's option table with the targets' own options in place of
 * DRV_TARGET_OPTIONS, built on first use; a table without that entry is
 * used as it is. */
static const DrvOption *options_of(const DrvCommand *cmd) {
  static struct Expanded {
    const DrvCommand *cmd;
    const DrvOption *options;
    struct Expanded *next;
  } *done;
  for (struct Expanded *x = done; x; x = x->next)
    if (x->cmd == cmd) return x->options;
  int n = 0, ntarget = 0;
  const char *name, *value, *help;
  bool marked = false;
  for (const DrvOption *o = cmd->options; o && o->name; o++, n++)
    marked |= o->name == DRV_TARGET_OPTIONS_NAME;
  if (!marked) return cmd->options;
  while (cg_target_option_at(ntarget, &name, &value, &help)) ntarget++;
  DrvOption *all = ir_alloc(sizeof(DrvOption) * (size_t)(n + ntarget + 1));
  int k = 0;
  for (const DrvOption *o = cmd->options; o->name; o++) {
    if (o->name != DRV_TARGET_OPTIONS_NAME) {
      all[k++] = *o;
      continue;
    }
    for (int i = 0; cg_target_option_at(i, &name, &value, &help); i++)
      all[k++] = (DrvOption){name, value, help};
  }
  all[k] = (DrvOption){NULL, NULL, NULL};
  struct Expanded *x = ir_alloc(sizeof *x);
  *x = (struct Expanded){cmd, all, done};
  done = x;
  return all;
}

void drv_print_help(const DrvCommand *cmd) {
  printf("usage: shardc %s %s\n\n%s\n", cmd->name, cmd->usage, cmd->summary);
  if (cmd->details) printf("\n%s\n", cmd->details);
  const DrvOption *options = options_of(cmd);
  if (!options || !options[0].name) return;
  printf("\noptions:\n");
  for (const DrvOption *o = options; o->name; o++) {
    char left[64];
    if (!o->value)
      snprintf(left, sizeof left, "%s", o->name);
    else if (o->name[1] == '-')
      snprintf(left, sizeof left, "%s=%s", o->name, o->value);
    else
      snprintf(left, sizeof left, "%s %s", o->name, o->value);
    const char *help = o->help == DRV_SCHEDULE_HELP ? schedule_help() : o->help;
    printf("  %-26s %s\n", left, help);
  }
  printf("  %-26s %s\n", "--help", "show this help");
}

static const DrvOption *find_option(const DrvCommand *cmd, const char *name, size_t len) {
  for (const DrvOption *o = options_of(cmd); o && o->name; o++)
    if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
  return NULL;
}

const char *drv_nearest_option(const DrvCommand *cmd, const char *name, size_t len) {
  const char *best = NULL;
  int bestd = 3; /* more than two edits away is another word, not a typo */
  for (const DrvOption *o = options_of(cmd); o && o->name; o++) {
    if (strlen(o->name) < 3) continue; /* -D, -o: every short typo is near them */
    int d = suggest_distance(name, (int)len, o->name, (int)strlen(o->name), 0);
    if (d < bestd) bestd = d, best = o->name;
  }
  /* Every command takes --help, which no table lists. */
  if (!best && suggest_distance(name, (int)len, "--help", 6, 0) < bestd) best = "--help";
  return best;
}

int drv_parse_args(const DrvCommand *cmd, int argc, char **argv, DrvArg **out) {
  DrvArg *args = ir_alloc(sizeof(DrvArg) * (size_t)(argc + 1));
  int n = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      drv_print_help(cmd);
      return -2;
    }
    if (a[0] != '-' || strcmp(a, "-") == 0) {
      args[n++] = (DrvArg){NULL, a, i};
      continue;
    }
    if (strcmp(a, "--") == 0) {
      for (i++; i < argc; i++) args[n++] = (DrvArg){NULL, argv[i], i};
      break;
    }
    /* --name=value, --name value, -Dname=value, -D name=value. */
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : (a[1] == '-' ? strlen(a) : 2);
    const DrvOption *o = find_option(cmd, a, len);
    if (!o) {
      const char *near = drv_nearest_option(cmd, a, len);
      if (near)
        drv_usage_error(cmd, "unknown option '%s' (did you mean %s?)", a, near);
      else
        drv_usage_error(cmd, "unknown option '%s'", a);
      return -1;
    }
    const char *value = NULL;
    if (!o->value) {
      if (eq || (a[1] != '-' && a[2])) {
        drv_usage_error(cmd, "option '%s' takes no value", o->name);
        return -1;
      }
    } else if (eq) {
      value = eq + 1;
    } else if (a[1] != '-' && a[2]) {
      value = a + 2;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      drv_usage_error(cmd, "option '%s' needs a value (%s)", o->name, o->value);
      return -1;
    }
    args[n++] = (DrvArg){o, value, i};
  }
  *out = args;
  return n;
}

bool drv_flag(int nargs, DrvArg *args, const char *name) {
  for (int i = 0; i < nargs; i++)
    if (args[i].opt && strcmp(args[i].opt->name, name) == 0) return true;
  return false;
}

/* The last occurrence wins, as with most command-line tools. */
const char *drv_value(int nargs, DrvArg *args, const char *name) {
  const char *v = NULL;
  for (int i = 0; i < nargs; i++)
    if (args[i].opt && strcmp(args[i].opt->name, name) == 0) v = args[i].value;
  return v;
}

const char *drv_model_arg(const DrvCommand *cmd, int nargs, DrvArg *args) {
  const char *model = NULL;
  for (int i = 0; i < nargs; i++) {
    if (args[i].opt) continue;
    if (model) {
      drv_usage_error(cmd, "unexpected argument '%s' (one model file only)", args[i].value);
      return NULL;
    }
    model = args[i].value;
  }
  if (!model) drv_usage_error(cmd, "no model file given");
  return model;
}

bool drv_apply_microbatch(const DrvCommand *cmd, int *nargs, DrvArg **args) {
  const char *mb = drv_value(*nargs, *args, "--microbatch");
  if (!mb) return true;
  char *end;
  long long b = strtoll(mb, &end, 10);
  if (*end || end == mb || b <= 0 || b > (1 << 20)) {
    drv_usage_error(cmd, "--microbatch: expected a positive integer, got '%s'", mb);
    return false;
  }
  static const DrvOption define = DRV_DEFINE_OPTION;
  DrvArg *grown = ir_alloc(sizeof(DrvArg) * (size_t)(*nargs + 1));
  memcpy(grown, *args, sizeof(DrvArg) * (size_t)*nargs);
  grown[(*nargs)++] = (DrvArg){&define, ir_fmt("batch=%lld", b), -1};
  *args = grown;
  return true;
}

/* A positive (or, with zero_ok, non-negative) integer flag up to limit. */
static bool int_flag(const DrvCommand *cmd, int nargs, DrvArg *args, const char *name, int dflt,
                     bool zero_ok, int limit, int *out) {
  const char *s = drv_value(nargs, args, name);
  *out = dflt;
  if (!s) return true;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end || end == s || v < (zero_ok ? 0 : 1) || v > limit) {
    drv_usage_error(cmd, "%s: expected %s integer up to %d, got '%s'", name,
                    zero_ok ? "a non-negative" : "a positive", limit, s);
    return false;
  }
  *out = (int)v;
  return true;
}

/* --recompute and --recompute-layers; N > 1 means groups of layers,
 * which only full recomputation has. */
static bool recompute_flags(const DrvCommand *cmd, int nargs, DrvArg *args, PassOptions *out) {
  const char *rc = drv_value(nargs, args, "--recompute");
  bool known = !rc;
  for (int k = 0; rc && k <= PASS_RECOMPUTE_FULL; k++)
    if (strcmp(rc, pass_recompute_names[k]) == 0) out->recompute = (PassRecompute)k, known = true;
  if (!known) {
    drv_usage_error(cmd, "--recompute: expected none, selective or full, got '%s'", rc);
    return false;
  }
  if (!int_flag(cmd, nargs, args, "--recompute-layers", 1, false, 1 << 20, &out->recompute_layers))
    return false;
  if (out->recompute_layers > 1 && out->recompute != PASS_RECOMPUTE_FULL) {
    drv_usage_error(cmd, "--recompute-layers %d: groups of layers need --recompute full",
                    out->recompute_layers);
    return false;
  }
  return true;
}

bool drv_pass_options(const DrvCommand *cmd, int nargs, DrvArg *args, PassOptions *out) {
  *out = (PassOptions){.tp = 1, .pp = 1, .dp = 1, .vocab_multiple = 128};
  bool ok = int_flag(cmd, nargs, args, "--tp", 1, false, 1 << 16, &out->tp);
  ok = int_flag(cmd, nargs, args, "--vocab-multiple", 128, true, 1 << 20, &out->vocab_multiple) && ok;
  ok = int_flag(cmd, nargs, args, "--world-size", 0, false, 1 << 30, &out->world) && ok;
  ok = int_flag(cmd, nargs, args, "--pp", 1, false, 1 << 15, &out->pp) && ok;
  ok = int_flag(cmd, nargs, args, "--vpp", 1, false, 1 << 15, &out->vpp) && ok;
  ok = int_flag(cmd, nargs, args, "--dp", 1, false, 1 << 20, &out->dp) && ok;
  ok = int_flag(cmd, nargs, args, "--ep", 1, false, 1 << 20, &out->ep) && ok;
  /* Megatron's layout: the expert ranks come out of the data-parallel
   * ones (the experts' count is checked by ep-partition, at the layer). */
  if (ok && out->dp % out->ep) {
    drv_usage_error(cmd, "--ep %d must divide --dp %d: the expert ranks are data-parallel ranks",
                    out->ep, out->dp);
    ok = false;
  }
  out->pp_layout = drv_value(nargs, args, "--pp-layout");
  /* The schedule decides where the chunks are (zb-v's V). */
  const SchedDef *sched = sched_find(drv_value(nargs, args, "--schedule") ? drv_value(nargs, args, "--schedule") : "");
  out->pp_vshape = sched && sched->vshape;
  out->sequence_parallel = drv_flag(nargs, args, "--sequence-parallel");
  ok = recompute_flags(cmd, nargs, args, out) && ok;
  out->no_scatter_gather = drv_flag(nargs, args, "--no-scatter-gather");
  out->no_gemm_epilogue = drv_flag(nargs, args, "--no-gemm-epilogue");
  const char *strategy = drv_value(nargs, args, "--tp-strategy");
  if (strategy && strcmp(strategy, "none") == 0) {
    out->tp_strategy = PASS_TP_NONE;
  } else if (strategy && strcmp(strategy, "megatron") != 0) {
    drv_usage_error(cmd, "--tp-strategy: expected megatron or none, got '%s'", strategy);
    ok = false;
  }
  return ok;
}

bool drv_schedule_options(const DrvCommand *cmd, int nargs, DrvArg *args, int *vpp_group,
                          const char **schedule_file) {
  *schedule_file = drv_value(nargs, args, "--schedule-file");
  if (*schedule_file && drv_value(nargs, args, "--schedule")) {
    drv_usage_error(cmd, "--schedule-file and --schedule both name the schedule: give one");
    return false;
  }
  return int_flag(cmd, nargs, args, "--vpp-group", 0, false, 1 << 30, vpp_group);
}
