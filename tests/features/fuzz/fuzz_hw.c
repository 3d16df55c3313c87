/* Fuzzing the reader of hardware descriptions (planner/hw.c, the files
 * `shardc plan --hw FILE` and `shardc simulate --hw FILE` take): the bytes
 * as a description file. A description it accepts is printed in the file
 * format (pl_hw_print, what `shardc hw` shows), and that text must load
 * again and print the same: the format's round trip.
 *
 * A bug is a crash, a sanitizer report, a hang or a broken round trip;
 * errors go to /dev/null. */
#include "fuzz_input.h"

#include <string.h>

#include "hw.h"
#include "ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *print_hw(const PlHw *hw, size_t *len) {
  char *text = NULL;
  FILE *f = open_memstream(&text, len);
  if (!f) abort();
  pl_hw_print(f, hw);
  fclose(f);
  return text;
}

static void check_roundtrip(const PlHw *hw) {
  size_t n1, n2;
  char *t1 = print_hw(hw, &n1);
  PlHw back;
  const char *path = fuzz_input_file((const uint8_t *)t1, n1);
  if (!pl_hw_load(path, &back)) {
    fprintf(stderr, "fuzz: a printed description does not load back:\n%s", t1);
    abort();
  }
  back.name = hw->name; /* a file's default name is its path */
  back.doc = hw->doc;
  char *t2 = print_hw(&back, &n2);
  if (n1 != n2 || memcmp(t1, t2, n1)) {
    fprintf(stderr, "fuzz: a description changes when printed and loaded:\n--- first\n%s"
                    "--- second\n%s", t1, t2);
    abort();
  }
  free(t1);
  free(t2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *null;
  if (!null && !(null = fopen("/dev/null", "w"))) abort();
  ir_diag_set_stream(null);
  const char *path = fuzz_input_file(data, size);
  PlHw hw;
  if (pl_hw_load(path, &hw)) check_roundtrip(&hw);
  ir_diag_forget_sources();
  ir_diag_reset();
  ir_arena_free_all(); /* nothing outlives one input */
  return 0;
}
