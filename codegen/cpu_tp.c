/* The CPU target's kernel code for tensor parallelism: tp_slice as a local
 * copy of this rank's part, and the vocabulary-parallel embedding and loss
 * and per-rank dropout, which need the rank (ctx->tp) at run time. One
 * program serves every tensor-parallel rank. The collectives themselves
 * are the core's (collectives.c).
 *
 * Scratch. all_gather and reduce_scatter along a dim with anything but 1s
 * before it need the rank-major layout of comm.h next to the tensor's (a
 * permuting copy after the gather, before the scatter), and the
 * vocabulary-parallel loss needs three reals per row for its reductions.
 * Both use one static array of the program, `tp_scratch`, sized here for
 * the largest user: nodes run one after the other and none of these is
 * part of a run of row chunks (memplan keeps collectives out of them). */
#include <string.h>

#include "cpu.h"


void cg_cpu_tp_prologue(CgEmitter *e) {
  bool per_rank;
  int64_t need = cg_tp_needs(e, &per_rank);
  if (!cg_comm_used(e) && need == 0 && !per_rank) return;
  cg_comm_includes(e);
  if (need > 0) {
    emit(e, "/* Rank-major copies for gathers and scatters along inner dims, and the");
    emit(e, " * per-row reductions of the vocabulary-parallel loss. */");
    emit(e, "static real tp_scratch[%lld];", (long long)need);
  }
  if (per_rank) {
    emit(e, "/* Dropout on a tensor-parallel split: each rank draws its own stream. */");
    emit(e, "static inline uint64_t tp_seed(const RtCtx *ctx) {");
    emit(e, "  return ctx->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(ctx->tp + 1));");
    emit(e, "}");
  }
  emit_blank(e);
}

/* -------------------------------------------------------------- slices */

/* This rank's part along dim: no message, a strided copy. */
static void emit_tp_slice(CgEmitter *e, const IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  int64_t o = cg_comm_outer(n, x), part = cg_numel(y) / o, whole = cg_numel(x) / o;
  emit(e, "k_copy2d(%s, %lld, %s + (int64_t)ctx->tp * %lld, %lld, %lld, %lld);", cg_ref(e, y),
       (long long)part, cg_ref(e, x), (long long)part, (long long)whole, (long long)o,
       (long long)part);
  cg_launch_copy(e, cg_listing_bytes(e, y));
}

/* ------------------------------------------------------- vocabulary split */

/* This rank's rows [tp * V, (tp + 1) * V) of the table. In a run of row
 * chunks (memplan's row_local embedding) the chunk's ids and rows. */
static void emit_vocab_embedding(CgEmitter *e, const IrNode *n) {
  const IrValue *ids = n->in[0], *y = n->out[0];
  if (n->op == IR_OP_EMBEDDING) {
    const IrValue *table = n->in[1];
    int64_t V = cg_dim(table, 0), h = cg_dim(y, -1);
    const char *out = cg_cpu_chunk_rows(e) ? ir_fmt("(%s + r0 * %lld)", cg_ref(e, y), (long long)h)
                                    : cg_ref(e, y);
    emit(e, "k_embedding_fwd_vp(%s, %s%s, %s, %lld, %lld, (int64_t)ctx->tp * %lld, %lld);", out,
         cg_ref(e, ids), cg_cpu_chunk_rows(e) ? " + r0" : "", cg_ref(e, table),
         (long long)(cg_cpu_chunk_rows(e) ? cg_cpu_chunk_rows(e) : cg_numel(ids)), (long long)h, (long long)V,
         (long long)V);
    cg_launch_node(e, CG_K_COPY, NULL, n);
    return;
  }
  const IrValue *dy = n->in[1];
  int64_t V = cg_dim(y, 0), h = cg_dim(y, -1), rows = cg_numel(ids);
  if (cg_buf(e, y)->region != PASS_REGION_GRADS) {
    emit(e, "k_embedding_bwd_vp(%s, %s, %s, %lld, %lld, %lld, (int64_t)ctx->tp * %lld);",
         cg_ref(e, y), cg_ref(e, ids), cg_ref(e, dy), (long long)rows, (long long)V, (long long)h,
         (long long)V);
    cg_launch_node(e, CG_K_REDUCTION, NULL, n);
    return;
  }
  cg_cpu_embedding_scatter(e, n, V); /* straight into the gradient slot */
}

/* The loss over this rank's columns [tp * V, (tp + 1) * V) of the logits:
 * all-reduces of the row max (MAX), then of the sum of exponentials and,
 * forward, of the target logit (SUM), one real per row each, as the
 * compiler's comm report lists them. */
