/* `shardc build`, `shardc run` and `shardc sample`: from a model to a
 * running training program, and from a checkpoint to generated text. The
 * programs are compiled into a cache folder keyed by everything that
 * shapes them, so running the same model again rebuilds nothing. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../abi/flags.h"
#include "../abi/job.h"
#include "../codegen/codegen.h"
#include "bpe_text.h"
#include "driver.h"

/* ------------------------------------------------------------------ build */

static const DrvOption build_options[] = {{NULL, NULL, NULL}};

const DrvCommand drv_build_command = {
    "build", "DIR", "build the rank programs that `shardc compile -o DIR` wrote",
    "Runs the Makefile in DIR (the same as make -C DIR).", build_options, drv_cmd_build};

/* Runs `make -s -C dir`, its output going to ours; returns its exit status. */
static int run_make(const char *dir) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    execlp("make", "make", "-s", "-C", dir, (char *)NULL);
    fprintf(stderr, "shardc: error: cannot run make: %s\n", strerror(errno));
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) die("waitpid: %s", strerror(errno));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  fprintf(stderr, "shardc: error: building the programs in %s failed\n", dir);
  return 1;
}

int drv_cmd_build(int nargs, DrvArg *args) {
  const char *dir = drv_model_arg(&drv_build_command, nargs, args);
  if (!dir) return 1;
  struct stat st;
  if (stat(ir_fmt("%s/Makefile", dir), &st) != 0)
    return drv_usage_error(&drv_build_command, "%s has no Makefile (write one with shardc compile "
                           "MODEL --target cpu -o %s)", dir, dir);
  return run_make(dir);
}

/* --------------------------------------------------------------- the cache */

static uint64_t hash_file(uint64_t h, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return ir_hash_bytes(h, path, strlen(path));
  char buf[65536];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) h = ir_hash_bytes(h, buf, got);
  fclose(f);
  return h;
}

/* The folder a model's programs are compiled into: under --out, or
 * .shardc/NAME-HASH where the hash covers the model text, the overrides,
 * the real type and the shardc binary itself (a rebuilt compiler may write
 * different programs). */
static const char *cache_dir(const char *model, int nargs, DrvArg *args, IrDType dtype) {
  const char *out = drv_value(nargs, args, "--out");
  if (out) return out;
  /* FNV-1a is enough to tell configurations apart in a folder name. */
  uint64_t h = hash_file(IR_HASH_SEED, model);
  /* Every compile option shapes the programs: -D and the parallel flags. */
  for (int i = 0; i < nargs; i++) {
    if (!args[i].opt || strcmp(args[i].opt->name, "--out") == 0 || drv_launch_option(args[i].opt))
      continue;
    h = ir_hash_bytes(h, args[i].opt->name, strlen(args[i].opt->name) + 1);
    if (args[i].value) h = ir_hash_bytes(h, args[i].value, strlen(args[i].value) + 1);
  }
  h = ir_hash_bytes(h, &dtype, sizeof dtype);
  h = hash_file(h, "/proc/self/exe");
  const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
  const char *dot = strrchr(base, '.');
  size_t len = dot ? (size_t)(dot - base) : strlen(base);
  return ir_fmt(".shardc/%.*s-%016llx", (int)len, base, (unsigned long long)h);
}

/* Whether this machine shows an NVIDIA GPU: the driver's device files,
 * without linking CUDA into the compiler. */
static bool gpu_visible(void) {
  return access("/dev/nvidiactl", F_OK) == 0 && access("/dev/nvidia0", F_OK) == 0;
}

/* The target of a run: --target, else cuda where a GPU is visible and the
 * layout is one rank, else cpu: the CUDA target's many-rank programs (over
 * NCCL) are chosen only by name until they have been checked on GPUs
 * (docs/targets.md); without
 * --target the choice is said once, on stderr, unless quiet. */
static const char *run_target(int nargs, DrvArg *args, const PassOptions *opt, bool quiet) {
  const char *target = drv_value(nargs, args, "--target");
  if (target) return target;
  bool gpu = gpu_visible(), one_rank = opt->tp * opt->pp * opt->dp == 1;
  target = cg_run_target(gpu, one_rank);
  const char *why = !gpu      ? "no GPU visible"
                    : one_rank ? "a GPU is visible"
                               : "a GPU is visible; --target cuda for many ranks over NCCL";
  if (!quiet) fprintf(stderr, "shardc run: target %s (%s; --target NAME to choose)\n", target, why);
  return target;
}

/* Compiles (quietly unless asked) and builds; returns the folder of the
 * programs (rank0, or stage0, stage1, ... with pipeline stages). */
static const char *compile_and_build(const char *model, int nargs, DrvArg *args, IrDType dtype,
                                     const char *target, FILE *plan) {
  const char *dir = cache_dir(model, nargs, args, dtype);
  if (drv_compile_to_dir(model, nargs, args, target, dir, dtype, plan, NULL) != 0) return NULL;
  if (run_make(dir) != 0) return NULL;
  return dir;
}

/* OpenMP threads that spin while they wait for work steal the cores that
 * OpenBLAS and other processes need; passive waiting measured faster even on
 * an idle machine (bench/cpu_train.sh). The user's setting wins. */
static void default_wait_policy(void) { setenv("OMP_WAIT_POLICY", "passive", 0); }

/* Under an address-space limit (ulimit -v) too small for OpenBLAS, its
 * constructor retries a failing mmap of its 128 MiB buffer forever, before
 * the program's main, where nothing of ours can see it (with several
 * ranks the launcher's watchdog names the rank that never started). So
 * when such a limit is set, the program is first started with --help,
 * which it answers at once, under a time limit: one that has not ended
 * within 5 s is spinning. Returns -1 after the error. */
static int probe_start(const char *program) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
  pid_t pid = fork();
  if (pid < 0) return 0; /* the exec below reports what goes wrong */
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    execl(program, program, "--help", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 100; i++) {
    if (waitpid(pid, NULL, WNOHANG) == pid) return 0;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  fprintf(stderr, "shardc run: error: %s did not start within 5 s under the address-space limit "
          "of %llu KiB (ulimit -v): OpenBLAS cannot map its buffers and retries forever; raise "
          "or remove the limit\n", program, (unsigned long long)(rl.rlim_cur / 1024));
  return -1;
}

/* Replaces this process with the program, so its exit status and signals
 * are the user's to see. */
static int exec_program(const char *program, char **argv) {
  if (probe_start(program) != 0) return 1;
  default_wait_policy();
  fflush(stdout);
  fflush(stderr);
  execv(program, argv);
  fprintf(stderr, "shardc: error: cannot start %s: %s\n", program, strerror(errno));
  return 1;
}

/* ---------------------------------------------------------- the launcher
 *
 * With several ranks `shardc run` stays as the parent of mpirun and
 * watches the job (abi/job.h, docs/reliability.md): each rank reports in a
 * record of its own a few times a second; a rank that raised an error, one
 * that vanished (killed, crashed), one whose heartbeat stopped (SIGSTOP, a
 * frozen machine) and one that made no progress for --timeout seconds each
 * end the whole job, with one message naming the rank, its coordinates and
 * why. mpirun runs in a process group of its own, which the launcher kills
 * when the ranks do not go by themselves; mpirun's own banners about the
 * failure are left out (the message says it better). SIGTERM and SIGINT
 * sent to `shardc run` are passed on to the ranks (preemption). */

