/* The CUDA target's CUDA graphs: which chunk functions the runtime may
 * capture and replay, the step values a captured dropout reads, and the
 * table the program hands the runtime. */
#include "cuda.h"

/* ------------------------------------------------------------ CUDA graphs */

/* Which chunk functions the runtime may capture once as a CUDA graph and
 * replay (abi/model.h RtGraphs), decided here from each function's nodes
 * in the graph and its chunk's hooks, so that nothing about it is left to
 * chance at run time (tests/codegen/cuda/graphs.sh checks the decision
 * against the code written). A
 * function may be captured when all it does is launch kernels, cuBLASLt
 * calls and device-to-device copies on the compute stream at addresses
 * that depend only on ctx's pointers (the runtime keys its graphs by
 * them) and on ctx->tp (fixed for a rank's run). Not one that calls the
 * host in the middle: a collective over rt_comm (NCCL calls, which no
 * graph here captures), the data-parallel BUCKET_READY and POLL hooks.
 * Per-step scalars passed
 * by value would be replayed with the values of the capture: the one the
 * chunk functions have is dropout's seed and training switch, which a
 * capturable function reads from device memory instead (the step form of
 * the dropout kernels, cu_step below), written on the stream before every
 * call by RtGraphs.step_values. So dropout stays inside the graph at the
 * cost of one one-thread launch per call. The optimizer's per-step
 * constants (learning rate, AdamW's step) are the runtime's, outside any
 * chunk function. */

enum { CU_FORWARD, CU_BACKWARD, CU_WGRAD };
static const char *const cu_fn_names[] = {"forward", "backward", "wgrad"};

/* Function f's nodes of chunk c: [*lo, *hi). */
static void fn_range(const CgChunk *c, int f, int *lo, int *hi) {
  int N = c->g->nodes.len, B = c->plan->boundary, W = c->plan->wboundary;
  *lo = f == CU_FORWARD ? 0 : f == CU_BACKWARD ? B : W;
  *hi = f == CU_FORWARD ? B : f == CU_BACKWARD ? W : N;
}

/* Why function f of chunk c may not be captured; NULL: it may. */
static const char *graph_why_not(const CgChunk *c, int f) {
  if (f == CU_WGRAD && !c->g->wsplit) return "no W";
  /* emit.c writes the hooks after backward nodes of a chunk with buckets
   * or a split backward. */
  if (f != CU_FORWARD && c->nbuckets)
    return "the data-parallel hooks BUCKET_READY and POLL call the runtime";
  if (f != CU_FORWARD && c->g->wsplit) return "POLL progresses the pipeline's sends on the host";
  int lo, hi;
  fn_range(c, f, &lo, &hi);
  bool code = f == CU_BACKWARD && c->g->params.len > 0; /* gradients added at its start */
  for (int i = lo; i < hi; i++) {
    if (c->plan->view[i] || c->plan->absorbed[i]) continue;
    const IrNode *n = c->g->nodes.items[i];
    code = true;
    if (ir_op_info(n->op)->flags & IR_OPF_COLLECTIVE)
      return ir_fmt("%s over rt_comm waits on the host", ir_op_info(n->op)->name);
    if (cg_vocab_loss(n))
      return "the vocabulary-parallel loss's all-reduces over rt_comm wait on the host";
  }
  return code ? NULL : "nothing to launch";
}

/* The function of its chunk that node n is written into. */
static int fn_of(const CgChunk *c, const IrNode *n) {
  int i = 0;
  while (i < c->g->nodes.len && c->g->nodes.items[i] != n) i++;
  return i < c->plan->boundary ? CU_FORWARD : i < c->plan->wboundary ? CU_BACKWARD : CU_WGRAD;
}

static bool is_dropout(const IrNode *n) {
  return n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_GRAD;
}

/* Whether some capturable function has a dropout: the program then keeps
 * the step's values in device memory. */
