/* The collectives of a partitioned graph, written once for every target:
 * each is a call of runtime/comm/comm.h on the tensor-axis communicator
 * (ctx->tp_comm), of the program's real, or RT_COMM_BF16 where the
 * memory plan keeps the values at 2 bytes (a GPU target's bf16
 * activations; weight gradients stay real). The runtime's comm backend (MPI on the CPU, NCCL on a
 * GPU) behind comm.h does the work; the target only supplies, for
 * gathers and scatters along a dim with anything but 1s before it, the
 * permuting copy between comm.h's rank-major layout and the tensor's
 * (CgTarget.permute) and the buffer that holds it (CgTarget.comm_scratch).
 * The messages between pipeline stages are tables the core writes
 * (emit.c), which the runtime sends and receives. */
#include <string.h>

#include "listing.h"
#include "target.h"

int64_t cg_comm_outer(const IrNode *n, const IrValue *v) {
  int64_t d = ir_attr_int(n, "dim"), p = 1;
  if (d < 0) d += v->type.rank;
  for (int k = 0; k < d; k++) p *= v->type.shape[k];
  return p;
}

bool cg_comm_used(const CgEmitter *e) { return e->g->mesh[IR_AXIS_TENSOR] > 1; }

void cg_comm_includes(CgEmitter *e) {
  emit(e, "/* Tensor parallelism: the collectives run on ctx->tp_comm (runtime/comm/comm.h). */");
  emit(e, "#include \"runtime/comm/comm.h\"");
  emit(e, "#ifdef SHARD_REAL_F64");
  emit(e, "#define RT_COMM_REAL RT_COMM_F64");
  emit(e, "#else");
  emit(e, "#define RT_COMM_REAL RT_COMM_F32");
  emit(e, "#endif");
}

int64_t cg_comm_scratch_reals(const IrNode *n) {
  if (n->op == IR_OP_ALL_GATHER) {
    const IrValue *x = n->in[0];
    return cg_comm_outer(n, x) > 1 ? cg_numel(n->out[0]) : 0;
  }
  if (n->op == IR_OP_REDUCE_SCATTER) {
    const IrValue *y = n->out[0];
    return cg_comm_outer(n, y) > 1 ? cg_numel(n->in[0]) : 0;
  }
  return 0;
}

/* Whether the plan keeps v's elements at 2 bytes (a GPU target's bf16
 * programs: the step's activations and their gradients, not the weight
 * gradients); the collective then moves them as RT_COMM_BF16. */
static bool low(CgEmitter *e, const IrValue *v) {
  return cg_buf(e, v)->bytes < cg_numel(v) * e->plan->real_bytes;
}

/* The comm.h type of a collective from x to y; false, with an error, for
 * two precisions (comm.h moves one). */
static bool comm_type(CgEmitter *e, const IrNode *n, const IrValue *x, const IrValue *y,
                      const char **type) {
  *type = low(e, x) ? "RT_COMM_BF16" : "RT_COMM_REAL";
  if (low(e, x) == low(e, y)) return true;
  cg_error(e, n, "bf16: a collective between a bf16 and an fp32 value");
  return false;
}

static void allreduce_t(CgEmitter *e, const char *src, const char *dst, int64_t n,
                        const char *type, const char *op) {
  emit(e, "rt_comm_allreduce(ctx->tp_comm, %s, %s, %lld, %s, %s);", src, dst, (long long)n, type,
       op);
  cg_launch_comm(e, "allreduce", cg_mesh(e->g, IR_AXIS_TENSOR),
                 (double)n * (strcmp(type, "RT_COMM_BF16") == 0 ? 2 : e->plan->real_bytes));
}

void cg_comm_allreduce(CgEmitter *e, const char *src, const char *dst, int64_t n, const char *op) {
  allreduce_t(e, src, dst, n, "RT_COMM_REAL", op);
}

/* The parts of x joined in rank order along dim: comm.h gathers rank-major
 * [t][outer][part]; with outer > 1 a permutation makes it [outer][t][part]. */
