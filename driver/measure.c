/* `shardc hw --measure -o FILE`: times this machine and writes a hardware
 * description of it in the planner's file format (docs/planner.md).
 *
 * The driver never links the kernels or the runtime, so the timing runs in
 * a small generated program built exactly as `shardc run` builds a rank
 * program: a throwaway model is compiled for the CPU target into a
 * scratch folder, which gives the Makefile with this build's compiler,
 * flags and libraries, and the measuring program is built against the same
 * libraries by a makefile that includes it. The program times
 * k_gemm_blocks (the CPU target's GEMM as a rank program calls it outside
 * a row chunk: blocks of single-threaded BLAS shared by the OpenMP team) by size and a large copy on one rank with all the
 * cores, then the same with one thread in each of `cores` copies run at
 * once (what each of `cores` ranks gets: `shardc run` gives a rank cores /
 * ranks threads, and the ranks contend for the memory and the caches),
 * then, under mpirun with the launch recipe of `shardc run`, messages
 * between two ranks through the runtime's rt_comm_send. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../codegen/codegen.h"
#include "../planner/hw.h"
#include "driver.h"

#ifndef SHARDC_MPIEXEC
#define SHARDC_MPIEXEC "mpirun"
#endif

/* The throwaway model: only its Makefile is used. */
static const char tiny_model[] =
    "model measure\n"
    "let vocab = 16\nlet seq = 4\nlet hidden = 8\nlet batch = 1\n"
    "input tokens: i32[batch, seq]\ninput targets: i32[batch, seq]\n"
    "param wte.weight: [vocab, hidden] = normal(0, 0.5)\n"
    "param head.weight: [hidden, vocab] = normal(0, 0.2)\n"
    "let x = embedding(tokens, wte.weight)\n"
    "output loss = cross_entropy(linear(x, head.weight), targets)\n";

static const char measure_mk[] =
    "include Makefile\n"
    "measure: measure.c $(RTLIBS)\n"
    "\t$(CC) $(CFLAGS) $(CPPFLAGS) -o $@ measure.c $(RTLIBS) $(RTLIBS) $(LDLIBS)\n";

/* The measuring program. `measure gemm MAX` prints `gemm N SECONDS` for
 * square products of N = 16 .. MAX (the best of several runs, each size
 * run for at least 50 ms) and `copy BYTES SECONDS` for an OpenMP copy of
 * a buffer far larger than the caches; `measure mpi` (two ranks) prints
 * `p2p BYTES SECONDS`, half the best round trip of a ping-pong. */
