/* Shape rules: one function per `shape` column of ops.def, and the walker
 * that applies them to a graph in order (the `shape` pass and the repeat
 * rule share it).
 *
 * A rule runs once every input type is known (all dims literal). It reads
 * the node's folded attributes, checks the inputs against each other, and
 * sets the types of the outputs. A mismatch is a user error: it is reported
 * at the node, naming the op and printing both shapes involved, because the
 * user has to see the two sides to know which one to fix. A rule whose input
 * is still unknown returns false silently: an earlier error explains it. */
#include <math.h>
#include <string.h>

#include "ir.h"
#include "shape.h"


/* ---------------------------------------------------------------- helpers */

static const char *op_name(const IrNode *n) { return ir_op_info(n->op)->name; }

static bool is_int(IrDType t) { return t == IR_I32 || t == IR_I64; }

static IrType *in_type(const IrNode *n, int i) { return &n->in[i]->type; }

#define S(t) ir_shape_str(t)

/* True when every input type is known. Literal dims are copied into shape[]
 * so that the rules can read shape[] alone, whoever built the type. */
static bool inputs_ready(IrNode *n) {
  for (int i = 0; i < n->nin; i++) {
    IrType *t = in_type(n, i);
    if (!ir_type_known(t)) return false;
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d]) t->shape[d] = t->dims[d]->i;
  }
  return true;
}

static void set_out(IrNode *n, int i, IrDType dt, int rank, const int64_t *shape) {
  ir_type_set_shape(&n->out[i]->type, dt, rank, shape);
}

/* Checks that input i has a float dtype (the math ops compute in floats). */
static bool want_float(IrNode *n, int i, const char *what) {
  const IrType *t = in_type(n, i);
  if (ir_dtype_is_float(t->dtype)) return true;
  ir_error(n->loc, "%s: %s must be a float tensor, got %s", op_name(n), what, ir_type_str(t));
  return false;
}

static bool want_int(IrNode *n, int i, const char *what) {
  const IrType *t = in_type(n, i);
  if (is_int(t->dtype)) return true;
  ir_error(n->loc, "%s: %s must be an integer tensor (i32 or i64), got %s", op_name(n), what,
           ir_type_str(t));
  return false;
}

static bool want_rank(IrNode *n, int i, const char *what, int rank, const char *layout) {
  const IrType *t = in_type(n, i);
  if (t->rank == rank) return true;
  ir_error(n->loc, "%s: %s must have %d dims %s, got %s", op_name(n), what, rank, layout, S(t));
  return false;
}

/* Product of dims with overflow detection; false when it overflows. */
static bool numel(const int64_t *shape, int rank, int64_t *out) {
  int64_t p = 1;
  for (int i = 0; i < rank; i++)
    if (__builtin_mul_overflow(p, shape[i], &p)) return false;
  *out = p;
  return true;
}

/* Turns a possibly negative dim index into 0..rank-1. */
static bool norm_axis(IrNode *n, const char *attr, int64_t *axis, const IrType *t,
                      const char *what) {
  int64_t a = *axis < 0 ? *axis + t->rank : *axis;
  if (a < 0 || a >= t->rank) {
    ir_error(n->loc, "%s: %s = %lld is out of range for %s%s (rank %d)", op_name(n), attr,
             (long long)*axis, what, S(t), t->rank);
    return false;
  }
  *axis = a;
  return true;
}

/* ------------------------------------------------------------- attributes */

/* The folded value of attribute `name`, or the default of the op's spec
 * when the node does not carry it. NULL after reporting an error. */
static const IrExpr *attr_expr(IrNode *n, const char *name) {
  IrAttr *a = ir_node_attr(n, name);
  const IrExpr *e = a ? a->expr : NULL;
  const IrOpInfo *info = ir_op_info(n->op);
  for (int i = 0; !e && i < info->nattr; i++)
    if (strcmp(info->attr[i].name, name) == 0) e = ir_attr_default(&info->attr[i], n->loc);
  if (!e) {
    ir_error(n->loc, "%s: missing attribute '%s'", op_name(n), name);
    return NULL;
  }
  if (!ir_expr_is_literal(e)) {
    ir_error(e->loc.line > 0 ? e->loc : n->loc,
             "%s: attribute %s = %s is not a number yet (run the fold pass first)", op_name(n),
             name, ir_expr_str(e));
    return NULL;
  }
  return e;
}

static IrLoc attr_loc(const IrNode *n, const IrExpr *e) {
  return e->loc.line > 0 ? e->loc : n->loc;
}

static bool get_int(IrNode *n, const char *name, int64_t *out) {
  const IrExpr *e = attr_expr(n, name);
  if (!e) return false;
  if (e->kind != IR_EX_INT) {
    ir_error(attr_loc(n, e), "%s: %s must be an integer, got %s", op_name(n), name, ir_expr_str(e));
    return false;
  }
  *out = e->i;
  return true;
}

static bool get_pos_int(IrNode *n, const char *name, int64_t *out) {
  if (!get_int(n, name, out)) return false;
  if (*out > 0) return true;
  ir_error(attr_loc(n, attr_expr(n, name)), "%s: %s must be a positive integer, got %lld",
           op_name(n), name, (long long)*out);
  return false;
}

static bool get_nonneg_int(IrNode *n, const char *name, int64_t *out) {
  if (!get_int(n, name, out)) return false;
  if (*out >= 0) return true;
  ir_error(attr_loc(n, attr_expr(n, name)), "%s: %s must be a non-negative integer, got %lld",
           op_name(n), name, (long long)*out);
  return false;
}

/* Switches (transpose_b, causal, ...) are 0 or 1; `true` folds to 1. */
static bool get_flag(IrNode *n, const char *name, bool *out) {
  int64_t v;
  if (!get_int(n, name, &v)) return false;
  if (v != 0 && v != 1) {
    ir_error(attr_loc(n, attr_expr(n, name)), "%s: %s must be 0 or 1 (false or true), got %lld",
             op_name(n), name, (long long)v);
    return false;
  }
  *out = v == 1;
  return true;
}

static bool get_num(IrNode *n, const char *name, double *out) {
  const IrExpr *e = attr_expr(n, name);
  if (!e) return false;
  if (e->kind == IR_EX_INT)
    *out = (double)e->i;
  else if (e->kind == IR_EX_FLOAT)
    *out = e->f;
  else {
    ir_error(attr_loc(n, e), "%s: %s must be a number, got %s", op_name(n), name, ir_expr_str(e));
    return false;
  }
  return true;
}

/* Checks a number attribute against [lo, hi), or (lo, hi) with lo_open;
 * NaN is never in range. */
static bool get_num_in(IrNode *n, const char *name, double lo, bool lo_open, double hi, double *out,
                       const char *range) {
  if (!get_num(n, name, out)) return false;
  double v = *out;
  if ((lo_open ? v > lo : v >= lo) && v < hi) return true;
  ir_error(attr_loc(n, attr_expr(n, name)), "%s: %s must be %s, got %s", op_name(n), name, range,
           ir_expr_str(attr_expr(n, name)));
  return false;
}

/* --------------------------------------------------------- source and GEMM */

bool ir_shape_embedding(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *ids = in_type(n, 0), *table = in_type(n, 1);
  /* `&` rather than `&&` (here and below) runs both checks, so both errors
   * are reported; the casts say that the non-short-circuit is meant. */
  bool vp;
  bool ok = (int)want_int(n, 0, "ids") & (int)want_float(n, 1, "table") &
            (int)get_flag(n, "vocab_parallel", &vp);
  ok = ok && want_rank(n, 1, "table", 2, "[V, h]");
  if (ok && ids->rank + 1 > IR_MAX_RANK) {
    ir_error(n->loc, "embedding: ids%s has too many dims (the result may have at most %d)", S(ids),
             IR_MAX_RANK);
    ok = false;
  }
  if (!ok) return false;
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->rank);
  shape[ids->rank] = table->shape[1];
  set_out(n, 0, table->dtype, ids->rank + 1, shape);
  return true;
}

bool ir_shape_arange(IrNode *n) {
  int64_t len;
  if (!get_pos_int(n, "n", &len)) return false;
  set_out(n, 0, IR_I32, 1, &len);
  return true;
}

/* A shape attribute (zeros, sum_to): a list of positive integers, or one
 * integer; the empty list is a scalar. */
