/* The llm.c token-shard reader and writer (see data.h). Windows are read
 * with pread into one staging buffer allocated at open, so a step never
 * allocates, and memory use does not grow with the size of the data set. */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../abi/formats.h"
#include "rng.h"
#include "util.h"


typedef struct Shard {
  char *path;
  int64_t tokens;
  int64_t first_window; /* index of its first window in the epoch order */
  struct stat id;       /* the file as it was checked: device, inode, size, mtime */
} Shard;

struct RtData {
  Shard *shards;
  int nshards;
  int64_t stride; /* batch * seq: the distance between window starts */
  int64_t tokens, windows;
  uint16_t *stage;    /* stride + 1 tokens as they lie in the file */
  int64_t *perm;      /* the shuffled order of the current epoch */
  int64_t perm_epoch; /* -1: no permutation built yet */
  uint64_t perm_seed;
  int64_t vocab; /* every token read is checked against it */
};

static int has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The sorted file list of a pattern; a folder stands for its *.bin files
 * (what `shardc data --shard-tokens` writes); a plain name is taken as it
 * is, so a missing file gets the system's message rather than "no
 * match". */
char **rt_data_expand(const char *pattern, int *n, RtErr *e) {
  if (is_dir(pattern)) {
    size_t len = strlen(pattern);
    while (len > 1 && pattern[len - 1] == '/') len--;
    char *all = rt_xmalloc(len + 8);
    snprintf(all, len + 8, "%.*s/*.bin", (int)len, pattern);
    char **list = NULL;
    if (has_glob_chars(pattern))
      rt_err_set(e, pattern, "a folder whose name holds *, ? or [ cannot be read as a data set");
    else if (!(list = rt_data_expand(all, n, e)))
      rt_err_set(e, pattern, "a folder without token shards (*.bin) in it");
    free(all);
    return list;
  }
  if (!has_glob_chars(pattern)) {
    char **one = rt_xmalloc(sizeof *one);
    one[0] = rt_xstrdup(pattern);
    *n = 1;
    return one;
  }
  glob_t g;
  int rc = glob(pattern, 0, NULL, &g);
  if (rc != 0) {
    rt_err_set(e, pattern, rc == GLOB_NOMATCH ? "no file matches this pattern"
                                              : "cannot expand the pattern");
    return NULL;
  }
  char **list = rt_xmalloc(g.gl_pathc * sizeof *list);
  for (size_t i = 0; i < g.gl_pathc; i++)
    list[i] = rt_xstrdup(g.gl_pathv[i]);
  *n = (int)g.gl_pathc;
  globfree(&g);
  return list;
}

static int read_exact(int fd, void *buf, size_t n, int64_t off, const char *path, RtErr *e) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t got = pread(fd, p, n, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return rt_err_set(e, path, "read failed: %s", strerror(errno));
    if (got == 0) return rt_err_set(e, path, "truncated: the file ended while reading it");
    p += got, n -= (size_t)got, off += got;
  }
  return 0;
}

/* Checks the header against the file size; returns the token count, or
 * -1 with the error in *e. */
static int64_t check_header(int fd, const char *path, RtErr *e) {
  struct stat st;
  if (fstat(fd, &st) != 0) return rt_err_set(e, path, "cannot stat: %s", strerror(errno));
  if (!S_ISREG(st.st_mode)) return rt_err_set(e, path, "not a regular file");
  if (st.st_size < SHARD_HEADER_BYTES)
    return rt_err_set(e, path, "truncated: %lld bytes, shorter than the %d-byte shard header",
                      (long long)st.st_size, SHARD_HEADER_BYTES);
  int32_t h[SHARD_HEADER_INTS];
  if (read_exact(fd, h, sizeof h, 0, path, e)) return -1;
  if (h[0] != SHARD_MAGIC)
    return rt_err_set(e, path, "not a token shard: magic %" PRId32 ", expected %d", h[0],
                      SHARD_MAGIC);
  if (h[1] != SHARD_VERSION)
    return rt_err_set(e, path, "unsupported shard version %" PRId32 ", expected %d", h[1],
                      SHARD_VERSION);
  if (h[2] < 0) return rt_err_set(e, path, "bad token count %" PRId32 " in the header", h[2]);
  int64_t body = (int64_t)st.st_size - SHARD_HEADER_BYTES, want = 2 * (int64_t)h[2];
  if (body < want)
    return rt_err_set(e, path,
                      "truncated: the header says %" PRId32
                      " tokens (%lld bytes), the file holds %lld",
                      h[2], (long long)want, (long long)body);
  if (body > want)
    return rt_err_set(e, path,
                      "%lld bytes follow the header, but it says %" PRId32 " tokens (%lld bytes)",
                      (long long)body, h[2], (long long)want);
  return h[2];
}

