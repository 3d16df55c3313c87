/* The parser of the IR text form that ir_print writes (see print.c for an
 * example). A hand-written recursive descent over a small on-demand lexer:
 * ir/ must not depend on the frontend's generated scanner.
 *
 * The text is line oriented: every declaration or node is one line, and a
 * repeat's body follows its header line up to a closing `}`. A line
 * `backward:` makes the nodes after it (in the same graph) backward nodes,
 * and `grad @NAME = VALUE` records a parameter's gradient. That makes
 * error recovery simple: a broken line is skipped (with the body it opens)
 * and parsing resumes on the next line, so one run reports every error.
 *
 * The graph it builds must be safe for every pass to walk, so besides syntax
 * it checks what passes rely on: known op names, defined values, input and
 * output counts, attributes against the op's spec (filling in defaults),
 * and the shape of repeat regions. Input of any kind (binary bytes, deep
 * nesting, huge numbers) gives errors, never a crash: nesting is capped and
 * the parse gives up after IR_MAX_ERRORS. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* Deepest nesting accepted: of parentheses, unary minus and calls inside
 * an expression (the reader recurses over them), and of repeat bodies.
 * A chain such as 1 + 1 + ... + 1, or the same chain printed with its
 * parentheses, ((1 + 1) + 1) + 1, is read without recursion; it is deep
 * only as a tree (one level per term), which the fold pass walks in a
 * loop, so its bound is the chain's, IR_MAX_CHAIN terms. */
enum { MAX_DEPTH = 200, MAX_TREE = IR_MAX_CHAIN };

/* ------------------------------------------------------------------ lexer */

typedef enum TokKind {
  T_EOF,
  T_EOL,   /* one or more line ends (with the comments and blank lines between) */
  T_IDENT, /* config, add, f32, tensor, ... */
  T_INT,
  T_FLOAT,
  T_VALUE, /* %3, %tokens */
  T_PARAM, /* @wte.weight */
  T_PUNCT, /* ( ) [ ] { } , = : ^ + - * / %, the character is s[0] */
  T_BAD,   /* a byte that starts no token */
} TokKind;

typedef struct Token {
  TokKind kind;
  const char *s; /* the text, sigil included */
  size_t len;
  int line, col;
  bool bol; /* the first token on its line (T_EOL: at the start of a line) */
} Token;

typedef struct Lexer {
  const char *text;
  size_t len, pos;
  int line, col;
  bool bol;
} Lexer;

static bool is_alpha(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_namec(int c) { return is_alpha(c) || is_digit(c); }

static int lx_at(const Lexer *lx, size_t k) {
  return lx->pos + k < lx->len ? (unsigned char)lx->text[lx->pos + k] : -1;
}

static void lx_advance(Lexer *lx) {
  if (lx->text[lx->pos] == '\n') {
    lx->line++;
    lx->col = 1;
    lx->bol = true;
  } else {
    lx->col++;
  }
  lx->pos++;
}

/* Whitespace and `//` comments; line ends too when `newlines` is set. */
static void lx_skip_space(Lexer *lx, bool newlines) {
  for (;;) {
    int c = lx_at(lx, 0);
    if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && newlines)) {
      lx_advance(lx);
    } else if (c == '/' && lx_at(lx, 1) == '/') {
      while (lx->pos < lx->len && lx->text[lx->pos] != '\n') lx_advance(lx);
    } else {
      return;
    }
  }
}

/* number := DIGITS ('.' DIGITS?)? ([eE] [+-]? DIGITS)?  (a float when it has
 * a '.' or an exponent) */
static TokKind lx_number(Lexer *lx) {
  TokKind kind = T_INT;
  while (is_digit(lx_at(lx, 0))) lx_advance(lx);
  if (lx_at(lx, 0) == '.') {
    kind = T_FLOAT;
    lx_advance(lx);
    while (is_digit(lx_at(lx, 0))) lx_advance(lx);
  }
  int e = lx_at(lx, 0), s = lx_at(lx, 1);
  if ((e == 'e' || e == 'E') &&
      (is_digit(s) || ((s == '+' || s == '-') && is_digit(lx_at(lx, 2))))) {
    kind = T_FLOAT;
    lx_advance(lx);
    if (!is_digit(lx_at(lx, 0))) lx_advance(lx);
    while (is_digit(lx_at(lx, 0))) lx_advance(lx);
  }
  return kind;
}

/* Lines matter: each declaration or node is one line, so line ends are
 * tokens (a run of them is one T_EOL). */
static Token lex(Lexer *lx) {
  lx_skip_space(lx, false);
  Token t = {T_EOF, lx->text + lx->pos, 0, lx->line, lx->col, lx->bol};
  lx->bol = false;
  size_t start = lx->pos;
  int c = lx_at(lx, 0), c1 = lx_at(lx, 1);
  if (c < 0) return t;
  if (c == '\n') {
    lx_skip_space(lx, true);
    t.kind = T_EOL;
    t.len = 1;
    return t;
  }
  if (is_alpha(c)) {
    /* A repeat inside a block instance has a dotted label (`s.sub`). */
    while (is_namec(lx_at(lx, 0)) || (lx_at(lx, 0) == '.' && is_alpha(lx_at(lx, 1))))
      lx_advance(lx);
    t.kind = T_IDENT;
  } else if (is_digit(c)) {
    t.kind = lx_number(lx);
  } else if (c == '%' && is_namec(c1)) {
    /* `%` followed by a space is the modulo operator. */
    lx_advance(lx);
    while (is_namec(lx_at(lx, 0))) lx_advance(lx);
    t.kind = T_VALUE;
  } else if (c == '@' && (is_namec(c1) || c1 == '.')) {
    lx_advance(lx);
    while (is_namec(lx_at(lx, 0)) || lx_at(lx, 0) == '.') lx_advance(lx);
    t.kind = T_PARAM;
  } else {
    t.kind = c && strchr("()[]{},=:^+-*/%", c) ? T_PUNCT : T_BAD;
    lx_advance(lx);
  }
  t.len = lx->pos - start;
  return t;
}

/* ---------------------------------------------------------- symbol table */

/* Names live in scopes: numbered values and inputs share one module-wide
 * scope (the printer numbers across the module), params have one scope per
 * graph, configs and output names one each. */
static const char scope_values, scope_configs, scope_outputs;

typedef struct Sym {
  IrValue *v;
  IrLoc loc;
} Sym;

/* One map of names to Sym* per scope, all in the arena. */
typedef struct SymTab {
  IrStrMap values, configs, outputs;
  IrPtrMap params; /* IrGraph* -> IrStrMap* of its param names */
} SymTab;

static IrStrMap *scope_map(SymTab *t, const void *scope) {
  if (scope == &scope_values) return &t->values;
  if (scope == &scope_configs) return &t->configs;
  if (scope == &scope_outputs) return &t->outputs;
  IrStrMap *m = ir_ptrmap_get(&t->params, scope);
  if (!m) {
    m = ir_alloc(sizeof *m);
    m->arena = true;
    ir_ptrmap_put(&t->params, scope, m);
  }
  return m;
}

