/* `shardc run`'s check of the memory plan against the machine: before
 * anything is started or allocated, the plan's bytes for every rank of
 * this machine must fit in what it has available. The rank programs make
 * the same check before they allocate (runtime/program/main.c), for launches
 * without shardc and for the GPU, whose memory only they can see. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../abi/job.h"
#include "../abi/model.h"
#include "../codegen/codegen.h"
#include "driver.h"

/* "7.1 MiB": a byte count for people (powers of 1024, as the plan prints). */
static const char *fmt_bytes(long long bytes) {
  static const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, u++;
  return u ? ir_fmt("%.1f %s", v, units[u]) : ir_fmt("%lld bytes", bytes);
}

/* JOB_MEMORY_LIMIT_ENV's bytes, -1 when unset, -2 (after the error) when
 * malformed. */
static long long limit_env(void) {
  const char *v = getenv(JOB_MEMORY_LIMIT_ENV);
  if (!v || !*v) return -1;
  long long bytes;
  if (job_parse_bytes(v, &bytes)) return bytes;
  fprintf(stderr, "shardc run: error: %s: '%s' is not a number of bytes (such as 8000000000 or "
                  "64G)\n", JOB_MEMORY_LIMIT_ENV, v);
  return -2;
}

/* The largest of the programs' plans; *sum of them all, each times its
 * `per` ranks, and *ranks. */
static long long largest_total(const CgPlans *plans, int per, long long *sum, int *ranks) {
  long long most = 0;
  *sum = 0, *ranks = 0;
  for (int i = 0; i < plans->n; i++) {
    long long n = rt_plan_total(&plans->plan[i]);
    most = n > most ? n : most;
    *sum += n * per;
    *ranks += per;
  }
  return most;
}

bool drv_check_memory(const CgPlans *plans, int ranks_per_program, bool host_memory) {
  long long limit = limit_env();
  if (limit == -2) return false;
  const char *source = JOB_MEMORY_LIMIT_ENV;
  if (limit < 0 && host_memory) {
    limit = job_mem_available();
    source = "MemAvailable in /proc/meminfo";
  }
  long long need;
  int ranks;
  long long most = largest_total(plans, ranks_per_program, &need, &ranks);
  if (limit < 0 || most == 0 || need <= limit) return true;
  fprintf(stderr, "shardc run: error: the memory plan needs %s for the %d rank%s of this machine "
                  "(%s per rank at most), more than the %s available (%s)\n",
          fmt_bytes(need), ranks, ranks == 1 ? "" : "s", fmt_bytes(most), fmt_bytes(limit), source);
  return false;
}
