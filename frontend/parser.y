/* The grammar of the model language (docs/language.md; the rules: file,
 * item, type, init, expr, primary, args). The parser only builds the tree; lowering
 * checks meaning. Errors recover at the item level only: the parser skips to
 * the next keyword that starts a statement (or a closing brace), so one run
 * reports every syntax error. Recovering inside brackets as well would skip
 * to the next ')' anywhere in the file whenever one is missing. */
%define api.pure full
%define api.prefix {fe_yy}
%define parse.error custom
%define parse.lac full
%locations
%param {yyscan_t scanner}
%parse-param {FeParser *p}

%code requires {
#include "ast.h"
typedef void *yyscan_t;
}

%code provides {
int fe_yylex(FE_YYSTYPE *lval, FE_YYLTYPE *lloc, yyscan_t scanner);
}

%code {
#include <string.h>

static void fe_yyerror(FE_YYLTYPE *loc, yyscan_t scanner, FeParser *p, const char *msg);
#define LOC(l) fe_loc(p, (l).first_line, (l).first_column)
static AstExpr *leaf(FeParser *p, AstExprKind kind, FE_YYLTYPE loc);
static AstExpr *neg(FeParser *p, AstExpr *a, FE_YYLTYPE op_loc);
static AstExpr *list(FeParser *p, AstList *items, FE_YYLTYPE loc);
static AstExpr *binary(FeParser *p, char op, AstExpr *a, AstExpr *b, FE_YYLTYPE op_loc);
static AstExpr *call(FeParser *p, const char *inst, FE_YYLTYPE inst_loc, const char *name,
                     FE_YYLTYPE name_loc, AstList *args);
static AstStmt *named(FeParser *p, AstStmtKind k, FE_YYLTYPE loc, const char *name,
                      FE_YYLTYPE name_loc);
}

%union {
  int64_t i;
  double f;
  char *str;
  AstExpr *expr;
  AstStmt *stmt;
  AstList *list;
  AstArg *arg;
  AstPath *path;
  AstType type;
  AstInit init;
  AstShard shard;
}

%token MODEL "'model'" LET "'let'" INPUT "'input'" PARAM "'param'" BLOCK "'block'"
%token REPEAT "'repeat'" OUTPUT "'output'" RETURN "'return'" TRUE "'true'" FALSE "'false'"
%token SHARD_SPLIT "'split'" SHARD_REPLICATED "'replicated'"
%token <str> IDENT "name"
%token <i> INT "integer"
%token <f> FLOAT "number"

%type <stmt> item
%type <list> items names names_opt args_opt args exprs_opt exprs
%type <expr> expr primary
%type <arg> arg
%type <path> path
%type <type> type
%type <init> init
%type <shard> shard_opt

%left '+' '-'
%left '*' '/' '%'
%precedence NEG

%%

/* file := ('model' IDENT)? item* */
file
  : items                   { p->ast->items = (AstStmt **)$1->v.items; p->ast->nitems = $1->v.len; }
  | MODEL IDENT items       {
                              p->ast->model = $2;
                              p->ast->model_loc = LOC(@2);
                              p->ast->items = (AstStmt **)$3->v.items;
                              p->ast->nitems = $3->v.len;
                            }
  ;

items
  : %empty                  { $$ = ast_list_new(); }
  | items item              { $$ = $1; if ($2) ast_list_push($$, $2); }
  ;

/* item := let | assignment | input | param | block | repeat | output | return | ';' */
item
  : LET names '=' expr      { $$ = ast_stmt(AST_LET, LOC(@1)); ast_set_names($$, $2); $$->e = $4; }
  | IDENT '=' expr          { $$ = named(p, AST_ASSIGN, @1, $1, @1); $$->e = $3; }
  | INPUT IDENT ':' type    { $$ = named(p, AST_INPUT, @1, $2, @2); $$->type = $4; }
  | PARAM path ':' type '=' init shard_opt {
                              $$ = named(p, AST_PARAM, @1, $2->buf, @2);
                              $$->type = $4;
                              $$->init = $6;
                              $$->shard = $7;
                            }
  | BLOCK IDENT '(' names_opt ')' '{' items '}' {
                              $$ = named(p, AST_BLOCK, @1, $2, @2);
                              ast_set_params($$, $4);
                              ast_set_body($$, $7);
                              $$->end_loc = LOC(@8);
                            }
  | REPEAT IDENT '[' expr ']' '{' items '}' {
                              $$ = named(p, AST_REPEAT, @1, $2, @2);
                              $$->e = $4;
                              ast_set_body($$, $7);
                              $$->end_loc = LOC(@8);
                            }
  | OUTPUT IDENT '=' expr   { $$ = named(p, AST_OUTPUT, @1, $2, @2); $$->e = $4; }
  | RETURN expr             { $$ = ast_stmt(AST_RETURN, LOC(@1)); $$->e = $2; }
  | ';'                     { $$ = NULL; }
  | error                   { $$ = NULL; }
  ;

