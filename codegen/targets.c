/* The table of codegen targets: `--target NAME` picks one by its name,
 * and everything that differs between targets (pipeline, memory policy,
 * precisions, where the model lives, its options, the code it writes)
 * comes from its CgTarget. A new target is a line here and its file; no
 * name of a target is compared anywhere else. */
#include <string.h>

#include "target.h"

static const CgTarget *const targets[] = {
    &cg_target_cpu,
    &cg_target_cuda,
};

#define NTARGETS ((int)(sizeof targets / sizeof targets[0]))

/* The pass pipelines of every target that names none of its own
 * (CG_PIPELINE, CG_PIPELINE_PP of target.h). */
static const char pipeline[] = CG_PIPELINE;
static const char pipeline_pp[] = CG_PIPELINE_PP;

const CgTarget *cg_find_target(const char *name) {
  for (int i = 0; i < NTARGETS; i++)
    if (!name || strcmp(name, targets[i]->name) == 0) return targets[i];
  return NULL;
}

const CgTarget *cg_target_at(int i) { return i >= 0 && i < NTARGETS ? targets[i] : NULL; }

const char *cg_target_names(void) {
  char *s = ir_strdup("");
  for (int i = 0; i < NTARGETS; i++) s = ir_fmt("%s%s%s", s, i ? ", " : "", targets[i]->name);
  return s;
}

bool cg_target_known(const char *name) {
  if (cg_find_target(name)) return true;
  ir_error(ir_cmdline, "unknown target '%s' (known: %s)", name, cg_target_names());
  return false;
}

static const char *target_pipeline(const CgTarget *t, bool pipelined) {
  if (pipelined) return t->pipeline_pp ? t->pipeline_pp : pipeline_pp;
  return t->pipeline ? t->pipeline : pipeline;
}

const char *cg_pipeline(const char *target, bool pipelined) {
  const CgTarget *t = cg_find_target(target);
  return t ? target_pipeline(t, pipelined) : NULL;
}

const PassMemPolicy *cg_memplan_policy(const char *target) {
  const CgTarget *t = cg_find_target(target);
  return t ? t->memplan : NULL;
}

bool cg_target_pads_vocab(const char *target) {
  const CgTarget *t = cg_find_target(target);
  return t && t->vocab_pad_always;
}

void cg_print_targets(FILE *out) {
  for (int i = 0; i < NTARGETS; i++) {
    const CgTarget *t = targets[i];
    fprintf(out, "  %-12s %s\n", t->name, t->doc);
    fprintf(out, "  %-12s pipeline: %s\n", "", target_pipeline(t, false));
    fprintf(out, "  %-12s with --pp/--vpp: %s\n", "", target_pipeline(t, true));
  }
}

bool cg_target_precision(const char *target, unsigned p) {
  const CgTarget *t = cg_find_target(target);
  return t && (t->precisions & p) == p;
}

const char *cg_precision_target(unsigned p) {
  for (int i = 0; i < NTARGETS; i++)
    if ((targets[i]->precisions & p) == p) return targets[i]->name;
  return NULL;
}

const char *cg_precision_targets(unsigned p) {
  char *s = ir_strdup("");
  for (int i = 0; i < NTARGETS; i++)
    if ((targets[i]->precisions & p) == p)
      s = ir_fmt("%s%s%s", s, *s ? ", " : "", targets[i]->name);
  return s;
}

bool cg_target_host_memory(const char *target) {
  const CgTarget *t = cg_find_target(target);
  return t && t->memory == CG_MEMORY_HOST;
}

/* Option `name` of target t; NULL when t has none of that name. */
static const CgTargetOption *option_of(const CgTarget *t, const char *name) {
  for (const CgTargetOption *o = t->options; o && o->name; o++)
    if (strcmp(o->name, name) == 0) return o;
  return NULL;
}

bool cg_target_option_at(int i, const char **name, const char **value, const char **help) {
  for (int k = 0; k < NTARGETS; k++)
    for (const CgTargetOption *o = targets[k]->options; o && o->name; o++)
      if (i-- == 0) {
        *name = o->name;
        *value = o->value;
        *help = ir_fmt("--target %s: %s", targets[k]->name, o->help);
        return true;
      }
  return false;
}

bool cg_target_option(const char *name) {
  for (int i = 0; i < NTARGETS; i++)
    if (option_of(targets[i], name)) return true;
  return false;
}

/* Every target checks the values of its own options, whichever target
 * the programs are for: a bad value is a usage error either way. */
const char *cg_target_args_error(const CgOptions *o) {
  for (int k = 0; k < o->ntarget_args; k++)
    for (int i = 0; i < NTARGETS; i++) {
      const CgTargetOption *opt = option_of(targets[i], o->target_args[k].name);
      const char *why = opt && opt->check && o->target_args[k].value
                            ? opt->check(o->target_args[k].value)
                            : NULL;
      if (why) return why;
    }
  return NULL;
}

bool cg_target_arg(const CgEmitter *e, const char *name, const char **value) {
  if (value) *value = NULL;
  if (!option_of(e->target, name)) die("target %s has no option %s", e->target->name, name);
  bool given = false;
  for (int k = 0; k < e->opt->ntarget_args; k++)
    if (strcmp(e->opt->target_args[k].name, name) == 0) {
      given = true;
      if (value) *value = e->opt->target_args[k].value;
    }
  return given;
}

const char *cg_run_target(bool gpu_visible, bool one_rank) {
  for (int i = 0; gpu_visible && i < NTARGETS; i++)
    if (targets[i]->memory == CG_MEMORY_GPU && (one_rank || targets[i]->runs_many_ranks))
      return targets[i]->name;
  return cg_host_target();
}

const char *cg_host_target(void) {
  for (int i = 0; i < NTARGETS; i++)
    if (targets[i]->memory == CG_MEMORY_HOST) return targets[i]->name;
  die("no target runs in host memory");
}
