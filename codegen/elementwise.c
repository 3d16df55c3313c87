/* The elementwise ops' formulas (the FORMULA lines of ir/ops.def) as code
 * of the generated programs: every target's fused loops put the same
 * expression in, each around its own loads and stores, so that an op's
 * math is written once and the functions it calls (kernels/formulas.h)
 * once more for all targets and kernels. */
#include <ctype.h>
#include <string.h>

#include "target.h"

/* Outputs of one formula: as many as an elementwise op has (swiglu_grad's
 * two). */
#define CG_FORMULA_OUTS 4

/* The formulas of each op, indexed by output; NULL past the last. */
static const char *const formulas[IR_OP_COUNT][CG_FORMULA_OUTS] = {
#define OP(id, name, min_in, max_in, nout, shape, attrs, flags, adjoint, tp, rows, flops, doc)
#define FORMULA(id, ...) [IR_OP_##id] = {__VA_ARGS__},
#include "../ir/ops.def"
#undef FORMULA
#undef OP
};

int cg_formula_outputs(IrOp op) {
  int k = 0;
  while (k < CG_FORMULA_OUTS && formulas[op][k]) k++;
  return k;
}

const char *cg_formula_text(IrOp op, int out) {
  return out >= 0 && out < cg_formula_outputs(op) ? formulas[op][out] : NULL;
}

bool cg_formula_writes_op(IrOp op) {
  return (ir_op_info(op)->flags & IR_OPF_ELEMENTWISE) && cg_formula_outputs(op) > 0;
}

const char *cg_formula(const IrNode *n, int out, const char *const *a) {
  const char *f = cg_formula_text(n->op, out);
  if (!f) return NULL;
  char *s = ir_strdup("");
  while (*f) {
    const char *dollar = strchr(f, '$');
    if (!dollar) {
      s = ir_fmt("%s%s", s, f);
      break;
    }
    s = ir_fmt("%s%.*s", s, (int)(dollar - f), f);
    f = dollar + 1;
    if (isdigit((unsigned char)*f)) {
      int k = 0;
      while (isdigit((unsigned char)*f)) k = 10 * k + (*f++ - '0');
      if (k >= n->nin) die("formula of %s: input $%d of %d", ir_op_info(n->op)->name, k, n->nin);
      s = ir_fmt("%s%s", s, a[k]);
    } else {
      const char *name = f;
      while (isalnum((unsigned char)*f) || *f == '_') f++;
      if (f == name) die("formula of %s: a '$' without a name", ir_op_info(n->op)->name);
      s = ir_fmt("%s%s", s, cg_real(ir_attr_float(n, ir_fmt("%.*s", (int)(f - name), name))));
    }
  }
  return s;
}

bool cg_in_run(const CgEmitter *e, int first, int last, const IrValue *v) {
  if (v->kind != IR_VAL_NODE) return false;
  for (int k = first; k <= last; k++)
    if (cg_node(e, k) == v->def) return true;
  return false;
}

const char *cg_reg(CgEmitter *e, const IrValue *v) {
  return ir_fmt("v%d", cg_buf(e, v)->index - e->plan->nleaves);
}

void cg_formula_body(CgEmitter *e, int first, int last, const CgRunHooks *h) {
  int slot = 0;
  for (int k = first; k <= last; k++) {
    const IrNode *n = cg_node(e, k);
    const char **a = ir_alloc((size_t)(n->nin ? n->nin : 1) * sizeof *a);
    for (int j = 0; j < n->nin; j++) a[j] = h->operand(e, h->run, n->in[j]);
    for (int j = 0; j < n->nout; j++) {
      const PassBuf *b = cg_buf(e, n->out[j]);
      const char *x = cg_formula(n, j, a), *reg = cg_reg(e, n->out[j]);
      /* writes_op lets no op without a formula into a fused run. */
      if (!x) die("op %s in a fused run has no formula", ir_op_info(n->op)->name);
      emit(e, "const real %s = %s;", reg, x);
      if (b->region != PASS_REGION_NONE) h->store(e, h->run, n->out[j], slot++, reg);
      else if (b->uses == 0) emit(e, "(void)%s;", reg);
    }
  }
}
