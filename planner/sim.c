/* The simulator: replays every stage's action table (the same tables the
 * runtime executes, from passes/schedule.c) with the cost model's times.
 *
 * Each stage walks its table in order with its own clock. F, B and W take
 * their chunk's time. A batch of SEND/RECV actions is posted at the
 * stage's clock and completes, as the runtime's rendezvous does, when every
 * message of it has been posted at both ends and has crossed the link; the
 * stage waits for that. REDUCE_GRADS starts a data-parallel reduction on
 * the stage's communication stream, which overlaps the compute after it
 * (the runtime waits for it at OPT_STEP); OPT_STEP waits for every
 * reduction and then runs the optimizer. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/schedule.h"
#include "planner.h"

/* Bytes the optimizer step streams per parameter it updates. The
 * compiler's runtime (fp32, the CPU target; bf16, the CUDA target) reads
 * the fp32 gradients for their norm (4), runs AdamW over the gradient,
 * the weight and both moments (read 16, write 12), and then reads the
 * weights and moments again to check they are finite (12, runtime/
 * main.c check_update); bf16 also writes the 16-bit working copy (2).
 * Megatron-LM's fp16 optimizer of 2021 (Float16OptimizerWithFloat16Params
 * .step) copies the 16-bit gradient buffer into fp32 gradients (read 2,
 * write 4), unscales them while checking for infinities (8), takes their
 * norm (4), runs Adam (28) and copies the fp32 weights to the 16-bit ones
 * (read 4, write 2): 52; the 2022 one reads its fp32 buffer in place, 46. */
static double opt_bytes_per_param(const PlConfig *c) {
  if (c->fp32) return 4 + 28 + 12;
  if (c->bf16) return 4 + 28 + 2 + 12;
  return c->megatron == 2022 ? 8 + 4 + 28 + 6 : 6 + 8 + 4 + 28 + 6;
}
/* Whether c is mixed precision as the paper's Megatron-LM of 2021 ran it
 * (PlConfig.megatron): a pass per microbatch that adds the 16-bit weight
 * gradients into the gradient buffer, the buffer besides the fp32
 * gradients, and the stages' outputs kept until their backward. */
static bool megatron_2021(const PlConfig *c) { return !c->fp32 && !c->bf16 && c->megatron != 2022; }
/* Bytes of that pass per parameter: the fresh 16-bit gradient read, the
 * buffer read and written (megatron/model/distributed.py, the hook
 * `param.main_grad.add_(param.grad.data)` after every backward). */
#define ACCUMULATION_BYTES 6.0
/* Bytes per gradient element the data-parallel reduction moves: 16-bit,
 * as Megatron-LM's fp16 training of the paper all-reduced its gradients
 * (docs/planner.md); the fp32 copy the memory counts is the optimizer's.
 * The CPU target and the CUDA target's bf16 reduce their fp32 gradients. */
static double grad_comm_bytes(const PlConfig *c) { return c->bf16 ? 4 : pl_elem_bytes(c); }

/* What one replay needs besides the tables. */
typedef struct Sim {
  const RtSchedule *s;
  int p, v, nv;
  double *f, *b;      /* per virtual stage: one microbatch's forward and backward */
  double *w;          /* per virtual stage: the part of b that W runs (zero-bubble) */
  double *reduce;     /* per virtual stage: its chunk's data-parallel reduction */
  int *buckets;       /* per virtual stage: its gradient buckets, as the programs cut them */
  PlDpOverlap overlap;
  double msg;         /* one pipeline message, alone on its link */
  /* Its parts: latency, the time on the wire and the receiver's gather of
   * the tensor ranks' slices (scatter/gather). Concurrent messages of one
   * batch leave (and arrive) through the same adapter of their GPU, in
   * each direction apart, so the wire is shared among them. */
  double msg_lat, msg_wire, msg_gather;
  double opt, tail;   /* the optimizer step; what follows it (ZeRO-1's all-gather, ties) */
  bool has_w;         /* the tables split backward into B and W */
} Sim;

/* Messages between an ordered pair of stages, in posting order: when each
 * end posted message k (negative: not yet). */
typedef struct Pair {
  double *sent, *recvd;
  int *send_k, *recv_k; /* per message: the sends of its sender's batch, the receives of its
                         * receiver's, which share the adapter with it */
  int nsent, nrecvd, cap;
} Pair;

static Pair *pair(Pair *pairs, int p, int from, int to, int cap) {
  Pair *q = &pairs[from * p + to];
  if (!q->cap) {
    q->cap = cap;
    q->sent = malloc(sizeof(double) * (size_t)cap);
    q->recvd = malloc(sizeof(double) * (size_t)cap);
    q->send_k = malloc(sizeof(int) * (size_t)cap);
    q->recv_k = malloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < cap; i++) q->sent[i] = q->recvd[i] = -1;
  }
  return q;
}

