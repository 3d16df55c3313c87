/* The routed layers' drops and load (moe_report.h). The kernels count
 * each dispatch of a training forward by (virtual stage, its order in
 * the stage's forward) (device.h: rt_dev_moe_count); here a step's
 * counts go into one table of every routed layer of the model, in the
 * order of the stages, summed over the world: the pipeline stages fill
 * their own rows, the data-parallel replicas add theirs, and the tensor
 * ranks, which route the same tokens, are divided out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "moe_report.h"
#include "tp.h"
#include "util.h"

enum { MAX_SLOTS = 256, MAX_VSTAGES = 1024, COLS = 2 + 256 };

static struct {
  int known, n;             /* the table's layout is known; its rows (0: no routed layers) */
  int first[MAX_VSTAGES];   /* the row of each virtual stage's first layer */
  int64_t steps;
  int32_t *experts;                                         /* [n] */
  int64_t *dropped, *copies, *total_dropped, *total_copies; /* [n] */
  double *load;                                             /* [n] */
} R;

static RtDevMoeStat slots[MAX_SLOTS];

static void world_sum(void *buf, int64_t n, RtCommType type, RtCommOp op) {
  RtComms *c = rt_tp_comms();
  if (c && rt_tp_world_size() > 1) rt_comm_allreduce(c->world, buf, buf, n, type, op);
}

/* Once, after the first step: how many routed layers each virtual stage
 * holds (the most any of its ranks counted), hence every layer's row. */
static void layout(int got) {
  static int32_t per[MAX_VSTAGES];
  for (int i = 0; i < got; i++)
    if (slots[i].vstage < MAX_VSTAGES && slots[i].layer + 1 > per[slots[i].vstage])
      per[slots[i].vstage] = slots[i].layer + 1;
  world_sum(per, MAX_VSTAGES, RT_COMM_I32, RT_COMM_MAX);
  for (int v = 0; v < MAX_VSTAGES; v++) R.first[v] = R.n, R.n += per[v];
  R.known = 1;
  if (!R.n) return;
  R.dropped = rt_xcalloc((size_t)R.n, sizeof *R.dropped);
  R.copies = rt_xcalloc((size_t)R.n, sizeof *R.copies);
  R.total_dropped = rt_xcalloc((size_t)R.n, sizeof *R.total_dropped);
  R.total_copies = rt_xcalloc((size_t)R.n, sizeof *R.total_copies);
  R.load = rt_xcalloc((size_t)R.n, sizeof *R.load);
  R.experts = rt_xcalloc((size_t)R.n, sizeof *R.experts);
  for (int i = 0; i < got; i++)
    if (slots[i].vstage < MAX_VSTAGES)
      R.experts[R.first[slots[i].vstage] + slots[i].layer] = (int32_t)slots[i].experts;
  world_sum(R.experts, R.n, RT_COMM_I32, RT_COMM_MAX);
}

void rt_moe_step(RtStepInfo *s) {
  int got = rt_dev_moe_take(slots, MAX_SLOTS);
  /* Whether any rank counted a dispatch decides, once, whether there is a
   * report at all: a dense model pays one flag's reduction per run. */
  if (!R.known && !rt_tp_world_any(got > 0)) R.known = 1;
  if (!R.known) layout(got);
  if (!R.n) return;
  /* Counts up to 2^53 are exact in doubles. */
  double *t = rt_xcalloc((size_t)R.n * COLS, sizeof *t);
  for (int i = 0; i < got; i++) {
    const RtDevMoeStat *st = &slots[i];
    int at = st->vstage < MAX_VSTAGES ? R.first[st->vstage] + st->layer : R.n;
    if (at >= R.n || (st->vstage + 1 < MAX_VSTAGES && at >= R.first[st->vstage + 1])) continue;
    double *row = t + (int64_t)at * COLS;
    row[0] = (double)st->copies, row[1] = (double)st->dropped;
    for (int64_t e = 0; e < st->experts && e < COLS - 2; e++) row[2 + e] = (double)st->demand[e];
  }
  world_sum(t, (int64_t)R.n * COLS, RT_COMM_F64, RT_COMM_SUM);
  double tp = rt_tp_size() > 0 ? rt_tp_size() : 1;
  for (int l = 0; l < R.n; l++) {
    const double *row = t + (int64_t)l * COLS;
    double most = 0;
    for (int e = 0; e < COLS - 2; e++)
      if (row[2 + e] > most) most = row[2 + e];
    R.copies[l] = (int64_t)(row[0] / tp + 0.5), R.dropped[l] = (int64_t)(row[1] / tp + 0.5);
    R.total_copies[l] += R.copies[l], R.total_dropped[l] += R.dropped[l];
    /* The busiest expert's copies over the mean of all the layer's experts. */
    R.load[l] = row[0] > 0 ? most / (row[0] / R.experts[l]) : 0;
  }
  free(t);
  R.steps++;
  s->moe_layers = R.n;
  s->moe_dropped = R.dropped;
  s->moe_copies = R.copies;
  s->moe_load = R.load;
}

void rt_moe_report(void) {
  if (!R.n || !R.steps) return;
  int64_t d = 0, c = 0;
  char per[2048];
  int at = 0;
  for (int l = 0; l < R.n; l++) {
    d += R.total_dropped[l], c += R.total_copies[l];
    if (at < (int)sizeof per)
      at += snprintf(per + at, sizeof per - (size_t)at, "%s%lld", l ? ", " : "",
                     (long long)R.total_dropped[l]);
  }
  rt_say("moe: %lld of %lld token-slots dropped over %lld step%s (%.2f%%); by layer: %s\n",
         (long long)d, (long long)c, (long long)R.steps, R.steps == 1 ? "" : "s",
         c ? 100.0 * (double)d / (double)c : 0.0, per);
}
