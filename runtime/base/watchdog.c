/* The watchdog of a rank program (see watchdog.h and abi/job.h). */
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../abi/job.h"
#include "util.h"

enum { ST_RUNNING, ST_FAILED, ST_EXITED, ST_DONE };
static const char *const state_names[] = {"running", "failed", "exited", "done"};

static struct {
  int on;
  int rank;
  char coord[64];
  const char *program; /* its file name */
  char host[256];      /* the machine's name: the launcher probes pids on its own only */
  double timeout;
  pid_t launcher; /* 0: none */
  int launcher_here; /* it runs on this machine, and was alive at the start */
  char dir[3000], record[3100], tmp[3100], abort_path[3100], exit_path[3100];
  pthread_t thread, writer; /* the beat; the writer of the record */
  pthread_mutex_t lock; /* one writer of the record at a time */
  /* On the launcher's machine, this rank's slot of the job's shared
   * memory (abi/job.h) and the launcher's stop word; NULL elsewhere. */
  JobSlot *slot;
  volatile uint32_t *shm_abort;
  pthread_mutex_t slot_lock; /* the action's writers: the beat and each new phase */
  /* Elsewhere, a socket to the launcher's (abi/job.h: JOB_BEAT_ENV) and
   * its address; -1 when there is none. */
  int beat_fd;
  struct sockaddr_storage beat_to;
  socklen_t beat_to_len;
  uint64_t beat_token;
  double record_stall; /* tests: seconds each write of the record's thread blocks first */
  atomic_int has_writer;
  atomic_int quit;
  atomic_int quit_writer; /* the record's thread stops first: the beat goes on while it ends */
  atomic_int writer_done; /* ... and says when it has */
  atomic_long beats;
  /* The main thread's progress: when it last moved (ns, monotonic), what
   * it does (a phase in one of two buffers, flipped when rewritten) and
   * the communication call it may be inside. */
  atomic_llong stamp;
  char phase[2][160];
  atomic_int cur;
  _Atomic(const char *) comm_what;
  _Atomic(const char *) comm_name;
  atomic_int state, status;
  char why[1024];
  atomic_int has_why;
} wd = {.lock = PTHREAD_MUTEX_INITIALIZER, .slot_lock = PTHREAD_MUTEX_INITIALIZER, .beat_fd = -1};

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void stamp(void) { atomic_store(&wd.stamp, now_ns()); }

/* ---------------------------------------------------------- the record */

/* "step 3: F(chunk 0, microbatch 1), in MPI_Wait on the pipeline
 * communicator" */
static void action_text(char *buf, size_t len) {
  const char *what = atomic_load(&wd.comm_what), *name = atomic_load(&wd.comm_name);
  const char *phase = wd.phase[atomic_load(&wd.cur)];
  int n = snprintf(buf, len, "%s", *phase ? phase : "starting");
  if (what && n >= 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ", in %s%s%s%s", what, name ? " on the " : "",
             name ? name : "", name ? " communicator" : "");
}

/* Rewrites the record (write a temporary, rename it over: the launcher
 * never reads half a record). */
static void write_record(void) {
  if (!*wd.dir) return;
  char action[400], text[2048];
  action_text(action, sizeof action);
  double idle = (double)(now_ns() - atomic_load(&wd.stamp)) * 1e-9;
  int st = atomic_load(&wd.state);
  int n = snprintf(text, sizeof text,
                   "pid %ld\nhost %s\n%s%s%sprogram %s\nbeat %ld\nidle %.2f\naction %s\nstate %s\n",
                   (long)getpid(), wd.host, *wd.coord ? "coord " : "", wd.coord,
                   *wd.coord ? "\n" : "", wd.program, atomic_load(&wd.beats), idle, action,
                   state_names[st]);
  if (st != ST_RUNNING && n > 0 && n < (int)sizeof text)
    n += snprintf(text + n, sizeof text - (size_t)n, "status %d\n", atomic_load(&wd.status));
  if (atomic_load(&wd.has_why) && n > 0 && n < (int)sizeof text)
    n += snprintf(text + n, sizeof text - (size_t)n, "why %s\n", wd.why);
  if (n < 0) return;
  if (n >= (int)sizeof text) n = (int)sizeof text - 1;
  pthread_mutex_lock(&wd.lock);
  int fd = open(wd.tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ssize_t w = write(fd, text, (size_t)n);
    close(fd);
    if (w == n) rename(wd.tmp, wd.record);
  }
  pthread_mutex_unlock(&wd.lock);
}

