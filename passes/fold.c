/* The `fold` pass: evaluates the config table, then every expression of
 * the graph (dims, initialiser numbers, attributes, repeat counts, nested
 * bodies included) to literals, and fills IrType.shape[] from the dims.
 *
 * Arithmetic on two integers stays integral, so that shapes stay exact: an
 * integer division must divide evenly (770 hidden units over 12 heads is a
 * mistake, not 64.17 units per head), and overflow is an error rather than a
 * wrapped dimension. A float anywhere makes the result a float. Every error
 * is reported; an expression that uses a config value that failed stays
 * unevaluated without a second message. Also here: pass_eval_expr, the
 * same evaluator for the driver, and pass_override_config for -D. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../abi/suggest.h"
#include "passes.h"

/* Config values nested deeper than this (only possible when evaluating an
 * unfolded table) or expressions nested deeper are refused, not recursed. */
#define MAX_DEPTH 2000

/* Config names map to their index + 1, so that a model with many config
 * values folds in linear time. */
typedef struct Env {
  IrGraph *top;
  IrStrMap index;     /* config name -> index + 1, in the arena */
  int limit;          /* configs below this index are visible */
  const bool *failed; /* configs whose evaluation failed (fold only) */
  int depth;
} Env;

/* The first definition of a name wins; the verifier reports duplicates. */
static void index_build(IrStrMap *ix, const IrVec *configs) {
  *ix = (IrStrMap){.arena = true};
  for (int i = 0; i < configs->len; i++)
    ir_strmap_add(ix, ((IrConfig *)configs->items[i])->name, (void *)(intptr_t)(i + 1));
}

static int index_find(const IrStrMap *ix, const char *name) {
  return (int)(intptr_t)ir_strmap_get(ix, name) - 1;
}

static void env_init(Env *env, IrGraph *g) {
  memset(env, 0, sizeof *env);
  env->top = ir_top(g);
  index_build(&env->index, &env->top->configs);
  env->limit = env->top->configs.len;
}

/* ------------------------------------------------------------- messages */

/* An expression as text for a message, cut short when a generated model
 * holds a huge one. */
static char *num_str(PassNum v);

static char *expr_str(const IrExpr *e) {
  char *s = ir_expr_str(e);
  if (strlen(s) > 80) strcpy(s + 72, " ...");
  return s;
}

/* An operation as the user wrote it, without the outer parentheses the
 * printer adds: "hidden / heads". */
static char *op_str(const IrExpr *e) {
  static const char *ops[] = {[IR_EX_ADD] = "+",
                              [IR_EX_SUB] = "-",
                              [IR_EX_MUL] = "*",
                              [IR_EX_DIV] = "/",
                              [IR_EX_MOD] = "%"};
  if (e->kind == IR_EX_NEG) return ir_fmt("-%s", expr_str(e->a));
  if (e->kind < IR_EX_ADD || e->kind > IR_EX_MOD) return expr_str(e);
  return ir_fmt("%s %s %s", expr_str(e->a), ops[e->kind], expr_str(e->b));
}

/* ": 770 / 12", the values of the operands, unless they are written as
 * literals already and the message would only repeat them. */
static char *values_str(const IrExpr *e, PassNum a, PassNum b) {
  if (ir_expr_is_literal(e->a) && (e->kind == IR_EX_NEG || ir_expr_is_literal(e->b))) return "";
  if (e->kind == IR_EX_NEG) return ir_fmt(": -(%s)", num_str(a));
  IrExpr op = *e;
  op.a = a.is_float ? ir_expr_float(a.f, e->loc) : ir_expr_int(a.i, e->loc);
  op.b = b.is_float ? ir_expr_float(b.f, e->loc) : ir_expr_int(b.i, e->loc);
  return ir_fmt(": %s", op_str(&op));
}

static char *num_str(PassNum v) {
  IrExpr *e = v.is_float ? ir_expr_float(v.f, (IrLoc){0}) : ir_expr_int(v.i, (IrLoc){0});
  return expr_str(e);
}

/* "; did you mean 'hidden'?" when a config name is within a third of the
 * name's length in edits, else "". Long names, and errors past the ones
 * that get printed, are not compared, so that a generated file with many
 * thousands of bad names still fails fast. */
