/* Splitting a pipeline chunk's backward into B and W for the zero-bubble
 * schedules (docs/schedules.md, "Zero-bubble schedules"): the chunk's
 * backward nodes are reordered so that those on the input gradient's path
 * (B) come first and those only the parameter gradients need (W, marked
 * IrNode.wgrad by autodiff) after them. Codegen then writes one function
 * for each part, and the memory plan keeps what W reads of B's results
 * with the microbatch's activations until W has run. */
#include "passes.h"

int pass_split_backward(IrGraph *g) {
  IrVec nodes = {0}, w = {0};
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    ir_vec_push(n->phase == IR_PHASE_BACKWARD && n->wgrad ? &w : &nodes, n);
  }
  int first_w = nodes.len;
  for (int i = 0; i < w.len; i++) ir_vec_push(&nodes, w.items[i]);
  g->nodes = nodes;
  g->wsplit = true;
  return first_w;
}
