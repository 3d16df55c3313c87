/* Diagnostics: `file:line:col: error: message`, the source line and a caret
 * under the column. Sources are registered by file name so that any phase
 * (parser, lowering, passes) can point into them. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

const IrLoc ir_cmdline = {IR_CMDLINE_FILE, 0, 0};

typedef struct Source {
  const char *file;
  const char *text;
  size_t len;
} Source;

static Source sources[64];
static int nsources;
static int nerrors;
static FILE *diag_stream;

static FILE *stream(void) { return diag_stream ? diag_stream : stderr; }
void ir_diag_set_stream(FILE *f) { diag_stream = f; }

void ir_diag_add_source(const char *file, const char *text, size_t len) {
  for (int i = 0; i < nsources; i++)
    if (strcmp(sources[i].file, file) == 0) {
      sources[i].text = text;
      sources[i].len = len;
      return;
    }
  if (nsources < (int)(sizeof sources / sizeof sources[0]))
    sources[nsources++] = (Source){ir_strdup(file), text, len};
}

void ir_diag_forget_sources(void) { nsources = 0; }

int ir_error_count(void) { return nerrors; }
void ir_diag_reset(void) { nerrors = 0; }

/* Prints the line `line` of the file and a caret under `col`. Long lines
 * are cut to a window around the column so a 10 MB line stays readable. */
static void print_caret(IrLoc loc) {
  if (!loc.file || loc.line <= 0) return;
  const Source *src = NULL;
  for (int i = 0; i < nsources; i++)
    if (strcmp(sources[i].file, loc.file) == 0) src = &sources[i];
  if (!src) return;
  const char *p = src->text, *end = src->text + src->len;
  for (int l = 1; l < loc.line && p < end; p++)
    if (*p == '\n') l++;
  if (p >= end && loc.line > 1) return;
  const char *eol = p;
  while (eol < end && *eol != '\n') eol++;
  long col = loc.col > 0 ? loc.col - 1 : 0, start = 0, n = eol - p;
  if (col > n) col = n;
  if (col > 60) start = col - 40;
  if (n - start > 120) n = start + 120;
  FILE *f = stream();
  fputs("  ", f);
  for (long i = start; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    fputc(c == '\t' ? ' ' : (c < 32 || c >= 127) ? '?' : c, f);
  }
  fputs("\n  ", f);
  for (long i = start; i < col; i++) fputc(' ', f);
  fputs("^\n", f);
}

void ir_verror(IrLoc loc, const char *kind, const char *fmt, va_list ap) {
  bool is_error = strcmp(kind, "error") == 0;
  if (is_error && ++nerrors > IR_MAX_ERRORS) {
    if (nerrors == IR_MAX_ERRORS + 1) fprintf(stream(), "too many errors; stopping\n");
    return;
  }
  if (!is_error && nerrors > IR_MAX_ERRORS) return;
  FILE *f = stream();
  if (loc.file && loc.line > 0)
    fprintf(f, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
  else if (loc.file)
    fprintf(f, "%s: %s: ", loc.file, kind);
  else
    fprintf(f, "shardc: %s: ", kind);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  print_caret(loc);
}

void ir_error(IrLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(loc, "error", fmt, ap);
  va_end(ap);
}

void ir_note(IrLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(loc, "note", fmt, ap);
  va_end(ap);
}

_Noreturn void ir_die_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "%s:%d: internal error: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}
