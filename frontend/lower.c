/* Lowering: the syntax tree of a .shard file to an IrGraph.
 *
 * Static expressions (numbers, config names, math) stay symbolic IrExpr
 * trees for the fold pass; tensor expressions become nodes. Blocks are
 * inlined at each call with their instance prefix; a repeat lowers its body
 * once into a nested graph whose arguments are the outer tensors it reads
 * (carried when it also reassigns them).
 *
 * Every error is reported where it happens and lowering goes on with a
 * poison value (V_ERR) that silences the errors it would cause downstream,
 * so that one run reports each real mistake once. Errors are also
 * deduplicated by location and text because a block called several times
 * would otherwise repeat its own mistakes at each call. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../abi/suggest.h"
#include "ast.h"

/* Deeper than any model nests; keeps the C stack safe on adversarial
 * inputs such as `1+1+...+1` with a million terms. */
enum { MAX_DEPTH = FE_MAX_DEPTH, MAX_EXPR_DEPTH = FE_MAX_DEPTH, MAX_REPORTED = 4096 };

typedef enum ValKind { V_ERR, V_STATIC, V_TENSOR, V_MULTI } ValKind;

/* The value of an expression: a symbolic number, one tensor, or the several
 * outputs of a multi-output op being destructured. */
typedef struct Val {
  ValKind kind;
  IrExpr *e;  /* V_STATIC */
  int depth;  /* V_STATIC: nesting of e, bounded by MAX_EXPR_DEPTH */
  IrValue *t; /* V_TENSOR */
  IrValue **multi;
  int nmulti;
} Val;

typedef enum SymKind { SYM_VAR, SYM_CONST, SYM_PARAM } SymKind;

typedef struct Capture Capture;

typedef struct Sym {
  const char *name;
  SymKind kind;
  Val val;
  IrLoc loc;
  Capture *cap; /* a repeat body's stand-in for an outer tensor */
  bool outer;   /* a repeat body's view of an outer value */
} Sym;

/* An outer tensor that a repeat body uses: `arg` stands for it inside the
 * body; `carried` once the body reassigns it. */
struct Capture {
  const char *name;
  IrValue *outer;
  IrValue *arg;
  bool carried;
  Sym *proxy;
};

typedef struct Block {
  AstStmt *def;
  IrStrMap params; /* parameter name -> index + 1 */
  bool active;     /* being inlined: calling it again is recursion */
  bool called;
} Block;

typedef struct Scope Scope;
struct Scope {
  Scope *parent;      /* repeat bodies: the enclosing scope, reached by capture */
  IrVec syms;         /* Sym*, in definition order (for suggestions) */
  IrStrMap by_name;   /* name -> the latest Sym*: later lets shadow */
  IrGraph *g;         /* where nodes and params go */
  const char *prefix; /* prepended to param names: "" or "attn.c_attn." */
  IrVec captures;     /* repeat bodies: Capture* */
  bool top;           /* the file scope: static lets are configs */
};

typedef struct CallSite {
  const char *block;
  IrLoc loc;
} CallSite;

/* Its maps take their memory from the arena (.arena set where made). */
typedef struct Ctx {
  AstFile *ast;
  IrGraph *top;
  IrVec blocks;       /* Block*, in file order */
  IrStrMap block_map; /* name -> Block* */
  IrStrMap configs;   /* name -> IrConfig* */
  IrStrMap params;    /* graph_key() -> IrValue*: parameters per graph */
  IrStrMap labels;    /* graph_key() -> AstStmt*: repeat labels per graph */
  IrStrMap outputs;   /* name -> AstStmt* */
  IrVec calls;        /* CallSite*: the blocks being inlined */
  IrVec reported;     /* char*: "line:col:message" of each error shown */
  int depth;
  bool too_deep; /* the nesting error was reported */
} Ctx;

static const Val err_val = {V_ERR, 0, 0, 0, 0, 0};

static const struct {
  const char *name;
  int nargs;
} math_fns[] = {{"sqrt", 1}, {"exp", 1}, {"log", 1}, {"pow", 2}, {"min", 2}, {"max", 2},
                {"int", 1}};
enum { NMATH = sizeof math_fns / sizeof math_fns[0] };

static Val lower_expr(Ctx *c, Scope *s, AstExpr *e);
static Val lower_call(Ctx *c, Scope *s, AstExpr *e, int nout);
static void lower_items(Ctx *c, Scope *s, AstStmt **items, int n, Val *ret);

/* ------------------------------------------------------------ messages */

/* Reports an error unless the same one was already shown; returns whether
 * it was shown, so that its notes follow it or not. */
static bool __attribute__((format(printf, 3, 4))) lerr(Ctx *c, IrLoc loc, const char *fmt, ...) {
  /* Past the cap nothing is shown; counting is all that is left to do. */
  if (ir_error_count() > IR_MAX_ERRORS) {
    ir_error(loc, "too many errors");
    return false;
  }
  va_list ap;
  va_start(ap, fmt);
  char *msg = ir_vfmt(fmt, ap);
  va_end(ap);
  char *key = ir_fmt("%d:%d:%s", loc.line, loc.col, msg);
  for (int i = 0; i < c->reported.len; i++)
    if (strcmp(c->reported.items[i], key) == 0) return false;
  if (c->reported.len < MAX_REPORTED) ir_vec_push(&c->reported, key);
  ir_error(loc, "%s", msg);
  return true;
}

/* A name as messages show it: a 10 MB identifier is cut short. */
static const char *show(const char *name) {
  size_t n = strlen(name);
  return n <= 64 ? name : ir_fmt("%.60s...", name);
}

typedef struct Suggest {
  const char *name;
  const char *best;
  int best_d;
} Suggest;

/* Names of one or two letters are too short for a guess to mean much; a
 * name that extends a candidate (`epsilon` for `eps`) counts as close. */
static void consider(Suggest *sg, const char *cand) {
  if (strcmp(cand, sg->name) == 0) return;
  int len = (int)strlen(sg->name), clen = (int)strlen(cand);
  if (len <= 2) return;
  int d = suggest_distance(sg->name, len, cand, clen, 0);
  int shorter = len < clen ? len : clen;
  if (shorter >= 3 && strncmp(sg->name, cand, (size_t)shorter) == 0 && d > 1) d = 2;
  int limit = len <= 3 ? 1 : len <= 6 ? 2 : 3;
  if (d <= limit && d < sg->best_d) {
    sg->best = cand;
    sg->best_d = d;
  }
}

/* "; did you mean 'x'?" or "". */
static const char *did_you_mean(const Suggest *sg) {
  return sg->best ? ir_fmt("; did you mean '%s'?", sg->best) : "";
}

/* Suggestions scan every visible name: not worth it once errors are no
 * longer shown. */
static bool suggesting(void) { return ir_error_count() < IR_MAX_ERRORS; }

static void consider_scope(Suggest *sg, Ctx *c, Scope *s) {
  if (!suggesting()) return;
  for (; s; s = s->parent)
    for (int i = 0; i < s->syms.len; i++) consider(sg, ((Sym *)s->syms.items[i])->name);
  for (int i = 0; i < c->top->configs.len; i++)
    consider(sg, ((IrConfig *)c->top->configs.items[i])->name);
}