static bool shape_attr(IrNode *n, int64_t *shape, int *rank) {
  const IrExpr *e = attr_expr(n, "shape");
  if (!e) return false;
  IrExpr *const *items = e->kind == IR_EX_LIST ? e->args : (IrExpr *const *)&e;
  int count = e->kind == IR_EX_LIST ? e->nargs : 1;
  if (count > IR_MAX_RANK) {
    ir_error(attr_loc(n, e), "%s: shape %s has more than %d dims", op_name(n), ir_expr_str(e),
             IR_MAX_RANK);
    return false;
  }
  for (int i = 0; i < count; i++) {
    if (items[i]->kind != IR_EX_INT || items[i]->i <= 0) {
      ir_error(attr_loc(n, items[i]), "%s: shape %s must hold positive integers", op_name(n),
               ir_expr_str(e));
      return false;
    }
    shape[i] = items[i]->i;
  }
  *rank = count;
  return true;
}

bool ir_shape_zeros(IrNode *n) {
  int64_t shape[IR_MAX_RANK], dt, total;
  int rank;
  bool ok = shape_attr(n, shape, &rank);
  if (!get_int(n, "dtype", &dt)) {
    ok = false;
  } else if (dt < 0 || dt > IR_I64) {
    ir_error(attr_loc(n, attr_expr(n, "dtype")),
             "zeros: dtype = %lld is not a dtype number (0 f32, 1 f64, 2 bf16, 3 f16, 4 i32, "
             "5 i64)", (long long)dt);
    ok = false;
  }
  if (!ok) return false;
  if (!numel(shape, rank, &total)) {
    ir_error(n->loc, "zeros: shape %s has too many elements", ir_expr_str(attr_expr(n, "shape")));
    return false;
  }
  set_out(n, 0, (IrDType)dt, rank, shape);
  return true;
}

/* a[..., m, k] @ b[..., k, n]: b is either 2-D (one matrix shared by every
 * batch entry, as a weight is) or carries exactly a's batch dims. */
bool ir_shape_matmul(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *a = in_type(n, 0), *b = in_type(n, 1);
  bool ta, tb;
  bool ok = (int)get_flag(n, "transpose_a", &ta) & (int)get_flag(n, "transpose_b", &tb);
  ok = ((int)want_float(n, 0, "a") & (int)want_float(n, 1, "b")) && ok;
  for (int i = 0; ok && i < 2; i++)
    if (in_type(n, i)->rank < 2) {
      ir_error(n->loc, "matmul: %s%s must have at least 2 dims", i ? "b" : "a", S(in_type(n, i)));
      ok = false;
    }
  if (!ok) return false;
  int ra = a->rank, rb = b->rank;
  int64_t m = a->shape[ra - (ta ? 1 : 2)], ka = a->shape[ra - (ta ? 2 : 1)];
  int64_t kb = b->shape[rb - (tb ? 1 : 2)], nn = b->shape[rb - (tb ? 2 : 1)];
  if (ka != kb) {
    ir_error(n->loc, "matmul: a%s%s does not match b%s%s: inner dims %lld and %lld differ", S(a),
             ta ? " (transposed)" : "", S(b), tb ? " (transposed)" : "", (long long)ka,
             (long long)kb);
    return false;
  }
  bool batch_ok = rb == 2 || rb == ra;
  for (int i = 0; batch_ok && rb > 2 && i < ra - 2; i++) batch_ok = a->shape[i] == b->shape[i];
  if (!batch_ok) {
    ir_error(n->loc,
             "matmul: batch dims of a%s and b%s differ (b must be 2-D or have a's batch dims)",
             S(a), S(b));
    return false;
  }
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, a->shape, sizeof(int64_t) * (size_t)ra);
  shape[ra - 2] = m;
  shape[ra - 1] = nn;
  set_out(n, 0, b->dtype, ra, shape);
  return true;
}

/* x[..., in] @ weight[in, out] (+ bias[out]); transposed=1 stores the
 * weight as [out, in], the way torch.nn.Linear keeps it. */
bool ir_shape_linear(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0), *w = in_type(n, 1);
  bool tr;
  bool ok = get_flag(n, "transposed", &tr);
  ok = ((int)want_float(n, 0, "x") & (int)want_float(n, 1, "weight")) && ok;
  if (n->nin > 2) ok = want_float(n, 2, "bias") && ok;
  ok = want_rank(n, 1, "weight", 2, tr ? "[out, in]" : "[in, out]") && ok;
  if (ok && x->rank < 1) {
    ir_error(n->loc, "linear: x%s must have at least 1 dim", S(x));
    ok = false;
  }
  if (!ok) return false;
  int64_t in = w->shape[tr ? 1 : 0], out = w->shape[tr ? 0 : 1];
  if (x->shape[x->rank - 1] != in) {
    ir_error(n->loc, "linear: x%s does not match weight%s%s: inner dims %lld and %lld differ", S(x),
             S(w), tr ? " (transposed)" : "", (long long)x->shape[x->rank - 1], (long long)in);
    return false;
  }
  if (n->nin > 2) {
    const IrType *bias = in_type(n, 2);
    if (bias->rank != 1 || bias->shape[0] != out) {
      ir_error(n->loc, "linear: bias%s does not match weight%s%s: expected [%lld]", S(bias), S(w),
               tr ? " (transposed)" : "", (long long)out);
      return false;
    }
  }
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[x->rank - 1] = out;
  set_out(n, 0, w->dtype, x->rank, shape);
  return true;
}

/* ------------------------------------------------------------------ layout */

/* Reads reshape's target: a list of positive ints with at most one -1. */
static bool reshape_target(IrNode *n, int64_t *shape, int *rank, int *infer) {
  const IrExpr *e = attr_expr(n, "shape");
  if (!e) return false;
  IrExpr *const *items = e->kind == IR_EX_LIST ? e->args : (IrExpr *const *)&e;
  int count = e->kind == IR_EX_LIST ? e->nargs : 1;
  if (count > IR_MAX_RANK) {
    ir_error(attr_loc(n, e), "reshape: shape %s has more than %d dims", ir_expr_str(e), IR_MAX_RANK);
    return false;
  }
  *infer = -1;
  for (int i = 0; i < count; i++) {
    const IrExpr *d = items[i];
    bool bad = d->kind != IR_EX_INT || d->i == 0 || d->i < -1 || (d->i == -1 && *infer >= 0);
    if (bad) {
      ir_error(attr_loc(n, d), "reshape: shape %s must hold positive integers and at most one -1",
               ir_expr_str(e));
      return false;
    }
    if (d->i == -1) *infer = i;
    shape[i] = d->i;
  }
  *rank = count;
  return true;
}

bool ir_shape_reshape(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  int64_t shape[IR_MAX_RANK], have, want = 1;
  int rank, infer;
  if (!reshape_target(n, shape, &rank, &infer)) return false;
  char *target = ir_expr_str(attr_expr(n, "shape"));
  bool ok = numel(x->shape, x->rank, &have);
  for (int i = 0; ok && i < rank; i++)
    if (i != infer) ok = !__builtin_mul_overflow(want, shape[i], &want);
  if (!ok) {
    ir_error(n->loc, "reshape: x%s or shape %s has too many elements", S(x), target);
    return false;
  }
  if (infer >= 0) {
    if (have % want != 0) {
      ir_error(n->loc,
               "reshape: cannot reshape x%s (%lld elements) to %s: %lld is not a multiple of %lld",
               S(x), (long long)have, target, (long long)have, (long long)want);
      return false;
    }
    shape[infer] = have / want;
    want = have;
  }
  if (want != have) {
    ir_error(n->loc, "reshape: cannot reshape x%s (%lld elements) to %s (%lld elements)", S(x),
             (long long)have, target, (long long)want);
    return false;
  }
  set_out(n, 0, x->dtype, rank, shape);
  return true;
}

bool ir_shape_transpose(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  int64_t d0, d1;
  if (!((int)get_int(n, "dim0", &d0) & (int)get_int(n, "dim1", &d1))) return false;
  if (!((int)norm_axis(n, "dim0", &d0, x, "x") & (int)norm_axis(n, "dim1", &d1, x, "x"))) return false;
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[d0] = x->shape[d1];
  shape[d1] = x->shape[d0];
  set_out(n, 0, x->dtype, x->rank, shape);
  return true;
}

