/* Pipeline schedules as data: the builder core, the registry and the three
 * schedules (GPipe, 1F1B, Megatron-LM's interleaved 1F1B).
 *
 * A builder writes, for every stage, the order of its forwards and
 * backwards and where its messages are posted and batched. The core
 * computes each message's peer from the placement (chunk c of stage r is
 * virtual stage c*p + r), adds the gradient reductions and the optimizer
 * step, and hands the tables to the verifier, which must accept them. */
#include "schedule.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"

/* Limits that keep every field of the format in range and a table's size
 * sane: p and v fit int16, and p*v*m (the compute actions of all stages,
 * halved) stays below 2^22, about 300 MB of tables. */
enum { SCHED_MAX_PV = 32767, SCHED_MAX_WORK = 1 << 22 };

/* One stage's table while it grows. */
typedef struct Stage {
  RtSchedAction *a;
  int n, cap;
  bool in_batch;  /* between sched_batch_begin and sched_batch_end */
  int batch_len;  /* messages so far in the open batch */
} Stage;

struct SchedBuilder {
  int p, v, m;
  bool vshape; /* the V placement (SchedDef.vshape) */
  Stage *stages;
  char *error; /* malloc'ed, the first sched_fail */
};

static void *xmalloc(size_t n) {
  void *q = malloc(n ? n : 1);
  if (!q) die("out of memory building a schedule");
  return q;
}

static void *xcalloc(size_t n, size_t size) {
  void *q = calloc(n ? n : 1, size ? size : 1);
  if (!q) die("out of memory building a schedule");
  return q;
}

bool sched_fail(SchedBuilder *b, const char *fmt, ...) {
  if (b->error) return false; /* the first reason is the one worth reading */
  va_list ap;
  va_start(ap, fmt);
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  b->error = xmalloc(strlen(buf) + 1);
  strcpy(b->error, buf);
  return false;
}

static void push(SchedBuilder *b, int r, RtSchedAction a) {
  if (r < 0 || r >= b->p) die("schedule builder: stage %d out of range (p = %d)", r, b->p);
  Stage *s = &b->stages[r];
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 64;
    RtSchedAction *grown = realloc(s->a, sizeof *grown * (size_t)s->cap);
    if (!grown) die("out of memory building a schedule");
    s->a = grown;
  }
  s->a[s->n++] = a;
}

/* A compute action closes nothing: a builder that forgets sched_batch_end
 * has a bug, and the table it would write could not be executed. */
static void compute(SchedBuilder *b, int r, RtSchedKind kind, int c, int mb) {
  if (r >= 0 && r < b->p && b->stages[r].in_batch)
    die("schedule builder: %s inside a message batch on stage %d", rt_sched_kind_name(kind), r);
  if (c < 0 || c >= b->v || mb < 0 || mb >= b->m)
    die("schedule builder: %s(chunk %d, mb %d) out of range", rt_sched_kind_name(kind), c, mb);
  push(b, r, (RtSchedAction){.kind = (uint8_t)kind, .chunk = (int16_t)c, .mb = mb});
}

void sched_f(SchedBuilder *b, int r, int c, int mb) { compute(b, r, RT_SCHED_F, c, mb); }
void sched_b(SchedBuilder *b, int r, int c, int mb) { compute(b, r, RT_SCHED_B, c, mb); }
void sched_w(SchedBuilder *b, int r, int c, int mb) { compute(b, r, RT_SCHED_W, c, mb); }

/* The virtual stage at the other end of the message, or -1 when the
 * message does not exist. */
static int msg_peer_vstage(const SchedBuilder *b, int r, RtSchedMsg msg, bool send, int c) {
  int vs = rt_vstage(b->p, b->vshape, r, c), pv = b->p * b->v;
  /* Activations go up the virtual pipeline, gradients down: a send of an
   * activation and a receive of a gradient face vs + 1. */
  int other = (msg == RT_SCHED_ACT) == send ? vs + 1 : vs - 1;
  if (other < 0 || other >= pv || rt_vstage_stage(b->p, b->vshape, other) == r) return -1;
  return other;
}

