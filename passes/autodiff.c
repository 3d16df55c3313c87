/* The `autodiff` pass: reverse-mode differentiation of the unrolled,
 * shape-inferred forward graph.
 *
 * The graph must have exactly one scalar float output, the loss. The pass
 * adds the input %d_loss (its seed, which the runtime sets to
 * 1/microbatches), walks the forward nodes from the last to the first and,
 * for each node that has a gradient on one of its results, calls the
 * adjoint named in ops.def, which appends the nodes that compute the
 * gradients of its inputs. All of them are IR_PHASE_BACKWARD, come after
 * the forward nodes, and get their types from their shape rules as they are
 * made, so the later rules can read them.
 *
 * A value read by several nodes (the tied GPT-2 embedding, every residual
 * stream) sums its contributions with `add` as they arrive; the reverse
 * order guarantees all of them are in before the value's own node is
 * differentiated. Only values that some parameter depends on get gradients:
 * token ids, positions and branches that no parameter feeds cost nothing.
 * Each parameter's gradient is recorded in IrValue.grad; a parameter the
 * loss does not depend on gets a `zeros` node.
 *
 * On a graph partitioned into pipeline stages each backward node runs on
 * the virtual stage of the forward node it differentiates; the adjoint of
 * pp_boundary (a message from stage src to dst) is the message of the
 * gradient from dst back to src, so that the gradient of a value reaches
 * its own stage before anything adds to it.
 *
 * Each backward node also carries the layer (IrNode.layer) of the forward
 * node it differentiates, so that `recompute` knows which layer's
 * backward it belongs to.
 *
 * Dropout nodes get unique `site` numbers here, copied to their
 * dropout_grad, so the backward recomputes each forward mask instead of
 * storing it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct Ad {
  IrGraph *g;
  int nvalues;     /* ids of the forward graph's values are below this */
  bool *dep;       /* by value id: some parameter flows into the value */
  IrValue **grad;  /* by value id: the gradient accumulated so far */
  IrLoc loc;       /* of the forward node being differentiated: its backward nodes' */
  int stage;       /* the virtual stage of the backward nodes being written */
  int layer;       /* the layer (IrNode.layer) of the forward node being differentiated */
  bool ok;
} Ad;

typedef bool (*AdjointFn)(Ad *ad, IrNode *n, IrValue **dy);

/* ------------------------------------------------------------- values */

static int vid(const Ad *ad, const IrValue *v) {
  if (v->id < 0 || v->id >= ad->nvalues) die("autodiff: value id %d out of range", v->id);
  return v->id;
}

/* Whether v needs a gradient: a float value some parameter flows into. */
static bool wants(const Ad *ad, const IrValue *v) {
  return ir_dtype_is_float(v->type.dtype) && ad->dep[vid(ad, v)];
}

/* --------------------------------------------------------------- nodes */

static IrLoc here(const Ad *ad) { return ad->loc; }

static IrExpr *lit_int(const Ad *ad, int64_t v) { return ir_expr_int(v, here(ad)); }

/* A type's shape as a list attribute: [1, 8, 16]. */
static IrExpr *shape_list(const Ad *ad, const IrType *t) {
  IrExpr *items[IR_MAX_RANK];
  for (int i = 0; i < t->rank; i++) items[i] = lit_int(ad, t->shape[i]);
  return ir_expr_list(items, t->rank, here(ad));
}

/* The forward node's attribute `name`, for the backward node to copy. */
static IrExpr *fwd_attr(const IrNode *n, const char *name) {
  IrAttr *a = ir_node_attr(n, name);
  if (!a) die("%s has no attribute %s", ir_op_info(n->op)->name, name);
  return a->expr;
}

/* Appends a backward node. Its attributes are those given, the others the
 * spec's defaults, in the spec's order (the order the parser gives them).
 * Its outputs are typed by its shape rule at once; a rule that fails here
 * means an adjoint built a wrong node, a bug of this file. */
static IrNode *emit(Ad *ad, IrOp op, IrValue **in, int nin, const IrAttr *given, int ngiven,
                    int nout) {
  const IrOpInfo *info = ir_op_info(op);
  IrAttr attrs[8];
  for (int k = 0; k < info->nattr; k++) {
    attrs[k] = (IrAttr){info->attr[k].name, NULL};
    for (int i = 0; i < ngiven; i++)
      if (strcmp(given[i].name, info->attr[k].name) == 0) attrs[k].expr = given[i].expr;
    if (!attrs[k].expr) attrs[k].expr = ir_attr_default(&info->attr[k], here(ad));
    if (!attrs[k].expr) die("autodiff: %s needs attribute %s", info->name, info->attr[k].name);
  }
  IrNode *n = ir_add_node(ad->g, op, in, nin, attrs, info->nattr, nout, here(ad));
  n->phase = IR_PHASE_BACKWARD;
  n->stage = ad->stage;
  n->layer = ad->layer;
  if (!info->shape(n)) die("autodiff: the shape rule of %s failed on a backward node", info->name);
  return n;
}