bool ir_shape_split_heads(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  int64_t heads;
  bool ok = get_pos_int(n, "heads", &heads);
  if (!(want_rank(n, 0, "x", 3, "[b, s, H*d]") && ok)) return false;
  if (x->shape[2] % heads != 0) {
    ir_error(n->loc,
             "split_heads: x%s cannot be split into %lld heads: %lld is not a multiple of %lld",
             S(x), (long long)heads, (long long)x->shape[2], (long long)heads);
    return false;
  }
  int64_t shape[4] = {x->shape[0], heads, x->shape[1], x->shape[2] / heads};
  set_out(n, 0, x->dtype, 4, shape);
  return true;
}

bool ir_shape_merge_heads(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  if (!want_rank(n, 0, "x", 4, "[b, H, s, d]")) return false;
  int64_t shape[3] = {x->shape[0], x->shape[2], 0};
  if (__builtin_mul_overflow(x->shape[1], x->shape[3], &shape[2])) {
    ir_error(n->loc, "merge_heads: x%s: heads * head dim overflows", S(x));
    return false;
  }
  set_out(n, 0, x->dtype, 3, shape);
  return true;
}

/* split(x, n): the node must have been built with n outputs. */
bool ir_shape_split(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  int64_t parts, axis;
  if (!((int)get_pos_int(n, "n", &parts) & (int)get_int(n, "axis", &axis))) return false;
  if (parts != n->nout) {
    ir_error(n->loc, "split: n = %lld but the node has %d output%s", (long long)parts, n->nout,
             n->nout == 1 ? "" : "s");
    return false;
  }
  if (!norm_axis(n, "axis", &axis, x, "x")) return false;
  if (x->shape[axis] % parts != 0) {
    ir_error(n->loc,
             "split: x%s cannot be split into %lld equal parts along axis %lld: %lld is not a "
             "multiple of %lld",
             S(x), (long long)parts, (long long)axis, (long long)x->shape[axis], (long long)parts);
    return false;
  }
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[axis] /= parts;
  for (int i = 0; i < n->nout; i++) set_out(n, i, x->dtype, x->rank, shape);
  return true;
}

/* slice(x){start, end, axis}: 0 <= start < end <= the length along axis. */
bool ir_shape_slice(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  int64_t start, end, axis;
  bool ok = (int)get_nonneg_int(n, "start", &start) & (int)get_pos_int(n, "end", &end) &
            (int)get_int(n, "axis", &axis);
  if (!ok || !norm_axis(n, "axis", &axis, x, "x")) return false;
  if (start >= end || end > x->shape[axis]) {
    ir_error(n->loc, "slice: [%lld, %lld) is not a non-empty range within the %lld elements of "
             "x%s along axis %lld", (long long)start, (long long)end, (long long)x->shape[axis],
             S(x), (long long)axis);
    return false;
  }
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[axis] = end - start;
  set_out(n, 0, x->dtype, x->rank, shape);
  return true;
}

/* concat(xs...): one dtype and rank, equal dims except along axis. */
bool ir_shape_concat(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  int64_t axis;
  if (!get_int(n, "axis", &axis) || !norm_axis(n, "axis", &axis, x, "x0")) return false;
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  for (int i = 1; i < n->nin; i++) {
    const IrType *t = in_type(n, i);
    bool ok = t->dtype == x->dtype && t->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++) ok = d == axis || t->shape[d] == x->shape[d];
    if (!ok) {
      ir_error(n->loc, "concat: x%d %s does not match x0 %s except along axis %lld", i,
               ir_type_str(t), ir_type_str(x), (long long)axis);
      return false;
    }
    if (__builtin_add_overflow(shape[axis], t->shape[axis], &shape[axis])) {
      ir_error(n->loc, "concat: the length along axis %lld overflows", (long long)axis);
      return false;
    }
  }
  set_out(n, 0, x->dtype, x->rank, shape);
  return true;
}

/* ------------------------------------------------------------- elementwise */

/* Numpy broadcasting: trailing dims are aligned; each pair must be equal or
 * one of them 1, and the missing leading dims count as 1. */
bool ir_shape_broadcast(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *a = in_type(n, 0), *b = in_type(n, 1);
  if (a->dtype != b->dtype) {
    ir_error(n->loc, "%s: a %s and b %s have different dtypes", op_name(n), ir_type_str(a),
             ir_type_str(b));
    return false;
  }
  int rank = a->rank > b->rank ? a->rank : b->rank;
  int64_t shape[IR_MAX_RANK];
  for (int i = 1; i <= rank; i++) {
    int64_t da = i <= a->rank ? a->shape[a->rank - i] : 1;
    int64_t db = i <= b->rank ? b->shape[b->rank - i] : 1;
    if (da != db && da != 1 && db != 1) {
      ir_error(n->loc, "%s: a%s and b%s do not broadcast: dims %lld and %lld differ", op_name(n),
               S(a), S(b), (long long)da, (long long)db);
      return false;
    }
    shape[rank - i] = da == 1 ? db : da;
  }
  set_out(n, 0, a->dtype, rank, shape);
  return true;
}

/* gelu's form: none (0, the exact erf) or tanh (1). */
static bool get_approximate(IrNode *n) {
  int64_t v;
  if (!get_int(n, "approximate", &v)) return false;
  if (v == 0 || v == 1) return true;
  ir_error(attr_loc(n, attr_expr(n, "approximate")),
           "%s: approximate must be none (0, the exact erf form) or tanh (1), got %lld", op_name(n),
           (long long)v);
  return false;
}

/* The unary float ops; scale and dropout also check their number. */
bool ir_shape_same(IrNode *n) {
  if (!inputs_ready(n)) return false;
  double v;
  bool ok = want_float(n, 0, "x");
  if (n->op == IR_OP_SCALE) ok = get_num(n, "s", &v) && ok;
  if (n->op == IR_OP_GELU) ok = get_approximate(n) && ok;
  if (n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_GRAD) {
    int64_t site;
    bool per_rank;
    ok = get_num_in(n, "rate", 0, false, 1, &v, "in [0, 1)") && ok;
    ok = get_nonneg_int(n, "site", &site) && ok;
    ok = get_flag(n, "per_rank", &per_rank) && ok;
  }
  if (!ok) return false;
  const IrType *x = in_type(n, 0);
  set_out(n, 0, x->dtype, x->rank, x->shape);
  return true;
}

/* swiglu(gate, up): two tensors of one type. */
bool ir_shape_same2(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *a = in_type(n, 0), *b = in_type(n, 1);
  if (!((int)want_float(n, 0, "gate") & (int)want_float(n, 1, "up"))) return false;
  if (!ir_type_same(a, b)) {
    ir_error(n->loc, "%s: gate %s and up %s must have the same type", op_name(n), ir_type_str(a),
             ir_type_str(b));
    return false;
  }
  set_out(n, 0, a->dtype, a->rank, a->shape);
  return true;
}

/* --------------------------------------------------------- normalisation */

bool ir_shape_norm(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  double eps;
  bool ok = get_num_in(n, "eps", 0, false, HUGE_VAL, &eps, "a non-negative number");
  ok = want_float(n, 0, "x") && ok;
  for (int i = 1; i < n->nin; i++) ok = want_float(n, i, i == 1 ? "weight" : "bias") && ok;
  if (ok && x->rank < 1) {
    ir_error(n->loc, "%s: x%s must have at least 1 dim", op_name(n), S(x));
    ok = false;
  }
  if (!ok) return false;
  int64_t h = x->shape[x->rank - 1];
  for (int i = 1; i < n->nin; i++) {
    const IrType *w = in_type(n, i);
    if (w->rank != 1 || w->shape[0] != h) {
      ir_error(n->loc, "%s: %s%s does not match x%s: expected [%lld]", op_name(n),
               i == 1 ? "weight" : "bias", S(w), S(x), (long long)h);
      ok = false;
    }
  }
  if (!ok) return false;
  set_out(n, 0, x->dtype, x->rank, x->shape);
  return true;
}

bool ir_shape_causal_mask(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  double fill;
  bool ok = get_num(n, "fill", &fill);
  if (!(want_float(n, 0, "scores") && ok)) return false;
  if (x->rank < 2 || x->shape[x->rank - 1] != x->shape[x->rank - 2]) {
    ir_error(n->loc, "causal_mask: scores%s must be square in its last two dims [..., s, s]", S(x));
    return false;
  }
  set_out(n, 0, x->dtype, x->rank, x->shape);
  return true;
}

/* --------------------------------------------------------------- attention */