static void emit_all_gather(CgEmitter *e, const IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  int64_t o = cg_comm_outer(n, x), t = ir_attr_int(n, "size"), part = cg_numel(x) / o;
  const char *type;
  if (!comm_type(e, n, x, y, &type)) return;
  const char *tmp = o == 1 ? cg_ref(e, y) : e->target->comm_scratch;
  emit(e, "rt_comm_allgather(ctx->tp_comm, %s, %s, %lld, %s);", cg_ref(e, x), tmp,
       (long long)cg_numel(x), type);
  cg_launch_comm(e, "allgather", t, cg_listing_bytes(e, y));
  if (o > 1) e->target->permute(e, cg_ref(e, y), tmp, t, o, part, low(e, x));
}

/* Part r along dim of the sum: x [outer][t][part] is made rank-major first. */
static void emit_reduce_scatter(CgEmitter *e, const IrNode *n) {
  const IrValue *x = n->in[0], *y = n->out[0];
  int64_t o = cg_comm_outer(n, y), t = ir_attr_int(n, "size"), part = cg_numel(y) / o;
  const char *src = cg_ref(e, x), *type;
  if (!comm_type(e, n, x, y, &type)) return;
  if (o > 1) {
    src = e->target->comm_scratch;
    e->target->permute(e, src, cg_ref(e, x), o, t, part, low(e, x));
  }
  emit(e, "rt_comm_reduce_scatter(ctx->tp_comm, %s, %s, %lld, %s, RT_COMM_SUM);", src,
       cg_ref(e, y), (long long)cg_numel(y), type);
  cg_launch_comm(e, "reduce_scatter", t, cg_listing_bytes(e, x));
}

bool cg_comm_tensor_axis(CgEmitter *e, const IrNode *n) {
  if (ir_attr_int(n, "axis") == IR_AXIS_TENSOR) return true;
  cg_error(e, n, "only the tensor axis is supported, not axis %lld",
           (long long)ir_attr_int(n, "axis"));
  return false;
}

bool cg_comm_node(CgEmitter *e, const IrNode *n) {
  switch (n->op) {
  case IR_OP_ALL_REDUCE: {
    const char *type;
    if (cg_comm_tensor_axis(e, n) && comm_type(e, n, n->in[0], n->out[0], &type))
      allreduce_t(e, cg_ref(e, n->in[0]), cg_ref(e, n->out[0]), cg_numel(n->in[0]), type,
                  "RT_COMM_SUM");
    return true;
  }
  case IR_OP_ALL_GATHER:
    if (cg_comm_tensor_axis(e, n)) emit_all_gather(e, n);
    return true;
  case IR_OP_REDUCE_SCATTER:
    if (cg_comm_tensor_axis(e, n)) emit_reduce_scatter(e, n);
    return true;
  case IR_OP_ALL_TO_ALL:
    /* runtime/comm has rt_comm_alltoallv; the emission (the counts from
     * the model's memory to the host, the tail of y zeroed) comes with
     * the routed ops that give a graph its counts. */
    cg_error(e, n, "all_to_all: no target emits it yet");
    return true;
  default: return false;
  }
}

bool cg_vocab_loss(const IrNode *n) {
  return (n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) &&
         cg_flag(n, "vocab_parallel");
}

/* A collective's rank-major copy, or the vocabulary-parallel loss's three
 * reals per row (its row max, sum of exponentials and target logit). */
static int64_t tp_scratch_reals(const IrNode *n) {
  if (cg_vocab_loss(n)) return 3 * cg_rows(n->in[0]);
  return cg_comm_scratch_reals(n);
}

int64_t cg_tp_needs(const CgEmitter *e, bool *per_rank) {
  int64_t need = 0;
  *per_rank = false;
  for (int c = 0; c < e->nchunks; c++)
    for (int i = 0; i < e->chunks[c].g->nodes.len; i++) {
      const IrNode *n = e->chunks[c].g->nodes.items[i];
      int64_t s = tp_scratch_reals(n);
      if (s > need) need = s;
      *per_rank |=
          (n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_GRAD) && cg_flag(n, "per_rank");
    }
  return need;
}
