/* The shared f64 graph interpreter of the numeric test programs: see
 * interp.h. It follows the op semantics of ir/ops.def. */
#include "interp.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TiTensor *ti_tensors;
real *ti_scratch;
const char *ti_prog = "interp";

/* Short local names: the executors below read like the kernels' calls. */
#define T(v) ti_t(v)
#define R(v) ti_r(v)
#define numel(v) ti_numel(v)
#define last(v) ti_last(v)
#define dim(v, d) ti_dim(v, d)
#define scratch ti_scratch

void ti_init(const char *prog) {
  ti_prog = prog;
  ti_scratch = calloc((size_t)(k_attention_scratch(4096) * omp_get_max_threads()), sizeof(real));
}

TiTensor *ti_t(const IrValue *v) { return &ti_tensors[v->id]; }
real *ti_r(const IrValue *v) { return ti_t(v)->r; }
int64_t ti_numel(const IrValue *v) { return ir_type_numel(&v->type); }
int64_t ti_last(const IrValue *v) { return v->type.shape[v->type.rank - 1]; }
int64_t ti_dim(const IrValue *v, int d) { return v->type.shape[d < 0 ? d + v->type.rank : d]; }

/* ------------------------------------------------------------- random */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
uint64_t ti_rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(ti_rng_next() >> 11) / 9007199254740992.0; }
double ti_rng_normal(void) {
  double u = rng_uniform() + 1e-300, v = rng_uniform();
  return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}
/* --------------------------------------------------------- elementwise */

/* The index into `in` (broadcast to `out`'s shape) of out's flat index. */
static int64_t bcast(const IrType *out, const IrType *in, int64_t flat) {
  int64_t idx = 0, stride = 1;
  for (int d = 1; d <= out->rank; d++) {
    int64_t c = flat % out->shape[out->rank - d];
    flat /= out->shape[out->rank - d];
    if (d > in->rank) continue;
    int64_t n = in->shape[in->rank - d];
    if (n != 1) idx += c * stride;
    stride *= n;
  }
  return idx;
}

static void binary(IrNode *n) {
  const IrType *o = &n->out[0]->type;
  real *y = R(n->out[0]), *a = R(n->in[0]), *b = R(n->in[1]);
  for (int64_t i = 0; i < numel(n->out[0]); i++) {
    real x = a[bcast(o, &n->in[0]->type, i)], z = b[bcast(o, &n->in[1]->type, i)];
    y[i] = n->op == IR_OP_ADD ? x + z : n->op == IR_OP_SUB ? x - z : x * z;
  }
}

static void sum_to(IrNode *n) {
  real *y = R(n->out[0]), *x = R(n->in[0]);
  memset(y, 0, sizeof(real) * (size_t)numel(n->out[0]));
  for (int64_t i = 0; i < numel(n->in[0]); i++)
    y[bcast(&n->in[0]->type, &n->out[0]->type, i)] += x[i];
}

static void unary(IrNode *n) {
  real *y = R(n->out[0]), *x = R(n->in[0]);
  int64_t len = numel(n->out[0]);
  for (int64_t i = 0; i < len; i++) {
    switch (n->op) {
    case IR_OP_SCALE: y[i] = x[i] * (real)ir_attr_float(n, "s"); break;
    case IR_OP_GELU: y[i] = k_gelu_as(x[i], (real)ir_attr_int(n, "approximate")); break;
    case IR_OP_SILU: y[i] = k_silu(x[i]); break;
    case IR_OP_SWIGLU: y[i] = k_silu(x[i]) * R(n->in[1])[i]; break;
    case IR_OP_GELU_GRAD:
      y[i] = k_gelu_grad_as(x[i], R(n->in[1])[i], (real)ir_attr_int(n, "approximate"));
      break;
    case IR_OP_SILU_GRAD: y[i] = k_silu_grad(x[i], R(n->in[1])[i]); break;
    default: die("not unary: %s", ir_op_info(n->op)->name);
    }
  }
}