static const char measure_c[] =
    "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n"
    "#include \"kernels/cpu/kernels.h\"\n#include \"runtime/comm/comm.h\"\n"
    "static double now(void) {\n"
    "  struct timespec t;\n  clock_gettime(CLOCK_MONOTONIC, &t);\n"
    "  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;\n}\n"
    "static void gemm(long max) {\n"
    "  for (long n = 16; n <= max; n *= 2) {\n"
    "    real *a = calloc((size_t)(n * n), sizeof(real)), *b = calloc((size_t)(n * n), sizeof(real)),\n"
    "         *c = calloc((size_t)(n * n), sizeof(real));\n"
    "    for (long i = 0; i < n * n; i++) a[i] = (real)(i % 7) * 0.1f, b[i] = (real)(i % 5) * 0.1f;\n"
    "    double best = 1e30, start = now();\n"
    "    for (int r = 0; r < 3 || now() - start < 0.05; r++) {\n"
    "      double t0 = now();\n"
    "      k_gemm_blocks(0, 0, n, n, n, 1, a, n, b, n, 0, c, n);\n"
    "      double t = now() - t0;\n"
    "      if (t < best) best = t;\n"
    "    }\n"
    "    printf(\"gemm %ld %.9g\\n\", n, best);\n"
    "    free(a), free(b), free(c);\n"
    "  }\n}\n"
    "static void copy(void) {\n"
    "  const long n = 1L << 26;\n"
    "  char *a = malloc((size_t)n), *b = malloc((size_t)n);\n"
    "  memset(a, 1, (size_t)n), memset(b, 0, (size_t)n);\n"
    "  double best = 1e30;\n"
    "  for (int r = 0; r < 5; r++) {\n"
    "    double t0 = now();\n"
    "#pragma omp parallel for\n"
    "    for (long k = 0; k < 64; k++) memcpy(b + k * (n / 64), a + k * (n / 64), (size_t)(n / 64));\n"
    "    double t = now() - t0;\n"
    "    if (t < best) best = t;\n"
    "  }\n"
    "  printf(\"copy %ld %.9g\\n\", n, best);\n"
    "  free(a), free(b);\n}\n"
    "static void p2p(void) {\n"
    "  RtComm *w = rt_comm_world();\n"
    "  int me = rt_comm_rank(w);\n"
    "  if (rt_comm_size(w) != 2) { fprintf(stderr, \"measure mpi needs 2 ranks\\n\"); exit(1); }\n"
    "  long sizes[2] = {2, 1L << 20};\n"
    "  float *buf = calloc((size_t)sizes[1], sizeof(float));\n"
    "  for (int s = 0; s < 2; s++) {\n"
    "    int reps = s == 0 ? 2000 : 30;\n"
    "    double best = 1e30;\n"
    "    for (int r = 0; r < reps; r++) {\n"
    "      rt_comm_barrier(w);\n"
    "      double t0 = now();\n"
    "      if (me == 0) rt_comm_send(w, buf, sizes[s], RT_COMM_F32, 1), rt_comm_recv(w, buf, sizes[s], RT_COMM_F32, 1);\n"
    "      else rt_comm_recv(w, buf, sizes[s], RT_COMM_F32, 0), rt_comm_send(w, buf, sizes[s], RT_COMM_F32, 0);\n"
    "      double t = (now() - t0) / 2;\n"
    "      if (t < best) best = t;\n"
    "    }\n"
    "    if (me == 0) printf(\"p2p %ld %.9g\\n\", sizes[s] * 4, best);\n"
    "  }\n"
    "  free(buf);\n}\n"
    "int main(int argc, char **argv) {\n"
    "  if (argc > 2 && strcmp(argv[1], \"gemm\") == 0) { gemm(atol(argv[2])); copy(); return 0; }\n"
    "  if (argc > 1 && strcmp(argv[1], \"mpi\") == 0) {\n"
    "    rt_comm_init(&argc, &argv);\n    p2p();\n    rt_comm_finalize();\n    return 0;\n  }\n"
    "  return 2;\n}\n";

static bool write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  bool ok = f && fputs(text, f) >= 0;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) fprintf(stderr, "shardc hw: error: cannot write %s: %s\n", path, strerror(errno));
  return ok;
}

/* Runs argv, its output going to ours; whether it exited 0. */
static bool run_argv(char *const *argv) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* What the program measured. */
typedef struct Measured {
  int ngemm;
  double gemm_n[16], gemm_s[16]; /* size N of an N x N x N product, best seconds */
  double copy_bytes, copy_s;
  int np2p;
  double p2p_bytes[2], p2p_s[2]; /* one message one way */
} Measured;

/* Runs a shell command and reads the lines the program prints. Several
 * copies of the program print a size each: the slowest copy's time is the
 * one kept (the ranks of a step wait for the slowest). */
static void keep_gemm(Measured *m, double n, double s) {
  for (int i = 0; i < m->ngemm; i++)
    if (m->gemm_n[i] == n) {
      if (s > m->gemm_s[i]) m->gemm_s[i] = s;
      return;
    }
  if (m->ngemm < 16) m->gemm_n[m->ngemm] = n, m->gemm_s[m->ngemm++] = s;
}

static bool read_lines(const char *command, Measured *m) {
  fflush(stdout);
  FILE *p = popen(command, "r");
  if (!p) return false;
  char line[256];
  while (fgets(line, sizeof line, p)) {
    double a, b;
    if (sscanf(line, "gemm %lf %lf", &a, &b) == 2) keep_gemm(m, a, b);
    else if (sscanf(line, "copy %lf %lf", &a, &b) == 2 && b > m->copy_s) m->copy_bytes = a, m->copy_s = b;
    else if (sscanf(line, "p2p %lf %lf", &a, &b) == 2 && m->np2p < 2)
      m->p2p_bytes[m->np2p] = a, m->p2p_s[m->np2p++] = b;
  }
  return pclose(p) == 0;
}

/* The GEMM curve of the cost model, time(F) = (F + half) / peak with the
 * efficiency 1 (the peak is this machine's large-product rate), fitted to
 * the measured times by least squares on relative error: minimises
 * sum ((a F + c) / t - 1)^2 over a = 1/peak, c = half/peak. */