bool ir_shape_rope(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  int64_t heads, dims;
  double theta;
  bool ok = get_pos_int(n, "heads", &heads);
  bool inverse;
  ok = get_num_in(n, "theta", 0, true, HUGE_VAL, &theta, "a positive number") && ok;
  ok = get_flag(n, "inverse", &inverse) && ok;
  ok = get_nonneg_int(n, "dims", &dims) && ok;
  ok = want_float(n, 0, "x") && ok;
  if (!(want_rank(n, 0, "x", 3, "[b, s, H*d]") && ok)) return false;
  int64_t last = x->shape[2];
  if (last % heads != 0) {
    ir_error(n->loc, "rope: x%s cannot be split into %lld heads: %lld is not a multiple of %lld",
             S(x), (long long)heads, (long long)last, (long long)heads);
    return false;
  }
  int64_t d = last / heads;
  if (dims > d || dims % 2 != 0) {
    ir_error(attr_loc(n, attr_expr(n, "dims")),
             "rope: dims = %lld must be even and at most the head dim %lld (%lld / %lld heads) "
             "of x%s", (long long)dims, (long long)d, (long long)last, (long long)heads, S(x));
    return false;
  }
  if (!dims && d % 2 != 0) {
    ir_error(n->loc,
             "rope: x%s has head dim %lld (%lld / %lld heads), which must be even to rotate pairs",
             S(x), (long long)d, (long long)last, (long long)heads);
    return false;
  }
  set_out(n, 0, x->dtype, 3, x->shape);
  return true;
}

/* Checks k or v (input i) against q: same batch (and sequence when
 * causal), kv_heads heads of q's head dim. */
static bool attention_kv(IrNode *n, int i, int64_t kvh, int64_t d, bool causal) {
  const IrType *q = in_type(n, 0), *t = in_type(n, i);
  int64_t width = kvh * d; /* <= q's width: cannot overflow */
  if (t->shape[0] == q->shape[0] && t->shape[2] == width && (!causal || t->shape[1] == q->shape[1]))
    return true;
  const char *seq = causal ? ir_fmt("%lld", (long long)q->shape[1]) : "s";
  ir_error(
      n->loc,
      "%s: %s%s does not match q%s: expected [%lld, %s, %lld] (%lld kv heads of dim %lld)",
      op_name(n), i == 1 ? "k" : "v", S(t), S(q), (long long)q->shape[0], seq, (long long)width,
      (long long)kvh, (long long)d);
  return false;
}

/* Checks attention's q, k and v (inputs 0 to 2) and attributes; shared by
 * attention and attention_grad. */
static bool attention_inputs(IrNode *n) {
  const IrType *q = in_type(n, 0), *k = in_type(n, 1), *v = in_type(n, 2);
  /* kv = 0: read only where get_int set it, which gcc cannot see through the & chain. */
  int64_t heads, kv = 0;
  bool causal;
  bool ok = (int)get_pos_int(n, "heads", &heads) & (int)get_int(n, "kv_heads", &kv) &
            (int)get_flag(n, "causal", &causal);
  if (ok && kv < 0) {
    ir_error(n->loc, "%s: kv_heads must be 0 (as many as heads) or positive, got %lld",
             op_name(n), (long long)kv);
    ok = false;
  }
  static const char *names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++)
    ok = ((int)want_float(n, i, names[i]) & (int)want_rank(n, i, names[i], 3, "[b, s, heads * head_dim]")) &&
         ok;
  if (!ok) return false;
  if (q->dtype != k->dtype || q->dtype != v->dtype) {
    ir_error(n->loc, "%s: q %s, k %s and v %s must have one dtype", op_name(n), ir_type_str(q),
             ir_type_str(k), ir_type_str(v));
    return false;
  }
  int64_t kvh = kv ? kv : heads;
  if (heads % kvh != 0) {
    ir_error(n->loc, "%s: heads = %lld is not a multiple of kv_heads = %lld", op_name(n),
             (long long)heads, (long long)kvh);
    return false;
  }
  if (q->shape[2] % heads != 0) {
    ir_error(n->loc, "%s: q%s cannot be split into %lld heads: %lld is not a multiple of %lld",
             op_name(n), S(q), (long long)heads, (long long)q->shape[2], (long long)heads);
    return false;
  }
  int64_t d = q->shape[2] / heads;
  if (!((int)attention_kv(n, 1, kvh, d, causal) & (int)attention_kv(n, 2, kvh, d, causal))) return false;
  if (k->shape[1] != v->shape[1]) {
    ir_error(n->loc, "%s: k%s and v%s have different sequence lengths", op_name(n), S(k), S(v));
    return false;
  }
  /* The key-padding mask: attention's fourth input, attention_grad's seventh. */
  int mi = n->op == IR_OP_ATTENTION ? 3 : 6;
  if (n->nin > mi) {
    const IrType *m = in_type(n, mi);
    if (!((int)want_int(n, mi, "mask") & (int)want_rank(n, mi, "mask", 2, "[b, s]"))) return false;
    if (m->shape[0] != k->shape[0] || m->shape[1] != k->shape[1]) {
      ir_error(n->loc, "%s: mask%s must be [b, s] of the keys k%s", op_name(n), S(m), S(k));
      return false;
    }
  }
  return true;
}

/* The log-sum-exp of attention's rows: [b, heads, s] of q[b, s, heads * d]. */
static void attention_lse_shape(IrNode *n, int64_t *shape) {
  const IrType *q = in_type(n, 0);
  shape[0] = q->shape[0], shape[1] = ir_attr_int(n, "heads"), shape[2] = q->shape[1];
}

bool ir_shape_attention(IrNode *n) {
  if (!inputs_ready(n) || !attention_inputs(n)) return false;
  const IrType *q = in_type(n, 0);
  int64_t lse[3];
  attention_lse_shape(n, lse);
  set_out(n, 0, q->dtype, 3, q->shape);
  set_out(n, 1, q->dtype, 3, lse);
  return true;
}

/* -------------------------------------------------------------------- loss */

/* Checks logits[..., V] against targets[...] (inputs 0 and 1), and the
 * attributes: `valid` counts columns of the whole vocabulary, which a
 * rank's logits hold only a part of when vocab_parallel is set. */
static bool cross_entropy_inputs(IrNode *n) {
  const IrType *logits = in_type(n, 0), *targets = in_type(n, 1);
  /* Read only where get_* set them, which gcc cannot see through the & chain. */
  bool vp = false, ign = false;
  int64_t valid = 0;
  bool attrs_ok = (int)get_flag(n, "vocab_parallel", &vp) &
                  (int)get_nonneg_int(n, "valid", &valid) & (int)get_flag(n, "ignore", &ign);
  if (!((int)want_float(n, 0, "logits") & (int)want_int(n, 1, "targets")) || !attrs_ok)
    return false;
  if (logits->rank < 1) {
    ir_error(n->loc, "%s: logits%s must end in a vocabulary dim [..., V]", op_name(n), S(logits));
    return false;
  }
  if (!vp && valid > logits->shape[logits->rank - 1]) {
    ir_error(attr_loc(n, attr_expr(n, "valid")),
             "%s: valid = %lld is more than the %lld columns of logits%s", op_name(n),
             (long long)valid, (long long)logits->shape[logits->rank - 1], S(logits));
    return false;
  }
  bool ok = targets->rank == logits->rank - 1;
  for (int i = 0; ok && i < targets->rank; i++) ok = targets->shape[i] == logits->shape[i];
  if (!ok) {
    IrType want = *logits;
    want.rank--;
    ir_error(n->loc, "%s: targets%s does not match logits%s: expected targets%s", op_name(n),
             S(targets), S(logits), S(&want));
    return false;
  }
  return true;
}

bool ir_shape_cross_entropy(IrNode *n) {
  if (!inputs_ready(n) || !cross_entropy_inputs(n)) return false;
  /* The loss is the mean over all positions: one f32 scalar. */
  set_out(n, 0, IR_F32, 0, NULL);
  return true;
}

/* ---------------------------------------------------------- backward ops */

/* Inputs i and j of one type, named a and b in messages. */
static bool want_same(IrNode *n, int i, const char *a, int j, const char *b) {
  const IrType *x = in_type(n, i), *y = in_type(n, j);
  if (ir_type_same(x, y)) return true;
  ir_error(n->loc, "%s: %s %s and %s %s must have the same type", op_name(n), a, ir_type_str(x), b,
           ir_type_str(y));
  return false;
}

