/* The state file's own fields (see checkpoint.h): apart from the model
 * and the tensors, what --resume takes from CKPT_STATE_FILE. Everything
 * is checked and returned as an error, never trusted: the file may be
 * torn, edited or of another program. The comparison of -D values, text
 * from the file, is here too. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../abi/formats.h"
#include "checkpoint.h"

static int meta_count(const RtStFile *f, const char *key, int64_t *out, RtErr *e) {
  const char *v = rt_st_meta(f, key);
  char *end;
  if (!v) return rt_err_set(e, f->path, "no '%s' in the metadata", key);
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno || x < 0)
    return rt_err_set(e, f->path, "bad '%s' in the metadata: '%s'", key, v);
  *out = x;
  return 0;
}

/* Four 64-bit words as 64 hexadecimal digits. */
static int meta_rng(const RtStFile *f, uint64_t rng[4], RtErr *e) {
  const char *v = rt_st_meta(f, "rng");
  if (!v || strlen(v) != 64) return rt_err_set(e, f->path, "no valid 'rng' in the metadata");
  for (int i = 0; i < 4; i++) {
    char word[17], *end;
    memcpy(word, v + 16 * i, 16);
    word[16] = 0;
    rng[i] = strtoull(word, &end, 16);
    if (*end || word[0] == '-' || word[0] == '+' || word[0] == ' ')
      return rt_err_set(e, f->path, "bad 'rng' in the metadata: '%s'", v);
  }
  return 0;
}

int rt_ckpt_state_fields(const RtStFile *f, RtCkptState *out, RtErr *e) {
  const char *format = rt_st_meta(f, "format");
  if (!format || strcmp(format, CKPT_STATE_FORMAT))
    return rt_err_set(e, f->path, "not a training state written by --save (format '%s')",
                      format ? format : "");
  if (meta_count(f, "step", &out->step, e)) return -1;
  return meta_rng(f, out->rng, e);
}

/* ------------------------------------------- the -D values of a file */

void rt_ckpt_diff_add(char *out, size_t len, int *lines, const char *fmt, ...) {
  size_t n = strlen(out);
  if (++*lines > 24) {
    if (*lines == 25 && n + 16 < len) strcat(out, "\n  ...");
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  if (n + 4 < len) {
    memcpy(out + n, "\n  ", 4);
    vsnprintf(out + n + 3, len - n - 3, fmt, ap);
  }
  va_end(ap);
}

/* The value of -D key in "k=v k=v ...", into buf; NULL when absent. The
 * last one counts, as on the compiler's command line. */
static const char *define_of(const char *defines, const char *key, char *buf, size_t len) {
  size_t klen = strlen(key);
  const char *found = NULL;
  for (const char *p = defines; p && *p;) {
    while (*p == ' ') p++;
    size_t w = strcspn(p, " ");
    if (w > klen && !strncmp(p, key, klen) && p[klen] == '=') {
      snprintf(buf, len, "%.*s", (int)(w - klen - 1), p + klen + 1);
      found = buf;
    }
    p += w;
  }
  return found;
}

void rt_ckpt_define_diffs(const char *a, const char *b, int a_is_file, char *out, size_t len,
                          int *lines) {
  for (const char *p = a; p && *p;) {
    while (*p == ' ') p++;
    size_t w = strcspn(p, " "), k = strcspn(p, "=");
    if (!w) break;
    char key[128], va[256], vb[256];
    snprintf(key, sizeof key, "%.*s", (int)(k < w ? k : w), p);
    p += w;
    /* A key given twice is compared once, at its last place. */
    if (!strcmp(key, "batch") || define_of(p, key, vb, sizeof vb) ||
        !define_of(a, key, va, sizeof va))
      continue;
    const char *other = define_of(b, key, vb, sizeof vb);
    if (!other)
      rt_ckpt_diff_add(out, len, lines, "-D %s=%s only in %s", key, va,
                       a_is_file ? "the checkpoint" : "this program");
    else if (a_is_file && strcmp(va, vb))
      rt_ckpt_diff_add(out, len, lines, "-D %s: %s in the checkpoint, %s in this program", key,
                       va, vb);
  }
}