/* An array literal and its length, as emit's (pointer, count) arguments:
 * INS(x, w) for the inputs, ATTRS({"eps", e}) for the attributes. */
#define INS(...) \
  ((IrValue *[]){__VA_ARGS__}), (int)(sizeof((IrValue *[]){__VA_ARGS__}) / sizeof(IrValue *))
#define ATTRS(...) \
  ((IrAttr[]){__VA_ARGS__}), (int)(sizeof((IrAttr[]){__VA_ARGS__}) / sizeof(IrAttr))
#define NO_ATTRS NULL, 0

/* A single-output backward node's result. */
static IrValue *emit1(Ad *ad, IrOp op, IrValue **in, int nin, const IrAttr *given, int ngiven) {
  return emit(ad, op, in, nin, given, ngiven, 1)->out[0];
}

/* Adds g to the gradient of v (when v wants one). */
static void give(Ad *ad, IrValue *v, IrValue *g) {
  if (!g || !wants(ad, v)) return;
  if (!ir_type_same(&g->type, &v->type))
    die("autodiff: gradient of type %s%s for a value of type %s%s", ir_dtype_name(g->type.dtype),
        ir_shape_str(&g->type), ir_dtype_name(v->type.dtype), ir_shape_str(&v->type));
  IrValue **slot = &ad->grad[vid(ad, v)];
  *slot = *slot ? emit1(ad, IR_OP_ADD, INS(*slot, g), NO_ATTRS) : g;
}

/* dy reduced to the shape of `like` over the dims broadcasting stretched;
 * dy itself when no dim was. */
static IrValue *sum_to(Ad *ad, IrValue *dy, const IrValue *like) {
  if (ir_type_same(&dy->type, &like->type)) return dy;
  return emit1(ad, IR_OP_SUM_TO, INS(dy), ATTRS({"shape", shape_list(ad, &like->type)}));
}

/* A zero gradient shaped like v (a result no gradient reached). */
static IrValue *zeros_like(Ad *ad, const IrValue *v) {
  return emit1(ad, IR_OP_ZEROS, NULL, 0,
               ATTRS({"shape", shape_list(ad, &v->type)},
                     {"dtype", lit_int(ad, (int64_t)v->type.dtype)}));
}

static IrValue *scale(Ad *ad, IrValue *x, double s) {
  return emit1(ad, IR_OP_SCALE, INS(x), ATTRS({"s", ir_expr_float(s, here(ad))}));
}

static IrValue *reshape(Ad *ad, IrValue *x, int rank, const int64_t *shape) {
  IrType t = {.rank = rank};
  memcpy(t.shape, shape, sizeof(int64_t) * (size_t)rank);
  return emit1(ad, IR_OP_RESHAPE, INS(x), ATTRS({"shape", shape_list(ad, &t)}));
}

static IrValue *swap_last2(Ad *ad, IrValue *x) {
  return emit1(ad, IR_OP_TRANSPOSE, INS(x),
               ATTRS({"dim0", lit_int(ad, -2)}, {"dim1", lit_int(ad, -1)}));
}

static IrValue *matmul(Ad *ad, IrValue *a, IrValue *b, int ta, int tb) {
  return emit1(ad, IR_OP_MATMUL, INS(a, b),
               ATTRS({"transpose_a", lit_int(ad, ta)}, {"transpose_b", lit_int(ad, tb)}));
}

/* ------------------------------------------------------------ adjoints */

/* Ops without an adjoint: sources (nothing to pass a gradient to) and the
 * backward ops. Reaching one with a gradient to pass is an error. */
static bool ad_none(Ad *ad, IrNode *n, IrValue **dy) {
  (void)dy;
  ir_error(n->loc, "autodiff: op '%s' has no adjoint, so no gradient can flow through it",
           ir_op_info(n->op)->name);
  ad->ok = false;
  return false;
}

/* dtable = embedding_grad(ids, dy){rows = V}; ids get none. A
 * vocab-parallel embedding's gradient fills this rank's rows only. */
static bool ad_embedding(Ad *ad, IrNode *n, IrValue **dy) {
  IrValue *table = n->in[1];
  if (wants(ad, table))
    give(ad, table, emit1(ad, IR_OP_EMBEDDING_GRAD, INS(n->in[0], dy[0]),
                          ATTRS({"rows", lit_int(ad, table->type.shape[0])},
                                {"vocab_parallel", fwd_attr(n, "vocab_parallel")})));
  return true;
}

/* C = op(A) op(B): the gradients are matmuls with transpose flags. When B
 * is 2-D and A batched, dB sums over the batch: A and dC are flattened to
 * 2-D (reshape is a view), which turns the sum into the inner dimension of
 * one GEMM. */