static void consider_callees(Suggest *sg, Ctx *c) {
  if (!suggesting()) return;
  for (int i = 0; i < IR_OP_COUNT; i++) {
    const IrOpInfo *info = ir_op_info((IrOp)i);
    if (!(info->flags & (IR_OPF_REGION | IR_OPF_INTERNAL))) consider(sg, info->name);
  }
  for (int i = 0; i < NMATH; i++) consider(sg, math_fns[i].name);
  for (int i = 0; i < c->blocks.len; i++) consider(sg, ((Block *)c->blocks.items[i])->def->names[0]);
}

/* ------------------------------------------------------------- values */

static Val static_val(IrExpr *e, int depth) {
  Val v = err_val;
  v.kind = V_STATIC;
  v.e = e;
  v.depth = depth;
  return v;
}

static Val tensor_val(IrValue *t) {
  Val v = err_val;
  v.kind = V_TENSOR;
  v.t = t;
  return v;
}

static bool is_list(Val v) { return v.kind == V_STATIC && v.e->kind == IR_EX_LIST; }

/* A static result nesting deeper than the limit is an error: passes walk
 * these trees recursively. */
static Val static_checked(Ctx *c, IrExpr *e, int depth, IrLoc loc) {
  if (depth > MAX_EXPR_DEPTH) {
    lerr(c, loc, "expression nests too deeply (more than %d levels)", MAX_EXPR_DEPTH);
    return err_val;
  }
  return static_val(e, depth);
}

static IrValue *add_node1(Scope *s, IrOp op, IrValue **in, int nin, IrAttr *attrs, int nattr,
                          IrLoc loc) {
  return ir_add_node(s->g, op, in, nin, attrs, nattr, 1, loc)->out[0];
}

/* scale(x, s): a tensor times a number. */
static Val scale(Scope *s, IrValue *x, IrExpr *factor, IrLoc loc) {
  IrAttr a = {"s", factor};
  return tensor_val(add_node1(s, IR_OP_SCALE, &x, 1, &a, 1, loc));
}

/* -------------------------------------------------------------- scopes */

static Sym *lookup_local(Scope *s, const char *name) { return ir_strmap_get(&s->by_name, name); }

static IrConfig *find_config(Ctx *c, const char *name) { return ir_strmap_get(&c->configs, name); }

/* Parameter names and repeat labels are unique per graph. */
static const char *graph_key(const IrGraph *g, const char *name) {
  return ir_fmt("%p/%s", (const void *)g, name);
}

static Sym *push_sym(Scope *s, const char *name, SymKind kind, Val v, IrLoc loc) {
  Sym *sym = ir_alloc(sizeof *sym);
  sym->name = name;
  sym->kind = kind;
  sym->val = v;
  sym->loc = loc;
  ir_vec_push(&s->syms, sym);
  ir_strmap_put(&s->by_name, name, sym);
  return sym;
}

/* Makes an outer value visible in repeat body s: a tensor becomes a new
 * body argument, recorded as a capture; anything else passes unchanged. */
static Sym *capture(Scope *s, Sym *outer, Val v, IrLoc loc) {
  Sym *sym = push_sym(s, outer->name, outer->kind, v, loc);
  sym->outer = true;
  if (v.kind != V_TENSOR) return sym;
  Capture *cap = ir_alloc(sizeof *cap);
  cap->name = outer->name;
  cap->outer = v.t;
  cap->arg = ir_add_arg(s->g, (IrType){.rank = -1}, loc);
  cap->proxy = sym;
  sym->cap = cap;
  sym->val = tensor_val(cap->arg);
  ir_vec_push(&s->captures, cap);
  return sym;
}

/* Finds the symbol `name` visible in s, capturing it into each repeat body
 * between its definition and s. NULL when no scope defines it. */
static Sym *resolve_sym(Scope *s, const char *name, IrLoc loc) {
  Sym *sym = lookup_local(s, name);
  if (sym || !s->parent) return sym;
  Sym *outer = resolve_sym(s->parent, name, loc);
  if (!outer) return NULL;
  return capture(s, outer, outer->val, loc);
}

/* The value of a name: a symbol, else a config (kept as its name). */
static bool resolve(Ctx *c, Scope *s, const char *name, IrLoc loc, Val *out) {
  Sym *sym = resolve_sym(s, name, loc);
  if (sym) {
    *out = sym->val;
    return true;
  }
  if (find_config(c, name)) {
    *out = static_val(ir_expr_name(name, loc), 1);
    return true;
  }
  return false;
}

/* `name = v`: rebinds a variable. In a repeat body, reassigning an outer
 * tensor makes it carried. A variable keeps its kind: a tensor stays a
 * tensor, a number a number. */
static void assign(Ctx *c, Scope *s, const char *name, IrLoc loc, Val v) {
  Sym *sym = resolve_sym(s, name, loc);
  if (!sym) {
    if (find_config(c, name)) {
      lerr(c, loc, "cannot assign to config '%s'", show(name));
      return;
    }
    Suggest sg = {name, NULL, 1000};
    consider_scope(&sg, c, s);
    lerr(c, loc, "assignment to undefined variable '%s' (define it with 'let')%s", show(name),
         did_you_mean(&sg));
    return;
  }
  if (sym->kind == SYM_PARAM) {
    lerr(c, loc, "cannot assign to parameter '%s'", show(name));
    return;
  }
  if (sym->outer && sym->val.kind == V_STATIC) {
    lerr(c, loc, "cannot reassign '%s' inside a repeat: only tensors are carried from one "
         "iteration to the next", show(name));
    return;
  }
  if (sym->cap) sym->cap->carried = true;
  if (v.kind == V_ERR || sym->val.kind == V_ERR) {
    /* A failed carried value fails the repeat, silently: it was reported. */
    sym->val = err_val;
    return;
  }
  if (sym->val.kind == V_TENSOR && v.kind != V_TENSOR) {
    lerr(c, loc, "cannot assign a number to tensor variable '%s'", show(name));
    return;
  }
  if (sym->val.kind == V_STATIC && v.kind != V_STATIC) {
    lerr(c, loc, "cannot assign a tensor to constant '%s'", show(name));
    return;
  }
  sym->val = v;
}

static Block *find_block(Ctx *c, const char *name) { return ir_strmap_get(&c->block_map, name); }

static int find_math(const char *name) {
  for (int i = 0; i < NMATH; i++)
    if (strcmp(math_fns[i].name, name) == 0) return i;
  return -1;
}

/* -------------------------------------------------------- expressions */

/* name: a variable, a parameter, a constant or a config. */
static Val lower_name(Ctx *c, Scope *s, AstExpr *e) {
  Val v;
  if (resolve(c, s, e->name, e->loc, &v)) return v;
  Suggest sg = {e->name, NULL, 1000};
  consider_scope(&sg, c, s);
  lerr(c, e->loc, "undefined name '%s'%s", show(e->name), did_you_mean(&sg));
  return err_val;
}

/* [a, b, c]: a list of numbers (reshape's shape). */
static Val lower_list(Ctx *c, Scope *s, AstExpr *e) {
  IrExpr **items = ir_alloc(sizeof(IrExpr *) * (size_t)(e->nargs ? e->nargs : 1));
  int depth = 0;
  bool ok = true;
  for (int i = 0; i < e->nargs; i++) {
    Val v = lower_expr(c, s, e->args[i].e);
    if (v.kind == V_TENSOR) lerr(c, e->args[i].e->loc, "a list holds numbers, not tensors");
    if (v.kind != V_STATIC) {
      ok = false;
      continue;
    }
    items[i] = v.e;
    if (v.depth > depth) depth = v.depth;
  }
  if (!ok) return err_val;
  return static_checked(c, ir_expr_list(items, e->nargs, e->loc), depth + 1, e->loc);
}

