/* What the runtime's files share: the state of one run. Nothing here is
 * seen by generated programs (they see model.h only). */
#ifndef SHARD_RT_H
#define SHARD_RT_H

#include <stdint.h>

#include "data.h"
#include "flags.h"
#include "log.h"
#include "../../abi/mesh.h"
#include "../../abi/model.h"
#include "rng.h"
#include "safetensors.h"

typedef struct RtDp RtDp;     /* dp.c */
typedef struct RtExec RtExec; /* exec.c */

typedef struct Rt {
  const RtModel *model;
  RtFlags f;
  RtCtx ctx;
  /* The one allocation of the memory plan: weights, grads and optimizer
   * state, and with one chunk (p = 1) its activations and temporaries
   * right after each other. A pipeline stage's activations (one slot per
   * microbatch in flight) and temporaries belong to the executor. */
  unsigned char *mem;
  /* AdamW's m and v inside the optimizer region, rt_zero_state_numel
   * reals each in the layout of zero.h (this rank's shard of every bucket
   * with ZeRO-1, else mirroring the weights); NULL for sgd. */
  real *adam_m, *adam_v;
  /* The mesh the program runs on and this rank's place in it: {1, 1, 1}
   * and all 0 for a program of one rank. */
  RtMesh mesh;
  RtCoord coord;
  int64_t micro;         /* microbatches per step on each data-parallel replica: m */
  int64_t rows;          /* tokens per microbatch: batch * seq */
  RtData *train, *val;
  int32_t *window;       /* the step's global_batch * seq + 1 tokens */
  /* During a step, window is the host buffer of a slot of `stage` (a new
   * struct RtDevStage of device.h, set up by the first rt_fetch_window) and
   * window_dev its copy in model memory, from which the inputs are loaded;
   * rt_end_window puts back `window_buf`, the buffer evaluation and
   * sampling fill themselves, and clears window_dev. */
  int32_t *window_buf;
  const int32_t *window_dev;
  struct RtDevStage *stage;
  int64_t stage_step[2]; /* the step whose window each slot holds; -1: none */
  /* The read of the next step's window failed (a data file changed): the
   * step under way still runs, and the run saves before it stops (main.c). */
  int data_failed;
  RtErr data_err;
  /* The key of the masked-LM examples made from `window` (mlm.h): the
   * step's, set by rt_fetch_window, or the validation window's; and the
   * host buffer they are made in. */
  uint64_t window_key;
  int32_t *mlm_buf;
  double *norm_partials; /* one per chunk of the gradient norm */
  int64_t norm_chunks;
  int64_t step;          /* optimizer steps completed */
  RtRng rng;             /* sampling's stream, carried by checkpoints */
  RtStFile resume;       /* the state file while resuming */
  double skipped;        /* seconds of this step spent on --dump-grads */
  int64_t nan_steps;     /* steps whose update --on-nan skip dropped */
  int preempted;         /* SIGTERM or SIGINT stopped training after rt->step */
  RtDp *dp;              /* data parallelism (dp.c); NULL when d = 1 */
  RtExec *exec;          /* the pipeline executor (exec.c); NULL when p = 1 */
  /* The run's identity in its checkpoints (CKPT_RUN_ID_KEY): random at a
   * fresh start, the checkpoint's on --resume. */
  char run_id[40];
  int lock_fd;           /* world rank 0: the lock held on --save DIR, -1 none */
} Rt;

#endif