static Sym *sym_find(SymTab *t, const void *scope, const char *name, size_t len) {
  return ir_strmap_getn(scope_map(t, scope), name, len);
}

/* Adds a name known to be absent. */
static Sym *sym_add(SymTab *t, const void *scope, const char *name, size_t len, IrValue *v,
                    IrLoc loc) {
  Sym *s = ir_alloc(sizeof *s);
  *s = (Sym){v, loc};
  ir_strmap_put(scope_map(t, scope), ir_strndup(name, len), s);
  return s;
}

/* ----------------------------------------------------------------- parser */

/* Stands for the results of a node that could not be built, so that their
 * uses do not each report an error again. */
static IrValue poison_value;
#define POISON (&poison_value)

/* What a repeat body collects while its lines are parsed. */
typedef struct BodyCtx {
  bool yielded;        /* a yield line was seen */
  bool args_ok;        /* the args line parsed */
  bool yield_ok;       /* the yield line parsed */
  bool ok;             /* every arg was declared and every yield resolved */
  Token caret, yield;  /* the `^` of the args line and the `yield` */
  int nyield;
} BodyCtx;

typedef struct Parser {
  const char *file;
  Lexer lx; /* positioned after tok */
  Token tok;
  jmp_buf abort;
  SymTab syms;
  IrGraph *g; /* the graph that lines go into */
  BodyCtx *body;
  IrGraph *result;
  int depth;   /* expression recursion */
  int nesting; /* repeat bodies */
  int errors0;
  bool eof_reported;
  IrPhase phase;     /* of the nodes of the current graph: backward after `backward:` */
  IrLoc backward_at; /* where the current graph's `backward:` line is */
  int stage;         /* of the nodes of the top-level graph: set by `stage K:` */
} Parser;

static void next(Parser *p) { p->tok = lex(&p->lx); }

/* The k-th token after the current one. */
static Token peek(Parser *p, int k) {
  Lexer lx = p->lx;
  Token t = p->tok;
  for (int i = 0; i < k; i++) t = lex(&lx);
  return t;
}

static IrLoc tok_loc(Parser *p, Token t) { return (IrLoc){p->file, t.line, t.col}; }
static char *tok_str(Token t) { return ir_strndup(t.s, t.len); }
/* The name after a sigil: `tokens` of `%tokens`. */
static char *tok_name(Token t) { return ir_strndup(t.s + 1, t.len - 1); }

static bool is_punct(Token t, char c) { return t.kind == T_PUNCT && t.s[0] == c; }
static bool is_word(Token t, const char *w) {
  return t.kind == T_IDENT && t.len == strlen(w) && memcmp(t.s, w, t.len) == 0;
}

/* A token as messages show it: quoted, and cut short when long. */
static const char *tok_desc(Token t) {
  if (t.kind == T_EOF) return "end of file";
  if (t.kind == T_EOL) return "end of line";
  if (t.kind == T_BAD) {
    unsigned char c = (unsigned char)t.s[0];
    return c > 32 && c < 127 ? ir_fmt("character '%c'", c) : ir_fmt("byte 0x%02x", c);
  }
  int n = t.len > 40 ? 40 : (int)t.len;
  return ir_fmt("'%.*s%s'", n, t.s, t.len > 40 ? "..." : "");
}

/* Reports "expected X, found Y"; a truncated file says so only once. */
static bool expected(Parser *p, const char *what) {
  if (p->tok.kind == T_EOF) {
    if (p->eof_reported) return false;
    p->eof_reported = true;
  }
  ir_error(tok_loc(p, p->tok), "expected %s, found %s", what, tok_desc(p->tok));
  return false;
}

static bool accept(Parser *p, char c) {
  if (!is_punct(p->tok, c)) return false;
  next(p);
  return true;
}

static bool expect(Parser *p, char c, const char *what) {
  return accept(p, c) || expected(p, what);
}

/* Every line holds exactly one declaration or node. */
static bool end_of_line(Parser *p) {
  if (p->tok.kind == T_EOF) return true;
  if (p->tok.kind == T_EOL) {
    next(p);
    return true;
  }
  return expected(p, "the end of the line");
}

static void skip_eols(Parser *p) {
  while (p->tok.kind == T_EOL) next(p);
}

/* Gives up on the whole parse (nesting too deep, too many errors). */
static _Noreturn void give_up(Parser *p) { longjmp(p->abort, 1); }

/* ------------------------------------------------------------ expressions */

static IrExpr *parse_expr(Parser *p, int *depth);
static IrExpr *parse_term_rest(Parser *p, IrExpr *e, int *depth);
static IrExpr *parse_expr_rest(Parser *p, IrExpr *e, int *depth);

/* Whether t starts a number: `inf` and `nan` are literals unless called
 * like functions (`after` is the token that follows t). */
static bool is_number_tok(Token t, Token after) {
  if (t.kind == T_INT || t.kind == T_FLOAT) return true;
  return (is_word(t, "inf") || is_word(t, "nan")) && !is_punct(after, '(');
}

static bool at_number(Parser *p) {
  Token t = p->tok;
  if (t.kind == T_INT || t.kind == T_FLOAT) return true;
  return (is_word(t, "inf") || is_word(t, "nan")) && !is_punct(peek(p, 1), '(');
}

/* A literal at the current token, negated when a '-' came right before it:
 * `-1` is the integer -1 (and -9223372036854775808 fits). Errors are
 * reported and give a 0 so that parsing goes on. */
static IrExpr *parse_number(Parser *p, bool negative, IrLoc loc) {
  Token t = p->tok;
  next(p);
  if (t.kind == T_IDENT) {
    double f = t.s[0] == 'i' ? INFINITY : NAN;
    return ir_expr_float(negative ? -f : f, loc);
  }
  if (t.kind == T_INT) {
    uint64_t v = 0, limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (size_t i = 0; i < t.len; i++) {
      unsigned d = (unsigned)(t.s[i] - '0');
      if (v > (limit - d) / 10) {
        ir_error(loc, "integer literal too large");
        return ir_expr_int(0, loc);
      }
      v = v * 10 + d;
    }
    if (!negative) return ir_expr_int((int64_t)v, loc);
    return ir_expr_int(v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v, loc);
  }
  char buf[512];
  if (t.len >= sizeof buf) {
    ir_error(loc, "floating-point literal too long");
    return ir_expr_float(0, loc);
  }
  memcpy(buf, t.s, t.len);
  buf[t.len] = 0;
  errno = 0;
  double f = strtod(buf, NULL);
  if (errno == ERANGE && isinf(f)) ir_error(loc, "floating-point literal out of range");
  return ir_expr_float(negative ? -f : f, loc);
}

/* Whether '(' '-' NUMBER ')' starts here: the negation of a literal. */
static bool at_negated_literal(Parser *p) {
  if (!is_punct(p->tok, '(') || !is_punct(peek(p, 1), '-')) return false;
  Token t3 = peek(p, 3);
  return is_punct(t3, ')') && is_number_tok(peek(p, 2), t3);
}