static void message(SchedBuilder *b, int r, RtSchedKind kind, RtSchedMsg msg, int c, int mb) {
  if (c < 0 || c >= b->v || mb < 0 || mb >= b->m)
    die("schedule builder: %s(chunk %d, mb %d) out of range", rt_sched_kind_name(kind), c, mb);
  int other = msg_peer_vstage(b, r, msg, kind == RT_SCHED_SEND, c);
  if (other < 0) return;
  Stage *s = &b->stages[r];
  uint8_t flags = s->in_batch && s->batch_len > 0 ? RT_SCHED_JOIN : 0;
  if (s->in_batch) s->batch_len++;
  push(b, r,
       (RtSchedAction){.kind = (uint8_t)kind, .msg = (uint8_t)msg, .flags = flags,
                       .chunk = (int16_t)c,
                       .peer = (int16_t)rt_vstage_stage(b->p, b->vshape, other), .mb = mb});
}

void sched_send(SchedBuilder *b, int r, RtSchedMsg msg, int c, int mb) {
  message(b, r, RT_SCHED_SEND, msg, c, mb);
}

void sched_recv(SchedBuilder *b, int r, RtSchedMsg msg, int c, int mb) {
  message(b, r, RT_SCHED_RECV, msg, c, mb);
}

void sched_batch_begin(SchedBuilder *b, int r) {
  if (b->stages[r].in_batch) die("schedule builder: nested batch on stage %d", r);
  b->stages[r].in_batch = true;
  b->stages[r].batch_len = 0;
}

void sched_batch_end(SchedBuilder *b, int r) {
  if (!b->stages[r].in_batch) die("schedule builder: batch end without begin on stage %d", r);
  b->stages[r].in_batch = false;
}

/* ------------------------------------------------------------ schedules */

static bool one_chunk(SchedBuilder *b, const SchedOptions *o, const char *name) {
  if (o->vpp_group > 0)
    return sched_fail(b, "--vpp-group groups the microbatches of the interleaved schedule; the "
                         "%s schedule has no groups", name);
  if (o->vpp == 1) return true;
  return sched_fail(b,
                    "the %s schedule runs one chunk per stage, but v = %d "
                    "(use --schedule interleaved, or --vpp 1)",
                    name, o->vpp);
}

/* GPipe (Huang et al.): every forward, then every backward, each receiving
 * its input just before and sending its output just after. Messages go
 * one at a time: each stage only ever waits on its neighbours' progress
 * along the pipeline, so rendezvous cannot hang. */
static bool build_gpipe(SchedBuilder *b, const SchedOptions *o) {
  if (!one_chunk(b, o, "gpipe")) return false;
  for (int r = 0; r < o->pp; r++) {
    for (int i = 0; i < o->microbatches; i++) {
      sched_recv(b, r, RT_SCHED_ACT, 0, i);
      sched_f(b, r, 0, i);
      sched_send(b, r, RT_SCHED_ACT, 0, i);
    }
    for (int i = 0; i < o->microbatches; i++) {
      sched_recv(b, r, RT_SCHED_GRAD, 0, i);
      sched_b(b, r, 0, i);
      sched_send(b, r, RT_SCHED_GRAD, 0, i);
    }
  }
  return true;
}

/* Two messages posted as one batch (one may not exist). */
static void pair(SchedBuilder *b, int r, RtSchedKind k1, RtSchedMsg m1, int c1, int mb1,
                 RtSchedKind k2, RtSchedMsg m2, int c2, int mb2) {
  sched_batch_begin(b, r);
  if (k1 == RT_SCHED_SEND) sched_send(b, r, m1, c1, mb1); else sched_recv(b, r, m1, c1, mb1);
  if (k2 == RT_SCHED_SEND) sched_send(b, r, m2, c2, mb2); else sched_recv(b, r, m2, c2, mb2);
  sched_batch_end(b, r);
}

