/* The `tp-partition` pass: turns the global forward graph into the graph
 * that ONE tensor-parallel rank runs (SPMD: every rank runs it, its tp index
 * is a runtime value).
 *
 * Starting from the parameter specs that tp-annotate wrote (and replicated
 * inputs), it walks the nodes in order and gives every value a spec by a
 * rule per op: a column-parallel linear turns a replicated x into a result
 * split on its last dim, a row-parallel one a split x into a partial sum,
 * attention split by heads stays split by heads, and so on (the `tp`
 * column of ir/ops.def names each op's rule, `tp_*` below). Where an
 * input's spec is not what the rule needs, it inserts the conversion:
 * all_reduce (partial -> replicated), all_gather (split -> replicated),
 * tp_slice (replicated -> split, no message), and tp_slice(all_reduce(x))
 * for partial -> split, which tp-fuse turns into one reduce_scatter. An op
 * whose rule is tp_whole reads replicated inputs. A
 * replicated float input of an op whose result is split or partial reads
 * it through tp_copy, the identity whose adjoint all-reduces the gradient:
 * each rank's gradient of such an input covers its own part of the result.
 * A row-parallel linear's bias is added after the reduction.
 *
 * --sequence-parallel: a partial [b, s, h] value is resolved to a split of
 * the sequence (dim 1) rather than replicated, so the norm, dropout and
 * residual regions work on sequence slices: the all-reduce after a
 * row-parallel linear becomes a reduce-scatter, and a column-parallel
 * linear (and the output layer) all-gathers its input.
 *
 * Then the types become local: a split parameter's dim shrinks t times,
 * attention's and rope's `heads`/`kv_heads` become the local counts, the
 * embedding and cross_entropy of a vocabulary-split table or logits get
 * vocab_parallel = 1, dropout in a split region per_rank = 1, and the shape
 * rules run again over the whole graph. With t = 1 nothing changes.
 *
 * Checks come first, each an error naming the constraint and the values:
 * split parameter dims (hidden, ffn, the padded vocabulary) and the head
 * counts must divide by t, and with --sequence-parallel the sequence. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* ------------------------------------------------------------- specs */

static IrShard spec_r(void) { return (IrShard){IR_REPLICATED, IR_AXIS_TENSOR, 0, 0, false}; }
static IrShard spec_p(void) { return (IrShard){IR_PARTIAL, IR_AXIS_TENSOR, 0, 0, false}; }
static IrShard spec_s(int dim, int blocks) {
  return (IrShard){IR_SPLIT, IR_AXIS_TENSOR, dim, blocks > 1 ? blocks : 0, false};
}

static bool is_r(IrShard s) { return s.kind == IR_REPLICATED; }
static bool is_p(IrShard s) { return s.kind == IR_PARTIAL; }
static bool is_s(IrShard s) { return s.kind == IR_SPLIT; }
static bool is_s_dim(IrShard s, int dim) { return is_s(s) && s.dim == dim; }

static bool same(IrShard a, IrShard b) {
  if (a.kind != b.kind) return false;
  return a.kind != IR_SPLIT || (a.dim == b.dim && ir_shard_blocks(&a) == ir_shard_blocks(&b));
}

/* A value's spec with a negative split dim (a hand-written .ir) counted
 * from the end, and the model's `fixed` mark dropped. */
static IrShard spec_of(const IrValue *v) {
  IrShard s = v->shard;
  if (s.axis != IR_AXIS_TENSOR) return spec_r(); /* another axis's business */
  s.fixed = false;
  s.axis = IR_AXIS_TENSOR;
  if (s.kind == IR_SPLIT && s.dim < 0) s.dim += v->type.rank;
  return s;
}

/* -------------------------------------------------------- the rewriter */

/* A conversion already made: the value `from` as spec `want`. Conversions
 * are shared by every reader, so three projections of one normed x read
 * one all_gather and one tp_copy. */
typedef struct Conv {
  const IrValue *from;
  IrShard want;
  bool copy; /* a tp_copy rather than a conversion */
  IrValue *to;
} Conv;

typedef struct Part {
  int t;
  bool sp;
  bool ok;
  bool seq_reported;
  Conv *convs;
  size_t cap, len;
} Part;

