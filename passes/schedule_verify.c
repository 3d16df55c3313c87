/* The schedule verifier: checks every stage's table and runs all of them
 * together in a simulation of time, so that a table the runtime would
 * execute wrongly, or that would hang, is rejected at compile time.
 *
 * Three phases, each reporting every problem it finds:
 *  1. Messages: every field in range; every SEND and RECV names its true
 *     peer (the placement fixes it); each message (kind, destination
 *     virtual stage, microbatch) is sent exactly once and received exactly
 *     once, with the same shape; batches join only SEND/RECV actions.
 *     Then posting order: the runtime's messages carry no tags, so the
 *     k-th send from stage a to stage b meets the k-th receive on b from
 *     a, whatever they name; the two sequences must name the same
 *     messages in the same order, or a receive silently gets another
 *     message's tensor (of the same shape: nothing at run time notices).
 *  2. Order on each stage: each F has its input (received, or produced by
 *     the previous chunk on the same stage when p = 1) before it runs,
 *     each B follows its F and has its output gradient, each W follows its
 *     B, nothing runs twice or never, sends follow what they send,
 *     reductions follow the last gradient of their chunk, and OPT_STEP
 *     comes last. The peak number of stashed (chunk, microbatch) forwards
 *     awaiting their backward is measured here.
 *  3. Joint execution with batched rendezvous semantics (runtime/
 *     schedule.h): a stage posts a whole batch, then waits until the peer
 *     of every operation in it has posted the matching operation; a lone
 *     send therefore blocks until its receive is posted, and vice versa.
 *     No buffering is assumed, which is the strictest model: a table that
 *     completes here completes with any amount of buffering too. A stage
 *     that can never continue is reported with the action it waits at and
 *     what its peer is blocked on. Compute takes the configured times and
 *     messages none, which gives each action's start and end, the step's
 *     makespan and the bubble. The simulation pairs operations by message,
 *     which is what the runtime does only when the posting orders agree,
 *     so it runs only when they do.
 *
 * The simulation is a worklist over stages: each runs until it blocks,
 * and the posting of a matching operation wakes it. Every action is
 * handled O(1) times, so tables of a million actions verify in
 * milliseconds. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"
#include "schedule.h"

enum { MAX_ERROR_LINES = 20 };

/* The collected errors: every line, up to a limit, then a count. */
typedef struct Errors {
  char *buf;
  size_t len, cap;
  int count;
} Errors;

static void *xcalloc(size_t n, size_t size) {
  void *q = calloc(n ? n : 1, size ? size : 1);
  if (!q) die("out of memory verifying a schedule");
  return q;
}

static void append(Errors *e, const char *text) {
  size_t n = strlen(text);
  if (e->len + n + 2 > e->cap) {
    e->cap = (e->len + n + 2) * 2;
    char *grown = realloc(e->buf, e->cap);
    if (!grown) die("out of memory verifying a schedule");
    e->buf = grown;
  }
  memcpy(e->buf + e->len, text, n);
  e->len += n;
  e->buf[e->len++] = '\n';
  e->buf[e->len] = 0;
}