typedef struct JobRank {
  int seen;          /* a record was read */
  pid_t pid;
  long beat;
  double beat_at;    /* our clock when beat last changed */
  double idle;
  char coord[64], program[256], action[400], state[16], why[1024];
  int status, has_status;
  int exit_note;     /* the rank left a RANK.exit note (mpirun ended it) */
  int end_signal;    /* from its parent's RANK.end note: the signal that killed it */
  int end_status;    /* ... or its exit status; -1 while there is no note */
  double gone_at;    /* our clock at the last probe that found its process alive */
  int gone;          /* its process no longer runs */
  int local;         /* it runs on this machine (its pid means something here) */
  char proc_state;   /* /proc/PID/stat's state letter, 0 if unknown */
  int live;          /* idle and action come from shared memory: current */
  /* The last beat over the socket (a rank of another machine). */
  int net;
  struct sockaddr_storage net_from; /* where its beats come from (IPv4 or IPv6) */
  socklen_t net_from_len;           /* 0 until a beat came */
  long net_beat;
  double net_idle, net_at; /* its idle time, and our clock when it came */
  char net_action[400];
} JobRank;

typedef struct Job {
  const char *dir;
  int n;
  JobRank *r;
  double timeout;
  pid_t child;
  int signalled; /* a signal was passed on: ranks may exit on it */
  double started;   /* our clock when mpirun was started */
  double signal_at; /* ... when the last signal was passed on */
  /* From mpirun's banners: the rank it saw die of a signal. */
  int banner_rank, banner_signal;
  char banner_signame[64];
  char line[4096];
  size_t len;
  int in_block;
  char block[8192];
  size_t block_len;
} Job;

/* The job's shared memory (abi/job.h): the heartbeats of the ranks of
 * this machine, which no file system delays; NULL when /dev/shm is not
 * there (the records alone then). */
static unsigned char *job_shm;
static size_t job_shm_len;
static const char *job_shm_path;

static void job_shm_create(const char *jobdir, int ranks) {
  const char *base = strrchr(jobdir, '/');
  const char *path = ir_fmt("/dev/shm/shardc-%ld-%s", (long)getpid(), base ? base + 1 : jobdir);
  size_t len = JOB_SHM_HEAD + (size_t)ranks * JOB_SLOT_BYTES;
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  void *p = ftruncate(fd, (off_t)len) == 0
                ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) {
    unlink(path);
    return;
  }
  job_shm = p;
  job_shm_len = len;
  job_shm_path = path;
  setenv(JOB_SHM_ENV, path, 1);
}

static void job_shm_remove(void) {
  if (!job_shm) return;
  munmap(job_shm, job_shm_len);
  if (job_shm_path) unlink(job_shm_path);
  job_shm = NULL;
}

/* Rank i's slot, once the rank has written it. */
/* The socket the ranks of other machines beat to (abi/job.h: JOB_BEAT_ENV);
 * -1 when there is none. */
static int job_beat_fd = -1;
static uint64_t job_beat_token;

/* A datagram socket on every address of this machine: IPv6 with IPv4
 * mapped into it where the machine has IPv6 (so that a rank reaches it by
 * whichever address its name resolves to there), else IPv4. Returns the
 * socket and its port, or -1. */
static int beat_socket(unsigned *port) {
  int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_any};
    socklen_t len = sizeof a;
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) == 0 &&
        bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
      *port = ntohs(a.sin6_port);
      return fd;
    }
    close(fd);
  }
  fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

static void job_beat_open(void) {
  unsigned port = 0;
  int fd = beat_socket(&port);
  if (fd < 0) return;
  /* The name the ranks look up; a test may give an address instead. */
  char host[256] = "";
  const char *test_host = getenv(JOB_TEST_BEAT_HOST_ENV);
  if (test_host && *test_host) {
    snprintf(host, sizeof host, "%s", test_host);
  } else if (gethostname(host, sizeof host - 1) != 0) {
    close(fd);
    return;
  }
  int ur = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (ur < 0 || read(ur, &job_beat_token, sizeof job_beat_token) != (ssize_t)sizeof job_beat_token)
    job_beat_token = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
  if (ur >= 0) close(ur);
  job_beat_fd = fd;
  setenv(JOB_BEAT_ENV, ir_fmt("%s:%u:%llu", host, port, (unsigned long long)job_beat_token), 1);
}

/* Every beat that came since the last look, into its rank's record. */
static void job_beat_drain(Job *j, double now) {
  if (job_beat_fd < 0) return;
  JobBeat b;
  ssize_t got;
  struct sockaddr_storage from;
  socklen_t flen = sizeof from;
  while ((got = recvfrom(job_beat_fd, &b, sizeof b, 0, (struct sockaddr *)&from, &flen)) >= 0) {
    socklen_t got_len = flen;
    flen = sizeof from;
    if (got != (ssize_t)sizeof b || b.magic != JOB_BEAT_MAGIC || b.token != job_beat_token ||
        b.rank < 0 || b.rank >= j->n)
      continue;
    JobRank *r = &j->r[b.rank];
    if (r->net && b.beat <= r->net_beat) continue; /* late, out of order */
    r->net = 1;
    if (got_len > 0 && got_len <= sizeof from) {
      r->net_from = from;
      r->net_from_len = got_len;
    }
    r->net_beat = (long)b.beat;
    r->net_idle = (double)b.idle_ns * 1e-9;
    r->net_at = now;
    b.action[sizeof b.action - 1] = 0;
    snprintf(r->net_action, sizeof r->net_action, "%s", b.action);
  }
}

/* The stop, to every rank that beats over the socket (abi/job.h:
 * JOB_STOP_MAGIC): UDP may lose one, so it is sent again while the job
 * ends. */
static void job_beat_stop(const Job *j) {
  if (job_beat_fd < 0) return;
  JobBeat b;
  memset(&b, 0, sizeof b);
  b.magic = JOB_STOP_MAGIC;
  b.token = job_beat_token;
  for (int i = 0; i < j->n; i++)
    if (j->r[i].net && j->r[i].net_from_len > 0)
      (void)!sendto(job_beat_fd, &b, sizeof b, MSG_DONTWAIT | MSG_NOSIGNAL,
                    (const struct sockaddr *)&j->r[i].net_from, j->r[i].net_from_len);
}

static void job_beat_close(void) {
  if (job_beat_fd >= 0) close(job_beat_fd);
  job_beat_fd = -1;
}

static const JobSlot *job_slot(int i) {
  if (!job_shm) return NULL;
  const JobSlot *s = (const JobSlot *)(job_shm + JOB_SHM_HEAD + (size_t)i * JOB_SLOT_BYTES);
  return __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == JOB_SLOT_MAGIC ? s : NULL;
}

/* Once every rank of this machine has mapped its slot, the name is not
 * needed: removing it then leaves nothing in /dev/shm even when the
 * launcher is killed with SIGKILL. Ranks of other machines never map
 * theirs, so with any of them the name stays until the job ends. */
static void job_shm_unlink_when_mapped(const Job *j) {
  if (!job_shm || !job_shm_path) return;
  for (int i = 0; i < j->n; i++)
    if (!job_slot(i)) return;
  unlink(job_shm_path);
  job_shm_path = NULL;
}

static double job_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile sig_atomic_t job_signals, job_last_signal;
static void job_on_signal(int sig) {
  job_signals++;
  job_last_signal = sig;
}

