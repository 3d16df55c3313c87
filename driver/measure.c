/* `shardc hw --measure -o FILE`: times this machine and writes a hardware
 * description of it in the planner's file format (docs/planner.md).
 *
 * The driver never links the kernels or the runtime, so the timing runs in
 * a small generated program built exactly as `shardc run` builds a rank
 * program: a throwaway model is compiled for the CPU target into a
 * scratch folder, which gives the Makefile with this build's compiler,
 * flags and libraries, and the measuring program is built against the same
 * libraries by a makefile that includes it. The program times what the
 * cost model prices, as a rank program runs it (OMP_WAIT_POLICY=passive,
 * every call on fresh operands): the CPU target's GEMM per thread by size,
 * a copy, one parallel region, the attention, the other ops and the
 * optimizer's passes, on one rank with all the cores, then the same with
 * one thread in each of `cores` copies run at once (what each of `cores`
 * ranks gets: `shardc run` gives a rank cores / ranks threads, and the
 * ranks contend for the memory and the caches), then, under mpirun with
 * the launch recipe of `shardc run`, messages between two ranks through
 * the runtime's rt_comm_send. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../codegen/codegen.h"
#include "../planner/hw.h"
#include "../planner/planner.h"
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
 * run for at least 50 ms), `copy BYTES SECONDS` for an OpenMP copy of 1
 * MiB taken in turn from a 64 MiB pool (beyond the caches nearest the
 * core, though an L3 larger than the pool holds it), `op SECONDS` for one
 * parallel region with the threads it was started with, `attn S FLOPS
 * SECONDS` for the CPU target's attention forward and backward at two
 * shapes (S the sequence, FLOPS a full forward's), `elem BYTES
 * SECONDS` for a norm, a softmax and a GELU loop, and `update BYTES
 * SECONDS` for the optimizer step's passes; `measure mpi` (two ranks)
 * prints `p2p BYTES SECONDS`, half the best round trip of a ping-pong. */
