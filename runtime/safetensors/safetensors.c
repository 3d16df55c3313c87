/* safetensors reading (see safetensors.h; safetensors_write.c writes). The reader trusts
 * nothing in the file: a corrupt checkpoint must give a message, never a
 * crash or weights read from the wrong place. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../abi/formats.h"
#include "util.h"

/* A header longer than this is a corrupt length field, not JSON we want to
 * read (the reference implementation uses the same limit). */
#define MAX_HEADER (100 << 20)

#ifdef SHARD_REAL_F64
#define REAL_DTYPE "F64"
#else
#define REAL_DTYPE "F32"
#endif

static const struct {
  const char *name;
  int size;
} dtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
              {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
              {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}};

const char *rt_st_shape_str(char *buf, int len, int rank, const int64_t *shape) {
  int o = snprintf(buf, (size_t)len, "[");
  for (int i = 0; i < rank && o < len; i++)
    o += snprintf(buf + o, (size_t)(len - o), "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (o < len) snprintf(buf + o, (size_t)(len - o), "]");
  return buf;
}

static int pread_all(int fd, void *buf, size_t n, int64_t off, const char *path, RtErr *e) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t got = pread(fd, p, n, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return rt_err_set(e, path, "read failed: %s", strerror(errno));
    if (got == 0)
      return rt_err_set(e, path, "truncated: the file ended while reading tensor data");
    p += got, n -= (size_t)got, off += got;
  }
  return 0;
}

/* A JSON number that is a whole count in [0, 2^53]. */
static int get_count(const cJSON *j, int64_t *out) {
  if (!cJSON_IsNumber(j)) return 0;
  double v = j->valuedouble;
  if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return 0;
  *out = (int64_t)v;
  return 1;
}

static int parse_metadata(RtStFile *f, const cJSON *meta, RtErr *e) {
  if (!cJSON_IsObject(meta)) return rt_err_set(e, f->path, "__metadata__ is not a JSON object");
  if (f->meta_key) return rt_err_set(e, f->path, "__metadata__ appears twice");
  int n = cJSON_GetArraySize(meta);
  f->meta_key = rt_xcalloc((size_t)n, sizeof *f->meta_key);
  f->meta_val = rt_xcalloc((size_t)n, sizeof *f->meta_val);
  for (const cJSON *m = meta->child; m; m = m->next) {
    if (!cJSON_IsString(m))
      return rt_err_set(e, f->path, "__metadata__ value of '%s' is not a string", m->string);
    f->meta_key[f->nmeta] = rt_xstrdup(m->string);
    f->meta_val[f->nmeta++] = rt_xstrdup(m->valuestring);
  }
  return 0;
}

static int parse_shape(RtStFile *f, RtStTensor *t, const cJSON *shape, RtErr *e) {
  if (!cJSON_IsArray(shape))
    return rt_err_set(e, f->path, "tensor %s: \"shape\" is not an array", t->name);
  t->rank = cJSON_GetArraySize(shape);
  if (t->rank > RT_MAX_RANK)
    return rt_err_set(e, f->path, "tensor %s: rank %d, more than %d", t->name, t->rank,
                      RT_MAX_RANK);
  t->numel = 1;
  int i = 0;
  for (const cJSON *d = shape->child; d; d = d->next, i++) {
    if (!get_count(d, &t->shape[i]))
      return rt_err_set(e, f->path, "tensor %s: shape entry %d is not a non-negative integer",
                        t->name, i);
    if (t->shape[i] && t->numel > INT64_MAX / 16 / t->shape[i])
      return rt_err_set(e, f->path, "tensor %s: shape too large", t->name);
    t->numel *= t->shape[i];
  }
  return 0;
}

static int parse_dtype(RtStFile *f, RtStTensor *t, const cJSON *dtype, RtErr *e) {
  if (!cJSON_IsString(dtype))
    return rt_err_set(e, f->path, "tensor %s: \"dtype\" is not a string", t->name);
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (!strcmp(dtype->valuestring, dtypes[i].name)) {
      t->dtype = dtypes[i].name;
      t->dsize = dtypes[i].size;
      return 0;
    }
  return rt_err_set(e, f->path, "tensor %s: unknown dtype '%s'", t->name, dtype->valuestring);
}