/* ------------------------------------------------------------ the beat */

static int launcher_alive(void) { return wd.launcher > 0 && kill(wd.launcher, 0) == 0; }

/* The launcher is gone (killed, or its machine's session hung up): this
 * rank must not train on behind a job its user believes ended, and would
 * collide with a resubmitted one. mpirun gets SIGTERM when the launcher
 * dies (run.c) and passes it on; this is for the rank whose mpirun did
 * not. */
static void launcher_gone(void) {
  char action[400];
  action_text(action, sizeof action);
  fprintf(stderr, "shardc: error: rank %d (%s, program %s): the launcher (shardc run, pid %ld) "
          "is gone; the rank stops in %s\n", wd.rank,
          *wd.coord ? wd.coord : "coordinates not yet known", wd.program, (long)wd.launcher,
          action);
  fflush(stderr);
  snprintf(wd.why, sizeof wd.why, "the launcher (pid %ld) is gone", (long)wd.launcher);
  atomic_store(&wd.has_why, 1);
  atomic_store(&wd.status, 1);
  atomic_store(&wd.state, ST_FAILED);
  write_record();
  _exit(1);
}

/* The action and the progress stamp (and, from the beat thread, the
 * beat) into this rank's slot of shared memory: memory writes only. A new
 * phase publishes at once, so that the slot names the step being run, not
 * the one of the last beat. */
static void publish_slot(long beats) {
  JobSlot *s = wd.slot;
  if (!s) return;
  char action[sizeof s->action];
  action_text(action, sizeof action);
  pthread_mutex_lock(&wd.slot_lock);
  uint32_t seq = s->seq;
  __atomic_store_n(&s->seq, seq + 1, __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  memcpy(s->action, action, sizeof action);
  __atomic_store_n(&s->seq, seq + 2, __ATOMIC_RELEASE);
  __atomic_store_n(&s->progress_ns, (int64_t)atomic_load(&wd.stamp), __ATOMIC_RELEASE);
  if (beats > 0) __atomic_store_n(&s->beat, (int64_t)beats, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&wd.slot_lock);
}

/* The beat to the launcher's socket, from a rank of another machine: one
 * datagram, never waited for. */
static void send_beat(long beats) {
  if (wd.beat_fd < 0) return;
  JobBeat b;
  memset(&b, 0, sizeof b);
  b.magic = JOB_BEAT_MAGIC;
  b.rank = wd.rank;
  b.token = wd.beat_token;
  b.pid = (int64_t)getpid();
  b.beat = beats;
  b.idle_ns = (int64_t)(now_ns() - atomic_load(&wd.stamp));
  action_text(b.action, sizeof b.action);
  (void)!sendto(wd.beat_fd, &b, sizeof b, MSG_DONTWAIT | MSG_NOSIGNAL,
                (struct sockaddr *)&wd.beat_to, wd.beat_to_len);
}

/* Whether the launcher answered the beats with its stop (JOB_STOP_MAGIC). */
static int stop_datagram(void) {
  if (wd.beat_fd < 0) return 0;
  JobBeat b;
  ssize_t got;
  while ((got = recv(wd.beat_fd, &b, sizeof b, MSG_DONTWAIT)) >= 0)
    if (got == (ssize_t)sizeof b && b.magic == JOB_STOP_MAGIC && b.token == wd.beat_token)
      return 1;
  return 0;
}

/* The launcher's socket from JOB_BEAT_ENV (HOST:PORT:TOKEN); a value that
 * does not parse or resolve leaves the beats to the record. */
static void open_beat(void) {
  const char *v = getenv(JOB_BEAT_ENV);
  if (!v || !*v) return;
  char host[256], port[16];
  unsigned long long token;
  /* HOST:PORT:TOKEN, split from the right: HOST may be an IPv6 address. */
  const char *c2 = strrchr(v, ':'), *c1 = NULL;
  for (long i = c2 ? c2 - v - 1 : -1; i >= 0 && !c1; i--)
    if (v[i] == ':') c1 = v + i;
  if (!c1 || c1 - v >= (long)sizeof host ||
      c2 - c1 - 1 >= (long)sizeof port || sscanf(c2 + 1, "%llu", &token) != 1)
    return;
  memcpy(host, v, (size_t)(c1 - v)), host[c1 - v] = 0;
  memcpy(port, c1 + 1, (size_t)(c2 - c1 - 1)), port[c2 - c1 - 1] = 0;
  /* IPv4 or IPv6, whichever the name resolves to here (the launcher's
   * socket takes both); the first address a socket opens for wins. */
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *res = NULL;
  if (getaddrinfo(host, port, &hints, &res) != 0 || !res) return;
  int fd = -1;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    if (a->ai_addrlen > sizeof wd.beat_to) continue;
    fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    memcpy(&wd.beat_to, a->ai_addr, a->ai_addrlen);
    wd.beat_to_len = a->ai_addrlen;
  }
  freeaddrinfo(res);
  wd.beat_fd = fd;
  wd.beat_token = (uint64_t)token;
}