static bool ad_matmul(Ad *ad, IrNode *n, IrValue **dy) {
  IrValue *a = n->in[0], *b = n->in[1], *dc = dy[0];
  int ta = (int)ir_attr_int(n, "transpose_a"), tb = (int)ir_attr_int(n, "transpose_b");
  bool shared_b = b->type.rank == 2 && a->type.rank > 2;
  if (wants(ad, a)) {
    IrValue *da;
    if (!ta)
      da = matmul(ad, dc, b, 0, !tb);           /* dA = dC op(B)^T */
    else if (!shared_b)
      da = tb ? matmul(ad, b, dc, 1, 1)         /* dA = B^T dC^T */
              : matmul(ad, b, dc, 0, 1);        /* dA = B dC^T */
    else
      da = swap_last2(ad, matmul(ad, dc, b, 0, !tb)); /* dA = (dC op(B)^T)^T */
    give(ad, a, da);
  }
  if (wants(ad, b)) {
    IrValue *db;
    if (!shared_b) {
      if (!ta && !tb) db = matmul(ad, a, dc, 1, 0);      /* dB = A^T dC */
      else if (!ta) db = matmul(ad, dc, a, 1, 0);        /* dB = dC^T A */
      else if (!tb) db = matmul(ad, a, dc, 0, 0);        /* dB = A dC */
      else db = matmul(ad, dc, a, 1, 1);                 /* dB = dC^T A^T */
    } else {
      const IrType *ct = &dc->type;
      int64_t rows = ir_type_numel(ct) / ct->shape[ct->rank - 1];
      IrValue *opa = ta ? swap_last2(ad, a) : a;
      int64_t k = opa->type.shape[opa->type.rank - 1];
      IrValue *a2 = reshape(ad, opa, 2, (int64_t[]){rows, k});
      IrValue *dc2 = reshape(ad, dc, 2, (int64_t[]){rows, ct->shape[ct->rank - 1]});
      db = tb ? matmul(ad, dc2, a2, 1, 0)   /* dB[n, k] = dC2^T op(A)2 */
              : matmul(ad, a2, dc2, 1, 0);  /* dB[k, n] = op(A)2^T dC2 */
    }
    give(ad, b, db);
  }
  return true;
}

/* y = x w + bias: dx = linear_dx, dw = linear_dw, dbias = dy summed over
 * every leading dim. */
static bool ad_linear(Ad *ad, IrNode *n, IrValue **dy) {
  IrValue *x = n->in[0], *w = n->in[1];
  IrExpr *tr = fwd_attr(n, "transposed");
  if (wants(ad, x))
    give(ad, x, emit1(ad, IR_OP_LINEAR_DX, INS(dy[0], w), ATTRS({"transposed", tr})));
  if (wants(ad, w))
    give(ad, w, emit1(ad, IR_OP_LINEAR_DW, INS(x, dy[0]), ATTRS({"transposed", tr})));
  if (n->nin > 2 && wants(ad, n->in[2])) give(ad, n->in[2], sum_to(ad, dy[0], n->in[2]));
  return true;
}

static bool ad_reshape(Ad *ad, IrNode *n, IrValue **dy) {
  const IrType *t = &n->in[0]->type;
  give(ad, n->in[0], reshape(ad, dy[0], t->rank, t->shape));
  return true;
}

static bool ad_transpose(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_TRANSPOSE, INS(dy[0]),
                           ATTRS({"dim0", fwd_attr(n, "dim0")}, {"dim1", fwd_attr(n, "dim1")})));
  return true;
}

static bool ad_split_heads(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_MERGE_HEADS, INS(dy[0]), NO_ATTRS));
  return true;
}

static bool ad_merge_heads(Ad *ad, IrNode *n, IrValue **dy) {
  int64_t heads = n->in[0]->type.shape[1];
  give(ad, n->in[0],
       emit1(ad, IR_OP_SPLIT_HEADS, INS(dy[0]), ATTRS({"heads", lit_int(ad, heads)})));
  return true;
}

/* dx = concat of the parts' gradients; a part no gradient reached is 0. */
static bool ad_split(Ad *ad, IrNode *n, IrValue **dy) {
  IrValue **parts = ir_alloc(sizeof(IrValue *) * (size_t)n->nout);
  for (int i = 0; i < n->nout; i++) parts[i] = dy[i] ? dy[i] : zeros_like(ad, n->out[i]);
  give(ad, n->in[0], emit1(ad, IR_OP_CONCAT, parts, n->nout, ATTRS({"axis", fwd_attr(n, "axis")})));
  return true;
}

/* x[start:end] along axis, a backward node. */
static IrValue *slice(Ad *ad, IrValue *x, int64_t start, int64_t end, IrExpr *axis) {
  return emit1(ad, IR_OP_SLICE, INS(x),
               ATTRS({"start", lit_int(ad, start)}, {"end", lit_int(ad, end)}, {"axis", axis}));
}

/* The parts of dy go back to the inputs: one split when the parts are
 * equal, otherwise one slice per input. */
