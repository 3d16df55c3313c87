/* The pipeline executor (see exec.h). */
#include "exec.h"
#include "batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "dp.h"
#include "graphs.h"
#include "mlm.h"
#include "tp.h"
#include "trace.h"
#include "update.h"
#include "util.h"
#include "watchdog.h"

/* A message of one (chunk, microbatch): its buffer (model memory, which
 * comm.h sends and receives) while it exists and the operation while in
 * flight. */
typedef struct Msg {
  void *buf;
  RtCommReq *req;
  RtSchedAction act; /* --trace: the SEND or RECV that posted it, and when */
  double posted;
} Msg;

/* One chunk's slots: those not in use, and how many exist. */
typedef struct Pool {
  unsigned char **free;
  int nfree, made;
} Pool;

struct RtExec {
  int p, v, m, stage, nvstages;
  RtComm *pipe, *embed;
  RtCommType msg_type;       /* of a message's elements: reals, or bf16 (messages_bf16) */
  unsigned char *temps;
  Pool *pool;                /* per chunk */
  unsigned char **slot;      /* [c * m + mb]: the slot of (c, mb) in flight */
  int live, peak_live;       /* slots in use, now and at most */
  int peak_table;            /* the most the table ever holds */
  int64_t peak_bytes;        /* their bytes, chunk by chunk */
  Pool *mpool[2][2];         /* message buffers: [0 recv, 1 send][RtSchedMsg], per chunk */
  int64_t msg_bytes;         /* their bytes at the table's peak (table_messages) */
  int64_t *numel[2][2];      /* per chunk: [0 recv, 1 send][RtSchedMsg] */
  Msg *recv[2], *send[2];    /* [RtSchedMsg][c * m + mb] */
  int *local[2];             /* [RtSchedMsg][c]: the chunk on this stage that computes what
                              * chunk c receives (V placement), else -1 */
  int *bdone;                /* per chunk: backwards run this step */
  int *wdone;                /* per chunk: weight gradients (W) run this step */
  Msg **pending;             /* sends in flight, in posting order */
  int npending, head;
  int reads_inputs;          /* some chunk reads the model's inputs */
  /* The forward-only pass's buffers, one per chunk (a microbatch at a
   * time). */
  void **fwd_in, **fwd_out;
  RtCommReq **fwd_req;
  int *tied;                 /* parameters tied across stages, by name */
  int ntied;
  int *pair;                 /* [2 * npairs]: original, copy; both on this stage (V) */
  int npairs;
  int opt_steps;
};

static int64_t parts_numel(const RtMsgPart *p, int n) {
  int64_t s = 0;
  for (int i = 0; i < n; i++) s += p[i].numel;
  return s;
}

/* Bytes of one element of a message: a real, or bf16 where the program's
 * plans keep the messages in 2 bytes (RtModel.messages_bf16). */
static int64_t msg_elem(const RtModel *m) { return m->messages_bf16 ? 2 : (int64_t)sizeof(real); }

/* The message's tensor out of the chunk's locations into buf ... */
static void parts_out(const RtCtx *ctx, const RtChunk *c, const RtMsgPart *p, int n, void *buf) {
  unsigned char *b = buf;
  for (int i = 0; i < n; i++) {
    int64_t bytes = p[i].numel * msg_elem(ctx->model);
    rt_dev_copy(b, rt_loc(ctx, c, p[i].offset), bytes);
    b += bytes;
  }
}

/* ... and from buf into them. */
static void parts_in(const RtCtx *ctx, const RtChunk *c, const RtMsgPart *p, int n,
                     const void *buf) {
  const unsigned char *b = buf;
  for (int i = 0; i < n; i++) {
    int64_t bytes = p[i].numel * msg_elem(ctx->model);
    rt_dev_copy(rt_loc(ctx, c, p[i].offset), b, bytes);
    b += bytes;
  }
}

/* Zeroed model memory: the temporaries and the stash slots start as the
 * one allocation of a program of one chunk does. */
static void *dev_zeroed(int64_t bytes, const char *what) {
  void *mem = rt_dev_alloc(bytes, what);
  rt_dev_zero(mem, RT_ALIGN64(bytes > 0 ? bytes : 1));
  return mem;
}

/* A message buffer of n elements. */
static void *msg_buf(const RtModel *m, int64_t n) { return rt_dev_alloc(n * msg_elem(m), "a message"); }

/* ------------------------------------------------------------- slots */

static unsigned char *acquire(RtExec *x, const RtModel *m, int c) {
  Pool *p = &x->pool[c];
  unsigned char *s = p->nfree ? p->free[--p->nfree]
                              : (p->made++, dev_zeroed(m->chunks[c].activations, "a stash slot"));
  if (++x->live > x->peak_live) x->peak_live = x->live;
  return s;
}