/* -a: a negative literal stays a literal; a tensor is scaled by -1. */
static Val lower_neg(Ctx *c, Scope *s, AstExpr *e) {
  Val a = lower_expr(c, s, e->a);
  if (a.kind == V_TENSOR) return scale(s, a.t, ir_expr_int(-1, e->op_loc), e->op_loc);
  if (a.kind != V_STATIC) return err_val;
  if (is_list(a)) {
    lerr(c, e->op_loc, "cannot negate a list");
    return err_val;
  }
  if (a.e->kind == IR_EX_INT) return static_val(ir_expr_int(-a.e->i, e->loc), 1);
  if (a.e->kind == IR_EX_FLOAT) return static_val(ir_expr_float(-a.e->f, e->loc), 1);
  return static_checked(c, ir_expr_unary(IR_EX_NEG, a.e, e->loc), a.depth + 1, e->op_loc);
}

static IrExprKind static_op(char op) {
  switch (op) {
  case '+': return IR_EX_ADD;
  case '-': return IR_EX_SUB;
  case '*': return IR_EX_MUL;
  case '/': return IR_EX_DIV;
  default: return IR_EX_MOD;
  }
}

/* a op b with at least one tensor: + - * between tensors are nodes; a
 * tensor times or over a number is a scale. */
static Val tensor_binary(Ctx *c, Scope *s, AstExpr *e, Val a, Val b) {
  IrLoc loc = e->op_loc;
  bool ta = a.kind == V_TENSOR, tb = b.kind == V_TENSOR;
  if ((!ta && is_list(a)) || (!tb && is_list(b))) {
    lerr(c, loc, "cannot apply '%c' to a list", e->op);
    return err_val;
  }
  IrValue *in[2] = {a.t, b.t};
  switch (e->op) {
  case '+':
  case '-':
    if (ta && tb)
      return tensor_val(add_node1(s, e->op == '+' ? IR_OP_ADD : IR_OP_SUB, in, 2, NULL, 0, loc));
    lerr(c, loc, "cannot apply '%c' to %s and %s", e->op, ta ? "a tensor" : "a number",
         tb ? "a tensor" : "a number");
    return err_val;
  case '*':
    if (ta && tb) return tensor_val(add_node1(s, IR_OP_MUL, in, 2, NULL, 0, loc));
    return ta ? scale(s, a.t, b.e, loc) : scale(s, b.t, a.e, loc);
  case '/':
    if (tb) {
      lerr(c, loc, "cannot divide by a tensor");
      return err_val;
    }
    return scale(s, a.t, ir_expr_binary(IR_EX_DIV, ir_expr_float(1.0, loc), b.e, loc), loc);
  default:
    lerr(c, loc, "cannot apply '%%' to a tensor");
    return err_val;
  }
}

/* a op b, a and b lowered. A chain of tensors is flat (nodes of the
 * graph, walked in a loop). A static one is a left-leaning tree (IrExpr)
 * that the fold pass evaluates in a loop as well, so it nests one level
 * above its deepest term (depth, which lower_binary passes), however
 * long; the printer and the reader of the printed IR take chains of up
 * to FE_MAX_CHAIN terms too. */
static Val combine(Ctx *c, Scope *s, AstExpr *e, Val a, Val b, int depth) {
  if (a.kind == V_ERR || b.kind == V_ERR) return err_val;
  if (a.kind == V_TENSOR || b.kind == V_TENSOR) return tensor_binary(c, s, e, a, b);
  if (is_list(a) || is_list(b)) {
    lerr(c, e->op_loc, "cannot apply '%c' to a list", e->op);
    return err_val;
  }
  return static_checked(c, ir_expr_binary(static_op(e->op), a.e, b.e, e->op_loc), depth,
                        e->op_loc);
}

/* A left chain a + b + c + ... (one operator group) is lowered in a loop,
 * left to right as the recursion would, so that its length (up to
 * FE_MAX_CHAIN) costs no C stack and, when static, one level of depth. */
static Val lower_binary(Ctx *c, Scope *s, AstExpr *e) {
  int n = 1;
  for (AstExpr *x = e; x->a->kind == AST_BINARY && fe_same_group(x->a->op, x->op); x = x->a) n++;
  AstExpr **chain = ir_alloc(sizeof *chain * (size_t)n);
  chain[n - 1] = e;
  for (int k = n - 1; k > 0; k--) chain[k - 1] = chain[k]->a;
  Val acc = lower_expr(c, s, chain[0]->a);
  int deepest = acc.depth;
  for (int k = 0; k < n; k++) {
    Val b = lower_expr(c, s, chain[k]->b);
    if (b.depth > deepest) deepest = b.depth;
    acc = combine(c, s, chain[k], acc, b, deepest + 1);
  }
  return acc;
}

static Val lower_expr1(Ctx *c, Scope *s, AstExpr *e) {
  switch (e->kind) {
  case AST_INT:
  case AST_BOOL: return static_val(ir_expr_int(e->i, e->loc), 1);
  case AST_FLOAT: return static_val(ir_expr_float(e->f, e->loc), 1);
  case AST_NAME: return lower_name(c, s, e);
  case AST_LIST: return lower_list(c, s, e);
  case AST_NEG: return lower_neg(c, s, e);
  case AST_BINARY: return lower_binary(c, s, e);
  case AST_CALL: return lower_call(c, s, e, 0);
  }
  unreachable();
}

/* Guards the recursion. The parser bounds the depth of each expression,
 * but inlining nests the expressions of one block inside another's. */
static bool enter(Ctx *c, IrLoc loc, const char *what) {
  if (c->depth >= MAX_DEPTH) {
    /* Once: every sibling at the limit would report it again. */
    if (!c->too_deep)
      lerr(c, loc, "nesting too deep: more than %d levels of %s", MAX_DEPTH, what);
    c->too_deep = true;
    return false;
  }
  c->depth++;
  return true;
}

static Val lower_expr(Ctx *c, Scope *s, AstExpr *e) {
  if (!enter(c, e->loc, "expressions and block calls")) return err_val;
  Val v = lower_expr1(c, s, e);
  c->depth--;
  return v;
}

/* A number where the language needs one (dims, counts, init arguments). */
static Val lower_static(Ctx *c, Scope *s, AstExpr *e, const char *what) {
  Val v = lower_expr(c, s, e);
  if (v.kind == V_TENSOR) {
    lerr(c, e->loc, "%s must be a number, not a tensor", what);
    return err_val;
  }
  if (is_list(v)) {
    lerr(c, e->loc, "%s must be a number, not a list", what);
    return err_val;
  }
  return v;
}

/* ---------------------------------------------------------------- calls */