static size_t conv_hash(const IrValue *v, IrShard s, bool copy) {
  uint64_t x = (uint64_t)(uintptr_t)v;
  x ^= (uint64_t)s.kind * 0x9e3779b97f4a7c15ULL + (uint64_t)s.dim * 131 +
       (uint64_t)ir_shard_blocks(&s) * 7 + copy;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static Conv *conv_slot(Conv *convs, size_t cap, const IrValue *v, IrShard s, bool copy) {
  size_t i = conv_hash(v, s, copy) & (cap - 1);
  while (convs[i].from &&
         !(convs[i].from == v && convs[i].copy == copy && same(convs[i].want, s)))
    i = (i + 1) & (cap - 1);
  return &convs[i];
}

static IrValue *conv_get(Part *P, const IrValue *v, IrShard s, bool copy) {
  if (!P->cap) return NULL;
  Conv *c = conv_slot(P->convs, P->cap, v, s, copy);
  return c->from ? c->to : NULL;
}

static void conv_put(Part *P, const IrValue *v, IrShard s, bool copy, IrValue *to) {
  if (2 * (P->len + 1) > P->cap) {
    size_t cap = P->cap ? 2 * P->cap : 256;
    Conv *grown = calloc(cap, sizeof *grown);
    if (!grown) die("out of memory");
    for (size_t i = 0; i < P->cap; i++)
      if (P->convs[i].from)
        *conv_slot(grown, cap, P->convs[i].from, P->convs[i].want, P->convs[i].copy) = P->convs[i];
    free(P->convs);
    P->convs = grown;
    P->cap = cap;
  }
  *conv_slot(P->convs, P->cap, v, s, copy) = (Conv){v, s, copy, to};
  P->len++;
}

static IrExpr *lit(int64_t v, IrLoc loc) { return ir_expr_int(v, loc); }

/* Replaces an attribute's value (a new expression: folded literals may be
 * shared between nodes). */
static void set_attr(IrNode *n, const char *name, int64_t v) {
  IrAttr *a = ir_node_attr(n, name);
  if (!a) die("tp-partition: %s has no attribute %s", ir_op_info(n->op)->name, name);
  a->expr = lit(v, n->loc);
}

/* Appends a tensor-parallel node reading x. Its result keeps x's GLOBAL
 * type until the final shape inference makes every type local, so that
 * the rules of later nodes can read global dims. */
static IrValue *tp_node(Part *P, IrGraph *g, IrOp op, IrValue *x, int dim, IrShard spec, IrLoc loc) {
  IrAttr attrs[3];
  int n = 0;
  if (op == IR_OP_ALL_GATHER || op == IR_OP_TP_SLICE || op == IR_OP_REDUCE_SCATTER)
    attrs[n++] = (IrAttr){"dim", lit(dim, loc)};
  attrs[n++] = (IrAttr){"axis", lit(IR_AXIS_TENSOR, loc)};
  attrs[n++] = (IrAttr){"size", lit(P->t, loc)};
  IrNode *node = ir_add_node(g, op, &x, 1, attrs, n, 1, loc);
  node->out[0]->type = x->type;
  node->out[0]->shard = spec;
  return node->out[0];
}

/* split(x){n = k, axis = dim} with global part types, for block specs. */
static IrNode *split_node(IrGraph *g, IrValue *x, int dim, int k, IrShard part, IrLoc loc) {
  IrAttr attrs[2] = {{"n", lit(k, loc)}, {"axis", lit(dim, loc)}};
  IrNode *s = ir_add_node(g, IR_OP_SPLIT, &x, 1, attrs, 2, k, loc);
  for (int i = 0; i < k; i++) {
    s->out[i]->type = x->type;
    s->out[i]->type.shape[dim] /= k;
    if (s->out[i]->type.dims[dim]) s->out[i]->type.dims[dim] = lit(s->out[i]->type.shape[dim], loc);
    s->out[i]->shard = part;
  }
  return s;
}

static IrValue *concat_node(IrGraph *g, IrValue **parts, int k, int dim, const IrType *type,
                            IrShard spec, IrLoc loc) {
  IrAttr attr = {"axis", lit(dim, loc)};
  IrNode *c = ir_add_node(g, IR_OP_CONCAT, parts, k, &attr, 1, 1, loc);
  c->out[0]->type = *type;
  c->out[0]->shard = spec;
  return c->out[0];
}

/* A block-split value and replicated: each block gathered (or sliced) on
 * its own, since rank r's part of a block split is r's part of each block. */
static IrValue *per_block(Part *P, IrGraph *g, IrValue *v, IrOp op, int dim, int k, IrShard to,
                          IrLoc loc) {
  IrNode *s = split_node(g, v, dim, k, v->shard, loc);
  IrValue **parts = ir_alloc(sizeof(IrValue *) * (size_t)k);
  IrShard each = op == IR_OP_ALL_GATHER ? spec_r() : spec_s(dim, 1);
  for (int i = 0; i < k; i++) {
    s->out[i]->shard = op == IR_OP_ALL_GATHER ? spec_s(dim, 1) : spec_r();
    parts[i] = tp_node(P, g, op, s->out[i], dim, each, loc);
  }
  return concat_node(g, parts, k, dim, &v->type, to, loc);
}

/* v as spec `want`, by the collectives that convert it (appended to g,
 * before the node being rewritten). */
static IrValue *convert(Part *P, IrGraph *g, IrValue *v, IrShard want, IrLoc loc) {
  IrShard have = spec_of(v);
  if (same(have, want)) return v;
  IrValue *done = conv_get(P, v, want, false);
  if (done) return done;
  IrValue *out;
  if (is_p(want)) die("tp-partition: a conversion to a partial sum");
  if (is_p(have) && is_r(want)) {
    out = tp_node(P, g, IR_OP_ALL_REDUCE, v, 0, spec_r(), loc);
  } else if (is_p(have)) {
    out = convert(P, g, convert(P, g, v, spec_r(), loc), want, loc);
  } else if (is_s(have) && is_r(want)) {
    int k = ir_shard_blocks(&have);
    out = k == 1 ? tp_node(P, g, IR_OP_ALL_GATHER, v, have.dim, want, loc)
                 : per_block(P, g, v, IR_OP_ALL_GATHER, have.dim, k, want, loc);
  } else if (is_s(have)) {
    out = convert(P, g, convert(P, g, v, spec_r(), loc), want, loc);
  } else {
    int k = ir_shard_blocks(&want);
    out = k == 1 ? tp_node(P, g, IR_OP_TP_SLICE, v, want.dim, want, loc)
                 : per_block(P, g, v, IR_OP_TP_SLICE, want.dim, k, want, loc);
  }
  conv_put(P, v, want, false, out);
  return out;
}

/* The replicated float value v read through tp_copy. */
static IrValue *copy_of(Part *P, IrGraph *g, IrValue *v, IrLoc loc) {
  IrValue *done = conv_get(P, v, spec_r(), true);
  if (done) return done;
  IrValue *out = tp_node(P, g, IR_OP_TP_COPY, v, 0, spec_r(), loc);
  conv_put(P, v, spec_r(), true, out);
  return out;
}

/* What a partial value becomes when a reader needs it whole: replicated,
 * or with --sequence-parallel a [b, s, h] activation split on the
 * sequence. */
static IrShard resolved(Part *P, const IrValue *v, IrLoc loc) {
  const IrType *t = &v->type;
  if (!P->sp || t->rank != 3 || !ir_dtype_is_float(t->dtype)) return spec_r();
  if (t->shape[1] % P->t == 0) return spec_s(1, 1);
  if (!P->seq_reported)
    ir_error(loc, "tensor parallelism: --sequence-parallel splits the sequence over t = %d ranks, "
             "but the sequence length %lld (dim 1 of %s) is not divisible by %d", P->t,
             (long long)t->shape[1], ir_shape_str(t), P->t);
  P->seq_reported = true;
  P->ok = false;
  return spec_r();
}

/* v's spec, a partial one resolved. */
static IrShard whole(Part *P, const IrValue *v, IrLoc loc) {
  IrShard s = spec_of(v);
  return is_p(s) ? resolved(P, v, loc) : s;
}

/* -------------------------------------------------------------- rules */

typedef struct Plan Plan;

/* What a rule decides: the spec each input must have and each result's,
 * and what else the node needs. */
struct Plan {
  IrShard *want; /* per input */
  IrShard out;
  /* Run after the inputs are converted: the attributes that name global
   * counts become this rank's (heads, vocab_parallel, per_rank). */
  void (*localize)(Part *P, IrNode *n);
  /* Run instead of the conversions: a node that becomes other nodes (a
   * row-parallel linear's bias is added after the reduction). */
  void (*rewrite)(Part *P, IrGraph *g, IrNode *n, Plan *pl);
};

/* The `tp` column of ops.def: the sharding rule of an op. */
typedef void TpRule(Part *P, IrNode *n, Plan *pl);

static void want_all(Plan *pl, const IrNode *n, IrShard s) {
  for (int i = 0; i < n->nin; i++) pl->want[i] = s;
  pl->out = s;
}

static int rank_of(const IrValue *v) { return v->type.rank; }
static int64_t dim_of(const IrValue *v, int d) { return v->type.shape[d]; }

/* Checks that a head count divides by t; false after reporting. */
static bool heads_ok(Part *P, const IrNode *n, const char *attr, const char *why) {
  int64_t h = ir_attr_int(n, attr);
  if (h % P->t == 0) return true;
  ir_error(n->loc, "tensor parallelism: %s: %s = %lld is not divisible by t = %d (%s)",
           ir_op_info(n->op)->name, attr, (long long)h, P->t, why);
  P->ok = false;
  return false;
}

/* Elementwise ops with numpy broadcasting (add, sub, mul, swiglu): split
 * inputs must agree on the result dim they cut; a replicated input that
 * spans that dim is sliced, one that is broadcast along it is read whole.
 * With `sums` (add, sub) partial inputs give a partial result. */
static void elementwise(Part *P, IrNode *n, Plan *pl, bool sums) {
  int rank = 0;
  bool all_p = true;
  for (int i = 0; i < n->nin; i++) {
    if (rank_of(n->in[i]) > rank) rank = rank_of(n->in[i]);
    all_p = all_p && is_p(spec_of(n->in[i]));
  }
  if (all_p && sums) {
    want_all(pl, n, spec_p());
    return;
  }
  int od = -1, blocks = 1;
  bool clash = false;
  for (int i = 0; i < n->nin; i++) {
    IrShard s = whole(P, n->in[i], n->loc);
    pl->want[i] = s;
    if (!is_s(s)) continue;
    int off = rank - rank_of(n->in[i]), d = s.dim + off;
    if (od >= 0 && (d != od || ir_shard_blocks(&s) != blocks)) clash = true;
    od = d;
    blocks = ir_shard_blocks(&s);
  }
  if (clash) {
    want_all(pl, n, spec_r());
    return;
  }
  pl->out = od >= 0 ? spec_s(od, blocks) : spec_r();
  for (int i = 0; od >= 0 && i < n->nin; i++) {
    int d = od - (rank - rank_of(n->in[i]));
    if (is_r(pl->want[i]) && d >= 0 && dim_of(n->in[i], d) != 1) pl->want[i] = spec_s(d, blocks);
  }
}

static void tp_elementwise(Part *P, IrNode *n, Plan *pl) { elementwise(P, n, pl, false); }
static void tp_sum(Part *P, IrNode *n, Plan *pl) { elementwise(P, n, pl, true); }

/* Unary ops that keep the layout; a partial input stays partial only
 * through linear ones (scale). */
static void unary(Part *P, IrNode *n, Plan *pl, bool linear) {
  IrShard s = linear ? spec_of(n->in[0]) : whole(P, n->in[0], n->loc);
  pl->want[0] = s;
  pl->out = s;
}

static void tp_linear_map(Part *P, IrNode *n, Plan *pl) { unary(P, n, pl, true); }
static void tp_pointwise(Part *P, IrNode *n, Plan *pl) { unary(P, n, pl, false); }

/* Dropout in a split region draws its mask per rank. */
static void local_dropout(Part *P, IrNode *n) {
  (void)P;
  if (!is_r(spec_of(n->out[0]))) set_attr(n, "per_rank", 1);
}

static void tp_dropout(Part *P, IrNode *n, Plan *pl) {
  unary(P, n, pl, false);
  pl->localize = local_dropout;
}

/* Ops that work along the last `tail` dims (norms, softmax, causal_mask):
 * split along a leading dim they stay split; the weights are replicated. */
static void last_dims(Part *P, IrNode *n, Plan *pl, int tail) {
  IrShard s = whole(P, n->in[0], n->loc);
  if (is_s(s) && s.dim >= rank_of(n->in[0]) - tail) s = spec_r();
  want_all(pl, n, spec_r());
  pl->want[0] = s;
  pl->out = s;
}

static void tp_last_dim(Part *P, IrNode *n, Plan *pl) { last_dims(P, n, pl, 1); }
static void tp_last_two_dims(Part *P, IrNode *n, Plan *pl) { last_dims(P, n, pl, 2); }

static void split_row_bias(Part *P, IrGraph *g, IrNode *n, Plan *pl);

/* linear(x, w, bias): column-parallel (w split on out), row-parallel (w
 * split on in: a partial result, its bias added after the reduction), or
 * a replicated w that follows x. */
static void tp_linear(Part *P, IrNode *n, Plan *pl) {
  bool tr = ir_attr_int(n, "transposed") != 0;
  int in_dim = tr ? 1 : 0, out_dim = tr ? 0 : 1, last = rank_of(n->in[0]) - 1;
  IrShard ws = spec_of(n->in[1]);
  if (is_p(ws)) ws = spec_r();
  pl->want[1] = ws;
  int k = ir_shard_blocks(&ws);
  if (is_s_dim(ws, out_dim)) {
    pl->want[0] = spec_r();
    if (n->nin > 2) pl->want[2] = spec_s(0, k);
    pl->out = spec_s(last, k);
  } else if (is_s_dim(ws, in_dim)) {
    pl->want[0] = spec_s(last, k);
    if (n->nin > 2) pl->want[2] = spec_r();
    pl->out = spec_p();
    if (n->nin > 2) pl->rewrite = split_row_bias;
  } else {
    IrShard xs = whole(P, n->in[0], n->loc);
    if (is_s(xs) && xs.dim == last) xs = spec_r();
    pl->want[0] = xs;
    if (n->nin > 2) pl->want[2] = spec_r();
    pl->out = xs;
  }
}

/* matmul(a, b): a 2-D b is a weight (as in linear); batched, a and b split
 * on the same batch dim stay so. */
static void tp_matmul(Part *P, IrNode *n, Plan *pl) {
  int ra = rank_of(n->in[0]), rb = rank_of(n->in[1]);
  bool ta = ir_attr_int(n, "transpose_a") != 0, tb = ir_attr_int(n, "transpose_b") != 0;
  IrShard as = whole(P, n->in[0], n->loc), bs = whole(P, n->in[1], n->loc);
  if (rb == 2 && ra >= 2) {
    int kb = tb ? 1 : 0, nb = tb ? 0 : 1, ka = ta ? ra - 2 : ra - 1, ma = ta ? ra - 1 : ra - 2;
    int k = ir_shard_blocks(&bs);
    pl->want[1] = bs;
    if (is_s_dim(bs, nb)) {
      pl->want[0] = spec_r();
      pl->out = spec_s(ra - 1, k);
    } else if (is_s_dim(bs, kb)) {
      pl->want[0] = spec_s(ka, k);
      pl->out = spec_p();
    } else if (is_s(as) && (as.dim < ra - 2 || as.dim == ma)) {
      pl->want[0] = as;
      pl->out = as.dim == ma ? spec_s(ra - 2, ir_shard_blocks(&as)) : as;
    } else {
      want_all(pl, n, spec_r());
    }
    return;
  }
  if (ra == rb && is_s(as) && same(as, bs) && as.dim < ra - 2) {
    want_all(pl, n, as);
    return;
  }
  want_all(pl, n, spec_r());
}

static void local_embedding(Part *P, IrNode *n) {
  (void)P;
  if (is_p(spec_of(n->out[0]))) set_attr(n, "vocab_parallel", 1);
}

/* embedding(ids, table): a table split on the vocabulary gives a partial
 * sum (vocab_parallel), one split on the hidden dim a split result. */
static void tp_embedding(Part *P, IrNode *n, Plan *pl) {
  (void)P;
  IrShard ts = spec_of(n->in[1]);
  pl->localize = local_embedding;
  pl->want[0] = spec_r();
  pl->want[1] = is_p(ts) ? spec_r() : ts;
  if (is_s_dim(ts, 0) && ir_shard_blocks(&ts) == 1)
    pl->out = spec_p();
  else if (is_s_dim(ts, 1))
    pl->out = spec_s(rank_of(n->in[0]), ir_shard_blocks(&ts));
  else
    want_all(pl, n, spec_r());
}

static void local_cross_entropy(Part *P, IrNode *n) {
  (void)P;
  if (is_s(spec_of(n->in[0]))) set_attr(n, "vocab_parallel", 1);
}

/* cross_entropy(logits, targets): logits split on the vocabulary stay so
 * (vocab_parallel); any other layout is gathered. The vocabulary-parallel
 * kernels know no ignored targets, so a loss with `ignore` gathers its
 * logits too. */
static void tp_cross_entropy(Part *P, IrNode *n, Plan *pl) {
  IrShard ls = whole(P, n->in[0], n->loc);
  pl->localize = local_cross_entropy;
  want_all(pl, n, spec_r());
  bool ignore = ir_attr_has(n, "ignore") && ir_attr_int(n, "ignore");
  if (!ignore && is_s_dim(ls, rank_of(n->in[0]) - 1) && ir_shard_blocks(&ls) == 1)
    pl->want[0] = ls;
}

/* rope and attention: split by heads (the last dim of [b, s, H*d]) or by
 * batch; a sequence split would shift positions and the causal mask. */
static void heads(Part *P, IrNode *n, Plan *pl) {
  IrShard s = whole(P, n->in[0], n->loc);
  bool ok = is_s(s) && ((s.dim == 2 && ir_shard_blocks(&s) == 1) || s.dim == 0);
  /* attention's key-padding mask [b, s] has no heads: whole on every rank
   * of a head split, split with the batch of a batch split. */
  int nt = n->op == IR_OP_ATTENTION && n->nin > 3 ? 3 : n->nin;
  for (int i = 1; ok && i < nt; i++) ok = same(whole(P, n->in[i], n->loc), s);
  want_all(pl, n, ok ? s : spec_r());
  if (nt < n->nin) pl->want[3] = ok && s.dim == 0 ? s : spec_r();
}

/* Split by heads, `heads` counts this rank's. */
static void local_heads(Part *P, IrNode *n) {
  if (is_s_dim(spec_of(n->in[0]), 2) && heads_ok(P, n, "heads", "heads are split over the ranks"))
    set_attr(n, "heads", ir_attr_int(n, "heads") / P->t);
}

static void local_attention(Part *P, IrNode *n) {
  /* The log-sum-exp [b, H, s] keeps a batch split on dim 0 and takes a
   * head split on its dim 1. */
  if (is_s_dim(spec_of(n->out[1]), 2)) n->out[1]->shard.dim = 1;
  if (!is_s_dim(spec_of(n->in[0]), 2)) return;
  if (heads_ok(P, n, "heads", "attention is split by heads"))
    set_attr(n, "heads", ir_attr_int(n, "heads") / P->t);
  if (ir_attr_int(n, "kv_heads") > 0 && heads_ok(P, n, "kv_heads", "grouped-query attention "
                                                 "is split by query groups"))
    set_attr(n, "kv_heads", ir_attr_int(n, "kv_heads") / P->t);
}

static void tp_rope(Part *P, IrNode *n, Plan *pl) {
  heads(P, n, pl);
  pl->localize = local_heads;
}

static void tp_attention(Part *P, IrNode *n, Plan *pl) {
  heads(P, n, pl);
  pl->localize = local_attention;
}

/* split_heads [b, s, H*d] -> [b, H, s, d] and merge_heads back (to4
 * false): a permutation of dims, partial sums included. */
static void head_layout(IrNode *n, Plan *pl, bool to4) {
  IrShard s = spec_of(n->in[0]);
  static const int map3[3] = {0, 2, 1}, map4[4] = {0, 2, 1, -1};
  if (is_s(s) && ir_shard_blocks(&s) == 1) {
    int d = to4 ? map3[s.dim] : map4[s.dim];
    if (d < 0) s = spec_r();
    pl->want[0] = s;
    pl->out = d < 0 ? s : spec_s(d, 1);
    return;
  }
  want_all(pl, n, is_s(s) ? spec_r() : s);
}

static void tp_split_heads(Part *P, IrNode *n, Plan *pl) {
  (void)P;
  head_layout(n, pl, true);
  pl->localize = local_heads;
}

static void tp_merge_heads(Part *P, IrNode *n, Plan *pl) {
  (void)P;
  head_layout(n, pl, false);
}

static void tp_transpose(Part *P, IrNode *n, Plan *pl) {
  (void)P;
  IrShard s = spec_of(n->in[0]);
  int r = rank_of(n->in[0]);
  int d0 = (int)ir_attr_int(n, "dim0"), d1 = (int)ir_attr_int(n, "dim1");
  d0 = d0 < 0 ? d0 + r : d0;
  d1 = d1 < 0 ? d1 + r : d1;
  pl->want[0] = s;
  pl->out = s;
  if (is_s(s)) pl->out.dim = s.dim == d0 ? d1 : s.dim == d1 ? d0 : s.dim;
}

/* split(x){n, axis}: a dim other than axis stays split; along axis, a
 * block split with a multiple of n blocks gives each part n times fewer. */
static void tp_split(Part *P, IrNode *n, Plan *pl) {
  (void)P;
  IrShard s = spec_of(n->in[0]);
  int r = rank_of(n->in[0]), parts = (int)ir_attr_int(n, "n");
  int axis = (int)ir_attr_int(n, "axis");
  axis = axis < 0 ? axis + r : axis;
  int k = ir_shard_blocks(&s);
  pl->want[0] = s;
  pl->out = s;
  if (!is_s(s) || s.dim != axis) return;
  if (k % parts == 0)
    pl->out = spec_s(axis, k / parts);
  else
    want_all(pl, n, spec_r());
}

static void tp_concat(Part *P, IrNode *n, Plan *pl) {
  (void)P;
  int r = rank_of(n->in[0]), axis = (int)ir_attr_int(n, "axis");
  axis = axis < 0 ? axis + r : axis;
  IrShard s = spec_of(n->in[0]);
  bool ok = !is_s(s) || s.dim != axis;
  for (int i = 1; ok && i < n->nin; i++) ok = same(spec_of(n->in[i]), s);
  want_all(pl, n, ok ? s : spec_r());
}

/* The dim of reshape n's result that input dim d's split becomes, or -1.
 * Rank r of a split on d holds, of each row of the dims before d, the r-th
 * t-th of the elements from d on, in order. A result dim o whose leading
 * dims hold as many elements as d's (the same rows) and that divides by t
 * cuts those rows at the same places: [b, s, H*d] to [b, s, H, d] keeps
 * the split on the heads, and back. Every other reshape moves elements
 * between ranks. */
int pass_reshape_split_dim(const IrNode *n, int d, int t) {
  const IrType *x = &n->in[0]->type, *y = &n->out[0]->type;
  int64_t rows = 1, have = 1;
  for (int i = 0; i < d; i++) rows *= x->shape[i];
  for (int o = 0; o < y->rank; o++) {
    if (have == rows && y->shape[o] > 1 && y->shape[o] % t == 0) return o;
    if (have > rows) break;
    have *= y->shape[o];
  }
  return -1;
}

/* The shape attribute made this rank's: the split dim t times smaller. */
static void local_reshape(Part *P, IrNode *n) {
  IrShard s = spec_of(n->out[0]);
  if (!is_s(s)) return;
  const IrType *y = &n->out[0]->type;
  IrExpr **items = ir_alloc(sizeof(IrExpr *) * (size_t)y->rank);
  for (int i = 0; i < y->rank; i++) items[i] = lit(i == s.dim ? y->shape[i] / P->t : y->shape[i], n->loc);
  ir_node_attr(n, "shape")->expr = ir_expr_list(items, y->rank, n->loc);
}

/* reshape keeps a partial sum, and a split where the split's rows stay
 * whole (pass_reshape_split_dim: a head-preserving reshape); any other
 * split is gathered. */
static void tp_reshape(Part *P, IrNode *n, Plan *pl) {
  if (is_p(spec_of(n->in[0]))) {
    want_all(pl, n, spec_p());
    return;
  }
  IrShard s = spec_of(n->in[0]);
  int o = is_s(s) && ir_shard_blocks(&s) == 1 ? pass_reshape_split_dim(n, s.dim, P->t) : -1;
  if (o < 0) {
    want_all(pl, n, spec_r());
    return;
  }
  pl->want[0] = s;
  pl->out = spec_s(o, 1);
  pl->localize = local_reshape;
}

/* Ops without a better rule read every input whole. */
static void tp_whole(Part *P, IrNode *n, Plan *pl) {
  (void)P;
  want_all(pl, n, spec_r());
}

/* The tp column of ops.def as a table. */
static TpRule *const rules[IR_OP_COUNT] = {
#define OP(id, name, min_in, max_in, nout, shape, attrs, flags, adjoint, tp, rows, flops, doc) \
  [IR_OP_##id] = tp,
#include "../ir/ops.def"
#undef OP
};

/* ---------------------------------------------------------- the walk */

static void part_graph(Part *P, IrGraph *g);

/* Reads each input as the plan wants it, then through tp_copy where a
 * replicated float input feeds a split or partial result. */
static void apply_plan(Part *P, IrGraph *g, IrNode *n, Plan *pl) {
  for (int i = 0; i < n->nin; i++) n->in[i] = convert(P, g, n->in[i], pl->want[i], n->loc);
  for (int j = 0; j < n->nout; j++) n->out[j]->shard = pl->out;
  if (is_r(pl->out)) return;
  for (int i = 0; i < n->nin; i++)
    if (is_r(spec_of(n->in[i])) && ir_dtype_is_float(n->in[i]->type.dtype))
      n->in[i] = copy_of(P, g, n->in[i], n->loc);
}

/* A row-parallel linear with a bias: linear(x, w) gives the partial sum,
 * which is resolved, and the node itself becomes the add of the bias (so
 * that its result, which later nodes read, stays the same value). */
static void split_row_bias(Part *P, IrGraph *g, IrNode *n, Plan *pl) {
  IrValue *x = convert(P, g, n->in[0], pl->want[0], n->loc);
  IrValue *w = convert(P, g, n->in[1], pl->want[1], n->loc);
  IrValue *bias = n->in[2];
  IrAttr tr = {"transposed", ir_node_attr(n, "transposed")->expr};
  IrNode *lin = ir_add_node(g, IR_OP_LINEAR, (IrValue *[]){x, w}, 2, &tr, 1, 1, n->loc);
  lin->out[0]->type = n->out[0]->type;
  lin->out[0]->shard = spec_p();
  IrValue *sum = convert(P, g, lin->out[0], resolved(P, lin->out[0], n->loc), n->loc);
  n->op = IR_OP_ADD;
  n->in = ir_alloc(sizeof(IrValue *) * 2);
  n->in[0] = sum;
  n->in[1] = bias;
  n->nin = 2;
  n->attrs = NULL;
  n->nattr = 0;
  IrShard want[2];
  Plan add = {want, spec_r(), NULL, NULL};
  tp_sum(P, n, &add);
  apply_plan(P, g, n, &add);
}

/* A repeat: the body args take the specs of the inputs, the body is
 * partitioned, and each carried value is yielded with the spec it came in
 * with (converted at the end of the body when it would not be). */
static void part_repeat(Part *P, IrGraph *g, IrNode *n) {
  IrGraph *body = n->body;
  for (int i = 0; i < n->nin; i++) {
    IrShard s = whole(P, n->in[i], n->loc);
    n->in[i] = convert(P, g, n->in[i], s, n->loc);
    IrValue *arg = body->args.items[i];
    arg->shard = s;
  }
  part_graph(P, body);
  for (int i = 0; i < n->nout; i++) {
    IrValue *arg = body->args.items[i];
    body->outputs.items[i] = convert(P, body, body->outputs.items[i], spec_of(arg), n->loc);
    n->out[i]->shard = spec_of(arg);
  }
}

static void part_node(Part *P, IrGraph *g, IrNode *n) {
  if (n->op == IR_OP_REPEAT) {
    part_repeat(P, g, n);
    ir_vec_push(&g->nodes, n);
    return;
  }
  IrShard *want = ir_alloc(sizeof(IrShard) * (size_t)(n->nin ? n->nin : 1));
  Plan pl = {want, spec_r(), NULL, NULL};
  rules[n->op](P, n, &pl);
  if (pl.rewrite) {
    pl.rewrite(P, g, n, &pl);
  } else {
    apply_plan(P, g, n, &pl);
    if (pl.localize) pl.localize(P, n);
  }
  ir_vec_push(&g->nodes, n);
}

/* ------------------------------------------------- parallel residuals */

/* Whether v is the result of a row-parallel GEMM (its weight split on the
 * input dim in one block), read once: a partial sum before its bias. */
static bool row_parallel(const IrGraph *g, const IrValue *v, const int *uses) {
  int in_dim, out_dim;
  if (v->kind != IR_VAL_NODE || v->graph != g || uses[v->id] != 1) return false;
  IrValue *w = pass_gemm_weight(v->def, &in_dim, &out_dim);
  IrShard s = w ? spec_of(w) : spec_r();
  return w && is_s_dim(s, in_dim) && ir_shard_blocks(&s) == 1;
}

/* The terms of the sum whose root is node n: adds read once are opened
 * (their nodes go to *interior), anything else is a term. */
static void terms_of(const IrGraph *g, IrValue *v, const int *uses, IrVec *terms, IrVec *interior,
                     bool root) {
  IrNode *d = v->kind == IR_VAL_NODE && v->graph == g ? v->def : NULL;
  if (d && d->op == IR_OP_ADD && (root || uses[v->id] == 1)) {
    if (!root) ir_vec_push(interior, d);
    terms_of(g, d->in[0], uses, terms, interior, false);
    terms_of(g, d->in[1], uses, terms, interior, false);
    return;
  }
  ir_vec_push(terms, v);
}

static IrValue *add_of(IrGraph *g, IrValue *a, IrValue *b, const IrType *type, IrLoc loc) {
  IrNode *n = ir_add_node(g, IR_OP_ADD, (IrValue *[]){a, b}, 2, NULL, 0, 1, loc);
  n->out[0]->type = *type;
  return n->out[0];
}

/* A sum of two or more row-parallel GEMMs and other terms, such as the
 * parallel residual x + attn(ln1 x) + mlp(ln2 x), is summed in the order
 * that needs one reduction: the GEMMs' partial sums first, then their
 * biases (after the reduction, as split_row_bias does for one), then the
 * other terms; written as (x + a) + m it would reduce a and m apart, two
 * all-reduces per layer instead of one. The nodes of the new sum take the
 * place of the root add (whose result stays the value later nodes read);
 * the opened adds go. Rounding differs from the written order by the
 * reassociation only. */
static void sum_partials_first(IrGraph *g) {
  int *uses = ir_alloc(sizeof(int) * (size_t)(g->next_id + 1));
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j]->graph == g) uses[n->in[j]->id]++;
  }
  for (int i = 0; i < g->outputs.len; i++) {
    IrValue *v = g->outputs.items[i];
    if (v->graph == g) uses[v->id]++;
  }
  bool *gone = ir_alloc(sizeof(bool) * (size_t)(g->nodes.len + 1));
  IrVec *plan = ir_alloc(sizeof(IrVec) * (size_t)(g->nodes.len + 1)); /* per root: its terms */
  bool any = false;
  for (int i = g->nodes.len - 1; i >= 0; i--) {
    IrNode *n = g->nodes.items[i];
    if (n->op != IR_OP_ADD || gone[i]) continue;
    IrVec terms = {0}, interior = {0};
    terms_of(g, n->out[0], uses, &terms, &interior, true);
    int partials = 0;
    for (int k = 0; k < terms.len; k++) partials += row_parallel(g, terms.items[k], uses);
    if (partials < 2) continue;
    for (int k = 0; k < interior.len; k++)
      for (int j = 0; j < i; j++)
        if (g->nodes.items[j] == interior.items[k]) gone[j] = true;
    plan[i] = terms;
    any = true;
  }
  if (!any) return;
  IrVec old = g->nodes;
  g->nodes = (IrVec){0};
  for (int i = 0; i < old.len; i++) {
    IrNode *n = old.items[i];
    if (gone[i]) continue;
    if (plan[i].len) {
      IrVec *t = &plan[i], gemms = {0}, biases = {0}, rest = {0};
      for (int k = 0; k < t->len; k++) {
        IrValue *v = t->items[k];
        if (!row_parallel(g, v, uses)) {
          ir_vec_push(&rest, v);
          continue;
        }
        ir_vec_push(&gemms, v);
        if (v->def->op == IR_OP_LINEAR && v->def->nin > 2) {
          ir_vec_push(&biases, v->def->in[2]);
          v->def->nin = 2; /* the bias is added after the reduction, below */
        }
      }
      /* The GEMMs, then each bias and other term; the root adds the last. */
      IrVec after = {0};
      for (int k = 0; k < biases.len; k++) ir_vec_push(&after, biases.items[k]);
      for (int k = 0; k < rest.len; k++) ir_vec_push(&after, rest.items[k]);
      int summed = after.len ? gemms.len : gemms.len - 1;
      if (!after.len) ir_vec_push(&after, gemms.items[gemms.len - 1]);
      const IrType *type = &n->out[0]->type;
      IrValue *sum = gemms.items[0];
      for (int k = 1; k < summed; k++) sum = add_of(g, sum, gemms.items[k], type, n->loc);
      for (int k = 0; k + 1 < after.len; k++) sum = add_of(g, sum, after.items[k], type, n->loc);
      IrValue *last = after.items[after.len - 1];
      n->in[0] = sum;
      n->in[1] = last;
    }
    ir_vec_push(&g->nodes, n);
  }
}