/* exprs := (expr (',' expr)*)? CLOSE — the items of a call or a list. */
static bool parse_exprs(Parser *p, char close, IrVec *items, int *depth) {
  *depth = 1;
  if (accept(p, close)) return true;
  for (;;) {
    int d;
    IrExpr *e = parse_expr(p, &d);
    if (!e) return false;
    ir_vec_push(items, e);
    if (d + 1 > *depth) *depth = d + 1;
    if (!accept(p, ',')) break;
  }
  return expect(p, close, close == ')' ? "',' or ')'" : "',' or ']'");
}

/* primary := INT | FLOAT | 'inf' | 'nan' | NAME | NAME '(' exprs ')'
 *          | '(' '-' NUMBER ')' | '(' expr ')' | '[' exprs ']' */
static IrExpr *parse_primary(Parser *p, int *depth) {
  Token t = p->tok;
  IrLoc loc = tok_loc(p, t);
  IrVec items = {0};
  *depth = 1;
  if (at_number(p)) return parse_number(p, false, loc);
  if (t.kind == T_IDENT) {
    next(p);
    /* Whether a name is a config defined before its use is for `fold` to
     * say, as it does for the frontend's output. */
    if (!accept(p, '(')) return ir_expr_name(tok_str(t), loc);
    if (!parse_exprs(p, ')', &items, depth)) return NULL;
    return ir_expr_call(tok_str(t), (IrExpr **)items.items, items.len, loc);
  }
  if (accept(p, '[')) {
    if (!parse_exprs(p, ']', &items, depth)) return NULL;
    return ir_expr_list((IrExpr **)items.items, items.len, loc);
  }
  if (!is_punct(t, '(')) {
    expected(p, "an expression");
    return NULL;
  }
  /* The printer writes the negation of a literal as `(-1)` and the negative
   * literal as `-1`; keeping them apart makes the round trip exact. */
  if (at_negated_literal(p)) {
    next(p);
    IrLoc minus = tok_loc(p, p->tok);
    next(p);
    IrExpr *lit = parse_number(p, false, tok_loc(p, p->tok));
    next(p); /* the ')' seen above */
    *depth = 2;
    return ir_expr_unary(IR_EX_NEG, lit, minus);
  }
  /* A run of opening parentheses, as the printer writes a chain
   * (((a + b) + c) + d), is read in a loop, not by recursion: each ')'
   * closes a group whose value is the first operand of what follows it
   * in the group around it. */
  int open = 0;
  while (is_punct(p->tok, '(') && !at_negated_literal(p)) {
    if (++open > MAX_TREE) {
      ir_error(tok_loc(p, p->tok), "more than %d parentheses open at once", MAX_TREE);
      give_up(p);
    }
    next(p);
  }
  IrExpr *e = parse_expr(p, depth);
  while (e) {
    if (!expect(p, ')', "')'")) return NULL;
    if (--open == 0) break;
    e = parse_term_rest(p, e, depth);
    if (e) e = parse_expr_rest(p, e, depth);
  }
  return e;
}

/* unary := '-' unary | primary — a '-' right before a number makes a
 * negative literal. */
static IrExpr *parse_unary(Parser *p, int *depth) {
  if (++p->depth > MAX_DEPTH) {
    ir_error(tok_loc(p, p->tok), "expression nested too deeply (more than %d levels)", MAX_DEPTH);
    give_up(p);
  }
  IrExpr *e;
  if (is_punct(p->tok, '-')) {
    IrLoc loc = tok_loc(p, p->tok);
    next(p);
    if (at_number(p)) {
      *depth = 1;
      e = parse_number(p, true, loc);
    } else {
      e = parse_unary(p, depth);
      if (e) e = ir_expr_unary(IR_EX_NEG, e, loc);
      ++*depth;
    }
  } else {
    e = parse_primary(p, depth);
  }
  p->depth--;
  return e;
}

/* Builds `a OP b` and keeps the tree within MAX_TREE: a long chain such
 * as 1+1+1+... nests without recursion here but not in later phases. */
static IrExpr *binary(Parser *p, IrExprKind k, IrExpr *a, IrExpr *b, int *depth, int db,
                      Token op) {
  if (db > *depth) *depth = db;
  if (++*depth > MAX_TREE) {
    ir_error(tok_loc(p, op), "expression tree deeper than %d levels (each term of a chain of "
             "operators is one)", MAX_TREE);
    give_up(p);
  }
  return ir_expr_binary(k, a, b, tok_loc(p, op));
}

/* The rest of a term whose first operand e is parsed. */
static IrExpr *parse_term_rest(Parser *p, IrExpr *e, int *depth) {
  while (e) {
    Token op = p->tok;
    IrExprKind k = is_punct(op, '*') ? IR_EX_MUL : is_punct(op, '/') ? IR_EX_DIV
                 : is_punct(op, '%') ? IR_EX_MOD : IR_EX_INT;
    if (k == IR_EX_INT) break;
    next(p);
    int db;
    IrExpr *b = parse_unary(p, &db);
    if (!b) return NULL;
    e = binary(p, k, e, b, depth, db, op);
  }
  return e;
}

/* term := unary (('*' | '/' | '%') unary)* */
static IrExpr *parse_term(Parser *p, int *depth) {
  IrExpr *e = parse_unary(p, depth);
  return e ? parse_term_rest(p, e, depth) : NULL;
}

/* The rest of an expression whose first term e is parsed. */
static IrExpr *parse_expr_rest(Parser *p, IrExpr *e, int *depth) {
  while (e && (is_punct(p->tok, '+') || is_punct(p->tok, '-'))) {
    Token op = p->tok;
    next(p);
    int db;
    IrExpr *b = parse_term(p, &db);
    if (!b) return NULL;
    e = binary(p, op.s[0] == '+' ? IR_EX_ADD : IR_EX_SUB, e, b, depth, db, op);
  }
  return e;
}

/* expr := term (('+' | '-') term)* */
static IrExpr *parse_expr(Parser *p, int *depth) {
  IrExpr *e = parse_term(p, depth);
  return e ? parse_expr_rest(p, e, depth) : NULL;
}

static IrExpr *parse_expr_top(Parser *p) {
  int depth;
  return parse_expr(p, &depth);
}

/* ------------------------------------------------------- types and values */

/* type := DTYPE '[' (expr (',' expr)*)? ']' — a literal int dim also fills
 * shape[], as after `fold`. */
static bool parse_type(Parser *p, IrType *t) {
  Token d = p->tok;
  if (d.kind != T_IDENT) return expected(p, "a type such as f32[...]");
  IrDType dt = IR_F32;
  if (!ir_dtype_parse(tok_str(d), &dt))
    ir_error(tok_loc(p, d), "unknown dtype %s (f32, f64, bf16, f16, i32, i64)", tok_desc(d));
  next(p);
  if (!expect(p, '[', "'['")) return false;
  *t = (IrType){.dtype = dt, .rank = 0};
  if (accept(p, ']')) return true;
  int n = 0;
  for (;; n++) {
    Token at = p->tok;
    IrExpr *e = parse_expr_top(p);
    if (!e) return false;
    if (n == IR_MAX_RANK) ir_error(tok_loc(p, at), "a tensor has at most %d dims", IR_MAX_RANK);
    if (n < IR_MAX_RANK) {
      if (e->kind == IR_EX_INT) t->shape[n] = e->i;
      t->dims[n] = e;
    }
    if (!accept(p, ',')) break;
  }
  t->rank = n + 1 > IR_MAX_RANK ? IR_MAX_RANK : n + 1;
  return expect(p, ']', "',' or ']'");
}

