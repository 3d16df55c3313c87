/* The zero-bubble schedules (Qi et al., "Zero Bubble Pipeline
 * Parallelism", ICLR'24): the backward of a chunk is split into B, the
 * gradient of its input, which the previous stage waits for, and W, the
 * gradients of its weights, which nobody waits for and which fills the
 * time a stage would otherwise idle (docs/schedules.md, "Zero-bubble
 * schedules").
 *
 * Both are built the same way: a simulation in unit time (F, B and W one
 * unit each, messages none) in which each free stage picks its next action
 * by the schedule's rule, then the tables are written from the times. A
 * message is posted by both of its stages at the moment its tensor is
 * produced, and every stage's messages of one moment with one neighbour
 * form one batch (in an order all stages share), so no stage ever waits on
 * a message in the verifier's rendezvous model: the step the verifier
 * measures is the simulated one, and nothing can hang (see post). */
#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"
#include "schedule.h"

enum { NONE = -1 };

/* One compute action of the simulation, and when it ran. */
typedef struct ZbAct {
  int t, r, kind, c, mb;
} ZbAct;

/* A message: produced at time t by (kind) of virtual stage vs. */
typedef struct ZbMsg {
  int t, msg, vs, mb;
} ZbMsg;

typedef struct Zb {
  int p, v, m, pv;
  bool vshape;
  int *stage_of, *chunk_of; /* [pv]: where each virtual stage is */
  int *act_at, *grad_at;  /* [pv m]: when F's input / B's output gradient is there; NONE */
  int *nf, *nb;           /* [p v]: the next microbatch to run F / B on, per chunk */
  int *fb, *fw;           /* [p]: microbatches with F done and B (fb) or W (fw) to come */
  int *wq, *wq_head, *wq_len; /* [p][v m]: each stage's B's awaiting their W, in order */
  ZbAct *acts;
  int nacts;
  ZbMsg *msgs;
  int nmsgs;
} Zb;

static void *zalloc(size_t n, size_t size) {
  void *q = calloc(n ? n : 1, size ? size : 1);
  if (!q) die("out of memory building a schedule");
  return q;
}

static int vstage(const Zb *z, int r, int c) { return sched_vstage(z->p, z->vshape, r, c); }

/* Whether F / B of stage r's chunk c can run at time t (its input is
 * there, and for B its forward has run). */
static bool can_f(const Zb *z, int r, int c, int t) {
  int i = r * z->v + c, mb = z->nf[i];
  if (mb >= z->m) return false;
  int at = z->act_at[vstage(z, r, c) * z->m + mb];
  return at != NONE && at <= t;
}

static bool can_b(const Zb *z, int r, int c, int t) {
  int i = r * z->v + c, mb = z->nb[i];
  if (mb >= z->nf[i]) return false;
  int at = z->grad_at[vstage(z, r, c) * z->m + mb];
  return at != NONE && at <= t;
}

/* A stage's rule: the action to start at time t, as kind and chunk
 * (the microbatch is the chunk's next, or for W the oldest B's), or
 * NONE to idle. */
typedef int (*ZbRule)(const Zb *z, int r, int t, int *chunk);

/* Runs stage r's action (kind, chunk c) from time t to t + 1. */
static void run(Zb *z, int r, int t, int kind, int c) {
  int i = r * z->v + c, vs = vstage(z, r, c), mb = 0, m = z->m;
  int *q = z->wq + (size_t)r * z->v * m;
  if (kind == RT_SCHED_F) {
    mb = z->nf[i]++;
    z->fb[r]++, z->fw[r]++;
    if (vs + 1 < z->pv) z->act_at[(vs + 1) * m + mb] = t + 1;
    else z->grad_at[vs * m + mb] = t + 1; /* the loss: its own gradient */
    if (vs + 1 < z->pv) z->msgs[z->nmsgs++] = (ZbMsg){t + 1, RT_SCHED_ACT, vs, mb};
  } else if (kind == RT_SCHED_B) {
    mb = z->nb[i]++;
    z->fb[r]--;
    if (vs > 0) z->grad_at[(vs - 1) * m + mb] = t + 1;
    if (vs > 0) z->msgs[z->nmsgs++] = (ZbMsg){t + 1, RT_SCHED_GRAD, vs, mb};
    q[(z->wq_head[r] + z->wq_len[r]++) % (z->v * m)] = c * m + mb;
  } else {
    int cell = q[z->wq_head[r]];
    z->wq_head[r] = (z->wq_head[r] + 1) % (z->v * m), z->wq_len[r]--;
    c = cell / m, mb = cell % m;
    z->fw[r]--;
  }
  z->acts[z->nacts++] = (ZbAct){t, r, kind, c, mb};
}

/* The simulation: every stage free at time t picks by the rule; what it
 * produces is there at t + 1. */