/* Re-appends g's nodes in order, each after the conversions it needs. */
static void part_graph(Part *P, IrGraph *g) {
  sum_partials_first(g);
  IrVec old = g->nodes;
  g->nodes = (IrVec){0};
  for (int i = 0; i < old.len; i++) part_node(P, g, old.items[i]);
}

/* ------------------------------------------------------------- checks */

/* A config whose value is n, when exactly one has it, names the number
 * in messages ("hidden = 768"); else the number alone. */
static const char *named_size(IrGraph *top, int64_t n) {
  const char *found = NULL;
  int count = 0;
  for (int i = 0; i < top->configs.len; i++) {
    IrConfig *c = top->configs.items[i];
    if (c->expr && c->expr->kind == IR_EX_INT && c->expr->i == n) {
      found = c->name;
      count++;
    }
  }
  return count == 1 ? ir_fmt("%s = %lld", found, (long long)n) : ir_fmt("%lld", (long long)n);
}

/* Whether dim of p is a vocabulary: the rows of an embedding table, or the
 * output dim of the GEMM that makes a cross_entropy's logits. */
static bool is_vocab_dim(const IrGraph *g, const IrValue *p, int dim) {
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    int out_dim = -1;
    if (n->body && is_vocab_dim(n->body, p, dim)) return true;
    if (n->op == IR_OP_EMBEDDING && n->in[1] == p && dim == 0) return true;
    if (n->op != IR_OP_CROSS_ENTROPY || n->in[0]->kind != IR_VAL_NODE) continue;
    if (pass_gemm_weight(n->in[0]->def, NULL, &out_dim) == p && out_dim == dim) return true;
  }
  return false;
}