/* Posts the batch starting at action i of stage r at time `now`, giving
 * each message its index in its pair's order (idx). Returns the batch's end. */
static int post_batch(const RtSchedTable *t, int r, int i, double now, Pair *pairs, int p,
                      int cap, int *idx) {
  int end = i, sends = 0, recvs = 0;
  do {
    sends += t->actions[end].kind == RT_SCHED_SEND, recvs += t->actions[end].kind == RT_SCHED_RECV;
    end++;
  } while (end < t->n && (t->actions[end].flags & RT_SCHED_JOIN));
  for (int j = i; j < end; j++) {
    const RtSchedAction *a = &t->actions[j];
    bool send = a->kind == RT_SCHED_SEND;
    Pair *q = pair(pairs, p, send ? r : a->peer, send ? a->peer : r, cap);
    if (send) idx[j] = q->nsent, q->send_k[q->nsent] = sends, q->sent[q->nsent++] = now;
    else idx[j] = q->nrecvd, q->recv_k[q->nrecvd] = recvs, q->recvd[q->nrecvd++] = now;
  }
  return end;
}

/* The time of message k of pair q once both ends have posted it: the wire
 * shared by the messages leaving the sender's adapter or arriving at the
 * receiver's together, whichever are more, and one gather per message
 * arriving. */
static double message_span(const Sim *S, const Pair *q, int k) {
  int out = q->send_k[k], in = q->recv_k[k], share = out > in ? out : in;
  return S->msg_lat + S->msg_wire * share + S->msg_gather * in;
}

/* When the posted batch [i, end) of stage r completes, or -1 while a
 * message's other end has not been posted. */
static double batch_done(const Sim *S, const RtSchedTable *t, int r, int i, int end, Pair *pairs,
                         const int *idx) {
  double done = 0;
  for (int j = i; j < end; j++) {
    const RtSchedAction *a = &t->actions[j];
    bool send = a->kind == RT_SCHED_SEND;
    Pair *q = &pairs[(send ? r : a->peer) * S->p + (send ? a->peer : r)];
    double other = send ? q->recvd[idx[j]] : q->sent[idx[j]];
    double mine = send ? q->sent[idx[j]] : q->recvd[idx[j]];
    if (other < 0) return -1;
    double at = (other > mine ? other : mine) + message_span(S, q, idx[j]);
    if (at > done) done = at;
  }
  return done;
}

/* The time of a compute action of stage r. */
static double compute_time(const Sim *S, const RtSchedAction *a, int r) {
  int k = rt_sched_vstage(S->s, r, a->chunk);
  if (a->kind == RT_SCHED_F) return S->f[k];
  if (!S->has_w) return S->b[k];
  /* The weight-gradient GEMMs and sums in W, the input gradients in B,
   * each as the cost model prices their nodes. */
  return a->kind == RT_SCHED_W ? S->w[k] : S->b[k] - S->w[k];
}

/* The state of a replay and what it finds. start/end are NULL unless a
 * timeline is wanted: then [stage][action], when each action starts and
 * ends (a batch's messages from its posting to its completion; a
 * reduction on the stage's communication stream). */
typedef struct Replay {
  Pair *pairs;
  int cap;                     /* messages a pair can hold: the longest table */
  int *pc, *posted_end, *live; /* per stage: next action, end of a posted batch, stash now */
  int **idx;                   /* per action: a message's index in its pair's order */
  double *clock, *stream;      /* per stage: compute clock, communication stream */
  double *last_start;          /* per stage: when its latest F, B or W started */
  double *held;                /* per stage: reductions held back to the backward's end */
  double *finish, *pipe_end, *compute;
  int *stash;
  double **start, **end;
} Replay;

static void mark(Replay *R, int r, int i, double from, double to) {
  if (R->start) R->start[r][i] = from, R->end[r][i] = to;
}

/* The data-parallel reduction of virtual stage k's chunk, whose action
 * (i) stage r reaches at `now`, right after the chunk's last backward.
 * Bucket by bucket, as the backward completes the gradients of one
 * bucket after another, the first is ready a bucket's share into that
 * backward and the last when it ends, so the stream starts early and
 * ends no sooner than one bucket's reduction after it; per chunk it
 * starts now; with no overlap it waits for OPT_STEP. */
static void reduce_chunk(const Sim *S, Replay *R, int r, int i, int k, double now) {
  if (S->overlap == PL_DP_NONE) {
    R->held[r] += S->reduce[k];
    mark(R, r, i, now, now);
    return;
  }
  double ready = now, last = now;
  if (S->overlap == PL_DP_BUCKET) {
    double per = 1.0 / S->buckets[k];
    ready = R->last_start[r] + (now - R->last_start[r]) * per;
    last = now + S->reduce[k] * per;
  }
  double from = R->stream[r] > ready ? R->stream[r] : ready, end = from + S->reduce[k];
  R->stream[r] = end > last ? end : last;
  mark(R, r, i, from, R->stream[r]);
}