/* 1F1B (PipeDream-Flush), as Megatron-LM's
 * forward_backward_pipelining_without_interleaving runs it: stage r warms
 * up with p - r - 1 forwards, alternates one forward and one backward,
 * and drains the remaining backwards. In the steady state the send of a
 * forward's output is batched with the receive of the gradient the next
 * backward needs (send_forward_recv_backward), and the send of that
 * backward's input gradient with the receive of the next forward's input
 * (send_backward_recv_forward): alone, each send would wait for a
 * neighbour that is itself waiting to send. */
static bool build_1f1b(SchedBuilder *b, const SchedOptions *o) {
  if (!one_chunk(b, o, "1f1b")) return false;
  int p = o->pp, m = o->microbatches;
  for (int r = 0; r < p; r++) {
    int warm = p - r - 1 < m ? p - r - 1 : m, rest = m - warm;
    for (int i = 0; i < warm; i++) {
      sched_recv(b, r, RT_SCHED_ACT, 0, i);
      sched_f(b, r, 0, i);
      sched_send(b, r, RT_SCHED_ACT, 0, i);
    }
    if (rest > 0) sched_recv(b, r, RT_SCHED_ACT, 0, warm);
    for (int i = 0; i < rest; i++) {
      sched_f(b, r, 0, warm + i);
      pair(b, r, RT_SCHED_SEND, RT_SCHED_ACT, 0, warm + i, RT_SCHED_RECV, RT_SCHED_GRAD, 0, i);
      sched_b(b, r, 0, i);
      if (i == rest - 1)
        sched_send(b, r, RT_SCHED_GRAD, 0, i);
      else
        pair(b, r, RT_SCHED_SEND, RT_SCHED_GRAD, 0, i, RT_SCHED_RECV, RT_SCHED_ACT, 0, warm + i + 1);
    }
    for (int i = rest; i < m; i++) {
      sched_recv(b, r, RT_SCHED_GRAD, 0, i);
      sched_b(b, r, 0, i);
      sched_send(b, r, RT_SCHED_GRAD, 0, i);
    }
  }
  return true;
}

/* The interleaved schedule's bookkeeping for one stage: the order of its
 * forward steps (Megatron-LM's, which docs/schedules.md describes under
 * "interleaved"; the k-th backward step takes the k-th position with the
 * chunk reversed), and the receives in the order the stage's peers send
 * (see interleaved). */
typedef struct Interleave {
  int p, v, r;
  const int *mb, *chunk;   /* [m v]: the microbatch and chunk of the k-th forward step */
  int next_act, next_grad; /* the next forward / backward step still to receive for */
} Interleave;

static int fchunk(const Interleave *s, int k) { return s->chunk[k]; }
static int bchunk(const Interleave *s, int k) { return s->v - 1 - s->chunk[k]; }
static int step_mb(const Interleave *s, int k) { return s->mb[k]; }

/* Megatron-LM's schedule table (get_schedule_table): the microbatches in
 * groups of n, each group through chunk 0, then chunk 1, ..., the last
 * group taking what remains. With n = p and m a multiple of p it is the
 * order of groups of p that earlier Megatron-LM versions wrote as a
 * formula. */
static void interleave_order(int v, int m, int n, int *mb, int *chunk) {
  int k = 0;
  for (int first = 0; first < m; first += n) {
    int end = first + n >= m ? m : first + n;
    for (int c = 0; c < v; c++)
      for (int i = first; i < end; i++) mb[k] = i, chunk[k++] = c;
  }
}

/* Receives the input of the next forward step that has one to receive
 * (the first virtual stage has none). */
static void recv_next_act(SchedBuilder *b, Interleave *s, int total) {
  while (s->next_act < total && fchunk(s, s->next_act) * s->p + s->r == 0) s->next_act++;
  if (s->next_act >= total) die("interleaved: stage %d receives more activations than it uses", s->r);
  sched_recv(b, s->r, RT_SCHED_ACT, fchunk(s, s->next_act), step_mb(s, s->next_act));
  s->next_act++;
}

/* Receives the output gradient of the next backward step that needs one
 * (the last virtual stage computes its own). */
static void recv_next_grad(SchedBuilder *b, Interleave *s, int total) {
  int last = s->p * s->v - 1;
  while (s->next_grad < total && bchunk(s, s->next_grad) * s->p + s->r == last) s->next_grad++;
  if (s->next_grad >= total) die("interleaved: stage %d receives more gradients than it uses", s->r);
  sched_recv(b, s->r, RT_SCHED_GRAD, bchunk(s, s->next_grad), step_mb(s, s->next_grad));
  s->next_grad++;
}

