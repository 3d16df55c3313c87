/* The pass manager: runs a comma-separated pipeline of registered passes,
 * printing and verifying between them as the flags ask. */
#include <string.h>

#include "passes.h"


/* "fold, shape, verify" as text, for the message about an unknown name. */
static char *registered_names(void) {
  char *s = "";
  for (const Pass *p = pass_registry; p->name; p++)
    s = ir_fmt("%s%s%s", s, p == pass_registry ? "" : ", ", p->name);
  return s;
}

/* Splits the pipeline and looks every name up before anything runs, so
 * that a typo in the last pass does not cost the time of the first ones.
 * Returns the number of passes, or -1 after reporting every bad name. */
static int parse_pipeline(const char *pipeline, const Pass ***out) {
  int n = 0, cap = 1;
  for (const char *p = pipeline; *p; p++) cap += *p == ',';
  const Pass **passes = ir_alloc(sizeof(Pass *) * (size_t)cap);
  bool ok = true;
  if (!*pipeline) { /* the empty pipeline runs nothing */
    *out = passes;
    return 0;
  }
  for (const char *p = pipeline;; p++) {
    size_t len = strcspn(p, ",");
    const char *name = ir_strndup(p, len);
    const Pass *pass = pass_find(name);
    if (!pass) {
      ir_error(ir_cmdline, "--passes: %s (the passes are %s)",
               len ? ir_fmt("no pass named '%s'", name) : "empty pass name", registered_names());
      ok = false;
    }
    passes[n++] = pass;
    p += len;
    if (!*p) break;
  }
  *out = passes;
  return ok ? n : -1;
}

bool pass_run_pipeline(IrGraph **g, const char *pipeline, const PassOptions *opt,
                       const PassManagerFlags *flags) {
  const Pass **passes;
  int n = parse_pipeline(pipeline ? pipeline : pass_default_pipeline, &passes);
  if (n < 0) return false;
  FILE *out = flags && flags->print_stream ? flags->print_stream : stdout;
  for (int i = 0; i < n; i++) {
    const Pass *p = passes[i];
    int before = ir_error_count();
    if (!p->run(g, opt) || ir_error_count() > before) return false;
    bool print = flags && (flags->print_after_all ||
                           (flags->print_after && strcmp(flags->print_after, p->name) == 0));
    if (print) {
      fprintf(out, "// after pass %s\n", p->name);
      ir_print(out, *g);
      fflush(out);
    }
    /* Printed first, so that the broken IR is there to read. */
    if (flags && flags->verify_each && !ir_verify(*g, p->name)) return false;
  }
  return true;
}
