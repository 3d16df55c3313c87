/* The shardc intermediate representation.
 *
 * A model is one top-level IrGraph: the config table (named numbers that
 * -D overrides), the inputs, the parameters, a list of nodes in topological
 * order and the named outputs. A layer stack is a single IR_OP_REPEAT node
 * whose body is a nested IrGraph, kept rolled until a pass unrolls it, so the
 * IR does not grow with the layer count.
 *
 * Until the `fold` pass runs, shapes and attributes are symbolic expressions
 * over config names (`3 * hidden`); `fold` evaluates them to literals and
 * `shape` infers the type of every node output from the rules in ops.def.
 *
 * Everything is allocated from one arena that lives until exit. */
#ifndef SHARDC_IR_H
#define SHARDC_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IR_MAX_RANK 8

/* ---------------------------------------------------------------- arena */

void *ir_alloc(size_t size); /* zeroed, aborts when out of memory */
char *ir_strdup(const char *s);
char *ir_strndup(const char *s, size_t n);
char *ir_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *ir_vfmt(const char *fmt, va_list ap); /* ir_fmt with a va_list */
void ir_arena_free_all(void); /* called once at exit */

/* A growable array of pointers, grown from the arena. */
typedef struct IrVec {
  void **items;
  int len, cap;
} IrVec;
void ir_vec_push(IrVec *v, void *item);

/* A map from pointers to non-NULL pointers (ptrmap.c), malloc'ed so that a
 * pass can free it when done; one made with `arena` set takes its memory
 * from the IR arena instead and lives as long as the graph it describes
 * (ir_ptrmap_free is then not needed). */
typedef struct IrPtrMap {
  const void **keys;
  void **vals;
  size_t cap, len;
  bool arena;
} IrPtrMap;
void ir_ptrmap_put(IrPtrMap *m, const void *key, void *val);
void *ir_ptrmap_get(const IrPtrMap *m, const void *key); /* NULL when absent */
void ir_ptrmap_free(IrPtrMap *m);

/* A map from strings to non-NULL pointers (strmap.c), malloc'ed or, with
 * `arena` set, taken from the IR arena like IrPtrMap. Keys are not copied:
 * they must live as long as the map. */
typedef struct IrStrMap {
  const char **keys; /* NULL: empty slot */
  void **vals;
  size_t cap, len;
  bool arena;
} IrStrMap;
/* Stores val under key, replacing what was there; returns the old value. */
void *ir_strmap_put(IrStrMap *m, const char *key, void *val);
/* Stores val unless key is there already; returns the value found, or NULL. */
void *ir_strmap_add(IrStrMap *m, const char *key, void *val);
void *ir_strmap_get(const IrStrMap *m, const char *key); /* NULL when absent */
void *ir_strmap_getn(const IrStrMap *m, const char *name, size_t n); /* key name[0..n) */
void ir_strmap_free(IrStrMap *m);

/* FNV-1a over n bytes, continuing from h (start with IR_HASH_SEED). */
#define IR_HASH_SEED 14695981039346656037ull
uint64_t ir_hash_bytes(uint64_t h, const void *data, size_t n);

/* ----------------------------------------------------------- diagnostics */

/* A source position; line and col are 1-based, line 0 means "no location". */
typedef struct IrLoc {
  const char *file;
  int line, col;
} IrLoc;

/* Where flags and -D values are reported: they have no file. */
#define IR_CMDLINE_FILE "<command line>"
extern const IrLoc ir_cmdline;

/* Sources are registered so that errors can print the line and a caret. */
void ir_diag_add_source(const char *file, const char *text, size_t len);
/* Forgets every registered source (their names live in the arena): for a
 * fuzzer that frees the arena between inputs. */