static bool ad_concat(Ad *ad, IrNode *n, IrValue **dy) {
  int64_t axis = ir_attr_int(n, "axis");
  int rank = n->in[0]->type.rank;
  int64_t a = axis < 0 ? axis + rank : axis;
  bool equal = true;
  for (int i = 1; i < n->nin; i++)
    equal = equal && n->in[i]->type.shape[a] == n->in[0]->type.shape[a];
  if (!equal) {
    int64_t at = 0;
    for (int i = 0; i < n->nin; i++) {
      int64_t len = n->in[i]->type.shape[a];
      if (wants(ad, n->in[i]))
        give(ad, n->in[i], slice(ad, dy[0], at, at + len, fwd_attr(n, "axis")));
      at += len;
    }
    return true;
  }
  IrNode *s = emit(ad, IR_OP_SPLIT, dy, 1,
                   ATTRS({"n", lit_int(ad, n->nin)}, {"axis", fwd_attr(n, "axis")}), n->nin);
  for (int i = 0; i < n->nin; i++) give(ad, n->in[i], s->out[i]);
  return true;
}

/* dx is dy between zeros: concat(zeros[start], dy, zeros[len - end])
 * along axis, the zero parts left out where empty. */
static bool ad_slice(Ad *ad, IrNode *n, IrValue **dy) {
  const IrType *t = &n->in[0]->type;
  int64_t axis = ir_attr_int(n, "axis");
  int a = (int)(axis < 0 ? axis + t->rank : axis);
  int64_t start = ir_attr_int(n, "start"), end = ir_attr_int(n, "end");
  IrValue *parts[3];
  int k = 0;
  int64_t lens[2] = {start, t->shape[a] - end};
  for (int side = 0; side < 2; side++) {
    if (side == 1) parts[k++] = dy[0];
    if (!lens[side]) continue;
    IrType z = *t;
    z.shape[a] = lens[side];
    parts[k++] = emit1(ad, IR_OP_ZEROS, NULL, 0,
                       ATTRS({"shape", shape_list(ad, &z)},
                             {"dtype", lit_int(ad, (int64_t)t->dtype)}));
  }
  IrValue *dx = k == 1 ? dy[0]
                       : emit1(ad, IR_OP_CONCAT, parts, k, ATTRS({"axis", fwd_attr(n, "axis")}));
  give(ad, n->in[0], dx);
  return true;
}

static bool ad_add(Ad *ad, IrNode *n, IrValue **dy) {
  for (int i = 0; i < 2; i++)
    if (wants(ad, n->in[i])) give(ad, n->in[i], sum_to(ad, dy[0], n->in[i]));
  return true;
}

static bool ad_sub(Ad *ad, IrNode *n, IrValue **dy) {
  if (wants(ad, n->in[0])) give(ad, n->in[0], sum_to(ad, dy[0], n->in[0]));
  if (wants(ad, n->in[1])) give(ad, n->in[1], scale(ad, sum_to(ad, dy[0], n->in[1]), -1.0));
  return true;
}

/* d(a * b) = dy * b for a and dy * a for b, each reduced to its operand. */
static bool ad_mul(Ad *ad, IrNode *n, IrValue **dy) {
  for (int i = 0; i < 2; i++) {
    IrValue *x = n->in[i], *other = n->in[1 - i];
    if (wants(ad, x))
      give(ad, x, sum_to(ad, emit1(ad, IR_OP_MUL, INS(dy[0], other), NO_ATTRS), x));
  }
  return true;
}

static bool ad_scale(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_SCALE, INS(dy[0]), ATTRS({"s", fwd_attr(n, "s")})));
  return true;
}

static bool ad_gelu(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_GELU_GRAD, INS(n->in[0], dy[0]),
                           ATTRS({"approximate", fwd_attr(n, "approximate")})));
  return true;
}

static bool ad_silu(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_SILU_GRAD, INS(n->in[0], dy[0]), NO_ATTRS));
  return true;
}

static bool ad_swiglu(Ad *ad, IrNode *n, IrValue **dy) {
  IrNode *g = emit(ad, IR_OP_SWIGLU_GRAD, INS(n->in[0], n->in[1], dy[0]), NO_ATTRS, 2);
  give(ad, n->in[0], g->out[0]);
  give(ad, n->in[1], g->out[1]);
  return true;
}

/* A dropout of rate 0 is the identity, and so is its adjoint: no node. */
static bool ad_dropout(Ad *ad, IrNode *n, IrValue **dy) {
  if (ir_attr_float(n, "rate") == 0) {
    give(ad, n->in[0], dy[0]);
    return true;
  }
  give(ad, n->in[0], emit1(ad, IR_OP_DROPOUT_GRAD, INS(dy[0]),
                           ATTRS({"rate", fwd_attr(n, "rate")}, {"site", fwd_attr(n, "site")},
                                 {"per_rank", fwd_attr(n, "per_rank")})));
  return true;
}

/* layernorm_grad always has three results; without a bias the third goes
 * unused. */