/* linear_dx(dy[..., out], w) -> dx[..., in]. */
bool ir_shape_linear_dx(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *dy = in_type(n, 0), *w = in_type(n, 1);
  bool tr;
  bool ok = get_flag(n, "transposed", &tr);
  ok = ((int)want_float(n, 0, "dy") & (int)want_float(n, 1, "weight")) && ok;
  ok = want_rank(n, 1, "weight", 2, tr ? "[out, in]" : "[in, out]") && ok;
  if (ok && dy->rank < 1) {
    ir_error(n->loc, "linear_dx: dy%s must have at least 1 dim", S(dy));
    ok = false;
  }
  if (!ok) return false;
  int64_t in = w->shape[tr ? 1 : 0], out = w->shape[tr ? 0 : 1];
  if (dy->shape[dy->rank - 1] != out) {
    ir_error(n->loc, "linear_dx: dy%s does not match weight%s%s: expected %lld in the last dim",
             S(dy), S(w), tr ? " (transposed)" : "", (long long)out);
    return false;
  }
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, dy->shape, sizeof(int64_t) * (size_t)dy->rank);
  shape[dy->rank - 1] = in;
  set_out(n, 0, dy->dtype, dy->rank, shape);
  return true;
}

/* linear_dw(x[..., in], dy[..., out]) -> [in, out], or [out, in]. */
bool ir_shape_linear_dw(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0), *dy = in_type(n, 1);
  bool tr;
  bool ok = get_flag(n, "transposed", &tr);
  ok = ((int)want_float(n, 0, "x") & (int)want_float(n, 1, "dy")) && ok;
  if (!ok) return false;
  ok = x->rank >= 1 && x->rank == dy->rank;
  for (int i = 0; ok && i < x->rank - 1; i++) ok = x->shape[i] == dy->shape[i];
  if (!ok) {
    ir_error(n->loc, "linear_dw: x%s and dy%s must have the same leading dims", S(x), S(dy));
    return false;
  }
  int64_t in = x->shape[x->rank - 1], out = dy->shape[dy->rank - 1];
  int64_t shape[2] = {tr ? out : in, tr ? in : out};
  set_out(n, 0, dy->dtype, 2, shape);
  return true;
}

/* sum_to(x){shape}: shape must broadcast to x's shape. */
bool ir_shape_sum_to(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  int64_t shape[IR_MAX_RANK];
  int rank;
  if (!shape_attr(n, shape, &rank)) return false;
  bool ok = rank <= x->rank;
  for (int i = 1; ok && i <= rank; i++)
    ok = shape[rank - i] == 1 || shape[rank - i] == x->shape[x->rank - i];
  if (!ok) {
    ir_error(n->loc, "sum_to: shape %s does not broadcast to x%s",
             ir_expr_str(attr_expr(n, "shape")), S(x));
    return false;
  }
  set_out(n, 0, x->dtype, rank, shape);
  return true;
}

/* gelu_grad(x, dy), silu_grad(x, dy), softmax_grad(y, dy). */
bool ir_shape_grad2(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const char *first = n->op == IR_OP_SOFTMAX_GRAD ? "y" : "x";
  if (n->op == IR_OP_GELU_GRAD && !get_approximate(n)) return false;
  if (!((int)want_float(n, 0, first) & (int)want_float(n, 1, "dy"))) return false;
  if (!want_same(n, 0, first, 1, "dy")) return false;
  const IrType *x = in_type(n, 0);
  set_out(n, 0, x->dtype, x->rank, x->shape);
  return true;
}

/* swiglu_grad(gate, up, dy) -> (dgate, dup). */
bool ir_shape_swiglu_grad(IrNode *n) {
  if (!inputs_ready(n)) return false;
  if (!((int)want_float(n, 0, "gate") & (int)want_float(n, 1, "up") & (int)want_float(n, 2, "dy"))) return false;
  if (!(want_same(n, 0, "gate", 1, "up") && want_same(n, 0, "gate", 2, "dy"))) return false;
  const IrType *g = in_type(n, 0);
  for (int i = 0; i < 2; i++) set_out(n, i, g->dtype, g->rank, g->shape);
  return true;
}

/* layernorm_grad(x, w, dy) -> (dx, dw, db); rmsnorm_grad -> (dx, dw). */
bool ir_shape_norm_grad(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0), *w = in_type(n, 1);
  double eps;
  bool ok = get_num_in(n, "eps", 0, false, HUGE_VAL, &eps, "a non-negative number");
  ok = ((int)want_float(n, 0, "x") & (int)want_float(n, 1, "weight") & (int)want_float(n, 2, "dy")) && ok;
  if (ok && x->rank < 1) {
    ir_error(n->loc, "%s: x%s must have at least 1 dim", op_name(n), S(x));
    ok = false;
  }
  if (!ok || !want_same(n, 0, "x", 2, "dy")) return false;
  if (n->nin > 3 && !(want_float(n, 3, "dres") && want_same(n, 0, "x", 3, "dres"))) return false;
  int64_t h = x->shape[x->rank - 1];
  if (w->rank != 1 || w->shape[0] != h) {
    ir_error(n->loc, "%s: weight%s does not match x%s: expected [%lld]", op_name(n), S(w), S(x),
             (long long)h);
    return false;
  }
  set_out(n, 0, x->dtype, x->rank, x->shape);
  for (int i = 1; i < n->nout; i++) set_out(n, i, w->dtype, 1, &h);
  return true;
}

/* add_layernorm(a, b, weight[, bias]), add_rmsnorm(a, b, weight) -> (s, y):
 * a and b of one shape (the residual add has no broadcast), the norm's
 * parameters as in ir_shape_norm. */
bool ir_shape_add_norm(IrNode *n) {
  if (!inputs_ready(n)) return false;
  double eps;
  bool ok = get_num_in(n, "eps", 0, false, HUGE_VAL, &eps, "a non-negative number");
  ok = ((int)want_float(n, 0, "a") & (int)want_float(n, 1, "b")) && ok;
  for (int i = 2; i < n->nin; i++) ok = want_float(n, i, i == 2 ? "weight" : "bias") && ok;
  if (!ok || !want_same(n, 0, "a", 1, "b")) return false;
  const IrType *x = in_type(n, 0);
  if (x->rank < 1) {
    ir_error(n->loc, "%s: a%s must have at least 1 dim", op_name(n), S(x));
    return false;
  }
  int64_t h = x->shape[x->rank - 1];
  for (int i = 2; i < n->nin; i++) {
    const IrType *w = in_type(n, i);
    if (w->rank != 1 || w->shape[0] != h) {
      ir_error(n->loc, "%s: %s%s does not match a%s: expected [%lld]", op_name(n),
               i == 2 ? "weight" : "bias", S(w), S(x), (long long)h);
      ok = false;
    }
  }
  if (!ok) return false;
  for (int i = 0; i < 2; i++) set_out(n, i, x->dtype, x->rank, x->shape);
  return true;
}

/* attention_grad(q, k, v, y, dy) -> (dq, dk, dv). */
bool ir_shape_attention_grad(IrNode *n) {
  if (!inputs_ready(n) || !attention_inputs(n)) return false;
  if (!(want_same(n, 0, "q", 3, "y") && want_same(n, 0, "q", 4, "dy"))) return false;
  const IrType *lse = in_type(n, 5);
  int64_t want[3];
  attention_lse_shape(n, want);
  if (!want_float(n, 5, "lse")) return false;
  if (lse->rank != 3 || lse->shape[0] != want[0] || lse->shape[1] != want[1] ||
      lse->shape[2] != want[2]) {
    ir_error(n->loc, "%s: lse%s must be [b, heads, s] = [%lld, %lld, %lld], attention's second "
             "result", op_name(n), S(lse), (long long)want[0], (long long)want[1],
             (long long)want[2]);
    return false;
  }
  for (int i = 0; i < 3; i++) {
    const IrType *t = in_type(n, i);
    set_out(n, i, t->dtype, t->rank, t->shape);
  }
  return true;
}

/* embedding_grad(ids[...], dy[..., h]){rows} -> [rows, h]. */
bool ir_shape_embedding_grad(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *ids = in_type(n, 0), *dy = in_type(n, 1);
  int64_t rows;
  bool vp;
  bool ok = (int)get_pos_int(n, "rows", &rows) & (int)get_flag(n, "vocab_parallel", &vp);
  ok = ((int)want_int(n, 0, "ids") & (int)want_float(n, 1, "dy")) && ok;
  if (!ok) return false;
  ok = dy->rank == ids->rank + 1;
  for (int i = 0; ok && i < ids->rank; i++) ok = ids->shape[i] == dy->shape[i];
  if (!ok) {
    ir_error(n->loc, "embedding_grad: dy%s does not match ids%s: expected ids' dims and one more",
             S(dy), S(ids));
    return false;
  }
  int64_t shape[2] = {rows, dy->shape[dy->rank - 1]};
  set_out(n, 0, dy->dtype, 2, shape);
  return true;
}