/* sqrt(x), pow(a, b), ...: static math, kept symbolic. */
static Val lower_math(Ctx *c, Scope *s, AstExpr *e, int fn) {
  IrExpr **args = ir_alloc(sizeof(IrExpr *) * (size_t)(e->nargs ? e->nargs : 1));
  bool ok = true;
  int depth = 0;
  for (int i = 0; i < e->nargs; i++) {
    if (e->args[i].kw) {
      lerr(c, e->args[i].kw_loc, "'%s' takes no keyword arguments", e->name);
      ok = false;
    }
    Val v = lower_static(c, s, e->args[i].e, ir_fmt("an argument of '%s'", e->name));
    if (v.kind != V_STATIC) {
      ok = false;
      continue;
    }
    args[i] = v.e;
    if (v.depth > depth) depth = v.depth;
  }
  if (e->nargs != math_fns[fn].nargs) {
    lerr(c, e->op_loc, "'%s' takes %d argument%s, got %d", e->name, math_fns[fn].nargs,
         math_fns[fn].nargs == 1 ? "" : "s", e->nargs);
    return err_val;
  }
  if (!ok) return err_val;
  return static_checked(c, ir_expr_call(e->name, args, e->nargs, e->loc), depth + 1, e->loc);
}

static int attr_index(const IrOpInfo *info, const char *name) {
  for (int i = 0; i < info->nattr; i++)
    if (strcmp(info->attr[i].name, name) == 0) return i;
  return -1;
}

/* "2 tensor inputs", "2 to 3 tensor inputs", "at least 1 tensor input". */
static const char *arity(const IrOpInfo *info) {
  int lo = info->min_in, hi = info->max_in;
  if (hi < 0) return ir_fmt("at least %d tensor input%s", lo, lo == 1 ? "" : "s");
  if (lo == hi) return ir_fmt("%d tensor input%s", lo, lo == 1 ? "" : "s");
  return ir_fmt("%d to %d tensor inputs", lo, hi);
}

/* "no attributes", "attribute rate", "attributes dim0, dim1". */
static const char *attr_names(const IrOpInfo *info) {
  if (info->nattr == 0) return "no attributes";
  char *s = ir_fmt("attribute%s %s", info->nattr == 1 ? "" : "s", info->attr[0].name);
  for (int i = 1; i < info->nattr; i++) s = ir_fmt("%s, %s", s, info->attr[i].name);
  return s;
}

/* What an op call collects from its arguments. */
typedef struct OpArgs {
  const IrOpInfo *info;
  IrValue **in;
  int nin;
  IrExpr *attr[8];
  IrLoc attr_loc[8];
  bool bad;    /* an error was reported */
  bool poison; /* an argument was already in error */
} OpArgs;

/* One positional argument: tensors first, then attributes in spec order. */
static void op_positional(Ctx *c, AstExpr *call, OpArgs *oa, int pos, AstExpr *arg, Val v) {
  const IrOpInfo *info = oa->info;
  int nattr_given = 0;
  while (nattr_given < info->nattr && oa->attr[nattr_given]) nattr_given++;
  if (v.kind == V_TENSOR) {
    if (nattr_given > 0) {
      lerr(c, arg->loc, "argument %d of '%s' must be a number (attribute '%s'), not a tensor",
           pos, call->name,
           nattr_given < info->nattr ? info->attr[nattr_given].name : info->attr[0].name);
      oa->bad = true;
    } else if (info->max_in >= 0 && oa->nin == info->max_in) {
      lerr(c, arg->loc, "too many tensor inputs for '%s' (it takes %s)", call->name,
           arity(info));
      oa->bad = true;
    } else {
      oa->in[oa->nin++] = v.t;
    }
    return;
  }
  if (oa->nin < info->min_in) {
    lerr(c, arg->loc, "argument %d of '%s' must be a tensor, not a number", pos, call->name);
    oa->bad = true;
  } else if (nattr_given >= info->nattr) {
    lerr(c, arg->loc, "too many arguments for '%s' (%s%s%s)", call->name, arity(info),
         info->nattr ? ", then " : " and ", attr_names(info));
    oa->bad = true;
  } else {
    oa->attr[nattr_given] = v.e;
    oa->attr_loc[nattr_given] = arg->loc;
  }
}

/* One keyword argument: names an attribute. */
static void op_keyword(Ctx *c, AstExpr *call, OpArgs *oa, AstArg *a, Val v) {
  const IrOpInfo *info = oa->info;
  int idx = attr_index(info, a->kw);
  if (idx < 0) {
    Suggest sg = {a->kw, NULL, 1000};
    for (int i = 0; i < info->nattr; i++) consider(&sg, info->attr[i].name);
    lerr(c, a->kw_loc, "'%s' has no attribute '%s'%s", call->name, show(a->kw),
         did_you_mean(&sg));
    oa->bad = true;
  } else if (oa->attr[idx]) {
    if (lerr(c, a->kw_loc, "attribute '%s' of '%s' is given twice", a->kw, call->name))
      ir_note(oa->attr_loc[idx], "first given here");
    oa->bad = true;
  } else if (v.kind == V_TENSOR) {
    lerr(c, a->e->loc, "attribute '%s' of '%s' must be a number, not a tensor", a->kw,
         call->name);
    oa->bad = true;
  } else if (v.kind == V_STATIC) {
    oa->attr[idx] = v.e;
    oa->attr_loc[idx] = a->e->loc;
  }
}

/* Attributes that take a word as well as a number: gelu(x, approximate=none)
 * reads better than approximate=0. The word stands for the number only as
 * the value of that attribute. */
static const struct {
  IrOp op;
  const char *attr, *word;
  int64_t value;
} attr_words[] = {
    {IR_OP_GELU, "approximate", "none", 0},
    {IR_OP_GELU, "approximate", "tanh", 1},
};

/* The value of keyword argument a when it is one of the attribute's words. */
static bool attr_word(const OpArgs *oa, const AstArg *a, Val *v) {
  if (!a->kw || a->e->kind != AST_NAME) return false;
  for (size_t i = 0; i < sizeof attr_words / sizeof attr_words[0]; i++)
    if (oa->info == ir_op_info(attr_words[i].op) && strcmp(a->kw, attr_words[i].attr) == 0 &&
        strcmp(a->e->name, attr_words[i].word) == 0) {
      *v = (Val){.kind = V_STATIC, .e = ir_expr_int(attr_words[i].value, a->e->loc)};
      return true;
    }
  return false;
}

/* Lowers the arguments of an op call into oa, reporting misuse. */
static void op_args(Ctx *c, Scope *s, AstExpr *e, OpArgs *oa) {
  bool seen_kw = false;
  for (int i = 0; i < e->nargs; i++) {
    AstArg *a = &e->args[i];
    Val v;
    if (!attr_word(oa, a, &v)) v = lower_expr(c, s, a->e);
    if (v.kind == V_ERR) oa->poison = true;
    if (a->kw) {
      seen_kw = true;
      op_keyword(c, e, oa, a, v);
    } else if (seen_kw) {
      lerr(c, a->e->loc, "positional argument after keyword arguments");
      oa->bad = true;
    } else if (!oa->poison && !oa->bad) {
      op_positional(c, e, oa, i + 1, a->e, v);
    }
  }
}

/* op(tensors..., attributes..., name=value...). nout: 0 in an expression,
 * else the number of names the result is bound to. */
