/* What the emitter core shares with the targets: the emitter and the
 * target interface. Private to codegen/. */
#ifndef SHARDC_CODEGEN_TARGET_H
#define SHARDC_CODEGEN_TARGET_H

#include <stdbool.h>
#include <stdio.h>

#include "../passes/memplan.h"
#include "codegen.h"

typedef struct CgTarget CgTarget;

/* The pass pipelines every target shares unless it names its own
 * (CgTarget.pipeline, .pipeline_pp), without and with pipeline
 * partitioning; one line each, so that a pass joins a pipeline in a
 * one-line change, and a target that adds passes of its own appends them
 * to these (the CUDA target's gemm-epilogue). */
#define CG_PIPELINE \
  "fold,shape,tp-annotate,vocab-pad,tp-partition,tp-fuse,unroll,ep-partition,autodiff,tp-fuse,recompute,add-norm,verify,schedule,memplan"
#define CG_PIPELINE_PP \
  "fold,shape,tp-annotate,vocab-pad,tp-partition,tp-fuse,unroll,ep-partition,pp-partition,autodiff,tp-fuse,recompute,add-norm,verify,pp-split,schedule,bw-split,memplan"

/* Where a target's programs keep the model (CgTarget.memory). */
typedef enum CgMemory { CG_MEMORY_HOST, CG_MEMORY_GPU } CgMemory;

/* A command-line option of one target: its name ("--cuda-arch"), the
 * name of its value in --help ("sm_NN"; NULL for a flag), its help line
 * (the driver puts "--target NAME: " before it) and, for one that takes
 * a value, what the value must be: NULL when it is fine, else the usage
 * message. A flag has no check. */
typedef struct CgTargetOption {
  const char *name;
  const char *value;
  const char *help;
  const char *(*check)(const char *value);
} CgTargetOption;

/* A gradient bucket of data parallelism (abi/model.h RtBucket):
 * elements [offset, offset + numel) of the rank's weights. */
typedef struct CgBucket {
  int chunk; /* index of the chunk on its stage */
  bool tied;
  int64_t offset, numel;
  int ready; /* the chunk's node after which its last gradient is final; -1: at backward's start */
  bool expert; /* expert parameters only (--ep): reduced over the ranks holding the same experts */
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
  /* The GEMM epilogues gemm-epilogue chose on its plan, for a target that
   * reads them (CgTarget.gemm_epilogues); NULL for the others. */
  const struct PassEpilogues *epilogues;
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
  void *state; /* the target's own (CgTarget.state_new), for one program */
  bool vshape; /* the chunks sit in zb-v's V placement (RtModel.vshape) */
} CgEmitter;

/* Node i of the graph being written; elements of v; its dim k (counting
 * from the end when negative); its rows, the elements over the last dim. */
static inline const IrNode *cg_node(const CgEmitter *e, int i) { return e->g->nodes.items[i]; }
static inline int64_t cg_numel(const IrValue *v) { return ir_type_numel(&v->type); }
static inline int64_t cg_dim(const IrValue *v, int k) {
  if (v->type.rank == 0) return 1; /* a scalar (a loss term) is one row of one */
  return v->type.shape[k < 0 ? k + v->type.rank : k];
}
static inline int64_t cg_rows(const IrValue *v) { return cg_numel(v) / cg_dim(v, -1); }
/* Whether attribute `name` of n is set and not 0 (vocab_parallel, per_rank). */
static inline bool cg_flag(const IrNode *n, const char *name) {
  return ir_attr_has(n, name) && ir_attr_int(n, name) != 0;
}

/* The ranks along mesh axis a of g (1 when not partitioned). */
static inline int cg_mesh(const IrGraph *g, IrMeshAxis a) {
  return g->mesh[a] > 1 ? g->mesh[a] : 1;
}

/* How an elementwise operand of shape t is read at the flat index of
 * shape s (broadcast.c): whole, one scalar, a suffix of s's dims (a
 * bias), a prefix (a per-row value), or any other broadcast. */
