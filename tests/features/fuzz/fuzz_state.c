/* Fuzzing the reader of the optimizer-state file (CKPT_STATE_FILE, what
 * --resume opens): the safetensors layer, then the state's own fields
 * (format, step, the sampler's generator: runtime/ckpt_state.c), its -D
 * values against a program's, every saved flag's value as --resume
 * restores it (rt_flags_restore_checked),
 * then the tensors, the weights and both AdamW moments alike.
 *
 * A bug is a crash, a sanitizer report or a hang; bad values must come
 * back as errors. */
#include "fuzz_input.h"

#include <string.h>

#include "checkpoint.h"
#include "flags.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void restore_flags(const RtStFile *f) {
  static RtFlags flags;
  memset(&flags, 0, sizeof flags);
  for (int i = 0; i < rt_flags_saved_count(); i++) {
    char key[80], back[1024];
    snprintf(key, sizeof key, "flag.%s", rt_flags_saved_name(i));
    const char *v = rt_st_meta(f, key);
    /* A value taken must print back (what the next save writes). */
    if (v && rt_flags_restore_checked(&flags, i, v, key) == 0)
      rt_flags_saved_value(&flags, i, back, sizeof back);
  }
}

/* The -D values in the file against a program's, both ways, as the
 * resume check compares them: the list stays inside its buffer. */
static void compare_defines(const RtStFile *f) {
  static const char *program = "vocab=256 seq=8 hidden=16 heads=4 layers=2 batch=2";
  const char *file = rt_st_meta(f, "defines");
  char out[2048] = "";
  int lines = 0;
  rt_ckpt_define_diffs(file ? file : "", program, 1, out, sizeof out, &lines);
  rt_ckpt_define_diffs(program, file ? file : "", 0, out, sizeof out, &lines);
  if (strlen(out) >= sizeof out) abort();
}

static void read_tensors(const RtStFile *f) {
  for (int i = 0; i < f->n; i++) {
    const RtStTensor *t = &f->t[i];
    real *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *buf);
    if (!buf) abort();
    RtErr e;
    rt_st_read_checked(f, t, buf, &e);
    free(buf);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file(data, size);
  RtStFile f;
  RtErr e;
  if (rt_st_open_checked(&f, path, &e) != 0) return 0;
  RtCkptState st;
  if (rt_ckpt_state_fields(&f, &st, &e) == 0) {
    if (st.step < 0) abort();
    compare_defines(&f);
    restore_flags(&f);
    read_tensors(&f);
  } else if (!*e.msg) {
    abort();
  }
  rt_st_close(&f);
  return 0;
}
