/* What memplan.c shares with memplan_rows.c, the CPU target's row-chunk
 * step of the memory plan: the planner's per-value state. Private to
 * passes/memplan*.c. */
#ifndef SHARDC_PASSES_MEMPLAN_PLANNER_H
#define SHARDC_PASSES_MEMPLAN_PLANNER_H

#include <stdint.h>

#include "memplan.h"

/* What the plan needs to know per value while it is being made. */
typedef struct Planner {
  PassMemPlan *p;
  IrGraph *g;
  int *def;       /* index of the defining node, -1 for inputs and params */
  int64_t *delta; /* a view: byte offset into the value it aliases */
  bool *outside;  /* read by a node outside the fused loop that defines it */
  bool *output;   /* a named output of the model */
  bool *direct;   /* a gradient its node adds straight into the grads region */
  bool *reg;      /* never leaves its fused loop: no memory */
  bool *wide;     /* a part of a param's gradient that a collective reduces: never low */
} Planner;

/* PassMemPlan.map holds each value's index in bufs plus one (the map's
 * values are non-NULL pointers): an unrolled GPT-2 has thousands of values
 * and codegen looks each up several times. */
static inline int map_get(const IrPtrMap *m, const IrValue *v) {
  return (int)(intptr_t)ir_ptrmap_get(m, v) - 1;
}

static inline PassBuf *buf_of(Planner *pl, const IrValue *v) {
  int i = map_get(pl->p->map, v);
  if (i < 0) die("value outside the planned graph");
  return &pl->p->bufs[i];
}

/* Plans the runs of row chunks (PassMemPlan.region_first, region_last,
 * chunked, sunk, chunk_rows, nchunks) over the fused loops, views,
 * gradients and registers already planned; region_first and region_last
 * hold each node's fused loop on entry. */
void pass_memplan_rows(Planner *pl);

/* A buffer to place in a region: its bytes, its lifetime [first, last]
 * (node positions), a unique key that breaks ties, and on return its
 * offset. */
typedef struct PassFitItem {
  int64_t size, offset;
  int first, last;
  int key; /* buffer index, or nbufs + node index for scratch: a stable tie-break */
} PassFitItem;

/* Places items (reordered: largest first) by interval first-fit
 * (memplan_fit.c) and returns the bytes the region needs, a multiple of
 * 64. */
int64_t pass_memplan_first_fit(PassFitItem *items, int n);

#endif
