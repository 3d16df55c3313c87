/* The pass manager and the registry of passes.
 *
 * A graph pass takes the graph and the options and rewrites the graph in
 * place (or replaces *g). A program pass takes the program being built
 * (PassProgram: the graph and what the last stages made of it, the
 * pipeline chunks, the schedule and the memory plans) and hangs its result
 * there. Either reports user errors through ir_error and returns false;
 * internal bugs die(). Every pass is one line in the table of registry.c,
 * with a name and a one-line description, so `shardc passes` lists them
 * and `--passes=a,b,c` can run any sequence. */
#ifndef SHARDC_PASSES_H
#define SHARDC_PASSES_H

#include "../ir/ir.h"

/* How tp-annotate places the parameters (--tp-strategy). */
typedef enum PassTpStrategy {
  PASS_TP_MEGATRON, /* Megatron-LM's placement, found from the graph; annotations override */
  PASS_TP_NONE,     /* only the model's own annotations */
} PassTpStrategy;

/* What `recompute` runs again in the backward (--recompute). */
typedef enum PassRecompute {
  PASS_RECOMPUTE_NONE,      /* keep every forward value the backward reads */
  PASS_RECOMPUTE_SELECTIVE, /* the attention core: scores, softmax and their dropout */
  PASS_RECOMPUTE_FULL,      /* each group of layers keeps only its input */
} PassRecompute;

/* Everything a pass may read besides the graph: the cluster shape and the
 * tensor-parallel choices. A zeroed struct is one rank without padding;
 * values below 1 count as 1. */
typedef struct PassOptions {
  int tp;                 /* tensor-parallel size t (--tp) */
  int pp, dp;             /* pipeline stages and data-parallel replicas (1 until they exist) */
  int ep;                 /* --ep: expert ranks E out of the data-parallel ones (0 or 1: none) */
  int world;              /* ranks the job has (--world-size); 0: t * p * d, not checked */
  bool sequence_parallel; /* --sequence-parallel: norms, dropout, residuals on sequence slices */
  PassTpStrategy tp_strategy;
  int vocab_multiple;     /* --vocab-multiple: pad the vocabulary to a multiple of this times t;
                           * 0: no padding (the driver's default is 128) */
  bool vocab_pad_always;  /* pad at t = 1 too: the target's (CgTarget.vocab_pad_always) */
  int vpp;                /* --vpp: model chunks per pipeline stage v (interleaving) */
  const char *pp_layout;  /* --pp-layout N0,N1,...: layers per virtual stage, or NULL */
  bool pp_vshape;         /* the V placement of zb-v (rt_vstage): set for --schedule zb-v */
  bool no_scatter_gather; /* --no-scatter-gather: pipeline messages carry the whole replicated
                           * activation, not each tensor rank's 1/t slice (pp-partition) */
  const struct PassMemPolicy *memplan; /* the target's memory policy (memplan.h); NULL: none */
  PassRecompute recompute; /* --recompute */
  int recompute_layers;    /* --recompute-layers: layers per checkpoint under full (0: 1) */
  /* The memory plans (memplan): the bytes of a real (4 or 8; 0: 4), the
   * threads its kernel scratch is held for (0: the policy's), and 2 when
   * the step's own values are bf16 (--precision bf16; 0: the real's). */
  int real_bytes, threads, low_bytes;
  /* The schedule: its name (--schedule; NULL: 1f1b, interleaved with
   * v > 1) or a file (--schedule-file), the interleaved schedule's
   * microbatch group N (--vpp-group; 0: p), and the global batch in
   * sequences (--global-batch), which fixes the microbatches per step
   * m = global batch / (microbatch x d) (0: m = PASS_DEFAULT_MICROBATCHES). */
  const char *schedule, *schedule_file;
  int vpp_group;
  int64_t global_batch;
  /* --no-gemm-epilogue: gemm-epilogue chooses no epilogue, so that a GELU,
   * its gradient and a bias gradient after a GEMM run as kernels of their
   * own (for comparison). */
  bool no_gemm_epilogue;
  /* --report tp: where tp-annotate writes the placement of every GEMM
   * (NULL: it warns of each one left replicated, and says nothing else). */
  FILE *tp_report;
} PassOptions;