/* The launcher stops the job: another rank failed. */
static void stop_on_abort(void) {
  atomic_store(&wd.status, 1);
  atomic_store(&wd.state, ST_EXITED);
  write_record();
  _exit(1);
}

/* The record's own thread: a write that blocks on a slow file system
 * delays the record, never the beat (which the launcher reads from shared
 * memory on its machine). */
static void *writer(void *arg) {
  (void)arg;
  struct timespec pause = {0, (long)(JOB_BEAT_SECONDS * 1e9)};
  struct timespec stall = {(time_t)wd.record_stall,
                           (long)((wd.record_stall - (double)(time_t)wd.record_stall) * 1e9)};
  while (!atomic_load(&wd.quit_writer)) {
    if (wd.record_stall > 0) nanosleep(&stall, NULL);
    if (atomic_load(&wd.quit_writer)) break;
    write_record();
    if (*wd.dir && access(wd.abort_path, F_OK) == 0) stop_on_abort();
    nanosleep(&pause, NULL);
  }
  atomic_store(&wd.writer_done, 1);
  return NULL;
}

static void *beat(void *arg) {
  (void)arg;
  struct timespec pause = {0, (long)(JOB_BEAT_SECONDS * 1e9)};
  while (!atomic_load(&wd.quit)) {
    long beats = atomic_fetch_add(&wd.beats, 1) + 1;
    if (wd.launcher_here && !launcher_alive()) launcher_gone();
    publish_slot(beats);
    send_beat(beats);
    if (stop_datagram()) stop_on_abort();
    if (!wd.has_writer) {
      write_record();
      if (*wd.dir && access(wd.abort_path, F_OK) == 0) stop_on_abort();
    }
    if (wd.shm_abort && __atomic_load_n(wd.shm_abort, __ATOMIC_ACQUIRE)) stop_on_abort();
    double idle = (double)(now_ns() - atomic_load(&wd.stamp)) * 1e-9;
    /* With a launcher watching, it decides which rank is to blame (the
     * one that stopped, not those that wait for it); alone, a rank stops
     * itself. */
    if (wd.timeout > 0 && idle > wd.timeout && !launcher_alive()) {
      char action[400];
      action_text(action, sizeof action);
      char msg[600];
      snprintf(msg, sizeof msg, "no progress for %.0f s in %s (--timeout %g)", idle, action,
               wd.timeout);
      fprintf(stderr, "shardc: error: rank %d (%s, program %s): %s\n", wd.rank,
              *wd.coord ? wd.coord : "coordinates not yet known", wd.program, msg);
      fflush(stderr);
      snprintf(wd.why, sizeof wd.why, "%s", msg);
      atomic_store(&wd.has_why, 1);
      atomic_store(&wd.status, 1);
      atomic_store(&wd.state, ST_FAILED);
      write_record();
      _exit(1);
    }
    nanosleep(&pause, NULL);
  }
  return NULL;
}