static Val lower_op_call(Ctx *c, Scope *s, AstExpr *e, IrOp op, int nout) {
  OpArgs oa = {.info = ir_op_info(op)};
  const IrOpInfo *info = oa.info;
  oa.in = ir_alloc(sizeof(IrValue *) * (size_t)(e->nargs ? e->nargs : 1));
  op_args(c, s, e, &oa);
  if (oa.poison) return err_val;
  if (!oa.bad && oa.nin < info->min_in) {
    lerr(c, e->op_loc, "'%s' takes %s, got %d", e->name, arity(info), oa.nin);
    oa.bad = true;
  }
  IrAttr attrs[8];
  for (int i = 0; i < info->nattr; i++) {
    attrs[i].name = info->attr[i].name;
    attrs[i].expr = oa.attr[i] ? oa.attr[i] : ir_attr_default(&info->attr[i], e->loc);
    if (!attrs[i].expr && !oa.bad) {
      lerr(c, e->op_loc, "'%s' needs attribute '%s'", e->name, info->attr[i].name);
      oa.bad = true;
    }
  }
  /* Several results: a count set by attribute n (split), or fixed (router),
   * unless all but the first are the op's own (attention's log-sum-exp). */
  bool multi = (info->flags & IR_OPF_MULTI_OUT) ||
               (info->nout > 1 && !(info->flags & IR_OPF_AUX_OUT));
  if (!oa.bad && nout == 0 && multi) {
    lerr(c, e->op_loc, "'%s' returns several tensors; bind them with 'let a, b = %s(...)'",
         e->name, e->name);
    oa.bad = true;
  }
  /* n is usually a literal: catch a count that disagrees with the names
   * here rather than in the shape pass. */
  int n_idx = multi ? attr_index(info, "n") : -1;
  IrExpr *n_attr = n_idx >= 0 ? oa.attr[n_idx] : NULL;
  if (!oa.bad && nout >= 1 && n_attr && n_attr->kind == IR_EX_INT && n_attr->i != nout) {
    lerr(c, e->op_loc, "'%s' into %lld parts is bound to %d name%s", e->name,
         (long long)n_attr->i, nout, nout == 1 ? "" : "s");
    oa.bad = true;
  }
  if (!oa.bad && nout >= 1 && multi && !(info->flags & IR_OPF_MULTI_OUT) && nout != info->nout) {
    lerr(c, e->op_loc, "'%s' returns %d tensors; it is bound to %d name%s", e->name, info->nout,
         nout, nout == 1 ? "" : "s");
    oa.bad = true;
  }
  if (!oa.bad && nout > 1 && !multi) {
    lerr(c, e->op_loc, "'%s' returns one tensor; it cannot be bound to %d names", e->name, nout);
    oa.bad = true;
  }
  if (oa.bad) return err_val;
  IrNode *n = ir_add_node(s->g, op, oa.in, oa.nin, attrs, info->nattr, nout ? nout : 1, e->loc);
  if (nout <= 1) return tensor_val(n->out[0]);
  Val v = err_val;
  v.kind = V_MULTI;
  v.multi = n->out;
  v.nmulti = n->nout;
  return v;
}

/* Binds a block's parameters to the call's arguments (positional, then by
 * name). Returns false after reporting a misuse. */
static bool block_args(Ctx *c, Scope *s, AstExpr *e, Block *b, Val *vals) {
  AstStmt *def = b->def;
  bool ok = true, *set = ir_alloc(sizeof(bool) * (size_t)(def->nparams + 1));
  int npos = 0;
  bool has_kw = false;
  for (int i = 0; i < e->nargs; i++) {
    AstArg *a = &e->args[i];
    Val v = lower_expr(c, s, a->e);
    int idx = -1;
    if (a->kw) {
      has_kw = true;
      idx = (int)(intptr_t)ir_strmap_get(&b->params, a->kw) - 1;
      if (idx < 0) {
        lerr(c, a->kw_loc, "block '%s' has no parameter '%s'", e->name, show(a->kw));
        ok = false;
      } else if (set[idx]) {
        lerr(c, a->kw_loc, "argument '%s' of block '%s' is given twice", a->kw, e->name);
        ok = false;
      }
    } else if (has_kw) {
      lerr(c, a->e->loc, "positional argument after keyword arguments");
      ok = false;
    } else {
      idx = npos++;
    }
    if (idx >= 0 && idx < def->nparams) {
      vals[idx] = v;
      set[idx] = true;
    }
  }
  if (!has_kw && npos != def->nparams) {
    lerr(c, e->op_loc, "block '%s' takes %d argument%s, got %d", e->name, def->nparams,
         def->nparams == 1 ? "" : "s", npos);
    return false;
  }
  for (int j = 0; ok && j < def->nparams; j++)
    if (!set[j]) {
      lerr(c, e->op_loc, "missing argument '%s' of block '%s'", def->params[j], e->name);
      ok = false;
    }
  return ok;
}

/* Inlines block b with its parameters bound to vals. */
static Val inline_block(Ctx *c, Scope *s, Block *b, Val *vals, const char *prefix, IrLoc loc) {
  AstStmt *def = b->def;
  Scope bs = {.by_name.arena = true, .g = s->g, .prefix = prefix};
  for (int j = 0; j < def->nparams; j++)
    push_sym(&bs, def->params[j], vals[j].kind == V_STATIC ? SYM_CONST : SYM_VAR, vals[j],
             def->param_locs[j]);
  CallSite site = {def->names[0], loc};
  ir_vec_push(&c->calls, &site);
  b->active = true;
  b->called = true;
  Val ret = err_val;
  lower_items(c, &bs, def->body, def->nbody, &ret);
  b->active = false;
  c->calls.len--;
  return ret;
}

/* "Ping -> Pong -> Ping": the blocks being inlined from the first call of
 * `name` on, for a recursion message. */
static const char *call_chain(Ctx *c, const char *name) {
  int first = c->calls.len;
  for (int i = c->calls.len - 1; i >= 0; i--)
    if (strcmp(((CallSite *)c->calls.items[i])->block, name) == 0) first = i;
  char *s = "";
  for (int i = first; i < c->calls.len; i++)
    s = ir_fmt("%s%s -> ", s, ((CallSite *)c->calls.items[i])->block);
  return ir_fmt("%s%s", s, name);
}

/* [inst:] Block(args): the block's statements inlined, its params named
 * with the instance prefix. */
static Val lower_block_call(Ctx *c, Scope *s, AstExpr *e, Block *b, int nout) {
  AstStmt *def = b->def;
  Val *vals = ir_alloc(sizeof(Val) * (size_t)(def->nparams + 1));
  if (!block_args(c, s, e, b, vals)) return err_val;
  if (b->active) {
    lerr(c, e->op_loc, "block '%s' is called recursively (%s); blocks cannot recurse", e->name,
         call_chain(c, e->name));
    return err_val;
  }
  if (nout > 1) {
    lerr(c, e->op_loc, "block '%s' returns one value; it cannot be bound to %d names", e->name,
         nout);
    return err_val;
  }
  if (!enter(c, e->loc, "expressions and block calls")) return err_val;
  const char *prefix = e->inst ? ir_fmt("%s%s.", s->prefix, e->inst) : s->prefix;
  Val ret = inline_block(c, s, b, vals, prefix, e->loc);
  c->depth--;
  return ret;
}