static bool ad_layernorm(Ad *ad, IrNode *n, IrValue **dy) {
  IrNode *g = emit(ad, IR_OP_LAYERNORM_GRAD, INS(n->in[0], n->in[1], dy[0]),
                   ATTRS({"eps", fwd_attr(n, "eps")}), 3);
  for (int i = 0; i < n->nin; i++) give(ad, n->in[i], g->out[i]);
  return true;
}

static bool ad_rmsnorm(Ad *ad, IrNode *n, IrValue **dy) {
  IrNode *g = emit(ad, IR_OP_RMSNORM_GRAD, INS(n->in[0], n->in[1], dy[0]),
                   ATTRS({"eps", fwd_attr(n, "eps")}), 2);
  for (int i = 0; i < 2; i++) give(ad, n->in[i], g->out[i]);
  return true;
}

/* add_layernorm and add_rmsnorm: (s, y) = (a + b, norm(s)). The gradient
 * of s is the norm's dx plus what reached s itself (the next residual's),
 * which the norm gradient adds as its fourth input; a and b each get it
 * whole, as from add. */
static bool ad_add_norm(Ad *ad, IrNode *n, IrValue **dy, IrOp grad_op, int nparams) {
  IrValue *ds = dy[0];
  if (dy[1]) {
    IrValue *in[4] = {n->out[0], n->in[2], dy[1], dy[0]};
    IrNode *g = emit(ad, grad_op, in, dy[0] ? 4 : 3, ATTRS({"eps", fwd_attr(n, "eps")}),
                     grad_op == IR_OP_LAYERNORM_GRAD ? 3 : 2);
    for (int i = 0; i < nparams; i++) give(ad, n->in[2 + i], g->out[1 + i]);
    ds = g->out[0];
  }
  for (int i = 0; i < 2; i++) give(ad, n->in[i], ds);
  return true;
}

static bool ad_add_layernorm(Ad *ad, IrNode *n, IrValue **dy) {
  return ad_add_norm(ad, n, dy, IR_OP_LAYERNORM_GRAD, n->nin - 2);
}

static bool ad_add_rmsnorm(Ad *ad, IrNode *n, IrValue **dy) {
  return ad_add_norm(ad, n, dy, IR_OP_RMSNORM_GRAD, 1);
}

static bool ad_softmax(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_SOFTMAX_GRAD, INS(n->out[0], dy[0]), NO_ATTRS));
  return true;
}

/* The masked entries are constants: their gradient is 0. */
static bool ad_causal_mask(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_CAUSAL_MASK, INS(dy[0]),
                           ATTRS({"fill", ir_expr_float(0, here(ad))})));
  return true;
}

/* A rotation's adjoint is the rotation back. */
static bool ad_rope(Ad *ad, IrNode *n, IrValue **dy) {
  int64_t inverse = ir_attr_int(n, "inverse");
  give(ad, n->in[0],
       emit1(ad, IR_OP_ROPE, INS(dy[0]),
             ATTRS({"heads", fwd_attr(n, "heads")}, {"theta", fwd_attr(n, "theta")},
                   {"inverse", lit_int(ad, !inverse)}, {"dims", fwd_attr(n, "dims")})));
  return true;
}

static bool ad_attention(Ad *ad, IrNode *n, IrValue **dy) {
  /* The forward's log-sum-exp spares the backward a product (q k^T for the
   * row statistics). The key-padding mask (an integer input, without a
   * gradient) rides along as the seventh input, so that the backward drops
   * the same keys. */
  IrValue *in[7] = {n->in[0], n->in[1], n->in[2], n->out[0], dy[0], n->out[1],
                    n->nin > 3 ? n->in[3] : NULL};
  IrNode *g = emit(ad, IR_OP_ATTENTION_GRAD, in, n->nin > 3 ? 7 : 6,
                   ATTRS({"heads", fwd_attr(n, "heads")}, {"kv_heads", fwd_attr(n, "kv_heads")},
                         {"causal", fwd_attr(n, "causal")}),
                   3);
  for (int i = 0; i < 3; i++) give(ad, n->in[i], g->out[i]);
  return true;
}

static bool ad_cross_entropy(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0],
       emit1(ad, IR_OP_CROSS_ENTROPY_GRAD, INS(n->in[0], n->in[1], dy[0]),
             ATTRS({"vocab_parallel", fwd_attr(n, "vocab_parallel")},
                   {"valid", fwd_attr(n, "valid")}, {"ignore", fwd_attr(n, "ignore")})));
  return true;
}

/* ------------------------------------------------------ routed layers */

/* The experts are integers: only the weights carry a gradient back. */
static bool ad_router(Ad *ad, IrNode *n, IrValue **dy) {
  if (!dy[0]) return true;
  give(ad, n->in[0],
       emit1(ad, IR_OP_ROUTER_GRAD, INS(n->in[0], n->out[1], dy[0]),
             ATTRS({"k", fwd_attr(n, "k")}, {"score", fwd_attr(n, "score")},
                   {"normalize", fwd_attr(n, "normalize")})));
  return true;
}