/* Runs stage r's next action (or batch); false while the batch waits for
 * a peer that has not posted its end. */
static bool step(const Sim *S, Replay *R, int r, bool *progress) {
  const RtSchedTable *t = &S->s->stages[r];
  int i = R->pc[r];
  const RtSchedAction *a = &t->actions[i];
  double now = R->clock[r];
  if (a->kind == RT_SCHED_SEND || a->kind == RT_SCHED_RECV) {
    if (!R->posted_end[r]) {
      R->posted_end[r] = post_batch(t, r, i, now, R->pairs, S->p, R->cap, R->idx[r]);
      *progress = true; /* the peers may go on now */
    }
    double done = batch_done(S, t, r, i, R->posted_end[r], R->pairs, R->idx[r]);
    if (done < 0) return false;
    R->clock[r] = done > now ? done : now;
    for (int j = i; j < R->posted_end[r]; j++) mark(R, r, j, now, R->clock[r]);
    R->pc[r] = R->posted_end[r], R->posted_end[r] = 0;
  } else if (a->kind == RT_SCHED_REDUCE_GRADS) {
    int k = rt_sched_vstage(S->s, r, a->chunk < 0 ? 0 : a->chunk);
    reduce_chunk(S, R, r, i, k, now);
    R->pc[r]++;
  } else if (a->kind == RT_SCHED_OPT_STEP) {
    /* Held reductions start now, when the backward is over, one after
     * the other on the stream. */
    double from = R->stream[r] > now ? R->stream[r] : now;
    R->stream[r] = from + R->held[r], R->held[r] = 0;
    from = R->stream[r] > now ? R->stream[r] : now;
    R->clock[r] = from + S->opt + S->tail;
    mark(R, r, i, from, R->clock[r]);
    R->pc[r]++;
  } else {
    double d = compute_time(S, a, r);
    R->last_start[r] = now;
    R->clock[r] += d, R->compute[r] += d, R->pipe_end[r] = R->clock[r];
    /* A microbatch-chunk is held until its W where the tables have W. */
    int frees = S->has_w ? RT_SCHED_W : RT_SCHED_B;
    R->live[r] += a->kind == RT_SCHED_F ? 1 : a->kind == frees ? -1 : 0;
    if (R->live[r] > R->stash[r]) R->stash[r] = R->live[r];
    mark(R, r, i, now, R->clock[r]);
    R->pc[r]++;
  }
  *progress = true;
  return true;
}

/* Replays the tables into R (finish, pipe_end, compute, stash and the
 * timeline must be allocated). False on a deadlock: a registered
 * schedule's tables, which the schedule tests verify, never have one. */
static bool replay(const Sim *S, Replay *R) {
  int p = S->p;
  for (int r = 0; r < p; r++) R->cap = S->s->stages[r].n > R->cap ? S->s->stages[r].n : R->cap;
  R->pairs = calloc((size_t)p * (size_t)p, sizeof(Pair));
  R->pc = calloc((size_t)p, sizeof(int)), R->posted_end = calloc((size_t)p, sizeof(int));
  R->live = calloc((size_t)p, sizeof(int));
  R->idx = calloc((size_t)p, sizeof(int *));
  R->clock = calloc((size_t)p, sizeof(double)), R->stream = calloc((size_t)p, sizeof(double));
  R->last_start = calloc((size_t)p, sizeof(double)), R->held = calloc((size_t)p, sizeof(double));
  for (int r = 0; r < p; r++) R->idx[r] = calloc((size_t)S->s->stages[r].n + 1, sizeof(int));
  bool progress = true;
  int left = p;
  while (left > 0 && progress) {
    progress = false;
    for (int r = 0; r < p; r++) {
      int n = S->s->stages[r].n;
      while (R->pc[r] < n && step(S, R, r, &progress))
        if (R->pc[r] == n) left--, R->finish[r] = R->clock[r];
    }
  }
  for (int i = 0; i < p * p; i++)
    free(R->pairs[i].sent), free(R->pairs[i].recvd), free(R->pairs[i].send_k),
        free(R->pairs[i].recv_k);
  for (int r = 0; r < p; r++) free(R->idx[r]);
  free(R->pairs), free(R->pc), free(R->posted_end), free(R->live), free(R->idx);
  free(R->clock), free(R->stream), free(R->last_start), free(R->held);
  return left == 0;
}

/* Layers per virtual stage: even where they divide, else the extra layers
 * go to the middle stages, which hold neither the embedding nor the head. */
static int *layout(int layers, int nv) {
  int *count = malloc(sizeof(int) * (size_t)nv);
  for (int k = 0; k < nv; k++) count[k] = layers / nv;
  int extra = layers % nv;
  for (int k = 1; k < nv - 1 && extra > 0; k++, extra--) count[k]++;
  for (int k = 0; extra > 0; k = (k + 1) % nv, extra--) count[k]++;
  return count;
}

