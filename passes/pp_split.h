/* The graph of one virtual stage, cut out of a pipeline-partitioned graph
 * after autodiff, so that the memory plan and codegen treat each model
 * chunk as a program of its own.
 *
 * The whole graph (pp-partition, then autodiff) holds every stage's nodes
 * with IrNode.stage set, and pp_boundary nodes where a value crosses from
 * one virtual stage to the next (forward) or its gradient back (backward).
 * pass_pp_split keeps the nodes of one virtual stage, in order (so its
 * forward nodes still come before its backward nodes), and turns the
 * messages into the chunk's interface:
 *  - a forward pp_boundary that ends here: its result becomes an input of
 *    the chunk (recv_act); the one that starts here: its operand becomes
 *    an output (send_act);
 *  - the backward pp_boundary that ends here (a gradient coming back): its
 *    result becomes an input (recv_grad); the gradient this chunk sends
 *    back, the operand of the backward pp_boundary paired with a forward
 *    one that ended here, becomes an output (send_grad).
 * Pairs are listed in the order of the forward pp_boundary nodes, which is
 * the same on both ends of a message, so the parts of a message line up.
 * Model inputs and parameters are kept when a node of the chunk reads
 * them; the whole graph's outputs (the loss) when the chunk computes them.
 *
 * Splitting reuses the whole graph's nodes and values and rewrites the
 * values that become chunk inputs, so the whole graph is not usable
 * afterwards; split every virtual stage before planning any. */
#ifndef SHARDC_PASSES_PP_SPLIT_H
#define SHARDC_PASSES_PP_SPLIT_H

#include "passes.h"

typedef struct PassPpChunk {
  IrGraph *g;
  int vstage;
  IrVec recv_act, send_act, recv_grad, send_grad; /* IrValue*, message parts in order */
} PassPpChunk;

/* Splits every virtual stage of g (after pp-partition and autodiff):
 * chunks[k] for virtual stage k, k < p*v. Returns false after reporting
 * an error (a graph that was not partitioned, a value read across stages
 * without a message). */
bool pass_pp_split(IrGraph *g, PassPpChunk *chunks, int nchunks);

#endif
