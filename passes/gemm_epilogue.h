/* The GEMM epilogues a GPU target's GEMM library runs (gemm_epilogue.c):
 * which elementwise nodes after a GEMM its epilogue computes, chosen once
 * per chunk on the chunk's memory plan by the gemm-epilogue pass, and read
 * by the target's codegen (codegen/cuda/gemm.c). */
#ifndef SHARDC_PASSES_GEMM_EPILOGUE_H
#define SHARDC_PASSES_GEMM_EPILOGUE_H

#include "memplan.h"

/* The epilogues of one chunk, per node index (-1 where none):
 * - gelu[i]: for a linear i, the gelu it computes in its epilogue (bias
 *   and GELU, keeping the linear's output, the pre-activation);
 * - dgelu[i]: for a linear_dx i, the gelu_grad it computes (the GELU's
 *   gradient, with the pre-activation as the epilogue's aux input);
 * - bgrad[i]: for a linear_dx or linear_dw i, the sum_to (a bias
 *   gradient over the rows of the gelu_grad's output or of dy) it
 *   computes;
 * - owner[j]: for a node computed in an epilogue, the GEMM whose
 *   epilogue it is; such a node writes no code of its own. */
typedef struct PassEpilogues {
  const IrGraph *g;        /* the chunk's graph */
  const PassMemPlan *plan; /* the plan they were chosen on, g->memplan then */
  bool on; /* epilogues were allowed: not --no-gemm-epilogue, and the
            * plan's policy has a GEMM workspace */
  int *gelu, *dgelu, *bgrad, *owner;
} PassEpilogues;

/* Bytes of the stash after a GEMM's workspace (PassMemPolicy.gemm_workspace)
 * where its epilogue writes a bias gradient of n fp32 elements: the plan
 * may put the sum_to's own buffer over the workspace, which the GEMM is
 * using, so the gradient is copied there once the GEMM is done. */
static inline int64_t pass_gemm_stash_bytes(int64_t n) { return (n * 4 + 255) / 256 * 256; }

#endif