/* A split parameter's dim must hold `blocks` equal blocks, each dividing
 * by t. */
static bool check_param(Part *P, IrGraph *top, IrGraph *g, IrValue *p, const char *prefix) {
  IrShard s = spec_of(p);
  if (is_r(s)) return true;
  if (is_p(s)) {
    ir_error(p->loc, "tensor parallelism: parameter %s%s is partial; a parameter is replicated or "
             "split", prefix, p->name);
    return false;
  }
  if (s.dim < 0 || s.dim >= p->type.rank) {
    ir_error(p->loc, "tensor parallelism: parameter %s%s of shape %s has no dim %d to split",
             prefix, p->name, ir_shape_str(&p->type), p->shard.dim);
    return false;
  }
  int64_t n = p->type.shape[s.dim], k = ir_shard_blocks(&s);
  if (n % k != 0) {
    ir_error(p->loc, "tensor parallelism: parameter %s%s: dim %d (%lld) does not hold %lld equal "
             "blocks", prefix, p->name, s.dim, (long long)n, (long long)k);
    return false;
  }
  if ((n / k) % P->t == 0) return true;
  const char *size = k > 1 ? ir_fmt("%lld blocks of %s", (long long)k, named_size(top, n / k))
                           : named_size(top, n);
  bool vocab = k == 1 && is_vocab_dim(g, p, s.dim);
  ir_error(p->loc, "tensor parallelism: parameter %s%s is split on dim %d (%s), which is not "
           "divisible by t = %d%s", prefix, p->name, s.dim, size, P->t,
           vocab ? "; --vocab-multiple M pads the vocabulary to a multiple of M * t" : "");
  return false;
}