static int parse_offsets(RtStFile *f, RtStTensor *t, const cJSON *off, RtErr *e) {
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !get_count(off->child, &t->begin) ||
      !get_count(off->child->next, &t->end))
    return rt_err_set(e, f->path,
                      "tensor %s: \"data_offsets\" is not a pair of non-negative integers",
                      t->name);
  if (t->begin > t->end || t->end > f->data_bytes)
    return rt_err_set(e, f->path,
                      "tensor %s: data_offsets [%lld, %lld] outside the %lld bytes of data",
                      t->name, (long long)t->begin, (long long)t->end, (long long)f->data_bytes);
  if (t->end - t->begin != t->numel * t->dsize) {
    char s[200];
    return rt_err_set(e, f->path,
                      "tensor %s: %lld bytes of data for shape %s of %s (%lld expected)", t->name,
                      (long long)(t->end - t->begin),
                      rt_st_shape_str(s, sizeof s, t->rank, t->shape), t->dtype,
                      (long long)(t->numel * t->dsize));
  }
  return 0;
}

static int parse_tensor(RtStFile *f, const cJSON *j, RtErr *e) {
  RtStTensor *t = &f->t[f->n++];
  t->name = rt_xstrdup(j->string);
  if (!cJSON_IsObject(j))
    return rt_err_set(e, f->path, "tensor %s: entry is not a JSON object", t->name);
  for (int i = 0; i < f->n - 1; i++)
    if (!strcmp(f->t[i].name, t->name))
      return rt_err_set(e, f->path, "tensor %s appears twice", t->name);
  if (parse_dtype(f, t, cJSON_GetObjectItemCaseSensitive(j, "dtype"), e) ||
      parse_shape(f, t, cJSON_GetObjectItemCaseSensitive(j, "shape"), e))
    return -1;
  return parse_offsets(f, t, cJSON_GetObjectItemCaseSensitive(j, "data_offsets"), e);
}

static int parse_entries(RtStFile *f, const cJSON *root, RtErr *e) {
  if (!cJSON_IsObject(root)) return rt_err_set(e, f->path, "the JSON header is not an object");
  f->t = rt_xcalloc((size_t)cJSON_GetArraySize(root), sizeof *f->t);
  for (const cJSON *j = root->child; j; j = j->next) {
    int bad = !strcmp(j->string, "__metadata__") ? parse_metadata(f, j, e) : parse_tensor(f, j, e);
    if (bad) return -1;
  }
  return 0;
}

static int parse_header(RtStFile *f, const char *text, size_t len, RtErr *e) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    size_t at = end ? (size_t)(end - text) : 0;
    return rt_err_set(e, f->path, "bad JSON header: error at byte %zu of its %zu",
                      at < len ? at : len, len);
  }
  int rc = 0;
  for (const char *p = end; p < text + len && !rc; p++)
    if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r' && *p != 0)
      rc = rt_err_set(e, f->path, "bad JSON header: text after the JSON object at byte %zu",
                      8 + (size_t)(p - text));
  if (!rc) rc = parse_entries(f, root, e);
  cJSON_Delete(root);
  return rc;
}

/* The header length and the header's text; the caller frees *text. */
static int read_header(RtStFile *f, char **text, uint64_t *len, RtErr *e) {
  const char *path = f->path;
  f->fd = open(path, O_RDONLY);
  if (f->fd < 0) return rt_err_set(e, path, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode))
    return rt_err_set(e, path, "not a regular file");
  if (st.st_size < 8)
    return rt_err_set(e, path, "truncated: %lld bytes, too short for a safetensors header",
                      (long long)st.st_size);
  unsigned char lenbuf[8];
  if (pread_all(f->fd, lenbuf, 8, 0, path, e)) return -1;
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = n << 8 | lenbuf[i];
  if (n > MAX_HEADER || n > (uint64_t)st.st_size - 8)
    return rt_err_set(e, path, "truncated or not safetensors: header length %llu, file size %lld",
                      (unsigned long long)n, (long long)st.st_size);
  f->data_start = 8 + (int64_t)n;
  f->data_bytes = (int64_t)st.st_size - f->data_start;
  *text = rt_xmalloc(n + 1);
  (*text)[n] = 0;
  *len = n;
  return pread_all(f->fd, *text, n, 8, path, e);
}

int rt_st_open_checked(RtStFile *f, const char *path, RtErr *e) {
  memset(f, 0, sizeof *f);
  f->path = rt_xstrdup(path);
  f->fd = -1;
  char *text = NULL;
  uint64_t n = 0;
  int rc = read_header(f, &text, &n, e);
  if (!rc) rc = parse_header(f, text, n, e);
  free(text);
  if (rc) rt_st_close(f);
  return rc;
}