static const char *suggest_config(IrGraph *top, const char *name) {
  int len = (int)strlen(name), best_d = (len + 2) / 3;
  if (len > 32 || ir_error_count() >= IR_MAX_ERRORS) return "";
  const char *best = NULL;
  for (int i = 0; i < top->configs.len; i++) {
    const char *c = ((IrConfig *)top->configs.items[i])->name;
    int lc = (int)strlen(c);
    if (lc > 32 || abs(lc - len) > best_d) continue;
    int d = suggest_distance(name, len, c, lc, 1);
    if (d <= best_d && (!best || d < best_d)) {
      best = c;
      best_d = d;
    }
  }
  return best ? ir_fmt("; did you mean '%s'?", best) : "";
}

/* ----------------------------------------------------------- evaluation */

static bool eval(Env *env, const IrExpr *e, PassNum *out);

static PassNum num_int(int64_t i) { return (PassNum){false, i, 0}; }
static PassNum num_float(double f) { return (PassNum){true, 0, f}; }
static double as_float(PassNum v) { return v.is_float ? v.f : (double)v.i; }

/* A config value: visible only when defined before the one being folded. */
static bool eval_name(Env *env, const IrExpr *e, PassNum *out) {
  int j = index_find(&env->index, e->name);
  if (j < 0) {
    ir_error(e->loc, "undefined config value '%s'%s", e->name, suggest_config(env->top, e->name));
    return false;
  }
  IrConfig *c = env->top->configs.items[j];
  if (j >= env->limit) {
    ir_error(e->loc, "config value '%s' is used before it is defined", e->name);
    ir_note(c->loc, "'%s' is defined here", e->name);
    return false;
  }
  if (env->failed && env->failed[j]) return false;
  if (c->expr->kind == IR_EX_LIST) {
    ir_error(e->loc, "config value '%s' is a list; a number is expected here", e->name);
    return false;
  }
  /* Unfolded (pass_eval_expr before fold): evaluate it where it stands. */
  Env sub = *env;
  sub.limit = j;
  return eval(&sub, c->expr, out);
}

/* A float result that left the finite range although its operands were in
 * it (1e308 * 10, exp(1000)) is reported: no dim or init should be inf. */
static bool finite_result(const IrExpr *e, double x, double y, double r) {
  if (isfinite(r) || !isfinite(x) || !isfinite(y)) return true;
  ir_error(e->loc, "floating-point overflow in %s", op_str(e));
  return false;
}

/* Integer + - * with overflow checks; a float operand makes a float. */
static bool eval_arith(const IrExpr *e, PassNum a, PassNum b, PassNum *out) {
  if (!a.is_float && !b.is_float) {
    int64_t r;
    bool ovf = e->kind == IR_EX_ADD   ? __builtin_add_overflow(a.i, b.i, &r)
               : e->kind == IR_EX_SUB ? __builtin_sub_overflow(a.i, b.i, &r)
                                      : __builtin_mul_overflow(a.i, b.i, &r);
    if (ovf) {
      ir_error(e->loc, "integer overflow in %s%s", op_str(e), values_str(e, a, b));
      return false;
    }
    *out = num_int(r);
    return true;
  }
  double x = as_float(a), y = as_float(b);
  *out = num_float(e->kind == IR_EX_ADD ? x + y : e->kind == IR_EX_SUB ? x - y : x * y);
  return finite_result(e, x, y, out->f);
}

/* `/` and `%`: integer division must be exact, and nothing divides by 0. */
static bool eval_div(const IrExpr *e, PassNum a, PassNum b, PassNum *out) {
  bool div = e->kind == IR_EX_DIV;
  if (b.is_float ? b.f == 0 : b.i == 0) {
    ir_error(e->loc, "%s by zero in %s%s", div ? "division" : "modulo", op_str(e),
             values_str(e, a, b));
    return false;
  }
  if (a.is_float || b.is_float) {
    double x = as_float(a), y = as_float(b);
    *out = num_float(div ? x / y : fmod(x, y));
    return finite_result(e, x, y, out->f);
  }
  if (a.i == INT64_MIN && b.i == -1) { /* the one quotient that overflows */
    if (!div) {
      *out = num_int(0);
      return true;
    }
    ir_error(e->loc, "integer overflow in %s%s", op_str(e), values_str(e, a, b));
    return false;
  }
  if (div && a.i % b.i != 0) {
    ir_error(e->loc, "%s does not divide evenly%s", op_str(e), values_str(e, a, b));
    return false;
  }
  *out = num_int(div ? a.i / b.i : a.i % b.i);
  return true;
}

