/* The CPU target (cpu.c, and its tensor-parallel forms in cpu_tp.c): what
 * its two files share with each other. Private to codegen/. */
#ifndef SHARDC_CODEGEN_CPU_H
#define SHARDC_CODEGEN_CPU_H

#include "listing.h"
#include "target.h"

/* Tensor parallelism on the CPU target (cpu_tp.c): the scratch and helpers
 * the rank program needs, and the code of a node that depends on the rank
 * (tp_slice, vocabulary-parallel embedding and loss, per-rank dropout);
 * false for any other node. */
void cg_cpu_tp_prologue(CgEmitter *e);
bool cg_cpu_tp_node(CgEmitter *e, const IrNode *n);
/* Whether cg_cpu_tp_node writes every node of op (tp_slice, tp_copy); the
 * ops it writes only with an attribute set are in cpu.c's table too. */
bool cg_cpu_tp_writes_op(IrOp op);
/* embedding_grad added into its gradient slot (cpu.c); vp_rows > 0: the
 * rank's rows of a vocabulary-parallel table. */
void cg_cpu_embedding_scatter(CgEmitter *e, const IrNode *n, int64_t vp_rows);
/* Inside a run of row chunks: the rows of one chunk (the CPU target's
 * state, set by its chunks_begin); 0 elsewhere. */
int64_t cg_cpu_chunk_rows(CgEmitter *e);

#endif
