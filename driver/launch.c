/* How the ranks of a job start: `shardc run`'s choice of launcher (mpirun
 * on this machine or over a host file, Slurm's srun inside an allocation or
 * when asked for), srun's command line, and the launch.sh that `shardc
 * compile` writes beside the manifest for jobs submitted by hand. Every
 * way follows the launch recipe of runtime/comm.h; run.c builds mpirun's
 * command line and watches the job whichever launcher started it. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"

/* ------------------------------------------------------ the choice */

bool drv_launch_option(const DrvOption *o) {
  return !strcmp(o->name, "--launcher") || !strcmp(o->name, "--hostfile");
}

/* Whether an executable of this name is on PATH. */
static bool on_path(const char *name) {
  const char *p = getenv("PATH");
  if (!p || !*p) p = "/usr/local/bin:/usr/bin:/bin";
  for (;;) {
    size_t len = strcspn(p, ":");
    if (access(ir_fmt("%.*s/%s", len ? (int)len : 1, len ? p : ".", name), X_OK) == 0) return true;
    if (!p[len]) return false;
    p += len + 1;
  }
}

/* The machines of an Open MPI host file: its lines that are neither blank
 * nor comments. */
static int count_hosts(FILE *f) {
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    const char *s = line + strspn(line, " \t");
    n += *s && *s != '#' && *s != '\n';
  }
  return n;
}

/* The nodes of the Slurm allocation we run in (outside one srun
 * allocates one node for all ranks, --overcommit). */
static int slurm_nodes(void) {
  const char *v = getenv("SLURM_JOB_NUM_NODES");
  int n = v ? atoi(v) : 1;
  return n >= 1 ? n : 1;
}

bool drv_launch_choose(const DrvCommand *cmd, int nargs, DrvArg *args, DrvLaunch *out) {
  const char *name = drv_value(nargs, args, "--launcher");
  const char *hostfile = drv_value(nargs, args, "--hostfile"), *job = getenv("SLURM_JOB_ID");
  *out = (DrvLaunch){DRV_LAUNCH_MPIRUN, hostfile, name || hostfile, 1};
  if (name && strcmp(name, "mpirun") != 0 && strcmp(name, "srun") != 0)
    return drv_usage_error(cmd, "--launcher: expected mpirun or srun, got '%s'", name) == 0;
  /* Inside an allocation srun is the default, where it is there to use. */
  bool srun = name ? !strcmp(name, "srun") : !hostfile && job && *job && on_path("srun");
  if (srun && hostfile)
    return drv_usage_error(cmd, "--hostfile: a host file is for mpirun; srun runs the ranks on "
                                "the nodes of the Slurm allocation") == 0;
  if (srun && !on_path("srun"))
    return drv_usage_error(cmd, "--launcher srun: srun is not on PATH (Slurm's client; or "
                                "--launcher mpirun)") == 0;
  if (srun) {
    out->kind = DRV_LAUNCH_SRUN;
    out->nodes = job && *job ? slurm_nodes() : 1;
  }
  if (hostfile) {
    FILE *f = fopen(hostfile, "r");
    if (!f)
      return drv_usage_error(cmd, "--hostfile: cannot read '%s': %s", hostfile,
                             strerror(errno)) == 0;
    out->nodes = count_hosts(f);
    fclose(f);
    if (out->nodes == 0)
      return drv_usage_error(cmd, "--hostfile: '%s' names no machine", hostfile) == 0;
  }
  return true;
}

int drv_launch_ranks_per_node(const DrvLaunch *l, int ranks) {
  int nodes = l && l->nodes > 1 ? l->nodes : 1;
  return (ranks + nodes - 1) / nodes;
}

/* ------------------------------------------------------------ srun */

/* arg in single quotes, as srun's --multi-prog file reads it (inside
 * quotes nothing is special; a quote itself is '\''); NULL for an
 * argument that cannot be written on one line. */
static const char *multi_prog_quote(const char *arg) {
  if (strchr(arg, '\n')) return NULL;
  char *q = ir_alloc(4 * strlen(arg) + 3), *o = q;
  *o++ = '\'';
  for (const char *s = arg; *s; s++) {
    if (*s == '\'') {
      memcpy(o, "'\\''", 4);
      o += 4;
    } else {
      *o++ = *s;
    }
  }
  *o++ = '\'';
  return q;
}

