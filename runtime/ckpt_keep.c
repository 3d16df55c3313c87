/* --keep-last: numbered checkpoint folders and the pointer to the newest
 * complete one (see checkpoint.h).
 *
 * The order of a save makes every moment of it safe to die in: the step's
 * folder is written in full (each file atomically, checkpoint.c), then
 * the pointer is replaced atomically (a temporary, fsync, rename, fsync of
 * the folder), and only then are folders beyond the K newest deleted. A
 * crash before the rename leaves the pointer at the previous complete
 * checkpoint, which no step has deleted yet. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../abi/formats.h"
#include "util.h"

static char *path_of(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = rt_xmalloc(n);
  snprintf(s, n, "%s/%s", dir, name);
  return s;
}

char *rt_ckpt_step_dir(const char *dir, int64_t step) {
  char name[64];
  snprintf(name, sizeof name, CKPT_STEP_FMT, (long long)step);
  return path_of(dir, name);
}

/* The folder named by DIR's pointer, or NULL when it has none. */
static char *latest_name(const char *dir) {
  char *p = path_of(dir, CKPT_LATEST_FILE);
  FILE *f = fopen(p, "r");
  free(p);
  if (!f) return NULL;
  char line[256] = "";
  char *got = fgets(line, sizeof line, f);
  fclose(f);
  line[strcspn(line, "\n")] = 0;
  /* Only a name of our own making: never a path out of DIR. */
  long long step;
  char tail;
  if (!got || sscanf(line, "step-%lld%c", &step, &tail) != 1 || strchr(line, '/')) return NULL;
  return rt_xstrdup(line);
}

char *rt_ckpt_resolve(const char *dir) {
  char *name = latest_name(dir);
  if (!name) return rt_xstrdup(dir);
  char *p = path_of(dir, name);
  free(name);
  return p;
}

static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY);
  if (fd >= 0) fsync(fd), close(fd);
}

/* Deletes a checkpoint folder of ours: its files, then the folder. */
static void remove_step_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      char *p = path_of(dir, e->d_name);
      unlink(p);
      free(p);
    }
  closedir(d);
  rmdir(dir);
}

static int by_step_desc(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x < y) - (x > y);
}

/* Keeps the folder of `step` and the keep - 1 newest before it; folders
 * after it (left by a run that died while writing them) are left for the
 * resumed run to write again. */
static void prune(const char *dir, int64_t step, int64_t keep) {
  DIR *d = opendir(dir);
  if (!d) return;
  long long *steps = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long long s;
    char tail;
    if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1 || s > step) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      long long *grown = rt_xmalloc(cap * sizeof *grown);
      if (n) memcpy(grown, steps, n * sizeof *grown);
      free(steps);
      steps = grown;
    }
    steps[n++] = s;
  }
  closedir(d);
  qsort(steps, n, sizeof *steps, by_step_desc);
  for (size_t i = (size_t)keep; i < n; i++) {
    char *p = rt_ckpt_step_dir(dir, steps[i]);
    remove_step_dir(p);
    free(p);
  }
  free(steps);
}

void rt_ckpt_publish(const char *dir, int64_t step, int64_t keep) {
  char name[64];
  snprintf(name, sizeof name, CKPT_STEP_FMT "\n", (long long)step);
  char *p = path_of(dir, CKPT_LATEST_FILE);
  char *tmp = path_of(dir, CKPT_LATEST_FILE ".tmp");
  FILE *f = fopen(tmp, "w");
  if (!f) rt_fatal(tmp, "cannot create: %s", strerror(errno));
  if (fputs(name, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0)
    rt_fatal(tmp, "write failed: %s", strerror(errno));
  fclose(f);
  if (rename(tmp, p) != 0) rt_fatal(p, "cannot replace: %s", strerror(errno));
  sync_dir(dir);
  free(tmp);
  free(p);
  prune(dir, step, keep);
}
