/* The pipeline executor: runs a stage's action table (abi/schedule.h)
 * once per training step, and the forward-only pipeline of evaluations.
 *
 * Memory. Every (chunk, microbatch) between its forward and its backward
 * holds a slot: chunk.activations bytes, taken from a pool per chunk
 * (allocated on first need, reused after the backward), so a stage holds
 * as many as its schedule keeps in flight (the "peak stash"). The chunks
 * share one buffer of temporaries.
 *
 * Messages travel on the pipeline communicator, in the order of the table
 * (comm.h matches messages by posting order; the compiler's verifier proved
 * that every pair of tables posts them in the same order). A receive is
 * posted where the table says, into a buffer of its own, and waited for
 * only when the forward or backward that needs it runs; a send goes from a
 * copy taken right after the forward or backward that computed it, and is
 * waited for by the end of the step. Nothing waits at the end of a batch
 * (RT_SCHED_JOIN): every wait happens at or after the point where the
 * verified blocking semantics would wait, so no order of completion can
 * hang.
 *
 * OPT_STEP sums the gradients of tied parameters over the embedding group
 * (first and last stage), or on the first stage where it holds both copies
 * (RtParam.tied 2), once, after every backward of the step, then
 * hands over to rt_update (data-parallel waits, norm, optimizer). */
#ifndef SHARD_RT_EXEC_H
#define SHARD_RT_EXEC_H

#include "rt.h"

/* Sets up the executor of a pipeline stage (p > 1): the slot pools, the
 * temporaries and the message tables; fills rt->exec. Call after the
 * memory plan is allocated and the communicators exist. */
void rt_exec_init(Rt *rt);
void rt_exec_free(Rt *rt);

/* One training step: walks the table (forwards, backwards, messages, the
 * reductions and at OPT_STEP rt_update, which fills info). Returns the
 * step's mean loss over all microbatches and replicas, on every rank. */
double rt_exec_step(Rt *rt, int64_t step, int dump, RtStepInfo *info);
/* rt_window_loss and rt_eval of a pipeline stage: forward only. */
double rt_exec_window_loss(Rt *rt, const int32_t *window, int64_t step, int training);
double rt_exec_eval(Rt *rt, int64_t n);
/* Progress for the sends in flight. */
void rt_exec_poll(Rt *rt);

/* For the banner: "stage 1 of 4, 2 chunks (virtual stages 1, 5), schedule
 * interleaved, 8 microbatches; peak stash 6 (stages 8 6 4 2), 1.2 MB".
 * Collective over the pipeline communicator (it gathers every stage's
 * peak). */
void rt_exec_describe(Rt *rt, char *buf, int len);
/* The bytes of activations the stage keeps at its table's peak (slots of
 * each chunk's activations times the most of its microbatches in flight):
 * what a pipeline stage allocates for activations, in place of the
 * plan's one slot per chunk. */
int64_t rt_exec_stash_bytes(const Rt *rt);
/* The bytes of the stage's message buffers at its table's peak: a copy of
 * each tensor received, from its RECV to the F or B that reads it, and of
 * each one sent, from the F or B that computes it to the step's end. They
 * are made once and reused, so this is what the stage holds for them. */
int64_t rt_exec_message_bytes(const Rt *rt);

#endif