/* A small non-negative integer of a spec (a dim, a block count, a mesh
 * size), or -1 after reporting it. */
static int spec_int(Parser *p, const char *what, int limit) {
  Token n = p->tok;
  if (n.kind != T_INT) {
    expected(p, what);
    return -2;
  }
  next(p);
  int v = n.len > 9 ? limit + 1 : atoi(tok_str(n));
  if (v > limit) {
    ir_error(tok_loc(p, n), "%s is out of range (at most %d)", what, limit);
    return -1;
  }
  return v;
}

/* shard := ('split' '(' AXIS ',' '-'? INT (',' INT)? ')' | 'partial' '(' AXIS ')'
 *          | 'replicated' '(' AXIS ')')?
 * with AXIS one of tensor, pipeline, data; the third number of split is
 * the block count. `replicated(...)` marks a spec the model fixed. */
static bool parse_shard(Parser *p, IrShard *s) {
  static const char *axes[] = {"tensor", "pipeline", "data"};
  *s = (IrShard){IR_REPLICATED, IR_AXIS_TENSOR, 0, 0, false};
  bool split = is_word(p->tok, "split"), repl = is_word(p->tok, "replicated");
  if (!(split || repl || is_word(p->tok, "partial")) || !is_punct(peek(p, 1), '(')) return true;
  next(p);
  next(p);
  s->kind = split ? IR_SPLIT : repl ? IR_REPLICATED : IR_PARTIAL;
  s->fixed = repl;
  Token a = p->tok;
  if (a.kind != T_IDENT) return expected(p, "a mesh axis (tensor, pipeline or data)");
  int k = 0;
  while (k < 3 && !is_word(a, axes[k])) k++;
  if (k == 3)
    ir_error(tok_loc(p, a), "unknown mesh axis %s (tensor, pipeline or data)", tok_desc(a));
  s->axis = k == 3 ? IR_AXIS_TENSOR : (IrMeshAxis)k;
  next(p);
  if (split) {
    if (!expect(p, ',', "','")) return false;
    bool neg = accept(p, '-');
    int dim = spec_int(p, "the split dimension", 999);
    if (dim < -1) return false;
    s->dim = dim < 0 ? 0 : neg ? -dim : dim;
    if (accept(p, ',')) {
      Token at = p->tok;
      int blocks = spec_int(p, "the block count", 1 << 20);
      if (blocks < -1) return false;
      if (blocks == 0) ir_error(tok_loc(p, at), "the block count must be positive");
      s->blocks = blocks > 0 ? blocks : 1;
    }
  }
  return expect(p, ')', "')'");
}

/* unpadded := ('unpadded' '(' INT ',' INT ')')?  (a padded parameter) */
static bool parse_unpadded(Parser *p, IrValue *v) {
  if (!is_word(p->tok, "unpadded") || !is_punct(peek(p, 1), '(')) return true;
  next(p);
  next(p);
  int dim = spec_int(p, "the padded dimension", IR_MAX_RANK - 1);
  if (dim < -1 || !expect(p, ',', "','")) return false;
  Token n = p->tok;
  if (n.kind != T_INT) return expected(p, "the unpadded size");
  next(p);
  errno = 0;
  long long size = strtoll(tok_str(n), NULL, 10);
  if (errno == ERANGE || size <= 0) ir_error(tok_loc(p, n), "the unpadded size must be positive");
  if (v && dim >= 0 && size > 0) {
    v->pad_dim = dim;
    v->unpadded = size;
  }
  return expect(p, ')', "')'");
}

/* A value as it is declared: its name and what it says about it. */
typedef struct ValDef {
  Token name;
  IrType type;
  IrShard shard;
} ValDef;

/* valdef := VALUE (':' type)? shard */
static bool parse_valdef(Parser *p, ValDef *d) {
  if (p->tok.kind != T_VALUE) return expected(p, "a value such as %0");
  d->name = p->tok;
  d->type = (IrType){.rank = -1};
  next(p);
  if (accept(p, ':') && !parse_type(p, &d->type)) return false;
  return parse_shard(p, &d->shard);
}

static void apply_def(IrValue *v, const ValDef *d) {
  v->type = d->type;
  v->shard = d->shard;
  v->loc = (IrLoc){v->loc.file, d->name.line, d->name.col};
}

static bool is_numbered(Token t) {
  for (size_t i = 1; i < t.len; i++)
    if (!is_digit((unsigned char)t.s[i])) return false;
  return true;
}

/* Whether the name of token t (its first `skip` characters left out) is
 * defined in scope already; reports "redefinition of WHAT NAME" and where
 * it was first defined when it is. */
static bool redefined(Parser *p, const void *scope, Token t, size_t skip, const char *what) {
  Sym *s = sym_find(&p->syms, scope, t.s + skip, t.len - skip);
  if (!s) return false;
  ir_error(tok_loc(p, t), "redefinition of %s%s", what, tok_desc(t));
  ir_note(s->loc, "first defined here");
  return true;
}

/* Declares %name (a result, an arg or an input). Returns NULL after
 * reporting a redefinition. */
static Sym *declare_value(Parser *p, Token t, IrValue *v) {
  if (redefined(p, &scope_values, t, 1, "")) return NULL;
  return sym_add(&p->syms, &scope_values, t.s + 1, t.len - 1, v, tok_loc(p, t));
}

/* Declares a node result or body arg, which the printer numbers. */
static Sym *declare_numbered(Parser *p, const ValDef *d, IrValue *v) {
  if (!is_numbered(d->name)) {
    ir_error(tok_loc(p, d->name), "node results and body args are numbered (%%0, %%1, ...), not %s",
             tok_desc(d->name));
    return NULL;
  }
  if (v != POISON) apply_def(v, d);
  return declare_value(p, d->name, v);
}

static bool is_ancestor(const IrGraph *a, const IrGraph *g) {
  for (g = g->parent; g; g = g->parent)
    if (g == a) return true;
  return false;
}

/* The value a reference names in the current graph; NULL after an error,
 * POISON (silently) for results of a node that could not be built. A body
 * reaches outer values only through its args. */
static IrValue *resolve(Parser *p, Token t) {
  IrLoc loc = tok_loc(p, t);
  const char *name = t.s + 1;
  size_t len = t.len - 1;
  if (t.kind == T_PARAM) {
    Sym *s = sym_find(&p->syms, p->g, name, len);
    if (s) return s->v;
    for (IrGraph *a = p->g->parent; a; a = a->parent)
      if (sym_find(&p->syms, a, name, len)) {
        ir_error(loc, "%s belongs to an enclosing graph; a repeat body sees outer values only "
                 "through its args", tok_desc(t));
        return NULL;
      }
    ir_error(loc, "undefined parameter %s", tok_desc(t));
    return NULL;
  }
  Sym *s = sym_find(&p->syms, &scope_values, name, len);
  if (!s) {
    ir_error(loc, "undefined value %s", tok_desc(t));
    return NULL;
  }
  if (s->v == POISON || s->v->graph == p->g) return s->v;
  if (is_ancestor(s->v->graph, p->g))
    ir_error(loc, "%s belongs to an enclosing graph; a repeat body sees outer values only "
             "through its args", tok_desc(t));
  else
    ir_error(loc, "%s is defined inside a repeat body and not visible here", tok_desc(t));
  return NULL;
}

