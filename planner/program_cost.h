/* The cost report of a compiled program (program_cost.c): every kernel
 * launch and library call of one training step, as the compiler listed
 * them in the program folder (kernels.json, codegen/listing.c), priced on
 * a hardware description: the matrix products by cuBLASLt's efficiency
 * curve, attention by the published curves of its kind of kernel, the
 * memory-bound kernels by the bytes their generated code moves, each at
 * least a launch; then the step time, tokens/s, MFU and the biggest sinks
 * against the ideal (every FLOP at peak, every byte at full bandwidth).
 * `shardc simulate --program DIR --hw NAME` prints it; docs/targets.md,
 * "The cost report", describes the model. */
#ifndef SHARDC_PLANNER_PROGRAM_COST_H
#define SHARDC_PLANNER_PROGRAM_COST_H

#include <stdbool.h>
#include <stdio.h>

#include "hw.h"

/* The report's classes of launches (codegen/listing.h CgKClass). */
enum { PL_KGEMM, PL_KATTENTION, PL_KELEMENTWISE, PL_KNORM, PL_KREDUCTION, PL_KCOPY,
       PL_KCOLLECTIVE, PL_KOPTIMIZER, PL_KHOST, PL_NKCLASS };
extern const char *const pl_kclass_names[PL_NKCLASS];

/* Identical launches of one program (same kernel, label, shape and
 * bytes), in the order of their first call. */
typedef struct PlLaunchCost {
  const char *program, *kernel, *function, *label, *shape;
  int cls;
  double flops, bytes_read, bytes_written; /* one call */
  double calls;       /* per step */
  double launches;    /* device kernels per call (a library call may run several) */
  bool sync;          /* the host waits for it */
  bool unlisted;      /* no hook of the code generators recorded it: priced from its node */
  double time;        /* seconds per call, as priced */
  double ideal;       /* seconds per call at the roofline: max(FLOPs / peak, bytes / bandwidth) */
  double model_time;  /* seconds per call its FLOPs take at peak */
  const char *bound;  /* what the price is: "compute", "memory", "launch", "latency", "link" */
} PlLaunchCost;

typedef struct PlProgramReport {
  const char *dir, *model, *target, *precision, *hw;
  int tp, pp, dp, ranks;
  int microbatches;
  double tokens_per_step;
  PlLaunchCost *l;
  int n;
  double launches, device_launches, syncs; /* per step, the busiest program */
  double step_time;   /* seconds: the busiest program's launches and host waits */
  double sync_time;   /* of it, the host waits */
  double ideal_time;  /* every launch at its roofline, no launch cost or wait */
  double model_flops; /* per step, every rank */
  double tokens_per_s, mfu;
  double class_time[PL_NKCLASS], class_ideal[PL_NKCLASS], class_calls[PL_NKCLASS];
  double peak, bandwidth; /* of the ideal: the bf16 peak and the memory bandwidth */
  bool graphs;        /* the chunk functions replay as CUDA graphs */
  int unlisted;       /* launches priced from their node */
  const char *note;   /* what the step time leaves out (a pipeline's bubble), or NULL */
} PlProgramReport;

/* Reads DIR/kernels.json and prices it on hw; global_batch > 0 sets the
 * sequences per step (the runtime's --global-batch), else the program's
 * default. False with the reason in *error (malloc'ed). */
bool pl_program_report(const char *dir, const PlHw *hw, int global_batch, PlProgramReport *out,
                       char **error);
void pl_program_report_free(PlProgramReport *r);
/* The table, the summary, the classes and the ten biggest sinks. */
void pl_program_report_print(FILE *f, const PlProgramReport *r);
/* One JSON object: the summary, the classes, the sinks and every launch. */
void pl_program_report_json(FILE *f, const PlProgramReport *r);
/* One line per launch group, with a header. */
void pl_program_report_csv(FILE *f, const PlProgramReport *r);

/* `shardc simulate --program DIR --hw NAME [--json] [--csv FILE]
 * [--global-batch N]`: the exit status. */
int pl_program_report_main(const char *dir, const char *hw_name, bool json, const char *csv,
                           int global_batch);

#endif
