/* The readers of our own files take a path, not bytes: each input goes
 * into one memory file (memfd) that they open as /proc/self/fd/N, the
 * same system calls a file on disk gets, without touching the disk. */
#ifndef SHARD_FUZZ_INPUT_H
#define SHARD_FUZZ_INPUT_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static inline const char *fuzz_input_file(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("fuzz-input", 0);
    if (fd < 0) {
      perror("memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
    perror("writing the fuzz input");
    abort();
  }
  return path;
}

/* A fresh folder for a harness's fixed files, under $TMPDIR (a read-only
 * /tmp must not stop a campaign), named after the harness, into buf. */
static inline const char *fuzz_temp_dir(char *buf, size_t len, const char *harness) {
  const char *tmp = getenv("TMPDIR");
  snprintf(buf, len, "%s/fuzz-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", harness);
  if (!mkdtemp(buf)) {
    perror("mkdtemp");
    abort();
  }
  return buf;
}

#endif
