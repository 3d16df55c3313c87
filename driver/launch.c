/* How the ranks of a job start: `shardc run`'s choice of launcher (mpirun
 * on this machine or over a host file, Slurm's srun inside an allocation or
 * when asked for), srun's command line, and the launch.sh that `shardc
 * compile` writes beside the manifest for jobs submitted by hand. Every
 * way follows the launch recipe of runtime/comm/comm.h; run.c builds mpirun's
 * command line and watches the job whichever launcher started it. The
 * script's text is launch_script.c's. */
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
  size_t mlen;
  const char *manifest = drv_read_file(ir_fmt("%s/manifest.json", dir), &mlen);
  char *text = NULL;
  size_t len = 0;
  const char *err = "cannot read it";
  if (!manifest || !drv_launch_script_text(manifest, &text, &len, &err)) {
    fprintf(stderr, "shardc: error: %s/manifest.json: %s\n", dir, err);
    return false;
  }
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