static void __attribute__((format(printf, 2, 3))) err(Errors *e, const char *fmt, ...) {
  if (++e->count > MAX_ERROR_LINES) return;
  char line[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  append(e, line);
}

/* "stage 2, action 7 RECV(act, from 1, c0, mb3)" */
static const char *where(const RtSchedule *s, int r, int i, char *buf, int size) {
  char act[96];
  snprintf(buf, (size_t)size, "stage %d, action %d %s", r, i,
           rt_sched_action_str(&s->stages[r].actions[i], act, sizeof act));
  return buf;
}

static bool is_msg(const RtSchedAction *a) {
  return a->kind == RT_SCHED_SEND || a->kind == RT_SCHED_RECV;
}

/* ------------------------------------------------------ phase 1: messages */

/* Both ends of one message; -1 where none was found. Times are when each
 * end was posted in the simulation (-1: not yet). */
typedef struct Slot {
  int32_t send_pc, recv_pc;
  int16_t send_stage, recv_stage; /* p fits int16 (RtSchedAction.peer) */
  uint8_t send_shape, recv_shape;
  double send_t, recv_t;
} Slot; /* 32 bytes: the table is touched at random, so size is speed */

typedef struct Verifier {
  const RtSchedule *s;
  int p, v, m, pv;
  Slot *slots; /* 2 * pv * m: (kind, destination virtual stage, microbatch) */
  Errors errs;
} Verifier;

/* The stage that holds virtual stage k. */
static int stage_of(const Verifier *V, int k) { return rt_vstage_stage(V->p, V->s->vshape, k); }

/* The message an action sends or receives, as a slot index, after checking
 * that its peer is the one the placement implies; -1 after an error. */
static int64_t message_key(Verifier *V, int r, int i) {
  const RtSchedAction *a = &V->s->stages[r].actions[i];
  char w[160];
  int vs = rt_sched_vstage(V->s, r, a->chunk);
  bool send = a->kind == RT_SCHED_SEND, act = a->msg == RT_SCHED_ACT;
  /* The other end: activations go from vs to vs + 1, gradients back. */
  int other = act == send ? vs + 1 : vs - 1;
  if (other < 0 || other >= V->pv) {
    err(&V->errs, "%s: virtual stage %d is the %s one and has no %s to %s",
        where(V->s, r, i, w, sizeof w), vs, other < 0 ? "first" : "last",
        act ? "activation" : "gradient", send ? "send" : "receive");
    return -1;
  }
  if (stage_of(V, other) == r) {
    err(&V->errs, "%s: virtual stages %d and %d are both on stage %d, which keeps the tensor "
        "in memory without a message", where(V->s, r, i, w, sizeof w), vs, other, r);
    return -1;
  }
  if (a->peer != stage_of(V, other)) {
    err(&V->errs, "%s: the peer is virtual stage %d, which is on stage %d, not %d",
        where(V->s, r, i, w, sizeof w), other, stage_of(V, other), a->peer);
    return -1;
  }
  int dest = send ? other : vs;
  return ((int64_t)a->msg * V->pv + dest) * V->m + a->mb;
}

/* Fields in range for the action's kind; false after an error. */
static bool fields_ok(Verifier *V, int r, int i) {
  const RtSchedule *s = V->s;
  const RtSchedAction *a = &s->stages[r].actions[i];
  char w[160];
  const char *bad = NULL;
  if (a->kind >= RT_SCHED_NKINDS) bad = "an unknown kind";
  else if (a->kind == RT_SCHED_REDUCE_GRADS) {
    if (a->chunk < -1 || a->chunk >= V->v) bad = "a chunk out of range";
    else if (a->mb < 0 || a->mb >= s->nbuckets) bad = "a bucket out of range";
  } else if (a->kind != RT_SCHED_OPT_STEP) {
    if (a->chunk < 0 || a->chunk >= V->v) bad = "a chunk out of range";
    else if (a->mb < 0 || a->mb >= V->m) bad = "a microbatch out of range";
    else if (is_msg(a) && a->msg > RT_SCHED_GRAD) bad = "an unknown message kind";
    else if (is_msg(a) && (a->peer < 0 || a->peer >= V->p)) bad = "a peer out of range";
    else if (is_msg(a) && a->shape >= s->nshapes) bad = "a shape out of range";
  }
  if (!bad && (a->flags & RT_SCHED_JOIN) &&
      (!is_msg(a) || i == 0 || !is_msg(&s->stages[r].actions[i - 1])))
    bad = "a batch join that does not follow a message";
  if (bad) err(&V->errs, "%s: %s", where(s, r, i, w, sizeof w), bad);
  return !bad;
}

static bool same_shape(const RtSchedShape *x, const RtSchedShape *y) {
  if (x->rank != y->rank) return false;
  for (int d = 0; d < x->rank && d < RT_SCHED_MAX_RANK; d++)
    if (x->dims[d] != y->dims[d]) return false;
  return true;
}

static void check_messages(Verifier *V) {
  const RtSchedule *s = V->s;
  char w[160], w2[160];
  for (int r = 0; r < V->p; r++) {
    const RtSchedTable *t = &s->stages[r];
    for (int i = 0; i < t->n; i++) {
      if (!fields_ok(V, r, i) || !is_msg(&t->actions[i])) continue;
      int64_t key = message_key(V, r, i);
      if (key < 0) continue;
      Slot *slot = &V->slots[key];
      bool send = t->actions[i].kind == RT_SCHED_SEND;
      int16_t *stage = send ? &slot->send_stage : &slot->recv_stage;
      int32_t *pc = send ? &slot->send_pc : &slot->recv_pc;
      if (*stage >= 0) {
        err(&V->errs, "%s: the message is %s twice; first at %s", where(s, r, i, w, sizeof w),
            send ? "sent" : "received", where(s, *stage, *pc, w2, sizeof w2));
        continue;
      }
      *stage = (int16_t)r, *pc = i;
      *(send ? &slot->send_shape : &slot->recv_shape) = t->actions[i].shape;
    }
  }
  int64_t nslots = 2LL * V->pv * V->m;
  for (int64_t k = 0; k < nslots; k++) {
    Slot *slot = &V->slots[k];
    if (slot->send_stage < 0 && slot->recv_stage < 0) continue;
    if (slot->recv_stage < 0) {
      err(&V->errs, "%s: the message is never received",
          where(s, slot->send_stage, slot->send_pc, w, sizeof w));
    } else if (slot->send_stage < 0) {
      err(&V->errs, "%s: the message is never sent",
          where(s, slot->recv_stage, slot->recv_pc, w, sizeof w));
    } else {
      if (slot->send_shape != slot->recv_shape &&
          !same_shape(&s->shapes[slot->send_shape], &s->shapes[slot->recv_shape]))
        err(&V->errs, "%s: the shape differs from the receive's at %s",
            where(s, slot->send_stage, slot->send_pc, w, sizeof w),
            where(s, slot->recv_stage, slot->recv_pc, w2, sizeof w2));
    }
  }
}

/* 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st */
static const char *ordinal(int64_t k, char *buf, int size) {
  const char *suffix = k % 100 / 10 == 1 ? "th" : k % 10 == 1 ? "st" : k % 10 == 2 ? "nd"
                     : k % 10 == 3 ? "rd" : "th";
  snprintf(buf, (size_t)size, "%lld%s", (long long)k, suffix);
  return buf;
}

/* The next action of t at or after i that is a `kind` (SEND or RECV) with
 * peer q; the table's length when there is none. */
static int next_op(const RtSchedTable *t, int i, int kind, int q) {
  while (i < t->n && (t->actions[i].kind != kind || t->actions[i].peer != q)) i++;
  return i;
}

static Slot *slot_of(Verifier *V, int r, int i) {
  /* Phase 1 passed, so the key is valid; recomputing it is cheaper than
   * storing one per action. */
  const RtSchedAction *a = &V->s->stages[r].actions[i];
  int vs = rt_sched_vstage(V->s, r, a->chunk);
  bool send = a->kind == RT_SCHED_SEND, act = a->msg == RT_SCHED_ACT;
  int dest = send ? (act ? vs + 1 : vs - 1) : vs;
  return &V->slots[((int64_t)a->msg * V->pv + dest) * V->m + a->mb];
}

/* The messages from stage a to stage b in posting order on both sides
 * (within a batch, the batch's order: the executor posts its operations
 * in that order). Reports the first position at which the k-th send and
 * the k-th receive name different messages; false then. */
static bool check_channel(Verifier *V, int a, int b) {
  const RtSchedTable *ta = &V->s->stages[a], *tb = &V->s->stages[b];
  int i = next_op(ta, 0, RT_SCHED_SEND, b), j = next_op(tb, 0, RT_SCHED_RECV, a);
  /* Phase 1 paired every message and fixed its two stages, so both sides
   * hold the same number of them and run out together. */
  for (int64_t k = 1; i < ta->n && j < tb->n; k++) {
    if (slot_of(V, a, i) != slot_of(V, b, j)) {
      char w[160], w2[160], nth[32];
      err(&V->errs, "%s sends its %s message to stage %d, but %s receives its %s from stage %d: "
          "messages between two stages match in posting order (no tags)",
          where(V->s, a, i, w, sizeof w), ordinal(k, nth, sizeof nth), b,
          where(V->s, b, j, w2, sizeof w2), nth, a);
      return false;
    }
    i = next_op(ta, i + 1, RT_SCHED_SEND, b);
    j = next_op(tb, j + 1, RT_SCHED_RECV, a);
  }
  return true;
}

/* Every stage talks only to its neighbours r - 1 and r + 1 (mod p; phase 1
 * checked each peer against the placement), so each table is scanned at
 * most four times, twice as a sender and twice as a receiver: O(actions).
 * With p = 2 both neighbours are one stage and each pair of stages is one
 * channel carrying activations and gradients alike, the case where the
 * order between the two kinds matters. */
static bool check_posting_order(Verifier *V) {
  bool ok = true;
  for (int a = 0; a < V->p; a++) {
    int next = (a + 1) % V->p, prev = (a + V->p - 1) % V->p;
    if (next != a) ok = check_channel(V, a, next) && ok;
    if (prev != a && prev != next) ok = check_channel(V, a, prev) && ok;
  }
  return ok;
}

/* ------------------------------------------------- phase 2: stage order */

enum { IN_ACT = 1, DONE_F = 2, IN_GRAD = 4, DONE_B = 8, DONE_W = 16 };

/* Per stage: what has happened to each (chunk, microbatch) so far. */
typedef struct Order {
  uint8_t *state; /* v * m */
  int *nb, *nw;   /* backwards and weight gradients done per chunk */
  uint8_t *reduced;
  uint8_t *has_w;  /* per chunk: the stage's table has W actions for it */
  int stash, peak, held, peak_held;
  bool stepped;
} Order;

/* Whether F's input or B's output gradient is there: received, or
 * computed on this stage by the neighbouring virtual stage (its chunk is
 * k / p) when both are here. */
static bool input_ready(Verifier *V, Order *o, int r, const RtSchedAction *a) {
  int vs = rt_sched_vstage(V->s, r, a->chunk), c = a->chunk, mb = a->mb;
  if (a->kind == RT_SCHED_F) {
    if (vs == 0) return true;
    if (stage_of(V, vs - 1) == r) return o->state[(vs - 1) / V->p * V->m + mb] & DONE_F;
    return o->state[c * V->m + mb] & IN_ACT;
  }
  if (vs == V->pv - 1) return true;
  if (stage_of(V, vs + 1) == r) return o->state[(vs + 1) / V->p * V->m + mb] & DONE_B;
  return o->state[c * V->m + mb] & IN_GRAD;
}

static void order_reduce(Verifier *V, Order *o, int r, int i) {
  const RtSchedAction *a = &V->s->stages[r].actions[i];
  char w[160];
  if (o->reduced[a->mb]) err(&V->errs, "%s: the bucket is reduced twice", where(V->s, r, i, w, sizeof w));
  o->reduced[a->mb] = 1;
  for (int c = 0; c < V->v; c++) {
    if (a->chunk >= 0 && c != a->chunk) continue;
    if (o->nb[c] < V->m || (o->nw[c] > 0 && o->nw[c] < V->m)) {
      err(&V->errs, "%s: chunk %d's gradients are not final yet (%d of %d backwards done)",
          where(V->s, r, i, w, sizeof w), c, o->nw[c] > 0 ? o->nw[c] : o->nb[c], V->m);
      return;
    }
  }
}

static void order_step(Verifier *V, Order *o, int r, int i) {
  const RtSchedTable *t = &V->s->stages[r];
  char w[160];
  if (o->stepped) err(&V->errs, "%s: a second optimizer step", where(V->s, r, i, w, sizeof w));
  o->stepped = true;
  if (i != t->n - 1)
    err(&V->errs, "%s: actions follow the optimizer step", where(V->s, r, i, w, sizeof w));
  for (int c = 0; c < V->v; c++)
    if (o->nb[c] < V->m || (o->nw[c] > 0 && o->nw[c] < V->m)) {
      err(&V->errs, "%s: chunk %d's backward is not complete", where(V->s, r, i, w, sizeof w), c);
      break;
    }
  for (int k = 0; k < V->s->nbuckets; k++)
    if (!o->reduced[k]) {
      err(&V->errs, "%s: bucket %d is never reduced before it", where(V->s, r, i, w, sizeof w), k);
      break;
    }
}

/* One action of stage r, in table order. */
static void order_action(Verifier *V, Order *o, int r, int i) {
  const RtSchedAction *a = &V->s->stages[r].actions[i];
  char w[160];
  const char *bad = NULL;
  if (a->kind == RT_SCHED_REDUCE_GRADS) return order_reduce(V, o, r, i);
  if (a->kind == RT_SCHED_OPT_STEP) return order_step(V, o, r, i);
  uint8_t *st = &o->state[a->chunk * V->m + a->mb];
  switch (a->kind) {
  case RT_SCHED_F:
    if (*st & DONE_F) bad = "the forward runs twice";
    else if (!input_ready(V, o, r, a)) bad = "the forward runs before its input is received";
    *st |= DONE_F;
    if (++o->stash > o->peak) o->peak = o->stash;
    if (++o->held > o->peak_held) o->peak_held = o->held;
    break;
  case RT_SCHED_B:
    if (*st & DONE_B) bad = "the backward runs twice";
    else if (!(*st & DONE_F)) bad = "the backward runs before its forward";
    else if (!input_ready(V, o, r, a)) bad = "the backward runs before its output gradient is received";
    *st |= DONE_B;
    o->nb[a->chunk]++;
    o->stash--;
    if (!o->has_w[a->chunk]) o->held--;
    break;
  case RT_SCHED_W:
    if (*st & DONE_W) bad = "the weight gradient runs twice";
    else if (!(*st & DONE_B)) bad = "the weight gradient runs before its backward";
    *st |= DONE_W;
    o->nw[a->chunk]++;
    o->held--;
    break;
  case RT_SCHED_SEND:
    if (!(*st & (a->msg == RT_SCHED_ACT ? DONE_F : DONE_B)))
      bad = a->msg == RT_SCHED_ACT ? "sends the output of a forward that has not run"
                                   : "sends the gradient of a backward that has not run";
    break;
  case RT_SCHED_RECV:
    if (*st & (a->msg == RT_SCHED_ACT ? DONE_F : DONE_B))
      bad = "receives the input of an action that has already run";
    *st |= a->msg == RT_SCHED_ACT ? IN_ACT : IN_GRAD;
    break;
  }
  if (bad) err(&V->errs, "%s: %s", where(V->s, r, i, w, sizeof w), bad);
}

static void check_order(Verifier *V, SchedReport *rep) {
  Order o = {.state = xcalloc((size_t)V->v * V->m, 1), .nb = xcalloc((size_t)V->v, sizeof(int)),
             .nw = xcalloc((size_t)V->v, sizeof(int)),
             .reduced = xcalloc((size_t)V->s->nbuckets + 1, 1),
             .has_w = xcalloc((size_t)V->v, 1)};
  for (int r = 0; r < V->p; r++) {
    const RtSchedTable *t = &V->s->stages[r];
    memset(o.state, 0, (size_t)V->v * V->m);
    memset(o.nb, 0, sizeof(int) * (size_t)V->v);
    memset(o.nw, 0, sizeof(int) * (size_t)V->v);
    memset(o.reduced, 0, (size_t)V->s->nbuckets + 1);
    o.stash = o.peak = o.held = o.peak_held = 0, o.stepped = false;
    memset(o.has_w, 0, (size_t)V->v);
    for (int i = 0; i < t->n; i++)
      if (t->actions[i].kind == RT_SCHED_W && t->actions[i].chunk >= 0 && t->actions[i].chunk < V->v)
        o.has_w[t->actions[i].chunk] = 1;
    for (int i = 0; i < t->n; i++)
      if (fields_ok(V, r, i)) order_action(V, &o, r, i);
    rep->peak_stash[r] = o.peak;
    rep->peak_held[r] = o.peak_held;
    for (int c = 0; c < V->v; c++)
      for (int mb = 0; mb < V->m; mb++) {
        uint8_t st = o.state[c * V->m + mb];
        if ((st & (DONE_F | DONE_B)) != (DONE_F | DONE_B)) {
          err(&V->errs, "stage %d: %s%dc%d never runs", r, st & DONE_F ? "B" : "F", mb, c);
          c = V->v; /* one line per stage is enough */
          break;
        }
        if (o.nw[c] > 0 && !(st & DONE_W)) {
          err(&V->errs, "stage %d: W%dc%d never runs, though chunk %d has weight-gradient steps",
              r, mb, c, c);
          c = V->v;
          break;
        }
      }
    if (!o.stepped) err(&V->errs, "stage %d: the table has no OPT_STEP", r);
  }
  free(o.state), free(o.nb), free(o.nw), free(o.reduced), free(o.has_w);
}

/* --------------------------------------------- phase 3: joint execution */

typedef struct Run {
  int pc;
  int batch_end; /* one past the batch being waited on */
  int pending;   /* its operations whose peer has not posted yet */
  bool waiting;
  double t, busy;
} Run;

/* Posts the batch starting at run->pc: each operation that finds its
 * match already posted releases one pending operation of the peer (which
 * is waiting on it), waking the peer when that was its last. */
static void post_batch(Verifier *V, Run *runs, int *ready, int *nready, int r) {
  const RtSchedTable *t = &V->s->stages[r];
  Run *run = &runs[r];
  int end = run->pc + 1;
  while (end < t->n && (t->actions[end].flags & RT_SCHED_JOIN)) end++;
  run->batch_end = end, run->pending = 0, run->waiting = true;
  for (int i = run->pc; i < end; i++) {
    Slot *slot = slot_of(V, r, i);
    bool send = t->actions[i].kind == RT_SCHED_SEND;
    double *mine = send ? &slot->send_t : &slot->recv_t, theirs = send ? slot->recv_t : slot->send_t;
    *mine = run->t;
    if (theirs < 0) {
      run->pending++;
      continue;
    }
    int peer = send ? slot->recv_stage : slot->send_stage;
    if (--runs[peer].pending == 0) ready[(*nready)++] = peer;
  }
}

static void run_stage(Verifier *V, Run *runs, int *ready, int *nready, int r, const SchedTimes *tm,
                      SchedReport *rep) {
  const RtSchedTable *t = &V->s->stages[r];
  Run *run = &runs[r];
  while (run->pc < t->n) {
    const RtSchedAction *a = &t->actions[run->pc];
    if (is_msg(a)) {
      if (!run->waiting) post_batch(V, runs, ready, nready, r);
      if (run->pending > 0) return; /* woken when the last match is posted */
      /* Every operation of the batch has been matched: it completes when
       * the later of each pair was posted. */
      double done = run->t;
      for (int i = run->pc; i < run->batch_end; i++) {
        Slot *slot = slot_of(V, r, i);
        if (slot->send_t > done) done = slot->send_t;
        if (slot->recv_t > done) done = slot->recv_t;
      }
      for (int i = run->pc; rep->start && i < run->batch_end; i++)
        rep->start[r][i] = run->t, rep->end[r][i] = done;
      run->t = done, run->pc = run->batch_end, run->waiting = false;
      continue;
    }
    double d = a->kind == RT_SCHED_F ? tm->f : a->kind == RT_SCHED_B ? tm->b
             : a->kind == RT_SCHED_W ? tm->w : 0;
    if (rep->start) rep->start[r][run->pc] = run->t, rep->end[r][run->pc] = run->t + d;
    run->t += d, run->busy += d, run->pc++;
  }
}

/* The first operation of stage r's blocked batch whose match is not posted. */
static int unmatched_op(Verifier *V, Run *runs, int r) {
  const RtSchedTable *t = &V->s->stages[r];
  for (int i = runs[r].pc; i < runs[r].batch_end; i++) {
    Slot *slot = slot_of(V, r, i);
    if ((t->actions[i].kind == RT_SCHED_SEND ? slot->recv_t : slot->send_t) < 0) return i;
  }
  unreachable();
}

/* The stage at the other end of stage r's operation i, and where. */
static int peer_of(Verifier *V, int r, int i, int *pc) {
  Slot *slot = slot_of(V, r, i);
  bool send = V->s->stages[r].actions[i].kind == RT_SCHED_SEND;
  *pc = send ? slot->recv_pc : slot->send_pc;
  return send ? slot->recv_stage : slot->send_stage;
}

/* A hang: every stuck stage waits for a peer that is stuck too, so the
 * waits close a cycle. The report lists it from the stage that got stuck
 * first in time (the lowest-numbered on a tie): that is the first stage
 * and action that would hang. */
static void report_hang(Verifier *V, Run *runs) {
  int hung = 0, start = -1;
  for (int r = 0; r < V->p; r++)
    if (runs[r].pc < V->s->stages[r].n) {
      hung++;
      if (start < 0 || runs[r].t < runs[start].t) start = r;
    }
  /* Walk the waits until a stage repeats; order[] holds the walk. */
  int *seen = xcalloc((size_t)V->p, sizeof(int)), *order = xcalloc((size_t)V->p + 1, sizeof(int));
  int len = 0, r = start, pc;
  while (!seen[r]) {
    seen[r] = len + 1;
    order[len++] = r;
    r = peer_of(V, r, unmatched_op(V, runs, r), &pc);
  }
  int from = seen[r] - 1, first = from;
  for (int k = from; k < len; k++)
    if (runs[order[k]].t < runs[order[first]].t ||
        (runs[order[k]].t == runs[order[first]].t && order[k] < order[first]))
      first = k;
  err(&V->errs, "deadlock: %d of %d stages wait forever; these wait for each other:", hung, V->p);
  for (int k = 0; k < len - from; k++) {
    int q = order[from + (first - from + k) % (len - from)], op = unmatched_op(V, runs, q);
    int peer = peer_of(V, q, op, &pc);
    char w[160], w2[160];
    err(&V->errs, "  %s waits for %s, which stage %d never reaches", where(V->s, q, op, w, sizeof w),
        where(V->s, peer, pc, w2, sizeof w2), peer);
  }
  free(seen), free(order);
}

static void simulate(Verifier *V, const SchedTimes *tm, SchedReport *rep) {
  Run *runs = xcalloc((size_t)V->p, sizeof(Run));
  int *ready = xcalloc((size_t)V->p * 2 + 1, sizeof(int)), nready = 0;
  /* A stage is on the ready stack at most once per wake-up, and a wake-up
   * needs it to be waiting, so 2p entries suffice. */
  for (int r = V->p - 1; r >= 0; r--) ready[nready++] = r;
  while (nready > 0) {
    int r = ready[--nready];
    run_stage(V, runs, ready, &nready, r, tm, rep);
  }
  bool hang = false;
  for (int r = 0; r < V->p; r++) hang = hang || runs[r].pc < V->s->stages[r].n;
  if (hang) report_hang(V, runs);
  rep->makespan = rep->ideal = 0;
  for (int r = 0; r < V->p; r++) {
    rep->busy[r] = runs[r].busy;
    if (runs[r].t > rep->makespan) rep->makespan = runs[r].t;
    if (runs[r].busy > rep->ideal) rep->ideal = runs[r].busy;
  }
  double bubble = rep->makespan - rep->ideal;
  rep->bubble_fraction = rep->ideal > 0 ? bubble / rep->ideal : 0;
  rep->idle_fraction = rep->makespan > 0 ? bubble / rep->makespan : 0;
  free(runs), free(ready);
}

/* ----------------------------------------------------------------- entry */

bool sched_verify(const RtSchedule *s, const SchedTimes *times, bool timeline, SchedReport *rep) {
  memset(rep, 0, sizeof *rep);
  SchedTimes tm = times ? *times : (SchedTimes){1, 1, 1};
  if (tm.f <= 0) tm.f = 1;
  if (tm.b <= 0) tm.b = 1;
  if (tm.w <= 0) tm.w = 1;
  if (s->pp < 1 || s->vpp < 1 || s->microbatches < 1 || s->nshapes < 1 || s->pp > INT16_MAX) {
    rep->error = strdup("the schedule's p, v, m or shapes are out of range\n");
    return false;
  }
  Verifier V = {.s = s, .p = s->pp, .v = s->vpp, .m = s->microbatches, .pv = s->pp * s->vpp};
  int64_t nslots = 2LL * V.pv * V.m;
  V.slots = malloc(sizeof(Slot) * (size_t)nslots);
  if (!V.slots) die("out of memory verifying a schedule");
  for (int64_t k = 0; k < nslots; k++)
    V.slots[k] = (Slot){.send_pc = -1, .recv_pc = -1, .send_stage = -1, .recv_stage = -1,
                        .send_t = -1, .recv_t = -1};
  rep->nstages = V.p;
  rep->peak_stash = xcalloc((size_t)V.p, sizeof(int));
  rep->peak_held = xcalloc((size_t)V.p, sizeof(int));
  rep->busy = xcalloc((size_t)V.p, sizeof(double));
  if (timeline) {
    rep->start = xcalloc((size_t)V.p, sizeof(double *));
    rep->end = xcalloc((size_t)V.p, sizeof(double *));
    for (int r = 0; r < V.p; r++) {
      rep->start[r] = xcalloc((size_t)s->stages[r].n, sizeof(double));
      rep->end[r] = xcalloc((size_t)s->stages[r].n, sizeof(double));
    }
  }
  check_messages(&V);
  for (int r = 0; r < V.p; r++)
    for (int i = 0; i < s->stages[r].n; i++) rep->messages += s->stages[r].actions[i].kind == RT_SCHED_SEND;
  /* The simulation needs every message paired, and paired with the
   * operation the runtime pairs it with, which holds when the posting
   * orders agree; the per-stage order needs neither, and its errors are
   * worth reporting alongside. */
  bool paired = V.errs.count == 0;
  if (paired && check_posting_order(&V)) simulate(&V, &tm, rep);
  check_order(&V, rep);
  if (V.errs.count > MAX_ERROR_LINES) {
    char more[64];
    snprintf(more, sizeof more, "... and %d more", V.errs.count - MAX_ERROR_LINES);
    append(&V.errs, more);
  }
  free(V.slots);
  rep->error = V.errs.buf;
  return V.errs.count == 0;
}

void sched_report_free(SchedReport *rep) {
  for (int r = 0; rep->start && r < rep->nstages; r++) free(rep->start[r]), free(rep->end[r]);
  free(rep->start), free(rep->end);
  free(rep->error);
  free(rep->peak_stash);
  free(rep->peak_held);
  free(rep->busy);
  memset(rep, 0, sizeof *rep);
}
