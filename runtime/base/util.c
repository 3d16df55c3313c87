/* Error reporting and checked allocation for the runtime. */
#include "util.h"

#include "watchdog.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../abi/job.h"

static void vreport(const char *what, const char *fmt, va_list ap) {
  /* stdout may hold buffered progress lines: flush them first so the error
   * appears after them, where it happened. */
  fflush(stdout);
  /* One write of the whole line: the lines of ranks that fail together
   * (their stderr merged by mpirun) must not interleave. */
  char line[4096];
  int n = snprintf(line, sizeof line, "shardc: error: %s%s", what ? what : "", what ? ": " : "");
  if (n < 0 || n >= (int)sizeof line) n = 0;
  int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  n = m < 0 ? n : n + m >= (int)sizeof line - 1 ? (int)sizeof line - 2 : n + m;
  line[n++] = '\n';
  line[n] = 0;
  /* The launcher learns why a rank stopped from its record. */
  rt_wd_error(line + strlen("shardc: error: "));
  fwrite(line, 1, (size_t)n, stderr);
  fflush(stderr);
}

void rt_error(const char *what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(what, fmt, ap);
  va_end(ap);
}

void (*rt_fatal_hook)(const char *message);

_Noreturn void rt_fatal(const char *what, const char *fmt, ...) {
  va_list ap;
  if (rt_fatal_hook) {
    char msg[2048];
    int n = what ? snprintf(msg, sizeof msg, "%s: ", what) : 0;
    if (n < 0 || n >= (int)sizeof msg) n = 0;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    rt_fatal_hook(msg);
  }
  va_start(ap, fmt);
  vreport(what, fmt, ap);
  va_end(ap);
  exit(1);
}

int rt_err_set(RtErr *e, const char *what, const char *fmt, ...) {
  snprintf(e->what, sizeof e->what, "%s", what ? what : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

_Noreturn void rt_err_fatal(const RtErr *e) { rt_fatal(*e->what ? e->what : NULL, "%s", e->msg); }

void *rt_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) rt_fatal(NULL, "out of memory allocating %zu bytes", n);
  return p;
}

void *rt_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) rt_fatal(NULL, "out of memory allocating %zu x %zu bytes", n, size);
  return p;
}

char *rt_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(rt_xmalloc(n), s, n);
}

const char *rt_fmt_bytes(char *buf, size_t len, int64_t bytes) {
  static const char *units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1000 && u < 4)
    v /= 1000, u++;
  if (u == 0)
    snprintf(buf, len, "%lld B", (long long)bytes);
  else
    snprintf(buf, len, "%.2f %s", v, units[u]);
  return buf;
}

const char *rt_fmt_thousands(char *buf, size_t len, int64_t v) {
  char digits[32];
  int n = snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
  size_t o = 0;
  if (v < 0 && o + 1 < len) buf[o++] = '-';
  for (int i = 0; i < n && o + 1 < len; i++) {
    if (i > 0 && (n - i) % 3 == 0 && o + 1 < len) buf[o++] = ',';
    if (o + 1 < len) buf[o++] = digits[i];
  }
  buf[o] = 0;
  return buf;
}

int rt_quiet;
int rt_deterministic;

void rt_say(const char *fmt, ...) {
  if (rt_quiet) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t rt_mem_limit_env(void) {
  const char *v = getenv(JOB_MEMORY_LIMIT_ENV);
  if (!v || !*v) return -1;
  long long bytes;
  if (!job_parse_bytes(v, &bytes))
    rt_fatal(JOB_MEMORY_LIMIT_ENV, "'%s' is not a number of bytes (such as 8000000000 or 64G)", v);
  return bytes;
}


int rt_local_ranks(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                               "SLURM_NTASKS_PER_NODE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    int n = v ? atoi(v) : 0;
    if (n > 0) return n;
  }
  return 1;
}
