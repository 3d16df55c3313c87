/* Fuzzing the reader of sharded safetensors sets (rt_st_open_set in
 * runtime/safetensors.c), which --init-from uses for Hugging Face's
 * model.safetensors.index.json: the input is the index, beside two valid
 * parts made once (p1.safetensors holding "a" [2] and "b" [3],
 * p2.safetensors holding "c" [4]); the set is opened through its folder
 * and through the index's own name, and every tensor it lists is read.
 *
 * A bug is a crash, a sanitizer report, a hang, an error without a
 * message, or a set whose tensors do not read. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[160], index_path[224];
static int index_fd = -1;

/* A memory file reached as DIR/name. */
static int linked_file(const char *name) {
  int fd = memfd_create(name, 0);
  char target[64], link[256];
  if (fd < 0) perror("memfd_create"), abort();
  snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
  snprintf(link, sizeof link, "%s/%s", dir, name);
  if (symlink(target, link) != 0) perror("symlink"), abort();
  return fd;
}

/* A safetensors part of F32 tensors named names[i] with n[i] elements. */
static void write_part(const char *file, const char *const *names, const int *n, int k) {
  char header[512];
  int len = snprintf(header, sizeof header, "{"), off = 0;
  for (int i = 0; i < k; i++) {
    len += snprintf(header + len, sizeof header - (size_t)len,
                    "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%d,%d]}", i ? "," : "",
                    names[i], n[i], off, off + 4 * n[i]);
    off += 4 * n[i];
  }
  len += snprintf(header + len, sizeof header - (size_t)len, "}");
  int fd = linked_file(file);
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)len >> (8 * i));
  float *values = calloc((size_t)off / 4 + 1, sizeof *values);
  if (!values || write(fd, len8, 8) != 8 || write(fd, header, (size_t)len) != len ||
      write(fd, values, (size_t)off) != off)
    perror("writing a part"), abort();
  free(values);
}

/* The folder goes at exit (the memory files with the process). */
static void remove_dir(void) {
  static const char *const names[] = {"p1.safetensors", "p2.safetensors", "model.safetensors.index.json"};
  char link[256];
  for (int i = 0; i < 3; i++) {
    snprintf(link, sizeof link, "%s/%s", dir, names[i]);
    unlink(link);
  }
  rmdir(dir);
}

static void setup(void) {
  if (index_fd >= 0) return;
  fuzz_temp_dir(dir, sizeof dir, "st-index");
  atexit(remove_dir);
  static const char *const p1[] = {"a", "b"}, *const p2[] = {"c"};
  static const int n1[] = {2, 3}, n2[] = {4};
  write_part("p1.safetensors", p1, n1, 2);
  write_part("p2.safetensors", p2, n2, 1);
  index_fd = linked_file("model.safetensors.index.json");
  snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
}

static void open_and_read(const char *path) {
  RtStFile f;
  RtErr e;
  if (rt_st_open_set(&f, path, &e) != 0) {
    if (!*e.msg) abort(); /* an error always says why */
    return;
  }
  for (int i = 0; i < f.n; i++) {
    const RtStTensor *t = &f.t[i];
    real buf[8];
    if (t->numel > 8 || rt_st_find(&f, t->name) != t) abort();
    if (rt_st_read_checked(&f, t, buf, &e) != 0) {
      fprintf(stderr, "fuzz: a tensor of an accepted set does not read: %s\n", e.msg);
      abort();
    }
  }
  if (rt_st_verify(&f, &e) < 0 && !*e.msg) abort();
  rt_st_close(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setup();
  if (ftruncate(index_fd, 0) != 0 || (size && pwrite(index_fd, data, size, 0) != (ssize_t)size))
    perror("writing the fuzz input"), abort();
  open_and_read(dir);
  open_and_read(index_path);
  return 0;
}