/* Each token's k rows carry their gradients back to the token. */
static bool ad_moe_dispatch(Ad *ad, IrNode *n, IrValue **dy) {
  if (!dy[0]) return true;
  give(ad, n->in[0], emit1(ad, IR_OP_MOE_UNDISPATCH, INS(dy[0], n->out[1]),
                           ATTRS({"shape", shape_list(ad, &n->in[0]->type)})));
  return true;
}

static bool ad_router_load(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_ROUTER_LOAD_GRAD, INS(n->in[0], dy[0]), NO_ATTRS));
  return true;
}

static bool ad_router_z_loss(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], emit1(ad, IR_OP_ROUTER_Z_LOSS_GRAD, INS(n->in[0], dy[0]), NO_ATTRS));
  return true;
}

static bool ad_grouped_linear(Ad *ad, IrNode *n, IrValue **dy) {
  IrValue *x = n->in[0], *w = n->in[1], *counts = n->in[2];
  IrExpr *tr = fwd_attr(n, "transposed");
  if (wants(ad, x))
    give(ad, x, emit1(ad, IR_OP_GROUPED_LINEAR_DX, INS(dy[0], w, counts), ATTRS({"transposed", tr})));
  if (wants(ad, w))
    give(ad, w, emit1(ad, IR_OP_GROUPED_LINEAR_DW, INS(x, dy[0], counts), ATTRS({"transposed", tr})));
  return true;
}

static bool ad_moe_combine(Ad *ad, IrNode *n, IrValue **dy) {
  IrNode *g = emit(ad, IR_OP_MOE_COMBINE_GRAD, INS(n->in[0], n->in[1], n->in[2], dy[0]), NO_ATTRS, 2);
  give(ad, n->in[0], g->out[0]);
  give(ad, n->in[2], g->out[1]);
  return true;
}

/* ---------------------------------------------- tensor-parallel adjoints */

/* A collective or its local half on the forward node's mesh axis. */
static IrValue *comm(Ad *ad, IrOp op, IrNode *fwd, IrValue *x) {
  if (op == IR_OP_ALL_REDUCE)
    return emit1(ad, op, INS(x), ATTRS({"axis", fwd_attr(fwd, "axis")},
                                       {"size", fwd_attr(fwd, "size")}));
  return emit1(ad, op, INS(x), ATTRS({"dim", fwd_attr(fwd, "dim")}, {"axis", fwd_attr(fwd, "axis")},
                                     {"size", fwd_attr(fwd, "size")}));
}

/* partial -> replicated: every rank's dy is already the gradient of its
 * term of the sum (Megatron's g: all-reduce forward, identity backward). */
static bool ad_all_reduce(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], dy[0]);
  return true;
}

/* Each rank's gradient of a replicated value read by a split or partial
 * computation covers its own part only: the sum is the gradient (Megatron's
 * f: identity forward, all-reduce backward). */
static bool ad_tp_copy(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], comm(ad, IR_OP_ALL_REDUCE, n, dy[0]));
  return true;
}

/* A gathered value's gradient is replicated: each rank keeps its part. */
static bool ad_all_gather(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], comm(ad, IR_OP_TP_SLICE, n, dy[0]));
  return true;
}

/* The parts of a sliced value's gradient are on their ranks: gather them. */
static bool ad_tp_slice(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], comm(ad, IR_OP_ALL_GATHER, n, dy[0]));
  return true;
}

/* reduce_scatter is all_reduce then tp_slice: the adjoints in reverse,
 * all_gather then identity. */
static bool ad_reduce_scatter(Ad *ad, IrNode *n, IrValue **dy) {
  give(ad, n->in[0], comm(ad, IR_OP_ALL_GATHER, n, dy[0]));
  return true;
}

/* The rows went out by counts and came in as received: their gradients go
 * back the same way, the reverse all_to_all of dy by received, whose
 * result has x's rows (each rank gets back exactly the rows it sent, and
 * rows of dy past the received ones are never read). The counts are
 * integers and have no gradient. */
static bool ad_all_to_all(Ad *ad, IrNode *n, IrValue **dy) {
  if (!dy[0]) return true;
  IrNode *back = emit(ad, IR_OP_ALL_TO_ALL, INS(dy[0], n->out[1]),
                      ATTRS({"axis", fwd_attr(n, "axis")}, {"size", fwd_attr(n, "size")},
                            {"rows", lit_int(ad, n->in[0]->type.shape[0])}),
                      2);
  give(ad, n->in[0], back->out[0]);
  return true;
}

/* ep_sort and ep_unsort are one permutation of rows and its inverse, so
 * each one's adjoint is the other (the rows past the counted ones are
 * zeros both ways). */
static bool ad_ep_sort(Ad *ad, IrNode *n, IrValue **dy) {
  if (!dy[0]) return true;
  give(ad, n->in[0], emit1(ad, IR_OP_EP_UNSORT, INS(dy[0], n->in[1]),
                           ATTRS({"size", fwd_attr(n, "size")})));
  return true;
}