static Val lower_call(Ctx *c, Scope *s, AstExpr *e, int nout) {
  IrOp op;
  Block *b = find_block(c, e->name);
  bool is_op = ir_op_lookup(e->name, &op) && !(ir_op_info(op)->flags & IR_OPF_REGION);
  int fn = find_math(e->name);
  if (e->inst && !b && (is_op || fn >= 0))
    lerr(c, e->inst_loc, "only block calls take an instance name, '%s' is %s", e->name,
         is_op ? "an op" : "a math function");
  if (b) return lower_block_call(c, s, e, b, nout);
  if (is_op && (ir_op_info(op)->flags & IR_OPF_INTERNAL)) {
    for (int i = 0; i < e->nargs; i++) lower_expr(c, s, e->args[i].e);
    if (ir_op_info(op)->flags & IR_OPF_PARALLEL)
      lerr(c, e->op_loc, "'%s' is written by the tensor-parallel passes; a model cannot call it "
           "(annotate a param with split(DIM) or replicated instead)", e->name);
    else
      lerr(c, e->op_loc, "'%s' is a gradient op that the autodiff pass writes; a model cannot "
           "call it", e->name);
    return err_val;
  }
  if (is_op) return lower_op_call(c, s, e, op, nout);
  if (fn >= 0) return lower_math(c, s, e, fn);
  for (int i = 0; i < e->nargs; i++) lower_expr(c, s, e->args[i].e);
  Suggest sg = {e->name, NULL, 1000};
  consider_callees(&sg, c);
  lerr(c, e->op_loc, "unknown op or block '%s'%s", show(e->name), did_you_mean(&sg));
  return err_val;
}

/* ------------------------------------------------------- declarations */

/* dtype[dims]: dims stay symbolic; literal dims also fill shape[]. */
static bool lower_type(Ctx *c, Scope *s, const AstType *t, IrType *out) {
  bool ok = true;
  *out = (IrType){.dtype = IR_F32};
  if (t->dtype && !ir_dtype_parse(t->dtype, &out->dtype)) {
    Suggest sg = {t->dtype, NULL, 1000};
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "i32", "i64"};
    for (int i = 0; i < 6; i++) consider(&sg, names[i]);
    lerr(c, t->dtype_loc, "unknown dtype '%s'%s", show(t->dtype),
         sg.best ? did_you_mean(&sg) : " (known: f32 f64 bf16 f16 i32 i64)");
    ok = false;
  }
  if (t->ndims > IR_MAX_RANK) {
    lerr(c, t->dims[IR_MAX_RANK]->loc, "a tensor has at most %d dimensions", IR_MAX_RANK);
    return false;
  }
  out->rank = t->ndims;
  for (int i = 0; i < t->ndims; i++) {
    Val v = lower_static(c, s, t->dims[i], "a dimension");
    if (v.kind != V_STATIC) {
      ok = false;
      continue;
    }
    out->dims[i] = v.e;
    if (v.e->kind == IR_EX_INT) out->shape[i] = v.e->i;
  }
  return ok;
}

/* zeros | ones | normal(mean, std) */
static bool lower_init(Ctx *c, Scope *s, const AstInit *in, IrInit *out) {
  *out = (IrInit){IR_INIT_NONE, NULL, NULL};
  bool is_normal = strcmp(in->kind, "normal") == 0;
  if (strcmp(in->kind, "zeros") == 0 || strcmp(in->kind, "ones") == 0) {
    out->kind = in->kind[0] == 'z' ? IR_INIT_ZEROS : IR_INIT_ONES;
    if (in->call) {
      lerr(c, in->loc, "'%s' takes no arguments", in->kind);
      return false;
    }
    return true;
  }
  if (!is_normal) {
    Suggest sg = {in->kind, NULL, 1000};
    consider(&sg, "zeros");
    consider(&sg, "ones");
    consider(&sg, "normal");
    lerr(c, in->loc, "unknown initializer '%s'%s", show(in->kind),
         sg.best ? did_you_mean(&sg) : " (use zeros, ones or normal(mean, std))");
    return false;
  }
  bool ok = true;
  Val v[2] = {err_val, err_val};
  for (int i = 0; i < in->nargs; i++) {
    if (in->args[i].kw) {
      lerr(c, in->args[i].kw_loc, "'normal' takes no keyword arguments");
      ok = false;
    }
    Val a = lower_static(c, s, in->args[i].e, "an argument of 'normal'");
    if (i < 2) v[i] = a;
  }
  if (in->nargs != 2) {
    lerr(c, in->loc, "'normal' takes 2 arguments (mean, std), got %d", in->nargs);
    return false;
  }
  if (!ok || v[0].kind != V_STATIC || v[1].kind != V_STATIC) return false;
  *out = (IrInit){IR_INIT_NORMAL, v[0].e, v[1].e};
  return true;
}

static void note_call_site(Ctx *c) {
  if (c->calls.len == 0) return;
  CallSite *site = c->calls.items[c->calls.len - 1];
  ir_note(site->loc, "in block '%s' called here", site->block);
}

/* A name defined at the file scope must not collide with a config or with
 * a parameter or input of the same name. Returns false after reporting. */
static bool check_new_name(Ctx *c, Scope *s, const char *name, IrLoc loc, bool shadow_ok) {
  IrConfig *cfg = s->top ? find_config(c, name) : NULL;
  if (cfg) {
    if (lerr(c, loc, "'%s' is already defined as a config", show(name)))
      ir_note(cfg->loc, "'%s' is defined here", show(name));
    return false;
  }
  Sym *old = lookup_local(s, name);
  if (old && (!shadow_ok || old->kind == SYM_PARAM)) {
    if (lerr(c, loc, "'%s' is already defined", show(name)))
      ir_note(old->loc, "'%s' is defined here", show(name));
    return false;
  }
  return true;
}

/* let a = e (a config at the file scope when e is a number) or
 * let a, b, c = op(...) (several outputs). */
static void lower_let(Ctx *c, Scope *s, AstStmt *st) {
  int n = st->nnames;
  Val v = st->e->kind == AST_CALL ? lower_call(c, s, st->e, n) : lower_expr(c, s, st->e);
  IrStrMap seen = {.arena = true};
  for (int i = 0; n > 1 && i < n; i++) {
    if (ir_strmap_get(&seen, st->names[i])) {
      lerr(c, st->name_locs[i], "'%s' is bound twice", show(st->names[i]));
      v = err_val;
    }
    ir_strmap_put(&seen, st->names[i], st);
  }
  if (n > 1 && v.kind != V_MULTI && v.kind != V_ERR) {
    lerr(c, st->name_locs[1], "%s cannot be bound to %d names",
         v.kind == V_STATIC ? "a number" : "a single tensor", n);
    v = err_val;
  }
  if (n == 1 && s->top && v.kind == V_STATIC) {
    const char *name = st->names[0];
    IrConfig *old = find_config(c, name);
    Sym *sym = lookup_local(s, name);
    if (old) {
      if (lerr(c, st->name_locs[0], "config '%s' is defined twice", show(name)))
        ir_note(old->loc, "first defined here");
    } else if (sym) {
      if (lerr(c, st->name_locs[0], "'%s' is already defined", show(name)))
        ir_note(sym->loc, "'%s' is defined here", show(name));
    } else {
      ir_strmap_put(&c->configs, name, ir_add_config(c->top, name, v.e, st->name_locs[0]));
    }
    return;
  }
  for (int i = 0; i < n; i++) {
    Val vi = v.kind == V_MULTI ? tensor_val(v.multi[i]) : v;
    if (!check_new_name(c, s, st->names[i], st->name_locs[i], true)) vi = err_val;
    push_sym(s, st->names[i], vi.kind == V_STATIC ? SYM_CONST : SYM_VAR, vi, st->name_locs[i]);
  }
}

