/* The layout of a program set: everything codegen decides before it
 * prints a line, as plain data. cg_layout_build takes what the passes
 * made of the program (pp-split's chunks, memplan's plans, the schedule's
 * tables; it runs no pass), checks it against the target and the options,
 * places the weights and the data-parallel buckets, and sums each
 * program's regions; the printers (emit.c) only read it. Private to
 * codegen/. */
#ifndef SHARDC_CODEGEN_LAYOUT_H
#define SHARDC_CODEGEN_LAYOUT_H

#include "../passes/schedule.h"
#include "target.h"

/* What the runtime needs to know of the model's data flow. */
typedef struct CgModelInfo {
  const IrValue *loss, *logits, *targets, *dloss;
  int64_t batch, seq, vocab;
  int64_t logits_cols; /* of this rank's logits: vocab, or its part of the padded vocabulary */
} CgModelInfo;

/* One rank program: a pipeline stage's chunks (the whole model when p = 1)
 * and what the program holds besides them. */
typedef struct CgProgram {
  int stage;
  const char *name;      /* "rank0" when p = 1, else "stage0", "stage1", ... */
  CgChunk *chunks;       /* its v chunks, chunk c being virtual stage c * p + stage */
  int nchunks;
  int64_t nweights;      /* elements of the weights region */
  int64_t regions[5];    /* bytes: weights, grads, optimizer, activations, temporaries */
  CgBucket *buckets;
  int nbuckets;
  const RtSchedTable *table; /* the stage's actions; NULL when p = 1 */
  const char *schedule;
  int microbatches;
  IrPtrMap *tied;        /* parameters another stage holds a copy of */
} CgProgram;

typedef struct CgLayout {
  PassProgram *prog; /* what the passes made */
  IrGraph *g; /* the whole graph (after pp-split, no longer usable itself when p > 1) */
  const CgOptions *opt;
  const CgTarget *target;
  int real_bytes;
  PassMemPolicy policy;  /* the target's, with CgOptions.threads */
  int tp, pp, dp, vpp;   /* the mesh, each at least 1 */
  CgModelInfo model;
  CgChunk *chunks;       /* by virtual stage, p * v */
  int nchunks;
  CgProgram *programs;   /* one per pipeline stage */
  int nprograms;
  IrPtrMap tied;         /* tied original -> its copy */
} CgLayout;

/* The layout of the program's rank programs for target t; NULL after
 * reporting errors (bad options, a model the target cannot run, a chunk,
 * plan or schedule the pipeline did not make). */
CgLayout *cg_layout_build(PassProgram *prog, const CgOptions *o, const CgTarget *t);
void cg_layout_free(CgLayout *l);

/* Writes every file of the layout into o->out_dir (emit.c); false after
 * reporting errors. */
bool cg_emit(const CgLayout *l);

#endif
