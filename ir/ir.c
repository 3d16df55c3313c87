/* IR construction: expressions, types, the op table and graph builders. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "shape.h"

/* ------------------------------------------------------------ expressions */

static IrExpr *new_expr(IrExprKind k, IrLoc loc) {
  IrExpr *e = ir_alloc(sizeof *e);
  e->kind = k;
  e->loc = loc;
  return e;
}

IrExpr *ir_expr_int(int64_t v, IrLoc loc) {
  IrExpr *e = new_expr(IR_EX_INT, loc);
  e->i = v;
  return e;
}

IrExpr *ir_expr_float(double v, IrLoc loc) {
  IrExpr *e = new_expr(IR_EX_FLOAT, loc);
  e->f = v;
  return e;
}

IrExpr *ir_expr_name(const char *name, IrLoc loc) {
  IrExpr *e = new_expr(IR_EX_NAME, loc);
  e->name = ir_strdup(name);
  return e;
}

IrExpr *ir_expr_unary(IrExprKind k, IrExpr *a, IrLoc loc) {
  IrExpr *e = new_expr(k, loc);
  e->a = a;
  return e;
}

IrExpr *ir_expr_binary(IrExprKind k, IrExpr *a, IrExpr *b, IrLoc loc) {
  IrExpr *e = new_expr(k, loc);
  e->a = a;
  e->b = b;
  return e;
}

static IrExpr **copy_exprs(IrExpr **items, int n) {
  IrExpr **p = ir_alloc(sizeof(IrExpr *) * (size_t)(n ? n : 1));
  if (n) memcpy(p, items, sizeof(IrExpr *) * (size_t)n);
  return p;
}

IrExpr *ir_expr_call(const char *fn, IrExpr **args, int nargs, IrLoc loc) {
  IrExpr *e = new_expr(IR_EX_CALL, loc);
  e->name = ir_strdup(fn);
  e->args = copy_exprs(args, nargs);
  e->nargs = nargs;
  return e;
}

IrExpr *ir_expr_list(IrExpr **items, int n, IrLoc loc) {
  IrExpr *e = new_expr(IR_EX_LIST, loc);
  e->args = copy_exprs(items, n);
  e->nargs = n;
  return e;
}

bool ir_expr_is_literal(const IrExpr *e) {
  if (e->kind == IR_EX_INT || e->kind == IR_EX_FLOAT) return true;
  if (e->kind != IR_EX_LIST) return false;
  for (int i = 0; i < e->nargs; i++)
    if (!ir_expr_is_literal(e->args[i])) return false;
  return true;
}

/* Floats print with %.17g so that printing and parsing is exact, and always
 * with a '.' or exponent so they read back as floats. */
static void print_float(FILE *out, double f) {
  char buf[64];
  if (isinf(f)) {
    fputs(f < 0 ? "-inf" : "inf", out);
    return;
  }
  if (isnan(f)) {
    fputs("nan", out);
    return;
  }
  snprintf(buf, sizeof buf, "%.17g", f);
  /* Use the shortest form that reads back exactly. */
  for (int prec = 1; prec <= 17; prec++) {
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.*g", prec, f);
    if (strtod(tmp, NULL) == f) {
      strcpy(buf, tmp);
      break;
    }
  }
  /* Whole numbers read better as 10000.0 than as 1e+04. */
  if (f == floor(f) && fabs(f) < 1e16) snprintf(buf, sizeof buf, "%.1f", f);
  fputs(buf, out);
  if (!strpbrk(buf, ".eEn")) fputs(".0", out);
}

void ir_expr_print(FILE *out, const IrExpr *e) {
  static const char *ops[] = {[IR_EX_ADD] = " + ", [IR_EX_SUB] = " - ", [IR_EX_MUL] = " * ",
                              [IR_EX_DIV] = " / ", [IR_EX_MOD] = " % "};
  switch (e->kind) {
  case IR_EX_INT: fprintf(out, "%lld", (long long)e->i); return;
  case IR_EX_FLOAT: print_float(out, e->f); return;
  case IR_EX_NAME: fputs(e->name, out); return;
  case IR_EX_NEG:
    fputs("(-", out);
    ir_expr_print(out, e->a);
    fputc(')', out);
    return;
  case IR_EX_ADD:
  case IR_EX_SUB:
  case IR_EX_MUL:
  case IR_EX_DIV:
  case IR_EX_MOD:
    fputc('(', out);
    ir_expr_print(out, e->a);
    fputs(ops[e->kind], out);
    ir_expr_print(out, e->b);
    fputc(')', out);
    return;
  case IR_EX_CALL:
  case IR_EX_LIST:
    if (e->kind == IR_EX_CALL) fputs(e->name, out);
    fputc(e->kind == IR_EX_CALL ? '(' : '[', out);
    for (int i = 0; i < e->nargs; i++) {
      if (i) fputs(", ", out);
      ir_expr_print(out, e->args[i]);
    }
    fputc(e->kind == IR_EX_CALL ? ')' : ']', out);
    return;
  }
  unreachable();
}