/* A malloc'ed message, printf style. */
static char *fmt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_error(const char *fmt, ...) {
  char *e = malloc(256);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e, 256, fmt, ap);
  va_end(ap);
  return e;
}

const char *const pl_dp_overlap_names[] = {"bucket", "chunk", "none"};

bool pl_dp_overlap_parse(const char *name, PlDpOverlap *out) {
  *out = PL_DP_BUCKET;
  for (int k = 0; name && k <= PL_DP_NONE; k++)
    if (strcmp(name, pl_dp_overlap_names[k]) == 0) return *out = (PlDpOverlap)k, true;
  return !name;
}

/* The compiler's own words where it rejects (driver/compile.c); where the
 * training program would ignore a flag, why it would. */
char *pl_config_refusal(const PlConfig *c) {
  if (c->sequence_parallel && c->tp <= 1)
    return fmt_error("--sequence-parallel needs --tp > 1: it splits the sequence over the "
                     "tensor-parallel ranks, and there are none");
  if (c->no_scatter_gather && c->sequence_parallel)
    return fmt_error("--no-scatter-gather with --sequence-parallel: the pipeline messages are "
                     "sequence slices [b, s/t, h] already, so there is nothing to scatter");
  if (c->no_scatter_gather && c->tp <= 1)
    return fmt_error("--no-scatter-gather needs --tp > 1: without tensor parallelism every "
                     "pipeline message goes whole");
  if (c->no_scatter_gather && c->pp <= 1)
    return fmt_error("--no-scatter-gather needs --pp > 1: with one stage there are no pipeline "
                     "messages");
  if (c->zero && c->dp <= 1)
    return fmt_error("--zero 1 shards the optimizer over data-parallel replicas: it needs --dp > 1");
  if (c->megatron && (c->fp32 || c->bf16))
    return fmt_error("--megatron describes mixed precision's PyTorch runs: with --precision %s "
                     "the compiler's own programs are modelled", c->fp32 ? "fp32" : "bf16");
  if (c->tp_overlap && c->tp <= 1)
    return fmt_error("--tp-overlap needs --tp > 1: without tensor parallelism there is no "
                     "collective to overlap");
  if (c->bucket_mb > 0 && c->dp <= 1)
    return fmt_error("--bucket-mb needs --dp > 1: it sizes the buckets of the data-parallel "
                     "reduction, and with one replica nothing is reduced");
  if (c->ep > 1 && (c->dp > 1 ? c->dp : 1) % c->ep)
    return fmt_error("--ep %d must divide --dp %d: the expert ranks are taken out of the "
                     "data-parallel ones, each expert replicated over d/ep of them", c->ep,
                     c->dp > 1 ? c->dp : 1);
  if (c->moe_imbalance && c->ep <= 1)
    return fmt_error("--moe-imbalance needs --ep > 1: with every expert on every rank the "
                     "total of the experts' rows is priced, whatever their spread");
  if (c->vpp > 1 && c->pp <= 1)
    return fmt_error("--vpp %d needs pipeline stages (--pp > 1): chunks of one stage would run "
                     "one after the other", c->vpp);
  return NULL;
}

/* Checks the shape of the configuration; *error set when it fails. */
static bool check_config(const PlModel *m, const PlConfig *c, char **error) {
  if ((*error = pl_config_refusal(c))) return false;
  int bd = c->microbatch * c->dp;
  if (c->global_batch % bd != 0) {
    *error = fmt_error("--global-batch %d is not a multiple of microbatch %d x dp %d",
                       c->global_batch, c->microbatch, c->dp);
    return false;
  }
  if (c->ep > 1 && !m->moe.experts) {
    *error = fmt_error("--ep %d places experts, and the model has no routed layer "
                       "(moe_dispatch)", c->ep);
    return false;
  }
  if (c->ep > 1 && m->moe.experts % c->ep) {
    *error = fmt_error("--ep %d must divide the %d experts of each routed layer", c->ep,
                       m->moe.experts);
    return false;
  }
  if (m->layers < c->pp * c->vpp) {
    *error = fmt_error("the model has %d layers, fewer than the p x v = %d x %d virtual stages",
                       m->layers, c->pp, c->vpp);
    return false;
  }
  return true;
}

/* What recomputation adds to one layer's backward: its forward again
 * (full), or the attention core's (selective); as seconds or FLOPs. */
static double recomputed(const PlModel *m, PlRecompute r, bool flops) {
  if (r == PL_RECOMPUTE_FULL) return flops ? m->layer.fwd_flops : m->layer.fwd;
  if (r == PL_RECOMPUTE_SELECTIVE) return flops ? m->layer.attn_flops : m->layer.attn_fwd;
  return 0;
}