void rt_st_open(RtStFile *f, const char *path) {
  RtErr e;
  if (rt_st_open_checked(f, path, &e)) rt_err_fatal(&e);
}

void rt_st_close(RtStFile *f) {
  if (!f->path) return;
  if (f->fd >= 0) close(f->fd);
  for (int i = 0; i < f->nparts; i++)
    rt_st_close(&f->parts[i]);
  free(f->parts);
  for (int i = 0; i < f->n; i++) {
    for (int k = 0; k < f->t[i].nstack; k++)
      free(f->t[i].stack[k].name);
    free(f->t[i].stack);
    free(f->t[i].name);
  }
  for (int i = 0; i < f->nmeta; i++)
    free(f->meta_key[i]), free(f->meta_val[i]);
  free(f->t);
  free(f->meta_key);
  free(f->meta_val);
  free(f->path);
  memset(f, 0, sizeof *f);
}

const RtStTensor *rt_st_find(const RtStFile *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}

void rt_st_stack(RtStFile *f, const char *name, const RtStTensor *const *pieces, int n) {
  RtStTensor s = {.name = rt_xstrdup(name), .dtype = pieces[0]->dtype, .dsize = pieces[0]->dsize,
                  .rank = pieces[0]->rank + 1, .nstack = n};
  if (s.rank > RT_MAX_RANK)
    rt_fatal(f->path, "stacked tensor %s: rank %d, more than %d", name, s.rank, RT_MAX_RANK);
  s.shape[0] = n;
  memcpy(s.shape + 1, pieces[0]->shape, sizeof(int64_t) * (size_t)pieces[0]->rank);
  s.numel = n * pieces[0]->numel;
  s.stack = rt_xcalloc((size_t)n, sizeof *s.stack);
  for (int k = 0; k < n; k++) {
    s.stack[k] = *pieces[k];
    s.stack[k].name = rt_xstrdup(pieces[k]->name);
  }
  /* pieces point into f->t, which moves now. */
  RtStTensor *grown = rt_xcalloc((size_t)f->n + 1, sizeof *grown);
  memcpy(grown, f->t, sizeof *grown * (size_t)f->n);
  free(f->t);
  f->t = grown;
  f->t[f->n++] = s;
}

const char *rt_st_meta(const RtStFile *f, const char *key) {
  for (int i = 0; i < f->nmeta; i++)
    if (!strcmp(f->meta_key[i], key)) return f->meta_val[i];
  return NULL;
}

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return h & 0x8000 ? -v : v;
}