static const char measure_c[] =
    "#include <math.h>\n#include <omp.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n"
    "#include \"kernels/cpu/kernels.h\"\n#include \"runtime/comm/comm.h\"\n"
    "static double now(void) {\n"
    "  struct timespec t;\n  clock_gettime(CLOCK_MONOTONIC, &t);\n"
    "  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;\n}\n"
    "static real *fill(long n) {\n"
    "  real *x = malloc((size_t)n * sizeof(real));\n"
    "  for (long i = 0; i < n; i++) x[i] = (real)((i % 13) - 6) * 0.01f;\n"
    "  return x;\n}\n"
    /* Each call on operands of its own, taken in turn from a pool of 64
     * MiB: a training step's products read activations that the ops
     * before them wrote out of the caches nearest the core, not the same
     * hot buffers again. The mean of a batch of calls lasting about a
     * millisecond, the best batch of those run in 40 ms (a batch that no
     * other process interrupted). */
    "static real *pool;\n"
    "static long pool_at, pool_n = 1L << 24;\n"
    "static real *take(long n) {\n"
    "  if (!pool || n > pool_n) {\n"
    "    free(pool);\n"
    "    pool_n = pool_n > n ? pool_n : n;\n"
    "    pool = fill(pool_n), pool_at = 0;\n"
    "  }\n"
    "  if (pool_at + n > pool_n) pool_at = 0;\n"
    "  real *p = pool + pool_at;\n"
    "  pool_at += (n + 15) / 16 * 16;\n"
    "  return p;\n}\n"
    /* A batch of calls lasting about a millisecond on operands taken in
     * turn from the pool, the best batch's mean over 40 ms: a batch that
     * no other process interrupted. */
    "static double batch(void (*f)(long), long n) {\n"
    "  double best = 1e30, start = now();\n"
    "  for (int r = 0; r < 3 || now() - start < 0.04; r++) {\n"
    "    long calls = 0;\n"
    "    double t0 = now();\n"
    "    do f(n), calls++; while (now() - t0 < 0.001);\n"
    "    double t = (now() - t0) / (double)calls;\n"
    "    if (t < best) best = t;\n"
    "  }\n"
    "  return best;\n}\n"
    /* The products as the programs run most of theirs: inside a stretch
     * of row chunks every thread runs its own single-threaded k_gemm on
     * its own chunk, one after the other without waiting for the team
     * (passes/memplan_rows.c); so each thread runs k products of n^3 on
     * operands from its share of the pool, k doubled until that lasts a
     * millisecond, and the best of such runs over 40 ms counts, as T
     * products at once (FLOPs T 2 n^3). One region per run, amortised. */
    "static double gemm_run(long n, long k) {\n"
    "  int T = omp_get_max_threads();\n"
    "  long need = 3 * n * n;\n"
    "  if (!pool || pool_n < T * need) {\n"
    "    free(pool);\n"
    "    pool_n = pool_n > T * need ? pool_n : T * need;\n"
    "    pool = fill(pool_n), pool_at = 0;\n"
    "  }\n"
    "  long part = pool_n / T, per = part / need;\n"
    "  int blas = k_blas_serial_begin();\n"
    "  double t0 = now();\n"
    "#pragma omp parallel\n"
    "  {\n"
    "    long t = omp_get_thread_num();\n"
    "    for (long j = 0; j < k; j++) {\n"
    "      real *a = pool + t * part + ((j + pool_at) % per) * need;\n"
    "      k_gemm(0, 0, n, n, n, 1, a, n, a + n * n, n, 0, a + 2 * n * n, n);\n"
    "    }\n"
    "  }\n"
    "  double dt = now() - t0;\n"
    "  k_blas_serial_end(blas);\n"
    "  pool_at += k;\n"
    "  return dt;\n}\n"
    "static void gemm(long max) {\n"
    "  for (long n = 16; n <= max; n *= 2) {\n"
    "    long k = 1;\n"
    "    while (gemm_run(n, k) < 0.001 && k < (1L << 24)) k *= 2;\n"
    "    double best = 1e30, start = now();\n"
    "    for (int r = 0; r < 3 || now() - start < 0.04; r++) {\n"
    "      double t = gemm_run(n, k) / (double)k;\n"
    "      if (t < best) best = t;\n"
    "    }\n"
    "    printf(\"gemm %ld %.9g %.9g\\n\", n, 2.0 * (double)omp_get_max_threads() * (double)(n * n * n), best);\n"
    "  }\n}\n"
    /* Memory: 1 MiB of the pool copied to the next, shared by the threads
     * as the programs' loops share theirs. */
    "static void one_copy(long n) {\n"
    "  real *a = take(2 * n);\n"
    "#pragma omp parallel for schedule(static)\n"
    "  for (long k = 0; k < 16; k++) memcpy(a + n + k * (n / 16), a + k * (n / 16), (size_t)(n / 16) * sizeof(real));\n}\n"
    "static void copy(void) {\n"
    "  const long n = 1L << 18;\n"
    "  printf(\"copy %ld %.9g\\n\", n * (long)sizeof(real), batch(one_copy, n));\n}\n"
    /* What one op of a rank program costs besides its work: parallel
     * regions back to back, each with a token of work per thread, as the
     * programs start one per op (with OMP_WAIT_POLICY=passive the team
     * sleeps between them and is woken each time). */
    "static void one_op(long n) {\n"
    "  static double cell[256];\n"
    "  for (long i = 0; i < n; i++) {\n"
    "#pragma omp parallel\n"
    "    cell[omp_get_thread_num() % 256] += 1;\n"
    "  }\n}\n"
    "static void op(void) { printf(\"op %.9g\\n\", batch(one_op, 16) / 16); }\n"
    /* The CPU target's attention, forward and backward, causal, as a rank
     * program runs it, at two head sizes: the sequence, a full forward's
     * FLOPs (4 numel(q) s) and the seconds of both (the parent counts the
     * FLOPs the kernels run, pl_cpu_attention_flops). */
    "static long att_s, att_h, att_d;\n"
    "static real *att_scratch;\n"
    "static void one_attn(long b) {\n"
    "  long n = b * att_s * att_h * att_d;\n"
    "  real *q = take(8 * n), *kk = q + n, *v = q + 2 * n, *y = q + 3 * n;\n"
    "  k_attention_fwd(y, q, kk, v, b, att_s, att_h, att_h, att_d, 1, att_scratch);\n"
    "  k_attention_bwd(q + 4 * n, q + 5 * n, q + 6 * n, q + 7 * n, q, kk, v, y, b, att_s, att_h, att_h,\n"
    "                  att_d, 1, att_scratch);\n}\n"
    "static void attn(void) {\n"
    "  static const long shape[2][3] = {{128, 4, 32}, {256, 4, 64}};\n"
    "  for (int k = 0; k < 2; k++) {\n"
    "    att_s = shape[k][0], att_h = shape[k][1], att_d = shape[k][2];\n"
    "    long b = omp_get_max_threads(), n = b * att_s * att_h * att_d;\n"
    "    att_scratch = fill(k_attention_scratch(att_s) * omp_get_max_threads());\n"
    "    printf(\"attn %ld %.9g %.9g\\n\", att_s, 4.0 * (double)n * (double)att_s, batch(one_attn, b));\n"
    "    free(att_scratch);\n"
    "  }\n}\n"
    /* The ops that are neither products nor attention, as the kernels and
     * the programs' loops run them over [1024, 128]: a norm forward and
     * backward, a softmax, a GELU, a residual sum and a bias; their bytes
     * read and written over their time. */
    "static real *el_w, *el_b, *el_dw, *el_db;\n"
    "static void one_elem(long rows) {\n"
    "  const long h = 128, n = rows * h;\n"
    "  real *x = take(4 * n), *y = x + n, *dy = x + 2 * n, *dx = x + 3 * n;\n"
    "  k_layernorm_fwd(y, x, el_w, el_b, rows, h, 1e-5f);\n"
    "  k_layernorm_bwd(dx, el_dw, el_db, dy, x, el_w, rows, h, 1e-5f);\n"
    "  k_softmax_fwd(y, x, rows, h);\n"
    "#pragma omp parallel for schedule(static)\n"
    "  for (long i = 0; i < n; i++) y[i] = k_gelu(x[i]);\n"
    "#pragma omp parallel for schedule(static)\n"
    "  for (long i = 0; i < n; i++) dx[i] = x[i] + dy[i];\n"
    "  k_add_bias(y, el_b, rows, h);\n}\n"
    "static void elem(void) {\n"
    "  el_w = fill(128), el_b = fill(128), el_dw = fill(128), el_db = fill(128);\n"
    "  printf(\"elem %.9g %.9g\\n\", 14.0 * 1024 * 128 * sizeof(real), batch(one_elem, 1024));\n}\n"
    /* The optimizer step's passes as the runtime runs them (runtime/main.c
     * rt_update): the gradient norm, AdamW over contiguous shares of the
     * threads, and the finiteness check of the weights and both moments:
     * 4 + 28 + 12 bytes per parameter. */
    "static double sink;\n"
    "static double squares(const real *x, long n) {\n"
    "  const long chunk = 1L << 14;\n"
    "  double sum = 0;\n"
    "#pragma omp parallel for schedule(static) reduction(+ : sum)\n"
    "  for (long c = 0; c < (n + chunk - 1) / chunk; c++)\n"
    "    sum += k_sum_squares(x + c * chunk, (c + 1) * chunk < n ? chunk : n - c * chunk);\n"
    "  return sum;\n}\n"
    "static void one_update(long n) {\n"
    "  KAdamW hp = {.grad_scale = 1, .decay = 0.9999f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,\n"
    "               .step_size = 1e-4f, .bc2_sqrt = 0.5f};\n"
    "  real *w = take(4 * n), *g = w + n, *m = w + 2 * n, *v = w + 3 * n;\n"
    "  sink += squares(g, n);\n"
    "#pragma omp parallel\n"
    "  {\n"
    "    long i = omp_get_thread_num(), T = omp_get_num_threads(), lo = n * i / T, hi = n * (i + 1) / T;\n"
    "    k_adamw(w + lo, g + lo, m + lo, v + lo, hi - lo, &hp);\n"
    "  }\n"
    "  sink += squares(w, n) + squares(m, n) + squares(v, n);\n}\n"
    "static void update(void) {\n"
    "  double t = batch(one_update, 1L << 16);\n"
    "  if (sink == 42) puts(\"\");\n"
    "  printf(\"update %.9g %.9g\\n\", 44.0 * (1L << 16), t);\n}\n"
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
    "  omp_set_max_active_levels(1); /* as the programs: kernels in a region run on their thread */\n"
    "  if (argc > 2 && strcmp(argv[1], \"gemm\") == 0) {\n"
    "    gemm(atol(argv[2]));\n    copy();\n    op();\n    attn();\n    elem();\n    update();\n"
    "    return 0;\n  }\n"
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
  double gemm_n[16], gemm_f[16], gemm_s[16]; /* size N of the N x N x N products a run
                                               * does at once, their FLOPs, best seconds */
  double copy_bytes, copy_s;
  int np2p;
  double p2p_bytes[2], p2p_s[2]; /* one message one way */
  double op_s;                   /* one parallel region, start to end */
  int nattn;
  double attn_flops[2], attn_s[2];
  double elem_bytes, elem_s, update_bytes, update_s;
} Measured;

