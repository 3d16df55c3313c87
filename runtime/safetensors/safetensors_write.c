/* Writing safetensors files atomically (see safetensors.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../abi/formats.h"
#include "safetensors.h"
#include "util.h"

#ifdef SHARD_REAL_F64
#define REAL_DTYPE "F64"
#else
#define REAL_DTYPE "F32"
#endif

/* RT_FAULT_AFTER_BYTES: -1 when unset, read at the first write. */
static int64_t fault_limit = -2, fault_written;

static void check_fault(size_t *n) {
  if (fault_limit == -2) {
    const char *env = getenv("RT_FAULT_AFTER_BYTES");
    fault_limit = env && *env ? strtoll(env, NULL, 10) : -1;
  }
  if (fault_limit >= 0 && fault_written + (int64_t)*n > fault_limit)
    *n = (size_t)(fault_limit - fault_written);
}

static void write_all(int fd, const void *buf, size_t n, const char *path) {
  size_t allowed = n;
  check_fault(&allowed);
  const unsigned char *p = buf;
  for (size_t left = allowed; left > 0;) {
    ssize_t got = write(fd, p, left);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      /* A failed write (a full disk) leaves no temporary behind. */
      int err = errno;
      unlink(path);
      rt_fatal(path, "write failed: %s", strerror(err));
    }
    p += got, left -= (size_t)got;
  }
  fault_written += (int64_t)allowed;
  if (allowed < n) {
    /* A crash, as a kill would leave things: no cleanup, no rename. */
    static const char msg[] = "shardc: fault injected: exiting in the middle of a checkpoint\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
  }
}

/* The JSON header, padded with spaces to a multiple of 8 bytes so that the
 * data that follows is aligned. */
static char *header_json(const RtStOut *t, int n, const char *const *meta, int nmeta, size_t *len) {
  cJSON *root = cJSON_CreateObject();
  if (nmeta > 0) {
    cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
    for (int i = 0; i < nmeta; i++)
      cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]);
  }
  int64_t offset = 0;
  for (int i = 0; i < n; i++) {
    cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
    cJSON_AddStringToObject(e, "dtype", REAL_DTYPE);
    cJSON *shape = cJSON_AddArrayToObject(e, "shape");
    for (int d = 0; d < t[i].rank; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
    int64_t bytes = t[i].numel * (int64_t)sizeof(real);
    cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(offset + bytes)));
    offset += bytes;
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) rt_fatal(NULL, "out of memory printing a safetensors header");
  size_t n0 = strlen(text), padded = (n0 + 7) / 8 * 8;
  char *out = rt_xmalloc(padded + 1);
  memcpy(out, text, n0);
  memset(out + n0, ' ', padded - n0);
  out[padded] = 0;
  free(text);
  *len = padded;
  return out;
}

/* A rename is durable only once the folder holding it is synced. */
static void sync_dir_of(const char *path) {
  char *copy = rt_xstrdup(path);
  const char *dir = dirname(copy);
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) rt_fatal(dir, "cannot open the folder to sync it: %s", strerror(errno));
  if (fsync(fd) != 0 && errno != EINVAL) rt_fatal(dir, "fsync failed: %s", strerror(errno));
  close(fd);
  free(copy);
}

char *rt_st_tmp_name(const char *path) {
  static unsigned serial;
  char host[64] = "";
  if (gethostname(host, sizeof host - 1) != 0 || !*host) snprintf(host, sizeof host, "host");
  size_t len = strlen(path) + strlen(host) + 64;
  char *tmp = rt_xmalloc(len);
  snprintf(tmp, len, "%s" RT_ST_TMP_MARK "%s.%ld.%u", path, host, (long)getpid(), serial++);
  return tmp;
}

void rt_st_write(const char *path, const RtStOut *t, int n, const char *const *meta, int nmeta) {
  /* The checksums join the caller's metadata. */
  const char **kv = rt_xcalloc((size_t)(2 * nmeta + 2), sizeof *kv);
  if (nmeta) memcpy(kv, meta, (size_t)(2 * nmeta) * sizeof *kv);
  char *sums = rt_st_checksums_text(t, n);
  kv[2 * nmeta] = CKPT_CHECKSUMS_KEY;
  kv[2 * nmeta + 1] = sums;
  size_t hlen;
  char *header = header_json(t, n, kv, nmeta + 1, &hlen);
  free(sums);
  free(kv);
  /* A name no other writer uses: two processes writing the same file
   * never write into one temporary (the lock of the --save folder keeps
   * them from the folder in the first place). */
  char *tmp = rt_st_tmp_name(path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) rt_fatal(tmp, "cannot create: %s", strerror(errno));
  unsigned char lenbuf[8];
  for (int i = 0; i < 8; i++)
    lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  write_all(fd, lenbuf, 8, tmp);
  write_all(fd, header, hlen, tmp);
  for (int i = 0; i < n; i++) {
    /* In pieces, so the fault hook can stop inside a large tensor. */
    const unsigned char *p = (const unsigned char *)t[i].data;
    size_t left = (size_t)t[i].numel * sizeof(real), chunk;
    for (; left > 0; p += chunk, left -= chunk) {
      chunk = left < (1u << 24) ? left : (1u << 24);
      write_all(fd, p, chunk, tmp);
    }
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int err = errno;
    unlink(tmp);
    rt_fatal(tmp, "writing failed at its end (fsync, close): %s", strerror(err));
  }
  if (rename(tmp, path) != 0)
    rt_fatal(path, "cannot rename %s into place: %s", tmp, strerror(errno));
  sync_dir_of(path);
  free(tmp);
  free(header);
}
