/* The state file's own fields (see checkpoint.h): apart from the model
 * and the tensors, what --resume takes from CKPT_STATE_FILE. Everything
 * is checked and returned as an error, never trusted: the file may be
 * torn, edited or of another program. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../abi/formats.h"
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
