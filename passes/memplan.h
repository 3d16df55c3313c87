/* The memory plan of a rank program: where every tensor lives.
 *
 * A rank program allocates its memory once, as five regions: the weights
 * (every param, in declaration order), the gradients (the same layout), the
 * optimizer state (AdamW's m and v: twice the weights), the activations kept
 * for backward (forward values still needed once the backward starts) and
 * the temporaries (everything else, packed by liveness). The runtime sees
 * the last two as one buffer, activations first.
 *
 * Positions are node indices in program order, forward then backward; a
 * value is live from the node that defines it to its last reader. Buffers
 * whose lifetimes overlap never share bytes; the others are packed by
 * interval first-fit, largest first, at 64-byte boundaries. A run of
 * elementwise nodes that codegen turns into one loop counts as a single
 * position (so no output of the loop overlaps any of its inputs), and a
 * value that never leaves such a loop gets no memory at all. Views (reshape,
 * tp_copy, a split whose parts are contiguous, dropout at rate 0) share their
 * input's storage. */
#ifndef SHARDC_PASSES_MEMPLAN_H
#define SHARDC_PASSES_MEMPLAN_H

#include <stdio.h>

#include "passes.h"

typedef enum PassRegion {
  PASS_REGION_NONE,        /* a register inside a fused elementwise loop: no memory */
  PASS_REGION_WEIGHTS,     /* params */
  PASS_REGION_GRADS,       /* a gradient written straight into its param's slot */
  PASS_REGION_ACTIVATIONS, /* forward values kept for backward, and the model's outputs */
  PASS_REGION_TEMPORARIES, /* the rest, reused by liveness */
} PassRegion;

/* Where one value lives. */
typedef struct PassBuf {
  const IrValue *value;
  int index;              /* dense: inputs, params, then node outputs in node order */
  PassRegion region;
  int64_t offset;         /* bytes into the region */
  int64_t bytes;          /* numel times the element size (before alignment) */
  int first, last;        /* live positions, inclusive: 0 before the first node, node i at i+1 */
  int uses;               /* node inputs that read it */
  const IrValue *alias;   /* a view: the value whose storage it shares, NULL otherwise */
  const IrValue *grad_of; /* the param whose gradient (or, in the grads region, a part of
                           * it) this value is; NULL otherwise */
} PassBuf;

/* What a target asks of the memory plan (codegen/target.h CgTarget.memplan):
 * the kernel scratch of each node, how many copies of it run at once, and
 * whether runs of row chunks may be planned. The plan itself assumes no
 * target: the CPU target's OpenMP threads and attention scratch are its
 * policy (codegen/cpu.c), a device target's would be streams. */
typedef struct PassMemPolicy {
  int threads; /* copies of the kernel scratch: threads on the CPU, streams on a device */
  /* Reals of the kernel scratch one copy of node n needs; 0: none. NULL:
   * no node needs scratch. */
  int64_t (*scratch_reals)(const IrNode *n);
  /* Whether runs of row chunks are planned (PassMemPlan.chunked): the CPU
   * target writes them as parallel loops over chunks. */
  bool row_chunks;
  /* Bytes of an element of the step's own real values (activations and
   * temporaries that are neither a param's gradient nor a graph input or
   * output), and of the views of them; 0: the plan's real. A GPU target's
   * bf16 programs set 2: weights, their gradients and the optimizer state
   * stay in the plan's real. */
  int low_bytes;
  /* Graph inputs and outputs planned at low_bytes all the same (NULL:
   * none): a pipeline chunk's messages, so that activations and their
   * gradients travel between stages in bf16 (pass_memplan). */
  const IrPtrMap *low_values;
  /* Bytes at the start of a GEMM node's scratch that its library's
   * workspace takes, 256 bytes of alignment included (the CUDA target's
   * cuBLASLt workspace); a bias gradient its epilogue computes is stashed
   * after it (pass_gemm_stash_bytes, gemm_epilogue.h). 0: the target's
   * GEMMs run no epilogues, and gemm-epilogue chooses none. */
  int64_t gemm_workspace;
} PassMemPolicy;

/* The plan's threads when a policy asks for none. */
#define PASS_MEMPLAN_THREADS 32