static bool simulate(Zb *z, ZbRule rule) {
  int total = 3 * z->p * z->v * z->m, idle = 0;
  int *kind = zalloc((size_t)z->p, sizeof(int)), *chunk = zalloc((size_t)z->p, sizeof(int));
  for (int mb = 0; mb < z->m; mb++) z->act_at[mb] = 0;
  for (int t = 0; z->nacts < total; t++) {
    /* Every stage idle for longer than the pipeline is deep: no rule
     * will move again (a stage holds too much to start a forward). */
    if (idle > 2 * z->pv + 2) {
      free(kind), free(chunk);
      return false;
    }
    int before = z->nacts;
    /* Decide on the state at t, then run: one stage's choice at t never
     * sees another's action of the same moment. */
    for (int r = 0; r < z->p; r++) kind[r] = rule(z, r, t, &chunk[r]);
    for (int r = 0; r < z->p; r++)
      if (kind[r] != NONE) run(z, r, t, kind[r], chunk[r]);
    idle = z->nacts == before ? idle + 1 : 0;
  }
  free(kind), free(chunk);
  return true;
}

static int by_time(const void *a, const void *b) {
  const ZbMsg *x = a, *y = b;
  if (x->t != y->t) return x->t - y->t;
  if (x->msg != y->msg) return x->msg - y->msg;
  if (x->vs != y->vs) return x->vs - y->vs;
  return x->mb - y->mb;
}

/* Stage r's batches of the messages posted at time t, from msgs[k] on:
 * one per peer, the lower stage's first. Every stage orders its batches
 * so, which cannot close a cycle of waits: a stage waits on its higher
 * neighbour only after its lower one, which waits on nothing above it
 * first. A batch per peer, rather than one for all, keeps a stage that is
 * ahead in real time from waiting on both neighbours at once. */
static void post(SchedBuilder *b, const Zb *z, int r, int t, int k) {
  for (int q = 0; q < z->p; q++) {
    if (q == r || (q != r - 1 && q != r + 1)) continue;
    bool open = false;
    for (int i = k; i < z->nmsgs && z->msgs[i].t == t; i++) {
      const ZbMsg *g = &z->msgs[i];
      int to = g->msg == RT_SCHED_ACT ? g->vs + 1 : g->vs - 1;
      int sr = z->stage_of[g->vs], sc = z->chunk_of[g->vs], dr = z->stage_of[to], dc = z->chunk_of[to];
      if (!((sr == r && dr == q) || (sr == q && dr == r))) continue; /* not between r and q */
      if (!open) sched_batch_begin(b, r), open = true;
      if (sr == r) sched_send(b, r, (RtSchedMsg)g->msg, sc, g->mb);
      else sched_recv(b, r, (RtSchedMsg)g->msg, dc, g->mb);
    }
    if (open) sched_batch_end(b, r);
  }
}

/* The tables from the simulation: on each stage, at each moment, the
 * batch of that moment's messages, then the action starting then. */
static void write_tables(SchedBuilder *b, Zb *z) {
  qsort(z->msgs, (size_t)z->nmsgs, sizeof *z->msgs, by_time);
  int end = 0;
  for (int i = 0; i < z->nacts; i++)
    if (z->acts[i].t + 1 > end) end = z->acts[i].t + 1;
  for (int r = 0; r < z->p; r++) {
    int a = 0, k = 0;
    for (int t = 0; t <= end; t++) {
      while (k < z->nmsgs && z->msgs[k].t < t) k++;
      post(b, z, r, t, k);
      for (; a < z->nacts && z->acts[a].t <= t; a++) {
        const ZbAct *x = &z->acts[a];
        if (x->r != r || x->t != t) continue;
        if (x->kind == RT_SCHED_F) sched_f(b, r, x->c, x->mb);
        else if (x->kind == RT_SCHED_B) sched_b(b, r, x->c, x->mb);
        else sched_w(b, r, x->c, x->mb);
      }
    }
  }
}