static void release(RtExec *x, int c, unsigned char *s) {
  Pool *p = &x->pool[c];
  p->free[p->nfree++] = s;
  x->live--;
}

/* A message buffer of chunk c, received (d 0) or sent (d 1), from its
 * pool: made once, reused every step, so the buffers a stage holds are
 * those the plan counts (table_messages), not what malloc keeps. */
static void *msg_get(RtExec *x, const RtModel *m, int d, int msg, int c) {
  Pool *p = &x->mpool[d][msg][c];
  if (p->nfree) return p->free[--p->nfree];
  p->made++;
  return msg_buf(m, x->numel[d][msg][c]);
}

static void msg_put(RtExec *x, int d, int msg, int c, void *buf) {
  Pool *p = &x->mpool[d][msg][c];
  p->free[p->nfree++] = buf;
}

/* ------------------------------------------------------------- setup */

static const RtModel *sort_model;
static int by_name(const void *a, const void *b) {
  return strcmp(sort_model->params[*(const int *)a].name, sort_model->params[*(const int *)b].name);
}

/* The stage's peak of (chunk, microbatch) in flight, from its table. */
static void table_peak(RtExec *x, const RtModel *m) {
  int *live = rt_xcalloc((size_t)x->v, sizeof *live), *most = rt_xcalloc((size_t)x->v, sizeof *most);
  int total = 0;
  for (int32_t i = 0; i < m->nactions; i++) {
    const RtSchedAction *a = &m->actions[i];
    if (a->kind == RT_SCHED_F) {
      total++;
      if (++live[a->chunk] > most[a->chunk]) most[a->chunk] = live[a->chunk];
    } else if (a->kind == (rt_chunk_wgrad(m, a->chunk) ? RT_SCHED_W : RT_SCHED_B)) {
      total--, live[a->chunk]--;
    }
    if (total > x->peak_table) x->peak_table = total;
  }
  for (int c = 0; c < x->v; c++) x->peak_bytes += most[c] * m->chunks[c].activations;
  free(live);
  free(most);
}

/* The message buffers at the table's peak, pool by pool (msg_get): a
 * received tensor's from its RECV to the F or B that reads it, a sent
 * one's from the F or B that computes it to the step's end, where every
 * send is waited for (a program that polls its sends frees some sooner:
 * then this is a bound), a kept output that the next chunk on this stage
 * reads (V placement) from its F or B to that read. */
static void table_messages(RtExec *x, const RtModel *m) {
  int n = 2 * 2 * x->v;
  int *live = rt_xcalloc((size_t)n, sizeof *live), *most = rt_xcalloc((size_t)n, sizeof *most);
#define MSG_POOL(d, k, c) (((d) * 2 + (k)) * x->v + (c))
#define MSG_ADD(d, k, c, by)                                                            \
  do {                                                                                  \
    int i_ = MSG_POOL(d, k, c);                                                         \
    if ((live[i_] += (by)) > most[i_]) most[i_] = live[i_];                             \
  } while (0)
  for (int32_t i = 0; i < m->nactions; i++) {
    const RtSchedAction *a = &m->actions[i];
    const RtChunk *ch = &m->chunks[a->chunk];
    int c = a->chunk;
    if (a->kind == RT_SCHED_RECV) MSG_ADD(0, a->msg, c, 1);
    if (a->kind == RT_SCHED_F || a->kind == RT_SCHED_B) {
      int k = a->kind == RT_SCHED_F ? RT_SCHED_ACT : RT_SCHED_GRAD;
      int reads = k == RT_SCHED_ACT ? ch->nrecv_act > 0 : !ch->has_loss && ch->nrecv_grad > 0;
      int sends = k == RT_SCHED_ACT ? ch->nsend_act > 0 : ch->nsend_grad > 0;
      int from = x->local[k][c];
      if (reads) {
        if (from >= 0) MSG_ADD(1, k, from, -1);
        else MSG_ADD(0, k, c, -1);
      }
      if (sends) MSG_ADD(1, k, c, 1);
    }
  }
#undef MSG_ADD
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 2; k++)
      for (int c = 0; c < x->v; c++)
        x->msg_bytes += most[MSG_POOL(d, k, c)] * RT_ALIGN64(x->numel[d][k][c] * msg_elem(m));
#undef MSG_POOL
  free(live);
  free(most);
}

/* Both ends of the embedding group must sum the same tensors: a mismatch
 * is the compiler's bug, and it would make the sum hang or garble. */