/* refs := ref (',' ref)*   with ref := VALUE | PARAM
 * Pushes each value (NULL or POISON where it cannot be used, clearing *ok). */
static bool parse_refs(Parser *p, IrVec *out, bool *ok) {
  for (;;) {
    Token t = p->tok;
    if (t.kind != T_VALUE && t.kind != T_PARAM)
      return expected(p, "a value (%N, %input or @param)");
    next(p);
    IrValue *v = resolve(p, t);
    if (!v || v == POISON) *ok = false;
    ir_vec_push(out, v);
    if (!accept(p, ',')) return true;
  }
}

/* ------------------------------------------------------------- attributes */

typedef struct ParsedAttr {
  IrAttr attr;
  Token name;
} ParsedAttr;

/* attrs := '{' (NAME '=' expr (',' NAME '=' expr)*)? '}' */
static bool parse_attrs(Parser *p, IrVec *out) {
  next(p);
  if (accept(p, '}')) return true;
  for (;;) {
    Token name = p->tok;
    if (name.kind != T_IDENT) return expected(p, "an attribute name");
    next(p);
    if (!expect(p, '=', "'='")) return false;
    IrExpr *e = parse_expr_top(p);
    if (!e) return false;
    ParsedAttr *a = ir_alloc(sizeof *a);
    *a = (ParsedAttr){{tok_str(name), e}, name};
    ir_vec_push(out, a);
    if (!accept(p, ',')) break;
  }
  return expect(p, '}', "',' or '}'");
}

/* Checks the attributes against the op's spec and completes them with the
 * defaults of those not given, keeping the written order first. */
static bool build_attrs(Parser *p, Token op, const IrOpInfo *info, IrVec *parsed, IrAttr **out,
                        int *nout) {
  IrAttr *a = ir_alloc(sizeof(IrAttr) * (size_t)(parsed->len + info->nattr + 1));
  bool seen[sizeof info->attr / sizeof info->attr[0]] = {0}, ok = true;
  int n = 0;
  for (int i = 0; i < parsed->len; i++) {
    ParsedAttr *pa = parsed->items[i];
    int k = 0;
    while (k < info->nattr && strcmp(info->attr[k].name, pa->attr.name) != 0) k++;
    if (k == info->nattr) {
      ir_error(tok_loc(p, pa->name), "op '%s' has no attribute %s", info->name,
               tok_desc(pa->name));
      ok = false;
    } else if (seen[k]) {
      ir_error(tok_loc(p, pa->name), "attribute '%s' given twice", info->attr[k].name);
      ok = false;
    } else {
      seen[k] = true;
      a[n++] = pa->attr;
    }
  }
  for (int k = 0; k < info->nattr; k++) {
    if (seen[k]) continue;
    if (info->attr[k].dflt) {
      a[n++] = (IrAttr){info->attr[k].name, ir_attr_default(&info->attr[k], tok_loc(p, op))};
    } else {
      ir_error(tok_loc(p, op), "op '%s' needs attribute '%s'", info->name, info->attr[k].name);
      ok = false;
    }
  }
  *out = a;
  *nout = n;
  return ok;
}

/* Reports an input count outside the op's range. */
static bool check_arity(Parser *p, Token op, const IrOpInfo *info, int nin) {
  if (nin >= info->min_in && (info->max_in < 0 || nin <= info->max_in)) return true;
  if (info->max_in < 0)
    ir_error(tok_loc(p, op), "op '%s' takes at least %d inputs, found %d", info->name,
             info->min_in, nin);
  else if (info->min_in == info->max_in)
    ir_error(tok_loc(p, op), "op '%s' takes %d input%s, found %d", info->name, info->min_in,
             info->min_in == 1 ? "" : "s", nin);
  else
    ir_error(tok_loc(p, op), "op '%s' takes %d to %d inputs, found %d", info->name,
             info->min_in, info->max_in, nin);
  return false;
}

/* ------------------------------------------------------------------ lines */

static bool parse_item(Parser *p);

/* Error recovery: skips the rest of a broken line, and the whole body when
 * the line opened one, so that parsing resumes on the next line of the same
 * graph. A `}` that starts a line at depth 0 closes the enclosing graph and
 * is left for it. */
static void skip_statement(Parser *p) {
  int depth = 0;
  for (;;) {
    Token t = p->tok;
    if (t.kind == T_EOF) return;
    if (t.kind == T_EOL) {
      next(p);
      if (depth <= 0) return;
      continue;
    }
    if (is_punct(t, '{')) {
      depth++;
    } else if (is_punct(t, '}')) {
      if (depth == 0 && t.bol) return;
      if (depth > 0) depth--;
    }
    next(p);
  }
}

/* line* — up to the `}` that closes the graph (or the end of the file). */
static void parse_items(Parser *p) {
  bool told = false;
  for (;;) {
    skip_eols(p);
    if (is_punct(p->tok, '}') || p->tok.kind == T_EOF) return;
    if (ir_error_count() - p->errors0 > IR_MAX_ERRORS) give_up(p);
    bool ok;
    if (p->body && p->body->yielded) {
      if (!told) ir_error(tok_loc(p, p->tok), "'yield' must be the last line of a body");
      told = true;
      ok = false;
    } else {
      ok = parse_item(p);
    }
    if (!ok) skip_statement(p);
  }
}

/* Results of a line that could not be built still get their names, so that
 * their uses do not report errors of their own. */
static void poison_defs(Parser *p, IrVec *defs) {
  for (int i = 0; i < defs->len; i++) {
    Token t = ((ValDef *)defs->items[i])->name;
    if (is_numbered(t) && !sym_find(&p->syms, &scope_values, t.s + 1, t.len - 1))
      sym_add(&p->syms, &scope_values, t.s + 1, t.len - 1, POISON, tok_loc(p, t));
  }
}

/* args := '^' '(' (valdef (',' valdef)*)? ')' */
static bool parse_args(Parser *p, IrGraph *body) {
  if (!expect(p, '^', "the args line '^(...)' of the body")) return false;
  if (!expect(p, '(', "'('")) return false;
  if (accept(p, ')')) return true;
  for (;;) {
    ValDef d;
    if (!parse_valdef(p, &d)) return false;
    IrValue *v = ir_add_arg(body, d.type, tok_loc(p, d.name));
    if (!declare_numbered(p, &d, v)) p->body->ok = false;
    if (!accept(p, ',')) break;
  }
  return expect(p, ')', "',' or ')'");
}