/* The note rank i's parent (rankwrap.c) leaves when the rank has ended. */
static void read_end_note(Job *j, int i) {
  JobRank *r = &j->r[i];
  if (r->end_status >= 0 || r->end_signal) return;
  char path[4200], word[16];
  snprintf(path, sizeof path, "%s/" JOB_RECORD_FMT JOB_END_SUFFIX, j->dir, i);
  FILE *f = fopen(path, "r");
  if (!f) return;
  int v;
  if (fscanf(f, "%15s %d", word, &v) == 2) {
    if (!strcmp(word, "signal")) r->end_signal = v;
    else if (!strcmp(word, "status")) r->end_status = v;
  }
  fclose(f);
}

/* Reads rank i's record (and its exit notes) into j->r[i]. */
static void read_record(Job *j, int i, double now) {
  JobRank *r = &j->r[i];
  char path[4200], buf[8192];
  /* The end note first: a rank's parent writes it after the exit note
   * (rankwrap.c), so a rank seen ended is never missing the other. */
  read_end_note(j, i);
  snprintf(path, sizeof path, "%s/" JOB_RECORD_FMT ".exit", j->dir, i);
  if (access(path, F_OK) == 0) r->exit_note = 1;
  snprintf(path, sizeof path, "%s/" JOB_RECORD_FMT, j->dir, i);
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[got] = 0;
  long beat = -1;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    char *sp = strchr(line, ' ');
    if (!sp) continue;
    *sp = 0;
    const char *v = sp + 1;
    if (!strcmp(line, "pid")) r->pid = (pid_t)atol(v);
    else if (!strcmp(line, "host")) {
      char here[256] = "";
      gethostname(here, sizeof here - 1);
      r->local = !strcmp(v, here);
    }
    else if (!strcmp(line, "beat")) beat = atol(v);
    else if (!strcmp(line, "idle")) r->idle = atof(v);
    else if (!strcmp(line, "coord")) snprintf(r->coord, sizeof r->coord, "%s", v);
    else if (!strcmp(line, "program")) snprintf(r->program, sizeof r->program, "%s", v);
    else if (!strcmp(line, "action")) snprintf(r->action, sizeof r->action, "%s", v);
    else if (!strcmp(line, "state")) snprintf(r->state, sizeof r->state, "%s", v);
    else if (!strcmp(line, "why")) snprintf(r->why, sizeof r->why, "%s", v);
    else if (!strcmp(line, "status")) r->status = atoi(v), r->has_status = 1;
  }
  /* On this machine the beat, the progress and the action come from
   * shared memory: current, whatever the file system does to the record. */
  const JobSlot *s = job_slot(i);
  r->live = s != NULL;
  if (s) {
    beat = (long)__atomic_load_n(&s->beat, __ATOMIC_ACQUIRE);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    r->idle = (double)(ns - (long long)__atomic_load_n(&s->progress_ns, __ATOMIC_ACQUIRE)) * 1e-9;
    if (r->pid <= 0) r->pid = (pid_t)s->pid, r->local = 1;
    for (int tries = 0; tries < 4; tries++) {
      uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
      if (seq & 1) continue;
      char action[sizeof s->action];
      memcpy(action, s->action, sizeof action);
      __atomic_thread_fence(__ATOMIC_ACQUIRE);
      if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != seq) continue;
      action[sizeof action - 1] = 0;
      if (*action) snprintf(r->action, sizeof r->action, "%s", action);
      break;
    }
  }
  /* From another machine, the beat that came over the socket: the record
   * may be late (a shared file system). */
  if (!s && r->net) {
    beat = r->net_beat;
    r->idle = r->net_idle + (now - r->net_at);
    if (*r->net_action) snprintf(r->action, sizeof r->action, "%s", r->net_action);
    r->live = 1;
  }
  if (!r->seen || beat != r->beat) r->beat_at = now;
  r->beat = beat;
  r->seen = 1;
}

/* Whether the rank's process is gone, and its state letter while not. */
static void probe_process(JobRank *r, double now) {
  if (!r->seen || !r->local || r->pid <= 0 || r->gone) return;
  r->gone_at = now;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)r->pid);
  FILE *f = fopen(path, "r");
  if (f) {
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = 0;
    const char *paren = strrchr(buf, ')');
    r->proc_state = paren && paren[1] == ' ' ? paren[2] : 0;
    if (r->proc_state == 'Z' || r->proc_state == 'X') r->gone = 1;
    return;
  }
  if (kill(r->pid, 0) != 0 && errno == ESRCH) r->gone = 1;
}

static void scan(Job *j) {
  double now = job_now();
  job_beat_drain(j, now);
  for (int i = 0; i < j->n; i++) {
    read_record(j, i, now);
    probe_process(&j->r[i], now);
  }
}

/* A rank whose parent noted "status 0" has finished too, even when its
 * last record was not written or not yet seen (a slow file system). */
static int finished(const JobRank *r) {
  return !strcmp(r->state, "done") || !strcmp(r->state, "exited") ||
         !strcmp(r->state, "failed") || (r->end_status == 0 && !r->end_signal);
}

/* Waiting longer than this for a rank's end note is not worth it. */
#define JOB_END_WAIT 0.5

/* "SIGKILL" for 9: the signals a rank may die of. */
static const char *signal_name(int sig) {
  static const struct {
    int sig;
    const char *name;
  } names[] = {{SIGKILL, "SIGKILL"}, {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},
               {SIGABRT, "SIGABRT"}, {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},
               {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},   {SIGHUP, "SIGHUP"},
               {SIGQUIT, "SIGQUIT"}, {SIGPIPE, "SIGPIPE"}, {SIGXCPU, "SIGXCPU"},
               {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}, {SIGALRM, "SIGALRM"}};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (names[k].sig == sig) return names[k].name;
  return "a signal";
}

/* Why a rank whose process is gone (without a finished record) ended. */
static void gone_why(const Job *j, const JobRank *r, int i, char *why, size_t len) {
  int sig = r->end_signal ? r->end_signal : j->banner_rank == i ? j->banner_signal : 0;
  if (sig)
    snprintf(why, len, "was killed by signal %d (%s) in %s", sig, signal_name(sig), r->action);
  else if (r->end_status >= 0)
    snprintf(why, len, "exited with status %d without a word in %s", r->end_status, r->action);
  else
    snprintf(why, len, "died without a word (killed by a signal such as SIGKILL, or crashed) "
             "in %s", r->action);
}

/* The verdict: the rank to blame and why, or -1 while all is well. In
 * order: a rank that reported an error, one that vanished, one whose
 * heartbeat stopped, one that made no progress. The last two wait 0.8 of
 * --timeout, so that the job is down within --timeout. */
