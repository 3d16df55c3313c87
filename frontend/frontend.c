/* The frontend's entry points: read a file, parse it, lower it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ast.h"
#include "frontend.h"
#include "parser.h"
/* The scanner header names the value and location types without prefix. */
#define YYSTYPE FE_YYSTYPE
#define YYLTYPE FE_YYLTYPE
#include "lexer.h"

AstFile *fe_parse(const char *file, const char *text, size_t len) {
  FeParser p = {.file = file, .line = 1, .col = 1, .end_line = 1, .end_col = 1};
  p.ast = ir_alloc(sizeof *p.ast);
  p.ast->file = file;
  yyscan_t scanner;
  if (fe_yylex_init_extra(&p, &scanner)) die("cannot create the scanner");
  /* yy_scan_bytes copies the text, so NUL bytes inside it are just bytes. */
  YY_BUFFER_STATE buf = fe_yy_scan_bytes(text, (int)len, scanner);
  int rc = fe_yyparse(scanner, &p);
  fe_yy_delete_buffer(buf, scanner);
  fe_yylex_destroy(scanner);
  if (rc != 0 || p.errors) return NULL;
  return p.ast;
}

/* Parses and lowers text that lives as long as the arena. */
static IrGraph *load_text(const char *file, const char *text, size_t len) {
  int before = ir_error_count();
  ir_diag_add_source(file, text, len);
  /* The scanner counts the length in an int. */
  if (len > (size_t)1 << 30) {
    ir_error((IrLoc){file, 0, 0}, "file is too large (%zu bytes)", len);
    return NULL;
  }
  AstFile *ast = fe_parse(file, text, len);
  if (!ast) return NULL;
  IrGraph *g = fe_lower(ast);
  if (!g || ir_error_count() != before) return NULL;
  return g;
}

/* The diagnostics keep a pointer to the text, so it is copied to outlive
 * the caller's buffer. */
IrGraph *fe_load_source(const char *file, const char *text, size_t len) {
  return load_text(file, ir_strndup(text, len), len);
}

/* Reads the whole file into the arena; NULL after reporting an error. */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    ir_error((IrLoc){path, 0, 0}, "cannot open file: %s", strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = ir_alloc(cap);
  for (;;) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
    if (n == cap) {
      char *bigger = ir_alloc(cap * 2);
      memcpy(bigger, buf, n);
      buf = bigger;
      cap *= 2;
    }
  }
  int err = ferror(f) ? errno : 0;
  fclose(f);
  if (err) {
    ir_error((IrLoc){path, 0, 0}, "cannot read file: %s", strerror(err));
    return NULL;
  }
  *len = n;
  return buf;
}

IrGraph *fe_load(const char *path) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) return NULL;
  return load_text(path, text, len);
}
