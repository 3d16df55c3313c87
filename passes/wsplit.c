/* bw-split: splitting each pipeline chunk's backward into B and W for the
 * zero-bubble schedules (docs/schedules.md, "Zero-bubble schedules"). When
 * the program's schedule has W actions, every chunk's backward nodes are
 * reordered so that those on the input gradient's path (B) come first and
 * those only the parameter gradients need (W, marked IrNode.wgrad by
 * autodiff) after them, and IrGraph.wsplit is set. Codegen then writes one
 * function for each part, and memplan, which runs after this pass, keeps
 * what W reads of B's results with the microbatch's activations until W
 * has run. Any other schedule leaves the chunks as they are. */
#include "passes.h"
#include "program_passes.h"
#include "schedule.h"

/* Reorders g's backward into B, then W. */
static void split_backward(IrGraph *g) {
  IrVec nodes = {0}, w = {0};
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    ir_vec_push(n->phase == IR_PHASE_BACKWARD && n->wgrad ? &w : &nodes, n);
  }
  for (int i = 0; i < w.len; i++) ir_vec_push(&nodes, w.items[i]);
  g->nodes = nodes;
  g->wsplit = true;
}

bool pass_bw_split(PassProgram *p, const PassOptions *opt) {
  (void)opt;
  if (!sched_has_w(p->schedule)) return true;
  for (int k = 0; k < p->nchunks; k++)
    if (!p->chunks[k].g->wsplit) split_backward(p->chunks[k].g);
  return true;
}

bool pass_bw_split_verify(PassProgram *p, const char *who) {
  if (!pass_verify_chunks(p, who)) return false;
  for (int k = 0; k < p->nchunks; k++) {
    const IrGraph *g = p->chunks[k].g;
    bool in_w = false;
    for (int i = 0; g->wsplit && i < g->nodes.len; i++) {
      const IrNode *n = g->nodes.items[i];
      bool w = n->phase == IR_PHASE_BACKWARD && n->wgrad;
      if (in_w && !w) {
        ir_error(n->loc, "%s: node %d of virtual stage %d runs in B but comes after a W node", who,
                 i, p->chunks[k].vstage);
        return false;
      }
      in_w |= w;
    }
  }
  return true;
}