/* Runs a shell command and reads the lines the program prints. Several
 * copies of the program print a size each: the slowest copy's time is the
 * one kept (the ranks of a step wait for the slowest). */
static void keep_gemm(Measured *m, double n, double f, double s) {
  for (int i = 0; i < m->ngemm; i++)
    if (m->gemm_n[i] == n) {
      if (s > m->gemm_s[i]) m->gemm_s[i] = s;
      return;
    }
  if (m->ngemm < 16) m->gemm_n[m->ngemm] = n, m->gemm_f[m->ngemm] = f, m->gemm_s[m->ngemm++] = s;
}

static bool read_lines(const char *command, Measured *m) {
  fflush(stdout);
  FILE *p = popen(command, "r");
  if (!p) return false;
  char line[256];
  while (fgets(line, sizeof line, p)) {
    double a, b, c;
    if (sscanf(line, "gemm %lf %lf %lf", &a, &b, &c) == 3) keep_gemm(m, a, b, c);
    else if (sscanf(line, "copy %lf %lf", &a, &b) == 2 && b > m->copy_s) m->copy_bytes = a, m->copy_s = b;
    else if (sscanf(line, "p2p %lf %lf", &a, &b) == 2 && m->np2p < 2)
      m->p2p_bytes[m->np2p] = a, m->p2p_s[m->np2p++] = b;
    else if (sscanf(line, "op %lf", &a) == 1 && a > m->op_s) m->op_s = a;
    else if (sscanf(line, "attn %lf %lf %lf", &c, &a, &b) == 3) {
      a = pl_cpu_attention_flops(a, c, true, false) + pl_cpu_attention_flops(a, c, true, true);
      int k = 0; /* the copies print the same shapes in the same order */
      while (k < m->nattn && m->attn_flops[k] != a) k++;
      if (k == m->nattn && k < 2) m->attn_flops[m->nattn++] = a;
      if (k < 2 && b > m->attn_s[k]) m->attn_s[k] = b;
    } else if (sscanf(line, "elem %lf %lf", &a, &b) == 2 && b > m->elem_s)
      m->elem_bytes = a, m->elem_s = b;
    else if (sscanf(line, "update %lf %lf", &a, &b) == 2 && b > m->update_s)
      m->update_bytes = a, m->update_s = b;
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
    double f = m->gemm_f[i], x = f / m->gemm_s[i], y = 1 / m->gemm_s[i];
    sxx += x * x, sxy += x * y, syy += y * y, sx += x, sy += y;
    if (x > best) best = x;
  }
  double det = sxx * syy - sxy * sxy, a = 0, c = 0;
  if (det > 0) a = (sx * syy - sy * sxy) / det, c = (sxx * sy - sxy * sx) / det;
  if (c < 0 || a <= 0) c = 0, a = sxx > 0 ? sx / sxx : 0;
  if (a <= 0) a = best > 0 ? 1 / best : 1e-9;
  *peak = 1 / a, *half = c / a;
}

