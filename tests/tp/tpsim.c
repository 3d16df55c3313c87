/* tpsim: checks tensor parallelism numerically, independent of codegen.
 *
 * Reads two .ir files that went through the CPU target's passes up to
 * autodiff: REF, compiled for one rank, and PART, the same model compiled
 * for t tensor-parallel ranks (`mesh tensor = t`). It interprets REF once
 * and PART as t ranks in lockstep, node by node in double precision with
 * the f64 CPU kernels: an ordinary node runs on every rank with that rank's
 * tensors, a collective combines the ranks' tensors (all_reduce sums them,
 * all_gather joins the parts in rank order, tp_slice and reduce_scatter
 * keep part r), and the vocab-parallel embedding, cross_entropy and their
 * gradients follow the semantics of ir/ops.def (a rank holds rows or
 * columns [r*V, (r+1)*V) of the whole vocabulary). Parameters get the same
 * random values in both: each rank's part is cut from REF's tensor as its
 * split spec says (blocks included); padding gets random values too, which
 * must change nothing. Then it compares the loss of every rank with REF's,
 * and every gradient: split ones gathered into the whole tensor (padding
 * must get a zero gradient), replicated ones on every rank.
 *
 *   tpsim REF.ir PART.ir
 *
 * This is what the partitioning passes promise: the t ranks together
 * compute what one rank computes. The generated programs keep the same
 * promise with real messages (tests/train). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "kernels.h"

#define SEED 1234
#define MAX_RANKS 16
/* f64 sums in a different order (partial sums over ranks): a few ulps. */
#define TOL 1e-9

typedef struct Tensor {
  real *r;      /* float tensors */
  int32_t *i;   /* integer tensors */
  int64_t n;
} Tensor;

static Tensor *tensors; /* by value id: the table of the rank being run */
static real *scratch;

static Tensor *T(const IrValue *v) { return &tensors[v->id]; }
static real *R(const IrValue *v) { return T(v)->r; }
static int64_t numel(const IrValue *v) { return ir_type_numel(&v->type); }
static int64_t last(const IrValue *v) { return v->type.shape[v->type.rank - 1]; }
static int64_t dim(const IrValue *v, int d) {
  return v->type.shape[d < 0 ? d + v->type.rank : d];
}

/* ------------------------------------------------------------- random */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }
static double rng_normal(void) {
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
    case IR_OP_GELU: y[i] = k_gelu(x[i]); break;
    case IR_OP_SILU: y[i] = k_silu(x[i]); break;
    case IR_OP_SWIGLU: y[i] = k_silu(x[i]) * R(n->in[1])[i]; break;
    case IR_OP_GELU_GRAD: y[i] = k_gelu_grad(x[i], R(n->in[1])[i]); break;
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

static void attention(IrNode *n, bool grad) {
  const IrValue *q = n->in[0], *k = n->in[1];
  int64_t heads = ir_attr_int(n, "heads"), kv = ir_attr_int(n, "kv_heads");
  int64_t K = kv ? kv : heads, d = last(q) / heads;
  int causal = (int)ir_attr_int(n, "causal");
  if (dim(k, 1) != dim(q, 1)) die("tpsim: attention with different q and k lengths");
  if (!grad)
    k_attention_fwd(R(n->out[0]), R(q), R(k), R(n->in[2]), dim(q, 0), dim(q, 1), heads, K, d,
                    causal, scratch);
  else
    k_attention_bwd(R(n->out[0]), R(n->out[1]), R(n->out[2]), R(n->in[4]), R(q), R(k),
                    R(n->in[2]), R(n->in[3]), dim(q, 0), dim(q, 1), heads, K, d, causal, scratch);
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
  case IR_OP_LAYERNORM_GRAD:
    k_layernorm_bwd(R(n->out[0]), R(n->out[1]), R(n->out[2]), R(n->in[2]), R(x), R(n->in[1]),
                    rows, h, eps);
    break;
  case IR_OP_RMSNORM_GRAD:
    k_rmsnorm_bwd(R(n->out[0]), R(n->out[1]), R(n->in[2]), R(x), R(n->in[1]), rows, h, eps);
    break;
  default: die("not a norm");
  }
}

/* The real columns of a loss's logits: `valid`, 0 meaning all. */
static int64_t valid_of(const IrNode *n, const IrValue *logits) {
  int64_t v = ir_attr_int(n, "valid");
  return v > 0 ? v : last(logits);
}