/* Every token id must be below vocab: the embedding kernels trust it. */
static int check_ids(int fd, const char *path, int64_t ntok, int64_t vocab, RtErr *e) {
  if (vocab >= 65536) return 0;
  enum { CHUNK = 1 << 20 };
  uint16_t *buf = rt_xmalloc(CHUNK * sizeof *buf);
  int rc = 0;
  for (int64_t at = 0; at < ntok && !rc; at += CHUNK) {
    int64_t n = ntok - at < CHUNK ? ntok - at : CHUNK;
    rc = read_exact(fd, buf, (size_t)n * 2, SHARD_HEADER_BYTES + 2 * at, path, e);
    for (int64_t i = 0; i < n && !rc; i++)
      if (buf[i] >= vocab)
        rc = rt_err_set(e, path, "token %lld has id %u, outside the vocabulary of %lld",
                        (long long)(at + i), buf[i], (long long)vocab);
  }
  free(buf);
  return rc;
}

/* Opens a shard without blocking: a FIFO (or a device) named as data
 * opens at once and is refused as not a regular file, instead of waiting
 * forever for a writer. */
static int open_data_file(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

static int open_shard(Shard *s, int64_t batch, int64_t seq, int64_t vocab, RtErr *e) {
  int fd = open_data_file(s->path);
  if (fd < 0) return rt_err_set(e, s->path, "cannot open: %s", strerror(errno));
  if (fstat(fd, &s->id) != 0) memset(&s->id, 0, sizeof s->id);
  int64_t window = batch * seq + 1;
  int rc = (s->tokens = check_header(fd, s->path, e)) < 0 ? -1 : 0;
  if (!rc && s->tokens < window)
    rc = rt_err_set(e, s->path,
                    "%lld tokens, fewer than one window of batch*seq+1 = %lld*%lld+1 = %lld",
                    (long long)s->tokens, (long long)batch, (long long)seq, (long long)window);
  if (!rc) rc = check_ids(fd, s->path, s->tokens, vocab, e);
  close(fd);
  return rc;
}

RtData *rt_data_open_checked(const char *pattern, int64_t batch, int64_t seq, int64_t vocab,
                             RtErr *e) {
  RtData *d = rt_xcalloc(1, sizeof *d);
  char **paths = rt_data_expand(pattern, &d->nshards, e);
  if (!paths) {
    free(d);
    return NULL;
  }
  d->shards = rt_xcalloc((size_t)d->nshards, sizeof *d->shards);
  d->stride = batch * seq;
  d->vocab = vocab;
  int rc = 0;
  for (int i = 0; i < d->nshards; i++) {
    Shard *s = &d->shards[i];
    s->path = paths[i];
    if (rc || (rc = open_shard(s, batch, seq, vocab, e))) continue;
    s->first_window = d->windows;
    d->windows += (s->tokens - 1) / d->stride;
    d->tokens += s->tokens;
  }
  free(paths);
  if (rc) {
    rt_data_close(d);
    return NULL;
  }
  d->stage = rt_xmalloc((size_t)(d->stride + 1) * sizeof *d->stage);
  d->perm = rt_xmalloc((size_t)d->windows * sizeof *d->perm);
  d->perm_epoch = -1;
  return d;
}

RtData *rt_data_open(const char *pattern, int64_t batch, int64_t seq, int64_t vocab) {
  RtErr e;
  RtData *d = rt_data_open_checked(pattern, batch, seq, vocab, &e);
  if (!d) rt_err_fatal(&e);
  return d;
}

void rt_data_close(RtData *d) {
  if (!d) return;
  for (int i = 0; i < d->nshards; i++)
    free(d->shards[i].path);
  free(d->shards);
  free(d->stage);
  free(d->perm);
  free(d);
}

int rt_data_shards(const RtData *d) { return d->nshards; }
int64_t rt_data_tokens(const RtData *d) { return d->tokens; }
int64_t rt_data_windows(const RtData *d) { return d->windows; }

/* A Fisher-Yates shuffle seeded by (seed, epoch) alone, so that resuming
 * at any step rebuilds the same order without storing it. */
static void build_perm(RtData *d, int64_t epoch, uint64_t seed) {
  RtRng r;
  rt_rng_seed(&r, rt_key3(seed, (uint64_t)epoch, 0x64617461 /* "data" */));
  for (int64_t i = 0; i < d->windows; i++)
    d->perm[i] = i;
  for (int64_t i = d->windows - 1; i > 0; i--) {
    int64_t j = (int64_t)rt_rng_below(&r, (uint64_t)i + 1), t = d->perm[i];
    d->perm[i] = d->perm[j];
    d->perm[j] = t;
  }
  d->perm_epoch = epoch;
  d->perm_seed = seed;
}

int64_t rt_data_window_at(RtData *d, int64_t step, int shuffle, uint64_t seed) {
  int64_t epoch = step / d->windows, pos = step % d->windows;
  if (!shuffle) return pos;
  if (d->perm_epoch != epoch || d->perm_seed != seed) build_perm(d, epoch, seed);
  return d->perm[pos];
}

static const Shard *find_shard(const RtData *d, int64_t w) {
  int lo = 0, hi = d->nshards - 1;
  while (lo < hi) { /* the last shard whose first window is <= w */
    int mid = (lo + hi + 1) / 2;
    if (d->shards[mid].first_window <= w)
      lo = mid;
    else
      hi = mid - 1;
  }
  return &d->shards[lo];
}

const char *rt_data_window_file(const RtData *d, int64_t w, int64_t *first_token) {
  const Shard *s = find_shard(d, w);
  if (first_token) *first_token = (w - s->first_window) * d->stride;
  return s->path;
}

int rt_data_read_checked(RtData *d, int64_t w, int32_t *out, RtErr *e) {
  const Shard *s = find_shard(d, w);
  int64_t start = (w - s->first_window) * d->stride, n = d->stride + 1;
  int fd = open_data_file(s->path);
  if (fd < 0) return rt_err_set(e, s->path, "cannot open: %s", strerror(errno));
  /* The file must still be the one checked at the start: one replaced or
   * rewritten since (another vocabulary, another length) would feed the
   * model tokens nobody checked. */
  struct stat now;
  if (fstat(fd, &now) != 0) {
    close(fd);
    return rt_err_set(e, s->path, "cannot stat: %s", strerror(errno));
  }
  if (now.st_dev != s->id.st_dev || now.st_ino != s->id.st_ino || now.st_size != s->id.st_size ||
      now.st_mtim.tv_sec != s->id.st_mtim.tv_sec || now.st_mtim.tv_nsec != s->id.st_mtim.tv_nsec) {
    close(fd);
    return rt_err_set(e, s->path, "the file changed while the run reads it (%s): the windows of "
                      "the file checked at the start are gone; resume from the last checkpoint "
                      "with the data as it is now, or restore the file",
                      now.st_ino != s->id.st_ino || now.st_dev != s->id.st_dev
                          ? "another file now has its name"
                          : now.st_size != s->id.st_size ? "its size changed" : "it was rewritten");
  }
  int rc = read_exact(fd, d->stage, (size_t)n * 2, SHARD_HEADER_BYTES + 2 * start, s->path, e);
  close(fd);
  if (rc) return -1;
  for (int64_t i = 0; i < n; i++) {
    if (d->stage[i] >= d->vocab)
      return rt_err_set(e, s->path, "token %lld has id %u, outside the vocabulary of %lld (the "
                        "file changed while the run reads it?)", (long long)(start + i),
                        d->stage[i], (long long)d->vocab);
    out[i] = d->stage[i];
  }
  return 0;
}

void rt_data_read(RtData *d, int64_t w, int32_t *out) {
  RtErr e;
  if (rt_data_read_checked(d, w, out, &e)) rt_err_fatal(&e);
}

int rt_data_write_shard(const char *path, const uint16_t *tokens, int64_t n) {
  if (n < 0 || n > INT32_MAX) {
    rt_error(path, "%lld tokens do not fit in one shard (at most %d)", (long long)n, INT32_MAX);
    return -1;
  }
  int32_t h[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)n};
  FILE *f = fopen(path, "wb");
  if (!f) {
    rt_error(path, "cannot create: %s", strerror(errno));
    return -1;
  }
  int ok =
      fwrite(h, sizeof h, 1, f) == 1 && (n == 0 || fwrite(tokens, 2, (size_t)n, f) == (size_t)n);
  ok = (fclose(f) == 0) && ok;
  if (!ok) {
    rt_error(path, "write failed: %s", strerror(errno));
    return -1;
  }
  return 0;
}
