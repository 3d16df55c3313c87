/* Data parallelism: bucketed gradient reduction, ZeRO-1, the mesh's
 * gradient norm (see dp.h). */
#include "dp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "optim.h"
#include "tp.h"
#include "util.h"
#include "zero.h"
#include "ep.h"

/* The longest piece of a shard one thread updates or sums at a time. */
#define PIECE 32768

struct RtDp {
  int d, rank, zero, overlap;
  RtComm *comm; /* the data-parallel group */
  const RtBucket *b;
  int nb;
  int64_t bytes;          /* of all buckets */
  /* Bytes of the reductions started and not yet seen complete, and their
   * peak over the run: what libnbc's staging holds at most (dp.h). */
  int64_t inflight, inflight_peak;
  RtCommReq **req;        /* per bucket, while in flight */
  unsigned char *started; /* per bucket, this step */
  int *order;             /* buckets in the order they started */
  int norder, ntested;    /* started; completed, in that order, as far as poll knows */
  int last_chunk;         /* whose last backward of the step runs, or -1 */
  /* ZeRO-1: this replica's shard of every bucket, cut at parameter
   * boundaries (and every PIECE elements); ranges[i].decay is the
   * parameter's weight_decay, param[i] the parameter. */
  RtDevRange *ranges;
  int *param;
  int64_t nranges;
  /* Timers: this step's, and the sums over the run (the first step
   * apart, since it pays for setting MPI's connections up). */
  double first_start, backward_end, wait;
  int any_started;
  double posted_sum, wait_sum, posted_first, wait_first;
  int64_t steps;
};

/* Parameters by offset, to walk element ranges that cross them. */
static const RtModel *sort_model;
static int by_offset(const void *a, const void *b) {
  int64_t x = sort_model->params[*(const int *)a].offset,
          y = sort_model->params[*(const int *)b].offset;
  return (x > y) - (x < y);
}

static void add_range(RtDp *dp, int64_t *cap, int64_t w, int64_t s, int64_t n, int param,
                      int decay) {
  for (int64_t at = 0; at < n; at += PIECE) {
    if (dp->nranges == *cap) {
      *cap = *cap ? 2 * *cap : 64;
      dp->ranges = realloc(dp->ranges, (size_t)*cap * sizeof *dp->ranges);
      dp->param = realloc(dp->param, (size_t)*cap * sizeof *dp->param);
      if (!dp->ranges || !dp->param) rt_fatal(NULL, "out of memory (ZeRO-1 shard table)");
    }
    int64_t len = n - at < PIECE ? n - at : PIECE;
    dp->ranges[dp->nranges] = (RtDevRange){w + at, s + at, len, decay};
    dp->param[dp->nranges++] = param;
  }
}

/* This replica's shard, bucket by bucket, in the state layout of zero.h:
 * parameter by parameter where it crosses several; elements of no
 * parameter (padding) are left out, so they are never updated. */
static void build_shard(Rt *rt, RtDp *dp) {
  const RtModel *m = rt->model;
  int *idx = rt_xmalloc((size_t)(m->nparams > 0 ? m->nparams : 1) * sizeof *idx);
  for (int i = 0; i < m->nparams; i++) idx[i] = i;
  sort_model = m;
  qsort(idx, (size_t)m->nparams, sizeof *idx, by_offset);
  int64_t cap = 0, base = 0;
  int first = 0;
  for (int j = 0; j < dp->nb; j++) {
    int64_t b, e;
    rt_zero_part(&dp->b[j], dp->rank, dp->d, &b, &e);
    while (first < m->nparams &&
           m->params[idx[first]].offset + m->params[idx[first]].numel <= b)
      first++;
    for (int i = first; i < m->nparams && m->params[idx[i]].offset < e; i++) {
      const RtParam *p = &m->params[idx[i]];
      int64_t lo = p->offset > b ? p->offset : b;
      int64_t hi = p->offset + p->numel < e ? p->offset + p->numel : e;
      if (lo < hi) add_range(dp, &cap, lo, base + (lo - b), hi - lo, idx[i], p->weight_decay);
    }
    base += e - b;
  }
  free(idx);
  if (base != rt_zero_state_numel(m, dp->d))
    rt_fatal(m->name, "internal error: the ZeRO-1 shards hold %lld elements, zero.h says %lld",
             (long long)base, (long long)rt_zero_state_numel(m, dp->d));
}

static void hook_bucket_ready(RtCtx *ctx, int bucket);
static void hook_poll(RtCtx *ctx);

