/* Replays fuzz inputs without libFuzzer: each argument is a file, or a
 * directory whose files are replayed in name order. Every input goes
 * through the same entry point the fuzzer calls (fuzz_NAME.c), so a
 * crash the fuzzer found, once saved in the corpus, stays tested by ctest
 * in every build, sanitizer builds with gcc included. Each harness has
 * its own replayer, fuzz_replay_NAME (tests/features/fuzz/tests.cmake).
 *
 *   fuzz_replay_NAME tests/features/fuzz/corpus [more files or directories...] */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads a whole file; NULL (after a message) when it cannot. */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return NULL;
  }
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  if (!buf) die("out of memory reading %s", path);
  if (ferror(f)) {
    perror(path);
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = n;
  return buf;
}

/* Returns false when a file could not be read: a corpus that silently
 * replays nothing would hide that it tests nothing. */
static bool replay_file(const char *path, int *count) {
  size_t len;
  char *buf = read_file(path, &len);
  if (!buf) return false;
  /* The name goes out before the run, so a crash points at its input. */
  printf("  %s (%zu bytes)\n", path, len);
  fflush(stdout);
  LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
  free(buf);
  ++*count;
  return true;
}

static int skip_dot(const struct dirent *d) { return d->d_name[0] != '.'; }

static bool replay_path(const char *path, int *count) {
  struct stat st;
  if (stat(path, &st) != 0) {
    perror(path);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) return replay_file(path, count);
  struct dirent **names;
  int n = scandir(path, &names, skip_dot, alphasort);
  if (n < 0) {
    perror(path);
    return false;
  }
  bool ok = true;
  for (int i = 0; i < n; i++) {
    /* Not in the compiler's arena: a harness may free that after each
     * input. */
    char *child;
    if (asprintf(&child, "%s/%s", path, names[i]->d_name) < 0) die("out of memory");
    ok = replay_path(child, count) && ok;
    free(child);
    free(names[i]);
  }
  free(names);
  return ok;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
    return 2;
  }
  int count = 0;
  bool ok = true;
  for (int i = 1; i < argc; i++) ok = replay_path(argv[i], &count) && ok;
  printf("replayed %d inputs\n", count);
  ir_arena_free_all();
  return ok && count > 0 ? 0 : 1;
}