typedef struct PassMemPlan {
  int real_bytes;         /* 4 (f32) or 8 (f64): the element size of every real tensor */
  int threads;            /* kernel scratch is held for this many threads (policy.threads) */
  PassMemPolicy policy;   /* what the plan was made for */
  /* Bytes of each region, each a multiple of 64. */
  int64_t weights, grads, optimizer, activations, temporaries;
  int64_t nweights;       /* elements of real in the weights region (padding included) */
  int boundary;           /* index of the first backward node; nodes.len when there is none */
  int wboundary;          /* of the first W node when the backward is split (IrGraph.wsplit),
                           * else nodes.len: B runs boundary..wboundary-1, W the rest */
  int nnodes;
  /* Per node index: the first and last node of the fused elementwise loop
   * it belongs to (both itself when it runs alone), whether it is part of
   * such a loop, whether it is a view, and whether it is a sum of partial
   * gradients that its operands added into the param's slot themselves.
   * Views and absorbed sums run no code. */
  int *group_first, *group_last;
  bool *fused, *view, *absorbed;
  /* Per node index: its kernel scratch (bytes into the temporaries region)
   * and size in bytes, or -1 and 0 when it needs none. */
  int64_t *scratch_offset, *scratch_bytes;
  int64_t scratch_per_thread; /* reals: the most one node's scratch needs per thread; 0: none */
  /* Row chunks, planned only when the policy asks (PassMemPolicy.row_chunks,
   * the CPU target's; memplan_rows.c): a run of nodes that each compute rows of their
   * outputs from the same rows of their inputs (the token rows of the
   * model: a linear layer, a norm, an elementwise loop; attention when a
   * chunk holds whole sequences) runs as one parallel loop over chunks of
   * `chunk_rows` rows, each chunk going through every node of the run. Per node index: the
   * first and last node of its run (its fused loop's when it is in none),
   * and whether it is in one. Every buffer a run touches is live for the
   * whole run, since chunks reach its nodes at different times.
   * A run may also carry reductions over all rows (a weight gradient, a
   * bias gradient) whose results nothing else in the run reads: `sunk`
   * nodes run after every chunk is through, in the same parallel region. */
  int *region_first, *region_last;
  bool *chunked, *sunk;
  int64_t chunk_rows, nchunks; /* 0 when the plan has no runs */
  PassBuf *bufs;
  int nbufs;
  int nleaves;            /* inputs + params: bufs[nleaves..] are node outputs */
  IrPtrMap *map;          /* value -> index in bufs + 1 (memplan.c) */
} PassMemPlan;

/* Plans g (unrolled, every type known) for reals of `real_bytes` bytes
 * under `policy` (NULL: no scratch, no row chunks, PASS_MEMPLAN_THREADS
 * threads), and hangs the result on g->memplan. Reports user errors (an
 * unrolled graph is required) and returns NULL. */
PassMemPlan *pass_memplan_build(IrGraph *g, int real_bytes, const PassMemPolicy *policy);
/* Whether plan p was made for reals of real_bytes under policy, the
 * pipeline messages it plans at low precision (low_values) aside: those
 * are each chunk's own. */
bool pass_memplan_made_for(const PassMemPlan *p, int real_bytes, const PassMemPolicy *policy);
/* The policy a program's plans are made under: the target's (NULL: none),
 * with `threads` copies of the kernel scratch when above 0 and the step's
 * values at low_bytes when set (--precision bf16). */
PassMemPolicy pass_memplan_policy(const PassMemPolicy *target, int threads, int low_bytes);
/* The placement of a value of the planned graph; NULL for a foreign one. */
const PassBuf *pass_memplan_find(const PassMemPlan *p, const IrValue *v);
/* Whether the kernels of a low-precision program (policy.low_bytes 2)
 * read v at low precision under plan p: a weight, through the working copy
 * a GPU target keeps of the weights at low precision, or a value the plan
 * sized below its real's bytes. Never ids, gradient slots or registers. */
static inline bool pass_memplan_low(const PassMemPlan *p, const IrValue *v) {
  if (p->policy.low_bytes != 2 || v->type.dtype == IR_I32 || v->type.dtype == IR_I64) return false;
  const PassBuf *b = pass_memplan_find(p, v);
  if (!b) die("value without a place in the memory plan");
  if (b->region == PASS_REGION_WEIGHTS) return true;
  if (b->region == PASS_REGION_GRADS || b->region == PASS_REGION_NONE) return false;
  return b->bytes < ir_type_numel(&v->type) * p->real_bytes;
}
/* Whether sum_to node n sums its input down to a suffix of its dims (a
 * bias gradient): a sum of rows (memplan_rows.c). */
bool pass_sum_of_rows(const IrNode *n);
/* Bytes into the runtime's activation buffer (activations, then
 * temporaries) of a value in one of those two regions. */
int64_t pass_memplan_act_offset(const PassMemPlan *p, const PassBuf *b);
/* Element size of a value's dtype under the plan's real type. */
int64_t pass_memplan_elem_bytes(const PassMemPlan *p, IrDType t);
/* The bytes of each region and their total, one per line. */
void pass_memplan_print(FILE *out, const PassMemPlan *p);
/* The same lines for the five regions' bytes of a whole rank program
 * (weights, gradients, optimizer state, activations, temporaries), and
 * when act_without >= 0 the activations the same program keeps without
 * recomputation (--recompute), below its own. */
void pass_memplan_print_regions(FILE *out, int real_bytes, int threads, const int64_t regions[5],
                                int64_t act_without);

#endif