static void check_tied(Rt *rt, RtExec *x) {
  const RtModel *m = rt->model;
  int32_t mine[2] = {x->ntied, 0}, both[4];
  int64_t numel = 0;
  for (int i = 0; i < x->ntied; i++) numel += m->params[x->tied[i]].numel;
  mine[1] = (int32_t)(numel % 2147483647);
  rt_comm_allgather(x->embed, mine, both, 2, RT_COMM_I32);
  if (both[0] != both[2] || both[1] != both[3])
    rt_fatal(m->name,
             "internal error: the first stage ties %d parameters (%d elements), the last %d (%d)",
             both[0], both[1], both[2], both[3]);
}

/* The copies of a tied parameter that this stage holds both of (tied 2,
 * and the original of the same name), in table order: the V placement's
 * first stage. Each copy belongs to its own chunk, with its own gradient
 * slot and bucket; sum_tied adds them here, not over the embedding group. */
static void find_pairs(Rt *rt, RtExec *x) {
  const RtModel *m = rt->model;
  x->pair = rt_xcalloc((size_t)(m->nparams > 0 ? m->nparams : 1), sizeof *x->pair);
  for (int i = 0; i < m->nparams; i++) {
    if (m->params[i].tied != 2) continue;
    int orig = -1;
    for (int j = 0; j < m->nparams && orig < 0; j++)
      if (m->params[j].tied == 1 && !strcmp(m->params[j].name, m->params[i].name)) orig = j;
    if (orig < 0 || m->params[orig].numel != m->params[i].numel)
      rt_fatal(m->name, "internal error: the copy of tied %s has no original on stage %d",
               m->params[i].name, x->stage);
    x->pair[2 * x->npairs] = orig, x->pair[2 * x->npairs + 1] = i, x->npairs++;
  }
}

static int paired(const RtExec *x, int param) {
  for (int k = 0; k < 2 * x->npairs; k++)
    if (x->pair[k] == param) return 1;
  return 0;
}

/* The context's poll hook of a pipeline stage: the data-parallel
 * reductions while one is in flight, else the oldest send. */
static void hook_poll(RtCtx *ctx) {
  Rt *rt = ctx->runtime;
  if (rt_dp_busy(rt)) rt_dp_poll(rt);
  else rt_exec_poll(rt);
}

void rt_exec_init(Rt *rt) {
  const RtModel *m = rt->model;
  rt->exec = NULL;
  if (rt->mesh.pp <= 1) return;
  RtExec *x = rt_xcalloc(1, sizeof *x);
  RtComms *cs = rt_tp_comms();
  x->p = rt->mesh.pp;
  x->v = m->nchunks;
  x->m = m->microbatches;
  x->stage = rt->coord.pp;
  x->nvstages = x->p * x->v;
  x->pipe = cs->axis[RT_AXIS_PIPELINE];
  x->embed = cs->axis[RT_AXIS_EMBED];
  x->msg_type = m->messages_bf16 ? RT_COMM_BF16 : RT_COMM_REAL;
  x->temps = dev_zeroed(m->plan.temporaries, "the temporaries");
  rt->ctx.temporaries = x->temps;
  rt->ctx.activations = NULL;
  int keys = x->v * x->m;
  x->pool = rt_xcalloc((size_t)x->v, sizeof *x->pool);
  for (int c = 0; c < x->v; c++)
    x->pool[c].free = rt_xcalloc((size_t)x->m + 1, sizeof *x->pool[c].free);
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 2; k++) {
      x->mpool[d][k] = rt_xcalloc((size_t)x->v, sizeof(Pool));
      for (int c = 0; c < x->v; c++)
        x->mpool[d][k][c].free = rt_xcalloc((size_t)x->m + 1, sizeof(unsigned char *));
    }
  x->slot = rt_xcalloc((size_t)keys, sizeof *x->slot);
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 2; k++) x->numel[d][k] = rt_xcalloc((size_t)x->v, sizeof(int64_t));
  for (int c = 0; c < x->v; c++) {
    const RtChunk *ch = &m->chunks[c];
    x->numel[0][RT_SCHED_ACT][c] = parts_numel(ch->recv_act, ch->nrecv_act);
    x->numel[1][RT_SCHED_ACT][c] = parts_numel(ch->send_act, ch->nsend_act);
    x->numel[0][RT_SCHED_GRAD][c] = parts_numel(ch->recv_grad, ch->nrecv_grad);
    x->numel[1][RT_SCHED_GRAD][c] = parts_numel(ch->send_grad, ch->nsend_grad);
    if (ch->ninputs) x->reads_inputs = 1;
  }
  for (int k = 0; k < 2; k++) {
    x->recv[k] = rt_xcalloc((size_t)keys, sizeof(Msg));
    x->send[k] = rt_xcalloc((size_t)keys, sizeof(Msg));
  }
  for (int k = 0; k < 2; k++) x->local[k] = rt_xcalloc((size_t)x->v, sizeof(int));
  for (int c = 0; c < x->v; c++) {
    /* The input comes from vs - 1, the output gradient from vs + 1. */
    int vs = m->chunks[c].vstage, from[2] = {vs - 1, vs + 1};
    for (int k = 0; k < 2; k++)
      x->local[k][c] = from[k] >= 0 && from[k] < x->nvstages &&
                       rt_vstage_stage(x->p, m->vshape, from[k]) == x->stage ? from[k] / x->p : -1;
  }
  x->bdone = rt_xcalloc((size_t)x->v, sizeof *x->bdone);
  x->wdone = rt_xcalloc((size_t)x->v, sizeof *x->wdone);
  x->pending = rt_xcalloc((size_t)(2 * keys), sizeof *x->pending);
  x->fwd_in = rt_xcalloc((size_t)x->v, sizeof *x->fwd_in);
  x->fwd_out = rt_xcalloc((size_t)x->v, sizeof *x->fwd_out);
  x->fwd_req = rt_xcalloc((size_t)x->v, sizeof *x->fwd_req);
  table_peak(x, m);
  table_messages(x, m);
  /* Tied parameters in name order, the same on the first and the last
   * stage whatever order their tables list them in. */
  x->tied = rt_xcalloc((size_t)(m->nparams > 0 ? m->nparams : 1), sizeof *x->tied);
  find_pairs(rt, x);
  for (int i = 0; i < m->nparams; i++)
    if (m->params[i].tied && !paired(x, i)) x->tied[x->ntied++] = i;
  sort_model = m;
  qsort(x->tied, (size_t)x->ntied, sizeof *x->tied, by_name);
  if (x->ntied && !x->embed)
    rt_fatal(m->name, "internal error: stage %d holds tied parameters but is not the first or "
                      "the last stage", x->stage);
  if (x->embed) check_tied(rt, x);
  rt->exec = x;
  /* A pipeline stage's sends progress between the backward's nodes too. */
  rt->ctx.poll = hook_poll;
}