/* Microbatches per step without --global-batch. */
#define PASS_DEFAULT_MICROBATCHES 8

/* The tensor-parallel size of the options, at least 1. */
static inline int pass_tp(const PassOptions *o) { return o && o->tp > 1 ? o->tp : 1; }

struct RtSchedule;
struct PassEpilogues;

/* One model chunk of the program: a graph of its own, its pipeline
 * messages, and once `memplan` has run its memory plan on g->memplan. */
typedef struct PassChunk {
  IrGraph *g;
  int vstage;                                     /* the virtual stage it is */
  IrVec recv_act, send_act, recv_grad, send_grad; /* IrValue*, message parts in order */
} PassChunk;

/* The program being built, which the pass manager carries from pass to
 * pass. The graph passes rewrite g; the program passes add the rest:
 * pp-split the chunks, schedule the action tables, bw-split the order of
 * each chunk's backward, memplan the plans, gemm-epilogue (a GPU
 * target's) the GEMM epilogues on them. Codegen lays the rank
 * programs out from it and runs no pass itself. */
typedef struct PassProgram {
  IrGraph *g;          /* the whole graph; once pp-split has cut it into
                        * several chunks, only its configs, inputs,
                        * outputs, params and mesh are read */
  PassChunk *chunks;   /* pp-split: one per virtual stage (one, the whole
                        * graph, when p * v = 1); NULL before it */
  int nchunks;
  struct RtSchedule *schedule; /* the schedule pass with p > 1 (malloc'ed); else NULL */
  int microbatches;    /* the schedule pass: m, the microbatches of a step */
  /* gemm-epilogue: each chunk's GEMM epilogues (gemm_epilogue.h), in the
   * order of pass_program_chunks, in the arena; NULL before it. */
  struct PassEpilogues *epilogues;
  int nepilogues;
} PassProgram;

/* The program's chunks: pp-split's, or the whole graph as one when
 * pp-split has not run. Writes the count into *n. */
PassChunk *pass_program_chunks(PassProgram *p, int *n);
/* Frees what the program holds outside the arena (the schedule). */
void pass_program_free(PassProgram *p);

/* A registered pass: exactly one of run (a graph pass) and run_program
 * (a program pass) is set. print shows a program pass's result for
 * --print-after (NULL: the program's graphs); verify checks it for
 * --verify-each, naming `who` in what it reports (NULL: the verifier on
 * the program's graphs). */
typedef struct Pass {
  const char *name;
  const char *doc;
  bool (*run)(IrGraph **g, const PassOptions *opt);
  bool (*run_program)(PassProgram *p, const PassOptions *opt);
  void (*print)(FILE *out, PassProgram *p);
  bool (*verify)(PassProgram *p, const char *who);
} Pass;

/* The registry, ending with a {NULL} entry. */
extern const Pass pass_registry[];
const Pass *pass_find(const char *name);
/* The longest registered name, for listings that align the descriptions. */
int pass_name_width(void);
/* The default pipeline, comma separated. */
extern const char *const pass_default_pipeline;

typedef struct PassManagerFlags {
  const char *print_after; /* a pass name, or NULL */
  bool print_after_all;
  bool verify_each;
  FILE *print_stream;      /* where --print-after writes (stdout) */
} PassManagerFlags;

/* Runs the comma-separated pipeline over the program. An unknown name is
 * an error that lists the registered passes, and so is a graph pass after
 * pp-split (the chunks share the whole graph's values). With verify_each the verifier runs after every
 * pass and an invariant it finds broken names the pass. Returns false when
 * a pass reported errors (the pipeline stops there). */
bool pass_run_program(PassProgram *p, const char *pipeline, const PassOptions *opt,
                      const PassManagerFlags *flags);
/* The same for a graph alone, for pipelines of graph passes; a program
 * pass in it is an error. */
bool pass_run_pipeline(IrGraph **g, const char *pipeline, const PassOptions *opt,
                       const PassManagerFlags *flags);
/* The pipeline up to its first program pass: the passes that rewrite the
 * whole graph, for what shows or reports it (--emit-ir, --report), which
 * pp-split would cut. *rest (when not NULL) gets the passes from the
 * first program pass on, "" when there is none. */