typedef enum CgBcKind { CG_BC_FULL, CG_BC_SCALAR, CG_BC_SUFFIX, CG_BC_ROW, CG_BC_GENERAL } CgBcKind;
typedef struct CgBc {
  CgBcKind kind;
  int64_t size; /* CG_BC_SUFFIX: elements of the suffix; CG_BC_ROW: elements per row */
} CgBc;
CgBc cg_bcast(const IrType *t, const IrType *s);
/* The index expression into t of flat index expression `i` of s. */
const char *cg_bcast_index(const IrType *t, const IrType *s, const char *i);
/* How matmul node n runs (broadcast.c): its transposes, its product
 * [m, k] @ [k, n] with leading dims lda and ldb, and one of three forms:
 * one GEMM (batch 1), one GEMM over batch * m rows (a 2-D b shared by a's
 * contiguous rows), or `batch` GEMMs strided by sa and sb (0 for an
 * operand the batch shares). False after reporting operands of rank below
 * 2 or batch dims that neither match nor are shared. */
typedef enum CgMatmulForm { CG_MM_ONE, CG_MM_ROWS, CG_MM_BATCHED } CgMatmulForm;
typedef struct CgMatmul {
  int ta, tb;
  int64_t m, n, k, batch, lda, ldb, sa, sb;
  CgMatmulForm form;
} CgMatmul;
bool cg_matmul_shape(CgEmitter *e, const IrNode *n, CgMatmul *mm);
/* The product of t's dims from..to-1. */
int64_t cg_dims_prod(const IrType *t, int from, int to);

/* The elementwise formulas of ir/ops.def (elementwise.c). cg_formula is
 * output `out` of node n at one element, its inputs' values there being
 * the expressions a[]; NULL for an op or output without one.
 * cg_formula_text is its text as ops.def writes it, cg_formula_outputs the
 * outputs that have one. cg_formula_writes_op: whether op is elementwise
 * and has a formula, so that every target's fused loops write it. */
const char *cg_formula(const IrNode *n, int out, const char *const *a);
/* The body of a fused run's loop at one element, the same for every
 * target: each node's outputs as `const real vN = FORMULA;`, its inputs
 * read by the target's `operand`, and each output that leaves the run
 * (the slot-th of the run's stores, in node order) written by the target's
 * `store`; an output nobody reads is voided. `run` is the target's own
 * description of the run, handed to both. */
typedef struct CgRunHooks {
  const char *(*operand)(CgEmitter *e, const void *run, const IrValue *v);
  void (*store)(CgEmitter *e, const void *run, const IrValue *out, int slot, const char *reg);
  const void *run;
} CgRunHooks;
void cg_formula_body(CgEmitter *e, int first, int last, const CgRunHooks *h);
/* Whether v is computed by a node of the fused run first..last, and the
 * register the run's loop body holds such a value in ("v7"). */
bool cg_in_run(const CgEmitter *e, int first, int last, const IrValue *v);
const char *cg_reg(CgEmitter *e, const IrValue *v);
const char *cg_formula_text(IrOp op, int out);
int cg_formula_outputs(IrOp op);
bool cg_formula_writes_op(IrOp op);

/* The layout ops' kernel calls, `prefix` naming the target's kernels
 * (layout_ops.c). A transpose of a dim with itself writes nothing and
 * returns false: the target copies. */
bool cg_transpose_call(CgEmitter *e, const IrNode *n, const char *prefix);
void cg_heads_call(CgEmitter *e, const IrNode *n, bool split, const char *prefix);

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
/* The node's kernel scratch, planned by the target's memory policy. */
const char *cg_scratch(CgEmitter *e, int index);
/* Whether v (token ids) is i32, else an error at n. */
bool cg_need_i32(CgEmitter *e, const IrNode *n, const IrValue *v);
/* Query heads, kv heads and the head size of attention n over q[b, s, H*d]. */
void cg_attention_dims(const IrNode *n, int64_t *H, int64_t *K, int64_t *d);

/* A target: its facts (the precisions it runs, where its programs keep
 * the model, its own options), the policy a program is built under (its
 * pass pipeline, its memory plan's scratch and threads) and the code it
 * writes: kernel calls, loops and includes. The core (emit.c,
 * collectives.c) writes the rest, the collectives and the tables of
 * pipeline messages included. `node` and `fused` run inside forward() or
 * backward(), where `ctx` is the RtCtx. A new target is one file (or a
 * folder with its own header, as cuda/) defining one of these, and a line
 * in the table of targets.c. */