/* A rank that leaves through exit() (rt_fatal before MPI started) says
 * so in its record: with status 1 when it reported an error. */
static void at_exit(void) {
  if (!wd.on || atomic_load(&wd.state) != ST_RUNNING) return;
  atomic_store(&wd.status, atomic_load(&wd.has_why) ? 1 : 0);
  atomic_store(&wd.state, ST_EXITED);
  write_record();
}

static int env_int(const char *const *names, int n, int dflt) {
  for (int i = 0; i < n; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) return atoi(v);
  }
  return dflt;
}

/* This rank's slot of the job's shared memory (abi/job.h), when the
 * launcher made one and it holds this rank. */
static void map_slot(void) {
  const char *path = getenv(JOB_SHM_ENV);
  if (!path || !*path) return;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  size_t need = JOB_SHM_HEAD + (size_t)(wd.rank + 1) * JOB_SLOT_BYTES;
  void *p = fstat(fd, &st) == 0 && (size_t)st.st_size >= need
                ? mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return;
  wd.shm_abort = (volatile uint32_t *)p;
  wd.slot = (JobSlot *)((unsigned char *)p + JOB_SHM_HEAD + (size_t)wd.rank * JOB_SLOT_BYTES);
  wd.slot->pid = (int64_t)getpid();
  wd.slot->progress_ns = (int64_t)atomic_load(&wd.stamp);
  __atomic_store_n(&wd.slot->magic, JOB_SLOT_MAGIC, __ATOMIC_RELEASE);
}

void rt_wd_start(const char *program) {
  /* mpirun's names, PMI's, and srun's (a step's task count: a batch
   * script's SLURM_NTASKS would count ranks not yet started). */
  static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                      "SLURM_PROCID"};
  static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
  const char *dir = getenv(JOB_DIR_ENV), *launcher = getenv(JOB_LAUNCHER_ENV);
  stamp();
  if (wd.on || env_int(sizes, 3, 1) <= 1) return;
  wd.rank = env_int(ranks, 4, 0);
  const char *slash = program ? strrchr(program, '/') : NULL;
  wd.program = slash ? slash + 1 : program ? program : "?";
  wd.launcher = launcher ? (pid_t)atol(launcher) : 0;
  const char *test_host = getenv(JOB_TEST_HOST_ENV), *stall = getenv(JOB_TEST_RECORD_STALL_ENV);
  if (test_host && *test_host) snprintf(wd.host, sizeof wd.host, "%s", test_host);
  else if (gethostname(wd.host, sizeof wd.host - 1) != 0) snprintf(wd.host, sizeof wd.host, "?");
  if (stall && *stall) wd.record_stall = atof(stall);
  const char *lhost = getenv(JOB_LAUNCHER_HOST_ENV);
  wd.launcher_here = wd.launcher > 0 && lhost && !strcmp(lhost, wd.host) && launcher_alive();
  if (dir && *dir && strlen(dir) < sizeof wd.dir) {
    snprintf(wd.dir, sizeof wd.dir, "%s", dir);
    snprintf(wd.record, sizeof wd.record, "%s/" JOB_RECORD_FMT, dir, wd.rank);
    snprintf(wd.tmp, sizeof wd.tmp, "%s/.tmp-" JOB_RECORD_FMT, dir, wd.rank);
    snprintf(wd.abort_path, sizeof wd.abort_path, "%s/" JOB_ABORT_FILE, dir);
    snprintf(wd.exit_path, sizeof wd.exit_path, "%s/" JOB_RECORD_FMT ".exit", dir, wd.rank);
  }
  if (wd.launcher_here) map_slot();
  if (!wd.slot) open_beat();
  wd.on = 1;
  atexit(at_exit);
  write_record();
  if (pthread_create(&wd.thread, NULL, beat, NULL) != 0) {
    wd.on = 0;
    return;
  }
  /* Without a writer of its own the beat writes the record. */
  wd.has_writer = pthread_create(&wd.writer, NULL, writer, NULL) == 0;
}