/* yield := 'yield' (ref (',' ref)*)? */
static bool parse_yield(Parser *p) {
  BodyCtx *ctx = p->body;
  ctx->yielded = true;
  ctx->yield = p->tok;
  next(p);
  IrVec vals = {0};
  bool ok = true;
  if (p->tok.kind != T_EOL && p->tok.kind != T_EOF && !parse_refs(p, &vals, &ok)) return false;
  if (!end_of_line(p)) return false;
  if (!ok) ctx->ok = false;
  ctx->yield_ok = true;
  ctx->nyield = vals.len;
  for (int i = 0; i < vals.len; i++)
    if (vals.items[i] && vals.items[i] != POISON) ir_add_output(p->g, NULL, vals.items[i]);
  return true;
}

/* body := '{' args line* '}' where the last line is a yield. Returns false
 * only when the file ends first: a broken line inside is skipped. */
static bool parse_body(Parser *p, IrGraph *body, BodyCtx *ctx) {
  Token open = p->tok;
  if (++p->nesting > MAX_DEPTH) {
    ir_error(tok_loc(p, open), "repeat bodies nested too deeply (more than %d levels)", MAX_DEPTH);
    give_up(p);
  }
  next(p);
  if (!end_of_line(p)) skip_statement(p);
  IrGraph *outer = p->g;
  BodyCtx *outer_ctx = p->body;
  IrPhase outer_phase = p->phase;
  IrLoc outer_backward = p->backward_at;
  *ctx = (BodyCtx){.ok = true, .caret = p->tok};
  p->g = body;
  p->body = ctx;
  p->phase = IR_PHASE_FORWARD;
  ctx->args_ok = parse_args(p, body) && end_of_line(p);
  if (!ctx->args_ok) skip_statement(p);
  parse_items(p);
  Token close = p->tok;
  bool closed = expect(p, '}', "'}' at the end of the body");
  if (closed && !ctx->yielded) {
    ir_error(tok_loc(p, close), "the body has no 'yield'");
    ctx->ok = false;
  }
  p->g = outer;
  p->body = outer_ctx;
  p->phase = outer_phase;
  p->backward_at = outer_backward;
  p->nesting--;
  return closed;
}

static IrAttr *find_attr(IrAttr *a, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(a[i].name, name) == 0) return &a[i];
  return NULL;
}

/* The repeat's result count comes from its literal `ncarried`. Returns -1
 * after reporting a bad one. */
static int64_t repeat_ncarried(Parser *p, Token op, IrAttr *at, int nat, int nin, int nres) {
  IrAttr *nc = find_attr(at, nat, "ncarried");
  if (!nc) return -1; /* reported by build_attrs */
  if (nc->expr->kind != IR_EX_INT || nc->expr->i < 0 || nc->expr->i > nin) {
    ir_error(tok_loc(p, op), "ncarried must be an integer from 0 to the number of inputs (%d)",
             nin);
    return -1;
  }
  if (nc->expr->i != nres) {
    ir_error(tok_loc(p, op), "a repeat has one result per carried value (%lld), found %d",
             (long long)nc->expr->i, nres);
    return -1;
  }
  return nc->expr->i;
}

/* The rest of a repeat line after its attributes: the body, then the node.
 * The results are declared before the body so that the body can neither
 * reuse their numbers nor refer to them. */
static bool parse_repeat(Parser *p, Token op, Token label, IrVec *defs, IrVec *ins,
                         IrVec *attrs, bool ok) {
  IrAttr *at;
  int nat;
  if (!build_attrs(p, op, ir_op_info(IR_OP_REPEAT), attrs, &at, &nat)) ok = false;
  int64_t ncarried = repeat_ncarried(p, op, at, nat, ins->len, defs->len);
  Sym **syms = ir_alloc(sizeof(Sym *) * (size_t)(defs->len + 1));
  for (int i = 0; i < defs->len; i++) {
    IrValue *pending = ir_alloc(sizeof *pending);
    *pending = (IrValue){.kind = IR_VAL_NODE, .graph = p->g, .type.rank = -1};
    syms[i] = declare_numbered(p, defs->items[i], pending);
  }
  IrGraph *body = ir_body_new(p->g);
  BodyCtx ctx;
  bool parsed = is_punct(p->tok, '{') ? parse_body(p, body, &ctx)
                                      : expected(p, "'{' and the body of the repeat");
  if (parsed && ctx.args_ok && body->args.len != ins->len) {
    ir_error(tok_loc(p, ctx.caret), "the body takes %d args but the repeat has %d inputs",
             body->args.len, ins->len);
    ok = false;
  }
  if (parsed && ctx.yield_ok && ncarried >= 0 && ctx.nyield != ncarried) {
    ir_error(tok_loc(p, ctx.yield), "the body yields %d values but the repeat carries %lld",
             ctx.nyield, (long long)ncarried);
    ok = false;
  }
  parsed = parsed && end_of_line(p);
  IrNode *n = NULL;
  if (parsed && ok && ctx.ok && ctx.args_ok && ctx.yield_ok && ncarried >= 0) {
    n = ir_add_repeat(p->g, tok_str(label), find_attr(at, nat, "count")->expr,
                      (IrValue **)ins->items, ins->len, (int)ncarried, body, tok_loc(p, op));
    n->attrs = at; /* as written, in their order */
    n->nattr = nat;
    n->phase = p->phase;
    n->stage = p->g->parent ? 0 : p->stage;
  }
  for (int i = 0; i < defs->len; i++) {
    if (!syms[i]) continue;
    /* Parsing the body may have grown (moved) the symbol table: look the
     * result up again rather than keep a pointer across it. */
    const ValDef *d = defs->items[i];
    Sym *s = sym_find(&p->syms, &scope_values, d->name.s + 1, d->name.len - 1);
    if (!s) continue;
    s->v = n ? n->out[i] : POISON;
    if (n) apply_def(n->out[i], defs->items[i]);
  }
  return parsed;
}

static bool check_results(Parser *p, Token op, const IrOpInfo *info, int n) {
  if (info->flags & IR_OPF_MULTI_OUT) {
    if (n >= 1) return true;
    ir_error(tok_loc(p, op), "op '%s' needs at least one result", info->name);
    return false;
  }
  if (n == info->nout) return true;
  ir_error(tok_loc(p, op), "op '%s' has %d result%s, found %d", info->name, info->nout,
           info->nout == 1 ? "" : "s", n);
  return false;
}

/* Builds a parsed node line (other than a repeat) and declares its results. */
static void build_node(Parser *p, Token op, IrOp id, IrVec *defs, IrVec *ins, IrVec *attrs,
                       bool ok) {
  IrNode *n = NULL;
  if (id != IR_OP_COUNT) {
    const IrOpInfo *info = ir_op_info(id);
    IrAttr *at;
    int nat;
    if (!check_arity(p, op, info, ins->len)) ok = false;
    if (!check_results(p, op, info, defs->len)) ok = false;
    if (!build_attrs(p, op, info, attrs, &at, &nat)) ok = false;
    if (ok) {
      n = ir_add_node(p->g, id, (IrValue **)ins->items, ins->len, at, nat, defs->len,
                      tok_loc(p, op));
      n->phase = p->phase;
      n->stage = p->g->parent ? 0 : p->stage;
    }
  }
  for (int i = 0; i < defs->len; i++) declare_numbered(p, defs->items[i], n ? n->out[i] : POISON);
}

