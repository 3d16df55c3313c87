/* Fuzzing the checksum manifest of checkpoint files (CKPT_CHECKSUMS_KEY,
 * runtime/st_check.c): the input is the manifest's text. Parsed by
 * itself, an accepted manifest must be sorted, free of duplicates and
 * find each of its names; then it becomes the metadata of a valid file of
 * two tensors, which rt_st_verify must accept (1), report as having no
 * checksums (0) or refuse with a message (-1), reading only the file's
 * own tensors.
 *
 * A bug is a crash, a sanitizer report, a hang, or an answer that breaks
 * those rules. */
#include "fuzz_st.h" /* first: it defines _GNU_SOURCE */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../abi/formats.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = 0;
  RtStSum *sums;
  int n;
  RtErr e;
  e.msg[0] = 0;
  if (rt_st_checksums_parse(text, "fuzz", &sums, &n, &e) == 0) {
    for (int i = 0; i < n; i++) {
      if (i > 0 && strcmp(sums[i - 1].name, sums[i].name) >= 0) abort();
      if (rt_st_sums_find(sums, n, sums[i].name) != &sums[i]) abort();
    }
    rt_st_sums_free(sums, n);
  } else if (!*e.msg) {
    abort();
  }
  /* Only a string without NUL bytes travels in JSON metadata. */
  if (strlen(text) == size) {
    const char *kv[2] = {CKPT_CHECKSUMS_KEY, text};
    const char *path = fuzz_st_file(kv, 1);
    RtStFile f;
    if (rt_st_open_checked(&f, path, &e) == 0) {
      e.msg[0] = 0;
      int rc = rt_st_verify(&f, &e);
      if (rc < -1 || rc > 1 || (rc == -1 && !*e.msg)) abort();
      rt_st_close(&f);
    }
  }
  free(text);
  return 0;
}
