/* Fuzzing the reader of the manifest (driver/launch_script.c: the
 * manifest.json that `shardc compile` writes, read back to make
 * launch.sh): the bytes as a manifest's text. What it accepts becomes a
 * script, which must hold no byte a manifest could smuggle into the
 * shell: only printable bytes, and every program it starts ("$here/NAME")
 * a plain file name.
 *
 * A bug is a crash, a sanitizer report, a hang or a script that breaks
 * those rules. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../driver/driver.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Comment lines may quote the manifest's strings (printable, checked
 * above); every other line's "$here/NAME" must be a plain name. */
static void check_programs(const char *script) {
  for (const char *p = strstr(script, "$here/"); p; p = strstr(p, "$here/")) {
    const char *line = p;
    while (line > script && line[-1] != '\n') line--;
    p += 6;
    if (*line == '#') continue;
    size_t n = strcspn(p, "\"");
    for (size_t i = 0; i < n; i++) {
      char c = p[i];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '-' || c == '.')) {
        fprintf(stderr, "fuzz: the script starts a program named '%.*s'\n", (int)n, p);
        abort();
      }
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = 0;
  char *script = NULL;
  size_t len = 0;
  const char *err = NULL;
  if (drv_launch_script_text(text, &script, &len, &err)) {
    if (!script || len == 0 || strlen(script) != len || strncmp(script, "#!/bin/sh\n", 10)) {
      fprintf(stderr, "fuzz: an accepted manifest gave no script\n");
      abort();
    }
    for (size_t i = 0; i < len; i++)
      if ((unsigned char)script[i] >= 0x7f ||
          ((unsigned char)script[i] < 0x20 && script[i] != '\n')) {
        fprintf(stderr, "fuzz: byte 0x%02x at %zu of the script\n", (unsigned char)script[i], i);
        abort();
      }
    check_programs(script);
  } else if (!err || !*err) {
    fprintf(stderr, "fuzz: a refused manifest without a reason\n");
    abort();
  }
  free(script);
  free(text);
  ir_arena_free_all(); /* nothing outlives one input */
  return 0;
}