/* Per virtual stage: its layers, one microbatch's F and B, its parameters. */
static void chunk_costs(const PlModel *m, const PlConfig *c, int nv, const int *count, Sim *S,
                        int64_t *params, int64_t *eparams) {
  /* The overlap of B with W needs both in one action. */
  bool hide = c->tp_overlap && !S->has_w;
  double bwd = m->layer.bwd - (hide ? m->layer.bwd_hidden : 0) + recomputed(m, c->recompute, false);
  for (int k = 0; k < nv; k++) {
    S->f[k] = count[k] * m->layer.fwd, S->b[k] = count[k] * bwd;
    S->w[k] = count[k] * m->layer.bwd_w;
    if (k == 0) S->w[k] += m->pre.bwd_w;
    if (k == nv - 1) S->w[k] += m->post.bwd_w;
    params[k] = count[k] * m->layer.params;
    /* With every expert on every rank, one group (d) reduces them all. */
    eparams[k] = pl_ep(c) == 1 ? 0
                 : count[k] * m->layer.expert_params + (k == 0 ? m->pre.expert_params : 0) +
                       (k == nv - 1 ? m->post.expert_params : 0);
    if (k == 0)
      S->f[k] += m->pre.fwd, S->b[k] += m->pre.bwd - (hide ? m->pre.bwd_hidden : 0),
      params[k] += m->pre.params;
    if (k == nv - 1)
      S->f[k] += m->post.fwd, S->b[k] += m->post.bwd - (hide ? m->post.bwd_hidden : 0),
      params[k] += m->post.params;
  }
  /* One virtual stage holds a tied parameter once. */
  if (nv == 1) params[0] -= m->tied;
}

/* Memory of stage r per rank (REFERENCE.md): bf16 weights (2 bytes per
 * parameter), fp32 gradients (4), fp32 master weights and Adam moments
 * (12, or 12/d with ZeRO-1), and the activations of the schedule's peak
 * stash of microbatch-chunks; with full recomputation in groups of N
 * layers, the input of every N-th layer of the chunk per stashed
 * microbatch, and one group's N layers whose forward the backward is
 * rerunning; then what a GPU holds besides (docs/planner.md, Memory). */
void pl_stage_memory(const PlModel *m, const PlConfig *c, const PlHw *hw, PlStage *st) {
  double P = (double)st->params, elem = pl_elem_bytes(c);
  /* fp32 everything (the CPU target's memory plan): 4-byte weights, no
   * master copy, the two moments; activations twice the 16-bit figure. */
  st->weights = (c->fp32 ? 4 : 2) * P;
  st->grads = 4 * P;
  /* ZeRO-1 shards each reduction group's state over that group: the
   * experts' over their d/ep copies, the rest over d. */
  double Pe = (double)st->expert_params;
  st->optimizer = (c->fp32 ? 8 : 12) * ((P - Pe) / (c->zero && c->dp > 1 ? c->dp : 1) +
                                        Pe / (c->zero ? pl_edp(c) : 1));
  double kept = st->chunk_layers, live = 1;
  if (c->recompute == PL_RECOMPUTE_FULL && c->recompute_layers > 1) {
    live = c->recompute_layers < st->chunk_layers ? c->recompute_layers : st->chunk_layers;
    kept = (double)((st->chunk_layers + c->recompute_layers - 1) / c->recompute_layers);
  }
  /* The CUDA target's attention is fused (FlashAttention-2, kernels/cuda):
   * in bf16 no layer keeps the s x s scores the formula's 5as/h counts,
   * as selective recomputation drops them. */
  PlRecompute fused = c->bf16 ? PL_RECOMPUTE_SELECTIVE : PL_RECOMPUTE_NONE;
  PlRecompute held = c->recompute == PL_RECOMPUTE_NONE ? fused : c->recompute;
  st->activations = pl_layer_activation_bytes(m, c->tp, c->sequence_parallel, held) * kept *
                    st->peak_stash;
  if (c->recompute == PL_RECOMPUTE_FULL)
    st->activations += live * pl_layer_activation_bytes(m, c->tp, c->sequence_parallel, fused);
  if (c->fp32) st->activations *= 2;
  /* The compiled program keeps one slot of its plan's region (one
   * microbatch of every chunk) per v microbatch-chunks in flight. */
  if (c->plan_activations)
    st->activations = (double)c->plan_activations[st->stage] * st->peak_stash /
                      (c->vpp > 1 ? c->vpp : 1);
  /* One communicator's buffers for each group the rank talks in: its
   * tensor and data groups, its pipeline neighbours, and the embedding
   * group that sums a tied parameter between the first and last stage. */
  int groups = (c->tp > 1) + (c->dp > 1) + (c->pp > 1) +
               (c->pp > 1 && m->tied && (st->holds_pre || st->holds_post)) +
               (pl_ep(c) > 1) + (pl_ep(c) > 1 && pl_edp(c) > 1); /* the expert groups */
  st->workspace = hw->workspace_bytes;
  st->comm_buffers = groups * hw->comm_buffer_bytes;
  /* In flight on a stage: the activation it receives and the gradient it
   * receives, whole once gathered, and the two it sends, as sent. */
  double whole = elem * (double)m->b * (double)m->s * (double)m->h;
  st->messages = c->pp > 1 ? 2 * whole + 2 * elem * (double)m->msg_elems : 0;
  int64_t temp = m->layer.temp;
  if (st->holds_pre && m->pre.temp > temp) temp = m->pre.temp;
  if (st->holds_post && m->post.temp > temp) temp = m->post.temp;
  st->temporaries = elem * (double)temp;
  /* The paper's attention is not fused: its backward holds the gradients
   * of the probabilities and of the scores, [b, a/t, s, s] each, at once. */
  double t = c->tp > 1 ? c->tp : 1;
  double scores = 2 * (double)m->b * ((double)m->heads / t) * (double)m->s * (double)m->s;
  if (!c->fp32 && !c->bf16 && elem * scores > st->temporaries) st->temporaries = elem * scores;
  /* Megatron-LM of 2021 (megatron_2021): the 16-bit buffer the
   * microbatches' weight gradients are added into, beside the fp32
   * gradients its optimizer made at the previous step and nothing freed
   * (train_step zeroes the buffer only, with the local DDP); and the
   * output of each microbatch-chunk a stage sent, which 1F1B keeps in
   * output_tensors until its backward (freed once sent from 2022,
   * deallocate_output_tensor). A stage sends from every chunk but the
   * last virtual stage's. */
  st->grad_buffer = st->outputs = 0;
  if (megatron_2021(c)) {
    st->grad_buffer = 2 * P;
    bool sends = c->pp > 1 && (c->vpp > 1 || !st->holds_post);
    if (sends) st->outputs = elem * (double)m->msg_elems * st->peak_stash;
  }
  double allocated = st->weights + st->grads + st->grad_buffer + st->optimizer +
                     st->activations + st->outputs + st->messages + st->temporaries;
  /* The caching allocator of the paper's PyTorch runs reserves more than
   * it hands out; the compiler's programs (bf16, fp32) allocate once. */
  double f = c->fp32 || c->bf16 ? 0 : hw->fragmentation;
  st->fragmentation = allocated * f / (1 - f);
  st->total = allocated + st->fragmentation + st->workspace + st->comm_buffers;
}

