/* The CUDA target's tensor-parallel forms: the ops that need the rank
 * (ctx->tp) at run time, as on the CPU (cpu_tp.c), and the device scratch
 * and includes they share with the collectives. */
#include <string.h>

#include "cuda.h"

/* ------------------------------------------- tensor parallelism (cpu_tp.c) */

/* This rank's part along dim: no message, a strided copy. */
void cg_cuda_tp_slice(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (!cg_comm_tensor_axis(e, n)) return;
  const IrValue *x = n->in[0], *y = n->out[0];
  int64_t o = cg_comm_outer(n, x), part = cg_numel(y) / o, whole = cg_numel(x) / o;
  emit(e, "k_cuda_copy2d%s(%s, %lld, %s + (int64_t)ctx->tp * %lld, %lld, %lld, %lld);",
       cuda_sfx(e, x), cuda_ref(e, y), (long long)part, cuda_ref(e, x), (long long)part,
       (long long)whole, (long long)o, (long long)part);
  cg_launch_copy(e, cg_listing_bytes(e, y));
}

/* The identity; memplan makes it a view, which runs no code. */
void cg_cuda_tp_copy(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (strcmp(cuda_ref(e, n->in[0]), cuda_ref(e, n->out[0])) != 0)
    cg_cuda_copy(e, n->out[0], n->in[0]);
}

/* This rank's rows [tp * V, (tp + 1) * V) of the table. */
static void emit_vocab_embedding(CgEmitter *e, const IrNode *n) {
  const IrValue *ids = n->in[0], *y = n->out[0];
  if (!cg_need_i32(e, n, ids)) return;
  if (n->op == IR_OP_EMBEDDING) {
    const IrValue *table = n->in[1];
    int64_t V = cg_dim(table, 0);
    emit(e, "k_cuda_embedding_fwd_vp%s(%s, %s, %s, %lld, %lld, (int64_t)ctx->tp * %lld, %lld);",
         cuda_sfx(e, y), cuda_ref(e, y), cuda_ref(e, ids), cuda_ref(e, table),
         (long long)cg_numel(ids), (long long)cg_dim(y, -1), (long long)V, (long long)V);
    cg_launch(e, CG_K_COPY, NULL, 0, cg_listing_bytes(e, ids) + cg_listing_bytes(e, y),
              cg_listing_bytes(e, y));
    return;
  }
  int64_t V = cg_dim(y, 0), h = cg_dim(y, -1);
  if (cuda_into_grads(e, y))
    cg_cuda_embedding_add(e, n, ir_fmt("(int64_t)ctx->tp * %lld", (long long)V), V);
  else
    emit(e, "k_cuda_embedding_bwd_vp%s(%s, %s, %s, %lld, %lld, %lld, (int64_t)ctx->tp * %lld);",
         cuda_sfx(e, n->in[1]), cuda_ref(e, y), cuda_ref(e, ids), cuda_ref(e, n->in[1]),
         (long long)cg_numel(ids), (long long)V, (long long)h, (long long)V),
    cg_launch_node(e, CG_K_REDUCTION, NULL, n);
}

/* The loss over this rank's columns [tp * V, (tp + 1) * V) of the logits,
 * as on the CPU: all-reduces of the row max (MAX), then of the sum of
 * exponentials and, forward, of the target logit (SUM), one real per row
 * each, in the device scratch. With bf16 logits the kernels read them in
 * their _bf16 forms, and these statistics stay fp32 (Megatron-LM's
 * vocabulary-parallel cross-entropy works on fp32 logits): a bf16 row
 * max and sum of exponentials would cost the loss 3 significant digits
 * for a few bytes per row. */