/* cross_entropy_grad(logits, targets, dloss[]) -> dlogits. */
bool ir_shape_cross_entropy_grad(IrNode *n) {
  if (!inputs_ready(n) || !cross_entropy_inputs(n)) return false;
  const IrType *logits = in_type(n, 0), *dloss = in_type(n, 2);
  if (!want_float(n, 2, "dloss")) return false;
  if (dloss->rank != 0) {
    ir_error(n->loc, "cross_entropy_grad: dloss%s must be a scalar", S(dloss));
    return false;
  }
  set_out(n, 0, logits->dtype, logits->rank, logits->shape);
  return true;
}

/* ------------------------------------------------------ tensor parallelism */

/* A collective's `axis` names a mesh axis. */
static bool mesh_axis(IrNode *n, int64_t axis) {
  if (axis >= 0 && axis <= IR_AXIS_EMBED) return true;
  ir_error(attr_loc(n, attr_expr(n, "axis")),
           "%s: axis = %lld is not a mesh axis (0 tensor, 1 pipeline, 2 data, 3 embed)", op_name(n),
           (long long)axis);
  return false;
}

/* The collectives and their local halves. Types are what ONE rank holds:
 * all_gather's result is size times longer along dim than its input,
 * tp_slice's and reduce_scatter's size times shorter (which must divide);
 * all_reduce and tp_copy keep the shape. */
bool ir_shape_collective(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0);
  /* axis = 0: read only where get_int set it (as kv in attention_inputs). */
  int64_t axis = 0, size, dim = 0;
  bool has_dim = n->op == IR_OP_ALL_GATHER || n->op == IR_OP_TP_SLICE ||
                 n->op == IR_OP_REDUCE_SCATTER;
  bool ok = (int)get_int(n, "axis", &axis) & (int)get_pos_int(n, "size", &size);
  if (has_dim) ok = get_int(n, "dim", &dim) && norm_axis(n, "dim", &dim, x, "x") && ok;
  if (n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_REDUCE_SCATTER) ok = want_float(n, 0, "x") && ok;
  if (!ok || !mesh_axis(n, axis)) return false;
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  if (n->op == IR_OP_ALL_GATHER && __builtin_mul_overflow(shape[dim], size, &shape[dim])) {
    ir_error(n->loc, "all_gather: x%s times %lld ranks along dim %lld overflows", S(x),
             (long long)size, (long long)dim);
    return false;
  }
  if (n->op == IR_OP_TP_SLICE || n->op == IR_OP_REDUCE_SCATTER) {
    if (shape[dim] % size != 0) {
      ir_error(n->loc, "%s: x%s cannot be cut into %lld equal parts along dim %lld: %lld is not "
               "a multiple of %lld", op_name(n), S(x), (long long)size, (long long)dim,
               (long long)shape[dim], (long long)size);
      return false;
    }
    shape[dim] /= size;
  }
  set_out(n, 0, x->dtype, x->rank, shape);
  return true;
}

/* all_to_all(x[rows, ...], counts: i32[size]) -> y[out, ...], received:
 * i32[size]. x holds the rows for each rank of the axis packed in rank
 * order (counts[r] of them for rank r); y the rows from each, packed in
 * rank order, and the tail past them zero. out is the attribute rows, or
 * by default the worst case size * rows (every rank sends all its rows
 * here), so that the plan is static whatever the counts. */
bool ir_shape_all_to_all(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0), *k = in_type(n, 1);
  int64_t axis = 0, size, rows = 0;
  bool ok = (int)get_int(n, "axis", &axis) & (int)get_pos_int(n, "size", &size) &
            (int)get_nonneg_int(n, "rows", &rows);
  if (!ok || !mesh_axis(n, axis)) return false;
  /* Every rank of a tensor or data group runs the same action table, so
   * each meets the k-th all_to_all of a chunk at the same point; the
   * stages of a pipeline run different tables, where it would hang. */
  if (axis != IR_AXIS_TENSOR && axis != IR_AXIS_DATA) {
    ir_error(attr_loc(n, attr_expr(n, "axis")),
             "all_to_all: axis = %lld: only the tensor (0) and data (2) axes, whose ranks run "
             "the same schedule, can exchange rows", (long long)axis);
    return false;
  }
  if (x->rank < 1) {
    ir_error(n->loc, "all_to_all: x%s must have a dim of rows", S(x));
    return false;
  }
  if (k->dtype != IR_I32 || k->rank != 1 || k->shape[0] != size) {
    ir_error(n->loc, "all_to_all: counts must be i32[%lld] (one count per rank), got %s",
             (long long)size, ir_type_str(k));
    return false;
  }
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  if (rows) shape[0] = rows;
  else if (__builtin_mul_overflow(x->shape[0], size, &shape[0])) {
    ir_error(n->loc, "all_to_all: x%s times %lld ranks overflows", S(x), (long long)size);
    return false;
  }
  set_out(n, 0, x->dtype, x->rank, shape);
  set_out(n, 1, IR_I32, 1, &size);
  return true;
}

/* The expert-parallel routed layer (passes/ep_partition.c): size expert
 * ranks of E/size experts each. */
static bool ep_counts(IrNode *n, int i, int64_t *size, int64_t *E) {
  const IrType *c = in_type(n, i);
  if (!get_pos_int(n, "size", size)) return false;
  if (c->dtype != IR_I32 || c->rank != 1 || c->shape[0] % *size) {
    ir_error(n->loc, "%s: counts must be i32[E] with E a multiple of size = %lld, got %s",
             op_name(n), (long long)*size, ir_type_str(c));
    return false;
  }
  *E = c->shape[0];
  return true;
}

/* ep_plan(counts i32[E]){size} -> (send i32[size], each i32[size]). */
bool ir_shape_ep_plan(IrNode *n) {
  if (!inputs_ready(n)) return false;
  int64_t size, E;
  if (!ep_counts(n, 0, &size, &E)) return false;
  set_out(n, 0, IR_I32, 1, &size);
  set_out(n, 1, IR_I32, 1, &size);
  return true;
}

/* ep_sort(y[M, h], rcounts i32[E]){size} -> (rows[M, h], counts i32[E/size])
 * and ep_unsort(rows[M, h], rcounts){size} -> y[M, h]. */
static bool ep_permute(IrNode *n, int64_t *local) {
  if (!inputs_ready(n)) return false;
  const IrType *y = in_type(n, 0);
  int64_t size, E;
  if (!ep_counts(n, 1, &size, &E) || !want_float(n, 0, "rows")) return false;
  if (y->rank != 2) {
    ir_error(n->loc, "%s: rows%s must be [rows, h]", op_name(n), S(y));
    return false;
  }
  set_out(n, 0, y->dtype, 2, y->shape);
  *local = E / size;
  return true;
}

bool ir_shape_ep_sort(IrNode *n) {
  int64_t local;
  if (!ep_permute(n, &local)) return false;
  set_out(n, 1, IR_I32, 1, &local);
  return true;
}

bool ir_shape_ep_unsort(IrNode *n) {
  int64_t local;
  return ep_permute(n, &local);
}

/* ------------------------------------------------------------------ pipeline */

/* A message between neighbouring virtual stages: any tensor, unchanged. */
bool ir_shape_pp_boundary(IrNode *n) {
  if (!inputs_ready(n)) return false;
  int64_t src, dst;
  bool ok = (int)get_nonneg_int(n, "src", &src) & (int)get_nonneg_int(n, "dst", &dst);
  if (ok && src != dst + 1 && dst != src + 1) {
    ir_error(n->loc, "%s: src = %lld and dst = %lld are not neighbouring virtual stages",
             op_name(n), (long long)src, (long long)dst);
    ok = false;
  }
  if (!ok) return false;
  const IrType *x = in_type(n, 0);
  set_out(n, 0, x->dtype, x->rank, x->shape);
  return true;
}

/* ------------------------------------------------------------------ repeat */

/* A repeat's structure, as ir_add_repeat builds it; a hand-written IR file
 * can break it, so it is a user error rather than an internal one. */