static double element(const unsigned char *p, const char *dtype) {
  if (!strcmp(dtype, "F32")) {
    float v;
    memcpy(&v, p, 4);
    return v;
  }
  if (!strcmp(dtype, "F64")) {
    double v;
    memcpy(&v, p, 8);
    return v;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  if (!strcmp(dtype, "F16")) return half_to_double(h);
  uint32_t bits = (uint32_t)h << 16; /* BF16 is the top half of an F32 */
  float v;
  memcpy(&v, &bits, 4);
  return v;
}

int rt_st_read_checked(const RtStFile *set, const RtStTensor *t, real *dst, RtErr *e) {
  for (int k = 0; k < t->nstack; k++)
    if (rt_st_read_checked(set, &t->stack[k], dst + k * t->stack[k].numel, e)) return -1;
  if (t->nstack) return 0;
  const RtStFile *f = t->part > 0 ? &set->parts[t->part - 1] : set;
  int64_t at = f->data_start + t->begin;
  if (!strcmp(t->dtype, REAL_DTYPE)) /* no conversion: straight into place */
    return pread_all(f->fd, dst, (size_t)(t->end - t->begin), at, f->path, e);
  if (strcmp(t->dtype, "F32") && strcmp(t->dtype, "F64") && strcmp(t->dtype, "F16") &&
      strcmp(t->dtype, "BF16"))
    return rt_err_set(e, f->path,
                      "tensor %s: dtype %s cannot be loaded as weights (F32, F64, F16, BF16)",
                      t->name, t->dtype);
  enum { CHUNK = 1 << 16 };
  unsigned char *buf = rt_xmalloc((size_t)CHUNK * (size_t)t->dsize);
  int rc = 0;
  for (int64_t i = 0; i < t->numel && !rc; i += CHUNK) {
    int64_t n = t->numel - i < CHUNK ? t->numel - i : CHUNK;
    rc = pread_all(f->fd, buf, (size_t)(n * t->dsize), at + i * t->dsize, f->path, e);
    for (int64_t j = 0; j < n && !rc; j++)
      dst[i + j] = (real)element(buf + j * t->dsize, t->dtype);
  }
  free(buf);
  return rc;
}

void rt_st_read(const RtStFile *f, const RtStTensor *t, real *dst) {
  RtErr e;
  if (rt_st_read_checked(f, t, dst, &e)) rt_err_fatal(&e);
}

int rt_st_verify(const RtStFile *f, RtErr *e) {
  if (f->nparts) { /* a sharded set: each file against its own manifest */
    int any = 0;
    for (int i = 0; i < f->nparts; i++) {
      int rc = rt_st_verify(&f->parts[i], e);
      if (rc < 0) return -1;
      any |= rc;
    }
    return any;
  }
  const char *text = rt_st_meta(f, CKPT_CHECKSUMS_KEY);
  if (!text) return 0;
  RtStSum *sums;
  int n;
  if (rt_st_checksums_parse(text, f->path, &sums, &n, e)) return -1;
  enum { CHUNK = 1 << 22 };
  unsigned char *buf = rt_xmalloc(CHUNK);
  int rc = 0;
  for (int i = 0; i < f->n && !rc; i++) {
    const RtStTensor *t = &f->t[i];
    const RtStSum *s = rt_st_sums_find(sums, n, t->name);
    if (!s) {
      rc = rt_err_set(e, f->path, "tensor %s has no checksum in the metadata (%s): the header "
                      "was changed after the file was written", t->name, CKPT_CHECKSUMS_KEY);
      break;
    }
    RtXxh64 h;
    rt_xxh64_init(&h);
    for (int64_t at = t->begin; at < t->end && !rc; at += CHUNK) {
      size_t len = (size_t)(t->end - at < CHUNK ? t->end - at : CHUNK);
      rc = pread_all(f->fd, buf, len, f->data_start + at, f->path, e);
      rt_xxh64_update(&h, buf, len);
    }
    uint64_t got = rt_xxh64_digest(&h);
    if (!rc && got != s->hash)
      rc = rt_err_set(e, f->path, "tensor %s does not match its checksum (%016llx in the "
                      "metadata, %016llx read): the file is corrupt (--no-verify loads it "
                      "anyway)", t->name, (unsigned long long)s->hash, (unsigned long long)got);
  }
  if (!rc && n != f->n)
    for (int i = 0; i < n && !rc; i++)
      if (!rt_st_find(f, sums[i].name))
        rc = rt_err_set(e, f->path, "the checksums list tensor %s, which the file does not hold",
                        sums[i].name);
  free(buf);
  rt_st_sums_free(sums, n);
  return rc ? -1 : 1;
}

/* ------------------------------------------------------------ sharded sets */

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* The part of f named `file`, or f->nparts. */
static int part_named(const RtStFile *f, const char *file) {
  int k = 0;
  while (k < f->nparts && strcmp(base_name(f->parts[k].path), file)) k++;
  return k;
}

static char *path_join(const char *dir, size_t dirlen, const char *name) {
  size_t n = dirlen + strlen(name) + 2;
  char *p = rt_xmalloc(n);
  snprintf(p, n, "%.*s%s%s", (int)dirlen, dir, dirlen ? "/" : "", name);
  return p;
}

/* The index's text as JSON, or NULL with the error in *e. */
static cJSON *read_index(const char *path, RtErr *e) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return rt_err_set(e, path, "cannot open: %s", strerror(errno)), NULL;
  size_t cap = 1 << 16, n = 0, got;
  char *text = rt_xmalloc(cap);
  while ((got = fread(text + n, 1, cap - n, fp)) > 0)
    if ((n += got) == cap && !(text = realloc(text, cap *= 2))) rt_fatal(path, "out of memory");
  int bad = ferror(fp);
  fclose(fp);
  cJSON *j = NULL;
  if (bad) {
    rt_err_set(e, path, "read error");
  } else if (n > MAX_HEADER) {
    rt_err_set(e, path, "%zu bytes: too large for an index", n);
  } else {
    const char *end = NULL;
    j = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!j) rt_err_set(e, path, "not valid JSON (error at byte %zu)", end ? (size_t)(end - text) : 0);
  }
  free(text);
  return j;
}