/* ------------------------------------------------------------------ types */

static const struct {
  const char *name;
  int size;
} dtypes[] = {[IR_F32] = {"f32", 4}, [IR_F64] = {"f64", 8}, [IR_BF16] = {"bf16", 2},
              [IR_F16] = {"f16", 2}, [IR_I32] = {"i32", 4}, [IR_I64] = {"i64", 8}};

const char *ir_dtype_name(IrDType t) { return dtypes[t].name; }
int ir_dtype_size(IrDType t) { return dtypes[t].size; }

bool ir_dtype_parse(const char *s, IrDType *out) {
  for (int i = 0; i < (int)(sizeof dtypes / sizeof dtypes[0]); i++)
    if (strcmp(dtypes[i].name, s) == 0) {
      *out = (IrDType)i;
      return true;
    }
  return false;
}

bool ir_type_known(const IrType *t) {
  if (t->rank < 0) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] && t->dims[i]->kind != IR_EX_INT) return false;
  return true;
}

int64_t ir_type_numel(const IrType *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->shape[i];
  return n;
}

void ir_type_set_shape(IrType *t, IrDType dt, int rank, const int64_t *shape) {
  if (rank < 0 || rank > IR_MAX_RANK) die("rank %d out of range", rank);
  t->dtype = dt;
  t->rank = rank;
  for (int i = 0; i < IR_MAX_RANK; i++) {
    t->shape[i] = i < rank ? shape[i] : 0;
    t->dims[i] = NULL;
  }
}

static void print_shape(FILE *out, const IrType *t) {
  fputc('[', out);
  for (int i = 0; i < t->rank; i++) {
    if (i) fputs(", ", out);
    if (t->dims[i] && t->dims[i]->kind != IR_EX_INT)
      ir_expr_print(out, t->dims[i]);
    else
      fprintf(out, "%lld", (long long)t->shape[i]);
  }
  fputc(']', out);
}

void ir_type_print(FILE *out, const IrType *t) {
  fputs(ir_dtype_name(t->dtype), out);
  print_shape(out, t);
}

bool ir_dtype_is_float(IrDType t) {
  return t == IR_F32 || t == IR_F64 || t == IR_BF16 || t == IR_F16;
}