/* The one-off costs of a step: the optimizer over the state this rank
 * updates, and what follows it (ZeRO-1 gathers the updated weights; the
 * tied embedding's gradient is summed between the first and last stage). */
static void step_costs(const PlModel *m, const PlConfig *c, const PlHw *hw, int64_t max_params,
                       int64_t max_eparams, Sim *S) {
  int zd = c->zero && c->dp > 1 ? c->dp : 1, zde = c->zero ? pl_edp(c) : 1;
  double dense = (double)(max_params - max_eparams), experts = (double)max_eparams;
  S->opt = pl_update_s(hw, (dense / zd + experts / zde) * opt_bytes_per_param(c));
  S->tail = 0;
  /* The updated weights: 16-bit in the paper's mixed precision, the fp32
   * masters (then cast on every rank) in the CUDA target's bf16; each
   * group gathers its own. */
  double wbytes = c->bf16 ? 4 : pl_elem_bytes(c);
  if (zd > 1) S->tail += pl_all_gather_s(pl_dp_link(hw, c), c->dp, wbytes * dense);
  if (zde > 1 && experts > 0) S->tail += pl_all_gather_s(pl_edp_link(hw, c), zde, wbytes * experts);
  if (c->pp * c->vpp > 1 && m->tied)
    S->tail += pl_all_reduce_s(pl_pp_link(hw, c), 2, grad_comm_bytes(c) * (double)m->tied);
}

/* One pipeline message: with t > 1 and no sequence parallelism each
 * tensor rank sends its 1/t of the activation and the receiver gathers
 * the rest inside its node (Megatron's scatter/gather), unless
 * --no-scatter-gather sends it whole from every tensor rank. Fills the
 * parts of S the replay shares among concurrent messages. */
static void message_time(const PlModel *m, const PlConfig *c, const PlHw *hw, Sim *S) {
  double bytes = pl_elem_bytes(c) * (double)m->msg_elems;
  PlLink l = pl_pp_link(hw, c);
  bool sliced = c->tp > 1 && !c->sequence_parallel && !c->no_scatter_gather;
  S->msg_lat = l.lat;
  S->msg_wire = (sliced ? bytes / c->tp : bytes) / l.bw;
  S->msg_gather = sliced ? pl_all_gather_s(pl_tp_link(hw, c), c->tp, bytes) : 0;
  S->msg = S->msg_lat + S->msg_wire + S->msg_gather;
}