static double fraction(double x) { return x > 1 ? 1 : x > 0 ? x : 1; }

/* The attention's rate over the fitted peak, the mean of the two shapes
 * timed. */
static double attention_eff(const Measured *m, double peak) {
  double sum = 0;
  for (int k = 0; k < m->nattn; k++) sum += m->attn_flops[k] / m->attn_s[k] / peak;
  return fraction(m->nattn ? sum / m->nattn : 1);
}

/* The other ops' bytes per second over the copy's. */
static double elem_eff(const Measured *m) {
  return m->elem_s > 0 && m->copy_s > 0
             ? fraction(m->elem_bytes / m->elem_s / (2 * m->copy_bytes / m->copy_s))
             : 1;
}

/* The one-core figures of a CPU description from the copies' run. */
static void describe_core(const Measured *core, int cores, PlHw *hw) {
  hw->cores = cores;
  if (cores <= 1 || core->ngemm == 0 || core->copy_s <= 0) return; /* pl_hw_load's defaults */
  double peak, half;
  fit_gemm(core, &peak, &half);
  hw->core_peak = peak, hw->core_gemm_half = half, hw->core_attn_eff = attention_eff(core, peak);
  hw->core_mem_bw = 2 * core->copy_bytes / core->copy_s;
  hw->core_mem_eff = elem_eff(core);
  hw->core_kernel_s = core->gemm_s[0];
  hw->core_op_s = core->op_s;
  if (core->update_s > 0) hw->core_update_bw = core->update_bytes / core->update_s;
}

