/* Round trip of the IR text form: for each file given, build a graph (a
 * .shard model through the frontend, a .ir file through ir_parse), print
 * it, parse the printed text, print again, and check that both prints are
 * identical; the graphs must also pass the verifier. Prints one line per
 * file and exits 1 at the first difference, showing the first differing
 * line of each print.
 *
 *   roundtrip FILE.shard|FILE.ir ... */
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  char *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len == cap) {
      cap = cap ? 2 * cap : 65536;
      buf = realloc(buf, cap + 1);
      if (!buf) die("out of memory");
    }
    size_t got = fread(buf + *len, 1, cap - *len, f);
    if (got == 0) break;
    *len += got;
  }
  fclose(f);
  char *copy = ir_strndup(buf ? buf : "", *len); /* the arena keeps it until exit */
  free(buf);
  return copy;
}

/* The printed text lives until exit: diagnostics may point into it. */
static char *print_to_string(const IrGraph *g, size_t *len) {
  char *text = NULL;
  FILE *f = open_memstream(&text, len);
  if (!f) die("open_memstream failed");
  ir_print(f, g);
  fclose(f);
  char *copy = ir_strndup(text, *len); /* the arena keeps it until exit */
  free(text);
  return copy;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* Prints line `line` (1-based) of s, without its newline. */
static void show_line(const char *label, const char *s, int line) {
  for (int l = 1; l < line && *s; s++)
    if (*s == '\n') l++;
  const char *end = strchr(s, '\n');
  printf("  %s %.*s\n", label, end ? (int)(end - s) : (int)strlen(s), s);
}

/* Reports the first line where a and b differ. */
static void show_difference(const char *a, const char *b) {
  int line = 1;
  const char *pa = a, *pb = b;
  while (*pa && *pa == *pb) {
    if (*pa == '\n') line++;
    pa++;
    pb++;
  }
  printf("  first difference at line %d:\n", line);
  show_line("first print: ", a, line);
  show_line("second print:", b, line);
}

static bool check_file(const char *path) {
  const char *name = base_name(path);
  IrGraph *g;
  if (strlen(path) > 3 && strcmp(path + strlen(path) - 3, ".ir") == 0) {
    size_t len;
    char *text = read_file(path, &len);
    g = ir_parse(path, text, len);
  } else {
    g = fe_load(path);
  }
  if (!g) {
    printf("%s: FAIL: could not be read (errors above)\n", name);
    return false;
  }
  if (!ir_verify(g, NULL)) {
    printf("%s: FAIL: the graph does not verify\n", name);
    return false;
  }
  size_t len1, len2;
  char *first = print_to_string(g, &len1);
  const char *printed_name = ir_fmt("%s.printed.ir", name);
  IrGraph *again = ir_parse(printed_name, first, len1);
  if (!again) {
    printf("%s: FAIL: its printed form does not parse (errors above)\n", name);
    return false;
  }
  if (!ir_verify(again, NULL)) {
    printf("%s: FAIL: its printed form parses to a graph that does not verify\n", name);
    return false;
  }
  char *second = print_to_string(again, &len2);
  if (strcmp(first, second) != 0) {
    printf("%s: FAIL: printing, parsing and printing again changed the text\n", name);
    show_difference(first, second);
    return false;
  }
  printf("%s: %d lines, round trip identical\n", name, count_lines(first));
  return true;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: roundtrip FILE.shard|FILE.ir ...\n");
    return 2;
  }
  int status = 0;
  for (int i = 1; i < argc; i++)
    if (!check_file(argv[i])) status = 1;
  return status;
}