void rt_exec_free(Rt *rt) {
  RtExec *x = rt->exec;
  if (!x) return;
  for (int c = 0; c < x->v; c++) {
    for (int i = 0; i < x->pool[c].nfree; i++) rt_dev_free(x->pool[c].free[i]);
    free(x->pool[c].free);
    for (int d = 0; d < 2; d++)
      for (int k = 0; k < 2; k++) {
        Pool *mp = &x->mpool[d][k][c];
        for (int i = 0; i < mp->nfree; i++) rt_dev_free(mp->free[i]);
        free(mp->free);
      }
  }
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 2; k++) free(x->mpool[d][k]);
  free(x->pool);
  free(x->slot);
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 2; k++) free(x->numel[d][k]);
  for (int k = 0; k < 2; k++) free(x->recv[k]), free(x->send[k]);
  free(x->bdone);
  for (int k = 0; k < 2; k++) free(x->local[k]);
  free(x->wdone);
  free(x->pending);
  free(x->fwd_in);
  free(x->fwd_out);
  free(x->fwd_req);
  free(x->tied);
  free(x->pair);
  rt_dev_free(x->temps);
  free(x);
  rt->exec = NULL;
}

int64_t rt_exec_stash_bytes(const Rt *rt) { return rt->exec->peak_bytes; }

int64_t rt_exec_message_bytes(const Rt *rt) { return rt->exec->msg_bytes; }

void rt_exec_describe(Rt *rt, char *buf, int len) {
  RtExec *x = rt->exec;
  const RtModel *m = rt->model;
  int32_t mine = x->peak_table, *all = rt_xcalloc((size_t)x->p, sizeof *all);
  rt_comm_allgather(x->pipe, &mine, all, 1, RT_COMM_I32);
  char vs[128] = "", peaks[256] = "", bytes[32];
  int n = 0;
  for (int c = 0; c < x->v && n < (int)sizeof vs - 12; c++)
    n += snprintf(vs + n, sizeof vs - (size_t)n, "%s%d", c ? ", " : "", m->chunks[c].vstage);
  n = 0;
  for (int r = 0; r < x->p && n < (int)sizeof peaks - 12; r++)
    n += snprintf(peaks + n, sizeof peaks - (size_t)n, "%s%d", r ? " " : "", all[r]);
  snprintf(buf, (size_t)len,
           "stage %d of %d, %d chunk%s (virtual stage%s %s), schedule %s, %d microbatches; peak "
           "stash %d (%s of activations; by stage: %s)",
           x->stage, x->p, x->v, x->v == 1 ? "" : "s", x->v == 1 ? "" : "s", vs,
           m->schedule ? m->schedule : "?", x->m, x->peak_table,
           rt_fmt_bytes(bytes, sizeof bytes, x->peak_bytes), peaks);
  free(all);
}

/* ---------------------------------------------------------- messages */