/* Writes dir/multi-prog.conf: one line per program, its ranks
 * (p * per .. p * per + per - 1, the blocks of abi/mesh.h), the program by
 * its absolute path and every argument. Returns the file, or NULL. */
static const char *write_multi_prog(const char *const *programs, int nprograms, int per,
                                    char **argv, const char *dir) {
  const char *args = "";
  for (int i = 1; argv[i]; i++) {
    const char *q = multi_prog_quote(argv[i]);
    if (!q) {
      fprintf(stderr, "shardc run: error: srun --multi-prog cannot pass an argument that holds "
                      "a line break: '%s'\n", argv[i]);
      return NULL;
    }
    args = ir_fmt("%s %s", args, q);
  }
  const char *path = ir_fmt("%s/multi-prog.conf", dir);
  FILE *f = fopen(path, "w");
  for (int p = 0; f && p < nprograms; p++) {
    char *abs = realpath(programs[p], NULL);
    /* The folder's name holds no line break: shardc made it, or -o named it. */
    const char *q = multi_prog_quote(abs ? abs : programs[p]);
    fprintf(f, "%d-%d %s%s\n", p * per, p * per + per - 1, q ? q : "''", args);
    free(abs);
  }
  if (!f || fclose(f) != 0) {
    fprintf(stderr, "shardc run: error: cannot write %s: %s\n", path, strerror(errno));
    return NULL;
  }
  return path;
}

char **drv_srun_argv(const char *const *programs, int nprograms, int per, char **argv,
                     const char *threads, const char *dir) {
  const char *conf = dir ? write_multi_prog(programs, nprograms, per, argv, dir) : NULL;
  if (!conf) return NULL;
  /* srun passes our environment on: the recipe's variables go there. */
  setenv("OMP_NUM_THREADS", threads, 1);
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  const char *mpi = getenv("SLURM_MPI_TYPE");
  char **sv = ir_alloc(sizeof(char *) * 12);
  int n = 0;
  sv[n++] = "srun";
  sv[n++] = (char *)ir_fmt("--ntasks=%d", per * nprograms);
  /* Open MPI learns its rank and peers from Slurm's PMIx server
   * (Debian's Open MPI has no PMI-2 client). */
  sv[n++] = (char *)ir_fmt("--mpi=%s", mpi && *mpi ? mpi : "pmix");
  /* More ranks than CPUs is allowed, as mpirun's --oversubscribe. */
  sv[n++] = "--overcommit";
  /* A rank that fails does not make srun kill the others: shardc ends
   * the job itself, with its message (run.c). */
  sv[n++] = "--kill-on-bad-exit=0";
  sv[n++] = "--multi-prog";
  sv[n++] = (char *)conf;
  sv[n] = NULL;
  return sv;
}

/* ------------------------------------------------------- launch.sh */

/* Ranks first..last run program (consecutive ranks of manifest.json). */
typedef struct RankRun {
  int first, last;
  const char *program;
} RankRun;

/* The manifest's ranks as runs of one program; NULL when it cannot be read. */
static RankRun *read_runs(const char *dir, int *nruns, cJSON **manifest) {
  size_t len;
  const char *text = drv_read_file(ir_fmt("%s/manifest.json", dir), &len);
  if (!text) return NULL;
  *manifest = cJSON_Parse(text);
  cJSON *ranks = cJSON_GetObjectItem(*manifest, "ranks");
  int n = cJSON_GetArraySize(ranks);
  RankRun *runs = ir_alloc(sizeof(RankRun) * (size_t)(n + 1));
  *nruns = 0;
  for (int i = 0; i < n; i++) {
    cJSON *p = cJSON_GetObjectItem(cJSON_GetArrayItem(ranks, i), "program");
    if (!cJSON_IsString(p)) return NULL;
    if (*nruns && !strcmp(runs[*nruns - 1].program, p->valuestring)) runs[*nruns - 1].last = i;
    else runs[(*nruns)++] = (RankRun){i, i, ir_strdup(p->valuestring)};
  }
  return n ? runs : NULL;
}

static int manifest_int(cJSON *m, const char *group, const char *key) {
  cJSON *v = cJSON_GetObjectItem(group ? cJSON_GetObjectItem(m, group) : m, key);
  return cJSON_IsNumber(v) ? v->valueint : 0;
}