/* node := (valdef (',' valdef)* '=')? OP LABEL? '(' refs? ')' attrs? body?
 * where only a repeat has the LABEL (its parameter prefix) and the body. */
static bool parse_node_line(Parser *p, IrVec *defs) {
  if (p->tok.kind == T_VALUE) {
    for (;;) {
      ValDef *d = ir_alloc(sizeof *d);
      if (!parse_valdef(p, d)) return false;
      ir_vec_push(defs, d);
      if (!accept(p, ',')) break;
    }
    if (!expect(p, '=', "',' or '='")) return false;
  }
  Token op = p->tok, label = {0};
  if (op.kind != T_IDENT) return expected(p, "an op name");
  next(p);
  IrOp id = IR_OP_COUNT;
  bool ok = ir_op_lookup(tok_str(op), &id);
  if (!ok) ir_error(tok_loc(p, op), "unknown op %s", tok_desc(op));
  if (id == IR_OP_REPEAT) {
    label = p->tok;
    if (label.kind != T_IDENT) return expected(p, "the label of the repeat");
    next(p);
  }
  IrVec ins = {0}, attrs = {0};
  if (!expect(p, '(', "'('")) return false;
  if (!is_punct(p->tok, ')') && !parse_refs(p, &ins, &ok)) return false;
  if (!expect(p, ')', "',' or ')'")) return false;
  if (is_punct(p->tok, '{') && !is_punct(peek(p, 1), '^') && !parse_attrs(p, &attrs))
    return false;
  if (id == IR_OP_REPEAT) return parse_repeat(p, op, label, defs, &ins, &attrs, ok);
  if (is_punct(p->tok, '{')) {
    ir_error(tok_loc(p, p->tok), "only a repeat has a body");
    return false;
  }
  if (!end_of_line(p)) return false;
  build_node(p, op, id, defs, &ins, &attrs, ok);
  return true;
}

static bool parse_node(Parser *p) {
  IrVec defs = {0};
  if (parse_node_line(p, &defs)) return true;
  poison_defs(p, &defs);
  return false;
}

/* A declaration whose line is broken still declares its name, so that its
 * uses do not report errors of their own. Returns false for the caller. */
static bool declare_anyway(Parser *p, const void *scope, Token t, size_t skip) {
  if (!sym_find(&p->syms, scope, t.s + skip, t.len - skip))
    sym_add(&p->syms, scope, t.s + skip, t.len - skip, POISON, tok_loc(p, t));
  return false;
}

/* The `NAME '='` after the keyword of a config or an output line: the
 * name in *name; false after reporting what is missing. */
static bool name_and_eq(Parser *p, Token *name, const char *what) {
  next(p);
  *name = p->tok;
  if (name->kind != T_IDENT) return expected(p, what);
  next(p);
  return expect(p, '=', "'='");
}

/* config := 'config' NAME '=' expr */
static bool parse_config(Parser *p) {
  Token name;
  if (!name_and_eq(p, &name, "a config name")) return false;
  IrExpr *e = parse_expr_top(p);
  if (!e || !end_of_line(p)) return false;
  IrLoc loc = tok_loc(p, name);
  if (redefined(p, &scope_configs, name, 0, "config ")) return true;
  ir_add_config(p->g, tok_str(name), e, loc);
  sym_add(&p->syms, &scope_configs, name.s, name.len, NULL, loc);
  return true;
}

/* mesh := 'mesh' AXIS '=' INT  (the ranks along a mesh axis, top level) */
static bool parse_mesh(Parser *p) {
  static const char *axes[] = {"tensor", "pipeline", "data"};
  next(p);
  Token a = p->tok;
  int k = 0;
  while (k < 3 && !is_word(a, axes[k])) k++;
  if (k == 3) return expected(p, "a mesh axis (tensor, pipeline or data)");
  next(p);
  if (!expect(p, '=', "'='")) return false;
  Token at = p->tok;
  int size = spec_int(p, "the mesh size", 1 << 20);
  if (size < -1 || !end_of_line(p)) return false;
  if (size == 0) ir_error(tok_loc(p, at), "the mesh size must be positive");
  if (p->g->mesh[k] > 0) ir_error(tok_loc(p, a), "the size of mesh axis %s is given twice", axes[k]);
  if (size > 0) p->g->mesh[k] = size;
  return true;
}

/* input := 'input' VALUE (':' type)? shard */
static bool parse_input(Parser *p) {
  next(p);
  Token name = p->tok;
  ValDef d;
  if (!parse_valdef(p, &d) || !end_of_line(p))
    return name.kind == T_VALUE ? declare_anyway(p, &scope_values, name, 1) : false;
  IrLoc loc = tok_loc(p, d.name);
  if (!is_alpha((unsigned char)d.name.s[1])) {
    ir_error(loc, "an input is named like %%tokens; %s names a node result", tok_desc(d.name));
    return true;
  }
  IrValue *v = ir_add_input(p->g, tok_name(d.name), d.type, loc);
  v->shard = d.shard;
  declare_value(p, d.name, v);
  return true;
}

/* init := 'zeros' | 'ones' | 'normal' '(' expr ',' expr ')' */
static bool parse_init(Parser *p, IrInit *init) {
  Token t = p->tok;
  if (is_word(t, "zeros") || is_word(t, "ones")) {
    init->kind = t.s[0] == 'z' ? IR_INIT_ZEROS : IR_INIT_ONES;
    next(p);
    return true;
  }
  if (!is_word(t, "normal")) return expected(p, "an init (zeros, ones or normal(mean, std))");
  next(p);
  if (!expect(p, '(', "'('")) return false;
  if (!(init->mean = parse_expr_top(p)) || !expect(p, ',', "','")) return false;
  if (!(init->std = parse_expr_top(p)) || !expect(p, ')', "')'")) return false;
  init->kind = IR_INIT_NORMAL;
  return true;
}

/* tied := ('tied' '(' PARAM ')')?  (a stage's copy of a shared parameter,
 * declared after the one it copies) */
static bool parse_tied(Parser *p, IrValue **out) {
  *out = NULL;
  if (!is_word(p->tok, "tied") || !is_punct(peek(p, 1), '(')) return true;
  next(p);
  next(p);
  Token t = p->tok;
  if (t.kind != T_PARAM) return expected(p, "the parameter it copies (@name)");
  next(p);
  IrValue *v = resolve(p, t);
  if (v && v != POISON && v->kind != IR_VAL_PARAM) {
    ir_error(tok_loc(p, t), "%s is not a parameter", tok_desc(t));
    v = NULL;
  }
  *out = v == POISON ? NULL : v;
  return expect(p, ')', "')'");
}

