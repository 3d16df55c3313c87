/* The CUDA target's op writers: the kernel calls of every node that runs
 * on its own (layout, norms, softmax, attention, loss, embeddings), and the
 * table from op to writer. */
#include "cuda.h"

/* ----------------------------------------------------------------- layout */

/* y = x, a cast where one is bf16 and the other not. */
void cg_cuda_copy(CgEmitter *e, const IrValue *y, const IrValue *x) {
  if (cuda_low(e, x) != cuda_low(e, y))
    emit(e, "k_cuda_cast_%s(%s, %s, %lld);", cuda_low(e, y) ? "f32_bf16" : "bf16_f32",
         cuda_ref(e, y), cuda_ref(e, x), (long long)cg_numel(x));
  else
    emit(e, "CU_CHECK(cudaMemcpyAsync(%s, %s, %lld * sizeof(%s), cudaMemcpyDeviceToDevice, "
            "k_cuda_stream()));",
         cuda_ref(e, y), cuda_ref(e, x), (long long)cg_numel(x), cuda_ctype(e, x));
  cg_launch(e, CG_K_COPY, NULL, 0, cg_listing_bytes(e, x), cg_listing_bytes(e, y));
}

/* The shared layout calls (layout_ops.c) take untyped pointers: for bf16
 * the prologue's cu_bf16_* wrappers. */
static const char *layout_prefix(CgEmitter *e, const IrNode *n) {
  return cuda_low(e, n->in[0]) ? "cu_bf16_" : "k_cuda_";
}

static void emit_transpose(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (!cg_transpose_call(e, n, layout_prefix(e, n))) cg_cuda_copy(e, n->out[0], n->in[0]);
}

static void emit_split_heads(CgEmitter *e, int index) {
  cg_heads_call(e, cg_node(e, index), true, layout_prefix(e, cg_node(e, index)));
}
static void emit_merge_heads(CgEmitter *e, int index) {
  cg_heads_call(e, cg_node(e, index), false, layout_prefix(e, cg_node(e, index)));
}

/* A split that is not a view: one strided block copy per part. */
static void emit_split(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int axis = cuda_norm_axis(ir_attr_int(n, "axis"), x->type.rank);
  int64_t outer = cg_dims_prod(&x->type, 0, axis), cols = cg_numel(x) / outer,
          part = cols / n->nout;
  for (int j = 0; j < n->nout; j++)
    emit(e, "k_cuda_copy2d%s(%s, %lld, %s%s, %lld, %lld, %lld);", cuda_sfx(e, x),
         cuda_ref(e, n->out[j]), (long long)part, cuda_ref(e, x),
         j ? ir_fmt(" + %lld", (long long)(j * part)) : "", (long long)cols, (long long)outer,
         (long long)part),
    cg_launch_copy(e, cg_listing_bytes(e, n->out[j]));
}

/* slice: one block copy, as a part of split. */
static void emit_slice(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int axis = cuda_norm_axis(ir_attr_int(n, "axis"), x->type.rank);
  int64_t outer = cg_dims_prod(&x->type, 0, axis), cols = cg_numel(x) / outer;
  int64_t part = cg_numel(n->out[0]) / outer;
  int64_t at = ir_attr_int(n, "start") * (cols / x->type.shape[axis]);
  emit(e, "k_cuda_copy2d%s(%s, %lld, %s + %lld, %lld, %lld, %lld);", cuda_sfx(e, x),
       cuda_ref(e, n->out[0]), (long long)part, cuda_ref(e, x), (long long)at, (long long)cols,
       (long long)outer, (long long)part);
  cg_launch_copy(e, cg_listing_bytes(e, n->out[0]));
}

static void emit_concat(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *y = n->out[0];
  int axis = cuda_norm_axis(ir_attr_int(n, "axis"), y->type.rank);
  int64_t outer = cg_dims_prod(&y->type, 0, axis), cols = cg_numel(y) / outer, at = 0;
  for (int j = 0; j < n->nin; j++) {
    int64_t c = cg_numel(n->in[j]) / outer;
    emit(e, "k_cuda_copy2d%s(%s%s, %lld, %s, %lld, %lld, %lld);", cuda_sfx(e, y), cuda_ref(e, y),
         at ? ir_fmt(" + %lld", (long long)at) : "", (long long)cols, cuda_ref(e, n->in[j]),
         (long long)c, (long long)outer, (long long)c);
    cg_launch_copy(e, cg_listing_bytes(e, n->in[j]));
    at += c;
  }
}

/* The threads a column of k_cuda_sum_rows (SUMROWS_LANES of
 * kernels/cuda/elementwise.cu), for the listing the cost report prices. */
#define SUM_ROWS_LANES 8