static bool build(SchedBuilder *b, const SchedOptions *o, bool vshape, ZbRule rule) {
  Zb z = {.p = o->pp, .v = o->vpp, .m = o->microbatches, .vshape = vshape};
  z.pv = z.p * z.v;
  size_t cells = (size_t)z.pv * (size_t)z.m;
  z.act_at = zalloc(cells, sizeof(int)), z.grad_at = zalloc(cells, sizeof(int));
  for (size_t i = 0; i < cells; i++) z.act_at[i] = z.grad_at[i] = NONE;
  z.nf = zalloc((size_t)z.pv, sizeof(int)), z.nb = zalloc((size_t)z.pv, sizeof(int));
  z.stage_of = zalloc((size_t)z.pv, sizeof(int)), z.chunk_of = zalloc((size_t)z.pv, sizeof(int));
  for (int r = 0; r < z.p; r++)
    for (int c = 0; c < z.v; c++) z.stage_of[vstage(&z, r, c)] = r, z.chunk_of[vstage(&z, r, c)] = c;
  z.fb = zalloc((size_t)z.p, sizeof(int)), z.fw = zalloc((size_t)z.p, sizeof(int));
  z.wq = zalloc(cells, sizeof(int));
  z.wq_head = zalloc((size_t)z.p, sizeof(int)), z.wq_len = zalloc((size_t)z.p, sizeof(int));
  z.acts = zalloc(3 * cells, sizeof(ZbAct));
  z.msgs = zalloc(2 * cells, sizeof(ZbMsg));
  bool ok = simulate(&z, rule);
  if (ok) write_tables(b, &z);
  else sched_fail(b, "the schedule's rule stalls for p = %d, v = %d, m = %d", z.p, z.v, z.m);
  free(z.act_at), free(z.grad_at), free(z.nf), free(z.nb), free(z.fb), free(z.fw);
  free(z.stage_of), free(z.chunk_of);
  free(z.wq), free(z.wq_head), free(z.wq_len), free(z.acts), free(z.msgs);
  return ok;
}

/* ------------------------------------------------------------- ZB-H1 */

/* ZB-H1: a forward whenever one is ready and the stage holds fewer than
 * 1F1B's p - r microbatches awaiting their B and fewer than p awaiting
 * their W (1F1B's most, on its first stage); else a B; else the oldest
 * W. The last stage thus runs F B F B ... and puts its W's off to where
 * the earlier stages would wait for its gradients, which leaves a step of
 * 3m + p - 1 units for m >= p: a bubble of (p - 1)/(3m), a third of
 * 1F1B's (p - 1)/m with the same F + B + W. */
static int rule_h1(const Zb *z, int r, int t, int *chunk) {
  *chunk = 0;
  if (z->fb[r] < z->p - r && z->fw[r] < z->p && can_f(z, r, 0, t)) return RT_SCHED_F;
  if (can_b(z, r, 0, t)) return RT_SCHED_B;
  return z->wq_len[r] > 0 ? RT_SCHED_W : NONE;
}

bool sched_build_zb_h1(SchedBuilder *b, const SchedOptions *o) {
  if (o->vpp_group > 0)
    return sched_fail(b, "--vpp-group groups the microbatches of the interleaved schedule; the "
                         "zb-h1 schedule has no groups");
  if (o->vpp != 1)
    return sched_fail(b, "the zb-h1 schedule runs one chunk per stage, but v = %d (use "
                         "--schedule zb-v for two chunks per stage, or --vpp 1)", o->vpp);
  return build(b, o, false, rule_h1);
}

double sched_bubble_zb_h1(int p, int v, int m) {
  (void)v;
  return m >= p ? (double)(p - 1) / (3.0 * m) : -1;
}

/* -------------------------------------------------------------- ZB-V */

/* ZB-V: two chunks per stage in a V, each a W split like ZB-H1's. A
 * stage starts a forward whenever one is ready and it holds fewer than
 * 2p chunk-microbatches until their W (1F1B's p microbatches of the
 * stage's layers, each chunk holding half of them), the second chunk's
 * first, since its output is nearer the loss; else a B, the second
 * chunk's first; else the oldest W. With F = B = W = 1 per chunk the step
 * is 6m + p - 1 units for p <= 4 and m >= p (a bubble of (p - 1)/(6m),
 * half of ZB-H1's) and a few units more for deeper pipelines, never more
 * than ZB-H1's bubble (sched_test zb), at the same memory and with twice
 * as many messages. There is no formula: bubble_w is negative. */
static int rule_v(const Zb *z, int r, int t, int *chunk) {
  for (int c = z->v - 1; c >= 0 && z->fw[r] < 2 * z->p; c--)
    if (can_f(z, r, c, t)) return *chunk = c, RT_SCHED_F;
  for (int c = z->v - 1; c >= 0; c--)
    if (can_b(z, r, c, t)) return *chunk = c, RT_SCHED_B;
  *chunk = 0;
  return z->wq_len[r] > 0 ? RT_SCHED_W : NONE;
}

bool sched_build_zb_v(SchedBuilder *b, const SchedOptions *o) {
  if (o->vpp_group > 0)
    return sched_fail(b, "--vpp-group groups the microbatches of the interleaved schedule; the "
                         "zb-v schedule has no groups");
  if (o->vpp != 2)
    return sched_fail(b, "the zb-v schedule runs two chunks per stage in a V, but v = %d (use "
                         "--vpp 2)", o->vpp);
  return build(b, o, true, rule_v);
}

double sched_bubble_zb_v(int p, int v, int m) {
  (void)p, (void)v, (void)m;
  return -1;
}
