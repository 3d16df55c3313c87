/* The pass manager: runs a comma-separated pipeline of registered passes
 * over the program being built, printing and verifying between them as
 * the flags ask. */
#include <string.h>

#include "passes.h"
#include "program_passes.h"
#include "schedule.h"

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

PassChunk *pass_program_chunks(PassProgram *p, int *n) {
  if (p->chunks) {
    *n = p->nchunks;
    return p->chunks;
  }
  PassChunk *whole = ir_alloc(sizeof *whole);
  memset(whole, 0, sizeof *whole);
  whole->g = p->g;
  *n = 1;
  return whole;
}

void pass_program_free(PassProgram *p) {
  sched_free(p->schedule);
  p->schedule = NULL;
}

/* Whether pp-split cut the program into chunks of their own. */
static bool is_split(const PassProgram *p) { return p->chunks && p->chunks[0].g != p->g; }

void pass_print_program(FILE *out, PassProgram *p) {
  if (!is_split(p)) {
    ir_print(out, p->g);
    return;
  }
  for (int k = 0; k < p->nchunks; k++) {
    fprintf(out, "// virtual stage %d\n", p->chunks[k].vstage);
    ir_print(out, p->chunks[k].g);
  }
}

/* A graph pass on the program's whole graph (the one chunk, when pp-split
 * left it whole, follows it). */
static bool run_graph_pass(const Pass *pass, PassProgram *p, const PassOptions *opt) {
  bool ok = pass->run(&p->g, opt);
  if (p->chunks) p->chunks[0].g = p->g;
  return ok;
}

/* Reports every graph pass of the pipeline that would run after the
 * graph is cut into chunks: the chunks share the whole graph's values, so
 * they are not graphs of their own that a graph pass (the verifier among
 * them) could take. */
static bool check_order(const Pass **passes, int n, const PassProgram *p) {
  bool split = is_split(p), ok = true;
  const char *by = split ? "the program's graph is cut into chunks already" : "";
  for (int i = 0; i < n; i++) {
    if (passes[i]->run_program == pass_pp_split) split = true, by = "after pp-split";
    else if (split && passes[i]->run) {
      ir_error(ir_cmdline, "--passes: %s is a pass over the whole graph and cannot run %s (the chunks "
               "share its values; --verify-each checks them)", passes[i]->name, by);
      ok = false;
    }
  }
  return ok;
}

static bool verify(const Pass *pass, PassProgram *p) {
  if (pass->verify) return pass->verify(p, pass->name);
  return pass_verify_chunks(p, pass->name);
}

bool pass_run_program(PassProgram *p, const char *pipeline, const PassOptions *opt,
                      const PassManagerFlags *flags) {
  const Pass **passes;
  int n = parse_pipeline(pipeline ? pipeline : pass_default_pipeline, &passes);
  if (n < 0 || !check_order(passes, n, p)) return false;
  FILE *out = flags && flags->print_stream ? flags->print_stream : stdout;
  for (int i = 0; i < n; i++) {
    const Pass *pass = passes[i];
    int before = ir_error_count();
    bool ok = pass->run_program ? pass->run_program(p, opt) : run_graph_pass(pass, p, opt);
    if (!ok || ir_error_count() > before) return false;
    bool print = flags && (flags->print_after_all ||
                           (flags->print_after && strcmp(flags->print_after, pass->name) == 0));
    if (print) {
      fprintf(out, "// after pass %s\n", pass->name);
      if (pass->print) pass->print(out, p);
      else pass_print_program(out, p);
      fflush(out);
    }
    /* Printed first, so that the broken result is there to read. */
    if (flags && flags->verify_each && !verify(pass, p)) return false;
  }
  return true;
}

bool pass_run_pipeline(IrGraph **g, const char *pipeline, const PassOptions *opt,
                       const PassManagerFlags *flags) {
  const Pass **passes;
  int n = parse_pipeline(pipeline ? pipeline : pass_default_pipeline, &passes);
  if (n < 0) return false;
  bool ok = true;
  for (int i = 0; i < n; i++)
    if (passes[i]->run_program) {
      ir_error(ir_cmdline, "--passes: %s works on a target's program, not on a graph alone",
               passes[i]->name);
      ok = false;
    }
  if (!ok) return false;
  PassProgram p = {.g = *g};
  ok = pass_run_program(&p, pipeline, opt, flags);
  *g = p.g;
  pass_program_free(&p);
  return ok;
}

const char *pass_graph_pipeline(const char *pipeline, const char **rest) {
  if (rest) *rest = "";
  if (!pipeline) return NULL;
  for (const char *s = pipeline; *s;) {
    size_t len = strcspn(s, ",");
    const Pass *pass = pass_find(ir_strndup(s, len));
    if (pass && pass->run_program) {
      /* Cut before the first program pass and the comma in front of it. */
      if (rest) *rest = s;
      return ir_strndup(pipeline, (size_t)(s - pipeline) - (s > pipeline));
    }
    s += len;
    if (*s) s++;
  }
  return pipeline;
}
