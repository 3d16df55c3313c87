/* launch.sh, the script that `shardc compile` writes beside the manifest
 * so that users who submit jobs themselves start every rank with its
 * program, under mpirun or srun, by the launch recipe of runtime/comm/comm.h.
 * It is made from manifest.json's text alone (a fuzz harness feeds this
 * file arbitrary text: tests/features/fuzz/fuzz_manifest.c). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"

/* Ranks first..last run program (consecutive ranks of manifest.json). */
typedef struct RankRun {
  int first, last;
  const char *program;
} RankRun;

/* A program's file name as the compiler writes them (stage0, rank0, ...):
 * the script puts it inside double quotes and srun's file inside single
 * ones, so anything that a shell would read as more than a name is
 * refused. */
static bool plain_name(const char *s) {
  if (!*s || *s == '.' || *s == '-') return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || *s == '-' || *s == '.'))
      return false;
  return true;
}

/* The manifest's ranks as runs of one program; NULL, with the reason in
 * err, when the text is not a manifest whose ranks each name a program. */
static RankRun *read_runs(cJSON *manifest, int *nruns, const char **err) {
  cJSON *ranks = cJSON_GetObjectItem(manifest, "ranks");
  int n = cJSON_GetArraySize(ranks);
  if (!cJSON_IsArray(ranks) || n == 0) {
    *err = "no list of ranks";
    return NULL;
  }
  if (n > DRV_LAUNCH_MAX_RANKS) {
    *err = "more ranks than a launch script starts";
    return NULL;
  }
  RankRun *runs = ir_alloc(sizeof(RankRun) * (size_t)(n + 1));
  *nruns = 0;
  for (int i = 0; i < n; i++) {
    cJSON *p = cJSON_GetObjectItem(cJSON_GetArrayItem(ranks, i), "program");
    if (!cJSON_IsString(p) || !plain_name(p->valuestring)) {
      *err = ir_fmt("rank %d has no program, or one whose name is not a plain file name", i);
      return NULL;
    }
    if (*nruns && !strcmp(runs[*nruns - 1].program, p->valuestring)) runs[*nruns - 1].last = i;
    else runs[(*nruns)++] = (RankRun){i, i, ir_strdup(p->valuestring)};
  }
  return runs;
}

static int manifest_int(cJSON *m, const char *group, const char *key) {
  cJSON *v = cJSON_GetObjectItem(group ? cJSON_GetObjectItem(m, group) : m, key);
  return cJSON_IsNumber(v) ? v->valueint : 0;
}

/* Strings of the manifest go into a comment line of the script: only
 * printable characters, the rest as '?'. */
static const char *manifest_str(cJSON *m, const char *key) {
  cJSON *v = cJSON_GetObjectItem(m, key);
  if (!cJSON_IsString(v)) return "?";
  char *s = ir_strdup(v->valuestring);
  for (char *c = s; *c; c++)
    if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
  return s;
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
    "# The environment is `shardc run`'s (runtime/comm/comm.h): OMP_NUM_THREADS =\n"
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

bool drv_launch_script_text(const char *manifest, char **out, size_t *len, const char **err) {
  cJSON *m = cJSON_Parse(manifest);
  *out = NULL;
  *len = 0;
  if (!m) {
    *err = "not JSON";
    return false;
  }
  int nruns = 0;
  RankRun *runs = read_runs(m, &nruns, err);
  FILE *o = runs ? open_memstream(out, len) : NULL;
  if (o) {
    write_script(o, m, runs, nruns);
    fclose(o);
  } else if (runs) {
    *err = strerror(errno);
  }
  cJSON_Delete(m);
  return o != NULL;
}