static bool ad_ep_unsort(Ad *ad, IrNode *n, IrValue **dy) {
  IrNode *back = emit(ad, IR_OP_EP_SORT, INS(dy[0], n->in[1]), ATTRS({"size", fwd_attr(n, "size")}), 2);
  give(ad, n->in[0], back->out[0]);
  return true;
}

/* ---------------------------------------------------- pipeline adjoints */

/* The gradient goes back the way the value came: from stage dst to src,
 * where it is accumulated (so it runs on src). */
static bool ad_pp_boundary(Ad *ad, IrNode *n, IrValue **dy) {
  ad->stage = (int)ir_attr_int(n, "src");
  IrValue *dx = emit1(ad, IR_OP_PP_BOUNDARY, INS(dy[0]),
                      ATTRS({"src", fwd_attr(n, "dst")}, {"dst", fwd_attr(n, "src")}));
  dx->def->adjoint_of = n;
  give(ad, n->in[0], dx);
  return true;
}

/* The adjoint column of ops.def as a table. */
static const AdjointFn adjoints[IR_OP_COUNT] = {
#define OP(id, name, min_in, max_in, nout, shape, attrs, flags, adjoint, tp, rows, flops, doc) \
  [IR_OP_##id] = adjoint,
#include "../ir/ops.def"
#undef OP
};

/* -------------------------------------------------------------- checks */

/* Everything autodiff relies on: no repeat left, every type known, no
 * backward pass yet. Reports each problem. */
static bool check_graph(IrGraph *g) {
  bool ok = true;
  int unknown = 0;
  const IrNode *first_unknown = NULL;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->op == IR_OP_REPEAT) {
      ir_error(n->loc, "autodiff: repeat '%s' is still rolled; run the unroll pass first",
               n->label ? n->label : "?");
      ok = false;
      continue;
    }
    if (n->phase == IR_PHASE_BACKWARD) {
      ir_error(n->loc, "autodiff: the graph has backward nodes already");
      return false;
    }
    for (int j = 0; j < n->nout; j++)
      if (!ir_type_known(&n->out[j]->type) && unknown++ == 0) first_unknown = n;
  }
  if (first_unknown) {
    ir_error(first_unknown->loc, "autodiff: the result of '%s' has no inferred type%s; run the "
             "fold and shape passes first", ir_op_info(first_unknown->op)->name,
             unknown > 1 ? ir_fmt(" (nor do %d more)", unknown - 1) : "");
    ok = false;
  }
  IrVec *decls[] = {&g->inputs, &g->params};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < decls[l]->len; i++) {
      IrValue *v = decls[l]->items[i];
      if (!ir_type_known(&v->type)) {
        ir_error(v->loc, "autodiff: %s%s has no known type; run the fold pass first",
                 l ? "@" : "%", v->name);
        ok = false;
      } else if (l == 0 && strcmp(v->name, "d_loss") == 0) {
        ir_error(v->loc, "autodiff: the model has an input named d_loss already");
        ok = false;
      }
    }
  return ok;
}

/* The one scalar float output, the loss; NULL after reporting why not. */
static IrValue *find_loss(IrGraph *g) {
  IrValue *loss = NULL;
  const char *loss_name = NULL;
  bool ok = true;
  for (int i = 0; i < g->outputs.len; i++) {
    IrValue *v = g->outputs.items[i];
    const char *name = g->output_names.items[i];
    if (v->type.rank != 0 || !ir_dtype_is_float(v->type.dtype)) continue;
    if (loss) {
      ir_error(v->loc, "autodiff: outputs '%s' and '%s' are both scalars; autodiff needs "
               "exactly one scalar output, the loss", loss_name, name);
      ok = false;
      continue;
    }
    loss = v;
    loss_name = name;
  }
  if (!loss && g->outputs.len) {
    IrValue *v = g->outputs.items[0];
    ir_error(v->loc, "autodiff: output '%s' is %s, not a scalar; autodiff needs exactly one "
             "scalar float output, the loss", (const char *)g->output_names.items[0],
             ir_type_str(&v->type));
  } else if (!loss) {
    ir_error((IrLoc){0}, "autodiff: model '%s' has no output to differentiate", g->name);
  }
  return ok ? loss : NULL;
}

/* ------------------------------------------------------------- the pass */

/* Which values some parameter flows into, in one forward sweep. */
static void mark_dependents(Ad *ad) {
  IrGraph *g = ad->g;
  for (int i = 0; i < g->params.len; i++) ad->dep[vid(ad, g->params.items[i])] = true;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    bool d = false;
    for (int j = 0; j < n->nin; j++) d = d || ad->dep[vid(ad, n->in[j])];
    for (int j = 0; j < n->nout; j++) ad->dep[vid(ad, n->out[j])] = d;
  }
}

