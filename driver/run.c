/* `shardc build`, `shardc run` and `shardc sample`: from a model to a
 * running training program, and from a checkpoint to generated text. The
 * programs are compiled into a cache folder keyed by everything that
 * shapes them, so running the same model again rebuilds nothing. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
    if (!args[i].opt || strcmp(args[i].opt->name, "--out") == 0) continue;
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

/* Compiles (quietly unless asked) and builds; returns the folder of the
 * programs (rank0, or stage0, stage1, ... with pipeline stages). */
static const char *compile_and_build(const char *model, int nargs, DrvArg *args, IrDType dtype,
                                     bool show_plan) {
  const char *dir = cache_dir(model, nargs, args, dtype);
  FILE *plan = show_plan ? stdout : NULL;
  if (drv_compile_to_dir(model, nargs, args, "cpu", dir, dtype, plan) != 0) return NULL;
  if (run_make(dir) != 0) return NULL;
  return dir;
}

/* OpenMP threads that spin while they wait for work steal the cores that
 * OpenBLAS and other processes need; passive waiting measured faster even on
 * an idle machine (bench/cpu_train.sh). The user's setting wins. */
static void default_wait_policy(void) { setenv("OMP_WAIT_POLICY", "passive", 0); }

/* Replaces this process with the program, so its exit status and signals
 * are the user's to see. */
static int exec_program(const char *program, char **argv) {
  default_wait_policy();
  fflush(stdout);
  fflush(stderr);
  execv(program, argv);
  fprintf(stderr, "shardc: error: cannot start %s: %s\n", program, strerror(errno));
  return 1;
}

/* Starts the program on `ranks` ranks of this machine with mpirun, by the
 * launch recipe of runtime/comm.h (tests/comm/mpirun.sh applies the same):
 * as root the two variables Open MPI needs, --oversubscribe (more ranks
 * than cores is allowed), --bind-to none (each rank's OpenMP threads may use
 * every core), mpi_yield_when_idle (a waiting rank gives its core away), and
 * OMP_NUM_THREADS = max(1, cores / ranks) unless the environment sets it.
 * mpirun replaces this process: its exit status, non-zero when any rank
 * fails, is the user's. Rank 0 prints the progress; the other ranks print
 * only errors, each as `shardc: error: rank R: ...`. */
#ifndef SHARDC_MPIEXEC
#define SHARDC_MPIEXEC "mpirun"
#endif

/* `programs` of `per` ranks each, in rank order: with pipeline stages
 * stage r's ranks are the r-th block of t x d (abi/mesh.h), so an MPMD
 * launch `-np t*d stage0 ARGS : -np t*d stage1 ARGS ...` gives every rank
 * its stage's program. */
static int exec_ranks(const char *const *programs, int nprograms, int per, char **argv) {
  int ranks = per * nprograms;
  if (getuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  const char *threads = getenv("OMP_NUM_THREADS");
  if (!threads || !*threads) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long t = cores > 0 ? cores / ranks : 1;
    threads = ir_fmt("%ld", t >= 1 ? t : 1);
  }
  int argc = 0;
  while (argv[argc]) argc++;
  char **mv = ir_alloc(sizeof(char *) * (size_t)((argc + 4) * nprograms + 16));
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
  for (int p = 0; p < nprograms; p++) {
    if (p) mv[n++] = ":";
    mv[n++] = "-np";
    mv[n++] = (char *)ir_fmt("%d", per);
    mv[n++] = (char *)programs[p];
    for (int i = 1; i < argc; i++) mv[n++] = argv[i];
  }
  mv[n] = NULL;
  fflush(stdout);
  fflush(stderr);
  execvp(mv[0], mv);
  fprintf(stderr, "shardc: error: cannot start %s for %d ranks: %s\n", mv[0], ranks,
          strerror(errno));
  return 1;
}

/* -------------------------------------------------------------------- run */

static const DrvOption run_options[] = {
    DRV_DEFINE_OPTION,
    {"--microbatch", "B", "sequences per microbatch (sets the model's `batch`)"},
    {"--dtype", "f32|f64", "the program's floating point type (default f32)"},
    {"--out", "DIR", "compile into DIR instead of .shardc/MODEL-HASH"},
    {"--passes", "a,b,c", "run these passes instead of the target's pipeline, as in compile"},
    DRV_TP_OPTIONS,
    DRV_PP_OPTIONS,
    {NULL, NULL, NULL},
};

const DrvCommand drv_run_command = {
    "run", "MODEL [compile options] [training options]",
    "compile, build and start training a model",
    "The model file comes first. -D, --microbatch, --dtype, --out, --passes and the\n"
    "parallel flags (--tp, --sequence-parallel, --tp-strategy, --vocab-multiple,\n"
    "--pp, --vpp, --pp-layout, --schedule, --dp, --zero, --bucket-mb) are\n"
    "shardc's; --global-batch goes to both (the schedule is built for it);\n"
    "every other option goes to the training program, whose own --help lists\n"
    "them (data, steps, optimizer, logging, checkpoints, sampling):\n"
    "  shardc run MODEL --help\n"
    "With t x p x d > 1 the programs run on that many ranks of this machine\n"
    "under mpirun (as root too, with OMP_NUM_THREADS = cores / ranks unless it\n"
    "is set), each pipeline stage's ranks its own program; rank 0 prints the\n"
    "progress, any failing rank its error, and the exit status is non-zero\n"
    "when a rank fails.",
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
  const char *dir = compile_and_build(model, nargs, args, dtype, !help);
  if (!dir) return 1;
  /* One program per pipeline stage serves its t x d ranks. */
  const char **programs = ir_alloc(sizeof(char *) * (size_t)opt.pp);
  for (int r = 0; r < opt.pp; r++)
    programs[r] = opt.pp > 1 ? ir_fmt("%s/stage%d", dir, r) : ir_fmt("%s/rank0", dir);
  theirs[0] = (char *)programs[0];
  theirs[ntheirs] = NULL;
  int per = opt.tp * opt.dp;
  if (per * opt.pp > 1 && !usage) return exec_ranks(programs, opt.pp, per, theirs);
  return exec_program(programs[0], theirs);
}

/* ----------------------------------------------------------------- sample */

static const DrvOption sample_options[] = {
    {"--prompt", "TEXT", "the text to continue (default: a newline)"},
    {"--tokens", "N", "how many tokens to generate (default 200)"},
    {"--temperature", "T", "sampling temperature (default 1.0; 0 picks the most likely)"},
    {"--top-k", "K", "sample among the K most likely tokens only (default: all)"},
    {"--seed", "S", "random seed of the sampler"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_sample_command = {
    "sample", "CHECKPOINT_DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]",
    "generate text from a checkpoint of a byte-level model",
    "CHECKPOINT_DIR is a folder written by --save. Its model.safetensors\n"
    "records the model file and the -D overrides; the model is compiled again\n"
    "with a microbatch of 1 and continues the prompt byte by byte.",
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
  const char *built = compile_and_build(source, nm, margs, dtype, false);
  if (!built) return 1;
  const char *program = ir_fmt("%s/rank0", built);
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
  argv[n] = NULL;
  return exec_program(program, argv);
}