void rt_dp_init(Rt *rt) {
  const RtModel *m = rt->model;
  rt->dp = NULL;
  rt->ctx.runtime = rt;
  rt->ctx.bucket_ready = NULL;
  rt->ctx.poll = NULL;
  if (rt->mesh.dp <= 1) return;
  RtDp *dp = rt_xcalloc(1, sizeof *dp);
  dp->d = rt->mesh.dp;
  dp->rank = rt->coord.dp;
  dp->zero = m->zero != 0;
  dp->overlap = !rt->f.no_overlap;
  dp->comm = rt_tp_comms()->axis[RT_AXIS_DATA];
  dp->b = m->buckets;
  dp->nb = m->nbuckets;
  for (int j = 0; j < dp->nb; j++) dp->bytes += dp->b[j].numel * (int64_t)sizeof(real);
  dp->req = rt_xcalloc((size_t)dp->nb + 1, sizeof *dp->req);
  dp->started = rt_xcalloc((size_t)dp->nb + 1, 1);
  dp->order = rt_xcalloc((size_t)dp->nb + 1, sizeof *dp->order);
  dp->last_chunk = -1;
  if (dp->zero) build_shard(rt, dp);
  rt->dp = dp;
  rt->ctx.poll = hook_poll;
  if (dp->overlap) rt->ctx.bucket_ready = hook_bucket_ready;
}

void rt_dp_free(Rt *rt) {
  RtDp *dp = rt->dp;
  if (!dp) return;
  free(dp->req);
  free(dp->started);
  free(dp->order);
  free(dp->ranges);
  free(dp->param);
  free(dp);
  rt->dp = NULL;
}

int64_t rt_dp_staging_bytes(const Rt *rt) { return rt->dp ? rt->dp->bytes : 0; }

int64_t rt_dp_staging_peak_bytes(const Rt *rt) { return rt->dp ? rt->dp->inflight_peak : 0; }

void rt_dp_describe(const Rt *rt, char *buf, int len) {
  const RtDp *dp = rt->dp;
  char bytes[32];
  snprintf(buf, (size_t)len, "%d replicas, %d bucket%s (%s of gradients)%s, reductions %s", dp->d,
           dp->nb, dp->nb == 1 ? "" : "s", rt_fmt_bytes(bytes, sizeof bytes, dp->bytes),
           dp->zero ? ", ZeRO-1 (optimizer state sharded)" : "",
           dp->overlap ? "overlap the backward" : "after the backward (--no-overlap)");
}

/* ------------------------------------------------------------ a step */

void rt_dp_step_begin(Rt *rt) {
  RtDp *dp = rt->dp;
  memset(dp->started, 0, (size_t)dp->nb);
  dp->norder = dp->ntested = 0;
  dp->last_chunk = -1;
  dp->any_started = 0;
  dp->first_start = dp->backward_end = dp->wait = 0;
}

/* The group that sums bucket b, this rank's index in it and its size:
 * the data-parallel group, or for an expert bucket (--ep) the ranks that
 * hold the same experts. */
static RtComm *group_of(const RtDp *dp, const RtBucket *b, int *rank, int *n) {
  if (!b->expert) {
    *rank = dp->rank, *n = dp->d;
    return dp->comm;
  }
  *rank = dp->rank / b->expert, *n = dp->d / b->expert;
  return rt_ep_replicas();
}

/* In place. With ZeRO-1 this replica's part of the bucket receives the
 * sum and the rest of it keeps what the backward left there. */
static void start(RtDp *dp, Rt *rt, int j) {
  if (dp->started[j]) return;
  dp->started[j] = 1;
  dp->inflight += dp->b[j].numel * (int64_t)sizeof(real);
  if (dp->inflight > dp->inflight_peak) dp->inflight_peak = dp->inflight;
  if (!dp->any_started) dp->any_started = 1, dp->first_start = rt_now();
  const RtBucket *b = &dp->b[j];
  real *g = rt->ctx.grads + b->offset;
  int rank, n;
  RtComm *c = group_of(dp, b, &rank, &n);
  /* An expert bucket with d = E has one holder, whose sum is final. */
  if (n == 1) {
    dp->req[j] = NULL;
  } else if (dp->zero) {
    int64_t q = b->numel / n;
    dp->req[j] = rt_comm_ireduce_scatter(c, g, g + (int64_t)rank * q, q, RT_COMM_REAL, RT_COMM_SUM);
  } else {
    dp->req[j] = rt_comm_iallreduce(c, g, g, b->numel, RT_COMM_REAL, RT_COMM_SUM);
  }
  dp->order[dp->norder++] = j;
}

void rt_dp_backward_begin(Rt *rt, int chunk, int last) {
  rt->dp->last_chunk = last ? chunk : -1;
}

