/* The pass manager and the registry of passes.
 *
 * A pass takes the graph and the options and rewrites the graph in place
 * (or replaces *g). It reports user errors through ir_error and returns
 * false; internal bugs die(). Every pass is one line in the table of
 * registry.c, with a name and a one-line description, so `shardc passes`
 * lists them and `--passes=a,b,c` can run any sequence. */
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
  int world;              /* ranks the job has (--world-size); 0: t * p * d, not checked */
  bool sequence_parallel; /* --sequence-parallel: norms, dropout, residuals on sequence slices */
  PassTpStrategy tp_strategy;
  int vocab_multiple;     /* --vocab-multiple: pad the vocabulary to a multiple of this times t;
                           * 0: no padding (the driver's default is 128) */
  int vpp;                /* --vpp: model chunks per pipeline stage v (interleaving) */
  const char *pp_layout;  /* --pp-layout N0,N1,...: layers per virtual stage, or NULL */
  bool pp_vshape;         /* the V placement of zb-v (rt_vstage): set for --schedule zb-v */
  bool no_scatter_gather; /* --no-scatter-gather: pipeline messages carry the whole replicated
                           * activation, not each tensor rank's 1/t slice (pp-partition) */
  const struct PassMemPolicy *memplan; /* the target's memory policy (memplan.h); NULL: none */
  PassRecompute recompute; /* --recompute */
  int recompute_layers;    /* --recompute-layers: layers per checkpoint under full (0: 1) */
} PassOptions;

/* The tensor-parallel size of the options, at least 1. */
static inline int pass_tp(const PassOptions *o) { return o && o->tp > 1 ? o->tp : 1; }

typedef struct Pass {
  const char *name;
  const char *doc;
  bool (*run)(IrGraph **g, const PassOptions *opt);
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

/* Runs the comma-separated pipeline. An unknown name is an error that lists
 * the registered passes. With verify_each the verifier runs after every
 * pass and an invariant it finds broken names the pass. Returns false when
 * a pass reported errors (the pipeline stops there). */
bool pass_run_pipeline(IrGraph **g, const char *pipeline, const PassOptions *opt,
                       const PassManagerFlags *flags);

/* -D name=value: replaces a config value before folding. `where` is the
 * location reported when the model has no such name ("<command line>"). */
bool pass_override_config(IrGraph *g, const char *name, const char *value, IrLoc where);

/* The passes themselves (one file each). */
bool pass_fold(IrGraph **g, const PassOptions *opt);
bool pass_shape(IrGraph **g, const PassOptions *opt);
bool pass_verify(IrGraph **g, const PassOptions *opt);
bool pass_unroll(IrGraph **g, const PassOptions *opt);
bool pass_autodiff(IrGraph **g, const PassOptions *opt);
/* Reorders a pipeline chunk's backward into B, then W (the nodes autodiff
 * marked wgrad), and sets g->wsplit; returns the index of the first W
 * node (wsplit.c). */
int pass_split_backward(IrGraph *g);
bool pass_tp_annotate(IrGraph **g, const PassOptions *opt);
bool pass_vocab_pad(IrGraph **g, const PassOptions *opt);
bool pass_tp_partition(IrGraph **g, const PassOptions *opt);
bool pass_tp_fuse(IrGraph **g, const PassOptions *opt);
bool pass_pp_partition(IrGraph **g, const PassOptions *opt);
bool pass_recompute(IrGraph **g, const PassOptions *opt);
/* The names of PassRecompute's values, "none", "selective", "full". */
extern const char *const pass_recompute_names[];

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
 * (runtime/comm.h, rt_comm_bytes), for a program whose reals have
 * `real_bytes` bytes (4 or 8) and, with low_bytes 2 (--precision bf16),
 * whose activations travel in bf16. Collectives inside a repeat count once per
 * iteration. Writes to out; the TP ranks all send the same, which it says.
 * False after reporting a graph it cannot count (not folded and typed). */
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