static void emit_vocab_loss(CgEmitter *e, const IrNode *n) {
  const IrValue *logits = n->in[0], *targets = n->in[1];
  if (targets->type.dtype != IR_I32) {
    cg_error(e, n, "token ids must be i32, not %s", ir_dtype_name(targets->type.dtype));
    return;
  }
  if (ir_attr_has(n, "ignore") && ir_attr_int(n, "ignore")) {
    /* tp-partition gathers the logits of such a loss: this is a bug. */
    cg_error(e, n, "a vocabulary-parallel cross_entropy cannot ignore targets");
    return;
  }
  int64_t V = cg_dim(logits, -1), rows = cg_numel(targets), t = e->g->mesh[IR_AXIS_TENSOR];
  int64_t valid = ir_attr_has(n, "valid") ? ir_attr_int(n, "valid") : 0;
  if (valid <= 0) valid = V * (t > 1 ? t : 1);
  const char *L = cg_ref(e, logits), *T = cg_ref(e, targets);
  emit(e, "{");
  e->depth++;
  emit(e, "const int64_t lo = (int64_t)ctx->tp * %lld;", (long long)V);
  emit(e, "const int64_t n = %lld - lo < 0 ? 0 : %lld - lo > %lld ? %lld : %lld - lo;",
       (long long)valid, (long long)valid, (long long)V, (long long)V, (long long)valid);
  emit(e, "real *mx = tp_scratch, *se = tp_scratch + %lld, *tg = tp_scratch + %lld;",
       (long long)rows, (long long)(2 * rows));
  emit(e, "k_ce_vp_max(mx, %s, %lld, %lld, n);", L, (long long)rows, (long long)V);
  cg_launch(e, CG_K_REDUCTION, NULL, 0, cg_listing_bytes(e, logits), 4.0 * (double)rows);
  cg_comm_allreduce(e, "mx", "mx", rows, "RT_COMM_MAX");
  emit(e, "k_ce_vp_sumexp(se, %s, mx, %lld, %lld, n);", L, (long long)rows, (long long)V);
  cg_launch(e, CG_K_REDUCTION, NULL, 0, cg_listing_bytes(e, logits), 4.0 * (double)rows);
  cg_comm_allreduce(e, "se", "se", rows, "RT_COMM_SUM");
  if (n->op == IR_OP_CROSS_ENTROPY) {
    emit(e, "k_ce_vp_target(tg, %s, %s, %lld, %lld, lo, n, %lld);", L, T, (long long)rows,
         (long long)V, (long long)valid);
    cg_launch(e, CG_K_REDUCTION, NULL, 0, cg_listing_bytes(e, targets), 4.0 * (double)rows);
    cg_comm_allreduce(e, "tg", "tg", rows, "RT_COMM_SUM");
    emit(e, "k_ce_vp_loss(%s, mx, se, tg, %lld);", cg_ref(e, n->out[0]), (long long)rows);
    cg_launch(e, CG_K_REDUCTION, NULL, 0, 12.0 * (double)rows, 4);
  } else {
    emit(e, "(void)tg;");
    emit(e, "k_ce_vp_bwd(%s, %s, %s, %s, mx, se, %lld, %lld, lo, n);", cg_ref(e, n->out[0]), L, T,
         cg_ref(e, n->in[2]), (long long)rows, (long long)V);
    cg_launch_node(e, CG_K_REDUCTION, NULL, n);
  }
  e->depth--;
  emit(e, "}");
}

static void emit_rank_dropout(CgEmitter *e, const IrNode *n) {
  emit(e, "k_dropout_%s(%s, %s, %lld, ctx->training ? %s : 0, tp_seed(ctx), %lld);",
       n->op == IR_OP_DROPOUT ? "fwd" : "bwd", cg_ref(e, n->out[0]), cg_ref(e, n->in[0]),
       (long long)cg_numel(n->in[0]), cg_real(ir_attr_float(n, "rate")),
       (long long)ir_attr_int(n, "site"));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
}

bool cg_cpu_tp_writes_op(IrOp op) { return op == IR_OP_TP_SLICE || op == IR_OP_TP_COPY; }

bool cg_cpu_tp_node(CgEmitter *e, const IrNode *n) {
  switch (n->op) {
  case IR_OP_TP_SLICE:
    if (cg_comm_tensor_axis(e, n)) emit_tp_slice(e, n);
    return true;
  case IR_OP_TP_COPY: /* the identity; memplan makes it a view, which runs no code */
    if (strcmp(cg_ref(e, n->in[0]), cg_ref(e, n->out[0])) != 0)
      emit(e, "memcpy(%s, %s, %lld * sizeof(real));", cg_ref(e, n->out[0]), cg_ref(e, n->in[0]),
           (long long)cg_numel(n->in[0])),
          cg_launch_copy(e, cg_listing_bytes(e, n->in[0]));
    return true;
  case IR_OP_EMBEDDING:
  case IR_OP_EMBEDDING_GRAD:
    if (!cg_flag(n, "vocab_parallel")) return false;
    emit_vocab_embedding(e, n);
    return true;
  case IR_OP_CROSS_ENTROPY:
  case IR_OP_CROSS_ENTROPY_GRAD:
    if (!cg_flag(n, "vocab_parallel")) return false;
    emit_vocab_loss(e, n);
    return true;
  case IR_OP_DROPOUT:
  case IR_OP_DROPOUT_GRAD:
    if (!cg_flag(n, "per_rank")) return false;
    emit_rank_dropout(e, n);
    return true;
  default: return false;
  }
}
