/* Code generation: from a planned graph to the sources of its rank programs.
 *
 * cg_compile writes, into one directory, one source file per distinct rank
 * program (rank0.c, which every tensor-parallel rank runs), manifest.json
 * (the world size and, per rank, its program and tp/pp/dp coordinates), a
 * Makefile that builds every program against the runtime and kernel
 * libraries of the shardc build that wrote it, and model.txt (the model
 * file and the -D overrides it was compiled with, for sampling and resuming;
 * a copy of the model file sits next to it).
 *
 * It runs in two steps: the layout of the program set (layout.c: from the
 * chunks, memory plans and schedule the program passes made, the
 * data-parallel buckets and the weight placement), built and checked once,
 * then the printing of every file from it (emit.c). The emitter core writes what every target shares: the memory
 * plan, the model tables, the collectives (collectives.c), the forward and
 * backward functions node by node; a target (target.h; cpu.c, cuda/; the
 * table in targets.c) owns its facts, pipeline and memory policy and
 * writes only kernel calls, loops and includes. */
#ifndef SHARDC_CODEGEN_H
#define SHARDC_CODEGEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../ir/ir.h"

struct PassMemPolicy;
struct PassProgram;

/* The memory plans of a compiled model's programs, one per pipeline
 * stage (abi/model.h's RtPlan). */
typedef struct CgPlans {
  struct RtPlan *plan;
  int n;
} CgPlans;

typedef struct CgOptions {
  const char *target;      /* a name of the table of targets (targets.c); NULL: the first, cpu */
  const char *out_dir;     /* created when missing; existing files are replaced */
  IrDType dtype;           /* the program's real: IR_F32 (default) or IR_F64 (gradient checks) */
  const char *model_path;  /* the model file, as recorded in the program and in model.txt */
  const char *const *defines; /* the -D overrides, "name=value" each, in command-line order */
  int ndefines;
  int threads;             /* kernel scratch is planned for this many threads; 0: the target's */
  FILE *plan_out;          /* when not NULL, the memory plan's bytes per region are printed here */
  /* When not NULL, receives the memory plan of every program (pipeline
   * stage), in abi/model.h's form: what `shardc run` checks against the
   * machine. */
  struct CgPlans *plans_out;
  /* Data parallelism over the graph's mesh[IR_AXIS_DATA] replicas: ZeRO-1
   * (shard the optimizer state over them), the size of a gradient bucket
   * in MiB (0: 25). */
  bool zero;
  double bucket_mb;
  /* --precision bf16, for a target that has it (CG_PRECISION_BF16): the
   * step's activations in bf16 (the memory plan sizes them at 2 bytes),
   * weights, gradients and optimizer state in the program's real. */
  bool bf16;
  /* The options of the command line that belong to a target
   * (cg_target_option); the target reads its own and ignores the others'. */
  const struct CgTargetArg *target_args;
  int ntarget_args;
  /* Per rank program (pipeline stage): the activation bytes it keeps
   * without recomputation, printed under its own (--recompute); NULL:
   * not printed. */
  const int64_t *act_without;
} CgOptions;

/* An option of a target as the command line gave it: `--cuda-arch sm_80`
 * is {"--cuda-arch", "sm_80"}; a bare flag's value is NULL. */
typedef struct CgTargetArg {
  const char *name, *value;
} CgTargetArg;

/* The precisions a target's programs run the step in (CgTarget.precisions). */
enum { CG_PRECISION_FP32 = 1 << 0, CG_PRECISION_BF16 = 1 << 1 };

/* The pass pipeline a graph must go through before cg_compile for a
 * target (NULL: the first), with pipeline partitioning or without; NULL
 * for an unknown target. */
const char *cg_pipeline(const char *target, bool pipelined);
/* The target's memory policy, for the memplan pass (PassOptions.memplan);
 * NULL for an unknown target. */
const struct PassMemPolicy *cg_memplan_policy(const char *target);
/* Whether the target pads the vocabulary at t = 1 too (CgTarget.vocab_pad_always). */
bool cg_target_pads_vocab(const char *target);
/* Whether the table of targets has one of that name; reports an error
 * that lists the known ones otherwise. */
bool cg_target_known(const char *name);
/* The names of the targets, "cpu, ..." */
const char *cg_target_names(void);
/* Each target with its description and pipelines, two spaces in. */
void cg_print_targets(FILE *out);

/* What the driver asks of a target by its name (NULL: the first), each a
 * field of the target rather than a comparison of names: whether it runs
 * precision p (CG_PRECISION_*); the names of the targets that do, "cuda";
 * whether its programs keep the model in this machine's memory, so that
 * the launcher checks the plan against it; whether a command-line option
 * is one of some target's own (CgTarget.options). */
bool cg_target_precision(const char *target, unsigned p);
const char *cg_precision_targets(unsigned p);
/* The first target of the table that runs precision p; NULL when none does. */
const char *cg_precision_target(unsigned p);
bool cg_target_host_memory(const char *target);
bool cg_target_option(const char *name);
/* The i-th of all the targets' own options, in the table's order, for
 * the driver's option table and --help: its name, the name of its value
 * (NULL for a flag) and its help line, which names the target
 * ("--target cuda: ..."). False past the last one. */
bool cg_target_option_at(int i, const char **name, const char **value, const char **help);
/* The target's complaint about one of its options in o (a value it
 * cannot take), as a usage message; NULL when all are fine. */
const char *cg_target_args_error(const CgOptions *o);
/* The target `shardc run` takes without --target: the first of the table
 * that runs on a GPU where one is visible (and, unless it says it runs
 * jobs of many ranks by default, the job is one rank), else the first
 * that runs in host memory. */
const char *cg_run_target(bool gpu_visible, bool one_rank);
/* The first target whose programs run in host memory (the CPU's): for the
 * programs the driver itself builds and runs to measure this machine. */
const char *cg_host_target(void);

/* Lays out the rank programs of the program the target's pipeline made
 * (cg_pipeline: its chunks, memory plans for o's real type, threads and
 * precision, and schedule) and writes them into o->out_dir. Returns 0, or
 * 1 after reporting errors (an unknown target, a model the target cannot
 * run, a pass the pipeline left out, a file that cannot be written). */
int cg_compile(struct PassProgram *p, const CgOptions *o);
/* The activation bytes each of the nprograms rank programs keeps (its
 * memory plan's activations region), laid out as cg_compile would but
 * writing nothing; false after reporting errors. */
bool cg_kept_activations(struct PassProgram *p, const CgOptions *o, int64_t *bytes, int nprograms);

#endif
