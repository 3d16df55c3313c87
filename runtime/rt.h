/* What the runtime's files share: the state of one run. Nothing here is
 * seen by generated programs (they see model.h only). */
#ifndef SHARD_RT_H
#define SHARD_RT_H

#include <stdint.h>

#include "data.h"
#include "flags.h"
#include "model.h"
#include "rng.h"
#include "safetensors.h"

typedef struct Rt {
  const RtModel *model;
  RtFlags f;
  RtCtx ctx;
  unsigned char *mem;    /* the one allocation of the memory plan */
  real *adam_m, *adam_v; /* inside the optimizer region; NULL for sgd */
  int64_t micro;         /* microbatches per step */
  int64_t rows;          /* tokens per microbatch: batch * seq */
  RtData *train, *val;
  int32_t *window;       /* the step's global_batch * seq + 1 tokens */
  double *norm_partials; /* one per chunk of the gradient norm */
  int64_t norm_chunks;
  int64_t step;    /* optimizer steps completed */
  RtRng rng;       /* sampling's stream, carried by checkpoints */
  RtStFile resume; /* the state file while resuming */
} Rt;

/* batch.c: moving windows into the model and running it. */
/* Loads microbatch m of a window: inputs are its tokens from m*rows on,
 * targets the tokens one further. */
void rt_load_micro(Rt *rt, const int32_t *window, int64_t m);
/* The gradient of a whole step's window (all microbatches, d_loss =
 * 1/microbatches each) into the grads region; returns the mean loss. The
 * dropout seed depends on (seed, step, microbatch) only. */
double rt_window_grads(Rt *rt, const int32_t *window, int64_t step);
/* The mean loss of a window, forward only, with the same dropout seeds
 * (training = 1) as rt_window_grads or without dropout (training = 0). */
double rt_window_loss(Rt *rt, const int32_t *window, int64_t step, int training);
/* Mean loss over --eval-batches windows of --val-data, dropout off. */
double rt_eval(Rt *rt);
/* The step's window of training data (or seeded random tokens when there
 * is no --data, which only gradient checks do). */
void rt_fetch_window(Rt *rt, int64_t step);

/* init.c: the initial weights, a function of --seed and each name. */
void rt_init_params(const RtModel *m, real *weights, uint64_t seed);

#endif