const char *pass_graph_pipeline(const char *pipeline, const char **rest);
/* The program's graphs as --print-after shows them: the whole graph, or
 * each chunk after a line naming its virtual stage. */
void pass_print_program(FILE *out, PassProgram *p);

/* -D name=value: replaces a config value before folding. `where` is the
 * location reported when the model has no such name ("<command line>"). */
bool pass_override_config(IrGraph *g, const char *name, const char *value, IrLoc where);

/* The passes themselves (one file each). */
bool pass_fold(IrGraph **g, const PassOptions *opt);
bool pass_shape(IrGraph **g, const PassOptions *opt);
bool pass_verify(IrGraph **g, const PassOptions *opt);
bool pass_unroll(IrGraph **g, const PassOptions *opt);
bool pass_autodiff(IrGraph **g, const PassOptions *opt);
bool pass_tp_annotate(IrGraph **g, const PassOptions *opt);
bool pass_vocab_pad(IrGraph **g, const PassOptions *opt);
bool pass_tp_partition(IrGraph **g, const PassOptions *opt);
bool pass_tp_fuse(IrGraph **g, const PassOptions *opt);
bool pass_ep_partition(IrGraph **g, const PassOptions *opt);
bool pass_pp_partition(IrGraph **g, const PassOptions *opt);
bool pass_recompute(IrGraph **g, const PassOptions *opt);
bool pass_add_norm(IrGraph **g, const PassOptions *opt);
/* The names of PassRecompute's values, "none", "selective", "full". */
extern const char *const pass_recompute_names[];
/* The program passes, the last stages before codegen, in their order. */
bool pass_pp_split(PassProgram *p, const PassOptions *opt);
bool pass_schedule(PassProgram *p, const PassOptions *opt);
bool pass_bw_split(PassProgram *p, const PassOptions *opt);
bool pass_memplan(PassProgram *p, const PassOptions *opt);
bool pass_gemm_epilogue(PassProgram *p, const PassOptions *opt);

/* The pipeline report (`shardc compile --report pp`): per virtual stage
 * its physical stage, chunk, layers, forward FLOPs and messages, and the
 * tied parameters. The layers are known in the pipeline that ran unroll. */
bool pass_pp_report(FILE *out, IrGraph *g, const PassOptions *opt);

/* For the passes that need a folded, typed graph (tp-annotate, vocab-pad,
 * tp-partition, the comm report): every attribute and repeat count a
 * number and every type known, in every graph. Reports the first node that
 * is not, naming `who`, and returns false. */
bool pass_check_typed(IrGraph *g, const char *who);

/* The weight of a GEMM with a 2-D parameter weight (linear, or matmul whose
 * b is a parameter), with the weight dims that are its input (when in_dim
 * is not NULL) and output features; NULL for any other node. */
IrValue *pass_gemm_weight(const IrNode *n, int *in_dim, int *out_dim);

/* The communication report (`shardc compile --report comm`): every
 * collective one microbatch runs (forward and backward), per mesh axis,
 * with the bytes each rank sends by the runtime's counting rules
 * (abi/comm.h, which the runtime counts by too), for a program whose reals have
 * `real_bytes` bytes (4 or 8) and, with low_bytes 2 (--precision bf16),
 * whose activations travel in bf16. Collectives inside a repeat count once per
 * iteration. Writes to out; the TP ranks all send the same, which it says.
 * False after reporting a graph it cannot count (not folded and typed). */
/* tp-partition: the dim of reshape n's result that a split of its input
 * on dim d over t ranks becomes with no data moving between ranks (a
 * head-preserving reshape), or -1. tp-annotate asks it too. */
int pass_reshape_split_dim(const IrNode *n, int d, int t);
bool pass_comm_report(FILE *out, IrGraph *g, const PassOptions *opt, int real_bytes,
                      int low_bytes);

/* Config evaluation shared by fold and the driver: evaluates e against the
 * (already folded) config table of g. Returns false after reporting an error
 * (undefined name, uneven integer division, overflow, bad function). */
typedef struct PassNum {
  bool is_float;
  int64_t i;
  double f;
} PassNum;
bool pass_eval_expr(IrGraph *g, const IrExpr *e, PassNum *out);

#endif