static int judge(Job *j, char *why, size_t len) {
  double now = job_now(), limit = 0.8 * j->timeout;
  for (int i = 0; i < j->n; i++) {
    JobRank *r = &j->r[i];
    int exited = !strcmp(r->state, "exited") && r->status != 0 && r->status != JOB_EXIT_PREEMPTED;
    if (!strcmp(r->state, "failed") || exited) {
      snprintf(why, len, "failed: %s", *r->why ? r->why : "exit status 1");
      return i;
    }
  }
  for (int i = 0; i < j->n; i++) {
    JobRank *r = &j->r[i];
    if (!r->seen || !r->gone || finished(r) || r->exit_note || j->signalled) continue;
    /* Its parent writes how it ended right after; give it a moment. */
    if (!r->end_signal && r->end_status < 0 && now - r->gone_at < JOB_END_WAIT) continue;
    gone_why(j, r, i, why, len);
    return i;
  }
  if (j->timeout <= 0) return -1;
  /* A rank that never reported: mpirun could not start it, or it hangs
   * before its main (OpenBLAS under a small `ulimit -v`). Starting may
   * take a while on a loaded machine: at least 30 s. */
  double start_limit = j->timeout > 30 ? j->timeout : 30;
  for (int i = 0; i < j->n && now - j->started > start_limit; i++)
    if (!j->r[i].seen) {
      snprintf(why, len, "never started: no record after %.0f s (mpirun could not start it, or "
               "it hangs before its main: a small ulimit -v or -n?)", now - j->started);
      return i;
    }
  for (int i = 0; i < j->n; i++) {
    JobRank *r = &j->r[i];
    if (!r->seen || r->gone || finished(r) || now - r->beat_at < limit) continue;
    snprintf(why, len, "stopped answering%s: no heartbeat for %.0f s, no progress for %.0f s in %s",
             r->proc_state == 'T' ? " (the process is stopped)" : "", now - r->beat_at,
             r->live ? r->idle : r->idle + now - r->beat_at, r->action);
    return i;
  }
  /* A rank computing without progress is to blame before those that
   * wait for it inside a communication call (which may have started
   * waiting a little before it stopped moving); among equals, the one
   * idle longest. */
  int worst = -1, worst_waits = 1, late = 0;
  for (int i = 0; i < j->n; i++) {
    JobRank *r = &j->r[i];
    if (!r->seen || r->gone || finished(r) || r->idle < limit / 2) continue;
    /* A rank whose beat stopped too is one that stopped answering (the
     * check above, once its beat is as late as --timeout allows). */
    if (now - r->beat_at > 5 * JOB_BEAT_SECONDS + 0.5) continue;
    int waits = strstr(r->action, ", in MPI_") != NULL;
    late |= r->idle >= limit;
    if (worst < 0 || waits < worst_waits || (waits == worst_waits && r->idle > j->r[worst].idle))
      worst = i, worst_waits = waits;
  }
  if (!late) return -1;
  if (worst >= 0)
    snprintf(why, len, "made no progress for %.0f s in %s", j->r[worst].idle, j->r[worst].action);
  return worst;
}

/* ------------------------------------------------ mpirun's stderr */

/* mpirun's banners (between lines of dashes) about a failed rank are
 * replaced by the launcher's message; what it says of a rank's signal is
 * kept for it. Every other line passes through. */
static int is_rule(const char *s) {
  size_t n = strspn(s, "-");
  return n >= 20 && (s[n] == 0 || s[n] == '\n');
}

static void banner_block(Job *j) {
  const char *b = j->block;
  const char *p = strstr(b, "process rank ");
  int rank, sig;
  if (p && sscanf(p, "process rank %d", &rank) == 1) {
    const char *s = strstr(p, "on signal ");
    if (s && sscanf(s, "on signal %d", &sig) == 1) {
      j->banner_rank = rank;
      j->banner_signal = sig;
      const char *open = strchr(s, '('), *close = open ? strchr(open, ')') : NULL;
      snprintf(j->banner_signame, sizeof j->banner_signame, "%.*s",
               open && close ? (int)(close - open - 1) : 1, open && close ? open + 1 : "?");
    }
  }
  if (strstr(b, "mpirun") || strstr(b, "mpiexec") || strstr(b, "MPI_ABORT") ||
      strstr(b, "Primary job") || strstr(b, "prterun"))
    return;
  fputs(b, stderr);
}

static void err_line(Job *j, const char *s) {
  if (is_rule(s)) {
    if (j->in_block) {
      j->in_block = 0;
      if (j->block_len + strlen(s) < sizeof j->block) strcat(j->block, s);
      banner_block(j);
      return;
    }
    j->in_block = 1;
    snprintf(j->block, sizeof j->block, "%s", s);
    j->block_len = strlen(j->block);
    return;
  }
  if (j->in_block) {
    size_t n = strlen(s);
    if (j->block_len + n < sizeof j->block) {
      memcpy(j->block + j->block_len, s, n + 1);
      j->block_len += n;
    }
    return;
  }
  /* The reminders Open MPI adds after a banner it aggregated, and what
   * PMIx says when a rank it was told to outlive dies. */
  if (strstr(s, "help message") || strstr(s, "orte_base_help_aggregate") ||
      strstr(s, "PMIX ERROR: BAD-PARAM"))
    return;
  fputs(s, stderr);
  fflush(stderr);
}

/* Reads what mpirun wrote to its stderr, waiting up to wait_ms for it;
 * returns the bytes read (0 at the end or when nothing came). */
static ssize_t pump(Job *j, int fd, int wait_ms) {
  struct pollfd pfd = {fd, POLLIN, 0};
  if (fd < 0 || poll(&pfd, 1, wait_ms) <= 0) return 0;
  char buf[4096];
  ssize_t got = read(fd, buf, sizeof buf);
  for (ssize_t i = 0; i < got; i++) {
    if (j->len < sizeof j->line - 2) j->line[j->len++] = buf[i];
    if (buf[i] == '\n' || j->len >= sizeof j->line - 2) {
      j->line[j->len] = 0;
      err_line(j, j->line);
      j->len = 0;
    }
  }
  return got > 0 ? got : 0;
}

/* ------------------------------------------------ ending the job */

static void kill_ranks(Job *j, int sig) {
  for (int i = 0; i < j->n; i++)
    if (j->r[i].seen && j->r[i].local && j->r[i].pid > 0 && !j->r[i].gone) kill(j->r[i].pid, sig);
}

/* Asks the ranks to stop (the abort file), gives them two seconds, then
 * kills what is left: the ranks by their ids and mpirun's process group. */
static void abort_job(Job *j, int *status, int *reaped) {
  char path[4200];
  if (job_shm) __atomic_store_n((uint32_t *)job_shm, 1u, __ATOMIC_RELEASE);
  snprintf(path, sizeof path, "%s/" JOB_ABORT_FILE, j->dir);
  FILE *f = fopen(path, "w");
  if (f) fclose(f);
  double until = job_now() + 2, stop_at = 0;
  while (!*reaped && job_now() < until) {
    if (waitpid(j->child, status, WNOHANG) == j->child) *reaped = 1;
    if (job_now() >= stop_at) job_beat_stop(j), stop_at = job_now() + 0.2;
    scan(j);
    /* Ranks that can still exit by themselves: not those stopped, nor
     * those whose beat stopped (one on another machine, whose state this
     * machine cannot read). */
    int running = 0;
    double now = job_now();
    for (int i = 0; i < j->n; i++)
      running += j->r[i].seen && !j->r[i].gone && j->r[i].proc_state != 'T' &&
                 now - j->r[i].beat_at <= 5 * JOB_BEAT_SECONDS + 0.5;
    if (!running) break;
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
  }
  /* What is left (a stopped rank) is killed; mpirun, which outlives its
   * ranks here, then exits by itself once it has reaped them (or is
   * killed with its process group a second later). */
  scan(j);
  kill_ranks(j, SIGKILL);
  until = job_now() + 1;
  while (!*reaped && job_now() < until) {
    if (waitpid(j->child, status, WNOHANG) == j->child) *reaped = 1;
    else nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
  }
  if (!*reaped) {
    kill(-j->child, SIGKILL);
    while (waitpid(j->child, status, 0) < 0 && errno == EINTR) {}
    *reaped = 1;
  }
}

