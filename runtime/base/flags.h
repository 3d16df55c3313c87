/* The rank program's command line. */
#ifndef SHARD_RT_FLAGS_H
#define SHARD_RT_FLAGS_H

#include <stdint.h>

enum { RT_SCHED_COSINE, RT_SCHED_CONSTANT };
enum { RT_OPT_ADAMW, RT_OPT_SGD };
enum { RT_NAN_STOP, RT_NAN_SKIP };
enum { RT_GRAPHS_ON, RT_GRAPHS_OFF };

typedef struct RtFlags {
  const char *data, *val_data;
  int64_t steps;        /* -1 until resolved: one pass over --data */
  int64_t global_batch; /* 0 until resolved: the model's batch */
  double lr, beta1, beta2, eps, weight_decay, clip, lr_min;
  int64_t warmup;
  int64_t lr_schedule, optimizer; /* RT_SCHED_*, RT_OPT_* */
  int64_t seed;
  int64_t log_every;
  const char *log_json;
  int64_t eval_every, eval_batches;
  const char *save;
  int64_t save_every;
  int64_t keep_last; /* 0: one folder; K: numbered step folders, the K newest kept */
  const char *resume, *init_from, *init_map;
  int64_t no_shuffle;
  double mlm_prob;                /* masked-LM examples (mlm.h): chance a position is chosen */
  int64_t mlm_mask_id, mlm_pad_id; /* the [MASK] token (-1: vocab - 1), padding (-1: none) */
  const char *sample_prompt;
  int64_t sample_tokens;
  int64_t sample_ids; /* the prompt and the output are token ids, not bytes */
  double temperature;
  int64_t top_k;
  const char *dump_grads;
  int64_t quiet;
  int64_t comm_stats; /* print the bytes each rank sent, per mesh axis and step */
  int64_t no_overlap; /* data-parallel reductions only after the whole backward */
  int64_t dp_stats;   /* print the data-parallel reduction's timers at the end */
  int64_t on_nan;      /* RT_NAN_*: what a step with a non-finite loss or gradient norm does */
  int64_t max_skipped; /* --on-nan skip: dropped updates a run may have */
  int64_t no_verify;   /* load checkpoints without checking their checksums */
  double timeout;      /* seconds without progress before a job is declared hung */
  const char *trace;   /* --trace FILE: the actions' wall times, as a Chrome trace */
  int64_t trace_steps; /* how many steps --trace records */
  int64_t cuda_graphs;  /* RT_GRAPHS_*: the CUDA target's chunk functions as graphs (graphs.c) */
  int64_t deterministic; /* pin every library choice that can change the bits (rt_deterministic) */
  int64_t gradcheck;
  double gradcheck_tol, gradcheck_floor;
} RtFlags;

/* Parses argv into f (defaults first). --help prints the flags and exits 0;
 * every bad flag or value is reported, then the program exits 1. */
void rt_flags_parse(RtFlags *f, int argc, char **argv, const char *program);

/* Flags a checkpoint records and restores: those that decide what the next
 * steps compute. For each, name (without "--") and current value as text. */
int rt_flags_saved_count(void);
const char *rt_flags_saved_name(int i);
void rt_flags_saved_value(const RtFlags *f, int i, char *buf, int len);
/* Sets saved flag i from text unless it was given on the command line.
 * Returns 1 when it was given there (and kept), 0 when set from text. */
int rt_flags_restore(RtFlags *f, int i, const char *text, const char *origin);
/* The same returning -1 after the error (printed as `ORIGIN: message`)
 * instead of exiting. */
int rt_flags_restore_checked(RtFlags *f, int i, const char *text, const char *origin);

#endif
