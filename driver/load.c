/* Reading a model: .shard through the frontend, .ir through the IR parser,
 * then the -D overrides. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Reads a whole file into the arena; NULL after reporting an error. */
char *drv_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    ir_error((IrLoc){path, 0, 0}, "cannot open: %s", strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 65536;
      char *grown = realloc(buf, cap + 1);
      if (!grown) die("out of memory reading %s", path);
      buf = grown;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  bool failed = ferror(f);
  fclose(f);
  if (failed) {
    free(buf);
    ir_error((IrLoc){path, 0, 0}, "cannot read: %s", strerror(errno));
    return NULL;
  }
  char *text = ir_strndup(buf, n);
  free(buf);
  *len = n;
  return text;
}

/* "-D name=value" is reported at "<command line>" with the argument's
 * position, since it has no source line. */
static bool apply_overrides(IrGraph *g, int nargs, DrvArg *args) {
  bool ok = true;
  for (int i = 0; i < nargs; i++) {
    if (!args[i].opt || strcmp(args[i].opt->name, "-D") != 0) continue;
    const char *def = args[i].value, *eq = strchr(def, '=');
    IrLoc where = {ir_fmt(IR_CMDLINE_FILE ": -D %s", def), 0, 0};
    if (!eq || eq == def) {
      ir_error(where, "expected -D NAME=VALUE");
      ok = false;
      continue;
    }
    if (!pass_override_config(g, ir_strndup(def, (size_t)(eq - def)), eq + 1, where)) ok = false;
  }
  return ok;
}

IrGraph *drv_load_model(const char *path, int nargs, DrvArg *args) {
  IrGraph *g;
  if (ends_with(path, ".ir")) {
    size_t len = 0;
    char *text = drv_read_file(path, &len);
    if (!text) return NULL;
    g = ir_parse(path, text, len);
  } else {
    g = fe_load(path);
  }
  if (!g || ir_error_count() > 0) return NULL;
  if (!apply_overrides(g, nargs, args)) return NULL;
  return g;
}

IrGraph *drv_load_and_check(const char *path, int nargs, DrvArg *args) {
  IrGraph *g = drv_load_model(path, nargs, args);
  if (!g) return NULL;
  PassOptions opt = {0};
  PassManagerFlags flags = {.print_stream = stdout};
  if (!pass_run_pipeline(&g, pass_default_pipeline, &opt, &flags)) return NULL;
  return g;
}