/* What became of the other ranks: "ranks 0, 1, 3 exited with status 1". */
static void outcome(Job *j, int blamed, char *buf, size_t len) {
  static const char *const kinds[] = {"exited with status 1", "were killed"};
  size_t n = 0;
  buf[0] = 0;
  for (int kind = 0; kind < 2; kind++) {
    int count = 0;
    for (int i = 0; i < j->n; i++) {
      JobRank *r = &j->r[i];
      int exited = r->exit_note || (r->has_status && r->status == 1);
      if (i == blamed || exited != !kind || n + 16 >= len) continue;
      n += (size_t)snprintf(buf + n, len - n, "%s%d", count++ ? ", " : n ? "; ranks " : "ranks ", i);
    }
    if (count && n + 32 < len) n += (size_t)snprintf(buf + n, len - n, " %s", kinds[kind]);
  }
}

/* Passes SIGTERM and SIGINT sent to us on to every rank (the first stops
 * them after their step, the second at once); before any rank reported,
 * to mpirun. */
static void forward_signals(Job *j, int *forwarded) {
  while (*forwarded < job_signals) {
    ++*forwarded;
    j->signalled = 1;
    j->signal_at = job_now();
    int any = 0;
    for (int i = 0; i < j->n; i++) any |= j->r[i].seen;
    if (any) kill_ranks(j, job_last_signal);
    else kill(j->child, job_last_signal);
  }
}

/* Watches the job to its end; returns the exit status of `shardc run`. */
static int supervise(Job *j, int errfd) {
  int status = 0, reaped = 0, blamed = -1, forwarded = 0;
  char why[2048] = "";
  while (!reaped) {
    pump(j, errfd, 100);
    if (waitpid(j->child, &status, WNOHANG) == j->child) reaped = 1;
    scan(j);
    job_shm_unlink_when_mapped(j);
    forward_signals(j, &forwarded);
    /* The launcher always answers its signals: when what they were passed
     * on to has not gone 3 s later (mpirun hung before its ranks started,
     * a rank that ignores them), mpirun's group and the ranks are killed. */
    if (!reaped && forwarded && job_now() - j->signal_at > 3) {
      int seen = 0;
      for (int i = 0; i < j->n; i++) seen += j->r[i].seen;
      if (forwarded >= 2 || !seen) {
        kill_ranks(j, SIGKILL);
        kill(-j->child, SIGKILL);
        forwarded = 2; /* ends as a second signal does: 128 + the signal */
      }
    }
    /* After a second signal the ranks exit at once: nothing to judge. */
    if (reaped || forwarded >= 2) continue;
    blamed = judge(j, why, sizeof why);
    if (blamed >= 0) abort_job(j, &status, &reaped);
  }
  while (pump(j, errfd, 200) > 0) {}
  scan(j);
  /* A rank that a signal ended before its training began exits with 128
   * + the signal, as a second signal makes them all. */
  int by_signal = forwarded >= 2;
  for (int i = 0; i < j->n && forwarded; i++)
    by_signal |= j->r[i].gone && !finished(&j->r[i]) && !j->r[i].exit_note;
  if (by_signal) return 128 + job_last_signal;
  if (blamed < 0) {
    /* mpirun ended by itself: did a rank fail on the way? */
    for (int i = 0; i < j->n; i++) j->r[i].gone = 1;
    blamed = judge(j, why, sizeof why);
  }
  if (blamed >= 0) {
    JobRank *r = &j->r[blamed];
    char rest[600];
    outcome(j, blamed, rest, sizeof rest);
    fprintf(stderr, "shardc: error: rank %d (%s, program %s) %s; the job is stopped%s%s\n", blamed,
            *r->coord ? r->coord : "coordinates not yet known", *r->program ? r->program : "?",
            why, *rest ? ": " : "", rest);
    fflush(stderr);
    return 1;
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  int done = 0;
  for (int i = 0; i < j->n; i++)
    done += (!strcmp(j->r[i].state, "done") && j->r[i].has_status && j->r[i].status == 0) ||
            (j->r[i].end_status == 0 && !j->r[i].end_signal);
  /* A job whose every rank finished is never reported failed. */
  if (done == j->n && j->n > 0) {
    if (code)
      fprintf(stderr, "shardc: note: mpirun exited with status %d after every rank had "
              "finished\n", code);
    return 0;
  }
  /* mpirun itself ended before its ranks (someone sent it SIGTERM or
   * SIGKILL): say so, and leave no rank behind. */
  int stopped = 0;
  for (int i = 0; i < j->n; i++)
    stopped += j->r[i].has_status && j->r[i].status == JOB_EXIT_PREEMPTED;
  if (code && !j->signalled && stopped < j->n) {
    scan(j);
    kill_ranks(j, SIGKILL);
    char how[64];
    if (WIFSIGNALED(status))
      snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
               signal_name(WTERMSIG(status)));
    else
      snprintf(how, sizeof how, "exited with status %d", code);
    fprintf(stderr, "shardc: error: mpirun (pid %ld) %s before the job ended, %d of %d ranks "
            "having finished; the job is stopped\n", (long)j->child, how, done, j->n);
    fflush(stderr);
    return code;
  }
  /* A preempted job: every rank stopped after its step. */
  int preempted = j->n > 0;
  for (int i = 0; i < j->n; i++)
    preempted &= j->r[i].has_status && j->r[i].status == JOB_EXIT_PREEMPTED;
  return preempted ? JOB_EXIT_PREEMPTED : code;
}

static void remove_job_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")))
        unlink(ir_fmt("%s/%s", dir, e->d_name));
    closedir(d);
  }
  rmdir(dir);
}

/* The folder of the ranks' records, beside the programs. */
static const char *make_job_dir(const char *program) {
  const char *slash = strrchr(program, '/');
  char *tmpl = (char *)ir_fmt("%.*s/job-XXXXXX", slash ? (int)(slash - program) : 1,
                              slash ? program : ".");
  if (!mkdtemp(tmpl)) return NULL;
  char *abs = realpath(tmpl, NULL);
  const char *dir = abs ? ir_strdup(abs) : tmpl;
  free(abs);
  return dir;
}

/* --timeout S among the program's flags (default 300). */
static double job_timeout(char **argv) {
  for (int i = 1; argv[i]; i++) {
    if (!strncmp(argv[i], "--timeout=", 10)) return atof(argv[i] + 10);
    if (!strcmp(argv[i], "--timeout") && argv[i + 1]) return atof(argv[i + 1]);
  }
  return 300;
}

/* Starts mpirun (argv) in a process group of its own, its stderr through
 * a pipe, and watches the job to its end (supervise). */
static int launch(char **mv, int ranks, const char *dir, double timeout) {
  int pipefd[2];
  if (pipe(pipefd) != 0) die("pipe: %s", strerror(errno));
  fflush(stdout);
  fflush(stderr);
  pid_t self = getpid();
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    /* mpirun (and through it every rank) ends when `shardc run` dies,
     * even of SIGKILL: SIGTERM makes it take its ranks down. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != self) _exit(1); /* the launcher died before prctl */
    /* In a background group mpirun must not read the terminal. */
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0), close(null);
    dup2(pipefd[1], 2);
    close(pipefd[0]);
    close(pipefd[1]);
    execvp(mv[0], mv);
    fprintf(stderr, "shardc: error: cannot start %s for %d ranks: %s\n", mv[0], ranks,
            strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(pipefd[1]);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = job_on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  Job j = {.dir = dir, .n = ranks, .timeout = timeout, .child = pid, .banner_rank = -1,
           .started = job_now()};
  j.r = ir_alloc(sizeof(JobRank) * (size_t)ranks);
  memset(j.r, 0, sizeof(JobRank) * (size_t)ranks);
  for (int i = 0; i < ranks; i++) j.r[i].end_status = -1;
  int status = supervise(&j, pipefd[0]);
  close(pipefd[0]);
  /* SHARDC_JOB_KEEP=1 keeps the records (for tests and post-mortems). */
  const char *keep = getenv("SHARDC_JOB_KEEP");
  if (dir && !(keep && *keep == '1')) remove_job_dir(dir);
  job_shm_remove();
  job_beat_close();
  return status;
}

