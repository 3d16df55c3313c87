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
#include <sys/file.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../abi/formats.h"
#include "safetensors.h"
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

int rt_ckpt_latest_parse(const char *text, size_t len, const char *path, char **name, RtErr *e) {
  *name = NULL;
  /* One line, "step-" and digits, then at most a line break: only a
   * name of our own making, never a path out of DIR. */
  size_t n = len;
  if (n > 0 && text[n - 1] == '\n') n--;
  size_t digits = 0;
  int ok = n > 5 && n < 64 && !memcmp(text, "step-", 5);
  for (size_t i = 5; ok && i < n; i++, digits++) ok = text[i] >= '0' && text[i] <= '9';
  if (!ok || digits == 0) {
    char shown[80];
    size_t k = 0;
    size_t i = 0;
    for (; i < n && k + 5 < sizeof shown; i++) {
      unsigned char c = (unsigned char)text[i];
      k += (size_t)(c >= ' ' && c < 127 ? snprintf(shown + k, sizeof shown - k, "%c", c)
                                        : snprintf(shown + k, sizeof shown - k, "\\x%02x", c));
    }
    shown[k] = 0;
    return rt_err_set(e, path, "the pointer to the newest checkpoint holds '%s%s', not a folder "
                      "name of the form step-NNNNNNNN (remove it, or write the name of a "
                      "complete step folder into it)", shown, i < n ? "..." : "");
  }
  *name = rt_xmalloc(n + 1);
  memcpy(*name, text, n);
  (*name)[n] = 0;
  return 0;
}

/* The folder named by DIR's pointer, or NULL when it has none; a pointer
 * that is there but malformed is an error naming it. */
static char *latest_name(const char *dir) {
  char *p = path_of(dir, CKPT_LATEST_FILE);
  FILE *f = fopen(p, "rb");
  if (!f) {
    free(p);
    return NULL;
  }
  char text[256];
  size_t len = fread(text, 1, sizeof text, f);
  fclose(f);
  char *name;
  RtErr e;
  if (rt_ckpt_latest_parse(text, len, p, &name, &e)) rt_err_fatal(&e);
  free(p);
  return name;
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
  char *tmp = rt_st_tmp_name(p);
  FILE *f = fopen(tmp, "wx");
  if (!f) rt_fatal(tmp, "cannot create: %s", strerror(errno));
  if (fputs(name, f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0)
    rt_fatal(tmp, "write failed: %s", strerror(errno));
  if (fclose(f) != 0) rt_fatal(tmp, "write failed: %s", strerror(errno));
  if (rename(tmp, p) != 0) rt_fatal(p, "cannot replace: %s", strerror(errno));
  sync_dir(dir);
  free(tmp);
  free(p);
  prune(dir, step, keep);
}

/* ------------------------------------------------------------- the lock */

int rt_ckpt_lock(const char *dir) {
  char *p = path_of(dir, CKPT_LOCK_FILE);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    rt_fatal(dir, "--save: cannot create files in this folder (%s): checked before the first "
             "step, so that no training is lost at the first save", strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char holder[256] = "";
    ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
    holder[got > 0 ? got : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
    close(fd);
    if (err == EWOULDBLOCK)
      rt_fatal(dir, "--save: another run saves into this folder (%s, lock %s): two runs "
               "saving into one folder would overwrite each other's checkpoints; wait for it "
               "to end, or save elsewhere", *holder ? holder : "holder unknown", p);
    rt_fatal(p, "cannot lock the --save folder: %s", strerror(err));
  }
  char host[256] = "?", text[400];
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
  int n = snprintf(text, sizeof text, "pid %ld on host %s\n", (long)getpid(), host);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n)
    rt_fatal(p, "cannot write the lock of the --save folder: %s", strerror(errno));
  free(p);
  return fd;
}

/* Whether a file name is a temporary of one of our files: NAME.tmp (older
 * versions) or NAME.tmp.HOST.PID.N (rt_st_tmp_name). */
static int our_temporary(const char *file) {
  static const char *const ours[] = {CKPT_MODEL_FILE, CKPT_STATE_FILE, CKPT_LATEST_FILE};
  for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
    size_t n = strlen(ours[i]);
    if (strncmp(file, ours[i], n)) continue;
    if (!strcmp(file + n, ".tmp") || !strncmp(file + n, RT_ST_TMP_MARK, strlen(RT_ST_TMP_MARK)))
      return 1;
  }
  return 0;
}

/* Removes our temporaries from one folder; returns how many. */
static int clean_folder(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (our_temporary(e->d_name)) {
      char *p = path_of(dir, e->d_name);
      n += unlink(p) == 0;
      free(p);
    }
  closedir(d);
  return n;
}

int rt_ckpt_clean_temporaries(const char *dir) {
  int n = clean_folder(dir);
  DIR *d = opendir(dir);
  if (!d) return n;
  struct dirent *e;
  while ((e = readdir(d))) {
    long long s;
    char tail;
    if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
    char *p = path_of(dir, e->d_name);
    n += clean_folder(p);
    free(p);
  }
  closedir(d);
  return n;
}
