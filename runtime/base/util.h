/* Error reporting and checked allocation shared by the runtime's files and
 * by the data library the driver links (no model types here). */
#ifndef SHARD_RT_UTIL_H
#define SHARD_RT_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* x rounded up to a multiple of 64 (bytes: a cache line, the alignment of
 * every region the runtime allocates). */
#define RT_ALIGN64(x) (((x) + 63) / 64 * 64)

/* Prints `shardc: error: WHAT: message` (WHAT is a file or a flag; NULL
 * leaves it out) and exits with status 1: a user error. */
_Noreturn void rt_fatal(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* When set (by a rank program running under MPI), rt_fatal hands its
 * message, "WHAT: message", to this function instead of printing it and
 * exiting: it names the rank and brings every rank of the job down, so that
 * a failure on one rank never leaves the others waiting. It must not
 * return. */
extern void (*rt_fatal_hook)(const char *message);
/* The same message without exiting, for code that reports several errors
 * before giving up. */
void rt_error(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error a reader returns instead of exiting, so that it can be tested
 * (and fuzzed) on bad files: the file or flag it is about and the message.
 * rt_err_set fills it and returns -1; rt_err_fatal reports it as rt_fatal
 * would have, word for word. */
typedef struct RtErr {
  char what[1024];
  char msg[2048];
} RtErr;
int rt_err_set(RtErr *e, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void rt_err_fatal(const RtErr *e);
/* Allocation that cannot fail quietly: running out of memory is reported
 * with the size that was asked for. */
void *rt_xmalloc(size_t n);
void *rt_xcalloc(size_t n, size_t size);
char *rt_xstrdup(const char *s);
/* "1.25 MB": a byte count for people. */
const char *rt_fmt_bytes(char *buf, size_t len, int64_t bytes);
/* "45,678": an integer with thousands separators. */
const char *rt_fmt_thousands(char *buf, size_t len, int64_t v);
/* Status lines on stdout (banner, progress, notes), which --quiet turns
 * off; errors and the sample are always printed. */
extern int rt_quiet;
/* --deterministic, for the layers that take no flags (the device and comm
 * backends): pin the libraries' choices that can change the bits. */
extern int rt_deterministic;
void rt_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The memory the ranks of this machine may use (abi/job.h,
 * JOB_MEMORY_LIMIT_ENV): the variable's bytes when it is set (a malformed
 * value is a fatal error naming it), else -1. */
int64_t rt_mem_limit_env(void);
/* How many ranks of the job run on this machine, as the launcher (Open
 * MPI, MPICH, Slurm) says; 1 when none does. */
int rt_local_ranks(void);
/* Seconds on a monotonic clock. */
double rt_now(void);

#endif