/* The description from the measurements; notes what stood in for what. */
static PlHw describe(const Measured *m, const Measured *core, bool have_mpi, int cores) {
  PlHw hw = *pl_hw_find("a100");
  double peak, half;
  fit_gemm(m, &peak, &half);
  hw.name = "measured";
  hw.doc = ir_fmt("this machine (%d cores), measured by shardc hw --measure: the CPU target's "
                  "kernels, a copy, a parallel region and the optimizer's passes, on all the "
                  "cores and on one per rank%s", cores,
                  have_mpi ? ", rt_comm messages between two ranks" :
                             "; MPI not measured (links are the memory copy's figures)");
  for (int k = 0; k < PL_NPREC; k++) hw.peak_flops[k] = peak;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  hw.mem_bytes = pages > 0 && page > 0 ? (double)pages * (double)page : 1 << 30;
  hw.mem_bw = 2 * m->copy_bytes / m->copy_s; /* read and written */
  hw.gpus_per_node = cores;
  hw.gemm_eff = 1, hw.gemm_half = half;
  /* The least a kernel costs: the smallest product measured; what every
   * op costs besides its work: one parallel region with every core's
   * thread, as the programs start one per op. */
  hw.kernel_s = m->ngemm ? m->gemm_s[0] : 5e-6;
  hw.op_s = m->op_s;
  hw.attn_eff = attention_eff(m, peak);
  hw.mem_eff = elem_eff(m), hw.comm_eff = 1;
  if (m->update_s > 0) hw.update_bw = m->update_bytes / m->update_s;
  /* A CPU has no streaming multiprocessors, and its ranks allocate once
   * from the memory plan: no context, NCCL buffers or allocator. */
  hw.sms = 0;
  hw.workspace_bytes = hw.comm_buffer_bytes = hw.fragmentation = 0;
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
    fprintf(f, "#   k_gemm %4.0f^3 x %.0f  %10.3f us  %8.2f GFLOP/s\n", m->gemm_n[i],
            m->gemm_f[i] / (2 * pow(m->gemm_n[i], 3)), 1e6 * m->gemm_s[i],
            m->gemm_f[i] / m->gemm_s[i] / 1e9);
  fprintf(f, "#   copy %.0f MiB  %.3f ms  %.2f GB/s read + written\n", m->copy_bytes / 1048576,
          1e3 * m->copy_s, 2 * m->copy_bytes / m->copy_s / 1e9);
  fprintf(f, "#   one parallel region  %.3f us\n", 1e6 * m->op_s);
  for (int k = 0; k < m->nattn; k++)
    fprintf(f, "#   k_attention_fwd + bwd  %.3f ms  %.2f GFLOP/s\n", 1e3 * m->attn_s[k],
            m->attn_flops[k] / m->attn_s[k] / 1e9);
  if (m->elem_s > 0)
    fprintf(f, "#   norm, softmax, gelu, sum, bias  %.3f ms  %.2f GB/s\n", 1e3 * m->elem_s,
            m->elem_bytes / m->elem_s / 1e9);
  if (m->update_s > 0)
    fprintf(f, "#   optimizer passes (norm, AdamW, check)  %.3f ms  %.2f GB/s\n", 1e3 * m->update_s,
            m->update_bytes / m->update_s / 1e9);
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
  /* "All the cores" is said, not inherited: an OMP_NUM_THREADS=1 in the
   * caller's environment (the test scripts export one) would measure one
   * thread and describe it as the whole machine. */
  if (ok && (!read_lines(ir_fmt("cd %s && OMP_NUM_THREADS=%ld OMP_WAIT_POLICY=passive ./measure gemm %ld",
                                dir, cores, max), &m) ||
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