static void fit_gemm(const Measured *m, double *peak, double *half) {
  double sxx = 0, sxy = 0, syy = 0, sx = 0, sy = 0, best = 0;
  for (int i = 0; i < m->ngemm; i++) {
    double f = 2 * pow(m->gemm_n[i], 3), x = f / m->gemm_s[i], y = 1 / m->gemm_s[i];
    sxx += x * x, sxy += x * y, syy += y * y, sx += x, sy += y;
    if (x > best) best = x;
  }
  double det = sxx * syy - sxy * sxy, a = 0, c = 0;
  if (det > 0) a = (sx * syy - sy * sxy) / det, c = (sxx * sy - sxy * sx) / det;
  if (c < 0 || a <= 0) c = 0, a = sxx > 0 ? sx / sxx : 0;
  if (a <= 0) a = best > 0 ? 1 / best : 1e-9;
  *peak = 1 / a, *half = c / a;
}

/* The CPU attention is blocked products and a softmax: priced as the
 * rate of a mid-sized GEMM (256^3) on the fitted curve. */
static double attention_eff(double half) {
  double mid = 2 * pow(256, 3);
  return mid / (mid + half);
}

/* The one-core figures of a CPU description from the copies' run. */
static void describe_core(const Measured *core, int cores, PlHw *hw) {
  hw->cores = cores;
  if (cores <= 1 || core->ngemm == 0 || core->copy_s <= 0) return; /* pl_hw_load's defaults */
  double peak, half;
  fit_gemm(core, &peak, &half);
  hw->core_peak = peak, hw->core_gemm_half = half, hw->core_attn_eff = attention_eff(half);
  hw->core_mem_bw = 2 * core->copy_bytes / core->copy_s;
  hw->core_kernel_s = core->gemm_s[0];
}

/* The description from the measurements; notes what stood in for what. */
static PlHw describe(const Measured *m, const Measured *core, bool have_mpi, int cores) {
  PlHw hw = *pl_hw_find("a100");
  double peak, half;
  fit_gemm(m, &peak, &half);
  hw.name = "measured";
  hw.doc = ir_fmt("this machine (%d cores), measured by shardc hw --measure: the CPU target's "
                  "k_gemm_blocks and a copy, on all the cores and on one per rank%s", cores,
                  have_mpi ? ", rt_comm messages between two ranks" :
                             "; MPI not measured (links are the memory copy's figures)");
  for (int k = 0; k < PL_NPREC; k++) hw.peak_flops[k] = peak;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  hw.mem_bytes = pages > 0 && page > 0 ? (double)pages * (double)page : 1 << 30;
  hw.mem_bw = 2 * m->copy_bytes / m->copy_s; /* read and written */
  hw.gpus_per_node = cores;
  hw.gemm_eff = 1, hw.gemm_half = half;
  /* The kernel's fixed cost: the smallest product measured. */
  hw.kernel_s = m->ngemm ? m->gemm_s[0] : 5e-6;
  hw.attn_eff = attention_eff(half);
  hw.mem_eff = 1, hw.comm_eff = 1;
  describe_core(core, cores, &hw);
  if (have_mpi) {
    double lat = m->p2p_s[0], big = m->p2p_s[1] - lat;
    hw.intra_lat = hw.inter_lat = lat;
    hw.intra_bw = hw.inter_bw = m->p2p_bytes[1] / (big > 0 ? big : m->p2p_s[1]);
  } else {
    hw.intra_bw = hw.inter_bw = hw.mem_bw / 2;
    hw.intra_lat = hw.inter_lat = 1e-6;
  }
  return hw;
}

static void print_rates(FILE *f, const Measured *m) {
  for (int i = 0; i < m->ngemm; i++)
    fprintf(f, "#   k_gemm_blocks %4.0f^3  %10.3f us  %8.2f GFLOP/s\n", m->gemm_n[i], 1e6 * m->gemm_s[i],
            2 * pow(m->gemm_n[i], 3) / m->gemm_s[i] / 1e9);
  fprintf(f, "#   copy %.0f MiB  %.3f ms  %.2f GB/s read + written\n", m->copy_bytes / 1048576,
          1e3 * m->copy_s, 2 * m->copy_bytes / m->copy_s / 1e9);
}

static void print_measured(FILE *f, const Measured *m, const Measured *core, int cores,
                           bool have_mpi) {
  fprintf(f, "# Measured (best of several runs), one process with all %d cores:\n", cores);
  print_rates(f, m);
  if (core->ngemm) {
    fprintf(f, "# %d processes at once, one thread each (the slowest):\n", cores);
    print_rates(f, core);
  }
  for (int i = 0; have_mpi && i < m->np2p; i++)
    fprintf(f, "#   rt_comm_send %.0f bytes  %.3f us one way\n", m->p2p_bytes[i], 1e6 * m->p2p_s[i]);
  if (!have_mpi) fprintf(f, "#   MPI messages: not measured (%s could not run 2 ranks)\n", SHARDC_MPIEXEC);
}

