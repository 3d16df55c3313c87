/* Fuzzing the reader of the `latest` pointer of a --keep-last folder
 * (rt_ckpt_latest_parse, runtime/ckpt_keep.c): whatever the file holds,
 * the reader either refuses it with a message or returns a folder name of
 * the form step-DIGITS, never a path out of the folder (no '/', no "..").
 *
 * A bug is a crash, a sanitizer report, an accepted name of another form
 * or a refusal without a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *name;
  RtErr e;
  e.msg[0] = 0;
  if (rt_ckpt_latest_parse((const char *)data, size, "DIR/latest", &name, &e) != 0) {
    if (!*e.msg || name) abort();
    return 0;
  }
  size_t n = strlen(name);
  if (n < 6 || strncmp(name, "step-", 5) || strchr(name, '/') || strstr(name, "..")) abort();
  for (size_t i = 5; i < n; i++)
    if (name[i] < '0' || name[i] > '9') abort();
  free(name);
  return 0;
}
