/* The watchdog of a rank program (abi/job.h has the protocol with the
 * launcher): a thread that beats a few times a second, reports what the
 * main thread is doing and how long it has been at it, and ends the rank
 * when the launcher says so or, without a launcher, when the main thread
 * has made no progress for --timeout seconds. Also the handling of SIGTERM
 * and SIGINT (preemption: finish the step, then stop).
 *
 * It lives beside the error reporting (shard_data) so that the comm
 * backends, which link only that, can tell it what they wait for. Every
 * function is cheap and does nothing until rt_wd_start: programs of one
 * rank never start the thread. */
#ifndef SHARD_RT_WATCHDOG_H
#define SHARD_RT_WATCHDOG_H

#include <stdint.h>

/* Starts the heartbeat when this process is one of several ranks (a
 * launcher's environment says so), first thing in rt_main; `program` is
 * argv[0]. */
void rt_wd_start(const char *program);
/* The --timeout, once the flags are parsed. */
void rt_wd_timeout(double timeout);
/* Whether a launcher (`shardc run`) watches this rank and is alive: it
 * then ends the job when this rank fails, and the rank need not take the
 * others down itself. */
int rt_wd_supervised(void);
/* This rank's place, once the mesh is known. */
void rt_wd_place(int tp, int pp, int dp);
/* What the main thread does now ("step 3: F(chunk 0, microbatch 1)"):
 * progress. */
void rt_wd_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A communication call starts (what: the MPI function, comm: the
 * communicator's name) or ends: progress either way. */
void rt_wd_comm(const char *what, const char *comm);
void rt_wd_comm_done(void);
/* The first error this rank reports (util.c calls it with every line). */
void rt_wd_error(const char *text);
/* The rank is about to end itself with an error (rt_comm_fatal): the
 * record says so before the job goes down. */
void rt_wd_fail(const char *why);
/* A normal end with `status`: the last record, and the thread stops. */
void rt_wd_finish(int status);

/* Preemption. rt_wd_signals installs the handlers of SIGTERM and SIGINT:
 * while training (rt_wd_graceful(1)) the first asks the run to stop after
 * its step (rt_wd_stop_requested turns 1), a second exits at once with
 * 128 + the signal; outside training (starting, sampling) the first
 * does. Under a
 * launcher, a SIGTERM from mpirun (the rank's parent) is mpirun ending the
 * job after another rank failed: the rank exits with status 1 at once. */
void rt_wd_signals(void);
void rt_wd_graceful(int on);
int rt_wd_stop_requested(void);
/* The signal that asked for the stop (for the message), 0 if none. */
int rt_wd_stop_signal(void);

/* Under an address-space limit (ulimit -v), checks before the plan is
 * allocated that plan_bytes and OpenBLAS's GEMM buffers for gemm_threads
 * threads still fit, and stops with an error naming the limit when they
 * do not: OpenBLAS retries a failing mmap of its buffer forever, inside
 * the first GEMM, where the run would spin without a word. Does nothing
 * without a limit. */
void rt_wd_check_address_space(int64_t plan_bytes, int gemm_threads);

#endif