/* sqrt exp log pow give floats; min and max of integers stay integers;
 * int truncates toward zero, as Python's int() does, so that a fraction of
 * a dimension (int(head_dim * rotary_pct)) can be a dimension. */
static bool eval_call(Env *env, const IrExpr *e, PassNum *out) {
  static const struct {
    const char *name;
    int nargs;
  } fns[] = {{"sqrt", 1}, {"exp", 1}, {"log", 1}, {"pow", 2}, {"min", 2}, {"max", 2}, {"int", 1}};
  int f = -1;
  for (int i = 0; i < (int)(sizeof fns / sizeof fns[0]); i++)
    if (strcmp(fns[i].name, e->name) == 0) f = i;
  if (f < 0) {
    ir_error(e->loc, "unknown function '%s' (the functions are sqrt, exp, log, pow, min, max, int)",
             e->name);
    return false;
  }
  if (e->nargs != fns[f].nargs) {
    ir_error(e->loc, "%s takes %d argument%s, got %d", e->name, fns[f].nargs,
             fns[f].nargs == 1 ? "" : "s", e->nargs);
    return false;
  }
  PassNum a[2];
  bool ok = true;
  for (int i = 0; i < e->nargs; i++) ok = eval(env, e->args[i], &a[i]) && ok;
  if (!ok) return false;
  if (f == 6) {
    if (!a[0].is_float) {
      *out = a[0];
      return true;
    }
    double t = trunc(a[0].f);
    if (!(t >= -9.2e18 && t <= 9.2e18)) {
      ir_error(e->loc, "int of %s does not fit a 64-bit integer", num_str(a[0]));
      return false;
    }
    *out = num_int((int64_t)t);
    return true;
  }
  if (f >= 4 && !a[0].is_float && !a[1].is_float) {
    bool lt = a[0].i < a[1].i;
    *out = num_int((f == 4) == lt ? a[0].i : a[1].i);
    return true;
  }
  double x = as_float(a[0]), y = e->nargs > 1 ? as_float(a[1]) : 0;
  if ((f == 0 && x < 0) || (f == 2 && x <= 0)) {
    ir_error(e->loc, "%s of %s is not a real number", e->name, num_str(a[0]));
    return false;
  }
  double r = f == 0   ? sqrt(x)
             : f == 1 ? exp(x)
             : f == 2 ? log(x)
             : f == 3 ? pow(x, y)
             : f == 4 ? fmin(x, y)
                      : fmax(x, y);
  *out = num_float(r);
  return finite_result(e, x, y, r);
}

static bool eval(Env *env, const IrExpr *e, PassNum *out);

static bool is_binary(IrExprKind k) { return k >= IR_EX_ADD && k <= IR_EX_MOD; }

static bool eval_binary(const IrExpr *e, PassNum a, PassNum b, PassNum *out) {
  return e->kind == IR_EX_DIV || e->kind == IR_EX_MOD ? eval_div(e, a, b, out)
                                                      : eval_arith(e, a, b, out);
}

/* A left chain ((a + b) - c) * ..., as the frontend and the reader of
 * printed IR build a flat sum, is evaluated in a loop down its left
 * operands, left to right as the recursion would (the same operations in
 * the same order), so that its length costs one level, not one per term.
 * Every term is evaluated, so that each error in it is reported. */
static bool eval_chain(Env *env, const IrExpr *e, PassNum *out) {
  int n = 1;
  for (const IrExpr *x = e; is_binary(x->a->kind); x = x->a) n++;
  const IrExpr *small[16], **link = small;
  if (n > 16 && !(link = malloc(sizeof *link * (size_t)n))) die("out of memory");
  link[n - 1] = e;
  for (int k = n - 1; k > 0; k--) link[k - 1] = link[k]->a;
  PassNum acc, b;
  bool ok = eval(env, link[0]->a, &acc);
  for (int k = 0; k < n; k++) {
    bool ok_b = eval(env, link[k]->b, &b);
    ok = ok && ok_b && eval_binary(link[k], acc, b, &acc);
  }
  if (link != small) free(link);
  if (ok) *out = acc;
  return ok;
}

