/* Checksums of checkpoint tensors (see safetensors.h): XXH64, and the
 * manifest that lists one per tensor in a file's metadata.
 *
 * XXH64 follows the reference description of the algorithm (Yann Collet's
 * xxHash, seed 0): four accumulators over 32-byte stripes, then the tail
 * and an avalanche. It runs at memory speed, so verifying a checkpoint
 * costs about as much as reading it once more. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../abi/formats.h"
#include "safetensors.h"

#define P1 11400714785074694791ULL
#define P2 14029467366897019727ULL
#define P3 1609587929392839161ULL
#define P4 9650029242287828579ULL
#define P5 2870177450012600261ULL

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Little-endian loads whatever the alignment. */
static uint64_t load64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint32_t load32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t round64(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }

static uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round64(0, v)) * P1 + P4; }

void rt_xxh64_init(RtXxh64 *s) {
  memset(s, 0, sizeof *s);
  s->v[0] = P1 + P2;
  s->v[1] = P2;
  s->v[2] = 0;
  s->v[3] = 0 - P1;
}

static void stripe(RtXxh64 *s, const unsigned char *p) {
  for (int i = 0; i < 4; i++) s->v[i] = round64(s->v[i], load64(p + 8 * i));
}

void rt_xxh64_update(RtXxh64 *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->total += n;
  if (s->fill) {
    size_t take = 32 - s->fill < n ? 32 - s->fill : n;
    memcpy(s->buf + s->fill, p, take);
    s->fill += (unsigned)take, p += take, n -= take;
    if (s->fill < 32) return;
    stripe(s, s->buf);
    s->fill = 0;
  }
  for (; n >= 32; p += 32, n -= 32) stripe(s, p);
  memcpy(s->buf, p, n);
  s->fill = (unsigned)n;
}

uint64_t rt_xxh64_digest(const RtXxh64 *s) {
  uint64_t h;
  if (s->total >= 32) {
    h = rotl(s->v[0], 1) + rotl(s->v[1], 7) + rotl(s->v[2], 12) + rotl(s->v[3], 18);
    for (int i = 0; i < 4; i++) h = merge(h, s->v[i]);
  } else {
    h = P5; /* the seed, 0, plus P5 */
  }
  h += s->total;
  const unsigned char *p = s->buf;
  size_t n = s->fill;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round64(0, load64(p)), 27) * P1 + P4;
  if (n >= 4) {
    h = rotl(h ^ (uint64_t)load32(p) * P1, 23) * P2 + P3;
    p += 4, n -= 4;
  }
  for (; n > 0; p++, n--) h = rotl(h ^ (uint64_t)*p * P5, 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  return h ^ (h >> 32);
}

uint64_t rt_xxh64(const void *data, size_t n) {
  RtXxh64 s;
  rt_xxh64_init(&s);
  rt_xxh64_update(&s, data, n);
  return rt_xxh64_digest(&s);
}

char *rt_st_checksums_text(const RtStOut *t, int n) {
  size_t len = 1;
  for (int i = 0; i < n; i++) len += 18 + strlen(t[i].name);
  char *text = rt_xmalloc(len), *o = text;
  *o = 0;
  for (int i = 0; i < n; i++) {
    uint64_t h = rt_xxh64(t[i].data, (size_t)t[i].numel * sizeof(real));
    o += snprintf(o, len - (size_t)(o - text), "%016llx %s\n", (unsigned long long)h, t[i].name);
  }
  return text;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const RtStSum *)a)->name, ((const RtStSum *)b)->name);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void rt_st_sums_free(RtStSum *s, int n) {
  for (int i = 0; i < n; i++) free(s[i].name);
  free(s);
}

/* Lines "HEX16 NAME\n": exactly 16 lowercase hex digits, one space, a
 * name of printable characters; no duplicate names. The entries come back
 * sorted by name (for rt_st_sums_find). */
int rt_st_checksums_parse(const char *text, const char *path, RtStSum **out, int *nout, RtErr *e) {
  *out = NULL;
  *nout = 0;
  int cap = 0, n = 0, line = 0;
  RtStSum *s = NULL;
  for (const char *p = text; *p;) {
    line++;
    const char *end = strchr(p, '\n');
    if (!end) {
      rt_st_sums_free(s, n);
      return rt_err_set(e, path, "metadata %s: line %d does not end with a line break",
                        CKPT_CHECKSUMS_KEY, line);
    }
    uint64_t h = 0;
    int ok = end - p > 17 && p[16] == ' ';
    for (int i = 0; ok && i < 16; i++) {
      int d = hex_digit(p[i]);
      ok = d >= 0;
      h = h << 4 | (uint64_t)(d < 0 ? 0 : d);
    }
    for (const char *c = p + 17; ok && c < end; c++) ok = *c > ' ' && *c < 127;
    if (!ok) {
      rt_st_sums_free(s, n);
      return rt_err_set(e, path, "metadata %s: line %d is not \"HEX16 NAME\"",
                        CKPT_CHECKSUMS_KEY, line);
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      RtStSum *g = rt_xcalloc((size_t)cap, sizeof *g);
      if (n) memcpy(g, s, (size_t)n * sizeof *g);
      free(s);
      s = g;
    }
    size_t len = (size_t)(end - p - 17);
    s[n].name = rt_xmalloc(len + 1);
    memcpy(s[n].name, p + 17, len);
    s[n].name[len] = 0;
    s[n].hash = h;
    n++;
    p = end + 1;
  }
  if (n > 1) qsort(s, (size_t)n, sizeof *s, by_name);
  for (int i = 1; i < n; i++)
    if (!strcmp(s[i].name, s[i - 1].name)) {
      rt_err_set(e, path, "metadata %s: tensor %s is listed twice", CKPT_CHECKSUMS_KEY,
                 s[i].name);
      rt_st_sums_free(s, n);
      return -1;
    }
  *out = s;
  *nout = n;
  return 0;
}

const RtStSum *rt_st_sums_find(const RtStSum *s, int n, const char *name) {
  RtStSum key = {(char *)name, 0};
  return n > 0 ? bsearch(&key, s, (size_t)n, sizeof *s, by_name) : NULL;
}