/* Opens the files of the index's weight_map into f->parts and lists their
 * tensors in f->t. */
static int open_index(RtStFile *f, const char *path, RtErr *e) {
  cJSON *root = read_index(path, e);
  if (!root) return -1;
  cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  int rc = 0;
  if (!cJSON_IsObject(map) || !map->child)
    rc = rt_err_set(e, path, "no \"weight_map\" object naming each tensor's file: not a "
                    "safetensors index");
  const char *slash = strrchr(path, '/');
  size_t dirlen = slash ? (size_t)(slash - path) : 0;
  int nmap = rc ? 0 : cJSON_GetArraySize(map);
  /* The files, in the order the map first names them. */
  f->parts = rt_xcalloc((size_t)nmap + 1, sizeof *f->parts);
  for (cJSON *m = rc ? NULL : map->child; m && !rc; m = m->next) {
    if (!cJSON_IsString(m) || !*m->valuestring || strchr(m->valuestring, '/'))
      rc = rt_err_set(e, path, "weight_map: the file of tensor %s is not a file name beside the "
                      "index", m->string);
    if (!rc && part_named(f, m->valuestring) == f->nparts) {
      int k = f->nparts;
      char *file = path_join(path, dirlen, m->valuestring);
      if (rt_st_open_checked(&f->parts[k], file, e)) rc = -1;
      else f->nparts++;
      free(file);
    }
  }
  /* Every tensor the map names, from the file it names. */
  int total = 0;
  for (int k = 0; k < f->nparts; k++) total += f->parts[k].n;
  f->t = rt_xcalloc((size_t)total + 1, sizeof *f->t);
  for (cJSON *m = rc ? NULL : map->child; m && !rc; m = m->next) {
    const char *want = m->valuestring;
    int k = part_named(f, want);
    const RtStTensor *t = rt_st_find(&f->parts[k], m->string);
    if (!t) {
      rc = rt_err_set(e, path, "weight_map places tensor %s in %s, which does not hold it",
                      m->string, want);
      break;
    }
    if (rt_st_find(f, m->string)) {
      rc = rt_err_set(e, path, "weight_map names tensor %s twice", m->string);
      break;
    }
    f->t[f->n] = *t;
    f->t[f->n].name = rt_xstrdup(t->name);
    f->t[f->n++].part = k + 1;
  }
  /* A tensor in a file of the set that the map leaves out would be lost
   * without a word: refused. */
  for (int k = 0; k < f->nparts && !rc; k++)
    for (int i = 0; i < f->parts[k].n && !rc; i++)
      if (!rt_st_find(f, f->parts[k].t[i].name))
        rc = rt_err_set(e, path, "%s holds tensor %s, which the weight_map does not list",
                        f->parts[k].path, f->parts[k].t[i].name);
  /* The first part's metadata stands for the set's. */
  if (!rc && f->nparts && f->parts[0].nmeta) {
    const RtStFile *p0 = &f->parts[0];
    f->meta_key = rt_xcalloc((size_t)p0->nmeta, sizeof *f->meta_key);
    f->meta_val = rt_xcalloc((size_t)p0->nmeta, sizeof *f->meta_val);
    for (int i = 0; i < p0->nmeta; i++, f->nmeta++) {
      f->meta_key[i] = rt_xstrdup(p0->meta_key[i]);
      f->meta_val[i] = rt_xstrdup(p0->meta_val[i]);
    }
  }
  cJSON_Delete(root);
  return rc;
}

int rt_st_open_set(RtStFile *f, const char *path, RtErr *e) {
  if (is_dir(path)) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    char *index = path_join(path, n, "model.safetensors.index.json");
    struct stat st;
    int rc;
    if (stat(index, &st) == 0) {
      rc = rt_st_open_set(f, index, e);
    } else {
      char *one = path_join(path, n, "model.safetensors");
      rc = rt_st_open_checked(f, one, e);
      free(one);
    }
    free(index);
    return rc;
  }
  if (!ends_with(path, ".index.json")) return rt_st_open_checked(f, path, e);
  memset(f, 0, sizeof *f);
  f->path = rt_xstrdup(path);
  f->fd = -1;
  int rc = open_index(f, path, e);
  if (rc) rt_st_close(f);
  return rc;
}