static bool eval(Env *env, const IrExpr *e, PassNum *out) {
  if (env->depth >= MAX_DEPTH) {
    ir_error(e->loc, "expression nested too deeply (more than %d levels)", MAX_DEPTH);
    return false;
  }
  env->depth++;
  PassNum a;
  bool ok = true;
  switch (e->kind) {
  case IR_EX_INT: *out = num_int(e->i); break;
  case IR_EX_FLOAT: *out = num_float(e->f); break;
  case IR_EX_NAME: ok = eval_name(env, e, out); break;
  case IR_EX_NEG:
    ok = eval(env, e->a, &a);
    if (ok && !a.is_float && a.i == INT64_MIN) {
      ir_error(e->loc, "integer overflow in %s%s", op_str(e), values_str(e, a, a));
      ok = false;
    }
    if (ok) *out = a.is_float ? num_float(-a.f) : num_int(-a.i);
    break;
  case IR_EX_ADD:
  case IR_EX_SUB:
  case IR_EX_MUL:
  case IR_EX_DIV:
  case IR_EX_MOD: ok = eval_chain(env, e, out); break;
  case IR_EX_CALL: ok = eval_call(env, e, out); break;
  case IR_EX_LIST:
    ir_error(e->loc, "a list %s where a number is expected", expr_str(e));
    ok = false;
    break;
  }
  env->depth--;
  return ok;
}

bool pass_eval_expr(IrGraph *g, const IrExpr *e, PassNum *out) {
  Env env;
  env_init(&env, g);
  return eval(&env, e, out);
}

/* An expression as a literal: a number, or a list folded element by
 * element (reshape's shape). NULL after an error. */
static IrExpr *fold_expr(Env *env, const IrExpr *e) {
  if (e->kind == IR_EX_LIST) {
    if (env->depth >= MAX_DEPTH) {
      ir_error(e->loc, "list nested too deeply (more than %d levels)", MAX_DEPTH);
      return NULL;
    }
    env->depth++;
    IrExpr **items = ir_alloc(sizeof(IrExpr *) * (size_t)(e->nargs ? e->nargs : 1));
    bool ok = true;
    for (int i = 0; i < e->nargs; i++) ok = (items[i] = fold_expr(env, e->args[i])) && ok;
    env->depth--;
    return ok ? ir_expr_list(items, e->nargs, e->loc) : NULL;
  }
  if (e->kind == IR_EX_NAME) { /* a config that holds a list stands for it */
    int j = index_find(&env->index, e->name);
    IrConfig *c = j >= 0 && j < env->limit ? env->top->configs.items[j] : NULL;
    if (c && c->expr->kind == IR_EX_LIST && !(env->failed && env->failed[j]))
      return fold_expr(env, c->expr);
  }
  PassNum v;
  if (!eval(env, e, &v)) return NULL;
  return v.is_float ? ir_expr_float(v.f, e->loc) : ir_expr_int(v.i, e->loc);
}

/* ----------------------------------------------------------- the graph */

/* A number (no list) as a literal; NULL after an error. */
static IrExpr *fold_number(Env *env, const IrExpr *e) {
  PassNum v;
  if (!eval(env, e, &v)) return NULL;
  return v.is_float ? ir_expr_float(v.f, e->loc) : ir_expr_int(v.i, e->loc);
}

/* Folds a number that must be a positive integer (a dim, a repeat count). */
static IrExpr *fold_positive(Env *env, IrExpr *e, const char *what) {
  IrExpr *v = fold_number(env, e);
  if (!v) return NULL;
  if (v->kind == IR_EX_INT && v->i > 0) return v;
  ir_error(e->loc, "%s must be a positive integer, got %s", what, expr_str(v));
  return NULL;
}