/* Starts the program on `ranks` ranks of this machine with mpirun, by the
 * launch recipe of runtime/comm/comm.h (tests/runtime/comm/mpirun.sh applies the same):
 * as root the two variables Open MPI needs, --oversubscribe (more ranks
 * than cores is allowed), --bind-to none (each rank's OpenMP threads may use
 * every core), mpi_yield_when_idle (a waiting rank gives its core away), and
 * OMP_NUM_THREADS = max(1, cores / ranks) unless the environment sets it.
 * shardc stays mpirun's parent and watches the job (launch, above): the
 * exit status is mpirun's, non-zero when any rank fails (1 when shardc
 * had to end the job itself). Rank 0 prints the progress; the other ranks
 * print only errors, each as `shardc: error: rank R: ...`. */
#ifndef SHARDC_MPIEXEC
#define SHARDC_MPIEXEC "mpirun"
#endif

/* `programs` of `per` ranks each, in rank order: with pipeline stages
 * stage r's ranks are the r-th block of t x d (abi/mesh.h), so an MPMD
 * launch `-np t*d stage0 ARGS : -np t*d stage1 ARGS ...` gives every rank
 * its stage's program. */
static int exec_ranks(const DrvLaunch *how, const char *const *programs, int nprograms, int per,
                      char **argv) {
  int ranks = per * nprograms;
  if (getuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  const char *threads = getenv("OMP_NUM_THREADS");
  if (!threads || !*threads) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long t = cores > 0 ? cores / drv_launch_ranks_per_node(how, ranks) : 1;
    threads = ir_fmt("%ld", t >= 1 ? t : 1);
  }
  int argc = 0;
  while (argv[argc]) argc++;
  char **mv = ir_alloc(sizeof(char *) * (size_t)((argc + 6) * nprograms + 44));
  int n = 0;
  mv[n++] = SHARDC_MPIEXEC;
  mv[n++] = "--oversubscribe";
  mv[n++] = "--bind-to";
  mv[n++] = "none";
  mv[n++] = "--mca";
  mv[n++] = "mpi_yield_when_idle";
  mv[n++] = "1";
  mv[n++] = "-x";
  mv[n++] = (char *)ir_fmt("OMP_NUM_THREADS=%s", threads);
  default_wait_policy();
  mv[n++] = "-x";
  mv[n++] = "OMP_WAIT_POLICY";
  if (how->hostfile) {
    mv[n++] = "--hostfile";
    mv[n++] = (char *)how->hostfile;
  }
  /* A rank that dies does not make mpirun kill the others: shardc ends
   * the job itself, so that the others exit with status 1 and the message
   * is ours (launch). */
  static char *const keep_going[] = {"--mca", "orte_enable_recovery", "1", "--mca",
                                     "orte_abort_on_non_zero_status", "0"};
  for (int i = 0; i < 6; i++) mv[n++] = keep_going[i];
  const char *jobdir = make_job_dir(programs[0]);
  if (jobdir) {
    setenv(JOB_DIR_ENV, jobdir, 1);
    setenv(JOB_LAUNCHER_ENV, ir_fmt("%ld", (long)getpid()), 1);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) == 0) setenv(JOB_LAUNCHER_HOST_ENV, host, 1);
    mv[n++] = "-x";
    mv[n++] = JOB_DIR_ENV;
    mv[n++] = "-x";
    mv[n++] = JOB_LAUNCHER_ENV;
    mv[n++] = "-x";
    mv[n++] = JOB_LAUNCHER_HOST_ENV;
    job_shm_create(jobdir, ranks);
    if (job_shm) {
      mv[n++] = "-x";
      mv[n++] = JOB_SHM_ENV;
    }
    job_beat_open();
    if (job_beat_fd >= 0) {
      mv[n++] = "-x";
      mv[n++] = JOB_BEAT_ENV;
    }
  }
  /* Under Slurm srun starts the ranks instead (launch.c); the job folder
   * and the watch are the same. */
  if (how->kind == DRV_LAUNCH_SRUN) {
    char **sv = drv_srun_argv(programs, nprograms, per, argv, threads, jobdir);
    if (sv) return launch(sv, ranks, jobdir, job_timeout(argv));
    if (jobdir) remove_job_dir(jobdir);
    return 1;
  }
  /* Each rank runs under a parent of ours that records how it ended
   * (rankwrap.c), when we know where this shardc is. */
  char self[PATH_MAX];
  ssize_t len = jobdir ? readlink("/proc/self/exe", self, sizeof self - 1) : -1;
  if (len > 0) self[len] = 0;
  for (int p = 0; p < nprograms; p++) {
    if (p) mv[n++] = ":";
    mv[n++] = "-np";
    mv[n++] = (char *)ir_fmt("%d", per);
    if (len > 0) {
      mv[n++] = ir_strdup(self);
      mv[n++] = DRV_RANK_PARENT_COMMAND;
    }
    mv[n++] = (char *)programs[p];
    for (int i = 1; i < argc; i++) mv[n++] = argv[i];
  }
  mv[n] = NULL;
  return launch(mv, ranks, jobdir, job_timeout(argv));
}

/* ------------------------------------------------- checks before launch */

/* The training program's flags ("--name"), from the table that the
 * runtime shares with the launcher (abi/flags.h): the program is not run
 * to ask (it may not start at all: under a small `ulimit -v` OpenBLAS
 * spins in its constructor). takes[i]: the flag has a value. Returns the
 * count. */
static int program_flags(const char *program, char ***names, bool **takes) {
  (void)program; /* every rank program has the same flags */
  static char *const list[] = {
#define X(name, takes) "--" name,
      PROGRAM_FLAGS(X)
#undef X
  };
  static bool value[] = {
#define X(name, takes) takes,
      PROGRAM_FLAGS(X)
#undef X
  };
  *names = (char **)list;
  *takes = value;
  return (int)(sizeof list / sizeof list[0]);
}

/* An unknown flag of the program, with the nearest of both shardc's and
 * the program's flags as the suggestion. */
static void unknown_program_flag(const DrvCommand *cmd, const char *a, size_t len, char **names,
                                 int n) {
  const char *best = drv_nearest_option(cmd, a, len);
  DrvOption *theirs = ir_alloc(sizeof(DrvOption) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) theirs[i] = (DrvOption){names[i], NULL, NULL};
  theirs[n] = (DrvOption){NULL, NULL, NULL};
  DrvCommand program = {cmd->name, NULL, NULL, NULL, theirs, NULL};
  const char *near = drv_nearest_option(&program, a, len);
  if (near) best = near;
  if (best)
    drv_usage_error(cmd, "unknown option '%s' (did you mean %s?)", a, best);
  else
    drv_usage_error(cmd, "unknown option '%s' (`shardc run MODEL --help` lists the training "
                         "options)", a);
}

/* The value of the program's flag `name` in argv, or NULL. */
static const char *program_value(char **argv, int argc, const char *name) {
  const char *v = NULL;
  size_t n = strlen(name);
  for (int i = 1; i < argc; i++)
    if (strncmp(argv[i], name, n) == 0) {
      if (argv[i][n] == '=') v = argv[i] + n + 1;
      else if (argv[i][n] == 0 && i + 1 < argc) v = argv[i + 1];
    }
  return v;
}