static Msg *msg_at(RtExec *x, Msg *table, int c, int mb) { return &table[c * x->m + mb]; }

static void post_recv(Rt *rt, RtExec *x, const RtSchedAction *a) {
  Msg *r = msg_at(x, x->recv[a->msg], a->chunk, a->mb);
  if (r->buf)
    rt_fatal(rt->model->name, "internal error: RECV(%s, chunk %d, microbatch %d) posted twice",
             rt_sched_msg_name(a->msg), a->chunk, a->mb);
  int64_t n = x->numel[0][a->msg][a->chunk];
  r->buf = msg_get(x, rt->model, 0, a->msg, a->chunk);
  r->act = *a;
  r->posted = rt_trace_now();
  r->req = rt_comm_irecv(x->pipe, r->buf, n, x->msg_type, a->peer);
}

/* The received tensor of (c, mb) into the chunk's recv parts, once here;
 * from the kept output of the chunk on this stage that computed it, when
 * there is one (the V placement's turn on the last stage). */
static void take(Rt *rt, RtExec *x, int msg, int c, int mb) {
  const RtChunk *ch = &rt->model->chunks[c];
  int from = x->local[msg][c];
  Msg *r = from >= 0 ? msg_at(x, x->send[msg], from, mb) : msg_at(x, x->recv[msg], c, mb);
  if (from >= 0 && r->buf) {
    parts_in(&rt->ctx, ch, msg == RT_SCHED_ACT ? ch->recv_act : ch->recv_grad,
             msg == RT_SCHED_ACT ? ch->nrecv_act : ch->nrecv_grad, r->buf);
    msg_put(x, 1, msg, from, r->buf);
    *r = (Msg){0};
    return;
  }
  if (!r->buf)
    rt_fatal(rt->model->name,
             "internal error: %s(chunk %d, microbatch %d) runs before its RECV(%s) is posted",
             msg == RT_SCHED_ACT ? "F" : "B", c, mb, rt_sched_msg_name(msg));
  rt_comm_wait(r->req);
  /* As the simulator's trace: a batch of messages is its first one. */
  if (!(r->act.flags & RT_SCHED_JOIN)) rt_trace_add(&r->act, r->posted, rt_trace_now());
  if (msg == RT_SCHED_ACT)
    parts_in(&rt->ctx, ch, ch->recv_act, ch->nrecv_act, r->buf);
  else
    parts_in(&rt->ctx, ch, ch->recv_grad, ch->nrecv_grad, r->buf);
  msg_put(x, 0, msg, c, r->buf);
  *r = (Msg){0};
}

/* The tensor (c, mb) sends, copied right after the call that computed it:
 * its bytes may be temporaries, and the SEND may come much later. */
static void keep(Rt *rt, RtExec *x, int msg, int c, int mb) {
  const RtChunk *ch = &rt->model->chunks[c];
  Msg *s = msg_at(x, x->send[msg], c, mb);
  if (s->buf)
    rt_fatal(rt->model->name, "internal error: the %s of chunk %d, microbatch %d, is still unsent",
             rt_sched_msg_name(msg), c, mb);
  s->buf = msg_get(x, rt->model, 1, msg, c);
  if (msg == RT_SCHED_ACT)
    parts_out(&rt->ctx, ch, ch->send_act, ch->nsend_act, s->buf);
  else
    parts_out(&rt->ctx, ch, ch->send_grad, ch->nsend_grad, s->buf);
}

static void post_send(Rt *rt, RtExec *x, const RtSchedAction *a) {
  Msg *s = msg_at(x, x->send[a->msg], a->chunk, a->mb);
  if (!s->buf || s->req)
    rt_fatal(rt->model->name,
             "internal error: SEND(%s, chunk %d, microbatch %d) before its %s, or twice",
             rt_sched_msg_name(a->msg), a->chunk, a->mb, a->msg == RT_SCHED_ACT ? "F" : "B");
  s->act = *a;
  s->posted = rt_trace_now();
  s->req = rt_comm_isend(x->pipe, s->buf, x->numel[1][a->msg][a->chunk], x->msg_type, a->peer);
  x->pending[x->npending++] = s;
}

/* The send has completed (or was seen to be: poll tests the oldest one
 * only, so a trace's send lasts at most until then). */
static void send_done(RtExec *x, Msg *s) {
  if (!(s->act.flags & RT_SCHED_JOIN)) rt_trace_add(&s->act, s->posted, rt_trace_now());
  msg_put(x, 1, s->act.msg, s->act.chunk, s->buf);
  *s = (Msg){0};
}

void rt_exec_poll(Rt *rt) {
  RtExec *x = rt->exec;
  /* The oldest send first: MPI progresses the others inside the test. */
  if (x->head < x->npending && rt_comm_test(x->pending[x->head]->req))
    send_done(x, x->pending[x->head++]);
}