static const char *manifest_str(cJSON *m, const char *key) {
  cJSON *v = cJSON_GetObjectItem(m, key);
  return cJSON_IsString(v) ? v->valuestring : "?";
}

/* The script's usage, the part of its header that is the same for every job. */
static const char launch_usage[] =
    "#\n"
    "# Usage: DIR/launch.sh [mpirun [--hostfile FILE] | srun] [TRAINING OPTIONS...]\n"
    "#\n"
    "#   mpirun  Open MPI, on this machine or on the machines of a host file\n"
    "#           (the default outside Slurm); the folder must have the same\n"
    "#           path on every machine.\n"
    "#   srun    Slurm, each rank its program by --multi-prog (the default\n"
    "#           inside an allocation, SLURM_JOB_ID set, as in an sbatch\n"
    "#           script); outside one srun allocates one node for all ranks.\n"
    "# Every rank gets the same training options (`DIR/<program> --help`).\n"
    "#\n"
    "# The environment is `shardc run`'s (runtime/comm.h): OMP_NUM_THREADS =\n"
    "# max(1, cores / ranks per machine) and OMP_WAIT_POLICY=passive unless\n"
    "# set; mpirun gets --oversubscribe --bind-to none --mca\n"
    "# mpi_yield_when_idle 1 (and, as root, OMPI_ALLOW_RUN_AS_ROOT=1\n"
    "# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1); srun gets --mpi=pmix (or\n"
    "# $SLURM_MPI_TYPE) --overcommit and OMPI_MCA_mpi_yield_when_idle=1.\n"
    "# A failing rank ends the job (mpirun's default, srun --kill-on-bad-exit);\n"
    "# `shardc run`'s watchdog (--timeout) does not run here.\n"
    "#\n"
    "# Examples:\n"
    "#   DIR/launch.sh --data train.bin --steps 100\n"
    "#   DIR/launch.sh mpirun --hostfile hosts --data train.bin --steps 100\n"
    "#   sbatch -N 2 --ntasks-per-node=2 --wrap 'DIR/launch.sh --data train.bin'\n";

/* What the script does before it starts the ranks: the launcher, the
 * host file and the threads per rank. */
static const char launch_setup[] =
    "set -u\n"
    "here=$(cd \"$(dirname \"$0\")\" && pwd) || exit 1\n"
    "die() { printf 'launch.sh: error: %s\\n' \"$*\" >&2; exit 1; }\n"
    "launcher=mpirun\n"
    "[ -z \"${SLURM_JOB_ID:-}\" ] || launcher=srun\n"
    "case ${1:-} in mpirun | srun) launcher=$1 && shift ;; esac\n"
    "hostfile=\n"
    "if [ \"$launcher\" = mpirun ] && [ \"${1:-}\" = --hostfile ]; then\n"
    "  [ $# -ge 2 ] || die \"--hostfile needs a file\"\n"
    "  hostfile=$2\n"
    "  shift 2\n"
    "  [ -r \"$hostfile\" ] || die \"--hostfile: cannot read '$hostfile'\"\n"
    "fi\n"
    "command -v \"$launcher\" >/dev/null 2>&1 || die \"$launcher is not on PATH\"\n"
    "\n"
    "# The machines the ranks spread over decide the threads per rank.\n"
    "nodes=1\n"
    "if [ -n \"$hostfile\" ]; then\n"
    "  nodes=$(grep -c -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' \"$hostfile\")\n"
    "elif [ \"$launcher\" = srun ] && [ -n \"${SLURM_JOB_ID:-}\" ]; then\n"
    "  nodes=${SLURM_JOB_NUM_NODES:-1}\n"
    "fi\n"
    "[ \"$nodes\" -ge 1 ] 2>/dev/null || nodes=1\n"
    "cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)\n"
    "threads=$((cores / ((ranks + nodes - 1) / nodes)))\n"
    "[ \"$threads\" -ge 1 ] || threads=1\n"
    "OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}\n"
    "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}\n"
    "export OMP_NUM_THREADS OMP_WAIT_POLICY\n"
    "\n"
    "if [ \"$launcher\" = mpirun ]; then\n"
    "  if [ \"$(id -u)\" = 0 ]; then\n"
    "    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
    "    export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM\n"
    "  fi\n"
    "  # One -np block per program, in rank order (MPMD).\n"
    "  exec mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \\\n"
    "    -x OMP_NUM_THREADS -x OMP_WAIT_POLICY ${hostfile:+--hostfile \"$hostfile\"} \\\n";