/* The program's own checks that its command line alone decides, made once
 * here before any rank starts (the program repeats them when started by
 * hand): every flag is one of its own, and --steps is an integer, -1 (one
 * pass over --data, the default) or more, and needs --data when positive
 * (unless it resumes, or checks gradients). */
static bool check_program_args(const DrvCommand *cmd, const char *program, char **argv, int argc) {
  char **names;
  bool *takes;
  int n = program_flags(program, &names, &takes);
  if (n == 0) return true; /* the program checks for itself */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) continue;
    size_t len = strcspn(a, "=");
    int k = 0;
    while (k < n && !(strlen(names[k]) == len && strncmp(names[k], a, len) == 0)) k++;
    if (k == n) {
      unknown_program_flag(cmd, a, len, names, n);
      return false;
    }
    if (takes[k] && !a[len]) i++;
  }
  const char *steps = program_value(argv, argc, "--steps");
  if (steps) {
    char *end;
    long long v = strtoll(steps, &end, 10);
    if (*end || end == steps || v < -1)
      return drv_usage_error(cmd, "--steps: expected an integer of -1 (one pass over --data) or "
                                  "more, got '%s'", steps) == 0;
    const char *gradcheck = program_value(argv, argc, "--gradcheck");
    bool checking = gradcheck && strtoll(gradcheck, NULL, 10) != 0;
    /* A resumed run takes its data from the checkpoint's flags. */
    if (v > 0 && !program_value(argv, argc, "--data") && !checking &&
        !program_value(argv, argc, "--resume"))
      return drv_usage_error(cmd, "--steps: training needs --data (or --steps 0)") == 0;
  }
  return true;
}

/* The checks of the job as a whole: shardc runs its t x p x d ranks on
 * this machine. */
static bool check_job(const DrvCommand *cmd, const PassOptions *opt) {
  long long ranks = (long long)opt->tp * opt->pp * opt->dp;
  if (ranks > DRV_RUN_MAX_RANKS)
    return drv_usage_error(cmd, "--tp x --pp x --dp: %d x %d x %d = %lld ranks, more than the %d "
                                "that shardc run starts on one machine", opt->tp, opt->pp, opt->dp,
                           ranks, DRV_RUN_MAX_RANKS) == 0;
  return true;
}

/* -------------------------------------------------------------------- run */

static const DrvOption run_options[] = {
    DRV_DEFINE_OPTION,
    {"--microbatch", "B", "sequences per microbatch (sets the model's `batch`)"},
    {"--dtype", "f32|f64", "the program's floating point type (default f32)"},
    {"--out", "DIR", "compile into DIR instead of .shardc/MODEL-HASH"},
    {"--passes", "a,b,c", "run these passes instead of the target's pipeline, as in compile"},
    {"--target", "NAME", "cpu or cuda (default: cuda for one rank where a GPU is visible, else cpu)"},
    {"--precision", "fp32|bf16", "the step's precision, as in compile (bf16: --target cuda)"},
    {"--no-gemm-epilogue", NULL, "as in compile (--target cuda)"},
    DRV_TP_OPTIONS,
    DRV_PP_OPTIONS,
    DRV_LAUNCH_OPTIONS,
    DRV_RECOMPUTE_OPTIONS,
    {NULL, NULL, NULL},
};

const DrvCommand drv_run_command = {
    "run", "MODEL [compile options] [training options]",
    "compile, build and start training a model",
    "The model file comes first. -D, --microbatch, --dtype, --precision, --out,\n"
    "--passes and the parallel flags (--tp, --sequence-parallel, --tp-strategy,\n"
    "--vocab-multiple, --pp, --vpp, --pp-layout, --schedule, --dp, --zero,\n"
    "--bucket-mb) are shardc's; --global-batch goes to both (the schedule is\n"
    "built for it);\n"
    "every other option goes to the training program, whose own --help lists\n"
    "them (data, steps, optimizer, logging, checkpoints, sampling):\n"
    "  shardc run MODEL --help\n"
    "With t x p x d > 1 the programs run on that many ranks of this machine\n"
    "under mpirun (as root too, with OMP_NUM_THREADS = cores / ranks unless it\n"
    "is set), each pipeline stage's ranks its own program; rank 0 prints the\n"
    "progress, any failing rank its error. shardc watches the ranks: one that\n"
    "fails, dies, stops or makes no progress for --timeout seconds (default\n"
    "300) ends the job, with a message naming it, and exit status 1; SIGTERM\n"
    "or SIGINT finish the step, save (--save) and exit 75\n"
    "(docs/reliability.md).\n"
    "Inside a Slurm allocation (SLURM_JOB_ID set), or with --launcher srun,\n"
    "srun starts the ranks (--multi-prog, --mpi=pmix); --hostfile FILE gives\n"
    "mpirun the machines. `shardc compile -o DIR` writes DIR/launch.sh, which\n"
    "starts the same job without shardc (docs/training.md).",
    run_options, NULL};

/* Splits argv into shardc's options and the program's. A value that
 * follows a program option is the program's too. */
int drv_cmd_run(int argc, char **argv) {
  const DrvCommand *cmd = &drv_run_command;
  if (argc < 1 || argv[0][0] == '-') {
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
      drv_print_help(cmd);
      return 0;
    }
    return drv_usage_error(cmd, "the model file comes first: shardc run MODEL [options]");
  }
  const char *model = argv[0];
  char **mine = ir_alloc(sizeof(char *) * (size_t)(argc + 1));
  char **theirs = ir_alloc(sizeof(char *) * (size_t)(argc + 2));
  int nmine = 0, ntheirs = 1;
  bool help = false, usage = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool ours = false;
    for (const DrvOption *o = cmd->options; o->name; o++) {
      size_t n = strlen(o->name);
      if (strncmp(a, o->name, n) == 0 && (a[n] == 0 || a[n] == '=' || (n == 2 && a[n]))) {
        ours = true;
        /* The program checks its global batch against the schedule's. */
        bool both = strcmp(o->name, "--global-batch") == 0;
        if (both) theirs[ntheirs++] = argv[i];
        mine[nmine++] = argv[i];
        if (a[n] == 0 && o->value && i + 1 < argc) {
          if (both) theirs[ntheirs++] = argv[i + 1];
          mine[nmine++] = argv[++i];
        }
        break;
      }
    }
    if (!ours) {
      /* The program's --help and --quiet silence our memory plan too. */
      help |= strcmp(a, "--help") == 0 || strcmp(a, "--quiet") == 0;
      usage |= strcmp(a, "--help") == 0;
      theirs[ntheirs++] = argv[i];
    }
  }
  DrvArg *args = NULL;
  int nargs = drv_parse_args(cmd, nmine, mine, &args);
  if (nargs < 0) return 1;
  IrDType dtype;
  PassOptions opt;
  if (!drv_parse_dtype(cmd, nargs, args, &dtype)) return 1;
  if (!drv_pass_options(cmd, nargs, args, &opt)) return 1;
  if (!drv_apply_microbatch(cmd, &nargs, &args)) return 1;
  if (!check_job(cmd, &opt)) return 1;
  DrvLaunch how;
  if (!drv_launch_choose(cmd, nargs, args, &how)) return 1;
  /* The memory plan waits until every check has passed, so that an error
   * is the last thing printed. */
  char *plan_text = NULL;
  size_t plan_len = 0;
  FILE *plan = usage ? NULL : open_memstream(&plan_text, &plan_len);
  const char *target = run_target(nargs, args, &opt, help);
  const char *dir = cache_dir(model, nargs, args, dtype);
  CgPlans plans = {0};
  int rc = drv_compile_to_dir(model, nargs, args, target, dir, dtype, plan, plan ? &plans : NULL);
  if (plan) fclose(plan);
  if (rc != 0) return 1;
  /* A plan the machine cannot hold is refused before anything is built. */
  if (plan_text && !drv_check_memory(&plans, opt.tp * opt.dp, cg_target_host_memory(target)))
    return 1;
  if (run_make(dir) != 0) return 1;
  /* One program per pipeline stage serves its t x d ranks. */
  const char **programs = ir_alloc(sizeof(char *) * (size_t)opt.pp);
  for (int r = 0; r < opt.pp; r++)
    programs[r] = opt.pp > 1 ? ir_fmt("%s/stage%d", dir, r) : ir_fmt("%s/rank0", dir);
  theirs[0] = (char *)programs[0];
  theirs[ntheirs] = NULL;
  if (!usage && !check_program_args(cmd, programs[0], theirs, ntheirs)) return 1;
  if (plan_text && !help) fwrite(plan_text, 1, plan_len, stdout);
  free(plan_text);
  fflush(stdout);
  int per = opt.tp * opt.dp;
  if ((per * opt.pp > 1 || how.named) && !usage)
    return exec_ranks(&how, programs, opt.pp, per, theirs);
  return exec_program(programs[0], theirs);
}