/* Fills the per-stage figures and the totals after the replay. */
static void summarise(const PlModel *m, const PlConfig *c, const PlHw *hw, const Sim *S,
                      const int *count, const int64_t *params, const int64_t *eparams,
                      const int *stash,
                      const double *pipe_end, PlResult *out) {
  int p = S->p;
  double ideal = 0, end = 0;
  for (int r = 0; r < p; r++) {
    PlStage *st = &out->stages[r];
    int most = 0;
    for (int ch = 0; ch < S->v; ch++) {
      int k = rt_sched_vstage(S->s, r, ch);
      st->layers += count[k], st->params += params[k], st->expert_params += eparams[k];
      most = count[k] > most ? count[k] : most;
    }
    st->peak_stash = stash[r];
    st->chunk_layers = most;
    st->stage = r;
    for (int ch = 0; ch < S->v; ch++) {
      int k = rt_sched_vstage(S->s, r, ch);
      st->holds_pre |= k == 0, st->holds_post |= k == S->nv - 1;
    }
    pl_stage_memory(m, c, hw, st);
    if (st->compute > ideal) ideal = st->compute;
    if (pipe_end[r] > end) end = pipe_end[r];
    if (st->finish > out->step_time) out->step_time = st->finish;
    if (st->total > out->memory_max) out->memory_max = st->total;
  }
  out->memory_over = out->memory_max > hw->mem_bytes ? out->memory_max - hw->mem_bytes : 0;
  double gpus = (double)c->tp * c->pp * c->dp;
  out->bubble_fraction = ideal > 0 ? (end - ideal) / ideal : 0;
  double mbs = (double)c->global_batch / c->microbatch, t = c->tp > 1 ? c->tp : 1;
  out->model_flops = 3.0 * m->flops_per_mb * mbs;
  out->counted_flops = out->model_flops + m->layers * recomputed(m, c->recompute, true) * t * mbs;
  double per_gpu = out->step_time > 0 ? 1 / (out->step_time * gpus) : 0;
  out->tflops_per_gpu = out->counted_flops * per_gpu / 1e12;
  out->mfu = out->model_flops * per_gpu / hw->peak_flops[PL_BF16];
  int busiest = 0;
  for (int k = 1; k < S->nv; k++)
    if (S->f[k] + S->b[k] > S->f[busiest] + S->b[busiest]) busiest = k;
  out->f_chunk = S->f[busiest], out->b_chunk = S->b[busiest];
  out->w_chunk = S->has_w ? S->w[busiest] : 0;
  out->p2p_s = S->msg, out->dp_s = S->reduce[busiest], out->opt_s = S->opt;
}

/* The tables of c's schedule; NULL with *error set. They are not run
 * through the verifier here: the schedule tests verify every registered
 * schedule over many (p, v, m), the verifier would double the cost of a
 * search, and a table that deadlocked would stall the replay, which says
 * so. */
static RtSchedule *build_tables(const PlConfig *c, char **error) {
  const char *name = c->schedule ? c->schedule : sched_default_name(c->vpp);
  const SchedDef *def = sched_find(name);
  if (!def) {
    *error = fmt_error("no schedule '%s' (schedules: %s)", name, sched_names());
    return NULL;
  }
  SchedOptions so = {.pp = c->pp, .vpp = c->vpp, .dp = c->dp, .buckets_per_chunk = 1,
                     .microbatches = c->global_batch / (c->microbatch * c->dp)};
  return sched_build_unverified(def, &so, error);
}

/* One group's gradient reduction: a reduce-scatter under ZeRO-1, else an
 * all-reduce; none where the group has no gradients. */
static double grad_reduction_s(const PlConfig *c, PlLink l, int n, double bytes) {
  if (bytes <= 0) return 0;
  return c->zero ? pl_reduce_scatter_s(l, n, bytes) : pl_all_reduce_s(l, n, bytes);
}

/* Every duration the replay needs: per virtual stage its F, B and
 * reduction, the message, the optimizer and what follows it. */
