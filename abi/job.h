/* What `shardc run` (the launcher) and the ranks it starts share while a
 * job runs: the environment that tells a rank where to report, the files
 * it reports in, and the exit statuses: constants, and the two readers of
 * the memory a machine offers, which both sides use. docs/reliability.md
 * describes the whole protocol.
 *
 * Each rank rewrites JOB_DIR/rank-R (JOB_RECORD_FMT, R its world rank) a
 * few times a second from a thread of its own (the heartbeat), replacing
 * the file atomically; the launcher reads them all. A record is text, one
 * `key value` per line:
 *
 *   pid 1234                      the rank's process
 *   host node7                    the machine it runs on
 *   coord tp=0 pp=1 dp=0          its place in the mesh (absent until known)
 *   program stage1                the program it runs (its file name)
 *   beat 42                       heartbeats so far: it changes while the rank lives
 *   idle 0.25                     seconds since the main thread last made progress
 *   action step 3: F(chunk 0, microbatch 1)   what the main thread is doing
 *   state running                 running | failed | exited | done | stopping
 *   status 1                      the exit status, once it is known
 *   why TEXT                      the error that stopped it, when one did
 *
 * The launcher asks every rank to stop by creating JOB_DIR/abort (its
 * first line says why); a rank's heartbeat thread sees it within a beat and
 * exits with status 1. */
#ifndef SHARD_ABI_JOB_H
#define SHARD_ABI_JOB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOB_DIR_ENV "SHARDC_JOB_DIR"           /* the folder of the records */
#define JOB_LAUNCHER_ENV "SHARDC_LAUNCHER_PID" /* the launcher's process id */
/* The launcher's machine: a rank on it watches the launcher's process and
 * ends itself when the launcher is gone (killed with SIGKILL, SIGHUP),
 * so that no rank trains on, and writes checkpoints, behind a job its
 * user believes ended. */
#define JOB_LAUNCHER_HOST_ENV "SHARDC_LAUNCHER_HOST"
#define JOB_RECORD_FMT "rank-%d"
#define JOB_ABORT_FILE "abort"
/* Under `shardc run` each rank program runs as the child of a small
 * parent (driver/rankwrap.c), which writes JOB_DIR/rank-R.end once the
 * rank has ended: "signal N" when a signal killed it, else "status N". */
#define JOB_END_SUFFIX ".end"
/* Seconds between heartbeats. */
#define JOB_BEAT_SECONDS 0.2

/* Heartbeats that no file system can delay. On the launcher's machine
 * (JOB_LAUNCHER_HOST_ENV) the launcher creates a file in shared memory
 * (/dev/shm) that JOB_SHM_ENV names: JOB_SHM_HEAD bytes of header, whose
 * first 32-bit word the launcher sets to 1 to stop the job (as the abort
 * file does), then one slot of JOB_SLOT_BYTES per world rank, a JobSlot.
 * A rank maps its slot and updates it in memory at every beat, from the
 * heartbeat thread, while another thread writes the record file: a write
 * that blocks (a loaded disk, a slow network file system) never delays a
 * beat, and the launcher reads the beat, the progress stamp and the action
 * from memory. Ranks on other machines beat over a socket (JOB_BEAT_ENV).
 * `seq` is odd while the rank rewrites `action` (a reader retries). */
#define JOB_SHM_ENV "SHARDC_JOB_SHM"
#define JOB_SHM_HEAD 64
#define JOB_SLOT_BYTES 1024
#define JOB_SLOT_MAGIC 0x5348424au
typedef struct JobSlot {
  uint32_t magic; /* JOB_SLOT_MAGIC once the rank has written its slot */
  uint32_t seq;
  int64_t pid;
  int64_t beat;        /* heartbeats so far */
  int64_t progress_ns; /* CLOCK_MONOTONIC of the main thread's last progress */
  char action[512];    /* what the main thread is doing, as in the record */
} JobSlot;

/* Heartbeats of ranks on other machines than the launcher's, which no
 * file system delays either: the launcher opens a UDP socket and names it
 * in JOB_BEAT_ENV as HOST:PORT:TOKEN (HOST a name or an IPv4 or IPv6
 * address; the socket takes both families); a rank without a slot of the shared
 * memory sends one JobBeat datagram to it at every beat (never blocking:
 * a lost datagram is a late beat, not a stalled rank). `idle_ns` is the
 * time since the main thread's last progress, a duration (two machines'
 * clocks are not compared); `token` is the job's, so that a datagram of
 * another job or a stranger is dropped. The record file still carries the
 * rest (state, status, the error). */
#define JOB_BEAT_ENV "SHARDC_JOB_BEAT"
#define JOB_BEAT_MAGIC 0x5348424bu
/* The launcher's answer to a rank's beats when it stops the job: the same
 * datagram with this magic (and the job's token), sent back to where the
 * beats come from, as the abort file is created: a rank of another
 * machine need not wait for the shared file system to learn it. */
#define JOB_STOP_MAGIC 0x53484253u
typedef struct JobBeat {
  uint32_t magic; /* JOB_BEAT_MAGIC */
  int32_t rank;
  uint64_t token;
  int64_t pid;
  int64_t beat;
  int64_t idle_ns;
  char action[400];
} JobBeat;
/* For tests: the machine a rank says it runs on (as one on another
 * machine: no slot of the shared memory, no watch of the launcher's
 * process, beats over the socket), and seconds that each write of the
 * record's own thread blocks first (a slow shared file system). */
#define JOB_TEST_HOST_ENV "SHARDC_TEST_HOST"
/* For tests: the host the launcher tells its ranks to beat to, in place of
 * its machine's name (an address such as ::1 checks the IPv6 path). */
#define JOB_TEST_BEAT_HOST_ENV "SHARDC_TEST_BEAT_HOST"
#define JOB_TEST_RECORD_STALL_ENV "SHARDC_TEST_RECORD_STALL"

/* The memory the ranks of one machine may use, in bytes (a K, M, G or T
 * suffix multiplies by powers of 1024): when set, `shardc run` and every
 * rank program take it instead of what the machine says is available
 * (/proc/meminfo's MemAvailable; a GPU's free memory), so that the check
 * of the memory plan against it can be tested, and tightened by hand. */
#define JOB_MEMORY_LIMIT_ENV "SHARDC_MEMORY_LIMIT"

/* *bytes from JOB_MEMORY_LIMIT_ENV's form of v ("8000000000", "64G"):
 * 1, or 0 when v is not a number of bytes. */
static inline int job_parse_bytes(const char *v, long long *bytes) {
  static const char suffixes[] = "KMGT";
  char *end;
  double x = strtod(v, &end);
  const char *s = *end ? strchr(suffixes, *end) : NULL;
  if (s) x *= (double)(1LL << (10 * (s - suffixes + 1))), end++;
  if (end == v || *end || !(x >= 0 && x < 9e18)) return 0;
  *bytes = (long long)x;
  return 1;
}

/* The host memory /proc/meminfo calls available, in bytes; -1 where it
 * says nothing. */
static inline long long job_mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

/* A rank program's exit statuses besides 0 and 1 (errors): a run stopped
 * by SIGTERM or SIGINT after it finished its step (and saved, with
 * --save); 75 is EX_TEMPFAIL of sysexits.h, "try again later". */
#define JOB_EXIT_PREEMPTED 75

#endif
