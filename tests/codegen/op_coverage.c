/* Every op of ir/ops.def can reach a rank program: either the emitter core
 * writes it for every target (cg_core_writes_op: collectives, views, ops
 * removed before codegen), or every target of the table says it writes it
 * (CgTarget.writes_op). A new op without a kernel line in some target, or
 * a new target that misses an op, fails here instead of at the first model
 * that uses the op. Prints the counts it checked; exit status 1 on a gap. */
#include <stdio.h>

#include "../../codegen/target.h"

int main(void) {
  int core = 0, by_targets = 0, ntargets = 0, gaps = 0;
  while (cg_target_at(ntargets)) ntargets++;
  for (int op = 0; op < IR_OP_COUNT; op++) {
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
  printf("%d ops: %d written by the core, %d by every one of %d targets, %d gaps\n",
         (int)IR_OP_COUNT, core, by_targets, ntargets, gaps);
  return gaps || core + by_targets != IR_OP_COUNT ? 1 : 0;
}