/* Builds the measuring program in dir; false after saying why. */
static bool build_program(const char *dir) {
  const char *model = ir_fmt("%s/measure.shard", dir);
  if (!write_text(model, tiny_model)) return false;
  if (drv_compile_to_dir(model, 0, NULL, cg_host_target(), dir, IR_F32, NULL, NULL) != 0) return false;
  if (!write_text(ir_fmt("%s/measure.c", dir), measure_c) ||
      !write_text(ir_fmt("%s/measure.mk", dir), measure_mk))
    return false;
  char *make[] = {"make", "-s", "-C", (char *)dir, "-f", "measure.mk", "measure", NULL};
  if (!run_argv(make)) {
    fprintf(stderr, "shardc hw: error: building the measuring program in %s failed\n", dir);
    return false;
  }
  return true;
}

int drv_hw_measure(const DrvCommand *cmd, int nargs, DrvArg *args) {
  const char *out = drv_value(nargs, args, "-o"), *max_s = drv_value(nargs, args, "--max-size");
  if (!out) return drv_usage_error(cmd, "--measure needs -o FILE");
  long max = max_s ? strtol(max_s, NULL, 10) : 1024;
  if (max < 16 || max > 8192) return drv_usage_error(cmd, "--max-size: expected 16 .. 8192");
  const char *tmp = getenv("TMPDIR");
  char *dir = (char *)ir_fmt("%s/shardc-measure-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "shardc hw: error: cannot make a scratch folder: %s\n", strerror(errno));
    return 1;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  Measured m = {0}, core = {0};
  bool ok = build_program(dir);
  if (ok && (!read_lines(ir_fmt("cd %s && OMP_WAIT_POLICY=passive ./measure gemm %ld", dir, max), &m) ||
             m.ngemm == 0 || m.copy_s <= 0)) {
    fprintf(stderr, "shardc hw: error: the measuring program in %s failed\n", dir);
    ok = false;
  }
  /* Each copy writes its own file, then all are read: the shell's wait
   * hides the copies' exit status, so a missing size is the failure. */
  const char *copies = ir_fmt("cd %s && for i in $(seq %ld); do OMP_NUM_THREADS=1 "
                              "OMP_WAIT_POLICY=passive ./measure gemm %ld >core$i.txt & done; "
                              "wait; cat core*.txt", dir, cores, max);
  if (ok && cores > 1 && (!read_lines(copies, &core) || core.ngemm != m.ngemm || core.copy_s <= 0)) {
    fprintf(stderr, "shardc hw: error: the measuring program's %ld copies in %s failed\n", cores, dir);
    ok = false;
  }
  bool have_mpi = false;
  if (ok) {
    if (getuid() == 0) {
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    /* The launch recipe of `shardc run` (runtime/comm/comm.h), two ranks. */
    const char *mpi = ir_fmt("cd %s && OMP_NUM_THREADS=%ld OMP_WAIT_POLICY=passive %s "
                             "--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 "
                             "-x OMP_NUM_THREADS -x OMP_WAIT_POLICY -np 2 ./measure mpi "
                             "2>mpi.err", dir, cores / 2 > 0 ? cores / 2 : 1, SHARDC_MPIEXEC);
    have_mpi = read_lines(mpi, &m) && m.np2p == 2 && m.p2p_s[0] > 0 && m.p2p_s[1] > m.p2p_s[0];
    if (!have_mpi)
      fprintf(stderr, "shardc hw: note: %s could not run two ranks; the description's links "
              "stand in from the memory copy\n", SHARDC_MPIEXEC);
  }
  if (ok) {
    PlHw hw = describe(&m, &core, have_mpi, (int)cores);
    FILE *f = fopen(out, "w");
    if (!f) {
      fprintf(stderr, "shardc hw: error: cannot write %s: %s\n", out, strerror(errno));
      ok = false;
    } else {
      print_measured(f, &m, &core, (int)cores, have_mpi);
      pl_hw_print(f, &hw);
      if (fclose(f) != 0) ok = false;
      print_measured(stdout, &m, &core, (int)cores, have_mpi);
      printf("wrote %s (shardc hw %s prints it; --hw %s uses it)\n", out, out, out);
    }
  }
  char *rm[] = {"rm", "-rf", dir, NULL};
  run_argv(rm);
  return ok ? 0 : 1;
}
