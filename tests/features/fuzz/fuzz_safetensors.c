/* Fuzzing the safetensors reader (runtime/safetensors.c), which loads
 * --init-from weights, checkpoints and `shardc sample`'s model: arbitrary
 * bytes as a file; every tensor it accepts is found by name and read.
 *
 * A bug is a crash, a sanitizer report or a hang; a bad file must come
 * back as an error (rt_st_open_checked), and a file it accepts must be
 * safe to read in full. */
#include "fuzz_input.h"

#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads every tensor of a float type (the reader's other types are
 * refused by rt_st_read, by message) into a buffer of its size. */
static void read_all(const RtStFile *f) {
  for (int i = 0; i < f->n; i++) {
    const RtStTensor *t = &f->t[i];
    if (rt_st_find(f, t->name) != t) abort(); /* names are unique */
    RtErr e;
    real *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *buf);
    if (!buf) abort();
    int rc = rt_st_read_checked(f, t, buf, &e);
    int floating = !strcmp(t->dtype, "F32") || !strcmp(t->dtype, "F64") ||
                   !strcmp(t->dtype, "F16") || !strcmp(t->dtype, "BF16");
    /* The header's checks promise that a float tensor's bytes are there. */
    if (floating && rc) {
      fprintf(stderr, "fuzz: an accepted float tensor does not read: %s\n", e.msg);
      abort();
    }
    free(buf);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file(data, size);
  RtStFile f;
  RtErr e;
  if (rt_st_open_checked(&f, path, &e) != 0) {
    if (!*e.msg) abort(); /* an error always says why */
    return 0;
  }
  read_all(&f);
  for (int i = 0; i < f.nmeta; i++)
    if (!rt_st_meta(&f, f.meta_key[i])) abort();
  rt_st_close(&f);
  return 0;
}
