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
 * backward functions node by node; a target (target.h; cpu.c; the table
 * in targets.c) owns its pass pipeline and memory policy and writes only
 * kernel calls, loops and includes. */
#ifndef SHARDC_CODEGEN_H
#define SHARDC_CODEGEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../ir/ir.h"

struct PassMemPolicy;
struct PassProgram;

typedef struct CgOptions {
  const char *target;      /* a name of the table of targets (targets.c); NULL: the first, cpu */
  const char *out_dir;     /* created when missing; existing files are replaced */
  IrDType dtype;           /* the program's real: IR_F32 (default) or IR_F64 (gradient checks) */
  const char *model_path;  /* the model file, as recorded in the program and in model.txt */
  const char *const *defines; /* the -D overrides, "name=value" each, in command-line order */
  int ndefines;
  int threads;             /* kernel scratch is planned for this many threads; 0: the target's */
  FILE *plan_out;          /* when not NULL, the memory plan's bytes per region are printed here */
  /* Data parallelism over the graph's mesh[IR_AXIS_DATA] replicas: ZeRO-1
   * (shard the optimizer state over them), the size of a gradient bucket
   * in MiB (0: 25). */
  bool zero;
  double bucket_mb;
  /* The CUDA target: the GPU architecture its programs are built for
   * (nvcc -arch; NULL: sm_90). */
  const char *cuda_arch;
  /* The CUDA target's --precision bf16: the step's activations in bf16
   * (the memory plan sizes them at 2 bytes), weights, gradients and
   * optimizer state in the program's real. */
  bool bf16;
  /* The CUDA target's --no-gemm-epilogue: a GELU, its gradient and a bias
   * gradient after a GEMM run as kernels of their own instead of in
   * cuBLASLt's epilogue. */
  bool no_gemm_epilogue;
  /* Per rank program (pipeline stage): the activation bytes it keeps
   * without recomputation, printed under its own (--recompute); NULL:
   * not printed. */
  const int64_t *act_without;
} CgOptions;

/* The pass pipeline a graph must go through before cg_compile for a
 * target (NULL: the first), with pipeline partitioning or without; NULL
 * for an unknown target. */
const char *cg_pipeline(const char *target, bool pipelined);
/* The target's memory policy, for the memplan pass (PassOptions.memplan);
 * NULL for an unknown target. */
const struct PassMemPolicy *cg_memplan_policy(const char *target);
/* Whether the table of targets has one of that name; reports an error
 * that lists the known ones otherwise. */
bool cg_target_known(const char *name);
/* The names of the targets, "cpu, ..." */
const char *cg_target_names(void);
/* Each target with its description and pipelines, two spaces in. */
void cg_print_targets(FILE *out);

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