static void swiglu_grad(IrNode *n) {
  real *g = R(n->in[0]), *u = R(n->in[1]), *dy = R(n->in[2]);
  for (int64_t i = 0; i < numel(n->in[0]); i++) {
    R(n->out[0])[i] = k_silu_grad(g[i], dy[i] * u[i]);
    R(n->out[1])[i] = dy[i] * k_silu(g[i]);
  }
}

/* ------------------------------------------------------- routed layers */

static void router(IrNode *n) {
  const IrValue *l = n->in[0];
  int64_t E = last(l), rows = numel(l) / E, k = ir_attr_int(n, "k");
  int score = (int)ir_attr_int(n, "score"), norm = (int)ir_attr_int(n, "normalize");
  if (n->op == IR_OP_ROUTER)
    k_router_fwd(R(n->out[0]), T(n->out[1])->i, R(l), rows, E, k, score, norm);
  else
    k_router_bwd(R(n->out[0]), R(l), T(n->in[1])->i, R(n->in[2]), rows, E, k, score, norm);
}

/* grouped_linear(x, w, counts), _dx(dy, w, counts), _dw(x, dy, counts). */
static void grouped_linear(IrNode *n) {
  const IrValue *c = n->in[2];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t E = numel(c), rows = dim(n->in[0], 0), in, out;
  if (n->op == IR_OP_GROUPED_LINEAR_DW) {
    in = last(n->in[0]), out = last(n->in[1]);
    k_grouped_linear_dw(R(n->out[0]), R(n->in[0]), R(n->in[1]), T(c)->i, rows, E, in, out, tr);
    return;
  }
  const IrValue *w = n->in[1];
  in = tr ? dim(w, 2) : dim(w, 1), out = tr ? dim(w, 1) : dim(w, 2);
  if (n->op == IR_OP_GROUPED_LINEAR)
    k_grouped_linear(R(n->out[0]), R(n->in[0]), R(w), T(c)->i, rows, E, in, out, tr);
  else
    k_grouped_linear_dx(R(n->out[0]), R(n->in[0]), R(w), T(c)->i, rows, E, in, out, tr);
}

/* moe_dispatch's rows per expert: capacity * T*k / E rounded up, 0 (no
 * limit) without a capacity. */
static int64_t capacity_of(const IrNode *n) {
  return ir_moe_capacity(ir_attr_float(n, "capacity"), numel(n->in[1]), numel(n->out[2]));
}

/* ------------------------------------------------------------- layout */

/* x viewed as [outer, len, inner] around `axis`. */
static void around(const IrValue *v, int64_t axis, int64_t *outer, int64_t *inner) {
  int rank = v->type.rank;
  if (axis < 0) axis += rank;
  *outer = *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= v->type.shape[d];
  for (int d = (int)axis + 1; d < rank; d++) *inner *= v->type.shape[d];
}

static void split_concat(IrNode *n, bool split) {
  int64_t axis = ir_attr_int(n, "axis"), outer, inner;
  const IrValue *whole = split ? n->in[0] : n->out[0];
  around(whole, axis, &outer, &inner);
  int64_t width = numel(whole) / outer, off = 0;
  int parts = split ? n->nout : n->nin;
  for (int p = 0; p < parts; p++) {
    const IrValue *part = split ? n->out[p] : n->in[p];
    int64_t cols = numel(part) / outer;
    if (split)
      k_copy2d(R(part), cols, R(whole) + off, width, outer, cols);
    else
      k_copy2d(R(whole) + off, width, R(part), cols, outer, cols);
    off += cols;
  }
}

static void slice(IrNode *n) {
  int64_t axis = ir_attr_int(n, "axis"), outer, inner;
  around(n->in[0], axis, &outer, &inner);
  int64_t width = numel(n->in[0]) / outer, cols = numel(n->out[0]) / outer;
  k_copy2d(R(n->out[0]), cols, R(n->in[0]) + ir_attr_int(n, "start") * inner, width, outer, cols);
}

