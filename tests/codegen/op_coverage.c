/* Every op of ir/ops.def can reach a rank program: either the emitter core
 * writes it for every target (cg_core_writes_op: collectives, views, ops
 * removed before codegen), or every target of the table says it writes it
 * (CgTarget.writes_op). A new op without a kernel line in some target, or
 * a new target that misses an op, fails here instead of at the first model
 * that uses the op. Every elementwise op that is not random has a formula
 * for each of its outputs (the FORMULA lines of ir/ops.def, which every
 * target renders), each naming only inputs and attributes the op has.
 * Prints the counts it checked; exit status 1 on a gap. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "../../codegen/target.h"

/* The $-names of op's formula text f that are neither an input below the
 * op's arity nor an attribute of its spec; each is reported. */
static int bad_names(const IrOpInfo *info, const char *f) {
  int bad = 0;
  for (const char *p = strchr(f, '$'); p; p = strchr(p, '$')) {
    const char *name = ++p;
    bool ok = false;
    if (isdigit((unsigned char)*p)) {
      int k = 0;
      while (isdigit((unsigned char)*p)) k = 10 * k + (*p++ - '0');
      ok = info->max_in < 0 || k < info->max_in;
    } else {
      while (isalnum((unsigned char)*p) || *p == '_') p++;
      for (int a = 0; a < info->nattr && !ok; a++)
        ok = strlen(info->attr[a].name) == (size_t)(p - name) &&
             strncmp(info->attr[a].name, name, (size_t)(p - name)) == 0;
    }
    if (!ok) printf("FAIL: formula of %s: $%.*s is no input or attribute of it\n", info->name,
                    (int)(p - name), name);
    bad += !ok;
  }
  return bad;
}

/* Whether op has a formula for each output exactly when it is elementwise
 * and draws no random numbers, each naming only its inputs and attributes. */
static int formula_gaps(IrOp op) {
  const IrOpInfo *info = ir_op_info(op);
  unsigned f = info->flags;
  bool needs = (f & IR_OPF_ELEMENTWISE) && !(f & IR_OPF_RANDOM);
  int outs = cg_formula_outputs(op), want = (f & IR_OPF_MULTI_OUT) ? -1 : info->nout;
  if (!needs && outs == 0) return 0;
  if (!needs) {
    printf("FAIL: op %s has a formula but is not an elementwise op without randomness\n",
           info->name);
    return 1;
  }
  if (outs != want) {
    printf("FAIL: op %s has %d outputs and %d formulas\n", info->name, want, outs);
    return 1;
  }
  int bad = 0;
  for (int k = 0; k < outs; k++) bad += bad_names(info, cg_formula_text(op, k));
  return bad;
}

int main(void) {
  int core = 0, by_targets = 0, ntargets = 0, gaps = 0, formulas = 0;
  while (cg_target_at(ntargets)) ntargets++;
  for (int op = 0; op < IR_OP_COUNT; op++) {
    gaps += formula_gaps((IrOp)op);
    formulas += cg_formula_outputs((IrOp)op);
    if (cg_core_writes_op((IrOp)op)) {
      core++;
      continue;
    }
    bool all = true;
    for (int t = 0; t < ntargets; t++) {
      const CgTarget *target = cg_target_at(t);
      if (target->writes_op((IrOp)op)) continue;
      printf("FAIL: the %s target has no code for op %s\n", target->name,
             ir_op_info((IrOp)op)->name);
      all = false;
      gaps++;
    }
    by_targets += all;
  }
  printf("%d ops: %d written by the core, %d by every one of %d targets, %d formulas, "
         "%d gaps\n",
         (int)IR_OP_COUNT, core, by_targets, ntargets, formulas, gaps);
  return gaps || core + by_targets != IR_OP_COUNT ? 1 : 0;
}