/* One of Megatron's batched exchanges: send_prev (gradient), recv_prev
 * (activation), send_next (activation), recv_next (gradient), each only
 * when asked for (k < 0: nothing to send).
 *
 * With p = 2 the previous and the next stage are one peer, and messages
 * to one peer match in posting order (there are no tags): Megatron's
 * order would send the gradient before the activation while the peer
 * receives the activation first, swapping the two tensors. There the
 * gradient is received first, as it is sent. For p > 2 each kind has its
 * own peer and Megatron's order stands. */
static void exchange(SchedBuilder *b, Interleave *s, int total, int send_grad_k, bool recv_prev,
                     int send_act_k, bool recv_next) {
  int r = s->r;
  bool grad_first = s->p == 2;
  sched_batch_begin(b, r);
  if (send_grad_k >= 0)
    sched_send(b, r, RT_SCHED_GRAD, bchunk(s, send_grad_k), step_mb(s, send_grad_k));
  if (recv_next && grad_first) recv_next_grad(b, s, total);
  if (recv_prev && s->p > 1) recv_next_act(b, s, total);
  if (send_act_k >= 0)
    sched_send(b, r, RT_SCHED_ACT, fchunk(s, send_act_k), step_mb(s, send_act_k));
  if (recv_next && !grad_first && s->p > 1) recv_next_grad(b, s, total);
  sched_batch_end(b, r);
}

/* Whether the first stage receives an activation in the batch of forward
 * step k, or the last stage a gradient in that of backward step k
 * (Megatron-LM's recv_tensor_from_previous_stage): these stages lead the
 * other end of the ring the virtual pipeline wraps by p - 1 steps, so
 * they receive what that end produced p - 1 steps before, unless it was
 * the last chunk's output (or, going back, the first chunk's gradient),
 * which goes nowhere. */
static bool leading_receives(const Interleave *s, int k, bool forward) {
  if (k < s->p - 1) return false;
  return forward ? fchunk(s, k - (s->p - 1)) != s->v - 1 : bchunk(s, k - (s->p - 1)) != 0;
}

/* Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_
 * interleaving, batched p2p without overlap), for one stage. The order of
 * compute is Megatron-LM's: W = 2(p - r - 1) + (v - 1)N warm-up forwards
 * for microbatch groups of N (at most m*v), then one forward and one
 * backward at a time, then the remaining backwards. Each step ends with
 * ONE batch that sends what the step produced and receives for later
 * steps; receives are posted in the order the neighbour sends (which is
 * the order this stage consumes), so the first stage may receive a
 * chunk's input several steps ahead of its forward, as Megatron does. The
 * recv_prev / recv_next conditions are Megatron's. */
static void interleave_stage(SchedBuilder *b, const Interleave *order, int n, int m, int r) {
  Interleave st = *order, *s = &st;
  int p = s->p, v = s->v;
  s->r = r;
  int total = m * v, warm = 2 * (p - r - 1) + (v - 1) * n;
  if (warm > total) warm = total;
  int rest = total - warm;
  bool first = r == 0, last = r == p - 1;
  if (!first && p > 1) recv_next_act(b, s, total);
  for (int k = 0; k < warm; k++) {
    sched_f(b, r, fchunk(s, k), step_mb(s, k));
    bool recv_prev = (!first || leading_receives(s, k, true)) && k != total - 1;
    bool recv_next = k == warm - 1 && !last;
    exchange(b, s, total, -1, recv_prev, k, recv_next);
  }
  for (int k = 0; k < rest; k++) {
    int fk = k + warm;
    sched_f(b, r, fchunk(s, fk), step_mb(s, fk));
    sched_b(b, r, bchunk(s, k), step_mb(s, k));
    bool recv_prev = !first || leading_receives(s, fk, true);
    bool recv_next = !last || leading_receives(s, k, false);
    if (k == rest - 1) recv_prev = false;
    exchange(b, s, total, k, recv_prev, fk, recv_next);
  }
  for (int k = rest; k < total; k++) {
    sched_b(b, r, bchunk(s, k), step_mb(s, k));
    bool recv_next = (!last || leading_receives(s, k, false)) && k != total - 1;
    exchange(b, s, total, k, false, -1, recv_next);
  }
}

