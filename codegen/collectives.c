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

/* The size of the first all_to_all on `axis` of any chunk, 0 for none. */
static int all_to_all_size(const CgChunk *ch, int nch, IrMeshAxis axis) {
  for (int c = 0; c < nch; c++)
    for (int i = 0; i < ch[c].g->nodes.len; i++) {
      const IrNode *n = ch[c].g->nodes.items[i];
      if (n->op == IR_OP_ALL_TO_ALL && ir_attr_int(n, "axis") == axis)
        return (int)ir_attr_int(n, "size");
    }
  return 0;
}

int cg_chunks_expert_ranks(const CgChunk *ch, int nch) {
  int E = all_to_all_size(ch, nch, IR_AXIS_DATA);
  return E > 1 ? E : 1;
}

int cg_expert_ranks(const CgEmitter *e) { return cg_chunks_expert_ranks(e->chunks, e->nchunks); }

bool cg_comm_used(const CgEmitter *e) {
  return e->g->mesh[IR_AXIS_TENSOR] > 1 || all_to_all_size(e->chunks, e->nchunks, IR_AXIS_DATA) ||
         all_to_all_size(e->chunks, e->nchunks, IR_AXIS_TENSOR);
}

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

/* y, received = all_to_all(x, counts): the counts are exchanged first (one
 * int a rank, so that each rank knows what comes from each), then the
 * rows move by rt_comm_alltoallv, and y's rows past the received ones are
 * zeroed (y is planned for the worst case). On the data axis the group is
 * the expert ranks (ctx->ep_comm, E consecutive data-parallel ranks), on
 * the tensor axis ctx->tp_comm. The counts are read on the host: model
 * memory is host memory on the CPU target; a GPU target copies the two
 * count vectors out on the compute stream, which waits for their
 * exchange (comm_nccl.c), and the host waits for the copy: the one place
 * a routed layer's step waits for the GPU, since NCCL takes its counts
 * from the host. */
static void emit_all_to_all(CgEmitter *e, const IrNode *n) {
  const IrValue *x = n->in[0], *k = n->in[1], *y = n->out[0], *got = n->out[1];
  const char *type = "RT_COMM_I32";
  if (x->type.dtype != IR_I32 && !comm_type(e, n, x, y, &type)) return;
  int64_t size = ir_attr_int(n, "size"), row = cg_numel(x) / cg_dim(x, 0);
  const char *comm = ir_attr_int(n, "axis") == IR_AXIS_DATA ? "ctx->ep_comm" : "ctx->tp_comm";
  const char *elem = x->type.dtype == IR_I32 ? "int32_t" : low(e, x) ? "uint16_t" : "real";
  bool gpu = e->target->memory == CG_MEMORY_GPU;
  const char *sent = cg_ref(e, k), *recv = cg_ref(e, got);
  emit(e, "{");
  e->depth++;
  emit(e, "int64_t sc[%lld], rc[%lld], got = 0;", (long long)size, (long long)size);
  emit(e, "rt_comm_alltoall(%s, %s, %s, 1, RT_COMM_I32);", comm, sent, recv);
  if (gpu) {
    emit(e, "int32_t sent[%lld], recv[%lld];", (long long)size, (long long)size);
    emit(e, "CU_CHECK(cudaMemcpyAsync(sent, %s, sizeof sent, cudaMemcpyDeviceToHost, "
         "k_cuda_stream()));", sent);
    emit(e, "CU_CHECK(cudaMemcpyAsync(recv, %s, sizeof recv, cudaMemcpyDeviceToHost, "
         "k_cuda_stream()));", recv);
    emit(e, "CU_CHECK(cudaStreamSynchronize(k_cuda_stream()));");
    sent = "sent", recv = "recv";
  }
  emit(e, "for (int r = 0; r < %lld; r++) {", (long long)size);
  emit(e, "  sc[r] = (int64_t)%s[r] * %lld;", sent, (long long)row);
  emit(e, "  rc[r] = (int64_t)%s[r] * %lld;", recv, (long long)row);
  emit(e, "  got += rc[r];");
  emit(e, "}");
  emit(e, "if (got > %lld) rt_comm_fatal(\"all_to_all: %%lld elements for a buffer of %lld\", "
       "(long long)got);", (long long)cg_numel(y), (long long)cg_numel(y));
  emit(e, "rt_comm_alltoallv(%s, %s, sc, %s, rc, %s);", comm, cg_ref(e, x), cg_ref(e, y), type);
  if (gpu)
    emit(e, "CU_CHECK(cudaMemsetAsync((%s *)%s + got, 0, sizeof(%s) * (size_t)(%lld - got), "
         "k_cuda_stream()));", elem, cg_ref(e, y), elem, (long long)cg_numel(y));
  else
    emit(e, "memset((%s *)%s + got, 0, sizeof(%s) * (size_t)(%lld - got));", elem, cg_ref(e, y),
         elem, (long long)cg_numel(y));
  e->depth--;
  emit(e, "}");
  cg_launch_comm(e, "alltoall", size, cg_listing_bytes(e, x));
}

/* The expert-parallel routed layer's bookkeeping around the all_to_all:
 * the rows for each expert rank, and the received rows by local expert
 * and back. On the CPU host code over the counts (kernels/cpu/moe_ep.c);
 * on a GPU its twins (kernels/cuda/moe.cu, k_cuda_ep_*), which read the
 * counts in device memory and move the rows' elements at their size (2
 * bytes in bf16). */
static void emit_ep(CgEmitter *e, const IrNode *n) {
  bool gpu = e->target->memory == CG_MEMORY_GPU;
  const char *k = gpu ? "k_cuda_ep" : "k_ep";
  int64_t size = ir_attr_int(n, "size"), E = cg_numel(n->in[n->op == IR_OP_EP_PLAN ? 0 : 1]);
  if (n->op == IR_OP_EP_PLAN) {
    emit(e, "%s_plan(%s, %s, %s, %lld, %lld);", k, cg_ref(e, n->out[0]), cg_ref(e, n->out[1]),
         cg_ref(e, n->in[0]), (long long)E, (long long)size);
    if (gpu) cg_launch_copy(e, 8.0 * (double)(E + size));
    return;
  }
  const char *rows = ir_fmt("%lld, %lld, %lld, %lld%s", (long long)cg_dim(n->in[0], 0),
                            (long long)cg_dim(n->in[0], -1), (long long)size, (long long)(E / size),
                            !gpu ? "" : low(e, n->in[0]) ? ", 2" : ", 4");
  if (n->op == IR_OP_EP_SORT)
    emit(e, "%s_sort(%s, %s, %s, %s, %s);", k, cg_ref(e, n->out[0]), cg_ref(e, n->out[1]),
         cg_ref(e, n->in[0]), cg_ref(e, n->in[1]), rows);
  else
    emit(e, "%s_unsort(%s, %s, %s, %s);", k, cg_ref(e, n->out[0]), cg_ref(e, n->in[0]),
         cg_ref(e, n->in[1]), rows);
  cg_launch_copy(e, cg_listing_bytes(e, n->out[0]));
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
    emit_all_to_all(e, n);
    return true;
  case IR_OP_EP_PLAN:
  case IR_OP_EP_SORT:
  case IR_OP_EP_UNSORT:
    emit_ep(e, n);
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
