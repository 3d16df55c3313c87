/* Syntax tree constructors for the parser actions. */
#include <string.h>

#include "ast.h"

IrLoc fe_loc(const FeParser *p, int line, int col) { return (IrLoc){p->file, line, col}; }

AstExpr *ast_expr(AstExprKind kind, IrLoc loc) {
  AstExpr *e = ir_alloc(sizeof *e);
  e->kind = kind;
  e->loc = loc;
  e->op_loc = loc;
  return e;
}

AstStmt *ast_stmt(AstStmtKind kind, IrLoc loc) {
  AstStmt *s = ir_alloc(sizeof *s);
  s->kind = kind;
  s->loc = loc;
  return s;
}

AstList *ast_list_new(void) { return ir_alloc(sizeof(AstList)); }

void ast_list_push(AstList *l, void *item) { ir_vec_push(&l->v, item); }

void ast_list_push_name(AstList *l, const char *name, IrLoc loc) {
  IrLoc *p = ir_alloc(sizeof *p);
  *p = loc;
  ir_vec_push(&l->v, (void *)name);
  ir_vec_push(&l->locs, p);
}

AstPath *ast_path_new(const char *first) {
  AstPath *p = ir_alloc(sizeof *p);
  p->len = strlen(first);
  p->cap = p->len + 16;
  p->buf = ir_alloc(p->cap);
  memcpy(p->buf, first, p->len);
  return p;
}

/* Doubles the buffer when full, so a path of n parts costs O(n) overall. */
void ast_path_append(AstPath *p, const char *name) {
  size_t n = strlen(name);
  if (p->len + n + 2 > p->cap) {
    size_t cap = (p->len + n + 2) * 2;
    char *buf = ir_alloc(cap);
    memcpy(buf, p->buf, p->len);
    p->buf = buf;
    p->cap = cap;
  }
  p->buf[p->len++] = '.';
  memcpy(p->buf + p->len, name, n);
  p->len += n;
  p->buf[p->len] = 0;
}

/* Names and their locations as two parallel arrays. */
static void names_array(AstList *l, const char ***names, IrLoc **locs, int *n) {
  *n = l ? l->v.len : 0;
  *names = ir_alloc(sizeof(char *) * (size_t)(*n ? *n : 1));
  *locs = ir_alloc(sizeof(IrLoc) * (size_t)(*n ? *n : 1));
  for (int i = 0; i < *n; i++) {
    (*names)[i] = l->v.items[i];
    (*locs)[i] = *(IrLoc *)l->locs.items[i];
  }
}

void ast_set_names(AstStmt *s, AstList *names) {
  names_array(names, &s->names, &s->name_locs, &s->nnames);
}

void ast_set_params(AstStmt *s, AstList *params) {
  names_array(params, &s->params, &s->param_locs, &s->nparams);
}

void ast_set_body(AstStmt *s, AstList *body) {
  s->nbody = body ? body->v.len : 0;
  s->body = ir_alloc(sizeof(AstStmt *) * (size_t)(s->nbody ? s->nbody : 1));
  for (int i = 0; i < s->nbody; i++) s->body[i] = body->v.items[i];
}

AstArg *ast_arg(const char *kw, IrLoc kw_loc, AstExpr *e) {
  AstArg *a = ir_alloc(sizeof *a);
  a->kw = kw;
  a->kw_loc = kw_loc;
  a->e = e;
  return a;
}

AstArg *ast_args_array(AstList *args, int *n) {
  *n = args ? args->v.len : 0;
  AstArg *out = ir_alloc(sizeof(AstArg) * (size_t)(*n ? *n : 1));
  for (int i = 0; i < *n; i++) out[i] = *(AstArg *)args->v.items[i];
  return out;
}

void ast_set_args(AstExpr *e, AstList *args) { e->args = ast_args_array(args, &e->nargs); }

AstExpr **ast_exprs_array(AstList *exprs, int *n) {
  *n = exprs ? exprs->v.len : 0;
  AstExpr **out = ir_alloc(sizeof(AstExpr *) * (size_t)(*n ? *n : 1));
  for (int i = 0; i < *n; i++) out[i] = exprs->v.items[i];
  return out;
}