/* The group sizes N that Megatron-LM accepts for m: p <= N <= m, and
 * the last group, when short, of at least p (0 < m mod N < p is refused),
 * written into buf as "--vpp-group 4, 6 or 8" (the first few). */
static int groups_that_work(int p, int m, char *buf, int size) {
  int found = 0, shown[6];
  for (int n = p; n <= m; n++)
    if (m % n == 0 || m % n >= p) {
      if (found < 6) shown[found] = n;
      found++;
    }
  buf[0] = 0;
  int k = found < 6 ? found : 6;
  for (int i = 0; i < k; i++)
    snprintf(buf + strlen(buf), (size_t)size - strlen(buf), "%s%d",
             i == 0 ? "--vpp-group " : i == k - 1 && found <= 6 ? " or " : ", ", shown[i]);
  if (found > 6) snprintf(buf + strlen(buf), (size_t)size - strlen(buf), ", ... (%d values)", found);
  return found;
}

/* Megatron-LM's conditions on m and the group size n; false after
 * sched_fail with what would work. */
static bool check_groups(SchedBuilder *b, int p, int m, int n, bool given) {
  char would[160];
  if (m < p)
    return sched_fail(b, "the interleaved schedule needs at least as many microbatches as "
                         "pipeline stages, but m = %d < p = %d (Megatron-LM's rule); m = %d would do",
                      m, p, p);
  if (n < p || n > m) {
    groups_that_work(p, m, would, sizeof would);
    return sched_fail(b, "the interleaved schedule's microbatch group (--vpp-group) must hold "
                         "p = %d to m = %d microbatches, not %d; %s would do", p, m, n, would);
  }
  if (m % n == 0 || m % n >= p) return true;
  groups_that_work(p, m, would, sizeof would);
  if (given)
    return sched_fail(b, "the interleaved schedule takes the m = %d microbatches in groups of "
                         "--vpp-group %d, which leaves a last group of %d, fewer than the p = %d "
                         "stages (Megatron-LM's rule); %s would do", m, n, m % n, p, would);
  return sched_fail(b, "the interleaved schedule needs the number of microbatches m = %d to be "
                       "a multiple of the pipeline stages p = %d (Megatron-LM's rule) with the "
                       "default microbatch group of p; m = %d or m = %d would do, or %s",
                    m, p, m / p * p, (m / p + 1) * p, would);
}

static bool build_interleaved(SchedBuilder *b, const SchedOptions *o) {
  int p = o->pp, v = o->vpp, m = o->microbatches;
  int n = o->vpp_group > 0 ? o->vpp_group : p;
  if (v < 2)
    return sched_fail(b, "the interleaved schedule needs v > 1 chunks per stage (--vpp); "
                         "with v = 1 use --schedule 1f1b");
  if (!check_groups(b, p, m, n, o->vpp_group > 0)) return false;
  int *mb = xmalloc(sizeof(int) * (size_t)m * (size_t)v);
  int *chunk = xmalloc(sizeof(int) * (size_t)m * (size_t)v);
  interleave_order(v, m, n, mb, chunk);
  Interleave order = {.p = p, .v = v, .mb = mb, .chunk = chunk};
  for (int r = 0; r < p; r++) interleave_stage(b, &order, n, m, r);
  free(mb), free(chunk);
  return true;
}

/* Every schedule here idles for p - 1 forward-backward pairs a step: the
 * last stage starts p - 1 forwards late and the first ends p - 1
 * backwards late. */
static int bubble_p_minus_1(int p, int v, int m) {
  (void)v;
  (void)m;
  return p - 1;
}

static int warmup_gpipe(int p, int v, int m, int r) {
  (void)p;
  (void)r;
  return v * m;
}