static void exec(IrNode *n) {
  const IrValue *x = n->nin ? n->in[0] : NULL, *y = n->out[0];
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
    k_dropout_fwd(R(y), R(x), numel(y), (real)ir_attr_float(n, "rate"), SEED,
                  (uint64_t)ir_attr_int(n, "site"));
    break;
  case IR_OP_DROPOUT_GRAD:
    k_dropout_bwd(R(y), R(x), numel(y), (real)ir_attr_float(n, "rate"), SEED,
                  (uint64_t)ir_attr_int(n, "site"));
    break;
  case IR_OP_LAYERNORM:
  case IR_OP_RMSNORM:
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
    k_rope(R(y), R(x), dim(x, 0), dim(x, 1), H, last(x) / H, (real)ir_attr_float(n, "theta"),
           (int)ir_attr_int(n, "inverse"));
    break;
  }
  case IR_OP_ATTENTION: attention(n, false); break;
  case IR_OP_ATTENTION_GRAD: attention(n, true); break;
  case IR_OP_EMBEDDING_GRAD:
    k_embedding_bwd(R(y), T(x)->i, R(n->in[1]), numel(x), dim(y, 0), last(y));
    break;
  case IR_OP_CROSS_ENTROPY:
    k_cross_entropy_fwd(R(y), R(x), T(n->in[1])->i, numel(x) / last(x), last(x), valid_of(n, x));
    break;
  case IR_OP_CROSS_ENTROPY_GRAD:
    k_cross_entropy_bwd(R(y), R(x), T(n->in[1])->i, R(n->in[2]), numel(x) / last(x), last(x),
                        valid_of(n, x));
    break;
  case IR_OP_ALL_REDUCE:
  case IR_OP_TP_COPY:
  case IR_OP_ALL_GATHER:
  case IR_OP_TP_SLICE:
  case IR_OP_REDUCE_SCATTER:
  case IR_OP_PP_BOUNDARY:
    die("tpsim: %s runs across ranks", ir_op_info(n->op)->name);
  case IR_OP_REPEAT:
  case IR_OP_COUNT: die("tpsim: %s is not interpreted", ir_op_info(n->op)->name);
  }
}

/* ------------------------------------------------------------- the ranks */

static int nranks;
static Tensor *ref_table, *rank_tables[MAX_RANKS];

static Tensor *on(int r, const IrValue *v) { return &rank_tables[r][v->id]; }

/* x viewed as [outer, n, inner] around dim d. */
static void dims3(const IrType *t, int d, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int k = 0; k < d; k++) *outer *= t->shape[k];
  *n = t->shape[d];
  for (int k = d + 1; k < t->rank; k++) *inner *= t->shape[k];
}

/* Copies part `r` of `parts` equal parts along dim d of whole (shape
 * `wt`) to or from part (gather: part -> whole). `blocks` equal blocks
 * along d each give their own part r. */
static void part_copy(real *whole, const IrType *wt, real *part, int d, int r, int parts,
                      int blocks, bool to_whole) {
  int64_t outer, n, inner;
  dims3(wt, d, &outer, &n, &inner);
  int64_t bn = n / blocks, pn = bn / parts, local = pn * blocks;
  for (int b = 0; b < blocks; b++) {
    real *w = whole + (b * bn + r * pn) * inner, *p = part + b * pn * inner;
    if (to_whole)
      k_copy2d(w, n * inner, p, local * inner, outer, pn * inner);
    else
      k_copy2d(p, local * inner, w, n * inner, outer, pn * inner);
  }
}

static int64_t count(const IrValue *v) { return ir_type_numel(&v->type); }