/* input name: type (the file scope only) */
static void lower_input(Ctx *c, Scope *s, AstStmt *st) {
  const char *name = st->names[0];
  IrType t;
  bool ok = lower_type(c, s, &st->type, &t);
  if (!check_new_name(c, s, name, st->name_locs[0], false)) return;
  if (!ok) {
    push_sym(s, name, SYM_VAR, err_val, st->name_locs[0]);
    return;
  }
  IrValue *v = ir_add_input(c->top, name, t, st->name_locs[0]);
  push_sym(s, name, SYM_VAR, tensor_val(v), st->name_locs[0]);
}

/* An integer literal, possibly negative, of an annotation; false after
 * reporting anything else. */
static bool annot_int(Ctx *c, const AstArg *a, const char *what, int64_t *out) {
  const AstExpr *e = a->e;
  bool neg = e->kind == AST_NEG;
  if (neg) e = e->a;
  if (a->kw) {
    lerr(c, a->kw_loc, "split takes no keyword arguments: split(DIM) or split(DIM, BLOCKS)");
    return false;
  }
  if (e->kind != AST_INT) {
    lerr(c, a->e->loc, "split: the %s must be an integer literal", what);
    return false;
  }
  *out = neg ? -e->i : e->i;
  return true;
}

/* The annotation after a param's init: `split(DIM)` or `split(DIM,
 * BLOCKS)` (a negative dim counts from the end), or `replicated`. It
 * becomes the param's sharding spec, which tp-annotate keeps. */
static bool lower_shard(Ctx *c, const AstShard *a, int rank, IrShard *out) {
  *out = (IrShard){IR_REPLICATED, IR_AXIS_TENSOR, 0, 0, false};
  if (a->kind == AST_SHARD_NONE) return true;
  out->fixed = true;
  if (a->kind == AST_SHARD_REPLICATED) return true;
  if (a->nargs < 1 || a->nargs > 2) {
    lerr(c, a->loc, "split takes 1 or 2 arguments (the dim, then the number of blocks), got %d",
         a->nargs);
    return false;
  }
  int64_t dim, blocks = 1;
  bool ok = annot_int(c, &a->args[0], "dim", &dim);
  if (a->nargs > 1 && annot_int(c, &a->args[1], "number of blocks", &blocks) && blocks < 1) {
    lerr(c, a->args[1].e->loc, "split: the number of blocks must be positive, got %lld",
         (long long)blocks);
    ok = false;
  } else if (a->nargs > 1 && blocks < 1) {
    ok = false;
  }
  if (!ok) return false;
  if (dim < -rank || dim >= rank) {
    lerr(c, a->args[0].e->loc, "split(%lld): the parameter has %d dim%s, so the dim must be from "
         "%d to %d", (long long)dim, rank, rank == 1 ? "" : "s", -rank, rank - 1);
    return false;
  }
  *out = (IrShard){IR_SPLIT, IR_AXIS_TENSOR, (int)(dim < 0 ? dim + rank : dim),
                   blocks > 1 ? (int)blocks : 0, true};
  return true;
}

/* param path: type = init, named with the instance prefix. */
static void lower_param(Ctx *c, Scope *s, AstStmt *st) {
  const char *path = st->names[0];
  const char *full = ir_fmt("%s%s", s->prefix, path);
  IrLoc loc = st->name_locs[0];
  IrType t;
  IrInit init;
  IrShard shard;
  bool ok = lower_type(c, s, &st->type, &t);
  ok = lower_init(c, s, &st->init, &init) && ok;
  ok = lower_shard(c, &st->shard, st->type.ndims, &shard) && ok;
  const char *key = graph_key(s->g, full);
  IrValue *old = ir_strmap_get(&c->params, key);
  if (old) {
    if (lerr(c, loc, "parameter '%s' is declared twice", show(full))) {
      note_call_site(c);
      if (old->loc.line != loc.line || old->loc.col != loc.col)
        ir_note(old->loc, "first declared here");
    }
    /* The name stays usable (as poison) so its uses report nothing more. */
    push_sym(s, path, SYM_PARAM, err_val, loc);
    return;
  }
  if (!check_new_name(c, s, path, loc, false)) return;
  if (!ok) {
    push_sym(s, path, SYM_PARAM, err_val, loc);
    return;
  }
  IrValue *v = ir_add_param(s->g, full, t, init, loc);
  v->shard = shard;
  ir_strmap_put(&c->params, key, v);
  push_sym(s, path, SYM_PARAM, tensor_val(v), loc);
}

/* output name = e (the file scope only) */
static void lower_output(Ctx *c, Scope *s, AstStmt *st) {
  const char *name = st->names[0];
  Val v = lower_expr(c, s, st->e);
  AstStmt *old = ir_strmap_get(&c->outputs, name);
  if (old) {
    if (lerr(c, st->name_locs[0], "output '%s' is defined twice", show(name)))
      ir_note(old->name_locs[0], "first defined here");
    return;
  }
  ir_strmap_put(&c->outputs, name, st);
  if (v.kind == V_STATIC) lerr(c, st->e->loc, "output '%s' must be a tensor, not a number", show(name));
  if (v.kind == V_TENSOR) ir_add_output(c->top, name, v.t);
}

/* -------------------------------------------------------------- repeat */

/* The repeat node's operands: carried captures first, then the invariant
 * ones, in the order the body first used them; the body's args follow the
 * same order and it yields the carried values' final versions. */
static IrNode *build_repeat(Ctx *c, Scope *s, Scope *bs, const char *label, IrExpr *count,
                            IrLoc loc, int *ncarried) {
  (void)c;
  int n = bs->captures.len, k = 0;
  IrValue **in = ir_alloc(sizeof(IrValue *) * (size_t)(n ? n : 1));
  IrGraph *body = bs->g;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++) {
      Capture *cap = bs->captures.items[i];
      if (cap->carried != (pass == 0)) continue;
      in[k] = cap->outer;
      body->args.items[k] = cap->arg;
      k++;
      if (pass == 0) ir_vec_push(&body->outputs, cap->proxy->val.t);
    }
  *ncarried = body->outputs.len;
  return ir_add_repeat(s->g, label, count, in, n, *ncarried, body, loc);
}

/* repeat label[count] { body } */
static void lower_repeat(Ctx *c, Scope *s, AstStmt *st) {
  Val count = lower_static(c, s, st->e, "the repeat count");
  const char *label = ir_fmt("%s%s", s->prefix, st->names[0]);
  const char *key = graph_key(s->g, label);
  AstStmt *old = ir_strmap_get(&c->labels, key);
  if (old) {
    if (lerr(c, st->name_locs[0], "repeat '%s' is defined twice", show(label)))
      ir_note(old->name_locs[0], "first defined here");
    count = err_val;
  } else {
    ir_strmap_put(&c->labels, key, st);
  }
  if (!enter(c, st->loc, "repeats, expressions and block calls")) return;
  Scope bs = {.parent = s, .by_name.arena = true, .g = ir_body_new(s->g), .prefix = ""};
  lower_items(c, &bs, st->body, st->nbody, NULL);
  c->depth--;
  bool ok = count.kind == V_STATIC;
  for (int i = 0; i < bs.captures.len; i++) {
    Capture *cap = bs.captures.items[i];
    if (cap->carried && cap->proxy->val.kind != V_TENSOR) ok = false;
  }
  int ncarried = 0;
  IrNode *n = ok ? build_repeat(c, s, &bs, label, count.e, st->loc, &ncarried) : NULL;
  /* After the loop the carried names refer to the repeat's outputs. */
  for (int i = 0, k = 0; i < bs.captures.len; i++) {
    Capture *cap = bs.captures.items[i];
    if (cap->carried) assign(c, s, cap->name, st->loc, n ? tensor_val(n->out[k++]) : err_val);
  }
}