void rt_wd_timeout(double timeout) { wd.timeout = timeout; }

int rt_wd_supervised(void) { return wd.on && launcher_alive(); }

void rt_wd_place(int tp, int pp, int dp) {
  snprintf(wd.coord, sizeof wd.coord, "tp=%d pp=%d dp=%d", tp, pp, dp);
  /* Now, not at the next beat: a rank may fail before that. */
  if (wd.on) write_record();
}

void rt_wd_phase(const char *fmt, ...) {
  if (!wd.on) return;
  int next = !atomic_load(&wd.cur);
  int first = !*wd.phase[!next];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(wd.phase[next], sizeof wd.phase[next], fmt, ap);
  va_end(ap);
  atomic_store(&wd.cur, next);
  stamp();
  publish_slot(0);
  /* The first phase now, not at the next beat: a rank killed before its
   * beat thread ran again (a small model, a loaded machine) would be
   * reported as still starting. */
  if (first) write_record();
}

void rt_wd_comm(const char *what, const char *comm) {
  if (!wd.on) return;
  atomic_store(&wd.comm_name, comm);
  atomic_store(&wd.comm_what, what);
  stamp();
}

void rt_wd_comm_done(void) {
  if (!wd.on) return;
  atomic_store(&wd.comm_what, NULL);
  stamp();
}

void rt_wd_error(const char *text) {
  if (!wd.on || atomic_load(&wd.has_why)) return;
  snprintf(wd.why, sizeof wd.why, "%s", text);
  size_t n = strlen(wd.why);
  while (n && wd.why[n - 1] == '\n') wd.why[--n] = 0;
  /* A record holds one line per key. */
  for (char *c = wd.why; *c; c++)
    if (*c == '\n') *c = ' ';
  atomic_store(&wd.has_why, 1);
}

void rt_wd_fail(const char *why) {
  if (!wd.on) return;
  if (!atomic_load(&wd.has_why)) rt_wd_error(why);
  atomic_store(&wd.status, 1);
  atomic_store(&wd.state, ST_FAILED);
  write_record();
}

void rt_wd_finish(int status) {
  if (!wd.on) return;
  /* The record's thread first, while the beat goes on, and for a second
   * at most: a write that a slow file system holds must neither stop the
   * beats of a rank that is only ending nor keep it from its end (the
   * thread, left behind, writes the same final record when it wakes). */
  atomic_store(&wd.status, status);
  atomic_store(&wd.state, status ? ST_EXITED : ST_DONE);
  rt_wd_phase("finishing");
  atomic_store(&wd.quit_writer, 1);
  if (wd.has_writer) {
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 100 && !atomic_load(&wd.writer_done); i++) nanosleep(&tick, NULL);
    if (atomic_load(&wd.writer_done)) pthread_join(wd.writer, NULL);
    else pthread_detach(wd.writer);
  }
  write_record();
  atomic_store(&wd.quit, 1);
  pthread_join(wd.thread, NULL);
  wd.on = 0;
}

/* ---------------------------------------------------------- the signals */

static volatile sig_atomic_t stop_signal, signals_seen, graceful;

static void on_signal(int sig, siginfo_t *info, void *ctx) {
  (void)ctx;
  /* mpirun ends the other ranks of a failed job with SIGTERM; under our
   * launcher a stop request never comes from mpirun. Only async-signal-safe
   * calls here: the note for the launcher is a file of its own. */
  if (wd.on && wd.launcher > 0 && info && info->si_pid == getppid() && info->si_pid != wd.launcher) {
    if (*wd.exit_path) {
      int fd = open(wd.exit_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ssize_t w = write(fd, "1\n", 2);
        (void)w;
        close(fd);
      }
    }
    _exit(1);
  }
  if (signals_seen++ || !graceful) _exit(128 + sig);
  stop_signal = sig;
}

void rt_wd_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

void rt_wd_graceful(int on) { graceful = on; }

int rt_wd_stop_requested(void) { return stop_signal != 0; }
int rt_wd_stop_signal(void) { return stop_signal; }