static int warmup_1f1b(int p, int v, int m, int r) {
  (void)v;
  (void)m;
  return p - r - 1;
}

/* Megatron-LM's: two per later stage, and a round of p per extra chunk
 * (of N with a microbatch group of N, which the promise, made for the
 * default group, does not see; sched_test groups checks those). */
static int warmup_interleaved(int p, int v, int m, int r) {
  (void)m;
  return 2 * (p - r - 1) + (v - 1) * p;
}

const SchedDef sched_registry[] = {
    {"gpipe", "all forwards, then all backwards (GPipe); v = 1; stashes m microbatches",
     build_gpipe, bubble_p_minus_1, warmup_gpipe, NULL, false},
    {"1f1b", "one forward, one backward after a warm-up of p - r - 1 (PipeDream-Flush, "
     "Megatron-LM); v = 1; the default for v = 1", build_1f1b, bubble_p_minus_1, warmup_1f1b, NULL, false},
    {"interleaved", "Megatron-LM's interleaved 1F1B over v > 1 chunks per stage; m a multiple "
     "of p, or any m >= p with --vpp-group; bubble (p - 1)/(v m); the default for v > 1", build_interleaved, bubble_p_minus_1,
     warmup_interleaved, NULL, false},
    {"zb-h1", "zero bubble (Qi et al.): backward split into B (input gradient) and W (weight "
     "gradient), W put off into 1F1B's idle time; v = 1; at most p microbatches held; bubble "
     "(p - 1)/(3m) for m >= p", sched_build_zb_h1, NULL, NULL, sched_bubble_zb_h1, false},
    {"zb-v", "zero bubble over two chunks per stage in a V (chunk 0 of stage r is virtual "
     "stage r, chunk 1 virtual stage 2p - 1 - r), B and W split; v = 2; at most 1F1B's p "
     "microbatches of layers held; bubble below zb-h1's", sched_build_zb_v, NULL,
     NULL, sched_bubble_zb_v, true},
    {NULL, NULL, NULL, NULL, NULL, NULL, false},
};

const SchedDef *sched_find(const char *name) {
  for (const SchedDef *d = sched_registry; d->name; d++)
    if (strcmp(d->name, name) == 0) return d;
  return NULL;
}

const char *sched_default_name(int vpp) { return vpp > 1 ? "interleaved" : "1f1b"; }