/* all_reduce, tp_copy, all_gather, tp_slice, reduce_scatter over the ranks. */
static void collective(IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  int d = n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_TP_COPY ? 0 : (int)ir_attr_int(n, "dim");
  if (d < 0) d += x->type.rank;
  if (ir_attr_int(n, "size") != nranks) die("tpsim: %s over %lld ranks, not %d",
                                           ir_op_info(n->op)->name, (long long)ir_attr_int(n, "size"), nranks);
  real *sum = calloc((size_t)count(x) + 1, sizeof(real));
  for (int r = 0; r < nranks; r++)
    for (int64_t i = 0; i < count(x); i++) sum[i] += on(r, x)->r[i];
  for (int r = 0; r < nranks; r++) {
    real *out = on(r, y)->r, *in = on(r, x)->r;
    switch (n->op) {
    case IR_OP_ALL_REDUCE: memcpy(out, sum, sizeof(real) * (size_t)count(y)); break;
    case IR_OP_TP_COPY: memcpy(out, in, sizeof(real) * (size_t)count(y)); break;
    case IR_OP_ALL_GATHER:
      for (int q = 0; q < nranks; q++) part_copy(out, &y->type, on(q, x)->r, d, q, nranks, 1, true);
      break;
    case IR_OP_TP_SLICE: part_copy(in, &x->type, out, d, r, nranks, 1, false); break;
    case IR_OP_REDUCE_SCATTER: part_copy(sum, &x->type, out, d, r, nranks, 1, false); break;
    default: die("tpsim: not a collective");
    }
  }
  free(sum);
}

/* embedding(_grad) with vocab_parallel: rank r holds rows [r*V, (r+1)*V). */
static void vocab_embedding(IrNode *n) {
  const IrValue *ids = n->in[0], *y = n->out[0];
  bool grad = n->op == IR_OP_EMBEDDING_GRAD;
  int64_t h = grad ? last(y) : last(n->in[1]), rows = grad ? dim(y, 0) : dim(n->in[1], 0);
  for (int r = 0; r < nranks; r++) {
    const int32_t *id = on(r, ids)->i;
    real *out = on(r, y)->r, *src = on(r, n->in[1])->r;
    memset(out, 0, sizeof(real) * (size_t)count(y));
    for (int64_t i = 0; i < count(ids); i++) {
      int64_t row = id[i] - r * rows;
      if (row < 0 || row >= rows) continue;
      for (int64_t k = 0; k < h; k++) {
        if (grad)
          out[row * h + k] += src[i * h + k];
        else
          out[i * h + k] = src[row * h + k];
      }
    }
  }
}

/* cross_entropy(_grad) with vocab_parallel: the ranks' columns joined are
 * the whole logits; the loss is every rank's, the gradient each rank's part. */
static void vocab_loss(IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  int64_t cols = last(x), V = cols * nranks, rows = count(x) / cols;
  int64_t valid = ir_attr_int(n, "valid") > 0 ? ir_attr_int(n, "valid") : V;
  IrType whole = x->type;
  whole.shape[whole.rank - 1] = V;
  real *logits = malloc(sizeof(real) * (size_t)(rows * V)), *dl = NULL;
  for (int r = 0; r < nranks; r++)
    part_copy(logits, &whole, on(r, x)->r, whole.rank - 1, r, nranks, 1, true);
  const int32_t *targets = on(0, n->in[1])->i;
  if (n->op == IR_OP_CROSS_ENTROPY) {
    real loss;
    k_cross_entropy_fwd(&loss, logits, targets, rows, V, valid);
    for (int r = 0; r < nranks; r++) on(r, y)->r[0] = loss;
  } else {
    dl = malloc(sizeof(real) * (size_t)(rows * V));
    k_cross_entropy_bwd(dl, logits, targets, on(0, n->in[2])->r, rows, V, valid);
    for (int r = 0; r < nranks; r++)
      part_copy(dl, &whole, on(r, y)->r, whole.rank - 1, r, nranks, 1, false);
  }
  free(logits);
  free(dl);
}

static bool vocab_parallel(const IrNode *n) {
  return ir_attr_has(n, "vocab_parallel") && ir_attr_int(n, "vocab_parallel") != 0;
}

static void run_ranks(IrGraph *g) {
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (ir_op_info(n->op)->flags & IR_OPF_PARALLEL) {
      collective(n);
    } else if ((n->op == IR_OP_EMBEDDING || n->op == IR_OP_EMBEDDING_GRAD) && vocab_parallel(n)) {
      vocab_embedding(n);
    } else if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) &&
               vocab_parallel(n)) {
      vocab_loss(n);
    } else {
      if (n->op == IR_OP_DROPOUT && ir_attr_float(n, "rate") != 0 && ir_attr_int(n, "per_rank"))
        die("tpsim: dropout with per-rank streams differs from one rank by design; use rate 0");
      for (int r = 0; r < nranks; r++) {
        tensors = rank_tables[r];
        exec(n);
      }
    }
  }
}

/* ---------------------------------------------------------------- setup */