/* ---------------------------------------------------------- a step */

static void forward(Rt *rt, RtExec *x, int c, int mb, int64_t step) {
  const RtChunk *ch = &rt->model->chunks[c];
  unsigned char **slot = &x->slot[c * x->m + mb];
  if (*slot)
    rt_fatal(rt->model->name, "internal error: F(chunk %d, microbatch %d) twice", c, mb);
  *slot = acquire(x, rt->model, c);
  rt->ctx.activations = *slot;
  int64_t g = rt_global_mb(rt, mb);
  if (ch->ninputs) rt_load_inputs(rt, ch, rt->window, g);
  if (ch->nrecv_act) take(rt, x, RT_SCHED_ACT, c, mb);
  /* The trace's F starts once its input is here: the wait is RECV's. */
  double t0 = rt_trace_now();
  rt->ctx.seed = rt_dropout_seed(rt, step, g);
  rt_chunk_call(rt, c, RT_FN_FORWARD);
  if (ch->has_loss) rt_chunk_loss_add(&rt->ctx, ch); /* read once, at the step's end */
  if (ch->nsend_act) keep(rt, x, RT_SCHED_ACT, c, mb);
  rt_trace_add_kind(RT_SCHED_F, c, mb, t0, rt_trace_now());
}

static void backward(Rt *rt, RtExec *x, int c, int mb, int64_t step) {
  const RtChunk *ch = &rt->model->chunks[c];
  unsigned char **slot = &x->slot[c * x->m + mb];
  if (!*slot)
    rt_fatal(rt->model->name, "internal error: B(chunk %d, microbatch %d) without its F", c, mb);
  rt->ctx.activations = *slot;
  if (ch->has_loss)
    rt_seed_dloss(rt, ch);
  else if (ch->nrecv_grad)
    take(rt, x, RT_SCHED_GRAD, c, mb);
  /* The chunk's buckets may start reducing during its last backward of
   * the step, whichever microbatch the schedule runs last; when the
   * backward is split, during its last W instead (wgrad). */
  int last = ++x->bdone[c] == x->m && !rt_chunk_wgrad(rt->model, c);
  double t0 = rt_trace_now();
  if (rt->dp) rt_dp_backward_begin(rt, c, last);
  /* The microbatch's own dropout seed: its masks are drawn again here (by
   * dropout_grad, and by recomputed dropout), and other forwards ran
   * since its own. */
  rt->ctx.seed = rt_dropout_seed(rt, step, rt_global_mb(rt, mb));
  rt_chunk_call(rt, c, RT_FN_BACKWARD);
  if (rt->dp) rt_dp_backward_begin(rt, c, 0);
  if (ch->nsend_grad) keep(rt, x, RT_SCHED_GRAD, c, mb);
  rt_trace_add_kind(RT_SCHED_B, c, mb, t0, rt_trace_now());
  if (rt_chunk_wgrad(rt->model, c)) return; /* W still reads the stash */
  release(x, c, *slot);
  *slot = NULL;
}

/* W of a split backward: the parameter gradients B left, from the stash
 * of F and B, which it then frees. */
static void wgrad(Rt *rt, RtExec *x, int c, int mb, int64_t step) {
  unsigned char **slot = &x->slot[c * x->m + mb];
  if (!*slot)
    rt_fatal(rt->model->name, "internal error: W(chunk %d, microbatch %d) without its F", c, mb);
  rt->ctx.activations = *slot;
  int last = ++x->wdone[c] == x->m;
  double t0 = rt_trace_now();
  if (rt->dp) rt_dp_backward_begin(rt, c, last);
  /* As in backward: any mask W draws again is its microbatch's own. */
  rt->ctx.seed = rt_dropout_seed(rt, step, rt_global_mb(rt, mb));
  rt_chunk_call(rt, c, RT_FN_WGRAD);
  if (rt->dp) rt_dp_backward_begin(rt, c, 0);
  rt_trace_add_kind(RT_SCHED_W, c, mb, t0, rt_trace_now());
  release(x, c, *slot);
  *slot = NULL;
}

/* The two copies on this stage: g0 = g1 = g0 + g1, in model memory. Two
 * addends give the same bits in either order, so this is the sum the
 * embedding group would make. */
static void sum_pairs(Rt *rt, RtExec *x) {
  const RtModel *m = rt->model;
  for (int k = 0; k < x->npairs; k++) {
    const RtParam *p0 = &m->params[x->pair[2 * k]], *p1 = &m->params[x->pair[2 * k + 1]];
    real *g0 = rt->ctx.grads + p0->offset, *g1 = rt->ctx.grads + p1->offset;
    rt_dev_accumulate(g0, g1, p0->numel);
    rt_dev_copy(g1, g0, p0->numel * (int64_t)sizeof(real));
  }
}