static bool repeat_structure_ok(IrNode *n, int64_t ncarried) {
  IrGraph *body = n->body;
  if (body && ncarried >= 0 && ncarried <= n->nin && ncarried == n->nout &&
      body->args.len == n->nin && body->outputs.len == ncarried)
    return true;
  ir_error(
      n->loc,
      "repeat %s: %d inputs, ncarried = %lld, %d outputs, %d body args and %d yields do not agree",
      n->label ? n->label : "", n->nin, (long long)ncarried, n->nout, body ? body->args.len : 0,
      body ? body->outputs.len : 0);
  return false;
}

/* The body is inferred once, with its args typed as the repeat's inputs;
 * each iteration must yield its carried values with the types they came
 * in with, or the next iteration would see different shapes. */
bool ir_shape_repeat(IrNode *n) {
  if (!inputs_ready(n)) return false;
  int64_t count, ncarried;
  if (!((int)get_pos_int(n, "count", &count) & (int)get_int(n, "ncarried", &ncarried))) return false;
  if (!repeat_structure_ok(n, ncarried)) return false;
  IrGraph *body = n->body;
  for (int i = 0; i < n->nin; i++) {
    IrValue *arg = body->args.items[i];
    arg->type = *in_type(n, i);
  }
  if (!ir_shape_graph(body)) return false;
  bool ok = true;
  for (int i = 0; i < ncarried; i++) {
    IrType *y = &((IrValue *)body->outputs.items[i])->type, *in = in_type(n, i);
    if (!ir_type_known(y)) return false;
    for (int d = 0; d < y->rank; d++)
      if (y->dims[d]) y->shape[d] = y->dims[d]->i;
    if (!ir_type_same(y, in)) {
      ir_error(n->loc, "repeat %s: the body yields %s for carried value %d, which enters as %s",
               n->label ? n->label : "", ir_type_str(y), i, ir_type_str(in));
      ok = false;
    }
  }
  if (!ok) return false;
  for (int i = 0; i < ncarried; i++) {
    const IrType *t = in_type(n, i);
    set_out(n, i, t->dtype, t->rank, t->shape);
  }
  return true;
}

/* -------------------------------------------------------------- FLOP rules */

/* The `flops` column of ops.def: forward FLOPs of a typed node, 2 per
 * multiply-add of its matrix products. Only forward ops have one: model
 * FLOPs count a training step as 3x the forward by definition. */
double ir_flops_none(const IrNode *n) {
  (void)n;
  return 0;
}

/* x[..., in] @ w: every output element is a dot product of length in. */
double ir_flops_linear(const IrNode *n) {
  const IrType *x = in_type(n, 0);
  return 2.0 * (double)ir_type_numel(&n->out[0]->type) * (double)x->shape[x->rank - 1];
}

/* a[..., m, k] @ b[..., k, n]; a transposed is [..., k, m]. */
double ir_flops_matmul(const IrNode *n) {
  const IrType *a = in_type(n, 0);
  int64_t k = ir_attr_int(n, "transpose_a") ? a->shape[a->rank - 2] : a->shape[a->rank - 1];
  return 2.0 * (double)ir_type_numel(&n->out[0]->type) * (double)k;
}

/* q k^T and p v: 2 * (2 * b * H * s * s * d) with q [b, s, H*d], without
 * the causal halving (as Narayanan et al. count them). */
double ir_flops_attention(const IrNode *n) {
  const IrType *q = in_type(n, 0);
  return 4.0 * (double)ir_type_numel(q) * (double)q->shape[q->rank - 2];
}

/* ------------------------------------------------------------------ walker */

static void forget_outputs(IrNode *n) {
  for (int i = 0; i < n->nout; i++) {
    IrType *t = &n->out[i]->type;
    t->rank = -1;
    memset(t->dims, 0, sizeof t->dims);
  }
}

/* Arity as ops.def gives it. The verifier checks it too, but it runs after
 * `shape`, and a rule must not index past the inputs of a bad node. */
static bool arity_ok(IrNode *n) {
  const IrOpInfo *info = ir_op_info(n->op);
  if (n->nin < info->min_in || (info->max_in >= 0 && n->nin > info->max_in)) {
    if (info->max_in < 0)
      ir_error(n->loc, "%s takes at least %d tensor inputs, got %d", info->name, info->min_in,
               n->nin);
    else if (info->min_in == info->max_in)
      ir_error(n->loc, "%s takes %d tensor input%s, got %d", info->name, info->min_in,
               info->min_in == 1 ? "" : "s", n->nin);
    else
      ir_error(n->loc, "%s takes %d to %d tensor inputs, got %d", info->name, info->min_in,
               info->max_in, n->nin);
    return false;
  }
  if (!(info->flags & (IR_OPF_MULTI_OUT | IR_OPF_REGION)) && n->nout != info->nout) {
    ir_error(n->loc, "%s has %d output%s, not %d", info->name, info->nout,
             info->nout == 1 ? "" : "s", n->nout);
    return false;
  }
  return true;
}

/* Infers the nodes of g in order. A node whose rule fails keeps unknown
 * outputs, so the nodes that use them are skipped without more errors:
 * each mistake is reported once, and every independent one is reported. */
bool ir_shape_graph(IrGraph *g) {
  int before = ir_error_count();
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    forget_outputs(n);
    if (!arity_ok(n)) continue;
    if (!ir_op_info(n->op)->shape(n)) forget_outputs(n);
  }
  return ir_error_count() == before;
}

/* ---------------------------------------------------------- routed layers */

/* Routed tensors are i32 indices (the kernels' type), not any integer. */
static bool want_i32(IrNode *n, int i, const char *what) {
  const IrType *t = in_type(n, i);
  if (t->dtype == IR_I32) return true;
  ir_error(n->loc, "%s: %s must be i32, got %s", op_name(n), what, ir_type_str(t));
  return false;
}

static int64_t rows_of(const IrType *t) {
  int64_t r = 1;
  for (int d = 0; d + 1 < t->rank; d++) r *= t->shape[d];
  return r;
}

static int64_t last_of(const IrType *t) { return t->shape[t->rank - 1]; }

/* k, score and normalize of router and router_grad against logits[..., E]. */
static bool router_attrs(IrNode *n, const IrType *l, int64_t *k) {
  int64_t score;
  bool norm;
  bool ok = (int)get_pos_int(n, "k", k) & (int)get_nonneg_int(n, "score", &score) &
            (int)get_flag(n, "normalize", &norm);
  ok = want_float(n, 0, "logits") && ok;
  if (!ok) return false;
  if (score > 1) {
    ir_error(n->loc, "%s: score must be 0 (softmax) or 1 (sigmoid), got %lld", op_name(n),
             (long long)score);
    return false;
  }
  if (l->rank < 1 || *k > last_of(l) || last_of(l) > 256) {
    ir_error(n->loc, "%s: top k = %lld of logits%s: needs 1 <= k <= experts <= 256", op_name(n),
             (long long)*k, S(l));
    return false;
  }
  return true;
}

/* router(logits[..., E]){k} -> (weights[..., k], experts i32[..., k]). */
bool ir_shape_router(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *l = in_type(n, 0);
  int64_t k;
  if (!router_attrs(n, l, &k)) return false;
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, l->shape, sizeof(int64_t) * (size_t)l->rank);
  shape[l->rank - 1] = k;
  set_out(n, 0, l->dtype, l->rank, shape);
  set_out(n, 1, IR_I32, l->rank, shape);
  return true;
}

/* router_grad(logits, experts, dweights) -> dlogits. */
bool ir_shape_router_grad(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *l = in_type(n, 0);
  int64_t k;
  if (!router_attrs(n, l, &k) || !want_i32(n, 1, "experts") || !want_float(n, 2, "dweights"))
    return false;
  set_out(n, 0, l->dtype, l->rank, l->shape);
  return true;
}

int64_t ir_moe_capacity(double f, int64_t copies, int64_t E) {
  return f > 0 ? (int64_t)ceil(f * (double)copies / (double)E) : 0;
}

/* moe_dispatch(x[..., h], experts i32[..., k]){experts = E, capacity}
 *   -> (rows[T*k, h], pos i32[T*k], counts i32[E]). */