/* ---------------------------------------------------------- statements */

static void lower_stmt(Ctx *c, Scope *s, AstStmt *st, Val *ret) {
  switch (st->kind) {
  case AST_LET: lower_let(c, s, st); return;
  case AST_ASSIGN: assign(c, s, st->names[0], st->name_locs[0], lower_expr(c, s, st->e)); return;
  case AST_INPUT: lower_input(c, s, st); return;
  case AST_PARAM: lower_param(c, s, st); return;
  case AST_BLOCK: return; /* registered before lowering */
  case AST_REPEAT: lower_repeat(c, s, st); return;
  case AST_OUTPUT: lower_output(c, s, st); return;
  case AST_RETURN:
    if (ret) *ret = lower_expr(c, s, st->e);
    return;
  }
  unreachable();
}

static void lower_items(Ctx *c, Scope *s, AstStmt **items, int n, Val *ret) {
  for (int i = 0; i < n; i++)
    if (!items[i]->misplaced) lower_stmt(c, s, items[i], ret);
}

/* ------------------------------------------------------------ structure */

typedef enum Where { AT_TOP, IN_BLOCK, IN_REPEAT, IN_BLOCK_REPEAT } Where;

static const char *keyword(AstStmtKind k) {
  switch (k) {
  case AST_INPUT: return "input";
  case AST_OUTPUT: return "output";
  case AST_BLOCK: return "block";
  default: return "?";
  }
}

/* Where each statement may stand: input, output and block only at the top
 * level, return only as the last statement of a block. A statement out of
 * place is reported and then skipped by lowering. */
static void check_placement(Ctx *c, AstStmt **items, int n, Where where, int depth) {
  if (depth > MAX_DEPTH) return; /* the repeat lowering reports the nesting */
  for (int i = 0; i < n; i++) {
    AstStmt *st = items[i];
    switch (st->kind) {
    case AST_INPUT:
    case AST_OUTPUT:
    case AST_BLOCK:
      if (where != AT_TOP) {
        lerr(c, st->loc, "'%s' is only allowed at the top level", keyword(st->kind));
        st->misplaced = true;
      }
      break;
    case AST_RETURN:
      if (where == AT_TOP || where == IN_REPEAT)
        lerr(c, st->loc, "'return' outside of a block");
      else if (where == IN_BLOCK_REPEAT)
        lerr(c, st->loc, "'return' inside 'repeat'; a block returns after its last statement");
      else if (i != n - 1)
        lerr(c, st->loc, "'return' must be the last statement of a block");
      st->misplaced = where != IN_BLOCK || i != n - 1;
      break;
    case AST_REPEAT:
      check_placement(c, st->body, st->nbody,
                      where == IN_BLOCK || where == IN_BLOCK_REPEAT ? IN_BLOCK_REPEAT : IN_REPEAT,
                      depth + 1);
      break;
    default: break;
    }
  }
}

/* Blocks are known before the statements run, so a block may call one
 * defined further down. */
static void register_block(Ctx *c, AstStmt *st) {
  const char *name = st->names[0];
  IrLoc loc = st->name_locs[0];
  IrOp op;
  Block *old = find_block(c, name);
  if (old) {
    if (lerr(c, loc, "block '%s' is defined twice", show(name)))
      ir_note(old->def->name_locs[0], "first defined here");
    return;
  }
  if ((ir_op_lookup(name, &op) && !(ir_op_info(op)->flags & IR_OPF_REGION)) ||
      find_math(name) >= 0)
    lerr(c, loc, "block '%s' has the name of a built-in %s", name,
         find_math(name) >= 0 ? "function" : "op");
  Block *b = ir_alloc(sizeof *b);
  b->params.arena = true;
  b->def = st;
  for (int i = 0; i < st->nparams; i++) {
    if (ir_strmap_get(&b->params, st->params[i]))
      lerr(c, st->param_locs[i], "block '%s' has two parameters named '%s'", name,
           show(st->params[i]));
    else
      ir_strmap_put(&b->params, st->params[i], (void *)(intptr_t)(i + 1));
  }
  check_placement(c, st->body, st->nbody, IN_BLOCK, 1);
  /* A return that is not last was reported by check_placement. */
  bool has_return = false;
  for (int i = 0; i < st->nbody; i++)
    if (st->body[i]->kind == AST_RETURN) has_return = true;
  if (!has_return)
    lerr(c, st->end_loc, "missing 'return' at the end of block '%s'", show(name));
  ir_vec_push(&c->blocks, b);
  ir_strmap_put(&c->block_map, name, b);
}

/* A block nobody calls is still checked, in a scratch graph, with its
 * parameters unknown (poison), so its mistakes do not hide until used. */
static void check_uncalled(Ctx *c) {
  for (int i = 0; i < c->blocks.len; i++) {
    Block *b = c->blocks.items[i];
    if (b->called) continue;
    Scope s = {.by_name.arena = true, .g = ir_graph_new("scratch"), .prefix = ""};
    Val *vals = ir_alloc(sizeof(Val) * (size_t)(b->def->nparams + 1));
    for (int j = 0; j < b->def->nparams; j++) vals[j] = err_val;
    inline_block(c, &s, b, vals, "", b->def->name_locs[0]);
    c->calls.len = 0;
  }
}

/* The model's name: `model NAME`, else the file's base name when it is an
 * identifier, else "model". */
static const char *model_name(AstFile *ast) {
  if (ast->model) return ast->model;
  const char *base = strrchr(ast->file, '/');
  base = base ? base + 1 : ast->file;
  size_t n = strcspn(base, ".");
  if (n == 0 || n > 64 || (base[0] >= '0' && base[0] <= '9')) return "model";
  for (size_t i = 0; i < n; i++) {
    char ch = base[i];
    if (!(ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9')))
      return "model";
  }
  return ir_strndup(base, n);
}

IrGraph *fe_lower(AstFile *ast) {
  int before = ir_error_count();
  Ctx c = {.ast = ast,
           .top = ir_graph_new(model_name(ast)),
           .block_map.arena = true,
           .configs.arena = true,
           .params.arena = true,
           .labels.arena = true,
           .outputs.arena = true};
  /* Structure first, in file order: placement, then each block's shape. */
  for (int i = 0; i < ast->nitems; i++) {
    check_placement(&c, &ast->items[i], 1, AT_TOP, 0);
    if (ast->items[i]->kind == AST_BLOCK) register_block(&c, ast->items[i]);
  }
  Scope top = {.by_name.arena = true, .g = c.top, .prefix = "", .top = true};
  lower_items(&c, &top, ast->items, ast->nitems, NULL);
  check_uncalled(&c);
  bool any_output = false;
  for (int i = 0; i < ast->nitems; i++)
    if (ast->items[i]->kind == AST_OUTPUT) any_output = true;
  if (!any_output)
    lerr(&c, (IrLoc){ast->file, 0, 0}, "the model has no output (add 'output loss = ...')");
  return ir_error_count() == before ? c.top : NULL;
}