static void transpose(IrNode *n) {
  const IrValue *x = n->in[0];
  int rank = x->type.rank;
  int64_t d0 = ir_attr_int(n, "dim0"), d1 = ir_attr_int(n, "dim1");
  if (d0 < 0) d0 += rank;
  if (d1 < 0) d1 += rank;
  if (d0 > d1) {
    int64_t t = d0;
    d0 = d1;
    d1 = t;
  }
  int64_t outer = 1, mid = 1, inner = 1;
  for (int d = 0; d < d0; d++) outer *= x->type.shape[d];
  for (int d = (int)d0 + 1; d < d1; d++) mid *= x->type.shape[d];
  for (int d = (int)d1 + 1; d < rank; d++) inner *= x->type.shape[d];
  k_transpose(R(n->out[0]), R(x), outer, x->type.shape[d0], mid, x->type.shape[d1], inner);
}

/* ------------------------------------------------------------- GEMMs */

static void matmul(IrNode *n) {
  const IrValue *a = n->in[0], *b = n->in[1], *c = n->out[0];
  int ta = (int)ir_attr_int(n, "transpose_a"), tb = (int)ir_attr_int(n, "transpose_b");
  int64_t M = dim(c, -2), N = dim(c, -1), K = ta ? dim(a, -2) : dim(a, -1);
  int64_t batch = numel(c) / (M * N);
  int64_t sb = b->type.rank == 2 ? 0 : K * N;
  k_gemm_batched(ta, tb, batch, M, N, K, 1, R(a), ta ? M : K, M * K, R(b), tb ? K : N, sb, 0,
                 R(c), N, M * N);
}

static void linear(IrNode *n) {
  const IrValue *x = n->in[0], *w = n->in[1];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t in = last(x), out = last(n->out[0]), rows = numel(x) / in;
  k_gemm(0, tr, rows, out, in, 1, R(x), in, R(w), tr ? in : out, 0, R(n->out[0]), out);
  if (n->nin > 2) k_add_bias(R(n->out[0]), R(n->in[2]), rows, out);
}

/* dx = dy w^T ([in, out] weight) or dy w ([out, in]). */
static void linear_dx(IrNode *n) {
  const IrValue *dy = n->in[0], *w = n->in[1];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t out = last(dy), in = last(n->out[0]), rows = numel(dy) / out;
  k_gemm(0, !tr, rows, in, out, 1, R(dy), out, R(w), tr ? in : out, 0, R(n->out[0]), in);
}

/* dw = x^T dy ([in, out]) or dy^T x ([out, in]), summed over all rows. */
static void linear_dw(IrNode *n) {
  const IrValue *x = n->in[0], *dy = n->in[1];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t in = last(x), out = last(dy), rows = numel(x) / in;
  if (tr)
    k_gemm(1, 0, out, in, rows, 1, R(dy), out, R(x), in, 0, R(n->out[0]), in);
  else
    k_gemm(1, 0, in, out, rows, 1, R(x), in, R(dy), out, 0, R(n->out[0]), out);
}

/* ------------------------------------------------------- the other ops */

static int ignore_of(const IrNode *n) {
  return ir_attr_has(n, "ignore") ? (int)ir_attr_int(n, "ignore") : 0;
}

static void attention(IrNode *n, bool grad) {
  const IrValue *q = n->in[0], *k = n->in[1];
  int64_t heads = ir_attr_int(n, "heads"), kv = ir_attr_int(n, "kv_heads");
  int64_t K = kv ? kv : heads, d = last(q) / heads;
  int causal = (int)ir_attr_int(n, "causal");
  if (dim(k, 1) != dim(q, 1)) die("%s: attention with different q and k lengths", ti_prog);
  /* The key-padding mask: attention's fourth input, attention_grad's
   * seventh (after the log-sum-exp, which the CPU kernels do not keep). */
  int mi = grad ? 6 : 3;
  const int32_t *keep = n->nin > mi ? T(n->in[mi])->i : NULL;
  if (!grad)
    k_attention_masked_fwd(R(n->out[0]), R(q), R(k), R(n->in[2]), keep, dim(q, 0), dim(q, 1),
                           heads, K, d, causal, scratch);
  else
    k_attention_masked_bwd(R(n->out[0]), R(n->out[1]), R(n->out[2]), R(n->in[4]), R(q), R(k),
                           R(n->in[2]), R(n->in[3]), keep, dim(q, 0), dim(q, 1), heads, K, d,
                           causal, scratch);
}