static bool graphs_read_step(CgEmitter *e) {
  for (int c = 0; c < e->nchunks; c++)
    for (int i = 0; i < e->chunks[c].g->nodes.len; i++) {
      const IrNode *n = e->chunks[c].g->nodes.items[i];
      if (is_dropout(n) && !graph_why_not(&e->chunks[c], fn_of(&e->chunks[c], n))) return true;
    }
  return false;
}

/* Dropout in a capturable function: the step form, whose seed (xor mix, a
 * rank's own stream under tensor parallelism) and training switch are read
 * from cu_step() as the kernel runs. Returns false elsewhere: the caller
 * writes the plain form, the values by value. */
bool cg_cuda_graph_dropout(CgEmitter *e, const IrNode *n, const char *mix) {
  if (graph_why_not(e->chunk, fn_of(e->chunk, n))) return false;
  emit(e, "k_cuda_dropout_step_%s%s(%s, %s, %lld, %s, cu_step(), %s, %lld);",
       n->op == IR_OP_DROPOUT ? "fwd" : "bwd", cuda_sfx(e, n->in[0]), cuda_ref(e, n->out[0]),
       cuda_ref(e, n->in[0]), (long long)cg_numel(n->in[0]), cg_real(ir_attr_float(n, "rate")), mix,
       (long long)ir_attr_int(n, "site"));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
  return true;
}

/* The step's values in device memory, for the step form of dropout. */
void cg_cuda_graphs_prologue(CgEmitter *e) {
  if (!graphs_read_step(e)) return;
  emit(e, "/* CUDA graphs: a graph replays the arguments it was captured with, so the");
  emit(e, " * captured dropout kernels read the step's seed and training switch from here,");
  emit(e, " * written on the stream before every call of a chunk function (cu_step_values,");
  emit(e, " * RtGraphs.step_values). */");
  emit(e, "__device__ KcStep cu_step_mem;");
  emit(e, "static KcStep *cu_step(void) {");
  emit(e, "  static void *p;");
  emit(e, "  if (!p) CU_CHECK(cudaGetSymbolAddress(&p, cu_step_mem));");
  emit(e, "  return (KcStep *)p;");
  emit(e, "}");
  emit(e, "static void cu_step_values(const RtCtx *ctx) {");
  emit(e, "  k_cuda_step_set(cu_step(), ctx->seed, ctx->training);");
  emit(e, "}");
  emit_blank(e);
}

/* Function f of chunk c as emit.c names it: forward, or forward_c1 in a
 * program of several chunks. */
static const char *graph_fn_name(const CgEmitter *e, int c, int f) {
  return e->nchunks > 1 ? ir_fmt("%s_c%d", cu_fn_names[f], c) : cu_fn_names[f];
}

/* The graph table (abi/model.h RtGraphs): one line per chunk function. */
void cg_cuda_graphs_table(CgEmitter *e) {
  emit(e, "/* CUDA graphs (abi/model.h RtGraphs): why each chunk function may not be");
  emit(e, " * captured and replayed as a graph; NULL where it may. */");
  emit(e, "static const char *const cu_graph_why_not[] = {");
  e->depth++;
  for (int c = 0; c < e->nchunks; c++)
    for (int f = 0; f < 3; f++) {
      const char *why = graph_why_not(&e->chunks[c], f);
      cg_listing_graph(e, c, f, why == NULL);
      emit(e, "%s, /* %s */", why ? ir_fmt("\"%s\"", why) : "NULL", graph_fn_name(e, c, f));
    }
  e->depth--;
  emit(e, "};");
  emit(e, "static const RtGraphs cu_graphs = {");
  emit(e, "    cu_graph_why_not,");
  emit(e, "    %s,", graphs_read_step(e) ? "cu_step_values" : "NULL");
  emit(e, "#ifdef SHARD_PROFILE");
  emit(e, "    \"the per-op timer (SHARD_PROFILE) waits for the GPU after every node\",");
  emit(e, "#else");
  emit(e, "    NULL,");
  emit(e, "#endif");
  emit(e, "};");
  emit_blank(e);
}