bool ir_type_same(const IrType *a, const IrType *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

/* Printing into an arena string: open, print, then close. */
typedef struct StrOut {
  FILE *f;
  char *buf;
  size_t len;
} StrOut;

static void str_open(StrOut *o) {
  *o = (StrOut){0};
  o->f = open_memstream(&o->buf, &o->len);
  if (!o->f) die("open_memstream failed");
}

static char *str_close(StrOut *o) {
  fclose(o->f);
  char *s = ir_strdup(o->buf);
  free(o->buf);
  return s;
}

char *ir_shape_str(const IrType *t) {
  StrOut o;
  str_open(&o);
  print_shape(o.f, t);
  return str_close(&o);
}

char *ir_type_str(const IrType *t) {
  StrOut o;
  str_open(&o);
  ir_type_print(o.f, t);
  return str_close(&o);
}

char *ir_expr_str(const IrExpr *e) {
  StrOut o;
  str_open(&o);
  ir_expr_print(o.f, e);
  return str_close(&o);
}

const char *ir_axis_name(IrMeshAxis a) {
  static const char *const names[] = {"tensor", "pipeline", "data", "embed"};
  return (unsigned)a <= IR_AXIS_EMBED ? names[a] : "?";
}

/* ---------------------------------------------------------------- op table */

static IrOpInfo op_table[] = {
#define OP(id, name, min_in, max_in, nout, shape, attrs, flags, adjoint, tp, rows, flops, doc) \
  {name, min_in, max_in, nout, shape, attrs, flags, rows, flops, doc, {{0}}, 0},
#include "ops.def"
#undef OP
};

/* Splits each op's attribute spec ("n axis=-1") into name/default pairs once. */
static void init_op_table(void) {
  static bool done;
  if (done) return;
  done = true;
  for (int i = 0; i < IR_OP_COUNT; i++) {
    IrOpInfo *info = &op_table[i];
    const char *p = info->attrs;
    while (*p) {
      while (*p == ' ') p++;
      if (!*p) break;
      const char *start = p;
      while (*p && *p != ' ') p++;
      if (info->nattr == (int)(sizeof info->attr / sizeof info->attr[0]))
        die("op %s: too many attributes", info->name);
      char *word = ir_strndup(start, (size_t)(p - start));
      bool quiet = *word == '?';
      if (quiet) word++;
      char *eq = strchr(word, '=');
      if (eq) *eq = 0;
      if (quiet && !eq) die("op %s: quiet attribute %s needs a default", info->name, word);
      info->attr[info->nattr++] = (IrAttrSpec){word, eq ? eq + 1 : NULL, quiet};
    }
  }
}

const IrOpInfo *ir_op_info(IrOp op) {
  if ((unsigned)op >= IR_OP_COUNT) die("bad op %d", (int)op);
  init_op_table();
  return &op_table[op];
}

bool ir_op_lookup(const char *name, IrOp *out) {
  init_op_table();
  for (int i = 0; i < IR_OP_COUNT; i++)
    if (strcmp(op_table[i].name, name) == 0) {
      *out = (IrOp)i;
      return true;
    }
  return false;
}

/* ----------------------------------------------------------------- graphs */

IrGraph *ir_graph_new(const char *name) {
  IrGraph *g = ir_alloc(sizeof *g);
  g->name = ir_strdup(name ? name : "model");
  return g;
}

IrGraph *ir_body_new(IrGraph *parent) {
  IrGraph *g = ir_alloc(sizeof *g);
  g->name = parent->name;
  g->parent = parent;
  return g;
}

IrGraph *ir_top(IrGraph *g) {
  while (g->parent) g = g->parent;
  return g;
}

IrConfig *ir_add_config(IrGraph *g, const char *name, IrExpr *e, IrLoc loc) {
  IrConfig *c = ir_alloc(sizeof *c);
  c->name = ir_strdup(name);
  c->expr = e;
  c->loc = loc;
  ir_vec_push(&g->configs, c);
  return c;
}

IrConfig *ir_find_config(IrGraph *g, const char *name) {
  g = ir_top(g);
  for (int i = 0; i < g->configs.len; i++) {
    IrConfig *c = g->configs.items[i];
    if (strcmp(c->name, name) == 0) return c;
  }
  return NULL;
}

static IrValue *new_value(IrGraph *g, IrValueKind kind, const char *name, IrLoc loc) {
  IrValue *v = ir_alloc(sizeof *v);
  v->id = g->next_id++;
  v->kind = kind;
  v->name = name ? ir_strdup(name) : NULL;
  v->graph = g;
  v->loc = loc;
  v->type.rank = -1;
  return v;
}

IrValue *ir_add_input(IrGraph *g, const char *name, IrType type, IrLoc loc) {
  IrValue *v = new_value(g, IR_VAL_INPUT, name, loc);
  v->type = type;
  ir_vec_push(&g->inputs, v);
  return v;
}

IrValue *ir_add_param(IrGraph *g, const char *name, IrType type, IrInit init, IrLoc loc) {
  IrValue *v = new_value(g, IR_VAL_PARAM, name, loc);
  v->type = type;
  v->init = init;
  ir_vec_push(&g->params, v);
  return v;
}

IrValue *ir_add_arg(IrGraph *body, IrType type, IrLoc loc) {
  IrValue *v = new_value(body, IR_VAL_ARG, NULL, loc);
  v->type = type;
  ir_vec_push(&body->args, v);
  return v;
}

IrValue *ir_find_param(IrGraph *g, const char *name) {
  for (int i = 0; i < g->params.len; i++) {
    IrValue *v = g->params.items[i];
    if (strcmp(v->name, name) == 0) return v;
  }
  return NULL;
}

IrNode *ir_add_node(IrGraph *g, IrOp op, IrValue **in, int nin, IrAttr *attrs, int nattr,
                    int nout, IrLoc loc) {
  const IrOpInfo *info = ir_op_info(op);
  IrNode *n = ir_alloc(sizeof *n);
  n->op = op;
  n->loc = loc;
  n->layer = -1;
  n->nin = nin;
  n->in = ir_alloc(sizeof(IrValue *) * (size_t)(nin ? nin : 1));
  if (nin) memcpy(n->in, in, sizeof(IrValue *) * (size_t)nin);
  /* A quiet attribute the caller leaves out takes its default: those were
   * added to ops that code builds without them (gelu's approximate, rope's
   * dims), and such a node means what it meant before they existed. */
  n->attrs = ir_alloc(sizeof(IrAttr) * (size_t)(nattr + info->nattr + 1));
  if (nattr) memcpy(n->attrs, attrs, sizeof(IrAttr) * (size_t)nattr);
  n->nattr = nattr;
  for (int k = 0; k < info->nattr; k++) {
    const IrAttrSpec *a = &info->attr[k];
    bool given = false;
    for (int i = 0; i < nattr && !given; i++) given = strcmp(attrs[i].name, a->name) == 0;
    if (!given && a->quiet && a->dflt)
      n->attrs[n->nattr++] = (IrAttr){a->name, ir_attr_default(a, loc)};
  }
  n->nout = (info->flags & IR_OPF_MULTI_OUT) ? nout : info->nout;
  if (n->nout < 0) die("op %s: negative output count", info->name);
  n->out = ir_alloc(sizeof(IrValue *) * (size_t)(n->nout ? n->nout : 1));
  for (int i = 0; i < n->nout; i++) {
    IrValue *v = new_value(g, IR_VAL_NODE, NULL, loc);
    v->def = n;
    v->def_index = i;
    n->out[i] = v;
  }
  ir_vec_push(&g->nodes, n);
  return n;
}

IrNode *ir_add_repeat(IrGraph *g, const char *label, IrExpr *count, IrValue **in, int nin,
                      int ncarried, IrGraph *body, IrLoc loc) {
  IrAttr attrs[2] = {{"count", count}, {"ncarried", ir_expr_int(ncarried, loc)}};
  IrNode *n = ir_add_node(g, IR_OP_REPEAT, in, nin, attrs, 2, 0, loc);
  /* A repeat's outputs are its carried values, one per carried input. */
  n->nout = ncarried;
  n->out = ir_alloc(sizeof(IrValue *) * (size_t)(ncarried ? ncarried : 1));
  for (int i = 0; i < ncarried; i++) {
    IrValue *v = new_value(g, IR_VAL_NODE, NULL, loc);
    v->def = n;
    v->def_index = i;
    n->out[i] = v;
  }
  n->body = body;
  n->label = ir_strdup(label);
  body->owner = n;
  return n;
}

void ir_add_output(IrGraph *g, const char *name, IrValue *v) {
  ir_vec_push(&g->outputs, v);
  ir_vec_push(&g->output_names, name ? ir_strdup(name) : NULL);
}

IrAttr *ir_node_attr(const IrNode *n, const char *name) {
  for (int i = 0; i < n->nattr; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

IrExpr *ir_attr_default(const IrAttrSpec *spec, IrLoc loc) {
  if (!spec->dflt) return NULL;
  if (strpbrk(spec->dflt, ".eEn")) return ir_expr_float(strtod(spec->dflt, NULL), loc);
  return ir_expr_int(strtoll(spec->dflt, NULL, 10), loc);
}

bool ir_attr_has(const IrNode *n, const char *name) { return ir_node_attr(n, name) != NULL; }

int64_t ir_attr_int(const IrNode *n, const char *name) {
  IrAttr *a = ir_node_attr(n, name);
  if (!a) die("op %s has no attribute %s", ir_op_info(n->op)->name, name);
  if (a->expr->kind == IR_EX_INT) return a->expr->i;
  if (a->expr->kind == IR_EX_FLOAT) return (int64_t)a->expr->f;
  die("attribute %s of %s is not folded", name, ir_op_info(n->op)->name);
}

double ir_attr_float(const IrNode *n, const char *name) {
  IrAttr *a = ir_node_attr(n, name);
  if (!a) die("op %s has no attribute %s", ir_op_info(n->op)->name, name);
  if (a->expr->kind == IR_EX_INT) return (double)a->expr->i;
  if (a->expr->kind == IR_EX_FLOAT) return a->expr->f;
  die("attribute %s of %s is not folded", name, ir_op_info(n->op)->name);
}

int64_t ir_graph_multiplicity(const IrGraph *g) {
  int64_t m = 1;
  for (; g->parent; g = g->parent) m *= ir_attr_int(g->owner, "count");
  return m;
}

int *ir_count_uses(const IrGraph *g) {
  int *uses = ir_alloc(sizeof(int) * (size_t)(g->next_id + 1));
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j]->graph == g) uses[n->in[j]->id]++;
  }
  for (int i = 0; i < g->outputs.len; i++) {
    const IrValue *v = g->outputs.items[i];
    if (v->graph == g) uses[v->id]++;
  }
  for (int i = 0; i < g->params.len; i++) {
    const IrValue *p = g->params.items[i];
    if (p->grad && p->grad->graph == g) uses[p->grad->id]++;
  }
  return uses;
}

static int replace(IrValue **slot, const IrValue *old, IrValue *new_value) {
  if (*slot != old) return 0;
  *slot = new_value;
  return 1;
}

int ir_replace_uses(IrGraph *g, const IrValue *old, IrValue *new_value) {
  int count = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) count += replace(&n->in[j], old, new_value);
  }
  for (int i = 0; i < g->outputs.len; i++)
    if (g->outputs.items[i] == old) {
      g->outputs.items[i] = new_value;
      count++;
    }
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i];
    count += replace(&p->grad, old, new_value);
  }
  return count;
}