/* The two copies of each tied parameter get the sum of their gradients:
 * after every backward of the step (inside one it would wait for a stage
 * that waits for this one). */
static void sum_tied(Rt *rt, RtExec *x) {
  sum_pairs(rt, x);
  if (!x->embed || rt_comm_size(x->embed) < 2) return;
  for (int i = 0; i < x->ntied; i++) {
    const RtParam *p = &rt->model->params[x->tied[i]];
    real *g = rt->ctx.grads + p->offset;
    rt_comm_allreduce(x->embed, g, g, p->numel, RT_COMM_REAL, RT_COMM_SUM);
  }
}

/* With more than two data-parallel replicas the two copies of a tied
 * parameter sit at different places in differently cut buckets, and MPI
 * may add the replicas' parts in another order for each: the copies would
 * drift apart in the last bits, step after step. The first stage's copy,
 * after the update, is made the last stage's too (or, both on the first
 * stage, the last virtual stage's). */
static void sync_tied(Rt *rt, RtExec *x) {
  if (rt->mesh.dp <= 2) return;
  for (int k = 0; k < x->npairs; k++) {
    const RtParam *p0 = &rt->model->params[x->pair[2 * k]];
    const RtParam *p1 = &rt->model->params[x->pair[2 * k + 1]];
    rt_dev_copy(rt->ctx.weights + p1->offset, rt->ctx.weights + p0->offset,
                p0->numel * (int64_t)sizeof(real));
  }
  if (!x->embed || rt_comm_size(x->embed) < 2) return;
  for (int i = 0; i < x->ntied; i++) {
    const RtParam *p = &rt->model->params[x->tied[i]];
    rt_comm_broadcast(x->embed, rt->ctx.weights + p->offset, p->numel, RT_COMM_REAL, 0);
    rt_dev_written(rt->ctx.weights + p->offset, p->numel * (int64_t)sizeof(real));
  }
}

static void opt_step(Rt *rt, RtExec *x, int64_t step, int dump, RtStepInfo *info) {
  double t0 = rt_trace_now();
  rt_tp_step_mark(rt);
  if (rt->dp) rt_dp_backward_done(rt);
  sum_tied(rt, x);
  if (rt->dp) rt_dp_start_tied(rt);
  rt_update(rt, step, dump, info);
  sync_tied(rt, x);
  x->opt_steps++;
  rt_trace_add_kind(RT_SCHED_OPT_STEP, 0, 0, t0, rt_trace_now());
}

double rt_exec_step(Rt *rt, int64_t step, int dump, RtStepInfo *info) {
  RtExec *x = rt->exec;
  const RtModel *m = rt->model;
  rt_zero_grads(rt);
  if (rt->dp) rt_dp_step_begin(rt);
  memset(x->bdone, 0, (size_t)x->v * sizeof *x->bdone);
  memset(x->wdone, 0, (size_t)x->v * sizeof *x->wdone);
  x->npending = x->head = 0;
  x->opt_steps = 0;
  rt->ctx.training = 1;
  rt->ctx.temporaries = x->temps;
  for (int32_t i = 0; i < m->nactions; i++) {
    const RtSchedAction *a = &m->actions[i];
    rt_wd_phase("step %lld: %s(chunk %d, microbatch %d)", (long long)(step + 1),
                rt_sched_kind_name(a->kind), a->chunk, a->mb);
    switch ((RtSchedKind)a->kind) {
    case RT_SCHED_F: forward(rt, x, a->chunk, a->mb, step); break;
    case RT_SCHED_B: backward(rt, x, a->chunk, a->mb, step); break;
    case RT_SCHED_W: wgrad(rt, x, a->chunk, a->mb, step); break;
    case RT_SCHED_SEND: post_send(rt, x, a); break;
    case RT_SCHED_RECV: post_recv(rt, x, a); break;
    case RT_SCHED_REDUCE_GRADS: {
      /* Its start only: the reduction runs on behind the compute. */
      double t0 = rt_trace_now();
      if (rt->dp) rt_dp_start_chunk(rt, a->chunk);
      rt_trace_add(a, t0, rt_trace_now());
      break;
    }
    case RT_SCHED_OPT_STEP: opt_step(rt, x, step, dump, info); break;
    default: /* unknown kinds are refused by check_model */
      rt_fatal(m->name, "internal error: action %d of kind %d", (int)i, (int)a->kind);
    }
  }
  /* Sends finish before their buffers go; everything sent or received
   * belongs to this step. */
  for (; x->head < x->npending; x->head++) {
    rt_comm_wait(x->pending[x->head]->req);
    send_done(x, x->pending[x->head]);
  }
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < x->v * x->m; i++)
      if (x->recv[k][i].buf || x->send[k][i].buf)
        rt_fatal(m->name, "internal error: the %s of chunk %d, microbatch %d, was never %s",
                 rt_sched_msg_name(k), i / x->m, i % x->m, x->recv[k][i].buf ? "used" : "sent");
  if (x->live || x->opt_steps != 1)
    rt_fatal(m->name, "internal error: %d microbatches left stashed, %d optimizer steps", x->live,
             x->opt_steps);
  return rt_mesh_mean(rt, rt_dev_loss_take(), rt->micro * rt->mesh.dp);
}

