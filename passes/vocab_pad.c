/* The `vocab-pad` pass: pads the vocabulary so that it splits evenly over
 * the tensor-parallel ranks (--vocab-multiple, default 128, as Megatron-LM's
 * make-vocab-size-divisible-by).
 *
 * The padded parameters are the vocabulary-split ones that tp-annotate (or
 * the model) chose: embedding tables split on dim 0, and the weights of an
 * output layer (a GEMM whose result is the logits of a cross_entropy) split
 * on their vocabulary dim. That dim grows to the next multiple of
 * vocab_multiple * t; the parameter records its real size (IrValue.unpadded)
 * for checkpoints and `shardc info`. Shapes are inferred again, and each
 * cross_entropy whose logits grew gets `valid` = the real vocabulary, which
 * masks the padding columns out of the softmax: no output depends on the
 * padding, and losses and gradients of the real entries do not change.
 *
 * With t = 1 the pass changes nothing unless the target asks for an
 * aligned vocabulary on one rank too (PassOptions.vocab_pad_always, the
 * CUDA target's: a GEMM over 50257 columns runs at an odd leading
 * dimension and leaves cuBLASLt's fast kernels). There are no specs then
 * (tp-annotate clears them at t = 1), so the vocabulary params are found
 * by tp-annotate's own rule: an embedding table not indexed by positions,
 * and the weight of the GEMM that makes a cross_entropy's logits. The
 * CPU target keeps the unpadded shapes at t = 1, and so its bits. With
 * vocab_multiple = 0 the pass changes nothing. It runs on global shapes,
 * before tp-partition. */
#include <string.h>

#include "passes.h"

static bool split_on(const IrValue *p, int dim) {
  return p->shard.kind == IR_SPLIT && p->shard.dim == dim && ir_shard_blocks(&p->shard) == 1;
}

/* An embedding indexed by positions (an arange) reads no vocabulary. */
static bool positions(const IrNode *n) {
  const IrValue *ids = n->in[0];
  return ids->kind == IR_VAL_NODE && ids->def->op == IR_OP_ARANGE;
}

/* Pads dim of p to a multiple of m (once). */
static void pad(IrValue *p, int dim, int64_t m) {
  if (p->unpadded > 0) return;
  int64_t n = p->type.shape[dim], padded = (n + m - 1) / m * m;
  if (padded == n) return;
  int64_t shape[IR_MAX_RANK];
  memcpy(shape, p->type.shape, sizeof shape);
  shape[dim] = padded;
  ir_type_set_shape(&p->type, p->type.dtype, p->type.rank, shape);
  p->pad_dim = dim;
  p->unpadded = n;
}

/* The producer of the logits that a cross_entropy reads, through scale. */
static const IrNode *logits_producer(const IrValue *v) {
  while (v->kind == IR_VAL_NODE && v->def->op == IR_OP_SCALE) v = v->def->in[0];
  return v->kind == IR_VAL_NODE ? v->def : NULL;
}

static void pad_graph(IrGraph *g, int64_t m, bool single) {
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    int out_dim;
    if (n->body) pad_graph(n->body, m, single);
    /* At t > 1 the specs say which params hold the vocabulary; at t = 1
     * (no specs) their use does. */
    if (n->op == IR_OP_EMBEDDING && n->in[1]->kind == IR_VAL_PARAM &&
        (single ? !positions(n) : split_on(n->in[1], 0)))
      pad(n->in[1], 0, m);
    if (n->op != IR_OP_CROSS_ENTROPY) continue;
    const IrNode *gemm = logits_producer(n->in[0]);
    IrValue *w = gemm ? pass_gemm_weight(gemm, NULL, &out_dim) : NULL;
    if (!w || !(single || split_on(w, out_dim))) continue;
    /* The output layer's bias, where it has one, grows with its weight
     * (split with it at t > 1); its padding entries stay 0, as their
     * gradients (the masked logits') are. */
    IrValue *bias = gemm->op == IR_OP_LINEAR && gemm->nin > 2 ? gemm->in[2] : NULL;
    /* A weight tied to an embedding was padded already, as the embedding
     * came first: the bias matches its size before. */
    int64_t vocab = w->unpadded > 0 && w->pad_dim == out_dim ? w->unpadded : w->type.shape[out_dim];
    if (bias && bias->kind == IR_VAL_PARAM && bias->type.rank == 1 &&
        bias->type.shape[0] == vocab && (single || split_on(bias, 0)))
      pad(bias, 0, m);
    pad(w, out_dim, m);
  }
}

/* Each cross_entropy's vocabulary before padding, in node order. */
static void vocab_sizes(IrGraph *g, IrVec *out) {
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->body) vocab_sizes(n->body, out);
    if (n->op == IR_OP_CROSS_ENTROPY) {
      const IrType *t = &n->in[0]->type;
      int64_t *v = ir_alloc(sizeof *v);
      *v = t->rank > 0 ? t->shape[t->rank - 1] : 0;
      ir_vec_push(out, v);
    }
  }
}

/* Sets `valid` on each cross_entropy whose logits grew. */
static void mark_valid(IrGraph *g, IrVec *before, int *k) {
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->body) mark_valid(n->body, before, k);
    if (n->op != IR_OP_CROSS_ENTROPY) continue;
    int64_t v = *(int64_t *)before->items[(*k)++];
    const IrType *t = &n->in[0]->type;
    IrAttr *a = ir_node_attr(n, "valid");
    if (a && t->rank > 0 && t->shape[t->rank - 1] != v && ir_attr_int(n, "valid") == 0)
      a->expr = ir_expr_int(v, n->loc);
  }
}

bool pass_vocab_pad(IrGraph **gp, const PassOptions *opt) {
  IrGraph *g = ir_top(*gp);
  int t = pass_tp(opt);
  if (!opt || opt->vocab_multiple <= 0 || (t == 1 && !opt->vocab_pad_always)) return true;
  if (!pass_check_typed(g, "vocab-pad")) return false;
  IrVec before = {0};
  vocab_sizes(g, &before);
  pad_graph(g, (int64_t)opt->vocab_multiple * t, t == 1);
  if (!ir_shape_graph(g)) return false;
  int k = 0;
  mark_valid(g, &before, &k);
  return true;
}