const char *sched_names(void) {
  static char list[512];
  if (!list[0])
    for (const SchedDef *d = sched_registry; d->name; d++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", d->name);
  return list;
}

/* ----------------------------------------------------------------- core */

/* Inserts REDUCE_GRADS for each chunk's buckets right after the last
 * backward (or weight-gradient) action of that chunk, so each reduction
 * starts as soon as its gradients are final and overlaps the rest of the
 * backward; then the optimizer step. Without data parallelism there is
 * nothing to reduce. */
static void add_step_end(SchedBuilder *b, int r, const SchedOptions *o) {
  Stage *s = &b->stages[r];
  int per = o->buckets_per_chunk > 0 ? o->buckets_per_chunk : 1;
  if (o->dp > 1) {
    int *last = xmalloc(sizeof(int) * (size_t)b->v);
    for (int c = 0; c < b->v; c++) last[c] = -1;
    for (int i = 0; i < s->n; i++)
      if (s->a[i].kind == RT_SCHED_B || s->a[i].kind == RT_SCHED_W) last[s->a[i].chunk] = i;
    Stage out = {0};
    SchedBuilder tmp = {.p = 1, .v = b->v, .m = b->m, .stages = &out};
    for (int i = 0; i < s->n; i++) {
      push(&tmp, 0, s->a[i]);
      for (int c = 0; c < b->v; c++)
        if (last[c] == i)
          for (int k = 0; k < per; k++)
            push(&tmp, 0, (RtSchedAction){.kind = RT_SCHED_REDUCE_GRADS, .chunk = (int16_t)c,
                                           .mb = c * per + k});
    }
    free(last);
    free(s->a);
    s->a = out.a, s->n = out.n, s->cap = out.cap;
  }
  push(b, r, (RtSchedAction){.kind = RT_SCHED_OPT_STEP});
}

/* The checks every schedule shares, so that each field fits the format. */
static bool check_sizes(SchedBuilder *b, const SchedOptions *o) {
  if (o->pp < 1 || o->vpp < 1 || o->microbatches < 1)
    return sched_fail(b, "p, v and m must be positive (p = %d, v = %d, m = %d)", o->pp, o->vpp,
                      o->microbatches);
  if (o->pp > SCHED_MAX_PV || o->vpp > SCHED_MAX_PV || (int64_t)o->pp * o->vpp > SCHED_MAX_PV)
    return sched_fail(b, "p * v = %lld virtual stages is more than the %d a schedule can hold",
                      (long long)o->pp * o->vpp, SCHED_MAX_PV);
  if ((int64_t)o->pp * o->vpp * o->microbatches > SCHED_MAX_WORK)
    return sched_fail(b, "p * v * m = %lld is more than the %d forwards a schedule can tabulate",
                      (long long)o->pp * o->vpp * o->microbatches, SCHED_MAX_WORK);
  int per = o->buckets_per_chunk > 0 ? o->buckets_per_chunk : 1;
  if ((int64_t)per * o->vpp > INT16_MAX)
    return sched_fail(b, "%d gradient buckets per chunk are too many", per);
  return true;
}

RtSchedule *sched_build_unverified(const SchedDef *def, const SchedOptions *o, char **error) {
  SchedBuilder b = {.p = o->pp, .v = o->vpp, .m = o->microbatches, .vshape = def->vshape};
  *error = NULL;
  if (!check_sizes(&b, o)) {
    *error = b.error;
    return NULL;
  }
  b.stages = xcalloc((size_t)b.p, sizeof(Stage));
  bool ok = def->build(&b, o);
  if (ok && b.error) die("schedule %s failed without returning false", def->name);
  for (int r = 0; ok && r < b.p; r++) {
    if (b.stages[r].in_batch) die("schedule %s left a batch open on stage %d", def->name, r);
    add_step_end(&b, r, o);
  }
  if (!ok) {
    for (int r = 0; r < b.p; r++) free(b.stages[r].a);
    free(b.stages);
    *error = b.error ? b.error : strcpy(xmalloc(32), "the schedule failed");
    return NULL;
  }
  /* One block holds the header, the stage table and the shape; each
   * stage's actions are their own block (sched_free). */
  RtSchedule *s = xcalloc(1, sizeof *s + sizeof(RtSchedTable) * (size_t)b.p + sizeof(RtSchedShape));
  RtSchedTable *tables = (RtSchedTable *)(s + 1);
  RtSchedShape *shape = (RtSchedShape *)(tables + b.p);
  *shape = o->shape;
  for (int r = 0; r < b.p; r++) tables[r] = (RtSchedTable){b.stages[r].a, b.stages[r].n};
  free(b.stages);
  int per = o->buckets_per_chunk > 0 ? o->buckets_per_chunk : 1;
  *s = (RtSchedule){.name = def->name, .pp = o->pp, .vpp = o->vpp,
                    .microbatches = o->microbatches, .nbuckets = o->dp > 1 ? per * o->vpp : 0,
                    .shapes = shape, .nshapes = 1, .stages = tables, .vshape = def->vshape};
  return s;
}

RtSchedule *sched_build(const SchedDef *def, const SchedOptions *o, const SchedTimes *times,
                        bool timeline, SchedReport *rep) {
  memset(rep, 0, sizeof *rep);
  RtSchedule *s = sched_build_unverified(def, o, &rep->error);
  if (!s) return NULL;
  if (!sched_verify(s, times, timeline, rep)) {
    sched_free(s);
    return NULL;
  }
  return s;
}

bool sched_has_w(const RtSchedule *s) {
  for (int r = 0; r < s->pp; r++)
    for (int i = 0; i < s->stages[r].n; i++)
      if (s->stages[r].actions[i].kind == RT_SCHED_W) return true;
  return false;
}

void sched_free(RtSchedule *s) {
  if (!s) return;
  for (int r = 0; r < s->pp; r++) free((void *)s->stages[r].actions);
  free(s);
}