void ir_diag_forget_sources(void);
/* `file:line:col: error: message`, then the source line and a caret. */
void ir_error(IrLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_note(IrLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_verror(IrLoc loc, const char *kind, const char *fmt, va_list ap);
int ir_error_count(void);
void ir_diag_reset(void);
/* Stop reporting after this many errors (a fuzzed file can hold millions). */
#define IR_MAX_ERRORS 100
/* The most terms of a flat chain a + b + c + ... (or a * b / c ...): the
 * frontend, the reader of printed IR and the fold pass take it in loops,
 * so it is not nesting; nesting has its own, smaller limits. */
#define IR_MAX_CHAIN 10000
/* Diagnostics go to this stream (stderr unless a test redirects them). */
void ir_diag_set_stream(FILE *f);

/* Internal compiler bugs: print file:line and abort. */
_Noreturn void ir_die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define die(...) ir_die_at(__FILE__, __LINE__, __VA_ARGS__)
#define unreachable() ir_die_at(__FILE__, __LINE__, "unreachable")

/* ------------------------------------------------------------ expressions */

/* Config arithmetic: integer and float literals, config names, + - * / %,
 * unary minus and the functions sqrt, exp, log, min, max, pow. */
typedef enum IrExprKind {
  IR_EX_INT,
  IR_EX_FLOAT,
  IR_EX_NAME,
  IR_EX_NEG,
  IR_EX_ADD,
  IR_EX_SUB,
  IR_EX_MUL,
  IR_EX_DIV,
  IR_EX_MOD,
  IR_EX_CALL,
  IR_EX_LIST, /* [a, b, c]: list-valued attributes such as reshape's shape */
} IrExprKind;

typedef struct IrExpr IrExpr;
struct IrExpr {
  IrExprKind kind;
  IrLoc loc;
  int64_t i;        /* IR_EX_INT */
  double f;         /* IR_EX_FLOAT */
  const char *name; /* IR_EX_NAME, IR_EX_CALL (function name) */
  IrExpr *a, *b;    /* operands of unary/binary operators */
  IrExpr **args;    /* IR_EX_CALL arguments, IR_EX_LIST items */
  int nargs;
};

IrExpr *ir_expr_int(int64_t v, IrLoc loc);
IrExpr *ir_expr_float(double v, IrLoc loc);
IrExpr *ir_expr_name(const char *name, IrLoc loc);
IrExpr *ir_expr_unary(IrExprKind k, IrExpr *a, IrLoc loc);
IrExpr *ir_expr_binary(IrExprKind k, IrExpr *a, IrExpr *b, IrLoc loc);
IrExpr *ir_expr_call(const char *fn, IrExpr **args, int nargs, IrLoc loc);
IrExpr *ir_expr_list(IrExpr **items, int n, IrLoc loc);
bool ir_expr_is_literal(const IrExpr *e);
/* Prints fully parenthesised infix that ir_parse reads back. */
void ir_expr_print(FILE *out, const IrExpr *e);
char *ir_expr_str(const IrExpr *e); /* what ir_expr_print writes, in the arena */

/* ---------------------------------------------------------------- config */

typedef struct IrConfig {
  const char *name;
  IrExpr *expr;      /* as written; replaced by a literal by `fold` */
  IrLoc loc;
  bool overridden;   /* set by -D */
} IrConfig;

/* -------------------------------------------------------------- types */

typedef enum IrDType { IR_F32, IR_F64, IR_BF16, IR_F16, IR_I32, IR_I64 } IrDType;
const char *ir_dtype_name(IrDType t);
bool ir_dtype_parse(const char *s, IrDType *out);
int ir_dtype_size(IrDType t);

/* A tensor type. A dim is symbolic while dims[i] is non-NULL and not a
 * literal; `fold` fills shape[] and leaves dims[i] as an IR_EX_INT literal.
 * rank < 0 means "not inferred yet". */
typedef struct IrType {
  IrDType dtype;
  int rank;
  IrExpr *dims[IR_MAX_RANK];
  int64_t shape[IR_MAX_RANK];
} IrType;

bool ir_type_known(const IrType *t);         /* rank >= 0 and every dim literal */
int64_t ir_type_numel(const IrType *t);      /* requires ir_type_known */
void ir_type_set_shape(IrType *t, IrDType dt, int rank, const int64_t *shape);
void ir_type_print(FILE *out, const IrType *t); /* f32[1, (3 * hidden)] */
char *ir_shape_str(const IrType *t);            /* "[1, 1024, 768]" for messages */
char *ir_type_str(const IrType *t);             /* "f32[1, 1024, 768]", in the arena */
bool ir_type_same(const IrType *a, const IrType *b); /* dtype, rank and shape[] */
bool ir_dtype_is_float(IrDType t);

/* ---------------------------------------------------------------- sharding */

/* How a tensor is laid out over one mesh axis: the same on every rank
 * (replicated), cut along one dim (split), or a sum whose terms the ranks
 * hold (partial). The tensor-parallel passes fill it; a model may set it on
 * a parameter (`split(1)`, `replicated`).
 *
 * A split tensor made of `blocks` equal blocks along dim has each block
 * split over the ranks: the fused qkv weight [h, 3h] of GPT-2 split(1,
 * blocks 3) gives rank r the columns of q_r, k_r and v_r, so that the
 * rank's part of the layer output still splits into q, k and v. Printed
 * ` split(tensor, 1, 3)`; blocks 0 means 1, so a zeroed IrShard is valid. */
typedef enum IrShardKind { IR_REPLICATED, IR_SPLIT, IR_PARTIAL } IrShardKind;
/* IR_AXIS_EMBED is not an axis of the mesh (it has no size of its own)
 * but the group of each pipeline's first and last stage, which hold the
 * tied embedding. The runtime sums the tied gradients over it; no pass
 * writes a collective on it, but the IR names it (axis = 3). */
typedef enum IrMeshAxis { IR_AXIS_TENSOR, IR_AXIS_PIPELINE, IR_AXIS_DATA, IR_AXIS_EMBED } IrMeshAxis;
#define IR_MESH_AXES 3
typedef struct IrShard {
  IrShardKind kind;
  IrMeshAxis axis;
  int dim;    /* IR_SPLIT: the split dimension */
  int blocks; /* IR_SPLIT: equal blocks along dim, each split over the axis; 0 or 1: one */
  /* Set by the model's author (an annotation on a parameter) rather than
   * by a pass: tp-annotate keeps it. A fixed replicated spec prints as
   * ` replicated(tensor)`, any split or partial spec of a parameter counts
   * as fixed when tp-annotate starts. */
  bool fixed;
} IrShard;

/* The number of blocks of a split spec (at least 1). */
static inline int ir_shard_blocks(const IrShard *s) { return s->blocks > 1 ? s->blocks : 1; }
const char *ir_axis_name(IrMeshAxis a); /* "tensor", "pipeline", "data", "embed" */

/* ------------------------------------------------------------------ ops */

typedef enum IrOp {
#define OP(id, name, min_in, max_in, nout, shape, attrs, flags, adjoint, tp, rows, flops, doc) \
  IR_OP_##id,
#include "ops.def"
#undef OP
  IR_OP_COUNT
} IrOp;

/* Op flags (the `flags` column of ops.def). */
enum {
  IR_OPF_ELEMENTWISE = 1 << 0, /* output[i] depends only on inputs[i]: fusable */
  IR_OPF_GEMM = 1 << 1,        /* a matrix multiply */
  IR_OPF_REGION = 1 << 2,      /* holds a body graph */
  IR_OPF_SOURCE = 1 << 3,      /* no tensor inputs (arange) */
  IR_OPF_MULTI_OUT = 1 << 4,   /* output count is attribute `n` */
  IR_OPF_RANDOM = 1 << 5,      /* draws random numbers (dropout) */
  IR_OPF_INTERNAL = 1 << 6,    /* written by passes (gradients); models cannot call it */
  IR_OPF_PARALLEL = 1 << 7,    /* written by the parallelism passes (tp_copy, collectives,
                                * pp_boundary) */
  IR_OPF_COLLECTIVE = 1 << 8,  /* exchanges data between the ranks of mesh axis `axis` */
  IR_OPF_ACCUMULATES = 1 << 9, /* can add its result into its destination instead of writing
                                * it (a GEMM with beta = 1, embedding_grad's scatter): the
                                * memory plan lets it write a param's gradient straight into
                                * the gradient slot */
  IR_OPF_AUX_OUT = 1 << 10,    /* the results after the first are kept for the backward
                                * (attention's log-sum-exp): a model uses the first alone */
};

/* How the memory plan may cut a node into chunks of rows (the `rows`
 * column of ops.def), so that codegen runs it on one chunk of R rows at a
 * time: rows r0 .. r0 + C - 1 of every output come from the same rows of
 * its row-shaped inputs. A value's rows are its elements over its last dim. */
typedef enum IrRowRule {
  IR_ROWS_NONE,      /* not cut */
  IR_ROWS_SAME,      /* input 0 and output 0 have R rows each (linear, the norms) */
  IR_ROWS_GEMM,      /* matmul: a's rows against a shared 2-D b, a not transposed */
  IR_ROWS_PARTS,     /* split, concat along the last axis: all inputs and outputs R rows */
  IR_ROWS_SEQUENCES, /* whole sequences: input 0 is [b, s, width] and a chunk holds whole s */
  IR_ROWS_IDS,       /* embedding: one integer id per row */
  /* Not cut, but sums over all rows, so that a run of chunks can carry it
   * to the run's end (PassMemPlan.sunk): */
  IR_ROWS_SUM,       /* linear_dw: a weight gradient, always */
  IR_ROWS_SUM_TO,    /* sum_to: a bias gradient, when the result's dims are a suffix of x's */
} IrRowRule;

typedef struct IrNode IrNode;
typedef struct IrGraph IrGraph;
typedef struct IrValue IrValue;
typedef bool (*IrShapeFn)(IrNode *n);
/* The forward FLOPs of a typed node (the `flops` column of ops.def): the
 * multiply-adds of its matrix products, 2 each; 0 for ops without any. */
typedef double (*IrFlopsFn)(const IrNode *n);

/* One attribute of an op's spec: `name` or `name=default`. */
typedef struct IrAttrSpec {
  const char *name;
  const char *dflt; /* NULL: required */
  /* Written `?name=default` in ops.def: printed only when its value is not
   * the default. The partitioning attributes (vocab_parallel, per_rank,
   * valid) are quiet, so that a graph nobody partitioned reads as before. */
  bool quiet;
} IrAttrSpec;

typedef struct IrOpInfo {
  const char *name;
  int min_in, max_in; /* tensor inputs; max_in < 0: any number */
  int nout;           /* ignored with IR_OPF_MULTI_OUT */
  IrShapeFn shape;
  const char *attrs;  /* "n axis=-1": positional order after the tensors */
  unsigned flags;
  IrRowRule rows;     /* how memplan may cut it into chunks of rows */
  IrFlopsFn flops;    /* its forward FLOPs */
  const char *doc;
  IrAttrSpec attr[8];
  int nattr;
} IrOpInfo;

const IrOpInfo *ir_op_info(IrOp op);
bool ir_op_lookup(const char *name, IrOp *out);

/* --------------------------------------------------------------- values */

typedef enum IrValueKind {
  IR_VAL_INPUT,  /* a model input (tokens, targets) */
  IR_VAL_PARAM,  /* a trained parameter */
  IR_VAL_NODE,   /* an output of a node */
  IR_VAL_ARG,    /* a block argument of a region body */
} IrValueKind;

typedef enum IrInitKind { IR_INIT_NONE, IR_INIT_NORMAL, IR_INIT_ZEROS, IR_INIT_ONES } IrInitKind;
typedef struct IrInit {
  IrInitKind kind;
  IrExpr *mean, *std; /* IR_INIT_NORMAL */
} IrInit;

struct IrValue {
  int id;           /* unique in its graph; printed as %id unless named */
  const char *name; /* inputs, params (the full dotted name) and named values */
  IrValueKind kind;
  IrType type;
  IrShard shard;
  IrInit init;      /* IR_VAL_PARAM */
  IrNode *def;      /* IR_VAL_NODE: the producing node */
  int def_index;    /* which output of def */
  IrGraph *graph;   /* the graph that owns it */
  IrLoc loc;
  /* IR_VAL_PARAM, once `autodiff` has run: the value holding d loss / d
   * param (a backward node's result of the param's type), printed as a line
   * `grad @NAME = %N` after the nodes of the param's graph. */
  IrValue *grad;
  /* IR_VAL_PARAM padded by `vocab-pad`: dim pad_dim of the (global) type
   * holds `unpadded` real entries, the rest is padding that no output
   * depends on. Checkpoints and `shardc info` show the unpadded size.
   * unpadded 0: not padded. Printed ` unpadded(DIM, N)` after the spec. */
  int pad_dim;
  int64_t unpadded;
  /* IR_VAL_PARAM made by `pp-partition`: this stage's copy of the
   * parameter `tied`, which another virtual stage holds (the tied GPT-2
   * embedding, read by the first and the last stage). It is initialised
   * and checkpointed as `tied`, and the runtime sums the two gradients
   * once per step so that both copies stay identical. Printed
   * ` tied(@NAME)`. */
  IrValue *tied;
};

/* ---------------------------------------------------------------- nodes */

/* Which pass of a training step a node belongs to. The nodes of a graph
 * are all forward first, then all backward; the printer writes a line
 * `backward:` before the first backward node. */
typedef enum IrPhase { IR_PHASE_FORWARD = 0, IR_PHASE_BACKWARD = 1 } IrPhase;

typedef struct IrAttr {
  const char *name;
  IrExpr *expr; /* symbolic until `fold`; a literal after */
} IrAttr;

struct IrNode {
  IrOp op;
  IrValue **in;
  int nin;
  IrValue **out;
  int nout;
  IrAttr *attrs;
  int nattr;
  IrGraph *body;     /* IR_OP_REPEAT: the layer body */
  const char *label; /* IR_OP_REPEAT: the parameter prefix (`h`) */
  IrLoc loc;
  IrPhase phase;     /* forward unless `autodiff` wrote the node */
  /* The virtual stage that runs the node once `pp-partition` has run
   * (chunk c of pipeline stage r is virtual stage c*p + r), 0 before.
   * The printer writes a line `stage K:` where it changes. */
  int stage;
  /* Which layer (iteration of a top-level repeat, counted over all of
   * them in order) `unroll` copied the node from; -1 for the nodes outside
   * every repeat. A backward node has the layer of the forward node that
   * autodiff differentiated to write it. Not printed: pp-partition and
   * recompute run in the same pipeline. */
  int layer;
  /* A backward pp_boundary (the message of a gradient back to the stage
   * that sent the activation): the forward pp_boundary it is the adjoint
   * of, so that codegen pairs each activation with its gradient. NULL
   * elsewhere. Not printed. */
  IrNode *adjoint_of;
  /* A forward node's copy that `recompute` placed in the backward, to run
   * again there instead of keeping its results from the forward. The
   * memory plan fuses no loop across the edge of a run of such copies, so
   * that each copy computes exactly what its forward node did. Not
   * printed. */
  bool recomputed;
  /* A backward node that only the parameters' gradients need (autodiff
   * marks it): zero-bubble schedules run it in W, after the input
   * gradient's B. Not printed. */
  bool wgrad;
};

/* ---------------------------------------------------------------- graphs */

/* A repeat node's inputs are its carried values first (body args
 * 0..ncarried-1, yielded anew by each iteration), then invariant values the
 * body reads (args ncarried..); its outputs are the carried values after the
 * last iteration. Attributes: `count` (iterations) and `ncarried`. Body
 * parameters are named relative to the prefix: `attn.c_attn.weight` in a body
 * labelled `h` stands for h.0.attn.c_attn.weight, h.1.attn.c_attn.weight, ... */
struct IrGraph {
  const char *name;   /* model name (top level) */
  IrGraph *parent;    /* NULL at top level */
  IrNode *owner;      /* the repeat node that holds this body */
  IrVec configs;      /* IrConfig*, top level only */
  IrVec inputs;       /* IrValue* (IR_VAL_INPUT) */
  IrVec params;       /* IrValue* (IR_VAL_PARAM) */
  IrVec args;         /* IrValue* (IR_VAL_ARG), bodies only */
  IrVec nodes;        /* IrNode*, topological order */
  IrVec outputs;      /* IrValue*: top level named outputs, bodies the yields */
  IrVec output_names; /* const char*, top level only */
  int next_id;
  /* Top level: the ranks along each mesh axis (IrMeshAxis) the graph was
   * partitioned for, 0 or 1 when it was not. Once `tp-partition` has run
   * with t > 1, mesh[IR_AXIS_TENSOR] = t, every type is the shape ONE rank
   * holds, and a value's global shape is its type with the split dim
   * multiplied by t. Printed as `mesh tensor = 2` after the configs. */
  int mesh[IR_MESH_AXES];
  /* Top level, once `pp-partition` has run: the model chunks per pipeline
   * stage v (0 or 1: one), so that the nodes' stages run from 0 to
   * mesh[IR_AXIS_PIPELINE] * v - 1. Printed as `chunks = 2` after the mesh. */
  int vpp;
  /* Top level, once `pp-partition` has run: the V placement of zb-v
   * (abi/schedule.h rt_vstage) instead of Megatron-LM's. Not printed. */
  bool pp_vshape;
  struct PassMemPlan *memplan; /* top level, once the `memplan` pass has run (passes/memplan.h) */
  /* A pipeline chunk whose backward runs as two functions, B then W
   * (pass_split_backward): its B nodes come first, then its wgrad nodes. */
  bool wsplit;
};

IrGraph *ir_graph_new(const char *name);
IrGraph *ir_body_new(IrGraph *parent);
IrConfig *ir_add_config(IrGraph *g, const char *name, IrExpr *e, IrLoc loc);
IrConfig *ir_find_config(IrGraph *g, const char *name);
IrValue *ir_add_input(IrGraph *g, const char *name, IrType type, IrLoc loc);
IrValue *ir_add_param(IrGraph *g, const char *name, IrType type, IrInit init, IrLoc loc);
IrValue *ir_add_arg(IrGraph *body, IrType type, IrLoc loc);
IrValue *ir_find_param(IrGraph *g, const char *name);
/* Appends a node and creates its outputs with unknown types: the op's
 * output count from ops.def, or `nout` for multi-output ops (split), whose
 * shape rule then checks it against attribute n. Attributes are copied. */
IrNode *ir_add_node(IrGraph *g, IrOp op, IrValue **in, int nin, IrAttr *attrs, int nattr,
                    int nout, IrLoc loc);
/* A repeat node over `body` (whose args and outputs are already set). */
IrNode *ir_add_repeat(IrGraph *g, const char *label, IrExpr *count, IrValue **in, int nin,
                      int ncarried, IrGraph *body, IrLoc loc);
void ir_add_output(IrGraph *g, const char *name, IrValue *v);

/* For rewrites. The reads of a value are node inputs, outputs (yields in a
 * body) and param gradients, all in the graph that owns it: a body reads an
 * outer value only through its repeat node's inputs. */
/* How many times each value of g is read, indexed by id (g->next_id + 1
 * entries, in the arena); values of other graphs are not counted. */
int *ir_count_uses(const IrGraph *g);
/* Makes every read of old in g read new instead; returns how many. */
int ir_replace_uses(IrGraph *g, const IrValue *old, IrValue *new_value);
IrAttr *ir_node_attr(const IrNode *n, const char *name);
/* The default of an attribute spec as an expression ("1e-5" -> 1e-05). */
IrExpr *ir_attr_default(const IrAttrSpec *spec, IrLoc loc);
/* Attribute values once folded; die() if missing or not a literal. */
int64_t ir_attr_int(const IrNode *n, const char *name);
double ir_attr_float(const IrNode *n, const char *name);
/* moe_dispatch's rows per expert for capacity factor f over `copies`
 * (tokens * k) and E experts: ceil(f * copies / E), 0 (no limit) for f 0. */
int64_t ir_moe_capacity(double f, int64_t copies, int64_t E);
bool ir_attr_has(const IrNode *n, const char *name);
IrGraph *ir_top(IrGraph *g);
/* Number of times a graph runs per forward pass (product of enclosing
 * repeat counts); requires folded counts. */
int64_t ir_graph_multiplicity(const IrGraph *g);

/* ------------------------------------------------------------ shape rules */

/* Runs the shape rule of every node of g in order (recursing into repeat
 * bodies), reporting every mismatch. Values whose inputs failed stay
 * unknown and are skipped silently. Returns true when all types are known. */
bool ir_shape_graph(IrGraph *g);

/* ------------------------------------------------------------- text form */

void ir_print(FILE *out, const IrGraph *g);
/* Parses the printed form; errors are reported through ir_error with
 * locations in `file`. Returns NULL on error. */
IrGraph *ir_parse(const char *file, const char *text, size_t len);

/* ---------------------------------------------------------------- verify */

/* Checks the invariants every pass must keep: defs before uses, values
 * owned by the graph that uses them (or an ancestor only through region
 * inputs), arities from ops.def, repeat structure, unique names, and once
 * folded/inferred, literal dims and known types. Reports through ir_error
 * with the message prefixed by `who`. Returns true when valid. */
bool ir_verify(IrGraph *g, const char *who);

#endif