static void norm(IrNode *n) {
  const IrValue *x = n->in[0];
  int64_t h = last(x), rows = numel(x) / h;
  real eps = (real)ir_attr_float(n, "eps");
  switch (n->op) {
  case IR_OP_LAYERNORM:
    k_layernorm_fwd(R(n->out[0]), R(x), R(n->in[1]), n->nin > 2 ? R(n->in[2]) : NULL, rows, h,
                    eps);
    break;
  case IR_OP_RMSNORM: k_rmsnorm_fwd(R(n->out[0]), R(x), R(n->in[1]), rows, h, eps); break;
  case IR_OP_ADD_LAYERNORM:
    k_add_layernorm_fwd(R(n->out[0]), R(n->out[1]), R(x), R(n->in[1]), R(n->in[2]),
                        n->nin > 3 ? R(n->in[3]) : NULL, rows, h, eps);
    break;
  case IR_OP_ADD_RMSNORM:
    k_add_rmsnorm_fwd(R(n->out[0]), R(n->out[1]), R(x), R(n->in[1]), R(n->in[2]), rows, h, eps);
    break;
  /* A fourth input is add-norm's residual gradient, added to dx. */
  case IR_OP_LAYERNORM_GRAD:
    k_layernorm_bwd_res(R(n->out[0]), R(n->out[1]), R(n->out[2]), R(n->in[2]), R(x), R(n->in[1]),
                        n->nin > 3 ? R(n->in[3]) : NULL, rows, h, eps);
    break;
  case IR_OP_RMSNORM_GRAD:
    k_rmsnorm_bwd_res(R(n->out[0]), R(n->out[1]), R(n->in[2]), R(x), R(n->in[1]),
                      n->nin > 3 ? R(n->in[3]) : NULL, rows, h, eps);
    break;
  default: die("not a norm");
  }
}

/* The real columns of a loss's logits: `valid`, 0 meaning all. */
static int64_t valid_of(const IrNode *n, const IrValue *logits) {
  int64_t v = ir_attr_int(n, "valid");
  return v > 0 ? v : last(logits);
}