names
  : IDENT                   { $$ = ast_list_new(); ast_list_push_name($$, $1, LOC(@1)); }
  | names ',' IDENT         { $$ = $1; if (!p->errors) ast_list_push_name($$, $3, LOC(@3)); }
  ;

names_opt
  : %empty                  { $$ = ast_list_new(); }
  | names
  ;

/* path := IDENT ('.' IDENT)* */
path
  : IDENT                   { $$ = ast_path_new($1); }
  | path '.' IDENT          { $$ = $1; if (!p->errors) ast_path_append($$, $3); }
  ;

/* type := (DTYPE)? '[' expr (',' expr)* ']' */
type
  : '[' exprs ']'           {
                              $$ = (AstType){0};
                              $$.dims = ast_exprs_array($2, &$$.ndims);
                              $$.loc = LOC(@1);
                            }
  | IDENT '[' exprs ']'     {
                              $$ = (AstType){0};
                              $$.dtype = $1;
                              $$.dtype_loc = LOC(@1);
                              $$.dims = ast_exprs_array($3, &$$.ndims);
                              $$.loc = LOC(@1);
                            }
  ;

/* init := 'zeros' | 'ones' | 'normal' '(' expr ',' expr ')' */
init
  : IDENT                   { $$ = (AstInit){.kind = $1, .loc = LOC(@1)}; }
  | IDENT '(' args_opt ')'  {
                              $$ = (AstInit){.kind = $1, .loc = LOC(@1), .call = true};
                              $$.args = ast_args_array($3, &$$.nargs);
                            }
  ;

/* shard := ('split' '(' args ')' | 'replicated')?  (after a param's init) */
shard_opt
  : %empty                  { $$ = (AstShard){0}; }
  | SHARD_SPLIT '(' args_opt ')' {
                              $$ = (AstShard){.kind = AST_SHARD_SPLIT, .loc = LOC(@1)};
                              $$.args = ast_args_array($3, &$$.nargs);
                            }
  | SHARD_REPLICATED        { $$ = (AstShard){.kind = AST_SHARD_REPLICATED, .loc = LOC(@1)}; }
  ;

/* expr := binary with + - (lowest), * / %, unary -, then primary */
expr
  : expr '+' expr           { $$ = binary(p, '+', $1, $3, @2); }
  | expr '-' expr           { $$ = binary(p, '-', $1, $3, @2); }
  | expr '*' expr           { $$ = binary(p, '*', $1, $3, @2); }
  | expr '/' expr           { $$ = binary(p, '/', $1, $3, @2); }
  | expr '%' expr           { $$ = binary(p, '%', $1, $3, @2); }
  | '-' expr %prec NEG      { $$ = neg(p, $2, @1); }
  | primary
  ;

/* primary := INT | FLOAT | 'true' | 'false' | path | IDENT '(' args ')'
 *          | IDENT ':' IDENT '(' args ')' | '(' expr ')' | '[' expr, ... ']' */
primary
  : INT                     { $$ = leaf(p, AST_INT, @1); $$->i = $1; }
  | FLOAT                   { $$ = leaf(p, AST_FLOAT, @1); $$->f = $1; }
  | TRUE                    { $$ = leaf(p, AST_BOOL, @1); $$->i = 1; }
  | FALSE                   { $$ = leaf(p, AST_BOOL, @1); $$->i = 0; }
  | path                    { $$ = leaf(p, AST_NAME, @1); $$->name = $1->buf; }
  | IDENT '(' args_opt ')'  { $$ = call(p, NULL, @1, $1, @1, $3); }
  | IDENT ':' IDENT '(' args_opt ')' { $$ = call(p, $1, @1, $3, @3, $5); }
  | '(' expr ')'            { $$ = $2; }
  | '[' exprs_opt ']'       { $$ = list(p, $2, @1); }
  ;

/* args := (expr | IDENT '=' expr) (',' ...)* */
args_opt
  : %empty                  { $$ = ast_list_new(); }
  | args
  ;

args
  : arg                     { $$ = ast_list_new(); ast_list_push($$, $1); }
  | args ',' arg            { $$ = $1; if (!p->errors) ast_list_push($$, $3); }
  ;