/* ----------------------------------------------------------------- sample */

static const DrvOption sample_options[] = {
    {"--prompt", "TEXT", "the text to continue (default: a newline)"},
    {"--tokens", "N", "how many tokens to generate (default 200)"},
    {"--temperature", "T", "sampling temperature (default 1.0; 0 picks the most likely)"},
    {"--top-k", "K", "sample among the K most likely tokens only (default: all)"},
    {"--seed", "S", "random seed of the sampler"},
    {"--tokenizer", "FILES", "the BPE tokenizer (default: the one recorded beside the training data)"},
    {"--no-verify", NULL, "load the weights without comparing them with their checksums"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_sample_command = {
    "sample", "CHECKPOINT_DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--tokenizer FILES]",
    "generate text from a checkpoint",
    "CHECKPOINT_DIR is a folder written by --save. Its model.safetensors\n"
    "records the model file and the -D overrides; the model is compiled again\n"
    "with a microbatch of 1 and continues the prompt. The tokenizer is\n"
    "--tokenizer, else the one `shardc data` recorded beside the checkpoint's\n"
    "--data (DATA.tokenizer), else bytes: the prompt is encoded with it and\n"
    "the generated ids are decoded.",
    sample_options, drv_cmd_sample};

/* Reads the __metadata__ object of a safetensors file's header. */
static cJSON *read_metadata(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "shardc sample: error: %s: %s\n", path, strerror(errno));
    return NULL;
  }
  unsigned char len8[8];
  uint64_t len = 0;
  cJSON *header = NULL;
  if (fread(len8, 1, 8, f) == 8) {
    for (int i = 7; i >= 0; i--) len = len << 8 | len8[i];
    char *text = len > 0 && len < (100u << 20) ? malloc(len + 1) : NULL;
    if (text && fread(text, 1, len, f) == len) {
      text[len] = 0;
      header = cJSON_Parse(text);
    }
    free(text);
  }
  fclose(f);
  cJSON *meta = header ? cJSON_DetachItemFromObject(header, "__metadata__") : NULL;
  cJSON_Delete(header);
  if (!meta) fprintf(stderr, "shardc sample: error: %s: not a checkpoint written by --save\n", path);
  return meta;
}

static const char *meta_string(cJSON *meta, const char *key) {
  cJSON *v = cJSON_GetObjectItem(meta, key);
  return cJSON_IsString(v) ? ir_strdup(v->valuestring) : NULL;
}

int drv_cmd_sample(int nargs, DrvArg *args) {
  const DrvCommand *cmd = &drv_sample_command;
  const char *dir = drv_model_arg(cmd, nargs, args);
  if (!dir) return 1;
  const char *weights = ir_fmt("%s/model.safetensors", dir);
  cJSON *meta = read_metadata(weights);
  if (!meta) return 1;
  const char *source = meta_string(meta, "source"), *defines = meta_string(meta, "defines");
  const char *real = meta_string(meta, "real");
  cJSON_Delete(meta);
  if (!source || !*source) {
    fprintf(stderr, "shardc sample: error: %s does not name its model file\n", weights);
    return 1;
  }
  /* The checkpoint's overrides, then a microbatch of one. */
  static const DrvOption define = DRV_DEFINE_OPTION;
  DrvArg *margs = ir_alloc(sizeof(DrvArg) * 130);
  int nm = 0;
  for (char *d = ir_strdup(defines ? defines : ""), *tok; (tok = strtok(d, " ")); d = NULL)
    if (nm < 128) margs[nm++] = (DrvArg){&define, tok, -1};
  margs[nm++] = (DrvArg){&define, "batch=1", -1};
  IrDType dtype = real && strcmp(real, "f64") == 0 ? IR_F64 : IR_F32;
  const char *built = compile_and_build(source, nm, margs, dtype, NULL, NULL);
  if (!built) return 1;
  const char *program = ir_fmt("%s/rank0", built);
  const char *files = drv_value(nargs, args, "--tokenizer"), *data = NULL;
  if (!files) { /* the tokenizer recorded beside the training data */
    const char *state_path = ir_fmt("%s/state.safetensors", dir);
    cJSON *state = access(state_path, R_OK) == 0 ? read_metadata(state_path) : NULL;
    data = state ? meta_string(state, "flag.data") : NULL;
    cJSON_Delete(state);
  }
  TokBpe *tok = NULL;
  if (!drv_sample_tokenizer(files, data, defines, &tok)) return 1;
  const char *prompt = drv_value(nargs, args, "--prompt");
  const char *tokens = drv_value(nargs, args, "--tokens");
  char **argv = ir_alloc(sizeof(char *) * 20);
  int n = 0;
  argv[n++] = (char *)program;
  argv[n++] = "--init-from";
  argv[n++] = (char *)weights;
  argv[n++] = "--steps";
  argv[n++] = "0";
  argv[n++] = "--quiet";
  argv[n++] = "--sample-prompt";
  /* Without a prompt, generation starts at the beginning of a line. */
  int prompt_at = n;
  argv[n++] = (char *)(prompt && *prompt ? prompt : "\n");
  argv[n++] = "--sample-tokens";
  argv[n++] = (char *)(tokens ? tokens : "200");
  static const char *const passed[] = {"--temperature", "--top-k", "--seed"};
  for (int i = 0; i < 3; i++) {
    const char *v = drv_value(nargs, args, passed[i]);
    if (!v) continue;
    argv[n++] = (char *)passed[i];
    argv[n++] = (char *)v;
  }
  if (drv_flag(nargs, args, "--no-verify")) argv[n++] = "--no-verify";
  if (!tok) {
    argv[n] = NULL;
    return exec_program(program, argv);
  }
  /* The program sees ids only: the prompt goes in encoded, the new ids
   * come back one per line and are decoded here. */
  argv[n++] = "--sample-ids";
  argv[n] = NULL;
  int rc = drv_sample_through(tok, program, argv, prompt_at);
  tok_free(tok);
  return rc;
}