/* Numbers the dropout nodes 0, 1, ... so that each draws its own mask. */
static void number_dropout_sites(Ad *ad) {
  int64_t site = 0;
  for (int i = 0; i < ad->g->nodes.len; i++) {
    IrNode *n = ad->g->nodes.items[i];
    if (n->op != IR_OP_DROPOUT) continue;
    IrAttr *a = ir_node_attr(n, "site");
    if (!a) die("dropout without a site attribute");
    a->expr = ir_expr_int(site++, n->loc);
  }
}

/* Sets every parameter's gradient: a zeros node where none arrived, and a
 * copy (scale by 1) where the value is not a backward result of its own,
 * so that each parameter's gradient is a distinct buffer. */
static void record_param_grads(Ad *ad) {
  IrGraph *g = ad->g;
  /* Each parameter adds at most one value: ids stay below this. */
  bool *taken = ir_alloc(sizeof(bool) * (size_t)(g->next_id + g->params.len + 1));
  /* The stage that holds each parameter: the one of its first reader. */
  int *holder = ir_alloc(sizeof(int) * (size_t)(ad->nvalues + 1));
  for (int i = g->nodes.len - 1; i >= 0; i--) {
    IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nin && n->phase == IR_PHASE_FORWARD; j++)
      if (n->in[j]->kind == IR_VAL_PARAM) holder[vid(ad, n->in[j])] = n->stage;
  }
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i], *gr = ad->grad[vid(ad, p)];
    ad->loc = p->loc;
    ad->stage = holder[vid(ad, p)];
    ad->layer = -1;
    if (!gr)
      gr = zeros_like(ad, p);
    else if (gr->kind != IR_VAL_NODE || gr->def->phase != IR_PHASE_BACKWARD || taken[gr->id])
      gr = scale(ad, gr, 1.0);
    taken[gr->id] = true;
    p->grad = gr;
  }
}

/* Marks the backward nodes that only parameter gradients need (wgrad):
 * those on no path to the gradient of a forward result (an activation,
 * which the backward of the node that made it reads, and at a chunk's
 * start the gradient message back to the earlier stage). The others are
 * B, the input gradients layer by layer, which the earlier stage waits
 * for; zero-bubble schedules run the wgrad nodes later, in W: the weight
 * GEMMs, the bias and norm-weight sums, and what feeds only them. B is
 * closed under its inputs (whatever a B node reads is on the path too),
 * so B nodes never read W results and running all of B before all of W
 * keeps the order topological. */
static void mark_weight_grads(Ad *ad) {
  IrGraph *g = ad->g;
  bool *on_path = ir_alloc(sizeof(bool) * (size_t)(g->next_id + 1));
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nout && n->phase == IR_PHASE_FORWARD; j++) {
      IrValue *d = ad->grad[vid(ad, n->out[j])];
      if (d && d->kind == IR_VAL_NODE) on_path[d->id] = true;
    }
  }
  for (int i = g->nodes.len - 1; i >= 0; i--) {
    IrNode *n = g->nodes.items[i];
    if (n->phase != IR_PHASE_BACKWARD) continue;
    bool b = n->op == IR_OP_PP_BOUNDARY;
    for (int j = 0; j < n->nout && !b; j++) b = on_path[n->out[j]->id];
    n->wgrad = !b;
    for (int j = 0; b && j < n->nin; j++) on_path[n->in[j]->id] = true;
  }
}

bool pass_autodiff(IrGraph **gp, const PassOptions *opt) {
  (void)opt;
  IrGraph *g = ir_top(*gp);
  if (!check_graph(g)) return false;
  IrValue *loss = find_loss(g);
  if (!loss) return false;
  Ad ad = {.g = g, .nvalues = g->next_id, .ok = true};
  ad.dep = ir_alloc(sizeof(bool) * (size_t)(ad.nvalues + 1));
  ad.grad = ir_alloc(sizeof(IrValue *) * (size_t)(ad.nvalues + 1));
  mark_dependents(&ad);
  number_dropout_sites(&ad);
  IrType seed = {.dtype = loss->type.dtype, .rank = 0};
  ad.grad[vid(&ad, loss)] = ir_add_input(g, "d_loss", seed, loss->loc);
  int nforward = g->nodes.len;
  for (int i = nforward - 1; i >= 0; i--) {
    IrNode *n = g->nodes.items[i];
    bool any_dy = false, any_in = false;
    IrValue **d = ir_alloc(sizeof(IrValue *) * (size_t)(n->nout ? n->nout : 1));
    for (int j = 0; j < n->nout; j++) any_dy |= (d[j] = ad.grad[vid(&ad, n->out[j])]) != NULL;
    for (int j = 0; j < n->nin; j++) any_in |= wants(&ad, n->in[j]);
    if (!any_dy || !any_in) continue;
    ad.loc = n->loc;
    ad.stage = n->stage;
    ad.layer = n->layer;
    adjoints[n->op](&ad, n, d);
  }
  if (!ad.ok) return false;
  record_param_grads(&ad);
  mark_weight_grads(&ad);
  return true;
}