/* The generated backward calls this once the bucket's gradients of the
 * running microbatch are complete: final only in the last microbatch's
 * backward (earlier ones still add to them), and a tied parameter's only
 * after the embedding group's sum. */
static void hook_bucket_ready(RtCtx *ctx, int bucket) {
  Rt *rt = ctx->runtime;
  RtDp *dp = rt->dp;
  if (bucket < 0 || bucket >= dp->nb)
    rt_fatal(rt->model->name, "internal error: bucket_ready(%d) of %d buckets", bucket, dp->nb);
  if (dp->last_chunk < 0 || dp->b[bucket].chunk != dp->last_chunk || dp->b[bucket].tied) return;
  start(dp, rt, bucket);
}

void rt_dp_poll(Rt *rt) {
  RtDp *dp = rt->dp;
  /* MPI moves every operation in flight inside any of its calls: testing
   * the oldest is enough, and cheap. Buckets finish about in the order
   * they started. */
  while (dp->ntested < dp->norder) {
    int j = dp->order[dp->ntested];
    if (dp->req[j] && !rt_comm_test(dp->req[j])) return;
    if (dp->req[j]) dp->inflight -= dp->b[j].numel * (int64_t)sizeof(real);
    dp->req[j] = NULL;
    dp->ntested++;
  }
}

/* The context's poll hook of a stage of one chunk: its reductions alone.
 * A pipeline stage's executor puts its own in place (exec.c), which polls
 * these first. */
static void hook_poll(RtCtx *ctx) {
  Rt *rt = ctx->runtime;
  if (rt_dp_busy(rt)) rt_dp_poll(rt);
}

int rt_dp_busy(const Rt *rt) { return rt->dp && rt->dp->ntested < rt->dp->norder; }

void rt_dp_start_chunk(Rt *rt, int chunk) {
  RtDp *dp = rt->dp;
  if (!dp->overlap) return;
  for (int j = 0; j < dp->nb; j++)
    if ((chunk < 0 || dp->b[j].chunk == chunk) && !dp->b[j].tied) start(dp, rt, j);
}

void rt_dp_backward_done(Rt *rt) {
  RtDp *dp = rt->dp;
  dp->last_chunk = -1;
  dp->backward_end = rt_now();
  for (int j = 0; j < dp->nb; j++)
    if (!dp->b[j].tied) start(dp, rt, j);
}

void rt_dp_start_tied(Rt *rt) {
  RtDp *dp = rt->dp;
  for (int j = 0; j < dp->nb; j++)
    if (dp->b[j].tied) start(dp, rt, j);
}

void rt_dp_wait(Rt *rt) {
  RtDp *dp = rt->dp;
  double t0 = rt_now();
  for (int j = 0; j < dp->nb; j++) {
    if (!dp->started[j])
      rt_fatal(rt->model->name, "internal error: bucket %d was never reduced this step", j);
    if (dp->req[j]) {
      rt_comm_wait(dp->req[j]);
      dp->req[j] = NULL;
      dp->inflight -= dp->b[j].numel * (int64_t)sizeof(real);
    }
  }
  double t1 = rt_now();
  dp->wait = t1 - t0;
  /* Reductions posted before the backward ended ran behind it. */
  double posted = dp->first_start < dp->backward_end ? dp->backward_end - dp->first_start : 0;
  if (dp->steps == 0) dp->posted_first = posted, dp->wait_first = dp->wait;
  else dp->posted_sum += posted, dp->wait_sum += dp->wait;
  dp->steps++;
}

/* ------------------------------------------------------ gradient norm */

