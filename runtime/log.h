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
/* `step 12/300 | loss 2.3456 | lr 6.00e-04 | grad norm 1.234 | 45,678 tok/s | eta 1m23s` */
void rt_log_progress(RtLog *l, const RtStepInfo *s);
void rt_log_json(RtLog *l, const RtStepInfo *s);
/* "1m23s" */
const char *rt_fmt_duration(char *buf, int len, double seconds);

#endif