/* sum_to: x summed down to the shape broadcasting stretched it from. */
static void emit_sum_to(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *y = n->out[0];
  CgBc bc = cg_bcast(&y->type, &x->type);
  int64_t N = cg_numel(x), M = cg_numel(y);
  switch (bc.kind) {
  case CG_BC_FULL: cg_cuda_copy(e, y, x); return;
  default: break;
  }
  /* A bf16 sum (not a weight's gradient): the prologue's kernel, one
   * thread per column adding the rows in order in double. */
  if (cuda_low(e, y) && bc.kind != CG_BC_ROW) {
    emit(e, "CU_LAUNCH(cu_grid(%lldLL), cu_sum_rows)(%s, %s, %lldLL, "
            "%lldLL);",
         (long long)M, cuda_ref(e, y), cuda_ref(e, x), (long long)(N / M), (long long)M);
    cg_launch_node(e, CG_K_REDUCTION, NULL, n), cg_launch_serial(e, M, N / M);
    emit(e, "CU_LAUNCHED();");
    return;
  }
  switch (bc.kind) {
  case CG_BC_FULL: return;
  case CG_BC_SCALAR:
  case CG_BC_SUFFIX:
    emit(e, "k_cuda_sum_rows%s(%s, %s, %lld, %lld);", cuda_sfx(e, x), cuda_ref(e, y),
         cuda_ref(e, x), (long long)(N / M), (long long)M);
    /* SUM_ROWS_LANES threads a column, each adding every LANES-th row. */
    cg_launch_node(e, CG_K_REDUCTION, NULL, n),
        cg_launch_serial(e, M * SUM_ROWS_LANES, (N / M + SUM_ROWS_LANES - 1) / SUM_ROWS_LANES);
    return;
  case CG_BC_ROW:
    emit(e, "CU_LAUNCH(cu_grid(%lldLL), cu_sum_last)(%s, %s, %lldLL, "
            "%lldLL);",
         (long long)M, cuda_ref(e, y), cuda_ref(e, x), (long long)M, (long long)bc.size);
    cg_launch_node(e, CG_K_REDUCTION, NULL, n), cg_launch_serial(e, M, bc.size);
    emit(e, "CU_LAUNCHED();");
    return;
  case CG_BC_GENERAL: cg_error(e, n, "a broadcast the CUDA target does not sum yet"); return;
  }
}

/* ------------------------------------------------------- the other kernels */

/* The forward writes each row's log-sum-exp into its second result, which
 * the backward reads (its sixth input) instead of recomputing q k^T. */
static void emit_attention(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *q = n->in[0];
  int64_t H, K, d;
  cg_attention_dims(n, &H, &K, &d);
  int causal = (int)ir_attr_int(n, "causal");
  if (n->nin > (n->op == IR_OP_ATTENTION ? 3 : 6)) {
    /* The CUDA kernels know no key-padding mask yet. The backward node
     * carries the forward's location: one error is enough. */
    if (n->op == IR_OP_ATTENTION)
      cg_error(e, n, "attention with a key-padding mask is not supported on this target; the "
               "cpu target supports it");
    return;
  }
  if (n->op == IR_OP_ATTENTION)
    emit(e, "k_cuda_attention_fwd%s(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %d, %s);",
         cuda_sfx(e, q), cuda_ref(e, n->out[0]), cuda_ref(e, q), cuda_ref(e, n->in[1]),
         cuda_ref(e, n->in[2]), (long long)cg_dim(q, 0), (long long)cg_dim(q, 1), (long long)H,
         (long long)K, (long long)d, causal, cuda_ref(e, n->out[1]));
  else
    emit(e,
         "k_cuda_attention_bwd%s(%s, %s, %s, %s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %lld, "
         "%lld, %d, %s);",
         cuda_sfx(e, q), cuda_ref(e, n->out[0]), cuda_ref(e, n->out[1]), cuda_ref(e, n->out[2]),
         cuda_ref(e, n->in[4]), cuda_ref(e, q), cuda_ref(e, n->in[1]), cuda_ref(e, n->in[2]),
         cuda_ref(e, n->in[3]), cuda_ref(e, n->in[5]), (long long)cg_dim(q, 0), (long long)cg_dim(q, 1), (long long)H,
         (long long)K, (long long)d, causal, cg_scratch(e, index));
  cg_launch_attention(e, NULL, n);
}

/* Whether a and b are read at the same precision: the fused kernels take
 * every row operand at one. */
static void same_precision(CgEmitter *e, const IrNode *n, const IrValue *a, const IrValue *b) {
  if (cuda_low(e, a) != cuda_low(e, b))
    die("%s with operands at two precisions", ir_op_info(n->op)->name);
}

/* The row operands of add_layernorm and add_rmsnorm: a, b, s and y. */
static void add_norm_precision(CgEmitter *e, const IrNode *n) {
  same_precision(e, n, n->in[0], n->in[1]);
  for (int i = 0; i < 2; i++) same_precision(e, n, n->in[0], n->out[i]);
}

/* layernorm(x, w[, bias]) and add_layernorm(a, b, w[, bias]), whose x is
 * the sum s = a + b it writes as its first result. */
