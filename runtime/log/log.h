/* What a run reports: progress lines on stdout and, with --log-json, one
 * JSON object per step. */
#ifndef SHARD_RT_LOG_H
#define SHARD_RT_LOG_H

#include <stdint.h>
#include <stdio.h>

typedef struct RtStepInfo {
  int64_t step, steps; /* 1-based step and the total */
  double loss, lr, grad_norm;
  double tokens_per_s; /* of this step */
  double elapsed;      /* seconds the step took */
  int has_val;
  double val_loss;
  /* A model with routed layers (moe_report.h): per layer, the step's
   * token-slots, those dropped past capacity, and the load balance (the
   * busiest expert's copies over the mean). moe_layers 0: none. */
  int moe_layers;
  const int64_t *moe_copies, *moe_dropped;
  const double *moe_load;
} RtStepInfo;

typedef struct RtLog {
  FILE *json;
  int64_t tokens_per_step;
  double run_time; /* seconds spent in steps this run */
  int64_t run_steps;
  double since_time; /* since the last progress line */
  int64_t since_steps;
} RtLog;

/* Opens --log-json: truncated for a fresh run; when resuming from step
 * keep_upto, only the objects of steps up to it are kept (a crash after
 * the checkpoint may have logged steps that will now run again). */
void rt_log_open(RtLog *l, const char *path, int64_t keep_upto);
void rt_log_close(RtLog *l);
/* Counts a finished step's time (for tok/s and the time left). */
void rt_log_time(RtLog *l, double seconds);
/* `step 12/300 | loss 2.3456 | lr 6.00e-04 | grad norm 1.234 | 45,678 tok/s | eta 1m23s`,
 * and for a routed model a second line
 * `  moe: dropped 12 of 2048 token-slots (0: 5, 1: 7) | load max/mean 1.31 (0: 1.25, 1: 1.31)`.
 * The JSON object of a routed model adds "moe_dropped", "moe_slots" and
 * "moe_load", arrays by layer. */
void rt_log_progress(RtLog *l, const RtStepInfo *s);
void rt_log_json(RtLog *l, const RtStepInfo *s);
/* "1m23s" */
const char *rt_fmt_duration(char *buf, int len, double seconds);

/* The per-op timer of a rank program built with -DSHARD_PROFILE (make
 * EXTRA_CFLAGS=-DSHARD_PROFILE in its directory): the generated code times
 * every node (or fused loop) and reports it under a label "PHASE OP SHAPE";
 * the runtime adds its own parts of a step ("S zero_grads", "S grad_norm",
 * ...). Until rt_prof_enable, which only a profiling build calls, adding
 * is a no-op. rt_prof_report prints the table to stderr at the end of
 * training. The generated code declares the two it calls itself, since it
 * includes no runtime header. */
void rt_prof_enable(void);
void rt_prof_add(const char *what, double seconds);
void rt_prof_report(int64_t steps);

#endif
