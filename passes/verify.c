/* The `verify` pass: the IR invariants (ir/verify.c) as a pipeline step,
 * so that a pipeline can check its result without --verify-each. */
#include "passes.h"

bool pass_verify(IrGraph **g, const PassOptions *opt) {
  (void)opt;
  return ir_verify(*g, NULL);
}