/* Every parameter, every graph; `prefix` names a body's parameters as
 * LABEL.*.NAME. */
static bool check_params(Part *P, IrGraph *top, IrGraph *g, const char *prefix) {
  bool ok = true;
  for (int i = 0; i < g->params.len; i++)
    ok = check_param(P, top, g, g->params.items[i], prefix) && ok;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->body) ok = check_params(P, top, n->body, ir_fmt("%s%s.*.", prefix, n->label)) && ok;
  }
  return ok;
}

static bool typed(IrGraph *g, const char *who) {
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    const IrOpInfo *info = ir_op_info(n->op);
    bool ok = true;
    for (int j = 0; j < n->nattr; j++) ok = ok && n->attrs[j].expr && ir_expr_is_literal(n->attrs[j].expr);
    for (int j = 0; j < n->nout; j++) ok = ok && ir_type_known(&n->out[j]->type);
    if (!ok) {
      ir_error(n->loc, "%s: '%s' has an attribute that is not a number or a result without an "
               "inferred type; run the fold and shape passes first", who, info->name);
      return false;
    }
    if (n->body && !typed(n->body, who)) return false;
  }
  return true;
}

bool pass_check_typed(IrGraph *g, const char *who) {
  g = ir_top(g);
  IrVec *decls[] = {&g->inputs, &g->params};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < decls[l]->len; i++) {
      IrValue *v = decls[l]->items[i];
      if (ir_type_known(&v->type)) continue;
      ir_error(v->loc, "%s: %s%s has no known type; run the fold pass first", who,
               l ? "@" : "%", v->name);
      return false;
    }
  return typed(g, who);
}