arg
  : expr                    { $$ = ast_arg(NULL, (IrLoc){0}, $1); }
  | IDENT '=' expr          { $$ = ast_arg($1, LOC(@1), $3); }
  ;

exprs_opt
  : %empty                  { $$ = ast_list_new(); }
  | exprs
  ;

exprs
  : expr                    { $$ = ast_list_new(); ast_list_push($$, $1); }
  | exprs ',' expr          { $$ = $1; if (!p->errors) ast_list_push($$, $3); }
  ;

%%

/* After the first error the tree is never lowered, so every expression
 * becomes one shared dummy: a 10 MB file of junk then costs no memory. */
static AstExpr *dead(FeParser *p) {
  if (!p->dummy) p->dummy = ast_expr(AST_INT, (IrLoc){0});
  return p->dummy;
}

static AstExpr *leaf(FeParser *p, AstExprKind kind, FE_YYLTYPE loc) {
  if (p->errors) return dead(p);
  AstExpr *e = ast_expr(kind, LOC(loc));
  e->depth = 1;
  return e;
}

/* Gives e the depth of its deepest child plus one, or reports it and
 * returns the dummy when that passes the limit: a chain a+a+...+a keeps
 * the parser's stack flat but would make the tree arbitrarily deep. */
static AstExpr *deepen(FeParser *p, AstExpr *e, int child_depth) {
  e->depth = child_depth + 1;
  if (e->depth <= FE_MAX_DEPTH) return e;
  ir_error(e->loc, "expression nests too deeply (more than %d levels)", FE_MAX_DEPTH);
  p->errors++;
  return dead(p);
}

static AstExpr *binary(FeParser *p, char op, AstExpr *a, AstExpr *b, FE_YYLTYPE op_loc) {
  if (p->errors) return dead(p);
  AstExpr *e = ast_expr(AST_BINARY, a->loc);
  e->op = op;
  e->op_loc = LOC(op_loc);
  e->a = a;
  e->b = b;
  /* a + b + c is a left chain: one level above its deepest term, however
   * long, so that a sum of a thousand terms is not "nested" a thousand
   * deep; its length has a limit of its own. */
  if (a->kind == AST_BINARY && fe_same_group(a->op, op)) {
    e->chain = a->chain + 1;
    if (e->chain >= FE_MAX_CHAIN) {
      ir_error(e->loc, "expression chains more than %d terms", FE_MAX_CHAIN);
      p->errors++;
      return dead(p);
    }
    e->depth = a->depth > b->depth + 1 ? a->depth : b->depth + 1;
    return e;
  }
  e->chain = 1;
  return deepen(p, e, a->depth > b->depth ? a->depth : b->depth);
}

static AstExpr *neg(FeParser *p, AstExpr *a, FE_YYLTYPE op_loc) {
  if (p->errors) return dead(p);
  AstExpr *e = ast_expr(AST_NEG, LOC(op_loc));
  e->a = a;
  return deepen(p, e, a->depth);
}

static int max_depth(const AstArg *args, int n) {
  int d = 0;
  for (int i = 0; i < n; i++)
    if (args[i].e->depth > d) d = args[i].e->depth;
  return d;
}

static AstExpr *list(FeParser *p, AstList *items, FE_YYLTYPE loc) {
  if (p->errors) return dead(p);
  AstExpr *e = ast_expr(AST_LIST, LOC(loc));
  int n;
  AstExpr **exprs = ast_exprs_array(items, &n);
  e->args = ir_alloc(sizeof(AstArg) * (size_t)(n ? n : 1));
  e->nargs = n;
  for (int i = 0; i < n; i++) e->args[i].e = exprs[i];
  return deepen(p, e, max_depth(e->args, n));
}

static AstExpr *call(FeParser *p, const char *inst, FE_YYLTYPE inst_loc, const char *name,
                     FE_YYLTYPE name_loc, AstList *args) {
  if (p->errors) return dead(p);
  AstExpr *e = ast_expr(AST_CALL, LOC(inst ? inst_loc : name_loc));
  e->op_loc = LOC(name_loc);
  e->inst = inst;
  e->inst_loc = LOC(inst_loc);
  e->name = name;
  ast_set_args(e, args);
  return deepen(p, e, max_depth(e->args, e->nargs));
}

static AstStmt *named(FeParser *p, AstStmtKind k, FE_YYLTYPE loc, const char *name,
                      FE_YYLTYPE name_loc) {
  AstStmt *s = ast_stmt(k, LOC(loc));
  AstList *l = ast_list_new();
  ast_list_push_name(l, name, LOC(name_loc));
  ast_set_names(s, l);
  return s;
}

