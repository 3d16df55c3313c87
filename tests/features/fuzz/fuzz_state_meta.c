/* Fuzzing the state file's metadata under mutation: the input is a list
 * of key/value pairs (each a NUL-terminated string; an odd last string is
 * a key with an empty value) that replace or join the metadata of a valid
 * state file (format, step, generator, run id, saved flags, checksums).
 * The file then goes through what --resume reads before any tensor: the
 * state's own fields (rt_ckpt_state_fields), the checksums (rt_st_verify)
 * and every saved flag (rt_flags_restore_checked).
 *
 * A bug is a crash, a sanitizer report, a hang, a negative step accepted
 * or a refusal without a message. */
#include "fuzz_st.h" /* first: it defines _GNU_SOURCE */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../abi/formats.h"
#include "checkpoint.h"
#include "flags.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The metadata of a state file as --save writes it (its checksums those
 * of the two tensors of fuzz_st.h). */
static const char *const base[] = {
    "format", CKPT_STATE_FORMAT, "model", "gpt2", "defines", "layers=1 hidden=8", "real", "f32",
    "step", "2", "rng", "01f2f804a7f01ecc40814aa0b9539fd9eeeebeb2f8abb232f4e837927b07087b",
    "data_position", "2", "layout", "t=1 p=1 d=1 v=1 zero=0", CKPT_RUN_ID_KEY, "346ac3e78dcea3f3",
    "flag.lr", "0.0006", "flag.optimizer", "adamw", "flag.steps", "8", "flag.save", "ck",
    CKPT_CHECKSUMS_KEY, "", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  enum { MAXKV = 64 };
  const char *kv[2 * MAXKV];
  int n = 0;
  for (; base[2 * n]; n++) kv[2 * n] = base[2 * n], kv[2 * n + 1] = base[2 * n + 1];
  char *text = malloc(size + 2);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = text[size + 1] = 0;
  for (size_t at = 0; at < size && n < MAXKV;) {
    const char *key = text + at;
    at += strlen(key) + 1;
    const char *value = at <= size ? text + at : "";
    if (at <= size) at += strlen(value) + 1;
    kv[2 * n] = key, kv[2 * n + 1] = value, n++;
  }
  const char *path = fuzz_st_file(kv, n);
  RtStFile f;
  RtErr e;
  if (rt_st_open_checked(&f, path, &e) == 0) {
    RtCkptState st;
    e.msg[0] = 0;
    if (rt_ckpt_state_fields(&f, &st, &e) == 0) {
      if (st.step < 0) abort();
    } else if (!*e.msg) {
      abort();
    }
    e.msg[0] = 0;
    int rc = rt_st_verify(&f, &e);
    if (rc == -1 && !*e.msg) abort();
    static RtFlags flags;
    memset(&flags, 0, sizeof flags);
    for (int i = 0; i < rt_flags_saved_count(); i++) {
      char key[80], back[1024];
      snprintf(key, sizeof key, "flag.%s", rt_flags_saved_name(i));
      const char *v = rt_st_meta(&f, key);
      if (v && rt_flags_restore_checked(&flags, i, v, key) == 0)
        rt_flags_saved_value(&flags, i, back, sizeof back);
    }
    rt_st_close(&f);
  }
  free(text);
  return 0;
}
