/* What the emitter core shares with the targets: the emitter and the
 * target interface. Private to codegen/. */
#ifndef SHARDC_CODEGEN_TARGET_H
#define SHARDC_CODEGEN_TARGET_H

#include <stdbool.h>
#include <stdio.h>

#include "../passes/memplan.h"
#include "codegen.h"

typedef struct CgTarget CgTarget;

/* A gradient bucket of data parallelism (abi/model.h RtBucket):
 * elements [offset, offset + numel) of the rank's weights. */
typedef struct CgBucket {
  int chunk; /* index of the chunk on its stage */
  bool tied;
  int64_t offset, numel;
  int ready; /* the chunk's node after which its last gradient is final; -1: at backward's start */
} CgBucket;

/* One model chunk of a rank program: a graph of its own (the whole model
 * without pipeline parallelism; one virtual stage's part with it) with its
 * memory plan, placed in the rank's weights at weight_base. */
typedef struct CgChunk {
  IrGraph *g;
  PassMemPlan *plan;
  int vstage;          /* c * p + stage */
  int index;           /* c: the chunk's index on its stage */
  int64_t weight_base; /* elements */
  int64_t nweights;    /* elements, padded to the bucket quantum */
  IrVec recv_act, send_act, recv_grad, send_grad; /* IrValue*: message parts */
  const CgBucket *buckets; /* the rank's buckets of this chunk */
  int nbuckets;
  int first_bucket;    /* the rank's index of buckets[0] */
} CgChunk;

/* One output file under construction: lines go to an in-memory buffer,
 * indented by `depth`, and the file is written once at the end. */
typedef struct CgEmitter {
  FILE *out; /* an open_memstream over buf */
  char *buf;
  size_t len;
  int depth;
  int counter; /* for unique names in the generated code */
  IrGraph *g;
  const PassMemPlan *plan;
  /* The chunk being written (g and plan are its), and all chunks of the
   * program, for what the program holds once (includes, scratch, main). */
  const CgChunk *chunk;
  const CgChunk *chunks;
  int nchunks;
  const CgOptions *opt;
  const CgTarget *target;
  int errors;
  /* Inside a run of row chunks (PassMemPlan.chunked): the rows of one
   * chunk, whose first row the generated code holds in `r0` (and its
   * number in `chunk`); 0 elsewhere. */
  int64_t chunk_rows;
  int chunk_state; /* the CPU target's: which braces of a run are open */
  bool team;       /* writing a sunk node: GEMMs in their team form */
} CgEmitter;

/* One line: `depth` levels of two spaces, the formatted text, a newline. */
void emit(CgEmitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void emit_blank(CgEmitter *e);
/* A unique number for names in the generated code. */
int cg_unique(CgEmitter *e);
/* An error at the node's location: the target cannot run this node. */
void cg_error(CgEmitter *e, const IrNode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Where a value lives, as a pointer expression of the generated code:
 * WGT(elems), GRD(elems) into the rank's weights and gradients; ACT(bytes)
 * and TMP(bytes) into the chunk's kept activations and the temporaries for
 * reals; I32(bytes) and I32T(bytes) likewise for ids. */
const char *cg_ref(CgEmitter *e, const IrValue *v);
const PassBuf *cg_buf(CgEmitter *e, const IrValue *v);
/* The value as the IR text names it: %tokens, @wte.weight, %12. */
const char *cg_name(CgEmitter *e, const IrValue *v);
/* A real constant of the generated code: (real)0.5, -INFINITY. */
const char *cg_real(double x);

/* A target writes kernel calls, loops and includes; the core writes the
 * rest. `node` and `fused` run inside forward() or backward(), where `ctx`
 * is the RtCtx. */
struct CgTarget {
  const char *name;
  const char *source_ext; /* of the rank programs: ".c" */
  /* Includes and helpers at the top of a rank program. */
  void (*prologue)(CgEmitter *e);
  /* The kernel calls of node `index` (neither a view nor fused). */
  void (*node)(CgEmitter *e, int index);
  /* One loop over the elementwise nodes first..last. */
  void (*fused)(CgEmitter *e, int first, int last);
  /* A run of row chunks (PassMemPlan.chunked, .sunk): chunks_begin opens
   * the parallel region and its loop over chunks, whose body `node` and
   * `fused` write for one chunk; chunks_after closes the loop, after which
   * team_node writes each sunk node for the whole team; chunks_end closes
   * the region. */
  void (*chunks_begin)(CgEmitter *e, int first, int last);
  void (*chunks_after)(CgEmitter *e);
  void (*team_node)(CgEmitter *e, int index);
  void (*chunks_end)(CgEmitter *e);
  /* Adds `grad` (in a temporary) into the gradient slot of `param`. */
  void (*accumulate)(CgEmitter *e, const IrValue *param, const IrValue *grad);
  /* The program's entry point, after the tables (`rt_model`). */
  void (*entry)(CgEmitter *e);
  /* The build file that compiles the programs named by `programs`. */
  void (*buildfile)(CgEmitter *e, const char *const *programs, int nprograms);
  const char *buildfile_name; /* "Makefile" */
};

extern const CgTarget cg_target_cpu;

/* Tensor parallelism on the CPU target (cpu_tp.c): the includes, scratch
 * and helpers the rank program needs, and the code of a node that is a
 * collective or depends on the rank (vocabulary-parallel embedding and
 * loss, per-rank dropout); false for any other node. */
void cg_cpu_tp_prologue(CgEmitter *e);
bool cg_cpu_tp_node(CgEmitter *e, const IrNode *n);
/* embedding_grad added into its gradient slot (cpu.c); vp_rows > 0: the
 * rank's rows of a vocabulary-parallel table. */
void cg_cpu_embedding_scatter(CgEmitter *e, const IrNode *n, int64_t vp_rows);

#endif
