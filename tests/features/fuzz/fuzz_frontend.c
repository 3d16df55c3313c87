/* The fuzzing entry point: arbitrary bytes into both readers of the
 * compiler, the model language (fe_load_source) and the printed IR
 * (ir_parse), each followed by the default pass pipeline.
 *
 * Built two ways: linked with libFuzzer (-fsanitize=fuzzer, clang only) it
 * explores new inputs; linked with replay.c it is an ordinary program that
 * ctest runs over the seed corpus, under the sanitizers with gcc as well.
 *
 * Every input is tried as both languages: the fuzzer then needs no
 * selector byte, and a .shard seed mutated into something IR-like (or the
 * reverse) still exercises the other reader.
 *
 * What counts as a bug here is a crash, a sanitizer report, a hang, or a
 * broken round trip: text printed by ir_print must parse back and print
 * identically (the contract of the IR text form). User errors are expected
 * and go to /dev/null. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull(void) {
  static FILE *f;
  if (!f && !(f = fopen("/dev/null", "w"))) die("cannot open /dev/null");
  return f;
}

static char *print_to_string(const IrGraph *g, size_t *len) {
  char *buf = NULL;
  FILE *f = open_memstream(&buf, len);
  if (!f) die("open_memstream failed");
  ir_print(f, g);
  fclose(f);
  return buf;
}

/* Prints g, parses the text back and prints it again; the two texts must
 * be equal. A failure is a bug in the printer or the parser, not in the
 * input, so it aborts (after showing the parser's messages) and the fuzzer
 * keeps the input as a crash. */
static void check_roundtrip(const IrGraph *g, const char *stage) {
  /* Like the input, the printed text stays registered with the diagnostics
   * until the next round trip replaces it. */
  static char *t1;
  size_t n1, n2;
  free(t1);
  t1 = print_to_string(g, &n1);
  ir_diag_reset();
  IrGraph *g2 = ir_parse("roundtrip.ir", t1, n1);
  if (!g2) {
    fprintf(stderr, "fuzz: IR printed %s does not parse back:\n%s\n", stage, t1);
    ir_diag_set_stream(stderr);
    ir_diag_reset();
    ir_parse("roundtrip.ir", t1, n1);
    abort();
  }
  char *t2 = print_to_string(g2, &n2);
  if (n1 != n2 || memcmp(t1, t2, n1) != 0) {
    fprintf(stderr, "fuzz: IR printed %s changes when parsed and printed again:\n"
                    "--- first\n%s--- second\n%s", stage, t1, t2);
    abort();
  }
  free(t2);
}

/* The default pipeline with the verifier after every pass, as `shardc
 * compile --verify-each` runs it. */
static void run_pipeline(IrGraph *g) {
  PassOptions opt = {0};
  PassManagerFlags flags = {.verify_each = true, .print_stream = devnull()};
  if (pass_run_pipeline(&g, pass_default_pipeline, &opt, &flags) && g)
    check_roundtrip(g, "after the pipeline");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The readers get a NUL-terminated copy. It stays alive until the next
   * input because the diagnostics keep pointing into the registered source
   * text. */
  static char *text;
  free(text);
  text = malloc(size + 1);
  if (!text) die("out of memory");
  memcpy(text, data, size);
  text[size] = '\0';
  ir_diag_set_stream(devnull());

  ir_diag_reset();
  IrGraph *g = fe_load_source("fuzz.shard", text, size);
  if (g && ir_error_count() == 0) {
    check_roundtrip(g, "after lowering");
    ir_diag_reset();
    run_pipeline(g);
  }

  ir_diag_reset();
  g = ir_parse("fuzz.ir", text, size);
  if (g && ir_error_count() == 0) {
    check_roundtrip(g, "after parsing");
    ir_diag_reset();
    run_pipeline(g);
  }
  ir_diag_reset();
  return 0;
}
