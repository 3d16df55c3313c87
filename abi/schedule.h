/* Pipeline schedules as data: the action tables that the compiler writes and
 * that every rank program executes.
 *
 * A schedule is one ordered table of actions per pipeline stage. All the
 * ranks of one stage (its tensor- and data-parallel ranks) run the same
 * table. The compiler builds and verifies the tables (passes/schedule.c,
 * passes/schedule_verify.c) and the emitter writes them out as initialised
 * arrays of the structs below; the runtime's executor walks its stage's
 * table from the first action to the last, once per training step. Adding
 * a schedule changes only the tables, never this format or the executor.
 *
 * Placement: with p stages and v chunks per stage, chunk c of stage r is
 * virtual stage c*p + r. Activations flow from virtual stage k to k + 1,
 * their gradients from k + 1 back to k. The last virtual stage sends no
 * activation, the first no gradient. Between two chunks of the SAME stage
 * (only when p = 1) the tensor stays in memory and no message exists.
 *
 * Messages. SEND and RECV name the tensor by the acting stage's own chunk
 * and the microbatch: SEND(act, peer, c, mb) sends the output of F(c, mb),
 * RECV(act, peer, c, mb) receives the input of F(c, mb); SEND(grad, peer,
 * c, mb) sends the input gradient B(c, mb) computed, RECV(grad, peer, c,
 * mb) receives the output gradient B(c, mb) needs. `peer` is the stage at
 * the other end. A received tensor is kept per (chunk, microbatch) until
 * the action that consumes it, so a receive may be posted long before.
 *
 * Batches. Consecutive SEND/RECV actions chained by RT_SCHED_JOIN form one
 * batch: the executor posts all of the batch's operations together (NCCL
 * group, or MPI isend/irecv) and then waits for all of them, exactly as
 * Megatron-LM's batch_isend_irecv does. An operation completes when the
 * peer has posted the matching one (rendezvous): a batch that sends to a
 * peer and receives from it completes although neither side could finish
 * a lone send first. A SEND or RECV without JOIN on the next action is a
 * batch of one. Nothing else may stand inside a batch.
 *
 * Order. Messages carry no tags (runtime/comm/comm.h): between two stages they
 * match in the order they are posted. So the SENDs of stage a to stage b,
 * in table order, must name the same messages in the same order as the
 * RECVs of stage b from stage a; the verifier checks it.
 *
 * Plain C, no compiler or runtime types: the compiler and the runtime both
 * include this header and nothing else of each other. */
#ifndef SHARD_RT_SCHEDULE_H
#define SHARD_RT_SCHEDULE_H

#include <stdint.h>
#include <stdio.h>

typedef enum RtSchedKind {
  RT_SCHED_F,            /* forward of (chunk, mb): stashes its activations */
  RT_SCHED_B,            /* backward of (chunk, mb): frees them; input and weight gradients */
  RT_SCHED_W,            /* weight gradient of (chunk, mb) alone (zero-bubble schedules;
                          * when present, B computes only the input gradient) */
  RT_SCHED_SEND,         /* msg, peer, chunk, mb, shape */
  RT_SCHED_RECV,         /* msg, peer, chunk, mb, shape */
  RT_SCHED_REDUCE_GRADS, /* start the data-parallel reduction of bucket `mb` (of chunk
                          * `chunk`, or -1: buckets spanning chunks) */
  RT_SCHED_OPT_STEP,     /* the optimizer step, after every reduction */
  RT_SCHED_NKINDS
} RtSchedKind;

typedef enum RtSchedMsg {
  RT_SCHED_ACT,  /* an activation, forward */
  RT_SCHED_GRAD, /* its gradient, backward */
} RtSchedMsg;

/* RtSchedAction.flags */
#define RT_SCHED_JOIN 1 /* posted in one batch with the previous action (both SEND/RECV) */