bool ir_shape_moe_dispatch(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0), *ex = in_type(n, 1);
  int64_t E;
  double cap;
  bool ok = (int)get_pos_int(n, "experts", &E) & (int)want_float(n, 0, "x") &
            (int)want_i32(n, 1, "experts") &
            (int)get_num_in(n, "capacity", 0, false, HUGE_VAL, &cap, "a non-negative number");
  if (!ok) return false;
  if (x->rank < 1 || ex->rank != x->rank || rows_of(ex) != rows_of(x) || E > 256) {
    ir_error(n->loc, "moe_dispatch: x%s and experts%s must share their leading dims (at most 256 "
             "experts, got %lld)", S(x), S(ex), (long long)E);
    return false;
  }
  int64_t rows[2] = {rows_of(x) * last_of(ex), last_of(x)};
  set_out(n, 0, x->dtype, 2, rows);
  set_out(n, 1, IR_I32, 1, rows);
  set_out(n, 2, IR_I32, 1, &E);
  return true;
}

/* moe_undispatch(drows[T*k, h], pos i32[T*k]){shape = [..., h]} -> dx. */
bool ir_shape_moe_undispatch(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *r = in_type(n, 0);
  int64_t shape[IR_MAX_RANK];
  int rank;
  if (!shape_attr(n, shape, &rank) || !want_i32(n, 1, "pos")) return false;
  IrType t = {.rank = rank};
  memcpy(t.shape, shape, sizeof(int64_t) * (size_t)rank);
  if (r->rank != 2 || rank < 1 || last_of(&t) != r->shape[1] || r->shape[0] % rows_of(&t)) {
    ir_error(n->loc, "moe_undispatch: rows%s do not give %s", S(r), S(&t));
    return false;
  }
  set_out(n, 0, r->dtype, rank, shape);
  return true;
}

/* The sizes of grouped_linear and its gradients: rows[N, in], w[E, out, in]
 * (transposed) or [E, in, out], counts i32[E]; dy[N, out] for the gradients
 * in place of their first or second operand. */
static bool grouped_dims(IrNode *n, int wi, int ci, int64_t *in, int64_t *out) {
  bool tr;
  bool ok = (int)get_flag(n, "transposed", &tr) & (int)want_i32(n, ci, "counts");
  if (!ok) return false;
  const IrType *w = in_type(n, wi), *c = in_type(n, ci);
  if (w->rank != 3 || c->rank != 1 || c->shape[0] != w->shape[0]) {
    ir_error(n->loc, "%s: w%s must be [experts, out, in] and counts%s [experts]", op_name(n), S(w),
             S(c));
    return false;
  }
  *out = tr ? w->shape[1] : w->shape[2];
  *in = tr ? w->shape[2] : w->shape[1];
  return true;
}

static bool want_rows(IrNode *n, int i, const char *what, int64_t cols) {
  const IrType *t = in_type(n, i);
  if (!want_float(n, i, what)) return false;
  if (t->rank == 2 && t->shape[1] == cols) return true;
  ir_error(n->loc, "%s: %s%s must be [rows, %lld]", op_name(n), what, S(t), (long long)cols);
  return false;
}

/* grouped_linear(rows, w, counts) -> [N, out], and its dx(dy, w, counts)
 * -> [N, in]: the same product with w read the other way. */
static bool grouped_product(IrNode *n, bool dx) {
  if (!inputs_ready(n)) return false;
  int64_t in, out;
  if (!want_float(n, 1, "w") || !grouped_dims(n, 1, 2, &in, &out) ||
      !want_rows(n, 0, dx ? "dy" : "rows", dx ? out : in))
    return false;
  int64_t shape[2] = {in_type(n, 0)->shape[0], dx ? in : out};
  set_out(n, 0, in_type(n, 0)->dtype, 2, shape);
  return true;
}

bool ir_shape_grouped_linear(IrNode *n) { return grouped_product(n, false); }
bool ir_shape_grouped_linear_dx(IrNode *n) { return grouped_product(n, true); }

/* grouped_linear_dw(rows, dy, counts): w's shape from the two operands. */
bool ir_shape_grouped_linear_dw(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *x = in_type(n, 0), *dy = in_type(n, 1), *c = in_type(n, 2);
  bool tr;
  bool ok = (int)get_flag(n, "transposed", &tr) & (int)want_i32(n, 2, "counts") &
            (int)want_float(n, 0, "rows") & (int)want_float(n, 1, "dy");
  if (!ok) return false;
  if (x->rank != 2 || dy->rank != 2 || x->shape[0] != dy->shape[0] || c->rank != 1) {
    ir_error(n->loc, "grouped_linear_dw: rows%s, dy%s and counts%s do not match", S(x), S(dy), S(c));
    return false;
  }
  int64_t shape[3] = {c->shape[0], tr ? dy->shape[1] : x->shape[1], tr ? x->shape[1] : dy->shape[1]};
  set_out(n, 0, x->dtype, 3, shape);
  return true;
}

/* moe_combine(rows[T*k, h], pos i32[T*k], weights[..., k]) -> [..., h]. */
bool ir_shape_moe_combine(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *r = in_type(n, 0), *p = in_type(n, 1), *w = in_type(n, 2);
  bool ok = (int)want_float(n, 0, "rows") & (int)want_i32(n, 1, "pos") &
            (int)want_float(n, 2, "weights");
  if (!ok) return false;
  if (r->rank != 2 || p->rank != 1 || w->rank < 1 || p->shape[0] != r->shape[0] ||
      (int64_t)ir_type_numel(w) != r->shape[0]) {
    ir_error(n->loc, "%s: rows%s, pos%s and weights%s do not match: T*k rows, one pos each",
             op_name(n), S(r), S(p), S(w));
    return false;
  }
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, w->shape, sizeof(int64_t) * (size_t)w->rank);
  shape[w->rank - 1] = r->shape[1];
  set_out(n, 0, r->dtype, w->rank, shape);
  return true;
}

/* moe_combine_grad(rows, pos, weights, dy) -> (drows, dweights). */
bool ir_shape_moe_combine_grad(IrNode *n) {
  if (!ir_shape_moe_combine(n)) return false;
  if (!want_float(n, 3, "dy")) return false;
  if (!ir_type_same(&n->out[0]->type, in_type(n, 3))) {
    ir_error(n->loc, "moe_combine_grad: dy%s does not match", S(in_type(n, 3)));
    return false;
  }
  set_out(n, 0, in_type(n, 0)->dtype, 2, in_type(n, 0)->shape);
  set_out(n, 1, in_type(n, 2)->dtype, in_type(n, 2)->rank, in_type(n, 2)->shape);
  return true;
}


/* router_load(logits[..., E]){k} -> [2, E]. */
bool ir_shape_router_load(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *l = in_type(n, 0);
  int64_t k;
  if (!get_pos_int(n, "k", &k) || !want_float(n, 0, "logits")) return false;
  if (l->rank < 1 || k > last_of(l) || last_of(l) > 256) {
    ir_error(n->loc, "router_load: top k = %lld of logits%s: needs k <= experts <= 256",
             (long long)k, S(l));
    return false;
  }
  int64_t shape[2] = {2, last_of(l)};
  set_out(n, 0, l->dtype, 2, shape);
  return true;
}

/* router_z_loss(logits[..., E]) -> a scalar. */
bool ir_shape_router_z_loss(IrNode *n) {
  if (!inputs_ready(n) || !want_float(n, 0, "logits")) return false;
  set_out(n, 0, in_type(n, 0)->dtype, 0, NULL);
  return true;
}

/* router_z_loss_grad(logits, dy[]) -> dlogits. */
bool ir_shape_router_z_loss_grad(IrNode *n) {
  if (!inputs_ready(n) || !want_float(n, 0, "logits") || !want_float(n, 1, "dy")) return false;
  if (in_type(n, 1)->rank != 0) {
    ir_error(n->loc, "router_z_loss_grad: dy%s must be a scalar", S(in_type(n, 1)));
    return false;
  }
  set_out(n, 0, in_type(n, 0)->dtype, in_type(n, 0)->rank, in_type(n, 0)->shape);
  return true;
}

/* router_load_grad(logits[..., E], dload[2, E]) -> dlogits. */
bool ir_shape_router_load_grad(IrNode *n) {
  if (!inputs_ready(n)) return false;
  const IrType *l = in_type(n, 0), *d = in_type(n, 1);
  if (!want_float(n, 0, "logits") || !want_float(n, 1, "dload")) return false;
  if (d->rank != 2 || d->shape[0] != 2 || l->rank < 1 || d->shape[1] != last_of(l)) {
    ir_error(n->loc, "router_load_grad: dload%s does not match logits%s", S(d), S(l));
    return false;
  }
  set_out(n, 0, l->dtype, l->rank, l->shape);
  return true;
}
