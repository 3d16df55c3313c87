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

/* Everything a pass may read besides the graph. Later issues add the
 * cluster shape (tp, pp, dp, vpp, microbatches) here. */
typedef struct PassOptions {
  int placeholder_; /* keeps the struct non-empty until a pass needs options */
} PassOptions;

typedef struct Pass {
  const char *name;
  const char *doc;
  bool (*run)(IrGraph **g, const PassOptions *opt);
} Pass;

/* The registry, ending with a {NULL} entry. */
extern const Pass pass_registry[];
const Pass *pass_find(const char *name);
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