/* param := 'param' PARAM (':' type)? shard unpadded tied ('=' init)? */
static bool parse_param(Parser *p) {
  next(p);
  Token name = p->tok;
  if (name.kind != T_PARAM) return expected(p, "a parameter name such as @wte.weight");
  next(p);
  IrType type = {.rank = -1};
  IrShard shard;
  IrInit init = {IR_INIT_NONE, NULL, NULL};
  IrValue pad = {0}, *tied = NULL;
  if ((accept(p, ':') && !parse_type(p, &type)) || !parse_shard(p, &shard) ||
      !parse_unpadded(p, &pad) || !parse_tied(p, &tied) ||
      (accept(p, '=') && !parse_init(p, &init)) || !end_of_line(p))
    return declare_anyway(p, p->g, name, 1);
  IrLoc loc = tok_loc(p, name);
  if (redefined(p, p->g, name, 1, "parameter ")) return true;
  IrValue *v = ir_add_param(p->g, tok_name(name), type, init, loc);
  v->shard = shard;
  v->pad_dim = pad.pad_dim;
  v->unpadded = pad.unpadded;
  v->tied = tied;
  sym_add(&p->syms, p->g, name.s + 1, name.len - 1, v, loc);
  return true;
}

/* output := 'output' NAME '=' ref */
static bool parse_output(Parser *p) {
  Token name;
  if (!name_and_eq(p, &name, "an output name")) return false;
  Token r = p->tok;
  if (r.kind != T_VALUE && r.kind != T_PARAM) return expected(p, "a value (%N, %input or @param)");
  next(p);
  if (!end_of_line(p)) return false;
  IrValue *v = resolve(p, r);
  IrLoc loc = tok_loc(p, name);
  if (redefined(p, &scope_outputs, name, 0, "output ")) return true;
  sym_add(&p->syms, &scope_outputs, name.s, name.len, NULL, loc);
  if (v && v != POISON) ir_add_output(p->g, tok_str(name), v);
  return true;
}

/* backward := 'backward' ':' — the nodes after it are backward nodes. */
static bool parse_backward(Parser *p) {
  IrLoc loc = tok_loc(p, p->tok);
  next(p);
  next(p);
  if (!end_of_line(p)) return false;
  if (p->phase == IR_PHASE_BACKWARD) {
    ir_error(loc, "a second 'backward:' line in one graph");
    ir_note(p->backward_at, "the backward nodes start here");
    return true;
  }
  p->phase = IR_PHASE_BACKWARD;
  p->backward_at = loc;
  return true;
}

/* stage := 'stage' INT ':' — the top-level nodes after it run on that
 * virtual stage (the verifier checks the range and the order). */
static bool parse_stage(Parser *p) {
  Token t = p->tok;
  next(p);
  int k = spec_int(p, "the virtual stage", 1 << 20);
  if (k < -1 || !expect(p, ':', "':'") || !end_of_line(p)) return false;
  if (p->g->parent) {
    ir_error(tok_loc(p, t), "'stage' is only allowed at the top level");
    return true;
  }
  if (k >= 0) p->stage = k;
  return true;
}

/* chunks := 'chunks' '=' INT  (model chunks per pipeline stage, top level) */
static bool parse_chunks(Parser *p) {
  Token t = p->tok;
  next(p);
  next(p);
  Token at = p->tok;
  int v = spec_int(p, "the chunk count", 1 << 15);
  if (v < -1 || !end_of_line(p)) return false;
  if (p->g->parent)
    ir_error(tok_loc(p, t), "'chunks' is only allowed at the top level");
  else if (v == 0)
    ir_error(tok_loc(p, at), "the chunk count must be positive");
  else if (p->g->vpp > 0)
    ir_error(tok_loc(p, t), "the chunk count is given twice");
  else if (v > 0)
    p->g->vpp = v;
  return true;
}

/* grad := 'grad' PARAM '=' ref */
static bool parse_grad(Parser *p) {
  next(p);
  Token name = p->tok;
  next(p);
  if (!expect(p, '=', "'='")) return false;
  Token r = p->tok;
  if (r.kind != T_VALUE && r.kind != T_PARAM) return expected(p, "a value (%N, %input or @param)");
  next(p);
  if (!end_of_line(p)) return false;
  IrValue *param = resolve(p, name), *v = resolve(p, r);
  if (!param || param == POISON || !v || v == POISON) return true;
  if (param->grad) {
    ir_error(tok_loc(p, name), "the gradient of %s is given twice", tok_desc(name));
    return true;
  }
  param->grad = v;
  return true;
}

/* line := config | mesh | chunks | input | param | output | yield | backward | stage | grad
 *       | node */
static bool parse_item(Parser *p) {
  Token t = p->tok;
  if (is_word(t, "mesh") && peek(p, 1).kind == T_IDENT && is_punct(peek(p, 2), '=')) {
    if (p->g->parent) {
      ir_error(tok_loc(p, t), "'mesh' is only allowed at the top level");
      return false;
    }
    return parse_mesh(p);
  }
  if (is_word(t, "backward") && is_punct(peek(p, 1), ':')) return parse_backward(p);
  if (is_word(t, "stage") && peek(p, 1).kind == T_INT) return parse_stage(p);
  if (is_word(t, "chunks") && is_punct(peek(p, 1), '=')) return parse_chunks(p);
  if (is_word(t, "grad") && peek(p, 1).kind == T_PARAM) return parse_grad(p);
  bool top = !p->g->parent;
  if (is_word(t, "config") || is_word(t, "input") || is_word(t, "output")) {
    if (!top) {
      ir_error(tok_loc(p, t), "%s is only allowed at the top level", tok_desc(t));
      return false;
    }
    if (t.s[0] == 'c') return parse_config(p);
    return t.s[0] == 'i' ? parse_input(p) : parse_output(p);
  }
  if (is_word(t, "yield")) {
    if (top) {
      ir_error(tok_loc(p, t), "'yield' outside a repeat body");
      return false;
    }
    return parse_yield(p);
  }
  if (is_word(t, "param")) return parse_param(p);
  if (t.kind == T_VALUE || t.kind == T_IDENT) return parse_node(p);
  return expected(p, "a declaration or a node");
}

/* module := 'model' NAME '{' line* '}' */
static void parse_module(Parser *p) {
  skip_eols(p);
  if (!is_word(p->tok, "model")) {
    expected(p, "'model'");
    return;
  }
  next(p);
  Token name = p->tok;
  if (name.kind != T_IDENT) {
    expected(p, "the model name");
    return;
  }
  next(p);
  if (!expect(p, '{', "'{'")) return;
  p->result = p->g = ir_graph_new(tok_str(name));
  if (!end_of_line(p)) skip_statement(p);
  parse_items(p);
  if (!expect(p, '}', "'}' at the end of the model")) return;
  skip_eols(p);
  if (p->tok.kind != T_EOF)
    ir_error(tok_loc(p, p->tok), "unexpected %s after the end of the model", tok_desc(p->tok));
}

IrGraph *ir_parse(const char *file, const char *text, size_t len) {
  if (!text) text = "";
  ir_diag_add_source(file, text, len);
  Parser *p = ir_alloc(sizeof *p);
  p->syms = (SymTab){.values.arena = true,
                     .configs.arena = true,
                     .outputs.arena = true,
                     .params.arena = true};
  p->file = ir_strdup(file);
  p->lx = (Lexer){text, len, 0, 1, 1, true};
  p->errors0 = ir_error_count();
  if (setjmp(p->abort) == 0) {
    next(p);
    parse_module(p);
  }
  return ir_error_count() > p->errors0 ? NULL : p->result;
}
