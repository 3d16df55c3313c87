/* Pipeline schedules: building every stage's action table (schedule.c) and
 * verifying all of them together (schedule_verify.c).
 *
 * The tables are in the runtime's format (abi/schedule.h). A schedule
 * is one entry of sched_registry: a name, a line of description and a
 * builder, which calls the sched_* emitters below for every stage. The
 * builder writes forwards, backwards and messages only; the data-parallel
 * gradient reductions and the optimizer step are added by the core, after
 * the last backward of each chunk, so no schedule repeats that logic.
 * docs/schedules.md walks through adding one.
 *
 * Tables are malloc'ed, not taken from the arena: tests and the planner
 * build thousands of them in one process, and sched_free returns each. */
#ifndef SHARDC_SCHEDULE_H
#define SHARDC_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "../abi/schedule.h"

typedef struct SchedScript SchedScript;

/* What a schedule is built for. */
typedef struct SchedOptions {
  int pp, vpp, microbatches; /* p, v, m */
  /* The interleaved schedule's microbatch group N (Megatron-LM's
   * microbatch_group_size_per_vp_stage): its forward order takes N
   * microbatches through every chunk before the next N; 0 means p. */
  int vpp_group;
  int dp;                    /* data-parallel replicas: > 1 adds REDUCE_GRADS actions */
  int buckets_per_chunk;     /* gradient buckets of each chunk (0 counts as 1) */
  RtSchedShape shape;        /* every message's tensor; rank 0 when unknown */
  const SchedScript *script; /* what sched_script_def builds (schedule_file.c) */
} SchedOptions;

/* The duration of each compute action in the verifier's simulation, in
 * units of time; messages take no time. Zeroes count as 1. */
typedef struct SchedTimes {
  double f, b, w;
} SchedTimes;

/* What the verifier found. Arrays have one entry per stage. */
typedef struct SchedReport {
  char *error;           /* every problem found, one per line; NULL when the tables verify */
  double makespan;       /* the step: when the last stage finishes */
  double ideal;          /* a stage's compute time, m*v*(f + b (+ w)) */
  double bubble_fraction;/* (makespan - ideal) / ideal: the paper's bubble over ideal time */
  double idle_fraction;  /* (makespan - ideal) / makespan: the share of the step spent idle */
  int *peak_stash;       /* most (chunk, microbatch) forwards awaiting their backward */
  int *peak_held;        /* most awaiting their W where the chunk has W actions, else
                          * peak_stash: the stash slots the runtime holds at once */
  double *busy;          /* compute time of each stage */
  int64_t messages;      /* point-to-point messages in one step */
  int nstages;           /* entries of the arrays */
  /* With SchedVerifyFlags.timeline: when each action starts and ends,
   * [stage][action] (a batch's actions all end when the batch completes). */
  double **start, **end;
} SchedReport;

/* Checks every table of s and simulates them together (the semantics are
 * in abi/schedule.h and docs/schedules.md). Fills rep (free it with
 * sched_report_free) and returns whether the tables verify. */
bool sched_verify(const RtSchedule *s, const SchedTimes *times, bool timeline, SchedReport *rep);
void sched_report_free(SchedReport *rep);

/* ------------------------------------------------------------- builders */

typedef struct SchedBuilder SchedBuilder;

typedef struct SchedDef {
  const char *name;
  const char *doc;
  /* Appends every stage's actions through the emitters below. Returns
   * false after sched_fail when p, v, m do not suit the schedule. */
  bool (*build)(SchedBuilder *b, const SchedOptions *o);
  /* What the schedule promises, with a forward and a backward of one unit
   * each; the property test (sched_test props) checks both on every
   * (p, v, m) the builder accepts. The idle time of a step, in units of one
   * forward plus one backward: the bubble fraction is bubble / (v m). */
  int (*bubble)(int p, int v, int m);
  /* The forwards stage r runs before its first backward (capped at v m);
   * its peak stash is one more, at most v m. */
  int (*warmup)(int p, int v, int m, int r);
  /* For schedules with W actions (the two promises above are NULL): the
   * bubble fraction with F, B and W of one unit each, or a negative
   * number where there is no formula (sched_test zb checks it). */
  double (*bubble_w)(int p, int v, int m);
  bool vshape; /* the V placement (rt_vstage) instead of Megatron-LM's */
} SchedDef;