/* srun reads each rank's command line from a file: the program by its
 * absolute path and every argument in single quotes. */
static const char launch_srun[] =
    "# srun --multi-prog reads each rank's command line from a file: the\n"
    "# program by its absolute path, every argument in single quotes.\n"
    "quote() { printf \"'%s'\" \"$(printf '%s' \"$1\" | sed \"s/'/'\\\\\\\\''/g\")\"; }\n"
    "args=\n"
    "for a in \"$@\"; do\n"
    "  case $a in *'\n"
    "'*) die \"srun --multi-prog cannot pass an argument that holds a line break\" ;; esac\n"
    "  args=\"$args $(quote \"$a\")\"\n"
    "done\n"
    "conf=$(mktemp \"${TMPDIR:-/tmp}/launch.XXXXXX\") || exit 1\n"
    "trap 'rm -f \"$conf\"' EXIT\n"
    "trap 'exit 130' INT\n"
    "trap 'exit 143' TERM\n"
    "{\n";

static void write_script(FILE *o, cJSON *m, const RankRun *runs, int nruns) {
  int world = runs[nruns - 1].last + 1;
  fprintf(o, "#!/bin/sh\n# launch.sh: starts the %d rank%s of model %s (t=%d x p=%d x d=%d, "
          "target %s),\n", world, world == 1 ? "" : "s", manifest_str(m, "model"),
          manifest_int(m, "mesh", "tp"), manifest_int(m, "mesh", "pp"),
          manifest_int(m, "mesh", "dp"), manifest_str(m, "target"));
  fprintf(o, "# each with its program (manifest.json), written by `shardc compile`.\n"
             "# Build the programs first: shardc build DIR (or make -C DIR).\n");
  for (int i = 0; i < nruns; i++)
    if (runs[i].first == runs[i].last)
      fprintf(o, "#   rank %d: %s\n", runs[i].first, runs[i].program);
    else
      fprintf(o, "#   ranks %d-%d: %s\n", runs[i].first, runs[i].last, runs[i].program);
  fputs(launch_usage, o);
  fprintf(o, "\nranks=%d\n", world);
  fputs(launch_setup, o);
  for (int i = 0; i < nruns; i++)
    fprintf(o, "    %s-np %d \"$here/%s\" \"$@\"%s\n", i ? ": " : "",
            runs[i].last - runs[i].first + 1, runs[i].program, i + 1 < nruns ? " \\" : "");
  fputs("fi\n\n", o);
  fputs(launch_srun, o);
  for (int i = 0; i < nruns; i++)
    fprintf(o, "  printf '%%s\\n' \"%d-%d $(quote \"$here/%s\")$args\"\n", runs[i].first,
            runs[i].last, runs[i].program);
  fputs("} >\"$conf\"\n"
        "OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}\n"
        "export OMPI_MCA_mpi_yield_when_idle\n"
        "srun --ntasks=\"$ranks\" --mpi=\"${SLURM_MPI_TYPE:-pmix}\" --overcommit "
        "--kill-on-bad-exit=1 \\\n"
        "  --multi-prog \"$conf\"\n", o);
}

/* True when the file at path already holds exactly data. */
static bool unchanged(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char *old = malloc(len + 1);
  bool same = old && fread(old, 1, len + 1, f) == len && memcmp(old, data, len) == 0;
  free(old);
  fclose(f);
  return same;
}

bool drv_write_launch_script(const char *dir) {
  cJSON *m = NULL;
  int nruns = 0;
  RankRun *runs = read_runs(dir, &nruns, &m);
  if (!runs) {
    cJSON_Delete(m);
    fprintf(stderr, "shardc: error: %s/manifest.json: cannot read its ranks\n", dir);
    return false;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&text, &len);
  if (!o) die("open_memstream: %s", strerror(errno));
  write_script(o, m, runs, nruns);
  fclose(o);
  cJSON_Delete(m);
  const char *path = ir_fmt("%s/launch.sh", dir);
  bool ok = unchanged(path, text, len);
  if (!ok) {
    FILE *f = fopen(path, "wb");
    ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = false;
  }
  free(text);
  if (ok && chmod(path, 0755) != 0) ok = false;
  if (!ok) fprintf(stderr, "shardc: error: cannot write %s: %s\n", path, strerror(errno));
  return ok;
}
