/* Microbatches into the model: a window's tokens into a chunk's inputs,
 * dropout seeds, the loss and its gradient seed, the mean over the mesh,
 * and the step's window staged in model memory. Below exec.c and
 * window.c, which both run microbatches through these. */

#include "batch.h"
#include "comm.h"
#include "device.h"
#include "mlm.h"
#include "rt.h"
#include "tp.h"
#include "util.h"

/* Microbatch g's part of a masked-LM input (mlm.h), made on the host from
 * the window's tokens and copied in. */
static void load_mlm(Rt *rt, const RtInput *in, void *dst, const int32_t *window, int64_t g) {
  RtMlmRule r = {rt->f.mlm_prob, rt->f.mlm_mask_id >= 0 ? rt->f.mlm_mask_id : rt->model->vocab - 1,
                 rt->f.mlm_pad_id, rt->model->vocab};
  if (!rt->mlm_buf) {
    /* An id the embedding cannot look up would read outside its table. */
    if (r.mask_id >= r.vocab)
      rt_fatal("--mlm-mask-id", "%lld is not below the model's vocabulary of %lld",
               (long long)r.mask_id, (long long)r.vocab);
    rt->mlm_buf = rt_xmalloc((size_t)rt->rows * sizeof(int32_t));
  }
  rt_mlm_fill(&r, rt->window_key, in->mlm, window, g * rt->rows, rt->rows, rt->mlm_buf);
  rt_dev_from_host(dst, rt->mlm_buf, rt->rows * (int64_t)sizeof(int32_t));
}

/* The step's staged window is already in model memory: its microbatches
 * are device copies, which need not wait for the step's work so far. */
void rt_load_inputs(Rt *rt, const RtChunk *c, const int32_t *window, int64_t g) {
  const int32_t *dev = rt->window_dev && window == rt->window ? rt->window_dev : NULL;
  const int32_t *base = (dev ? dev : window) + g * rt->rows;
  for (int i = 0; i < c->ninputs; i++) {
    const RtInput *in = &c->inputs[i];
    void *dst = rt_loc(&rt->ctx, c, in->offset_bytes);
    if (in->mlm) {
      load_mlm(rt, in, dst, window, g);
      continue;
    }
    int64_t bytes = rt->rows * (int64_t)sizeof *base;
    if (dev) rt_dev_copy(dst, base + (in->is_target ? 1 : 0), bytes);
    else rt_dev_from_host(dst, base + (in->is_target ? 1 : 0), bytes);
  }
}

void rt_load_micro(Rt *rt, const int32_t *window, int64_t m) {
  rt_load_inputs(rt, &rt->model->chunks[0], window, m);
}

uint64_t rt_dropout_seed(const Rt *rt, int64_t step, int64_t g) {
  return rt_key3((uint64_t)rt->f.seed, (uint64_t)step, (uint64_t)g);
}

double rt_chunk_loss(const RtCtx *ctx, const RtChunk *c) {
  real loss;
  rt_dev_to_host(&loss, rt_loc(ctx, c, c->loss_offset), sizeof loss);
  return (double)loss;
}

void rt_chunk_loss_add(const RtCtx *ctx, const RtChunk *c) {
  rt_dev_loss_add((const real *)rt_loc(ctx, c, c->loss_offset));
}

void rt_seed_dloss(Rt *rt, const RtChunk *c) {
  /* The seed 1/(m*d): the data-parallel sum of the replicas' gradients is
   * then the gradient of the whole window's mean loss. A fill, not a copy
   * from the host, which would wait for the device. */
  const real dloss = (real)(1.0 / (double)(rt->micro * rt->mesh.dp));
  rt_dev_fill((real *)rt_loc(&rt->ctx, c, c->dloss_offset), dloss, 1);
}

void rt_zero_grads(Rt *rt) {
  double t0 = rt_now();
  rt_dev_zero(rt->ctx.grads, rt->model->nweights * (int64_t)sizeof(real));
  rt_prof_add("S zero_grads", rt_now() - t0);
}

double rt_mesh_mean(Rt *rt, double sum, int64_t count) {
  if (rt->mesh.pp == 1 && rt->mesh.dp == 1) return sum / (double)count;
  /* Each data-parallel replica's loss stage holds its part of the sum
   * (every tensor-parallel rank of it the same value: one of them speaks
   * for the group); one reduction over the world hands the mean to all. */
  int holds = 0; /* the stage with the loss: the last, or the first under zb-v's V */
  for (int c = 0; c < rt->model->nchunks; c++) holds |= rt->model->chunks[c].has_loss;
  holds = holds && rt->coord.tp == 0;
  double part = holds ? sum / (double)count : 0;
  RtComms *cs = rt_tp_comms();
  if (cs) rt_comm_allreduce(cs->world, &part, &part, 1, RT_COMM_F64, RT_COMM_SUM);
  return part;
}

/* The window of `step` into host buffer w; -1 with the error in *e when
 * a data file changed since the start. */
static int read_window(Rt *rt, int64_t step, int32_t *w, RtErr *e) {
  int64_t n = rt->f.global_batch * rt->model->seq + 1;
  if (!rt->train) {
    uint64_t key = rt_key2((uint64_t)rt->f.seed, 0x746f6b656e73 /* "tokens" */);
    for (int64_t i = 0; i < n; i++)
      w[i] = (int32_t)(rt_hash_unit(key, (uint64_t)i) * (double)rt->model->vocab);
    return 0;
  }
  int64_t k = rt_data_window_at(rt->train, step, !rt->f.no_shuffle, (uint64_t)rt->f.seed);
  return rt_data_read_checked(rt->train, k, w, e);
}

static int stage_window(Rt *rt, int slot, int64_t step, RtErr *e) {
  rt->stage_step[slot] = -1;
  if (read_window(rt, step, rt_dev_stage_host(rt->stage, slot), e)) return -1;
  rt_dev_stage_put(rt->stage, slot);
  rt->stage_step[slot] = step;
  return 0;
}

void rt_fetch_window(Rt *rt, int64_t step) {
  if (!rt->stage) {
    int64_t n = rt->f.global_batch * rt->model->seq + 1;
    rt->stage = rt_dev_stage_new(n * (int64_t)sizeof(int32_t));
    rt->stage_step[0] = rt->stage_step[1] = -1;
    rt->window_buf = rt->window;
  }
  rt->window_key = rt_mlm_key((uint64_t)rt->f.seed, step, 0);
  int slot = rt->stage_step[0] == step ? 0 : rt->stage_step[1] == step ? 1 : -1;
  RtErr e;
  if (slot < 0 && stage_window(rt, slot = 0, step, &e)) rt_err_fatal(&e);
  rt->window = rt_dev_stage_host(rt->stage, slot);
  rt->window_dev = rt_dev_stage_get(rt->stage, slot);
  /* The next step's window is read ahead. A data file that changed since
   * the start fails here, a step before its window is needed: the error
   * waits until this step ends, so that the run saves first (main.c). */
  if (step + 1 < rt->f.steps && !rt->data_failed &&
      stage_window(rt, 1 - slot, step + 1, &rt->data_err))
    rt->data_failed = 1;
}

void rt_end_window(Rt *rt) {
  if (rt->window_buf) rt->window = rt->window_buf;
  rt->window_dev = NULL;
}
