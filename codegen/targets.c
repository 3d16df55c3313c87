/* The table of codegen targets: `--target NAME` picks one by its name,
 * and everything that differs between targets (pipeline, memory policy,
 * the code it writes) comes from its CgTarget. A new target is a line
 * here and its file. */
#include <string.h>

#include "target.h"

static const CgTarget *const targets[] = {
    &cg_target_cpu,
    &cg_target_cuda,
};

#define NTARGETS ((int)(sizeof targets / sizeof targets[0]))

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

const char *cg_pipeline(const char *target, bool pipelined) {
  const CgTarget *t = cg_find_target(target);
  if (!t) return NULL;
  return pipelined ? t->pipeline_pp : t->pipeline;
}

const PassMemPolicy *cg_memplan_policy(const char *target) {
  const CgTarget *t = cg_find_target(target);
  return t ? t->memplan : NULL;
}

void cg_print_targets(FILE *out) {
  for (int i = 0; i < NTARGETS; i++) {
    const CgTarget *t = targets[i];
    fprintf(out, "  %-12s %s\n", t->name, t->doc);
    fprintf(out, "  %-12s pipeline: %s\n", "", t->pipeline);
    fprintf(out, "  %-12s with --pp/--vpp: %s\n", "", t->pipeline_pp);
  }
}