bool ti_exec(IrNode *n) {
  const IrValue *x = n->nin ? n->in[0] : NULL, *y = n->out[0];
  /* Collectives, tp_copy and pp_boundary run across ranks: the caller's. */
  if (ir_op_info(n->op)->flags & IR_OPF_PARALLEL) return false;
  switch (n->op) {
  case IR_OP_EMBEDDING: k_embedding_fwd(R(y), T(x)->i, R(n->in[1]), numel(x), last(y)); break;
  case IR_OP_ARANGE: k_arange(T(y)->i, numel(y)); break;
  case IR_OP_ZEROS: memset(R(y), 0, sizeof(real) * (size_t)numel(y)); break;
  case IR_OP_MATMUL: matmul(n); break;
  case IR_OP_LINEAR: linear(n); break;
  case IR_OP_LINEAR_DX: linear_dx(n); break;
  case IR_OP_LINEAR_DW: linear_dw(n); break;
  case IR_OP_RESHAPE: memcpy(R(y), R(x), sizeof(real) * (size_t)numel(y)); break;
  case IR_OP_TRANSPOSE: transpose(n); break;
  case IR_OP_SPLIT_HEADS: {
    int64_t H = dim(y, 1);
    k_split_heads(R(y), R(x), dim(x, 0), dim(x, 1), H, last(x) / H);
    break;
  }
  case IR_OP_MERGE_HEADS:
    k_merge_heads(R(y), R(x), dim(x, 0), dim(x, 2), dim(x, 1), last(x));
    break;
  case IR_OP_SPLIT: split_concat(n, true); break;
  case IR_OP_CONCAT: split_concat(n, false); break;
  case IR_OP_SLICE: slice(n); break;
  case IR_OP_ADD:
  case IR_OP_SUB:
  case IR_OP_MUL: binary(n); break;
  case IR_OP_SUM_TO: sum_to(n); break;
  case IR_OP_SCALE:
  case IR_OP_GELU:
  case IR_OP_SILU:
  case IR_OP_SWIGLU:
  case IR_OP_GELU_GRAD:
  case IR_OP_SILU_GRAD: unary(n); break;
  case IR_OP_SWIGLU_GRAD: swiglu_grad(n); break;
  case IR_OP_DROPOUT:
    k_dropout_fwd(R(y), R(x), numel(y), (real)ir_attr_float(n, "rate"), TI_SEED,
                  (uint64_t)ir_attr_int(n, "site"));
    break;
  case IR_OP_DROPOUT_GRAD:
    k_dropout_bwd(R(y), R(x), numel(y), (real)ir_attr_float(n, "rate"), TI_SEED,
                  (uint64_t)ir_attr_int(n, "site"));
    break;
  case IR_OP_LAYERNORM:
  case IR_OP_RMSNORM:
  case IR_OP_ADD_LAYERNORM:
  case IR_OP_ADD_RMSNORM:
  case IR_OP_LAYERNORM_GRAD:
  case IR_OP_RMSNORM_GRAD: norm(n); break;
  case IR_OP_SOFTMAX: k_softmax_fwd(R(y), R(x), numel(x) / last(x), last(x)); break;
  case IR_OP_SOFTMAX_GRAD:
    k_softmax_bwd(R(y), R(x), R(n->in[1]), numel(x) / last(x), last(x));
    break;
  case IR_OP_CAUSAL_MASK:
    k_causal_mask(R(y), R(x), numel(x) / (last(x) * last(x)), last(x),
                  (real)ir_attr_float(n, "fill"));
    break;
  case IR_OP_ROPE: {
    int64_t H = ir_attr_int(n, "heads");
    int64_t d = last(x) / H, r = ir_attr_int(n, "dims");
    k_rope_part(R(y), R(x), dim(x, 0), dim(x, 1), H, d, r ? r : d, (real)ir_attr_float(n, "theta"),
                (int)ir_attr_int(n, "inverse"));
    break;
  }
  case IR_OP_ATTENTION: attention(n, false); break;
  case IR_OP_ATTENTION_GRAD: attention(n, true); break;
  case IR_OP_EMBEDDING_GRAD:
    k_embedding_bwd(R(y), T(x)->i, R(n->in[1]), numel(x), dim(y, 0), last(y));
    break;
  case IR_OP_CROSS_ENTROPY:
    k_cross_entropy_ign_fwd(R(y), R(x), T(n->in[1])->i, numel(x) / last(x), last(x),
                            valid_of(n, x), ignore_of(n));
    break;
  case IR_OP_CROSS_ENTROPY_GRAD:
    k_cross_entropy_ign_bwd(R(y), R(x), T(n->in[1])->i, R(n->in[2]), numel(x) / last(x), last(x),
                            valid_of(n, x), ignore_of(n));
    break;
  case IR_OP_ROUTER:
  case IR_OP_ROUTER_GRAD: router(n); break;
  case IR_OP_ROUTER_LOAD:
    k_router_load_fwd(R(y), R(x), numel(x) / last(x), last(x), ir_attr_int(n, "k"));
    break;
  case IR_OP_ROUTER_LOAD_GRAD:
    k_router_load_bwd(R(y), R(x), R(n->in[1]), numel(x) / last(x), last(x));
    break;
  case IR_OP_ROUTER_Z_LOSS: k_router_z_loss_fwd(R(y), R(x), numel(x) / last(x), last(x)); break;
  case IR_OP_ROUTER_Z_LOSS_GRAD:
    k_router_z_loss_bwd(R(y), R(x), R(n->in[1]), numel(x) / last(x), last(x));
    break;
  case IR_OP_MOE_DISPATCH:
    k_moe_dispatch(R(n->out[0]), T(n->out[1])->i, T(n->out[2])->i, R(x), T(n->in[1])->i,
                   numel(n->in[1]) / last(n->in[1]), last(n->in[1]), last(x), numel(n->out[2]),
                   capacity_of(n));
    break;
  case IR_OP_MOE_UNDISPATCH:
    k_moe_combine(R(y), R(x), T(n->in[1])->i, NULL, numel(y) / last(y), numel(n->in[1]) * last(y) / numel(y), last(y));
    break;
  case IR_OP_MOE_COMBINE:
    k_moe_combine(R(y), R(x), T(n->in[1])->i, R(n->in[2]), numel(n->in[2]) / last(n->in[2]), last(n->in[2]), last(x));
    break;
  case IR_OP_MOE_COMBINE_GRAD:
    k_moe_combine_bwd(R(y), R(n->out[1]), R(x), T(n->in[1])->i, R(n->in[2]), R(n->in[3]),
                      numel(n->in[2]) / last(n->in[2]), last(n->in[2]), last(x));
    break;
  case IR_OP_GROUPED_LINEAR:
  case IR_OP_GROUPED_LINEAR_DX:
  case IR_OP_GROUPED_LINEAR_DW: grouped_linear(n); break;
  default:
    die("%s: %s is not interpreted (tests/common/interp.c)", ti_prog, ir_op_info(n->op)->name);
  }
  return true;
}