static void emit_layernorm(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int p = n->op == IR_OP_ADD_LAYERNORM ? 2 : 1; /* the weight's input */
  const char *bias = n->nin == p + 2 ? cuda_ref(e, n->in[p + 1]) : "NULL";
  if (p == 2) {
    add_norm_precision(e, n);
    emit(e, "k_cuda_add_layernorm_fwd%s(%s, %s, %s, %s, %s, %s, %lld, %lld, %s);", cuda_sfx(e, x),
         cuda_ref(e, n->out[0]), cuda_ref(e, n->out[1]), cuda_ref(e, x), cuda_ref(e, n->in[1]),
         cuda_ref(e, n->in[2]), bias, (long long)cg_rows(x), (long long)cg_dim(x, -1),
         cg_real(ir_attr_float(n, "eps")));
  } else {
    emit(e, "k_cuda_layernorm_fwd%s(%s, %s, %s, %s, %lld, %lld, %s);", cuda_sfx(e, x),
         cuda_ref(e, n->out[0]), cuda_ref(e, x), cuda_ref(e, n->in[1]), bias,
         (long long)cg_rows(x), (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")));
  }
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_rmsnorm(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  if (n->op == IR_OP_ADD_RMSNORM) {
    add_norm_precision(e, n);
    emit(e, "k_cuda_add_rmsnorm_fwd%s(%s, %s, %s, %s, %s, %lld, %lld, %s);", cuda_sfx(e, x),
         cuda_ref(e, n->out[0]), cuda_ref(e, n->out[1]), cuda_ref(e, x), cuda_ref(e, n->in[1]),
         cuda_ref(e, n->in[2]), (long long)cg_rows(x), (long long)cg_dim(x, -1),
         cg_real(ir_attr_float(n, "eps")));
  } else {
    emit(e, "k_cuda_rmsnorm_fwd%s(%s, %s, %s, %lld, %lld, %s);", cuda_sfx(e, x),
         cuda_ref(e, n->out[0]), cuda_ref(e, x), cuda_ref(e, n->in[1]), (long long)cg_rows(x),
         (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")));
  }
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

/* With a fourth input (add-norm's residual gradient) the norm gradients
 * are the _res kernels, which add it to dx. */
static const char *res_sfx(CgEmitter *e, const IrNode *n) {
  if (n->nin < 4) return cuda_sfx(e, n->in[0]);
  same_precision(e, n, n->in[2], n->in[3]);
  same_precision(e, n, n->in[2], n->out[0]);
  return ir_fmt("_res%s", cuda_sfx(e, n->in[0]));
}

static const char *res_arg(CgEmitter *e, const IrNode *n) {
  return n->nin > 3 ? ir_fmt("%s, ", cuda_ref(e, n->in[3])) : "";
}

/* The norms' weight gradients are set, not added (as on the CPU): the
 * plan stages them in temporaries and the core adds them into their slot. */
static void emit_layernorm_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  const PassBuf *db = n->nout == 3 ? cg_buf(e, n->out[2]) : NULL;
  bool want_db = db && (db->uses > 0 || db->grad_of);
  emit(e, "k_cuda_layernorm_bwd%s(%s, %s, %s, %s, %s, %s, %s%lld, %lld, %s, %s);", res_sfx(e, n),
       cuda_ref(e, n->out[0]), cuda_ref(e, n->out[1]), want_db ? cuda_ref(e, n->out[2]) : "NULL",
       cuda_ref(e, n->in[2]), cuda_ref(e, x), cuda_ref(e, n->in[1]), res_arg(e, n),
       (long long)cg_rows(x), (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")),
       cg_scratch(e, index));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_rmsnorm_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_cuda_rmsnorm_bwd%s(%s, %s, %s, %s, %s, %s%lld, %lld, %s, %s);", res_sfx(e, n),
       cuda_ref(e, n->out[0]), cuda_ref(e, n->out[1]), cuda_ref(e, n->in[2]), cuda_ref(e, x),
       cuda_ref(e, n->in[1]), res_arg(e, n), (long long)cg_rows(x), (long long)cg_dim(x, -1),
       cg_real(ir_attr_float(n, "eps")), cg_scratch(e, index));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_softmax(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_cuda_softmax_fwd%s(%s, %s, %lld, %lld);", cuda_sfx(e, x), cuda_ref(e, n->out[0]),
       cuda_ref(e, x), (long long)cg_rows(x), (long long)cg_dim(x, -1));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_softmax_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_cuda_softmax_bwd%s(%s, %s, %s, %lld, %lld);", cuda_sfx(e, x), cuda_ref(e, n->out[0]),
       cuda_ref(e, x), cuda_ref(e, n->in[1]), (long long)cg_rows(x), (long long)cg_dim(x, -1));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_causal_mask(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int64_t s = cg_dim(x, -1);
  emit(e, "k_cuda_causal_mask%s(%s, %s, %lld, %lld, %s);", cuda_sfx(e, x), cuda_ref(e, n->out[0]),
       cuda_ref(e, x), (long long)(cg_numel(x) / (s * s)), (long long)s,
       cg_real(ir_attr_float(n, "fill")));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
}

static void emit_rope(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int64_t H = ir_attr_int(n, "heads"), r = ir_attr_int(n, "dims");
  if (r && r != cg_dim(x, -1) / H) { /* the CUDA kernel rotates whole heads only */
    if (n->phase != IR_PHASE_BACKWARD) /* its backward rope has the same location */
      cg_error(e, n, "over %lld of each head's %lld dims (partial rotary) is not supported on "
               "this target; the cpu target supports it", (long long)r,
               (long long)(cg_dim(x, -1) / H));
    return;
  }
  emit(e, "k_cuda_rope%s(%s, %s, %lld, %lld, %lld, %lld, %s, %d);", cuda_sfx(e, x),
       cuda_ref(e, n->out[0]), cuda_ref(e, x),
       (long long)(cg_numel(x) / (cg_dim(x, -2) * cg_dim(x, -1))), (long long)cg_dim(x, -2),
       (long long)H, (long long)(cg_dim(x, -1) / H), cg_real(ir_attr_float(n, "theta")),
       (int)ir_attr_int(n, "inverse"));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
}


/* The mask is the CPU's, bit for bit (a function of seed, site and index). */
static void emit_dropout(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (cg_cuda_graph_dropout(e, n, "0")) return;
  emit(e, "k_cuda_dropout_%s%s(%s, %s, %lld, ctx->training ? %s : 0, ctx->seed, %lld);",
       n->op == IR_OP_DROPOUT ? "fwd" : "bwd", cuda_sfx(e, n->in[0]), cuda_ref(e, n->out[0]),
       cuda_ref(e, n->in[0]), (long long)cg_numel(n->in[0]), cg_real(ir_attr_float(n, "rate")),
       (long long)ir_attr_int(n, "site"));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
}

/* A loss the plan keeps in bf16 (a term of a sum, as the routed models'
 * aux losses make it): the loss kernels write fp32, so theirs goes to the
 * last 8 bytes of the node's scratch (target.c) and is rounded into the
 * value after; an fp32 loss is written where it is. */
const char *cg_cuda_loss_out(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (!cuda_low(e, n->out[0])) return cuda_ref(e, n->out[0]);
  return ir_fmt("(float *)((char *)%s + %lld)", cg_scratch(e, index),
                (long long)(cg_numel(n->in[1]) * 8));
}

void cg_cuda_loss_round(CgEmitter *e, int index) {
  const IrValue *y = cg_node(e, index)->out[0];
  if (!cuda_low(e, y)) return;
  emit(e, "k_cuda_cast_f32_bf16(%s, %s, 1);", cuda_ref(e, y), cg_cuda_loss_out(e, index));
  cg_launch(e, CG_K_ELEMENTWISE, NULL, 0, 4, 2);
}

static void emit_loss(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *logits = n->in[0], *targets = n->in[1];
  if (!cg_need_i32(e, n, targets)) return;
  /* The columns from `valid` on are vocab-pad's padding: out of the
   * softmax, with a zero gradient. */
  int64_t V = cg_dim(logits, -1), rows = cg_numel(targets);
  if (ir_attr_has(n, "ignore") && ir_attr_int(n, "ignore")) {
    if (n->op == IR_OP_CROSS_ENTROPY)
      cg_error(e, n, "cross_entropy with ignore=1 is not supported on this target; the cpu "
               "target supports it");
    return;
  }
  int64_t valid = ir_attr_has(n, "valid") ? ir_attr_int(n, "valid") : 0;
  if (valid <= 0 || valid > V) valid = V;
  if (n->op == IR_OP_CROSS_ENTROPY)
    emit(e, "k_cuda_cross_entropy_fwd%s(%s, %s, %s, %lld, %lld, %lld, %s);", cuda_sfx(e, logits),
         cg_cuda_loss_out(e, index), cuda_ref(e, logits), cuda_ref(e, targets), (long long)rows,
         (long long)V, (long long)valid, cg_scratch(e, index));
  else
    emit(e, "k_cuda_cross_entropy_bwd%s(%s, %s, %s, %s, %lld, %lld, %lld);", cuda_sfx(e, logits),
         cuda_ref(e, n->out[0]), cuda_ref(e, logits), cuda_ref(e, targets), cuda_ref(e, n->in[2]),
         (long long)rows, (long long)V, (long long)valid);
  cg_launch_node(e, CG_K_REDUCTION, NULL, n);
  if (n->op == IR_OP_CROSS_ENTROPY) cg_cuda_loss_round(e, index);
  /* The backward reads the logits twice: its row statistics, then the
   * gradient it writes. */
  if (n->op != IR_OP_CROSS_ENTROPY) cg_launch_add_bytes(e, cg_listing_bytes(e, logits), 0);
}

/* The prologue's cu_embedding_add: rows [lo, lo + V) of the table are
 * this rank's (all of them, lo = 0, without a vocabulary split). Up to
 * CU_EMB_OWNERS blocks, each owning the rows of its residue; the cost is
 * the ids, dy and the slot's rows the ids pick (read and written), as the
 * ids each block reads again come from L2. */
void cg_cuda_embedding_add(CgEmitter *e, const IrNode *n, const char *lo, int64_t V) {
  const IrValue *y = n->out[0];
  emit(e, "CU_LAUNCH(cu_grid((%lldLL < CU_EMB_OWNERS ? %lldLL : CU_EMB_OWNERS) * CU_THREADS), "
          "cu_embedding_add)(%s, %s, %s, %lldLL, %lldLL, %s, %lldLL);",
       (long long)V, (long long)V, cuda_ref(e, y), cuda_ref(e, n->in[0]),
       cuda_ref(e, n->in[1]), (long long)cg_numel(n->in[0]), (long long)cg_dim(y, -1), lo,
       (long long)V);
  double rows = 4.0 * (double)cg_numel(n->in[1]); /* the gradient rows the ids pick, fp32 */
  cg_launch(e, CG_K_REDUCTION, NULL, 0, cg_listing_bytes(e, n->in[0]) +
            cg_listing_bytes(e, n->in[1]) + rows, rows);
  emit(e, "CU_LAUNCHED();");
}

/* embedding_grad straight into its gradient slot: the prologue's kernel,
 * one thread per column adding the rows in token order (no atomics, the
 * CPU's order); otherwise the kernel that sets the table's gradient. */
static void emit_embedding(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *ids = n->in[0], *y = n->out[0];
  if (!cg_need_i32(e, n, ids)) return;
  if (n->op == IR_OP_EMBEDDING) {
    emit(e, "k_cuda_embedding_fwd%s(%s, %s, %s, %lld, %lld);", cuda_sfx(e, y), cuda_ref(e, y),
         cuda_ref(e, ids), cuda_ref(e, n->in[1]), (long long)cg_numel(ids),
         (long long)cg_dim(y, -1));
    cg_launch(e, CG_K_COPY, NULL, 0, cg_listing_bytes(e, ids) + cg_listing_bytes(e, y),
              cg_listing_bytes(e, y));
  } else if (cuda_into_grads(e, y)) {
    cg_cuda_embedding_add(e, n, "0", cg_dim(y, 0));
  } else {
    emit(e, "k_cuda_embedding_bwd%s(%s, %s, %s, %lld, %lld, %lld);", cuda_sfx(e, n->in[1]),
         cuda_ref(e, y), cuda_ref(e, ids), cuda_ref(e, n->in[1]), (long long)cg_numel(ids),
         (long long)cg_dim(y, 0), (long long)cg_dim(y, -1));
    cg_launch_node(e, CG_K_REDUCTION, NULL, n);
  }
}

static void emit_arange(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *y = n->out[0];
  if (y->type.dtype != IR_I32) cg_error(e, n, "arange must be i32");
  else emit(e, "k_cuda_arange(%s, %lld);", cuda_ref(e, y), (long long)cg_numel(y)),
    cg_launch_node(e, CG_K_COPY, NULL, n);
}

static void emit_zeros(CgEmitter *e, int index) {
  const IrValue *y = cg_node(e, index)->out[0];
  emit(e, "CU_CHECK(cudaMemsetAsync(%s, 0, %lld * sizeof(%s), k_cuda_stream()));", cuda_ref(e, y),
       (long long)cg_numel(y), y->type.dtype == IR_I32 ? "int32_t" : cuda_ctype(e, y));
  cg_launch(e, CG_K_COPY, NULL, 0, 0, cg_listing_bytes(e, y));
}

static void emit_reshape(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  cg_cuda_copy(e, n->out[0], n->in[0]);
}

/* ---------------------------------------------------------- routed layers */

/* The routed layer's kernels (kernels/cuda/moe.cu) take every float
 * operand of a node at one precision (grouped_linear_dw's weight gradient
 * is fp32 either way): the suffix of that precision, or NULL after an
 * error for operands at two. */
static const char *moe_sfx(CgEmitter *e, const IrNode *n) {
  const IrValue *first = NULL;
  for (int i = 0; i < n->nin + n->nout; i++) {
    const IrValue *v = i < n->nin ? n->in[i] : n->out[i - n->nin];
    if (v->type.dtype == IR_I32 || (n->op == IR_OP_GROUPED_LINEAR_DW && i == n->nin)) continue;
    if (!first) first = v;
    else if (cuda_low(e, first) != cuda_low(e, v)) {
      cg_error(e, n, "bf16: a routed op with operands at two precisions");
      return NULL;
    }
  }
  return first ? cuda_sfx(e, first) : "";
}

/* Tokens T and their k choices from a [..., k] operand (the router's
 * weights or experts), as codegen/cpu.c reads them. */
static int64_t moe_k(const IrValue *w) { return cg_dim(w, -1); }
static int64_t moe_tokens(const IrValue *w) { return cg_numel(w) / cg_dim(w, -1); }

int64_t cg_cuda_moe_per(const IrNode *n) {
  int64_t rows = cg_dim(n->in[0], 0);
  const IrValue *c = n->in[2];
  const IrNode *d = c->kind == IR_VAL_NODE ? c->def : NULL;
  if (!d || d->op != IR_OP_MOE_DISPATCH) return rows;
  const IrValue *ex = d->in[1];
  int64_t per = rows;
  /* The router picks k distinct experts a token: one row each at most. */
  if (ex->kind == IR_VAL_NODE && ex->def && ex->def->op == IR_OP_ROUTER) per = moe_tokens(ex);
  int64_t cap = ir_moe_capacity(ir_attr_float(d, "capacity"), cg_numel(ex), cg_numel(c));
  return cap > 0 && cap < per ? cap : per;
}

static void emit_router(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *l = n->in[0];
  const char *sfx = moe_sfx(e, n);
  if (!sfx) return;
  int64_t E = cg_dim(l, -1), T = cg_numel(l) / E, k = ir_attr_int(n, "k");
  int score = (int)ir_attr_int(n, "score"), norm = (int)ir_attr_int(n, "normalize");
  if (n->op == IR_OP_ROUTER)
    emit(e, "k_cuda_router_fwd%s(%s, %s, %s, %lld, %lld, %lld, %d, %d);", sfx,
         cuda_ref(e, n->out[0]), cuda_ref(e, n->out[1]), cuda_ref(e, l), (long long)T,
         (long long)E, (long long)k, score, norm);
  else
    emit(e, "k_cuda_router_bwd%s(%s, %s, %s, %s, %lld, %lld, %lld, %d, %d);", sfx,
         cuda_ref(e, n->out[0]), cuda_ref(e, l), cuda_ref(e, n->in[1]), cuda_ref(e, n->in[2]),
         (long long)T, (long long)E, (long long)k, score, norm);
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

/* router_load, router_z_loss and their gradients: per-token statistics of
 * the logits summed over the tokens (router_load_fwd: a block per expert,
 * which reads every token's logits). */
static void emit_router_load(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *l = n->in[0];
  const char *sfx = moe_sfx(e, n);
  if (!sfx) return;
  int64_t E = cg_dim(l, -1), T = cg_numel(l) / E;
  const char *y = cuda_ref(e, n->out[0]), *L = cuda_ref(e, l);
  switch (n->op) {
  case IR_OP_ROUTER_LOAD:
    emit(e, "k_cuda_router_load_fwd%s(%s, %s, %lld, %lld, %lld);", sfx, y, L, (long long)T,
         (long long)E, (long long)ir_attr_int(n, "k"));
    break;
  case IR_OP_ROUTER_LOAD_GRAD:
    emit(e, "k_cuda_router_load_bwd%s(%s, %s, %s, %lld, %lld);", sfx, y, L, cuda_ref(e, n->in[1]),
         (long long)T, (long long)E);
    break;
  case IR_OP_ROUTER_Z_LOSS:
    emit(e, "k_cuda_router_z_loss_fwd%s(%s, %s, %lld, %lld);", sfx, y, L, (long long)T,
         (long long)E);
    break;
  default:
    emit(e, "k_cuda_router_z_loss_bwd%s(%s, %s, %s, %lld, %lld);", sfx, y, L,
         cuda_ref(e, n->in[1]), (long long)T, (long long)E);
    break;
  }
  cg_launch_node(e, CG_K_REDUCTION, NULL, n);
  if (n->op == IR_OP_ROUTER_LOAD) cg_launch_add_bytes(e, (double)(E - 1) * cg_listing_bytes(e, l), 0);
}

/* The counting sort (one block of CUDA_MOE_SORT_THREADS threads, each
 * reading its run of the copies twice an expert: a serial launch), then
 * the zeroed rows and the scatter of the kept copies. */
#define CUDA_MOE_SORT_THREADS 256 /* MOE_SORT_THREADS of kernels/cuda/moe.cu */
static void emit_moe_dispatch(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *ex = n->in[1], *rows = n->out[0], *pos = n->out[1];
  const char *sfx = moe_sfx(e, n);
  if (!sfx) return;
  int64_t E = cg_numel(n->out[2]), c = cg_numel(ex);
  emit(e, "k_cuda_moe_sort(%s, %s, %s, %lld, %lld, %lld);", cuda_ref(e, pos),
       cuda_ref(e, n->out[2]), cuda_ref(e, ex), (long long)c, (long long)E,
       (long long)ir_moe_capacity(ir_attr_float(n, "capacity"), c, E));
  cg_launch(e, CG_K_COPY, NULL, 0, 2 * cg_listing_bytes(e, ex),
            cg_listing_bytes(e, pos) + cg_listing_bytes(e, n->out[2]));
  cg_launch_serial(e, CUDA_MOE_SORT_THREADS,
                   2 * E * ((c + CUDA_MOE_SORT_THREADS - 1) / CUDA_MOE_SORT_THREADS));
  emit(e, "k_cuda_moe_scatter%s(%s, %s, %s, %lld, %lld, %lld);", sfx, cuda_ref(e, rows),
       cuda_ref(e, x), cuda_ref(e, pos), (long long)c, (long long)moe_k(ex),
       (long long)cg_dim(x, -1));
  cg_launch(e, CG_K_COPY, NULL, 0, cg_listing_bytes(e, pos) + cg_listing_bytes(e, rows),
            2 * cg_listing_bytes(e, rows));
}

/* moe_combine(rows, pos, weights), moe_undispatch(drows, pos) (weights 1)
 * and moe_combine_grad. */
static void emit_moe_combine(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *rows = n->in[0], *y = n->out[0];
  const char *sfx = moe_sfx(e, n);
  if (!sfx) return;
  if (n->op == IR_OP_MOE_COMBINE_GRAD) {
    emit(e, "k_cuda_moe_combine_bwd%s(%s, %s, %s, %s, %s, %s, %lld, %lld, %lld);", sfx,
         cuda_ref(e, n->out[0]), cuda_ref(e, n->out[1]), cuda_ref(e, rows), cuda_ref(e, n->in[1]),
         cuda_ref(e, n->in[2]), cuda_ref(e, n->in[3]), (long long)moe_tokens(n->in[2]),
         (long long)moe_k(n->in[2]), (long long)cg_dim(rows, -1));
    cg_launch_node(e, CG_K_REDUCTION, NULL, n);
    /* The rows are zeroed before the kept copies' are written; dy is read
     * twice (for the rows, and for the weights' dot products). */
    cg_launch_add_bytes(e, cg_listing_bytes(e, n->in[3]), cg_listing_bytes(e, n->out[0]));
    return;
  }
  int64_t T = cg_numel(y) / cg_dim(y, -1);
  emit(e, "k_cuda_moe_combine%s(%s, %s, %s, %s, %lld, %lld, %lld);", sfx, cuda_ref(e, y),
       cuda_ref(e, rows), cuda_ref(e, n->in[1]),
       n->op == IR_OP_MOE_COMBINE ? cuda_ref(e, n->in[2]) : "NULL", (long long)T,
       (long long)(cg_dim(rows, 0) / T), (long long)cg_dim(rows, -1));
  cg_launch_node(e, CG_K_REDUCTION, NULL, n);
}

/* grouped_linear(x, w, counts), _dx(dy, w, counts), _dw(x, dy, counts):
 * the node's cuBLASLt workspace, then the padded operands in the rest of
 * its scratch (moe.cu's pieces, one call each): pack the rows (and for dw
 * dy too), one batched GEMM over E experts of `per` rows (the FLOPs it
 * runs, the padding's included), and unpack y or dx. */
static void emit_grouped_linear(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *c = n->in[2], *w = n->op == IR_OP_GROUPED_LINEAR_DW ? n->out[0] : n->in[1];
  const IrValue *y = n->out[0];
  const char *sfx = moe_sfx(e, n);
  if (!sfx) return;
  bool dw = n->op == IR_OP_GROUPED_LINEAR_DW, dx = n->op == IR_OP_GROUPED_LINEAR_DX;
  if (dw && (cuda_low(e, w) || cuda_into_grads(e, w)))
    die("grouped_linear_dw into a bf16 value or a gradient slot");
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t E = cg_numel(c), in = cg_dim(w, tr ? 2 : 1), out = cg_dim(w, tr ? 1 : 2);
  int64_t N = cg_dim(n->in[0], 0), per = cg_cuda_moe_per(n);
  int64_t ca = dx ? out : in, cb = dx ? in : out; /* the packed operand's columns, the result's */
  int ab = cuda_low(e, n->in[0]) ? 2 : 4;
  const char *ct = ab == 2 ? "kc_bf16 *" : "real *";
  cg_cuda_gemm_workspace(e, index);
  emit(e, "{");
  e->depth++;
  emit(e, "KcGrouped g = k_cuda_grouped_parts((char *)CU_ALIGN256(TMP(%lld)) + %lld, %lld, %lld, "
          "%lld, %d);",
       (long long)e->plan->scratch_offset[index], (long long)(CUDA_GEMM_WORKSPACE - 256),
       (long long)E, (long long)per, (long long)ca, ab == 2);
  double padded = (double)(E * per) * ab;
  for (int i = 0; i < (dw ? 2 : 1); i++) {
    int64_t cols = i ? out : ca;
    emit(e, "k_cuda_grouped_pack%s((%s)g.%s, %s, %s, g.offs, %lld, %lld, %lld);", sfx, ct,
         i ? "b" : "a", cuda_ref(e, n->in[i]), cuda_ref(e, c), (long long)E, (long long)per,
         (long long)cols);
    cg_launch(e, CG_K_COPY, NULL, 0, cg_listing_bytes(e, n->in[i]), padded * (double)cols);
  }
  const char *op = dw ? "KC_GROUPED_DW" : dx ? "KC_GROUPED_DX" : "KC_GROUPED_Y";
  emit(e, "k_cuda_grouped_gemm%s(%s, %s, (%s)g.a, %s, %lld, %lld, %lld, %lld, %d);", sfx, op,
       dw ? cuda_ref(e, y) : "g.b", ct, dw ? ir_fmt("(%s)g.b", ct) : cuda_ref(e, w),
       (long long)E, (long long)per, (long long)in, (long long)out, tr);
  if (dw && tr) cg_launch_gemm(e, NULL, E, out, in, per, out, in, in, ab, 4, false);
  else if (dw) cg_launch_gemm(e, NULL, E, in, out, per, in, out, out, ab, 4, false);
  else cg_launch_gemm(e, NULL, E, per, cb, ca, ca, tr ? in : out, cb, ab, ab, false);
  if (!dw) {
    emit(e, "k_cuda_grouped_unpack%s(%s, (%s)g.b, g.offs, %lld, %lld, %lld, %lld);", sfx,
         cuda_ref(e, y), ct, (long long)N, (long long)E, (long long)per, (long long)cb);
    cg_launch(e, CG_K_COPY, NULL, 0, padded * (double)cb, cg_listing_bytes(e, y));
  }
  e->depth--;
  emit(e, "}");
}

/* ------------------------------------------------------------ the op table */

/* How the CUDA target writes an op that runs on its own; an elementwise op
 * with a formula (ir/ops.def) needs no line: the fused kernels write it.
 * The same ops as the CPU target's table. */
static void (*const cuda_kernels[IR_OP_COUNT])(CgEmitter *e, int index) = {
    [IR_OP_EMBEDDING] = emit_embedding,
    [IR_OP_ARANGE] = emit_arange,
    [IR_OP_ZEROS] = emit_zeros,
    [IR_OP_MATMUL] = cg_cuda_matmul,
    [IR_OP_LINEAR] = cg_cuda_linear,
    [IR_OP_RESHAPE] = emit_reshape,
    [IR_OP_TRANSPOSE] = emit_transpose,
    [IR_OP_SPLIT_HEADS] = emit_split_heads,
    [IR_OP_MERGE_HEADS] = emit_merge_heads,
    [IR_OP_SPLIT] = emit_split,
    [IR_OP_SLICE] = emit_slice,
    [IR_OP_CONCAT] = emit_concat,
    [IR_OP_DROPOUT] = emit_dropout,
    [IR_OP_LAYERNORM] = emit_layernorm,
    [IR_OP_RMSNORM] = emit_rmsnorm,
    [IR_OP_ADD_LAYERNORM] = emit_layernorm,
    [IR_OP_ADD_RMSNORM] = emit_rmsnorm,
    [IR_OP_SOFTMAX] = emit_softmax,
    [IR_OP_CAUSAL_MASK] = emit_causal_mask,
    [IR_OP_ROPE] = emit_rope,
    [IR_OP_ATTENTION] = emit_attention,
    [IR_OP_CROSS_ENTROPY] = emit_loss,
    [IR_OP_LINEAR_DX] = cg_cuda_linear_dx,
    [IR_OP_LINEAR_DW] = cg_cuda_linear_dw,
    [IR_OP_SUM_TO] = emit_sum_to,
    [IR_OP_DROPOUT_GRAD] = emit_dropout,
    [IR_OP_LAYERNORM_GRAD] = emit_layernorm_grad,
    [IR_OP_RMSNORM_GRAD] = emit_rmsnorm_grad,
    [IR_OP_SOFTMAX_GRAD] = emit_softmax_grad,
    [IR_OP_ATTENTION_GRAD] = emit_attention,
    [IR_OP_EMBEDDING_GRAD] = emit_embedding,
    [IR_OP_CROSS_ENTROPY_GRAD] = emit_loss,
    [IR_OP_TP_SLICE] = cg_cuda_tp_slice,
    [IR_OP_TP_COPY] = cg_cuda_tp_copy,
    [IR_OP_ROUTER] = emit_router,
    [IR_OP_ROUTER_LOAD] = emit_router_load,
    [IR_OP_ROUTER_Z_LOSS] = emit_router_load,
    [IR_OP_ROUTER_Z_LOSS_GRAD] = emit_router_load,
    [IR_OP_MOE_DISPATCH] = emit_moe_dispatch,
    [IR_OP_GROUPED_LINEAR] = emit_grouped_linear,
    [IR_OP_MOE_COMBINE] = emit_moe_combine,
    [IR_OP_ROUTER_GRAD] = emit_router,
    [IR_OP_ROUTER_LOAD_GRAD] = emit_router_load,
    [IR_OP_MOE_UNDISPATCH] = emit_moe_combine,
    [IR_OP_GROUPED_LINEAR_DX] = emit_grouped_linear,
    [IR_OP_GROUPED_LINEAR_DW] = emit_grouped_linear,
    [IR_OP_MOE_COMBINE_GRAD] = emit_moe_combine,
};

bool cg_cuda_writes_op(IrOp op) { return cuda_kernels[op] || cg_formula_writes_op(op); }

/* Ops written in their tensor-parallel form when an attribute says so. */
static bool tp_form(const IrNode *n) {
  return cg_flag(n, "vocab_parallel") || cg_flag(n, "per_rank");
}

void cg_cuda_node(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (cg_cuda_in_epilogue(e, index))
    emit(e, "/* in the epilogue of the GEMM that computes its operand */");
  else if (tp_form(n)) cg_cuda_tp_form(e, index);
  else if (cuda_kernels[n->op]) cuda_kernels[n->op](e, index);
  else cg_error(e, n, "not supported");
}