static void fold_type(Env *env, IrType *t) {
  for (int i = 0; i < t->rank; i++) {
    if (!t->dims[i]) continue;
    IrExpr *v = fold_positive(env, t->dims[i], "dimension");
    if (!v) continue;
    t->dims[i] = v;
    t->shape[i] = v->i;
  }
}

static void fold_values(Env *env, IrVec *values) {
  for (int i = 0; i < values->len; i++) fold_type(env, &((IrValue *)values->items[i])->type);
}

static void fold_init(Env *env, IrInit *init) {
  if (init->kind != IR_INIT_NORMAL) return;
  IrExpr *mean = init->mean ? fold_number(env, init->mean) : NULL;
  IrExpr *std = init->std ? fold_number(env, init->std) : NULL;
  if (mean) init->mean = mean;
  if (!std) return;
  if (std->kind == IR_EX_FLOAT ? !(std->f >= 0) : std->i < 0) {
    ir_error(init->std->loc, "normal: std must be a non-negative number, got %s", expr_str(std));
    return;
  }
  init->std = std;
}

static void fold_graph(Env *env, IrGraph *g);

static void fold_node(Env *env, IrNode *n) {
  for (int i = 0; i < n->nattr; i++) {
    IrAttr *a = &n->attrs[i];
    if (!a->expr) continue;
    bool count = n->op == IR_OP_REPEAT && strcmp(a->name, "count") == 0;
    IrExpr *v = count ? fold_positive(env, a->expr, "repeat count") : fold_expr(env, a->expr);
    if (v) a->expr = v;
  }
  for (int i = 0; i < n->nout; i++) fold_type(env, &n->out[i]->type);
  if (n->body) fold_graph(env, n->body);
}

static void fold_graph(Env *env, IrGraph *g) {
  fold_values(env, &g->inputs);
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i];
    fold_type(env, &p->type);
    fold_init(env, &p->init);
  }
  fold_values(env, &g->args);
  for (int i = 0; i < g->nodes.len; i++) fold_node(env, g->nodes.items[i]);
}

/* Config values fold in order, each seeing only those before it, so the
 * table reads top to bottom and cannot be circular. */
bool pass_fold(IrGraph **gp, const PassOptions *opt) {
  (void)opt;
  int before = ir_error_count();
  Env env;
  env_init(&env, *gp);
  IrVec *configs = &env.top->configs;
  bool *failed = ir_alloc(sizeof(bool) * (size_t)(configs->len ? configs->len : 1));
  env.failed = failed;
  for (int i = 0; i < configs->len; i++) {
    IrConfig *c = configs->items[i];
    env.limit = i;
    IrExpr *v = fold_expr(&env, c->expr);
    if (v)
      c->expr = v;
    else
      failed[i] = true;
  }
  env.limit = configs->len;
  fold_graph(&env, env.top);
  return ir_error_count() == before;
}

/* ------------------------------------------------------------------ -D */

/* VALUE is a number (an integer such as 768 or a float such as 1e-5, as
 * the source would write it) or true/false; anything else is refused
 * rather than guessed at. */
static bool parse_number(const char *s, IrLoc where, IrExpr **out) {
  if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0) {
    *out = ir_expr_int(s[0] == 't', where);
    return true;
  }
  size_t len = strlen(s);
  char *end;
  if (len > 0 && strspn(s, "+-0123456789.eE") == len) {
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (!*end && errno == 0) {
      *out = ir_expr_int(i, where);
      return true;
    }
    bool integral = !*end;
    errno = 0;
    double f = strtod(s, &end);
    if (!*end && errno == 0 && !integral) {
      *out = ir_expr_float(f, where);
      return true;
    }
    if (!*end) {
      ir_error(where, "%s is out of range", s);
      return false;
    }
  }
  ir_error(where, "'%s' is not a number (expected an integer such as 768 or a float such as 1e-5)",
           s);
  return false;
}

bool pass_override_config(IrGraph *g, const char *name, const char *value, IrLoc where) {
  IrGraph *top = ir_top(g);
  IrConfig *c = ir_find_config(top, name);
  if (!c) {
    ir_error(where, "the model has no config value '%s'%s", name, suggest_config(top, name));
    return false;
  }
  IrExpr *e;
  if (!parse_number(value, where, &e)) return false;
  c->expr = e;
  c->overridden = true;
  return true;
}