/* One action, 12 bytes. Fields an action kind does not use are 0. */
typedef struct RtSchedAction {
  uint8_t kind;  /* RtSchedKind */
  uint8_t msg;   /* SEND/RECV: RtSchedMsg */
  uint8_t flags; /* RT_SCHED_JOIN */
  uint8_t shape; /* SEND/RECV: index into RtSchedule.shapes */
  int16_t chunk; /* the acting stage's chunk, 0 .. v-1 */
  int16_t peer;  /* SEND/RECV: the stage at the other end, 0 .. p-1 */
  int32_t mb;    /* the microbatch, 0 .. m-1; REDUCE_GRADS: the bucket */
} RtSchedAction;

/* The shape of a message's tensor, e.g. [b, s, h] or [b, s/t, h]. */
#define RT_SCHED_MAX_RANK 4
typedef struct RtSchedShape {
  int rank;
  int64_t dims[RT_SCHED_MAX_RANK];
} RtSchedShape;

/* One stage's actions, in execution order. */
typedef struct RtSchedTable {
  const RtSchedAction *actions;
  int32_t n;
} RtSchedTable;

typedef struct RtSchedule {
  const char *name;          /* "1f1b", "interleaved", ... */
  int pp, vpp, microbatches; /* p, v, m */
  int nbuckets;              /* gradient buckets REDUCE_GRADS names */
  const RtSchedShape *shapes;
  int nshapes;
  const RtSchedTable *stages; /* pp entries, by pipeline stage */
  int vshape;                 /* 1: the V placement (rt_vstage) */
} RtSchedule;

/* The virtual stage of chunk c on stage r of p: c p + r, or with the V
 * placement (zb-v) c p + p - 1 - r on odd chunks, so that the virtual
 * pipeline runs down the stages and back up (chunk 0 of stage r is
 * virtual stage r, chunk 1 virtual stage 2p - 1 - r). Either way the
 * chunk of virtual stage k is k / p. Between two virtual stages on one
 * stage (p - 1 and p under the V placement) the tensor stays in memory. */
static inline int rt_vstage(int p, int vshape, int r, int c) {
  return c * p + (vshape && c % 2 ? p - 1 - r : r);
}

/* The stage that holds virtual stage k. */
static inline int rt_vstage_stage(int p, int vshape, int k) {
  return vshape && k / p % 2 ? p - 1 - k % p : k % p;
}

/* The virtual stage of chunk c on stage r. */
static inline int rt_sched_vstage(const RtSchedule *s, int r, int c) {
  return rt_vstage(s->pp, s->vshape, r, c);
}

static inline const char *rt_sched_kind_name(int k) {
  static const char *const names[RT_SCHED_NKINDS] = {"F",    "B",            "W",       "SEND",
                                                     "RECV", "REDUCE_GRADS", "OPT_STEP"};
  return k >= 0 && k < RT_SCHED_NKINDS ? names[k] : "?";
}

static inline const char *rt_sched_msg_name(int m) {
  return m == RT_SCHED_ACT ? "act" : m == RT_SCHED_GRAD ? "grad" : "?";
}

/* An action as the schedule printouts, the simulator's trace and the
 * runtime's --trace all name it: F3c1, SEND(act, to 2, c0, mb3),
 * REDUCE_GRADS(c0, bucket 1), OPT_STEP. Returns buf. */
static inline char *rt_sched_action_str(const RtSchedAction *a, char *buf, size_t size) {
  switch (a->kind) {
  case RT_SCHED_F: case RT_SCHED_B: case RT_SCHED_W:
    snprintf(buf, size, "%s%dc%d", rt_sched_kind_name(a->kind), (int)a->mb, a->chunk);
    break;
  case RT_SCHED_SEND: case RT_SCHED_RECV:
    snprintf(buf, size, "%s(%s, %s %d, c%d, mb%d)", rt_sched_kind_name(a->kind),
             rt_sched_msg_name(a->msg), a->kind == RT_SCHED_SEND ? "to" : "from", a->peer,
             a->chunk, (int)a->mb);
    break;
  case RT_SCHED_REDUCE_GRADS:
    snprintf(buf, size, "REDUCE_GRADS(c%d, bucket %d)", a->chunk, (int)a->mb);
    break;
  case RT_SCHED_OPT_STEP: snprintf(buf, size, "OPT_STEP"); break;
  default: snprintf(buf, size, "?(kind %d)", a->kind);
  }
  return buf;
}

#endif