/* Tokens that would only lengthen an "expected ..." list: the operators and
 * call punctuation that may follow any expression, and the keywords that
 * start a statement (a statement may follow almost anything). */
static bool is_noise(yysymbol_kind_t k) {
  const char *name = yysymbol_name(k);
  static const char *const noise[] = {"'+'", "'-'", "'*'", "'/'", "'%'", "'.'", "'('", "':'",
                                      "'let'", "'input'", "'param'", "'block'", "'repeat'",
                                      "'output'", "'return'", "';'", "end of file", "'split'",
                                      "'replicated'"};
  for (size_t i = 0; i < sizeof noise / sizeof noise[0]; i++)
    if (strcmp(name, noise[i]) == 0) return true;
  return false;
}

/* How an expected token reads in a message. */
static const char *expected_name(yysymbol_kind_t k) {
  if (k == YYSYMBOL_IDENT) return "a name";
  if (k == YYSYMBOL_INT) return "an integer";
  if (k == YYSYMBOL_FLOAT) return "a number";
  return yysymbol_name(k);
}

static bool is_expr_start(yysymbol_kind_t k) {
  const char *name = yysymbol_name(k);
  return k == YYSYMBOL_INT || k == YYSYMBOL_FLOAT || k == YYSYMBOL_TRUE || k == YYSYMBOL_FALSE ||
         k == YYSYMBOL_IDENT || strcmp(name, "'['") == 0 || strcmp(name, "'('") == 0 ||
         strcmp(name, "'-'") == 0;
}

/* Fills `shown` with what to list after "expected": the tokens less the
 * noise (unless only noise is left), an expression's many possible first
 * tokens summarised as "an expression". Returns the count. */
static int expected_list(const yysymbol_kind_t *exp, int n, bool filter, const char **shown) {
  bool expr_start = false, stmt_start = false;
  int nshown = 0;
  for (int i = 0; i < n; i++) {
    if (exp[i] == YYSYMBOL_INT) expr_start = true;
    if (exp[i] == YYSYMBOL_LET) stmt_start = true;
  }
  for (int i = 0; i < n && nshown < 16; i++) {
    if (expr_start && is_expr_start(exp[i])) continue;
    /* Where a statement may start, a name may be an assignment. */
    if (filter && (is_noise(exp[i]) || (stmt_start && exp[i] == YYSYMBOL_IDENT))) continue;
    shown[nshown++] = expected_name(exp[i]);
  }
  if (expr_start) shown[nshown++] = "an expression";
  return nshown;
}

/* "unexpected X; expected A, B or C". */
static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, FeParser *p) {
  (void)scanner;
  enum { MAX = 64 };
  yysymbol_kind_t exp[MAX];
  const char *shown[MAX];
  int n = yypcontext_expected_tokens(ctx, exp, MAX);
  int nshown = expected_list(exp, n, true, shown);
  if (nshown == 0) nshown = expected_list(exp, n, false, shown);
  yysymbol_kind_t tok = yypcontext_token(ctx);
  const char *unexpected;
  if (tok == YYSYMBOL_YYEOF)
    unexpected = "end of file";
  else if (tok == YYSYMBOL_IDENT || tok == YYSYMBOL_INT || tok == YYSYMBOL_FLOAT)
    unexpected = ir_fmt("%s '%s'", yysymbol_name(tok), p->last_text);
  else
    unexpected = yysymbol_name(tok);
  IrLoc loc = LOC(*yypcontext_location(ctx));
  p->errors++;
  if (nshown == 0 || nshown > 5) {
    ir_error(loc, "syntax error: unexpected %s", unexpected);
    return 0;
  }
  char *list = ir_fmt("%s", shown[0]);
  for (int i = 1; i < nshown; i++)
    list = ir_fmt("%s%s%s", list, i == nshown - 1 ? " or " : ", ", shown[i]);
  ir_error(loc, "syntax error: unexpected %s; expected %s", unexpected, list);
  return 0;
}

/* Bison calls this only for its own failures; running out of stack means
 * the input nests brackets or blocks deeper than any model does. */
static void fe_yyerror(FE_YYLTYPE *loc, yyscan_t scanner, FeParser *p, const char *msg) {
  (void)scanner;
  p->errors++;
  if (strcmp(msg, "memory exhausted") == 0)
    ir_error(LOC(*loc), "nesting too deep");
  else
    ir_error(LOC(*loc), "%s", msg);
}