struct CgTarget {
  const char *name;
  const char *doc;        /* one line, for `shardc passes` */
  const char *source_ext; /* of the rank programs: ".c" */
  const char *buildfile_name; /* "Makefile" */
  /* The pass pipeline a graph goes through before codegen, without and
   * with pipeline partitioning (whose program passes cut the graph into
   * chunks and plan each); NULL: the pipelines every target shares
   * (CG_PIPELINE, CG_PIPELINE_PP). */
  const char *pipeline, *pipeline_pp;
  /* Whether its programs are written with the GEMM epilogues the
   * gemm-epilogue pass chose (CgChunk.epilogues): the layout then requires
   * them of every chunk, made on the chunk's plan. */
  bool gemm_epilogues;
  /* Whether vocab-pad pads the vocabulary at t = 1 too
   * (PassOptions.vocab_pad_always): a GPU's GEMMs want the LM head's
   * dimension a multiple of 128. */
  bool vocab_pad_always;
  /* The precisions its programs run the step in (CG_PRECISION_*). */
  unsigned precisions;
  /* Where its programs keep the model: this machine's memory (the
   * launcher checks the plan against it) or a GPU's. */
  CgMemory memory;
  /* A GPU target: whether `shardc run` takes it by itself for jobs of
   * more than one rank, not only for one (cg_run_target). */
  bool runs_many_ranks;
  /* Its own command-line options (the driver lists them in its help),
   * ended by a NULL name; NULL: none. */
  const CgTargetOption *options;
  /* The memory plan's policy: kernel scratch per node, threads or streams,
   * whether runs of row chunks are planned (then row_chunks must be
   * set). */
  const PassMemPolicy *memplan;
  /* Whether the target writes nodes of op (cpu: its kernel table and the
   * tensor-parallel ops of cpu_tp.c). The core asks before it hands a node
   * to `node` or `fused` (or a sunk node to row_chunks), and reports any
   * other node with one message naming the target and the op. Every op is
   * either written by the core (cg_core_writes_op) or by every target of
   * the table, which tests/codegen/op_coverage.c checks. */
  bool (*writes_op)(IrOp op);
  /* The target's state for one program, made when its emitter opens; NULL
   * when the target keeps none. */
  void *(*state_new)(CgEmitter *e);
  /* Includes and helpers at the top of a rank program. */
  void (*prologue)(CgEmitter *e);
  /* After the memory plan's regions: what the target's kernels need of the
   * plan (the CPU target: its threads and their attention scratch). */
  void (*plan_defines)(CgEmitter *e);
  /* The kernel calls of node `index` (neither a view nor fused, nor a
   * collective, which the core writes). */
  void (*node)(CgEmitter *e, int index);
  /* One loop over the elementwise nodes first..last. */
  void (*fused)(CgEmitter *e, int first, int last);
  /* A run of row chunks (PassMemPlan.chunked, .sunk) of nodes
   * first..last, for a target whose memory policy plans them (row_chunks):
   * the target's loop over the chunks around cg_chunk_body, then its own
   * code of each sunk node for the whole run, in the order cg_next_sunk
   * gives them. */
  void (*row_chunks)(CgEmitter *e, int first, int last);
  /* Adds `grad` (in a temporary) into the gradient slot of `param`. */
  void (*accumulate)(CgEmitter *e, const IrValue *param, const IrValue *grad);
  /* For the collectives along inner dims: writes dst [b][a][part] from
   * src [a][b][part] (pointer expressions of the generated code; elements
   * of 2 bytes with `low`, the plan's low precision), and the name of the
   * program's buffer of cg_comm_scratch_reals reals that holds the
   * rank-major copy. */
  void (*permute)(CgEmitter *e, const char *dst, const char *src, int64_t a, int64_t b,
                  int64_t part, bool low);
  const char *comm_scratch;
  /* The program's entry point, after the tables (`rt_model`). */
  void (*entry)(CgEmitter *e);
  /* The build file that compiles the programs named by `programs`. */
  void (*buildfile)(CgEmitter *e, const char *const *programs, int nprograms);
};