/* ------------------------------------------------------------- setup */

static void alloc_value(TiTensor *t, const IrValue *v) {
  if (v->type.dtype != IR_F64 && v->type.dtype != IR_F32 && v->type.dtype != IR_I32)
    die("%s: %s values are not interpreted", ti_prog, ir_dtype_name(v->type.dtype));
  t->n = numel(v);
  if (v->type.dtype == IR_I32)
    t->i = calloc((size_t)(t->n ? t->n : 1), sizeof(int32_t));
  else
    t->r = calloc((size_t)(t->n ? t->n : 1), sizeof(real));
}

TiTensor *ti_alloc_graph(const IrGraph *g) {
  TiTensor *table = calloc((size_t)g->next_id + 1, sizeof *table);
  const IrVec *decls[] = {&g->inputs, &g->params};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < decls[l]->len; i++) {
      const IrValue *v = decls[l]->items[i];
      alloc_value(&table[v->id], v);
    }
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nout; j++) alloc_value(&table[n->out[j]->id], n->out[j]);
  }
  return table;
}

int64_t ti_id_bound(const IrGraph *g, const IrValue *v) {
  int64_t bound = INT32_MAX;
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    int64_t b = INT32_MAX;
    if (n->op == IR_OP_EMBEDDING && n->in[0] == v) b = dim(n->in[1], 0);
    if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) && n->in[1] == v)
      b = last(n->in[0]);
    if (b < bound) bound = b;
  }
  return bound == INT32_MAX ? 2 : bound;
}

const IrValue *ti_find_loss(const IrGraph *g) {
  for (int i = 0; i < g->outputs.len; i++) {
    const IrValue *v = g->outputs.items[i];
    if (v->type.rank == 0) return v;
  }
  die("%s: no scalar output", ti_prog);
}

IrGraph *ti_load(const char *path, char **text) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  size_t len = 0;
  FILE *mem = open_memstream(text, &len);
  for (int c; (c = fgetc(f)) != EOF;) fputc(c, mem);
  fclose(mem);
  fclose(f);
  IrGraph *g = ir_parse(path, *text, len);
  if (!g || !ir_verify(g, NULL)) exit(1);
  return g;
}