static void prepare(const PlModel *m, const PlConfig *c, const PlHw *hw, Sim *S,
                    const int *count, int64_t *params, int64_t *eparams) {
  int p = S->p, nv = S->nv;
  S->has_w = sched_has_w(S->s);
  chunk_costs(m, c, nv, count, S, params, eparams);
  /* The paper's Megatron-LM adds each microbatch's weight gradients into
   * its gradient buffer after that microbatch's backward (W where the
   * tables split it off). */
  for (int k = 0; k < nv && megatron_2021(c); k++) {
    double pass = pl_memory_s(hw, ACCUMULATION_BYTES * (double)params[k]);
    S->b[k] += pass, S->w[k] += pass;
  }
  /* The programs cut each chunk's fp32 gradients into buckets of
   * --bucket-mb MiB (codegen/layout.c). */
  double bucket = (c->bucket_mb > 0 ? c->bucket_mb : 25) * 1048576.0;
  for (int k = 0; k < nv; k++) {
    double n = ceil(4 * (double)params[k] / bucket);
    S->buckets[k] = n < 1 ? 1 : n > 1e9 ? 1000000000 : (int)n;
    /* The experts' gradients are summed over their d/ep copies, the
     * rest over d, one after the other on the stream. */
    double unit = grad_comm_bytes(c), dense = unit * (double)(params[k] - eparams[k]);
    double experts = unit * (double)eparams[k];
    S->reduce[k] = grad_reduction_s(c, pl_dp_link(hw, c), c->dp, dense) +
                   grad_reduction_s(c, pl_edp_link(hw, c), pl_edp(c), experts);
  }
  int64_t max_params = 0, max_eparams = 0;
  for (int r = 0; r < p; r++) {
    int64_t sum = 0, esum = 0;
    for (int ch = 0; ch < c->vpp; ch++)
      sum += params[rt_sched_vstage(S->s, r, ch)], esum += eparams[rt_sched_vstage(S->s, r, ch)];
    if (sum > max_params) max_params = sum, max_eparams = esum;
  }
  message_time(m, c, hw, S);
  step_costs(m, c, hw, max_params, max_eparams, S);
}

/* pl_simulate, and with `timeline` the tables and when each action ran. */
static bool simulate(const PlModel *m, const PlConfig *c, const PlHw *node, bool timeline,
                     PlResult *out, char **error) {
  *out = (PlResult){0};
  PlHw share = pl_hw_rank_share(node, pl_ranks(c));
  const PlHw *hw = &share;
  *error = NULL;
  if (!check_config(m, c, error)) return false;
  RtSchedule *s = build_tables(c, error);
  if (!s) return false;
  int p = c->pp, nv = c->pp * c->vpp;
  Sim S = {.s = s, .p = p, .v = c->vpp, .nv = nv, .overlap = c->dp_overlap};
  S.f = calloc((size_t)nv, sizeof(double)), S.b = calloc((size_t)nv, sizeof(double));
  S.w = calloc((size_t)nv, sizeof(double));
  S.reduce = calloc((size_t)nv, sizeof(double));
  int64_t *params = calloc((size_t)nv, sizeof(int64_t));
  int64_t *eparams = calloc((size_t)nv, sizeof(int64_t));
  int *count = layout(m->layers, nv);
  S.buckets = calloc((size_t)nv, sizeof(int));
  prepare(m, c, hw, &S, count, params, eparams);
  out->nstages = p, out->microbatches = s->microbatches;
  out->stages = calloc((size_t)p, sizeof(PlStage));
  Replay R = {.finish = calloc((size_t)p, sizeof(double)),
              .pipe_end = calloc((size_t)p, sizeof(double)),
              .compute = calloc((size_t)p, sizeof(double)), .stash = calloc((size_t)p, sizeof(int))};
  if (timeline) {
    R.start = calloc((size_t)p, sizeof(double *)), R.end = calloc((size_t)p, sizeof(double *));
    for (int r = 0; r < p; r++)
      R.start[r] = calloc((size_t)s->stages[r].n + 1, sizeof(double)),
      R.end[r] = calloc((size_t)s->stages[r].n + 1, sizeof(double));
  }
  bool ok = replay(&S, &R);
  for (int r = 0; r < p; r++) out->stages[r].finish = R.finish[r], out->stages[r].compute = R.compute[r];
  if (ok) summarise(m, c, hw, &S, count, params, eparams, R.stash, R.pipe_end, out);
  else *error = strdup("the replay of the tables stalled (a schedule bug: the verifier passed them)");
  out->tables = timeline ? s : NULL, out->start = R.start, out->end = R.end;
  free(R.finish), free(R.pipe_end), free(R.compute), free(R.stash);
  free(S.f), free(S.b), free(S.w), free(S.reduce), free(S.buckets), free(params), free(eparams), free(count);
  if (!timeline) sched_free(s);
  return ok;
}

bool pl_simulate(const PlModel *m, const PlConfig *c, const PlHw *hw, PlResult *out,
                 char **error) {
  return simulate(m, c, hw, false, out, error);
}

bool pl_simulate_timeline(const PlModel *m, const PlConfig *c, const PlHw *hw, PlResult *out,
                          char **error) {
  return simulate(m, c, hw, true, out, error);
}

void pl_result_free(PlResult *r) {
  for (int i = 0; r->start && i < r->nstages; i++) free(r->start[i]), free(r->end[i]);
  free(r->start), free(r->end), free(r->stages);
  if (r->tables) sched_free(r->tables);
  r->stages = NULL, r->start = r->end = NULL, r->tables = NULL;
}