static void alloc_value(Tensor *t, const IrValue *v) {
  if (v->type.dtype != IR_F64 && v->type.dtype != IR_F32 && v->type.dtype != IR_I32)
    die("tpsim: %s values are not interpreted", ir_dtype_name(v->type.dtype));
  t->n = count(v);
  if (v->type.dtype == IR_I32)
    t->i = calloc((size_t)(t->n ? t->n : 1), sizeof(int32_t));
  else
    t->r = calloc((size_t)(t->n ? t->n : 1), sizeof(real));
}

static Tensor *alloc_graph(const IrGraph *g) {
  Tensor *table = calloc((size_t)g->next_id + 1, sizeof *table);
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

static IrValue *find_named(IrVec *vals, const char *name) {
  for (int i = 0; i < vals->len; i++) {
    IrValue *v = vals->items[i];
    if (strcmp(v->name, name) == 0) return v;
  }
  die("tpsim: no value named %s in the partitioned graph", name);
}

/* The whole (padded) type of a partitioned parameter. */
static IrType whole_type(const IrValue *p) {
  IrType t = p->type;
  if (p->shard.kind == IR_SPLIT) t.shape[p->shard.dim] *= nranks;
  return t;
}

/* REF's tensor laid into the padded whole shape; padding random. */
static real *padded(const IrValue *p, const IrType *wt, const real *src) {
  real *w = malloc(sizeof(real) * (size_t)ir_type_numel(wt));
  for (int64_t i = 0; i < ir_type_numel(wt); i++) w[i] = rng_normal();
  int d = p->unpadded > 0 ? p->pad_dim : 0;
  int64_t outer, n, inner;
  dims3(wt, d, &outer, &n, &inner);
  int64_t real_n = p->unpadded > 0 ? p->unpadded : n;
  k_copy2d(w, n * inner, src, real_n * inner, outer, real_n * inner);
  return w;
}

/* Integer inputs are ids: below every table and vocabulary they index. */
static int64_t id_bound(const IrGraph *g, const IrValue *v) {
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

static void setup(IrGraph *ref, IrGraph *part) {
  for (int i = 0; i < ref->inputs.len; i++) {
    IrValue *v = ref->inputs.items[i], *pv = find_named(&part->inputs, v->name);
    Tensor *t = &ref_table[v->id];
    if (strcmp(v->name, "d_loss") == 0)
      t->r[0] = 1;
    else if (t->i)
      for (int64_t k = 0; k < t->n; k++) t->i[k] = (int32_t)(rng_next() % (uint64_t)id_bound(ref, v));
    else
      for (int64_t k = 0; k < t->n; k++) t->r[k] = rng_normal();
    for (int r = 0; r < nranks; r++) {
      Tensor *q = on(r, pv);
      if (q->n != t->n) die("tpsim: input %s differs in size", v->name);
      if (t->i) memcpy(q->i, t->i, sizeof(int32_t) * (size_t)t->n);
      else memcpy(q->r, t->r, sizeof(real) * (size_t)t->n);
    }
  }
  for (int i = 0; i < ref->params.len; i++) {
    IrValue *p = ref->params.items[i], *pp = find_named(&part->params, p->name);
    Tensor *t = &ref_table[p->id];
    double base = p->init.kind == IR_INIT_ONES ? 1 : 0;
    for (int64_t k = 0; k < t->n; k++) t->r[k] = base + 0.5 * rng_normal();
    IrType wt = whole_type(pp);
    real *w = padded(pp, &wt, t->r);
    for (int r = 0; r < nranks; r++) {
      if (pp->shard.kind == IR_SPLIT)
        part_copy(w, &wt, on(r, pp)->r, pp->shard.dim, r, nranks, ir_shard_blocks(&pp->shard), false);
      else
        memcpy(on(r, pp)->r, w, sizeof(real) * (size_t)count(pp));
    }
    free(w);
  }
}

/* ------------------------------------------------------------- compare */

static double rel_err(double a, double b) {
  return fabs(a - b) / fmax(fmax(fabs(a), fabs(b)), 1e-12);
}

/* One parameter's gradient on the ranks against REF's; returns whether it
 * agrees. */
static bool compare_grad(const IrValue *p, const IrValue *pp) {
  IrType wt = whole_type(pp);
  int64_t total = ir_type_numel(&wt);
  const real *want = ref_table[p->grad->id].r;
  /* Errors relative to the tensor's largest entry: some entries are zero
   * up to rounding (the gradient of a key bias), a relative error of
   * which means nothing. */
  double scale = 1e-300, worst = 0, pad_worst = 0;
  for (int64_t k = 0; k < count(p->grad); k++) scale = fmax(scale, fabs(want[k]));
  for (int r = 0; r < nranks; r++) {
    real *w = calloc((size_t)total, sizeof(real));
    if (pp->shard.kind == IR_SPLIT) {
      for (int q = 0; q < nranks; q++)
        part_copy(w, &wt, on(q, pp->grad)->r, pp->shard.dim, q, nranks,
                  ir_shard_blocks(&pp->shard), true);
    } else {
      memcpy(w, on(r, pp->grad)->r, sizeof(real) * (size_t)total);
    }
    int d = pp->unpadded > 0 ? pp->pad_dim : 0;
    int64_t outer, n, inner;
    dims3(&wt, d, &outer, &n, &inner);
    int64_t real_n = pp->unpadded > 0 ? pp->unpadded : n;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t k = 0; k < n * inner; k++) {
        double g = w[o * n * inner + k];
        if (k < real_n * inner)
          worst = fmax(worst, fabs(g - want[o * real_n * inner + k]) / scale);
        else
          pad_worst = fmax(pad_worst, fabs(g));
      }
    free(w);
    if (pp->shard.kind == IR_SPLIT) break; /* the gathered whole is the same for every rank */
  }
  bool ok = worst <= TOL && pad_worst == 0;
  const char *spec = pp->shard.kind == IR_SPLIT
                         ? ir_fmt("split(%d%s)", pp->shard.dim, ir_shard_blocks(&pp->shard) > 1 ?
                                  ir_fmt(", %d", pp->shard.blocks) : "")
                         : "replicated";
  printf("  @%-36s %-12s %s (worst error relative to the largest entry %.2g%s)\n", p->name, spec,
         ok ? "ok" : "FAIL", worst,
         pp->unpadded > 0 ? ir_fmt(", padding gradient %.2g", pad_worst) : "");
  return ok;
}

static IrGraph *load(const char *path, char **text) {
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

static const IrValue *find_loss(const IrGraph *g) {
  for (int i = 0; i < g->outputs.len; i++) {
    const IrValue *v = g->outputs.items[i];
    if (v->type.rank == 0) return v;
  }
  die("tpsim: no scalar output");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: tpsim REF.ir PART.ir\n");
    return 2;
  }
  char *ref_text, *part_text;
  IrGraph *ref = load(argv[1], &ref_text), *part = load(argv[2], &part_text);
  nranks = part->mesh[IR_AXIS_TENSOR] > 1 ? part->mesh[IR_AXIS_TENSOR] : 1;
  if (nranks > MAX_RANKS) die("tpsim: at most %d ranks", MAX_RANKS);
  scratch = calloc((size_t)(k_attention_scratch(4096) * omp_get_max_threads()), sizeof(real));
  ref_table = alloc_graph(ref);
  for (int r = 0; r < nranks; r++) rank_tables[r] = alloc_graph(part);
  setup(ref, part);
  tensors = ref_table;
  for (int i = 0; i < ref->nodes.len; i++) exec(ref->nodes.items[i]);
  run_ranks(part);
  const IrValue *loss = find_loss(ref), *ploss = find_loss(part);
  double want = ref_table[loss->id].r[0], worst = 0;
  for (int r = 0; r < nranks; r++) worst = fmax(worst, rel_err(on(r, ploss)->r[0], want));
  int failures = worst > TOL;
  printf("%s: t = %d ranks; loss %.12g on one rank, worst relative error of the ranks' %.2g: %s\n",
         argv[2], nranks, want, worst, failures ? "FAIL" : "ok");
  for (int i = 0; i < ref->params.len; i++) {
    IrValue *p = ref->params.items[i];
    IrValue *pp = find_named(&part->params, p->name);
    if (!p->grad || !pp->grad) die("tpsim: @%s has no gradient", p->name);
    failures += !compare_grad(p, pp);
  }
  printf("%s: %d of %d gradients and the loss checked, %d wrong\n", argv[2], ref->params.len,
         ref->params.len, failures);
  free(scratch);
  free(ref_text);
  free(part_text);
  ir_arena_free_all();
  return failures ? 1 : 0;
}