/* The virtual stage of chunk c on stage r: c p + r (Megatron-LM's
 * placement), or with the V placement of zb-v r on even chunks and
 * c p + p - 1 - r on odd ones, so that the virtual pipeline runs down the
 * stages and back up (chunk 0 of stage r is virtual stage r, chunk 1
 * virtual stage 2p - 1 - r). */
static inline int sched_vstage(int p, bool vshape, int r, int c) { return rt_vstage(p, vshape, r, c); }

/* The zero-bubble builders (schedule_zb.c) and their bubble formulas. */
bool sched_build_zb_h1(SchedBuilder *b, const SchedOptions *o);
double sched_bubble_zb_h1(int p, int v, int m);
bool sched_build_zb_v(SchedBuilder *b, const SchedOptions *o);
double sched_bubble_zb_v(int p, int v, int m);

/* The registry, ending with a {NULL} entry; sched_find returns NULL for an
 * unknown name. */
extern const SchedDef sched_registry[];
const SchedDef *sched_find(const char *name);
/* The schedule used when none is named: 1f1b for v = 1, else interleaved. */
const char *sched_default_name(int vpp);
/* The registered names, "gpipe, 1f1b, ...", for messages and help. */
const char *sched_names(void);

/* Emitters for stage r. F, B and W take the stage's chunk c and the
 * microbatch. sched_send and sched_recv name the tensor the same way
 * (SEND(act) sends F(c, mb)'s output, RECV(act) receives its input, and
 * likewise for grads); the peer follows from the placement, and a message
 * that does not exist (an activation out of the last virtual stage, a
 * gradient out of the first, anything between chunks of one stage when
 * p = 1) is silently skipped, so builders need not special-case the ends.
 * Messages between sched_batch_begin and sched_batch_end form one batch. */
void sched_f(SchedBuilder *b, int r, int c, int mb);
void sched_b(SchedBuilder *b, int r, int c, int mb);
void sched_w(SchedBuilder *b, int r, int c, int mb);
void sched_send(SchedBuilder *b, int r, RtSchedMsg msg, int c, int mb);
void sched_recv(SchedBuilder *b, int r, RtSchedMsg msg, int c, int mb);
void sched_batch_begin(SchedBuilder *b, int r);
void sched_batch_end(SchedBuilder *b, int r);
/* Rejects the configuration: the message (printf style) becomes the error. */
bool sched_fail(SchedBuilder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------ schedules from files */

/* A schedule as text (docs/schedules.md, "Schedules from files"): one
 * line per stage of its compute actions in order, F0.1 (the forward of
 * microbatch 0 on chunk 1), B0.1, W0.1, with # comments. The file fixes
 * p, v and m; sched_script_def builds it (SchedOptions.script) and derives
 * the messages. Parsing checks what one stage's line shows alone: the
 * syntax, each action once, every F and B there, each B after its F and
 * each W after its B. NULL with *error (malloc'ed, one "FILE:LINE:COL:
 * ..." per line) when the text is wrong. */
SchedScript *sched_script_parse(const char *name, const char *text, char **error);
SchedScript *sched_script_load(const char *path, char **error);
void sched_script_free(SchedScript *s);
void sched_script_shape(const SchedScript *s, int *p, int *v, int *m);
/* Not in the registry: it needs a file. It makes no promises (bubble and
 * warmup are NULL). */
extern const SchedDef sched_script_def;
/* sched_build for a script (o->script is ignored): messages derived as
 * 1F1B posts them, or, when those tables hang, with each step's send and
 * the next receive in one batch (docs/schedules.md). */
RtSchedule *sched_build_script(SchedScript *script, const SchedOptions *o, const SchedTimes *times,
                               bool timeline, SchedReport *rep);

/* Builds the tables of `def` (after the checks every schedule shares: p,
 * v, m positive and small enough to tabulate), adds the reductions and the
 * optimizer step, and verifies them with `times` (NULL: all 1). Returns
 * NULL with rep->error set when the configuration does not suit the
 * schedule or the tables do not verify; rep is filled either way. */
RtSchedule *sched_build(const SchedDef *def, const SchedOptions *o, const SchedTimes *times,
                        bool timeline, SchedReport *rep);
/* The same tables without the verification (for tests that break a table
 * on purpose); NULL with *error (malloc'ed) set. */
RtSchedule *sched_build_unverified(const SchedDef *def, const SchedOptions *o, char **error);
void sched_free(RtSchedule *s);
/* Whether the tables have W actions: each chunk's backward is then B and W. */
bool sched_has_w(const RtSchedule *s);

/* One action as text: rt_sched_action_str (abi/schedule.h). */

#endif