double rt_mesh_grad_norm(Rt *rt) {
  const RtModel *m = rt->model;
  const RtDp *dp = rt->dp;
  RtComms *cs = rt_tp_comms();
  /* A tied parameter's two copies hold the same summed gradient: the
   * first stage counts it, its original only where it holds both. */
  int count_tied = rt->coord.pp == 0;
  /* split over the tensor axis, replicated, and (--ep) this expert rank's
   * experts, which the other expert ranks of the group do not hold */
  double v[3] = {0, 0, 0};
  if (dp && dp->zero) {
    double *sq = rt_xmalloc((size_t)(dp->nranges > 0 ? dp->nranges : 1) * sizeof *sq);
    rt_dev_sum_squares(rt->ctx.grads, dp->ranges, dp->nranges, sq);
    /* In a fixed order, so that every run adds the same way. */
    for (int64_t i = 0; i < dp->nranges; i++) {
      const RtParam *p = &m->params[dp->param[i]];
      if ((p->tied && !count_tied) || p->tied == 2) continue;
      v[p->split ? 0 : 1] += sq[i];
    }
    free(sq);
    rt_comm_allreduce(dp->comm, v, v, 2, RT_COMM_F64, RT_COMM_SUM);
  } else {
    double *sq = rt_xmalloc((size_t)(m->nparams > 0 ? m->nparams : 1) * sizeof *sq);
    rt_param_sum_squares(m, rt->ctx.grads, sq);
    for (int p = 0; p < m->nparams; p++) {
      if ((m->params[p].tied && !count_tied) || m->params[p].tied == 2) continue;
      v[m->params[p].expert ? 2 : m->params[p].split ? 0 : 1] += sq[p];
    }
    free(sq);
  }
  if (rt_ep_comm()) rt_comm_allreduce(rt_ep_comm(), &v[2], &v[2], 1, RT_COMM_F64, RT_COMM_SUM);
  if (rt->mesh.tp > 1)
    rt_comm_allreduce(cs->axis[RT_AXIS_TENSOR], v, v, 1, RT_COMM_F64, RT_COMM_SUM);
  double total = v[0] + v[1] + v[2];
  if (rt->mesh.pp > 1)
    rt_comm_allreduce(cs->axis[RT_AXIS_PIPELINE], &total, &total, 1, RT_COMM_F64, RT_COMM_SUM);
  return sqrt(total);
}

/* -------------------------------------------------------------- ZeRO-1 */

/* Every replica's updated shard to every replica, bucket by bucket, in
 * place. */
static void all_gather_weights(Rt *rt) {
  RtDp *dp = rt->dp;
  for (int j = 0; j < dp->nb; j++) {
    int rank, n;
    RtComm *c = group_of(dp, &dp->b[j], &rank, &n);
    int64_t q = dp->b[j].numel / n;
    real *w = rt->ctx.weights + dp->b[j].offset;
    dp->req[j] = n > 1 ? rt_comm_iallgather(c, w + (int64_t)rank * q, w, q, RT_COMM_REAL) : NULL;
  }
  rt_comm_waitall(dp->req, dp->nb);
  /* The fp32 masters are gathered (not a bf16 copy), so every replica's
   * working copy is cast from the same fp32 weights. */
  for (int j = 0; j < dp->nb; j++)
    rt_dev_written(rt->ctx.weights + dp->b[j].offset, dp->b[j].numel * (int64_t)sizeof(real));
}

/* This replica's shard of the step (the state of zero.h) and then the
 * weights' all-gather. */
static void zero_update(Rt *rt, const RtDevOpt *o) {
  RtDp *dp = rt->dp;
  rt_dev_update_ranges(dp->ranges, dp->nranges, rt->ctx.weights, rt->ctx.grads, rt->adam_m,
                       rt->adam_v, o);
  all_gather_weights(rt);
}

void rt_dp_zero_adamw(Rt *rt, int64_t t, double lr, double grad_scale) {
  RtDevOpt o = rt_opt_consts(&rt->f, 1, t, lr, grad_scale);
  zero_update(rt, &o);
}

void rt_dp_zero_sgd(Rt *rt, double lr, double grad_scale) {
  RtDevOpt o = rt_opt_consts(&rt->f, 0, 0, lr, grad_scale);
  zero_update(rt, &o);
}

/* ------------------------------------------------------------- report */

void rt_dp_report(Rt *rt) {
  RtDp *dp = rt->dp;
  if (!dp || !rt->f.dp_stats || dp->steps == 0) return;
  /* The first step sets MPI's connections up: the mean leaves it out
   * when there are others. */
  int64_t n = dp->steps > 1 ? dp->steps - 1 : 1;
  double posted = dp->steps > 1 ? dp->posted_sum / (double)n : dp->posted_first;
  double wait = dp->steps > 1 ? dp->wait_sum / (double)n : dp->wait_first;
  double hidden = posted + wait > 0 ? posted / (posted + wait) : 0;
  char bytes[32], over[48];
  if (dp->steps > 1)
    snprintf(over, sizeof over, "mean of steps 2-%lld", (long long)dp->steps);
  else
    snprintf(over, sizeof over, "step 1");
  /* Printed whatever --quiet says, since it was asked for, and by every
   * rank, since each times its own. */
  printf("dp reduce: rank %d | %d bucket%s, %s | posted during backward %.3f ms, exposed wait "
         "%.3f ms, hidden fraction %.2f | %s%s\n",
         rt_tp_world_rank(), dp->nb, dp->nb == 1 ? "" : "s",
         rt_fmt_bytes(bytes, sizeof bytes, dp->bytes), 1e3 * posted, 1e3 * wait, hidden, over,
         dp->overlap ? "" : " | --no-overlap");
  fflush(stdout);
}
