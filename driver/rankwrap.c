/* The parent of each rank under `shardc run`: mpirun starts
 * `shardc __rank PROGRAM ARGS...`, which starts the rank program as its
 * child and waits for it. A rank killed by a signal cannot say so itself
 * (SIGKILL cannot be caught), and its real parent, mpirun, keeps the
 * status to itself while recovery is on; this parent writes it into
 * JOB_DIR/rank-R.end (abi/job.h) for the launcher's message, then ends the
 * way its child did, so that mpirun sees what it would have seen.
 *
 * The signals mpirun sends (SIGTERM to end the job) are passed on, from
 * this process: to the rank they still come from its parent. The child
 * dies with this process (PR_SET_PDEATHSIG), so that killing it never
 * leaves a rank behind. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../abi/job.h"
#include "driver.h"

static volatile pid_t child;
static pid_t grand; /* our parent at the start: mpirun or Open MPI's daemon */
static char exit_note[4200]; /* JOB_DIR/rank-R.exit; empty without a job folder */

/* A signal from mpirun is passed on as it is. The SIGTERM of our parent's
 * death (PR_SET_PDEATHSIG) kills the rank outright: with mpirun gone the
 * rank can do nothing useful, and a rank that is stopped (SIGSTOP, a
 * debugger) would hold a SIGTERM pending for ever and outlive the job.
 * Before that it leaves the note a rank leaves when mpirun ends it
 * (runtime/base/watchdog.c), so that the launcher blames mpirun, not the
 * rank. Only async-signal-safe calls here. */
static void pass_on(int sig) {
  if (child <= 0) return;
  if (getppid() == grand) {
    kill(child, sig);
    return;
  }
  if (*exit_note) {
    int fd = open(exit_note, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t w = write(fd, "1\n", 2);
      (void)w;
      close(fd);
    }
  }
  kill(child, SIGKILL);
}

/* JOB_DIR/rank-R.end: "signal N" or "status N". R is the world rank as
 * Open MPI gives it (OMPI_COMM_WORLD_RANK); without one, nothing. */
static void write_end(int status) {
  const char *dir = getenv(JOB_DIR_ENV), *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!dir || !rank) return;
  char path[4200], tmp[4300], text[64];
  snprintf(path, sizeof path, "%s/" JOB_RECORD_FMT JOB_END_SUFFIX, dir, atoi(rank));
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int n = WIFSIGNALED(status) ? snprintf(text, sizeof text, "signal %d\n", WTERMSIG(status))
                              : snprintf(text, sizeof text, "status %d\n", WEXITSTATUS(status));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  int ok = write(fd, text, (size_t)n) == n;
  close(fd);
  if (ok) rename(tmp, path);
}

int drv_rank_parent(int argc, char **argv) {
  if (argc < 1) {
    fprintf(stderr, "shardc: error: __rank needs a program to run\n");
    return 1;
  }
  /* This parent ends with its own parent (mpirun, or Open MPI's daemon on
   * another machine): SIGTERM, which it passes on, and the rank exits. */
  const char *dir = getenv(JOB_DIR_ENV), *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (dir && rank)
    snprintf(exit_note, sizeof exit_note, "%s/" JOB_RECORD_FMT ".exit", dir, atoi(rank));
  grand = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != grand) return 1;
  pid_t parent = getpid();
  child = fork();
  if (child < 0) {
    fprintf(stderr, "shardc: error: cannot start %s: %s\n", argv[0], strerror(errno));
    return 1;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1); /* the parent died before prctl */
    execv(argv[0], argv);
    fprintf(stderr, "shardc: error: cannot start %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = pass_on;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
    sigaction(forwarded[i], &sa, NULL);
  int status;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return 1;
  write_end(status);
  if (!WIFSIGNALED(status)) return WEXITSTATUS(status);
  /* The same death as the child's (without a core file of our own). */
  signal(WTERMSIG(status), SIG_DFL);
  sigset_t all;
  sigemptyset(&all);
  sigaddset(&all, WTERMSIG(status));
  sigprocmask(SIG_UNBLOCK, &all, NULL);
  prctl(PR_SET_DUMPABLE, 0);
  raise(WTERMSIG(status));
  return 128 + WTERMSIG(status);
}