/* ------------------------------------------------------- forward only */

/* One microbatch forward through the stage's chunks, messages forward
 * only and in the same order on both ends, so that blocking receives are
 * safe; sends are waited for before the next microbatch reuses their
 * buffers. Returns the loss, on the last stage. */
static double forward_one(Rt *rt, RtExec *x, const int32_t *window, int64_t g, uint64_t seed) {
  const RtModel *m = rt->model;
  double loss = 0;
  rt->ctx.temporaries = x->temps;
  for (int c = 0; c < x->v; c++) {
    const RtChunk *ch = &m->chunks[c];
    unsigned char *s = acquire(x, m, c);
    rt->ctx.activations = s;
    if (ch->ninputs) rt_load_inputs(rt, ch, window, g);
    if (ch->nrecv_act && x->local[RT_SCHED_ACT][c] >= 0) {
      parts_in(&rt->ctx, ch, ch->recv_act, ch->nrecv_act, x->fwd_out[x->local[RT_SCHED_ACT][c]]);
    } else if (ch->nrecv_act) {
      int64_t n = x->numel[0][RT_SCHED_ACT][c];
      x->fwd_in[c] = msg_get(x, m, 0, RT_SCHED_ACT, c);
      rt_comm_recv(x->pipe, x->fwd_in[c], n, x->msg_type,
                   rt_vstage_stage(x->p, m->vshape, ch->vstage - 1));
      parts_in(&rt->ctx, ch, ch->recv_act, ch->nrecv_act, x->fwd_in[c]);
      msg_put(x, 0, RT_SCHED_ACT, c, x->fwd_in[c]);
      x->fwd_in[c] = NULL;
    }
    rt->ctx.seed = seed;
    rt_chunk_call(rt, c, RT_FN_FORWARD);
    if (ch->has_loss) loss += rt_chunk_loss(&rt->ctx, ch);
    if (ch->nsend_act) {
      int64_t n = x->numel[1][RT_SCHED_ACT][c];
      x->fwd_out[c] = msg_get(x, m, 1, RT_SCHED_ACT, c);
      parts_out(&rt->ctx, ch, ch->send_act, ch->nsend_act, x->fwd_out[c]);
      int to = rt_vstage_stage(x->p, m->vshape, ch->vstage + 1);
      /* The next chunk on this stage reads it from fwd_out. */
      if (to != x->stage) x->fwd_req[c] = rt_comm_isend(x->pipe, x->fwd_out[c], n, x->msg_type, to);
    }
    release(x, c, s);
  }
  rt_comm_waitall(x->fwd_req, x->v);
  for (int c = 0; c < x->v; c++)
    if (x->fwd_out[c]) msg_put(x, 1, RT_SCHED_ACT, c, x->fwd_out[c]), x->fwd_out[c] = NULL;
  return loss;
}

double rt_exec_window_loss(Rt *rt, const int32_t *window, int64_t step, int training) {
  RtExec *x = rt->exec;
  rt->ctx.training = training;
  double sum = 0;
  for (int64_t k = 0; k < rt->micro; k++) {
    int64_t g = rt_global_mb(rt, k);
    sum += forward_one(rt, x, window, g, rt_dropout_seed(rt, step, g));
  }
  rt->ctx.training = 1;
  return rt_mesh_mean(rt, sum, rt->micro * rt->mesh.dp);
}

double rt_exec_eval(Rt *rt, int64_t n) {
  RtExec *x = rt->exec;
  rt->ctx.training = 0;
  double sum = 0;
  /* Replica i of d takes windows i, i + d, ...; only stages that read the
   * model's inputs need the tokens. */
  for (int64_t k = rt->coord.dp; k < n; k += rt->mesh.dp) {
    if (x->reads_inputs) rt_data_read(rt->val, k, rt->window);
    rt->window_key = rt_mlm_key((uint64_t)rt->f.seed, k, 1); /* masked-LM examples: mlm.h */
    sum += forward_one(rt, x, rt->window, 0, rt_dropout_seed(rt, 0, k));
  }
  rt->ctx.training = 1;
  return rt_mesh_mean(rt, sum, n);
}