/* The pass expects a global, typed forward graph. */
static bool check_input(IrGraph *g) {
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    const IrOpInfo *info = ir_op_info(n->op);
    if ((info->flags & IR_OPF_PARALLEL) || n->phase == IR_PHASE_BACKWARD) {
      ir_error(n->loc, "tp-partition: the graph is %s already (op '%s'); run tp-partition on "
               "the forward graph, before autodiff", n->phase == IR_PHASE_BACKWARD ?
               "differentiated" : "partitioned", info->name);
      return false;
    }
    if (n->body && !check_input(n->body)) return false;
  }
  return true;
}

/* Split parameters hold their rank's part. */
static void localize_params(Part *P, IrGraph *g) {
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i];
    IrShard s = spec_of(p);
    if (!is_s(s)) continue;
    int64_t shape[IR_MAX_RANK];
    memcpy(shape, p->type.shape, sizeof shape);
    shape[s.dim] /= P->t;
    ir_type_set_shape(&p->type, p->type.dtype, p->type.rank, shape);
    p->shard.dim = s.dim;
  }
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->body) localize_params(P, n->body);
  }
}

bool pass_tp_partition(IrGraph **gp, const PassOptions *opt) {
  IrGraph *g = ir_top(*gp);
  Part P = {.t = pass_tp(opt), .sp = opt && opt->sequence_parallel, .ok = true};
  if (P.t == 1) return true;
  if (g->mesh[IR_AXIS_TENSOR] > 1) {
    ir_error((IrLoc){0}, "tp-partition: the graph is partitioned already (mesh tensor = %d)",
             g->mesh[IR_AXIS_TENSOR]);
    return false;
  }
  if (!pass_check_typed(g, "tp-partition") || !check_input(g)) return false;
  for (int i = 0; i < g->inputs.len; i++) {
    IrValue *v = g->inputs.items[i];
    v->shard = spec_r();
  }
  /* The rules read specs and global dims only, so the walk runs (and
   * reports its own errors) even when a parameter does not divide. */
  bool params_ok = check_params(&P, g, g, "");
  part_graph(&P, g);
  for (int i = 0; i < g->outputs.len; i++)
    g->outputs.items[i] = convert(&P, g, g->outputs.items[i], spec_r(), g->nodes.len ?
                                  ((IrNode *)g->nodes.items[g->nodes.len - 1])->loc : (IrLoc){0});
  free(P.convs);
  if (!P.ok || !params_ok) return false;
  localize_params(&P, g);
  g->mesh[IR_AXIS_TENSOR] = P.t;
  if (!ir_shape_graph(g)) {
    ir_error((IrLoc){0}, "tp-partition: the local graph does not type-check (a bug of the pass)");
    return false;
  }
  return true;
}