extern const CgTarget cg_target_cpu;
extern const CgTarget cg_target_cuda;

/* The target of that name in the table (targets.c), the first one for
 * NULL; NULL for an unknown name. */
const CgTarget *cg_find_target(const char *name);
/* The i-th target of the table; NULL past its end. */
const CgTarget *cg_target_at(int i);
/* Whether the command line gave option `name` of the emitter's target
 * (CgOptions.target_args), and its value (NULL for a flag or when not
 * given). */
bool cg_target_arg(const CgEmitter *e, const char *name, const char **value);

/* Whether the core writes nodes of op for every target, so that no target
 * needs to (emit.c): the collectives (collectives.c), the ops the memory
 * plan always makes views (reshape, tp_copy: no code), and the ops passes
 * remove before codegen (repeat: unroll; pp_boundary: the layout turns
 * each into a message). */
bool cg_core_writes_op(IrOp op);

/* Inside CgTarget.row_chunks (emit.c): the code of one chunk of rows of
 * nodes first..last, the sunk ones left out, each node through `node` or
 * `fused`; and the next sunk node of first..last after node `after`
 * (first - 1 to begin), with its IR comment written, -1 past the last. */
void cg_chunk_body(CgEmitter *e, int first, int last);
int cg_next_sunk(CgEmitter *e, int after, int last);

/* The build file's rules (emit.c), after the target's variables: `all`,
 * one rule per program that compiles its source with `compile` ("$(CC)
 * $(CFLAGS)") and links $(RTLIBS) $(LDLIBS), and `clean`. */
void cg_buildfile_rules(CgEmitter *e, const char *const *programs, int nprograms,
                        const char *compile);

/* ------------------------------------------------------- collectives.c */

/* The collectives of a partitioned graph as calls of runtime/comm/comm.h, the
 * same for every target: whether the program needs comm.h, and its include
 * with the RT_COMM_REAL of the program's real (written by a target's
 * prologue where it wants it). */
bool cg_comm_used(const CgEmitter *e);
/* The expert ranks E of the program's all_to_all (--ep), 1 without; of
 * its chunks before there is an emitter (the layout's). */
int cg_expert_ranks(const CgEmitter *e);
int cg_chunks_expert_ranks(const CgChunk *ch, int nch);
/* Whether v is an expert parameter: split over the expert ranks (ep-partition). */
static inline bool cg_expert_param(const IrValue *v) {
  return v->shard.kind == IR_SPLIT && v->shard.axis == IR_AXIS_DATA;
}
void cg_comm_includes(CgEmitter *e);
/* The code of a collective node (all_reduce, all_gather, reduce_scatter);
 * false for any other node. */
bool cg_comm_node(CgEmitter *e, const IrNode *n);
/* Whether node n works over the tensor axis; reports the node otherwise. */
bool cg_comm_tensor_axis(CgEmitter *e, const IrNode *n);
/* The product of v's dims before the dim that node n gathers, scatters or
 * slices along (its `dim`). */
int64_t cg_comm_outer(const IrNode *n, const IrValue *v);
/* Reals of CgTarget.comm_scratch that collective n needs. */
int64_t cg_comm_scratch_reals(const IrNode *n);
/* Whether n is the loss over this tensor rank's columns of the logits. */
bool cg_vocab_loss(const IrNode *n);
/* What the tensor-parallel forms of every chunk of the program need: the
 * reals of the one scratch buffer they share (the collectives' rank-major
 * copies, the vocabulary-parallel loss's per-row reductions), returned,
 * and whether some dropout draws a stream per tensor rank. */
int64_t cg_tp_needs(const CgEmitter *e, bool *per_rank);
/* An all-reduce over the tensor axis of n reals at src into dst with
 * operation op ("RT_COMM_SUM", "RT_COMM_MAX"). */
void cg_comm_allreduce(CgEmitter *e, const char *src, const char *dst, int64_t n, const char *op);

#endif