static void emit_vocab_loss(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *logits = n->in[0], *targets = n->in[1];
  if (!cg_need_i32(e, n, targets)) return;
  int64_t V = cg_dim(logits, -1), rows = cg_numel(targets), t = e->g->mesh[IR_AXIS_TENSOR];
  int64_t valid = ir_attr_has(n, "valid") ? ir_attr_int(n, "valid") : 0;
  if (valid <= 0) valid = V * (t > 1 ? t : 1);
  const char *L = cuda_ref(e, logits), *T = cuda_ref(e, targets), *s = cuda_sfx(e, logits);
  emit(e, "{");
  e->depth++;
  emit(e, "const int64_t lo = (int64_t)ctx->tp * %lld;", (long long)V);
  emit(e, "const int64_t n = %lld - lo < 0 ? 0 : %lld - lo > %lld ? %lld : %lld - lo;",
       (long long)valid, (long long)valid, (long long)V, (long long)V, (long long)valid);
  emit(e, "real *mx = cu_tp_scratch(), *se = mx + %lld;", (long long)rows);
  emit(e, "k_cuda_ce_vp_max%s(mx, %s, %lld, %lld, n);", s, L, (long long)rows, (long long)V);
  cg_launch(e, CG_K_REDUCTION, NULL, 0, cg_listing_bytes(e, logits), 4.0 * (double)rows);
  cg_comm_allreduce(e, "mx", "mx", rows, "RT_COMM_MAX");
  emit(e, "k_cuda_ce_vp_sumexp%s(se, %s, mx, %lld, %lld, n);", s, L, (long long)rows,
       (long long)V);
  cg_launch(e, CG_K_REDUCTION, NULL, 0, cg_listing_bytes(e, logits), 4.0 * (double)rows);
  cg_comm_allreduce(e, "se", "se", rows, "RT_COMM_SUM");
  if (n->op == IR_OP_CROSS_ENTROPY) {
    emit(e, "real *tg = mx + %lld;", (long long)(2 * rows));
    emit(e, "k_cuda_ce_vp_target%s(tg, %s, %s, %lld, %lld, lo, n, %lld);", s, L, T,
         (long long)rows, (long long)V, (long long)valid);
    cg_launch(e, CG_K_REDUCTION, NULL, 0, cg_listing_bytes(e, targets), 4.0 * (double)rows);
    cg_comm_allreduce(e, "tg", "tg", rows, "RT_COMM_SUM");
    emit(e, "k_cuda_ce_vp_loss(%s, mx, se, tg, %lld);", cg_cuda_loss_out(e, index),
         (long long)rows);
    cg_launch(e, CG_K_REDUCTION, NULL, 0, 12.0 * (double)rows, 4);
    cg_cuda_loss_round(e, index);
  } else {
    emit(e, "k_cuda_ce_vp_bwd%s(%s, %s, %s, %s, mx, se, %lld, %lld, lo, n);", s,
         cuda_ref(e, n->out[0]), L, T, cuda_ref(e, n->in[2]), (long long)rows, (long long)V);
    cg_launch_node(e, CG_K_REDUCTION, NULL, n);
  }
  e->depth--;
  emit(e, "}");
}

/* Dropout on a tensor-parallel split: each rank draws its own stream, the
 * CPU's tp_seed. */
static void emit_rank_dropout(CgEmitter *e, const IrNode *n) {
  if (cg_cuda_graph_dropout(e, n, "0x9e3779b97f4a7c15ull * (uint64_t)(ctx->tp + 1)")) return;
  emit(e, "k_cuda_dropout_%s%s(%s, %s, %lld, ctx->training ? %s : 0, tp_seed(ctx), %lld);",
       n->op == IR_OP_DROPOUT ? "fwd" : "bwd", cuda_sfx(e, n->in[0]), cuda_ref(e, n->out[0]),
       cuda_ref(e, n->in[0]), (long long)cg_numel(n->in[0]), cg_real(ir_attr_float(n, "rate")),
       (long long)ir_attr_int(n, "site"));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
}

/* The forms that need the rank at run time (cpu_tp.c has the CPU's). */
void cg_cuda_tp_form(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  switch (n->op) {
  case IR_OP_EMBEDDING:
  case IR_OP_EMBEDDING_GRAD: emit_vocab_embedding(e, n); return;
  case IR_OP_CROSS_ENTROPY:
  case IR_OP_CROSS_ENTROPY_GRAD: emit_vocab_loss(e, index); return;
  case IR_OP_DROPOUT:
  case IR_OP_DROPOUT_GRAD: emit_rank_dropout(e, n); return;
  default: cg_error(e, n, "no tensor-parallel form of this op on the CUDA target");
  }
}

/* comm.h (C, with C11's _Noreturn) and the device scratch of the
 * collectives, a __device__ array of the program (nodes run one after the
 * other on one stream, so one serves them all), when the program has any. */
void cg_cuda_tp_prologue(CgEmitter *e) {
  bool per_rank;
  int64_t need = cg_tp_needs(e, &per_rank);
  if (!cg_comm_used(e) && need == 0 && !per_rank) return;
  emit(e, "/* Tensor parallelism: the collectives run on ctx->tp_comm (runtime/comm.h, whose");
  emit(e, " * NCCL backend takes device memory). */");
  emit(e, "#define _Noreturn [[noreturn]]");
  emit(e, "extern \"C\" {");
  emit(e, "#include \"runtime/comm/comm.h\"");
  emit(e, "}");
  emit(e, "#undef _Noreturn");
  emit(e, "#define RT_COMM_REAL RT_COMM_F32");
  if (need > 0) {
    emit(e, "/* Rank-major copies for gathers and scatters along inner dims, and the");
    emit(e, " * per-row reductions of the vocabulary-parallel loss, in device memory. */");
    emit(e, "__device__ real cu_tp_scratch_mem[%lld];", (long long)need);
    emit(e, "[[maybe_unused]] static real *cu_tp_scratch(void) {");
    emit(e, "  static void *p;");
    emit(e, "  if (!p) CU_CHECK(cudaGetSymbolAddress(&p, cu_tp_scratch_mem));");
    emit(e, "  return (real *)p;");
    emit(e, "}");
  }
  if (per_rank) {
    emit(e, "/* Dropout on a tensor-parallel split: each rank draws its own stream. */");
    emit(e, "[[maybe_unused]] static inline uint64_t tp_seed(const RtCtx *ctx) {");
    emit(e, "  return ctx->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(ctx->tp + 1));");
    emit(e, "}");
  }
  emit_blank(e);
}
