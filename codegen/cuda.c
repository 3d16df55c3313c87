/* The CUDA target: one GPU, fp32 or bf16 (--precision bf16: below). The program is CUDA C++ (.cu) whose host
 * code calls the kernels of kernels/cuda/kernels_cuda.h (GEMMs through
 * cuBLASLt) on the device layer's stream, and each chain of elementwise
 * ops becomes one generated __global__ kernel that reads and writes each
 * tensor once. Model memory is the plan's one allocation on the GPU
 * (runtime/device_cuda.c); the kernels' workspaces (cuBLASLt's, the
 * attention backward's statistics, the norms' partial sums, the loss's
 * row sums) are scratch of the node that uses them, in the temporaries.
 *
 * Every mesh: the collectives are the core's rt_comm_* calls
 * (collectives.c) on device memory, which the NCCL backend of comm.h
 * (runtime/comm_nccl.c) carries; pipeline messages are the runtime's. The
 * tensor-parallel forms (tp_slice, the vocabulary-parallel embedding and
 * loss, per-rank dropout) take the rank's place from ctx->tp at run time,
 * as on the CPU (cpu_tp.c), so one program serves every tensor rank.
 *
 * bf16, on every mesh: the memory plan sizes the step's own values
 * (activations, their gradients, temporaries) at 2 bytes; weights stay
 * the fp32 masters, read through their bf16 working copy (W16, from
 * rt_dev_weights_bf16 of device_cuda.c), and the gradients of the weights,
 * the optimizer state, the graph's inputs and outputs (the loss) stay
 * fp32. Whether a value is bf16 is read off the plan (low()); each kernel
 * is called in its _bf16 form where its activations are, with typed
 * pointers, so a call that mixes the two wrongly does not compile. Between
 * ranks the activations and their gradients travel in bf16 (the
 * collectives of collectives.c and the pipeline messages, which the plan
 * keeps at 2 bytes); weight gradients, their reductions and the
 * vocabulary-parallel loss's row statistics stay fp32. */
#include <string.h>

#include "target.h"

/* Baked in by CMake (codegen/CMakeLists.txt); the defaults let this file
 * compile on its own. An empty SHARDC_RT_LIBS_CUDA means the compiler was
 * built where nvcc was not found, without the CUDA libraries. */
#ifndef SHARDC_SOURCE_DIR
#define SHARDC_SOURCE_DIR "."
#endif
#ifndef SHARDC_NVCC
#define SHARDC_NVCC "nvcc"
#endif
#ifndef SHARDC_OPENMP_FLAGS
#define SHARDC_OPENMP_FLAGS "-fopenmp"
#endif
#ifndef SHARDC_RT_LIBS_CUDA
#define SHARDC_RT_LIBS_CUDA ""
#endif
/* What the host compiler needs to share with the libraries: the
 * sanitizers of a sanitizer build. */
#ifndef SHARDC_CUDA_HOST_FLAGS
#define SHARDC_CUDA_HOST_FLAGS ""
#endif
/* 1 where the CUDA runtime links the NCCL backend (codegen/CMakeLists.txt):
 * without it the programs run on one rank only. */
#ifndef SHARDC_CUDA_NCCL
#define SHARDC_CUDA_NCCL 0
#endif
#ifndef SHARDC_CUDA_LINK_LIBS
#define SHARDC_CUDA_LINK_LIBS "-lcjson -lm"
#endif

/* The compute capability the programs are built for unless --cuda-arch
 * says otherwise: Hopper. */
#define CUDA_DEFAULT_ARCH "sm_90"

/* Bytes of cuBLASLt workspace each GEMM node gets (K_CUDA_GEMM_WORKSPACE of
 * kernels_cuda.h), plus the 256 bytes that align it: the temporaries are
 * only 64-byte aligned. */
#define CUDA_GEMM_WORKSPACE (((int64_t)32 << 20) + 256)

/* Rows of one chunk of the norms' backward (NORM_CHUNK of
 * kernels/cuda/norm.cu); main() checks the planned scratch against the
 * kernels' own k_cuda_*_scratch before it runs. */
#define CUDA_NORM_CHUNK 128

/* Threads per block of the generated kernels. */
#define CUDA_THREADS 256

/* What the target keeps while it writes one program. */
typedef struct CudaState {
  bool refused; /* the program was refused as a whole (check_supported): no more errors */
} CudaState;

static CudaState *cuda_state(CgEmitter *e) { return e->state; }

/* ---------------------------------------------------------------- shapes */


/* The bf16 programs: those whose plan sizes the step's values at 2 bytes. */
static bool bf16_mode(CgEmitter *e) { return e->plan->policy.low_bytes == 2; }

/* Whether the kernels see v as bf16: a weight (its working copy) or a
 * value the plan sized at 2 bytes an element. */
static bool low(CgEmitter *e, const IrValue *v) {
  if (!bf16_mode(e) || v->type.dtype == IR_I32 || v->type.dtype == IR_I64) return false;
  const PassBuf *b = cg_buf(e, v);
  if (b->region == PASS_REGION_WEIGHTS) return true;
  if (b->region == PASS_REGION_GRADS || b->region == PASS_REGION_NONE) return false;
  return b->bytes < cg_numel(v) * e->plan->real_bytes;
}

static const char *sfx(CgEmitter *e, const IrValue *v) { return low(e, v) ? "_bf16" : ""; }

/* A typed pointer to v: real * or, for a bf16 value, kc_bf16 * (a weight's
 * working copy). */
static const char *ref(CgEmitter *e, const IrValue *v) {
  const char *r = cg_ref(e, v);
  if (!low(e, v)) return r;
  if (cg_buf(e, v)->region == PASS_REGION_WEIGHTS) return ir_fmt("W16%s", r + 3);
  return ir_fmt("BF(%s)", r);
}

static const char *ctype(CgEmitter *e, const IrValue *v) { return low(e, v) ? "kc_bf16" : "real"; }

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* GEMMs that produce a gradient straight into its slot add (beta = 1). */
static bool into_grads(CgEmitter *e, const IrValue *out) {
  return cg_buf(e, out)->region == PASS_REGION_GRADS;
}

/* ------------------------------------------------- fused elementwise runs */

/* The operands a run reads from memory (each once) and the index each is
 * read at. */
typedef struct Load {
  const IrValue *v;
  const char *index;
  bool full; /* read at i: a whole 16 bytes at a time in the vector loop */
} Load;

typedef struct Fused {
  int first, last;
  const IrType *shape;
  Load *loads;
  int nloads;
  const IrValue **stores; /* the outputs that leave the kernel, in order */
  int nstores;
  /* The kernel has a loop of 16-byte accesses for the operands read whole
   * and the outputs, taken when their addresses allow: `width` elements a
   * thread, 4 (one float4 each) in an fp32 run, 8 where one of them is
   * bf16 (one uint4 of bf16, two float4 of fp32); `vec` is set while its
   * body is written. */
  bool vectorizable, vec;
  int width;
} Fused;

static Fused fused_of(CgEmitter *e, int first, int last) {
  Fused f = {.first = first, .last = last, .shape = &cg_node(e, first)->out[0]->type};
  int cap = 1, outs = 1;
  for (int k = first; k <= last; k++) cap += cg_node(e, k)->nin, outs += cg_node(e, k)->nout;
  f.loads = ir_alloc((size_t)cap * sizeof *f.loads);
  f.stores = ir_alloc((size_t)outs * sizeof *f.stores);
  for (int k = first; k <= last; k++) {
    const IrNode *n = cg_node(e, k);
    for (int j = 0; j < n->nin; j++) {
      const IrValue *v = n->in[j];
      bool seen = cg_in_run(e, f.first, f.last, v);
      for (int l = 0; l < f.nloads && !seen; l++) seen = f.loads[l].v == v;
      if (seen) continue;
      CgBc bc = cg_bcast(&v->type, f.shape);
      const char *index = bc.kind == CG_BC_FULL     ? "i"
                          : bc.kind == CG_BC_SCALAR ? "0"
                          : bc.kind == CG_BC_SUFFIX ? ir_fmt("i %% %lld", (long long)bc.size)
                          : bc.kind == CG_BC_ROW    ? ir_fmt("i / %lld", (long long)bc.size)
                                                 : cg_bcast_index(&v->type, f.shape, "i");
      f.loads[f.nloads++] = (Load){v, index, bc.kind == CG_BC_FULL};
    }
    for (int j = 0; j < n->nout; j++)
      if (cg_buf(e, n->out[j])->region != PASS_REGION_NONE) f.stores[f.nstores++] = n->out[j];
  }
  bool bf = false;
  for (int l = 0; l < f.nloads; l++) bf |= f.loads[l].full && low(e, f.loads[l].v);
  for (int k = 0; k < f.nstores; k++) bf |= low(e, f.stores[k]);
  f.width = bf ? 8 : 4;
  int64_t N = ir_type_numel(f.shape);
  f.vectorizable = N >= f.width;
  return f;
}

static const char *operand(CgEmitter *e, const Fused *f, const IrValue *v) {
  if (cg_in_run(e, f->first, f->last, v)) return cg_reg(e, v);
  for (int l = 0; l < f->nloads; l++)
    if (f->loads[l].v == v)
      return f->vec && f->loads[l].full ? ir_fmt("x%dl[l]", l)
             : low(e, v)                ? ir_fmt("cu_f(x%d[%s])", l, f->loads[l].index)
                                        : ir_fmt("x%d[%s]", l, f->loads[l].index);
  unreachable();
}

static const char *kernel_name(CgEmitter *e, int first) {
  return ir_fmt("fused_c%d_n%d", e->chunk ? e->chunk->index : 0, first);
}

static bool grads_store(CgEmitter *e, const IrValue *v) {
  return cg_buf(e, v)->region == PASS_REGION_GRADS;
}

/* The run's nodes at element i: each value, and each output that leaves
 * the run stored (added, for a gradient slot); in the vector loop into
 * lane l of the output's four. */
static void emit_element(CgEmitter *e, const Fused *f) {
  int nstore = 0;
  for (int k = f->first; k <= f->last; k++) {
    const IrNode *n = cg_node(e, k);
    const char **a = ir_alloc((size_t)(n->nin ? n->nin : 1) * sizeof *a);
    for (int j = 0; j < n->nin; j++) a[j] = operand(e, f, n->in[j]);
    for (int j = 0; j < n->nout; j++) {
      const PassBuf *b = cg_buf(e, n->out[j]);
      const char *x = cg_formula(n, j, a);
      emit(e, "const real %s = %s;", cg_reg(e, n->out[j]), x ? x : "0");
      if (b->region != PASS_REGION_NONE && low(e, n->out[j]))
        emit(e, f->vec ? "y%dl[l] = %s;" : "y%d[i] = cu_b(%s);", nstore++, cg_reg(e, n->out[j]));
      else if (b->region != PASS_REGION_NONE)
        emit(e, f->vec ? "y%dl[l] %s= %s;" : "y%d[i] %s= %s;", nstore++,
             b->region == PASS_REGION_GRADS ? "+" : "", cg_reg(e, n->out[j]));
      else if (b->uses == 0)
        emit(e, "(void)%s;", cg_reg(e, n->out[j]));
    }
  }
}

/* The 16-byte accesses of the vector loop: pointer p of type t read or
 * written at vector k of thread q's `width` elements. */
static const char *vec_at(const Fused *f, const char *t, const char *p, int l, int k, bool bf) {
  int per = bf ? 8 : 4;
  if (f->width == per) return ir_fmt("reinterpret_cast<%s *>(%s%d)[q]", t, p, l);
  return ir_fmt("reinterpret_cast<%s *>(%s%d)[%d * q + %d]", t, p, l, f->width / per, k);
}

/* Operand or output p%d's `width` elements into fp32 registers p%dl: an
 * fp32 one as float4s, a bf16 one as a uint4 whose 32-bit words hold two
 * each (the lower address in the low half), widened by cu_f as the
 * scalar loop widens them. */
static void emit_vec_read(CgEmitter *e, const Fused *f, const char *p, int l, bool bf,
                          const char *qual) {
  char *lanes = ir_strdup("");
  if (bf) {
    emit(e, "const uint4 %s%dq = %s;", p, l, vec_at(f, "const uint4", p, l, 0, true));
    for (const char *c = "xyzw"; *c; c++)
      lanes = ir_fmt("%s%scu_f_lo(%s%dq.%c), cu_f_hi(%s%dq.%c)", lanes, *lanes ? ", " : "", p, l,
                     *c, p, l, *c);
  }
  for (int k = 0; !bf && k < f->width / 4; k++) {
    const char *q = ir_fmt("%s%dq%s", p, l, k ? ir_fmt("%d", k) : "");
    emit(e, "const float4 %s = %s;", q, vec_at(f, "const float4", p, l, k, false));
    lanes = ir_fmt("%s%s%s.x, %s.y, %s.z, %s.w", lanes, k ? ", " : "", q, q, q, q);
  }
  emit(e, "%sreal %s%dl[%d] = {%s};", qual, p, l, f->width, lanes);
}

/* Output s's registers back to memory, a bf16 one rounded by cu_b (in
 * cu_b2) as the scalar loop rounds it. */
static void emit_vec_write(CgEmitter *e, const Fused *f, int s, bool bf) {
  if (bf) {
    emit(e, "%s = make_uint4(cu_b2(y%dl[0], y%dl[1]), cu_b2(y%dl[2], y%dl[3]), "
            "cu_b2(y%dl[4], y%dl[5]), cu_b2(y%dl[6], y%dl[7]));",
         vec_at(f, "uint4", "y", s, 0, true), s, s, s, s, s, s, s, s);
    return;
  }
  for (int k = 0; k < f->width / 4; k++)
    emit(e, "%s = make_float4(y%dl[%d], y%dl[%d], y%dl[%d], y%dl[%d]);",
         vec_at(f, "float4", "y", s, k, false), s, 4 * k, s, 4 * k + 1, s, 4 * k + 2, s, 4 * k + 3);
}

/* The vector loop: `width` elements a thread, the whole operands and the
 * outputs moved 16 bytes at a time, every other operand read by its index. */
static void emit_vector_loop(CgEmitter *e, Fused *f) {
  int w = f->width;
  emit(e, "if (vec) {");
  e->depth++;
  emit(e, "for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < %lldLL; q += step) {",
       (long long)(ir_type_numel(f->shape) / w));
  e->depth++;
  for (int l = 0; l < f->nloads; l++)
    if (f->loads[l].full) emit_vec_read(e, f, "x", l, low(e, f->loads[l].v), "const ");
  for (int s = 0; s < f->nstores; s++) {
    if (grads_store(e, f->stores[s])) emit_vec_read(e, f, "y", s, false, "");
    else emit(e, "real y%dl[%d] = {%s};", s, w, w == 4 ? "0, 0, 0, 0" : "0, 0, 0, 0, 0, 0, 0, 0");
  }
  emit(e, "#pragma unroll");
  emit(e, "for (int l = 0; l < %d; l++) {", w);
  e->depth++;
  emit(e, "const int64_t i = %d * q + l;", w);
  emit(e, "(void)i;");
  f->vec = true;
  emit_element(e, f);
  f->vec = false;
  e->depth--;
  emit(e, "}");
  for (int s = 0; s < f->nstores; s++) emit_vec_write(e, f, s, low(e, f->stores[s]));
  e->depth--;
  emit(e, "}");
  /* The last N % width elements, if any, are the scalar loop's. */
  if (ir_type_numel(f->shape) % w == 0) emit(e, "return;");
  e->depth--;
  emit(e, "}");
}

/* The __global__ kernel of the run first..last: a grid-stride loop over
 * its elements, each operand read once, each output that leaves the run
 * written once; with vec set (by the launch, from the addresses) `width`
 * elements at a time, and the scalar loop over the rest. */
static void emit_fused_kernel(CgEmitter *e, int first, int last) {
  Fused f = fused_of(e, first, last);
  char *params = ir_strdup("int vec");
  for (int l = 0; l < f.nloads; l++)
    params = ir_fmt("%s, const %s *__restrict__ x%d", params, ctype(e, f.loads[l].v), l);
  for (int s = 0; s < f.nstores; s++)
    params = ir_fmt("%s, %s *__restrict__ y%d", params, ctype(e, f.stores[s]), s);
  emit(e, "__global__ void %s(%s) {", kernel_name(e, first), params);
  e->depth++;
  emit(e, "const int64_t step = (int64_t)gridDim.x * blockDim.x;");
  if (f.vectorizable) emit_vector_loop(e, &f);
  else emit(e, "(void)vec;");
  int64_t N = ir_type_numel(f.shape), tail = N / f.width * f.width;
  const char *from = f.vectorizable && tail < N ? ir_fmt("(vec ? %lldLL : 0) + ", (long long)tail) : "";
  emit(e, "for (int64_t i = %sblockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < %lldLL; i += step) {",
       from, (long long)N);
  e->depth++;
  emit_element(e, &f);
  e->depth--;
  emit(e, "}");
  e->depth--;
  emit(e, "}");
  emit_blank(e);
}

/* Whether node j runs in an earlier GEMM's epilogue (below). */
static bool in_epilogue(CgEmitter *e, int j);

static bool all_written(CgEmitter *e, int first, int last) {
  for (int k = first; k <= last; k++)
    if (!e->target->writes_op(cg_node(e, k)->op)) return false;
  return true;
}

/* Every fused run of every chunk, in the order the core hands them to
 * cuda_fused, as kernels at file scope: a kernel cannot be defined inside
 * forward() or backward(), so the prologue walks the plans first. */
static void emit_fused_kernels(CgEmitter *e) {
  IrGraph *g0 = e->g;
  const PassMemPlan *p0 = e->plan;
  const CgChunk *c0 = e->chunk;
  for (int c = 0; c < e->nchunks; c++) {
    e->chunk = &e->chunks[c], e->g = e->chunk->g, e->plan = e->chunk->plan;
    const PassMemPlan *p = e->plan;
    for (int i = 0; i < e->g->nodes.len; i++) {
      if (p->view[i] || p->absorbed[i] || !p->fused[i]) continue;
      int last = p->group_last[i];
      if (all_written(e, i, last) && !in_epilogue(e, i)) emit_fused_kernel(e, i, last);
      i = last;
    }
  }
  e->g = g0, e->plan = p0, e->chunk = c0;
}

static void cuda_fused(CgEmitter *e, int first, int last) {
  if (in_epilogue(e, first)) {
    emit(e, "/* in the epilogue of the GEMM that computes its operand */");
    return;
  }
  Fused f = fused_of(e, first, last);
  for (int k = first; k <= last; k++) {
    const IrNode *n = cg_node(e, k);
    for (int j = 0; j < n->nout; j++)
      if (!cg_formula(n, j, (const char *[3]){"a", "b", "c"}))
        cg_error(e, n, "no formula for this elementwise op (ir/ops.def)");
  }
  /* The vector loop when every pointer it moves 16 bytes at a time through
   * is 16-byte aligned (the plan's 64-byte regions hold whole vectors), and
   * unless SHARD_CUDA_VECTOR=0 turns it off (cu_vector). */
  char *args = ir_strdup(""), *aligned = ir_strdup("");
  for (int l = 0; l < f.nloads; l++) {
    args = ir_fmt("%s, %s", args, ref(e, f.loads[l].v));
    if (f.loads[l].full) aligned = ir_fmt("%s && CU_ALIGNED16(%s)", aligned, ref(e, f.loads[l].v));
  }
  for (int s = 0; s < f.nstores; s++) {
    args = ir_fmt("%s, %s", args, ref(e, f.stores[s]));
    aligned = ir_fmt("%s && CU_ALIGNED16(%s)", aligned, ref(e, f.stores[s]));
  }
  int64_t N = ir_type_numel(f.shape);
  emit(e, "{");
  e->depth++;
  emit(e, "const int vec = %s;", f.vectorizable ? ir_fmt("cu_vector()%s", aligned) : "0");
  emit(e, "CU_LAUNCH(cu_grid(vec ? %lldLL : %lldLL), %s)(vec%s);", (long long)(N / f.width),
       (long long)N, kernel_name(e, first), args);
  e->depth--;
  emit(e, "}");
  emit(e, "CU_LAUNCHED();");
}

/* ------------------------------------------------------------------ GEMMs */

/* The node's cuBLASLt workspace: its scratch, rounded up to 256 bytes. */
static void gemm_workspace(CgEmitter *e, int index) {
  emit(e, "k_cuda_gemm_init(CU_ALIGN256(TMP(%lld)), %lld);",
       (long long)e->plan->scratch_offset[index], (long long)(CUDA_GEMM_WORKSPACE - 256));
}

/* The cuBLASLt types of a product's inputs (both bf16 or both fp32) and
 * output; false, with an error, for inputs of two precisions. */
typedef struct GemmTypes {
  bool ab, c; /* bf16 */
} GemmTypes;

static bool gemm_types(CgEmitter *e, const IrNode *n, const IrValue *a, const IrValue *b,
                       const IrValue *c, GemmTypes *t) {
  t->ab = low(e, a), t->c = low(e, c);
  if (t->ab == low(e, b)) return true;
  cg_error(e, n, "bf16: a product of a bf16 and an fp32 operand");
  return false;
}

static const char *kc_type(bool bf) { return bf ? "KC_BF16" : "KC_F32"; }

/* A (strided batched when batch > 1) GEMM; fp32 throughout as k_cuda_gemm,
 * otherwise k_cuda_gemm_ex with the types. */
static void gemm_t(CgEmitter *e, GemmTypes t, int ta, int tb, int64_t batch, int64_t M, int64_t N,
                   int64_t K, const char *A, int64_t lda, int64_t sa, const char *B, int64_t ldb,
                   int64_t sb, bool add, const char *C, int64_t ldc, int64_t sc) {
  if (!t.ab && !t.c && batch == 1)
    emit(e, "k_cuda_gemm(%d, %d, %lld, %lld, %lld, 1.0f, %s, %lld, %s, %lld, %s, %s, %lld);", ta,
         tb, (long long)M, (long long)N, (long long)K, A, (long long)lda, B, (long long)ldb,
         add ? "1.0f" : "0.0f", C, (long long)ldc);
  else if (!t.ab && !t.c)
    emit(e, "k_cuda_gemm_batched(%d, %d, %lld, %lld, %lld, %lld, 1.0f, %s, %lld, %lld, %s, %lld, "
            "%lld, %s, %s, %lld, %lld);",
         ta, tb, (long long)batch, (long long)M, (long long)N, (long long)K, A, (long long)lda,
         (long long)sa, B, (long long)ldb, (long long)sb, add ? "1.0f" : "0.0f", C,
         (long long)ldc, (long long)sc);
  else
    emit(e, "k_cuda_gemm_ex(%s, %s, %d, %d, %lld, %lld, %lld, %lld, 1.0f, %s, %lld, %lld, %s, "
            "%lld, %lld, %s, %s, %lld, %lld);",
         kc_type(t.ab), kc_type(t.c), ta, tb, (long long)batch, (long long)M, (long long)N,
         (long long)K, A, (long long)lda, (long long)sa, B, (long long)ldb, (long long)sb,
         add ? "1.0f" : "0.0f", C, (long long)ldc, (long long)sc);
}

static void gemm(CgEmitter *e, GemmTypes t, int ta, int tb, int64_t M, int64_t N, int64_t K,
                 const char *A, int64_t lda, const char *B, int64_t ldb, bool add, const char *C,
                 int64_t ldc) {
  gemm_t(e, t, ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, add, C, ldc, 0);
}

/* --------------------------------------------------------- GEMM epilogues */

/* Where the graph has linear -> gelu, the GELU runs in cuBLASLt's epilogue
 * (keeping the pre-activation, the linear's output, for the backward); in
 * the backward, linear_dx -> gelu_grad runs as one GEMM with the GELU's
 * gradient in the epilogue, and a bias gradient (sum_to over rows) of the
 * gelu_grad's output or of a linear_dw's dy goes into that GEMM's
 * epilogue too. The absorbed nodes write no code of their own. A fused
 * GEMM writes an output before the node that defines it in the plan: that
 * is allowed only where no other buffer sharing its bytes is live in
 * between (free_early), and within one phase. --no-gemm-epilogue turns it
 * all off; kernels/cuda/gemm.cu runs an epilogue unfused where cuBLASLt has
 * no algorithm for it. */
static bool epilogues_on(CgEmitter *e) { return !cg_target_arg(e, "--no-gemm-epilogue", NULL); }

static int phase_of(CgEmitter *e, int i) {
  return i >= e->plan->wboundary ? 2 : i >= e->plan->boundary ? 1 : 0;
}

/* Whether v (an output of node `at`'s successor `def`) may be written by
 * node `at` already: no other buffer overlapping its bytes is live over
 * positions at+1 .. def+1, except `skip` (a value the fused node neither
 * reads nor writes), and no node from `from` to `def` has kernel scratch
 * there: from = at for an output the GEMM writes (its cuBLASLt workspace is
 * in use meanwhile), at + 1 for one copied in after the GEMM. */
static bool free_early(CgEmitter *e, const IrValue *v, int at, int def, const IrValue *skip,
                       int from) {
  const PassBuf *vb = cg_buf(e, v);
  if (vb->region == PASS_REGION_NONE || vb->region == PASS_REGION_GRADS || vb->alias)
    return false;
  if (phase_of(e, at) != phase_of(e, def)) return false;
  for (int k = 0; k < e->plan->nbufs; k++) {
    const PassBuf *b = &e->plan->bufs[k];
    if (b == vb || b->alias == v || b->region != vb->region) continue;
    if (skip && (b->value == skip || b->alias == skip)) continue;
    bool overlap = b->offset < vb->offset + vb->bytes && vb->offset < b->offset + b->bytes;
    if (overlap && b->first <= def + 1 && b->last >= at + 1) return false;
  }
  for (int m = from; m <= def && vb->region == PASS_REGION_TEMPORARIES; m++) {
    int64_t off = e->plan->scratch_offset[m], bytes = e->plan->scratch_bytes[m];
    if (off >= 0 && off < vb->offset + vb->bytes && vb->offset < off + bytes) return false;
  }
  return true;
}

static int index_of(CgEmitter *e, const IrValue *v) {
  if (v->kind != IR_VAL_NODE) return -1;
  for (int i = 0; i < e->g->nodes.len; i++)
    if (cg_node(e, i) == v->def) return i;
  return -1;
}

/* Node j as an elementwise op of its own (a fused run of one node). */
static bool alone(CgEmitter *e, int j, IrOp op) {
  const PassMemPlan *p = e->plan;
  return j >= 0 && j < e->g->nodes.len && cg_node(e, j)->op == op && p->fused[j] &&
         p->group_first[j] == j && p->group_last[j] == j && !p->view[j] && !p->absorbed[j];
}

/* The gelu that linear node i absorbs (its next node, reading its
 * output), or -1. */
static int gelu_of_linear(CgEmitter *e, int i) {
  const IrNode *n = cg_node(e, i);
  if (!epilogues_on(e) || n->op != IR_OP_LINEAR || n->nin != 3 || !alone(e, i + 1, IR_OP_GELU))
    return -1;
  const IrValue *y = n->out[0], *g = cg_node(e, i + 1)->out[0];
  if (cg_node(e, i + 1)->in[0] != y || into_grads(e, y) || cg_dim(y, -1) % 8) return -1;
  if (low(e, g) != low(e, y) || low(e, n->in[2]) != low(e, y)) return -1;
  return free_early(e, g, i, i + 1, NULL, i) ? i + 1 : -1;
}

/* The gelu_grad that linear_dx node i absorbs (the one reader of its
 * output, as the gradient), or -1. */
static int dgelu_of_linear_dx(CgEmitter *e, int i) {
  const IrNode *n = cg_node(e, i);
  if (!epilogues_on(e) || n->op != IR_OP_LINEAR_DX) return -1;
  const IrValue *dx = n->out[0];
  if (cg_buf(e, dx)->uses != 1 || into_grads(e, dx) || cg_dim(dx, -1) % 8) return -1;
  for (int j = i + 1; j < e->g->nodes.len; j++) {
    const IrNode *m = cg_node(e, j);
    bool reads = false;
    for (int k = 0; k < m->nin; k++) reads |= m->in[k] == dx;
    if (!reads) continue;
    if (!alone(e, j, IR_OP_GELU_GRAD) || m->in[1] != dx || m->in[0] == dx) return -1;
    const IrValue *x = m->in[0], *g = m->out[0];
    if (low(e, x) != low(e, dx) || low(e, g) != low(e, dx)) return -1;
    return free_early(e, g, i, j, dx, i) ? j : -1;
  }
  return -1;
}

/* A GEMM's epilogue writes a bias gradient into a stash after its cuBLASLt
 * workspace (in its scratch: cuda_scratch_bytes), from where it is copied
 * to the sum_to's own buffer once the GEMM is done: the plan may well have
 * put that buffer over the workspace, which the GEMM is using. */
static int64_t stash_bytes(int64_t n) { return (n * 4 + 255) / 256 * 256; }

/* Whether node i's stash (the end of its scratch) leaves y alone. */
static bool clear_of_stash(CgEmitter *e, const IrValue *y, int i) {
  const PassBuf *b = cg_buf(e, y);
  int64_t lo = e->plan->scratch_offset[i] + CUDA_GEMM_WORKSPACE - 256;
  int64_t hi = e->plan->scratch_offset[i] + e->plan->scratch_bytes[i];
  return b->region != PASS_REGION_TEMPORARIES || b->offset >= hi || b->offset + b->bytes <= lo;
}

static bool bgrad_fits(CgEmitter *e, const IrValue *y, int i, int k) {
  return e->plan->scratch_bytes[i] >= CUDA_GEMM_WORKSPACE + stash_bytes(cg_numel(y)) &&
         clear_of_stash(e, y, i) && free_early(e, y, i, k, NULL, i + 1);
}

/* The node that computes bias gradient k (a sum_to over the rows of a
 * gelu_grad's output or of a linear_dw's dy, into an fp32 temporary that
 * is added to its slot after k) in its epilogue, or -1. */
static int bgrad_owner(CgEmitter *e, int k) {
  const IrNode *n = cg_node(e, k);
  if (!epilogues_on(e) || n->op != IR_OP_SUM_TO || e->plan->view[k] || e->plan->chunked[k])
    return -1;
  const IrValue *x = n->in[0], *y = n->out[0];
  if (cg_bcast(&y->type, &x->type).kind != CG_BC_SUFFIX || cg_dim(y, -1) != cg_dim(x, -1) || low(e, y))
    return -1;
  int j = index_of(e, x);
  if (j > 0 && cg_node(e, j)->op == IR_OP_GELU_GRAD)
    for (int i = 0; i < j; i++)
      if (cg_node(e, i)->op == IR_OP_LINEAR_DX && dgelu_of_linear_dx(e, i) == j &&
          bgrad_fits(e, y, i, k))
        return i;
  for (int i = 0; i < k; i++) {
    const IrNode *m = cg_node(e, i);
    if (m->op == IR_OP_LINEAR_DW && m->in[1] == x && bgrad_fits(e, y, i, k)) return i;
  }
  return -1;
}

/* The bias gradient node i computes in its epilogue, or NULL. */
static const IrValue *bgrad_of(CgEmitter *e, int i, const IrValue *summed) {
  for (int k = i + 1; k < e->g->nodes.len; k++)
    if (cg_node(e, k)->op == IR_OP_SUM_TO && cg_node(e, k)->in[0] == summed &&
        bgrad_owner(e, k) == i)
      return cg_node(e, k)->out[0];
  return NULL;
}

/* Whether node j's code is written by an earlier GEMM's epilogue. */
static bool in_epilogue(CgEmitter *e, int j) {
  const IrNode *n = cg_node(e, j);
  if (n->op == IR_OP_GELU) return j > 0 && gelu_of_linear(e, j - 1) == j;
  if (n->op == IR_OP_GELU_GRAD) {
    int i = index_of(e, n->in[1]);
    return i >= 0 && dgelu_of_linear_dx(e, i) == j;
  }
  if (n->op == IR_OP_SUM_TO) return bgrad_owner(e, j) >= 0;
  return false;
}

/* One k_cuda_gemm_fused call of node `index`: C = epi(op(A) op(B)) with
 * the epilogue's bias (read) or bias gradient (fp32, by way of the stash)
 * and aux; leading dims those of dense row-major operands. */
static void gemm_fused(CgEmitter *e, int index, GemmTypes t, const char *epi, const IrValue *bias,
                       const IrValue *aux, int ta, int tb, int64_t M, int64_t N, int64_t K,
                       const char *A, int64_t lda, const char *B, int64_t ldb, bool add,
                       const char *C) {
  bool grad = strstr(epi, "BGRAD") != NULL;
  const char *stash = ir_fmt("(float *)((char *)CU_ALIGN256(TMP(%lld)) + %lld)",
                             (long long)e->plan->scratch_offset[index],
                             (long long)(CUDA_GEMM_WORKSPACE - 256));
  emit(e, "{");
  e->depth++;
  emit(e, "const KcGemmEpi epi = {%s, %s, %s, %s, %lld};", epi,
       grad ? stash : bias ? ir_fmt("(void *)%s", ref(e, bias)) : "NULL",
       kc_type(!grad && bias && low(e, bias)), aux ? ir_fmt("(void *)%s", ref(e, aux)) : "NULL",
       (long long)(aux ? N : 0));
  emit(e, "k_cuda_gemm_fused(%s, %s, &epi, %d, %d, %lld, %lld, %lld, 1.0f, %s, %lld, %s, %lld, "
          "%s, %s, %lld);",
       kc_type(t.ab), kc_type(t.c), ta, tb, (long long)M, (long long)N, (long long)K, A,
       (long long)lda, B, (long long)ldb, add ? "1.0f" : "0.0f", C, (long long)N);
  if (grad)
    emit(e, "CU_CHECK(cudaMemcpyAsync(%s, %s, %lld * sizeof(float), cudaMemcpyDeviceToDevice, "
            "k_cuda_stream()));",
         ref(e, bias), stash, (long long)cg_numel(bias));
  e->depth--;
  emit(e, "}");
}

/* a[..., m, k] @ b[..., k, n]: one GEMM when b is shared and a's rows are
 * contiguous, a strided batched GEMM otherwise (a shared operand has
 * stride 0). */
static void emit_matmul(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *a = n->in[0], *b = n->in[1], *y = n->out[0];
  if (a->type.rank < 2 || b->type.rank < 2 || y->type.rank < 2) {
    cg_error(e, n, "operands of rank below 2");
    return;
  }
  int ta = (int)ir_attr_int(n, "transpose_a"), tb = (int)ir_attr_int(n, "transpose_b");
  int64_t m = cg_dim(y, -2), nn = cg_dim(y, -1), k = ta ? cg_dim(a, -2) : cg_dim(a, -1);
  int64_t batch = cg_numel(y) / (m * nn), ba = cg_numel(a) / (m * k), bb = cg_numel(b) / (k * nn);
  int64_t lda = ta ? m : k, ldb = tb ? k : nn;
  bool add = into_grads(e, y);
  GemmTypes t;
  if (!gemm_types(e, n, a, b, y, &t)) return;
  gemm_workspace(e, index);
  if (batch == 1) {
    gemm(e, t, ta, tb, m, nn, k, ref(e, a), lda, ref(e, b), ldb, add, ref(e, y), nn);
  } else if (bb == 1 && !ta && ba == batch) {
    gemm(e, t, 0, tb, batch * m, nn, k, ref(e, a), lda, ref(e, b), ldb, add, ref(e, y), nn);
  } else if ((ba == 1 || ba == batch) && (bb == 1 || bb == batch)) {
    gemm_t(e, t, ta, tb, batch, m, nn, k, ref(e, a), lda, ba == 1 ? 0 : m * k, ref(e, b), ldb,
           bb == 1 ? 0 : k * nn, add, ref(e, y), nn, m * nn);
  } else {
    cg_error(e, n, "batch dims that neither match nor are shared");
  }
}

/* x[..., in] @ w + bias; w is [in, out], or [out, in] when transposed. The
 * bias goes into cuBLASLt's epilogue unless the output is added into a
 * gradient slot (the epilogue would add it on every call). */
static void emit_linear(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *w = n->in[1], *y = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t in = cg_dim(x, -1), out = cg_dim(y, -1), rows = cg_rows(x);
  bool add = into_grads(e, y);
  GemmTypes t;
  if (!gemm_types(e, n, x, w, y, &t)) return;
  gemm_workspace(e, index);
  int j = gelu_of_linear(e, index);
  if (j >= 0) {
    gemm_fused(e, index, t, "KC_EPI_BIAS_GELU_AUX", n->in[2], y, 0, tr, rows, out, in, ref(e, x), in,
               ref(e, w), tr ? in : out, false, ref(e, cg_node(e, j)->out[0]));
    return;
  }
  /* The epilogue's bias is of the output's type. */
  if (n->nin == 3 && !add && low(e, n->in[2]) == t.c) {
    emit(e, "k_cuda_gemm_epilogue(%s, %s, KC_EPI_BIAS, %s, 0, %d, %lld, %lld, %lld, 1.0f, "
            "%s, %lld, %s, %lld, 0.0f, %s, %lld);",
         kc_type(t.ab), kc_type(t.c), ref(e, n->in[2]), tr, (long long)rows, (long long)out,
         (long long)in, ref(e, x), (long long)in, ref(e, w), (long long)(tr ? in : out),
         ref(e, y), (long long)out);
    return;
  }
  gemm(e, t, 0, tr, rows, out, in, ref(e, x), in, ref(e, w), tr ? in : out, add, ref(e, y), out);
  if (n->nin == 3)
    emit(e, "k_cuda_add_bias%s(%s, %s, %lld, %lld);", sfx(e, y), ref(e, y), ref(e, n->in[2]),
         (long long)rows, (long long)out);
}

/* dx[..., in] = dy[..., out] w^T (w^T^T = w when transposed). */
static void emit_linear_dx(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *dy = n->in[0], *w = n->in[1], *dx = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t out = cg_dim(dy, -1), in = cg_dim(dx, -1);
  GemmTypes t;
  if (!gemm_types(e, n, dy, w, dx, &t)) return;
  gemm_workspace(e, index);
  int j = dgelu_of_linear_dx(e, index);
  if (j >= 0) {
    const IrNode *g = cg_node(e, j);
    const IrValue *db = bgrad_of(e, index, g->out[0]);
    gemm_fused(e, index, t, db ? "KC_EPI_DGELU_BGRAD" : "KC_EPI_DGELU", db, g->in[0], 0, !tr,
               cg_rows(dy), in, out, ref(e, dy), out, ref(e, w), tr ? in : out, false,
               ref(e, g->out[0]));
    return;
  }
  gemm(e, t, 0, !tr, cg_rows(dy), in, out, ref(e, dy), out, ref(e, w), tr ? in : out,
       into_grads(e, dx), ref(e, dx), in);
}

/* dw = x^T dy [in, out], or dy^T x [out, in] when transposed, summed over
 * every leading dim by the GEMM's inner dimension. */
static void emit_linear_dw(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *dy = n->in[1], *dw = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t in = cg_dim(x, -1), out = cg_dim(dy, -1), rows = cg_rows(x);
  bool add = into_grads(e, dw);
  GemmTypes t;
  if (!gemm_types(e, n, x, dy, dw, &t)) return;
  gemm_workspace(e, index);
  /* dy's bias gradient: the sum over the GEMM's k of its dy operand. */
  const IrValue *db = bgrad_of(e, index, dy);
  if (db && tr)
    gemm_fused(e, index, t, "KC_EPI_BGRAD_A", db, NULL, 1, 0, out, in, rows, ref(e, dy), out, ref(e, x),
               in, add, ref(e, dw));
  else if (db)
    gemm_fused(e, index, t, "KC_EPI_BGRAD_B", db, NULL, 1, 0, in, out, rows, ref(e, x), in, ref(e, dy),
               out, add, ref(e, dw));
  else if (tr)
    gemm(e, t, 1, 0, out, in, rows, ref(e, dy), out, ref(e, x), in, add, ref(e, dw), in);
  else
    gemm(e, t, 1, 0, in, out, rows, ref(e, x), in, ref(e, dy), out, add, ref(e, dw), out);
}

/* ----------------------------------------------------------------- layout */

/* y = x, a cast where one is bf16 and the other not. */
static void emit_copy(CgEmitter *e, const IrValue *y, const IrValue *x) {
  if (low(e, x) != low(e, y))
    emit(e, "k_cuda_cast_%s(%s, %s, %lld);", low(e, y) ? "f32_bf16" : "bf16_f32", ref(e, y),
         ref(e, x), (long long)cg_numel(x));
  else
    emit(e, "CU_CHECK(cudaMemcpyAsync(%s, %s, %lld * sizeof(%s), cudaMemcpyDeviceToDevice, "
            "k_cuda_stream()));",
         ref(e, y), ref(e, x), (long long)cg_numel(x), ctype(e, x));
}

/* The shared layout calls (layout_ops.c) take untyped pointers: for bf16
 * the prologue's cu_bf16_* wrappers. */
static const char *layout_prefix(CgEmitter *e, const IrNode *n) {
  return low(e, n->in[0]) ? "cu_bf16_" : "k_cuda_";
}

static void emit_transpose(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (!cg_transpose_call(e, n, layout_prefix(e, n))) emit_copy(e, n->out[0], n->in[0]);
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
  int axis = norm_axis(ir_attr_int(n, "axis"), x->type.rank);
  int64_t outer = cg_dims_prod(&x->type, 0, axis), cols = cg_numel(x) / outer, part = cols / n->nout;
  for (int j = 0; j < n->nout; j++)
    emit(e, "k_cuda_copy2d%s(%s, %lld, %s%s, %lld, %lld, %lld);", sfx(e, x), ref(e, n->out[j]), (long long)part,
         ref(e, x), j ? ir_fmt(" + %lld", (long long)(j * part)) : "", (long long)cols,
         (long long)outer, (long long)part);
}

static void emit_concat(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *y = n->out[0];
  int axis = norm_axis(ir_attr_int(n, "axis"), y->type.rank);
  int64_t outer = cg_dims_prod(&y->type, 0, axis), cols = cg_numel(y) / outer, at = 0;
  for (int j = 0; j < n->nin; j++) {
    int64_t c = cg_numel(n->in[j]) / outer;
    emit(e, "k_cuda_copy2d%s(%s%s, %lld, %s, %lld, %lld, %lld);", sfx(e, y), ref(e, y),
         at ? ir_fmt(" + %lld", (long long)at) : "", (long long)cols, ref(e, n->in[j]),
         (long long)c, (long long)outer, (long long)c);
    at += c;
  }
}

/* sum_to: x summed down to the shape broadcasting stretched it from. */
static void emit_sum_to(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *y = n->out[0];
  CgBc bc = cg_bcast(&y->type, &x->type);
  int64_t N = cg_numel(x), M = cg_numel(y);
  switch (bc.kind) {
  case CG_BC_FULL: emit_copy(e, y, x); return;
  default: break;
  }
  /* A bf16 sum (not a weight's gradient): the prologue's kernel, one
   * thread per column adding the rows in order in double. */
  if (low(e, y) && bc.kind != CG_BC_ROW) {
    emit(e, "CU_LAUNCH(cu_grid(%lldLL), cu_sum_rows)(%s, %s, %lldLL, "
            "%lldLL);",
         (long long)M, ref(e, y), ref(e, x), (long long)(N / M), (long long)M);
    emit(e, "CU_LAUNCHED();");
    return;
  }
  switch (bc.kind) {
  case CG_BC_FULL: return;
  case CG_BC_SCALAR:
  case CG_BC_SUFFIX:
    emit(e, "k_cuda_sum_rows%s(%s, %s, %lld, %lld);", sfx(e, x), ref(e, y), ref(e, x), (long long)(N / M),
         (long long)M);
    return;
  case CG_BC_ROW:
    emit(e, "CU_LAUNCH(cu_grid(%lldLL), cu_sum_last)(%s, %s, %lldLL, "
            "%lldLL);",
         (long long)M, ref(e, y), ref(e, x), (long long)M, (long long)bc.size);
    emit(e, "CU_LAUNCHED();");
    return;
  case CG_BC_GENERAL: cg_error(e, n, "a broadcast the CUDA target does not sum yet"); return;
  }
}

/* ------------------------------------------------------- the other kernels */

/* The forward keeps no statistics (NULL scratch): the backward recomputes
 * them into its own. */
static void emit_attention(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *q = n->in[0];
  int64_t H, K, d;
  cg_attention_dims(n, &H, &K, &d);
  int causal = (int)ir_attr_int(n, "causal");
  if (n->op == IR_OP_ATTENTION)
    emit(e, "k_cuda_attention_fwd%s(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %d, NULL);",
         sfx(e, q), ref(e, n->out[0]), ref(e, q), ref(e, n->in[1]), ref(e, n->in[2]), (long long)cg_dim(q, 0),
         (long long)cg_dim(q, 1), (long long)H, (long long)K, (long long)d, causal);
  else
    emit(e, "k_cuda_attention_bwd%s(%s, %s, %s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %lld, "
            "%lld, %d, %s);",
         sfx(e, q), ref(e, n->out[0]), ref(e, n->out[1]), ref(e, n->out[2]), ref(e, n->in[4]), ref(e, q),
         ref(e, n->in[1]), ref(e, n->in[2]), ref(e, n->in[3]), (long long)cg_dim(q, 0),
         (long long)cg_dim(q, 1), (long long)H, (long long)K, (long long)d, causal,
         cg_scratch(e, index));
}

static void emit_layernorm(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_cuda_layernorm_fwd%s(%s, %s, %s, %s, %lld, %lld, %s);", sfx(e, x), ref(e, n->out[0]), ref(e, x),
       ref(e, n->in[1]), n->nin == 3 ? ref(e, n->in[2]) : "NULL", (long long)cg_rows(x),
       (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")));
}

static void emit_rmsnorm(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_cuda_rmsnorm_fwd%s(%s, %s, %s, %lld, %lld, %s);", sfx(e, x), ref(e, n->out[0]), ref(e, x),
       ref(e, n->in[1]), (long long)cg_rows(x), (long long)cg_dim(x, -1),
       cg_real(ir_attr_float(n, "eps")));
}

/* The norms' weight gradients are set, not added (as on the CPU): the
 * plan stages them in temporaries and the core adds them into their slot. */
static void emit_layernorm_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  const PassBuf *db = n->nout == 3 ? cg_buf(e, n->out[2]) : NULL;
  bool want_db = db && (db->uses > 0 || db->grad_of);
  emit(e, "k_cuda_layernorm_bwd%s(%s, %s, %s, %s, %s, %s, %lld, %lld, %s, %s);", sfx(e, x), ref(e, n->out[0]),
       ref(e, n->out[1]), want_db ? ref(e, n->out[2]) : "NULL", ref(e, n->in[2]), ref(e, x),
       ref(e, n->in[1]), (long long)cg_rows(x), (long long)cg_dim(x, -1),
       cg_real(ir_attr_float(n, "eps")), cg_scratch(e, index));
}

static void emit_rmsnorm_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_cuda_rmsnorm_bwd%s(%s, %s, %s, %s, %s, %lld, %lld, %s, %s);", sfx(e, x), ref(e, n->out[0]),
       ref(e, n->out[1]), ref(e, n->in[2]), ref(e, x), ref(e, n->in[1]), (long long)cg_rows(x),
       (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")), cg_scratch(e, index));
}

static void emit_softmax(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_cuda_softmax_fwd%s(%s, %s, %lld, %lld);", sfx(e, x), ref(e, n->out[0]), ref(e, x),
       (long long)cg_rows(x), (long long)cg_dim(x, -1));
}

static void emit_softmax_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_cuda_softmax_bwd%s(%s, %s, %s, %lld, %lld);", sfx(e, x), ref(e, n->out[0]), ref(e, x),
       ref(e, n->in[1]), (long long)cg_rows(x), (long long)cg_dim(x, -1));
}

static void emit_causal_mask(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int64_t s = cg_dim(x, -1);
  emit(e, "k_cuda_causal_mask%s(%s, %s, %lld, %lld, %s);", sfx(e, x), ref(e, n->out[0]), ref(e, x),
       (long long)(cg_numel(x) / (s * s)), (long long)s, cg_real(ir_attr_float(n, "fill")));
}

static void emit_rope(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int64_t H = ir_attr_int(n, "heads");
  emit(e, "k_cuda_rope%s(%s, %s, %lld, %lld, %lld, %lld, %s, %d);", sfx(e, x), ref(e, n->out[0]), ref(e, x),
       (long long)(cg_numel(x) / (cg_dim(x, -2) * cg_dim(x, -1))), (long long)cg_dim(x, -2), (long long)H,
       (long long)(cg_dim(x, -1) / H), cg_real(ir_attr_float(n, "theta")),
       (int)ir_attr_int(n, "inverse"));
}

static bool graph_dropout(CgEmitter *e, const IrNode *n, const char *mix);

/* The mask is the CPU's, bit for bit (a function of seed, site and index). */
static void emit_dropout(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (graph_dropout(e, n, "0")) return;
  emit(e, "k_cuda_dropout_%s%s(%s, %s, %lld, ctx->training ? %s : 0, ctx->seed, %lld);",
       n->op == IR_OP_DROPOUT ? "fwd" : "bwd", sfx(e, n->in[0]), ref(e, n->out[0]), ref(e, n->in[0]),
       (long long)cg_numel(n->in[0]), cg_real(ir_attr_float(n, "rate")),
       (long long)ir_attr_int(n, "site"));
}

static void emit_loss(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *logits = n->in[0], *targets = n->in[1];
  if (!cg_need_i32(e, n, targets)) return;
  int64_t V = cg_dim(logits, -1), rows = cg_numel(targets);
  if (n->op == IR_OP_CROSS_ENTROPY)
    emit(e, "k_cuda_cross_entropy_fwd%s(%s, %s, %s, %lld, %lld, %lld, %s);", sfx(e, logits), ref(e, n->out[0]),
         ref(e, logits), ref(e, targets), (long long)rows, (long long)V, (long long)V,
         cg_scratch(e, index));
  else
    emit(e, "k_cuda_cross_entropy_bwd%s(%s, %s, %s, %s, %lld, %lld, %lld);", sfx(e, logits), ref(e, n->out[0]),
         ref(e, logits), ref(e, targets), ref(e, n->in[2]), (long long)rows, (long long)V,
         (long long)V);
}

/* The prologue's cu_embedding_add: rows [lo, lo + V) of the table are
 * this rank's (all of them, lo = 0, without a vocabulary split). */
static void emit_embedding_add(CgEmitter *e, const IrNode *n, const char *lo, int64_t V) {
  const IrValue *y = n->out[0];
  emit(e, "CU_LAUNCH(cu_grid(%lldLL), cu_embedding_add)(%s, %s, %s, "
          "%lldLL, %lldLL, %s, %lldLL);",
       (long long)cg_dim(y, -1), ref(e, y), ref(e, n->in[0]), ref(e, n->in[1]),
       (long long)cg_numel(n->in[0]), (long long)cg_dim(y, -1), lo, (long long)V);
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
    emit(e, "k_cuda_embedding_fwd%s(%s, %s, %s, %lld, %lld);", sfx(e, y), ref(e, y), ref(e, ids),
         ref(e, n->in[1]), (long long)cg_numel(ids), (long long)cg_dim(y, -1));
  } else if (into_grads(e, y)) {
    emit_embedding_add(e, n, "0", cg_dim(y, 0));
  } else {
    emit(e, "k_cuda_embedding_bwd%s(%s, %s, %s, %lld, %lld, %lld);", sfx(e, n->in[1]), ref(e, y), ref(e, ids),
         ref(e, n->in[1]), (long long)cg_numel(ids), (long long)cg_dim(y, 0), (long long)cg_dim(y, -1));
  }
}

static void emit_arange(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *y = n->out[0];
  if (y->type.dtype != IR_I32) cg_error(e, n, "arange must be i32");
  else emit(e, "k_cuda_arange(%s, %lld);", ref(e, y), (long long)cg_numel(y));
}

static void emit_zeros(CgEmitter *e, int index) {
  const IrValue *y = cg_node(e, index)->out[0];
  emit(e, "CU_CHECK(cudaMemsetAsync(%s, 0, %lld * sizeof(%s), k_cuda_stream()));", ref(e, y),
       (long long)cg_numel(y), y->type.dtype == IR_I32 ? "int32_t" : ctype(e, y));
}

static void emit_reshape(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  emit_copy(e, n->out[0], n->in[0]);
}

/* ------------------------------------------- tensor parallelism (cpu_tp.c) */

/* This rank's part along dim: no message, a strided copy. */
static void emit_tp_slice(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (!cg_comm_tensor_axis(e, n)) return;
  const IrValue *x = n->in[0], *y = n->out[0];
  int64_t o = cg_comm_outer(n, x), part = cg_numel(y) / o, whole = cg_numel(x) / o;
  emit(e, "k_cuda_copy2d%s(%s, %lld, %s + (int64_t)ctx->tp * %lld, %lld, %lld, %lld);", sfx(e, x),
       ref(e, y), (long long)part, ref(e, x), (long long)part, (long long)whole, (long long)o,
       (long long)part);
}

/* The identity; memplan makes it a view, which runs no code. */
static void emit_tp_copy(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (strcmp(ref(e, n->in[0]), ref(e, n->out[0])) != 0) emit_copy(e, n->out[0], n->in[0]);
}

/* This rank's rows [tp * V, (tp + 1) * V) of the table. */
static void emit_vocab_embedding(CgEmitter *e, const IrNode *n) {
  const IrValue *ids = n->in[0], *y = n->out[0];
  if (!cg_need_i32(e, n, ids)) return;
  if (n->op == IR_OP_EMBEDDING) {
    const IrValue *table = n->in[1];
    int64_t V = cg_dim(table, 0);
    emit(e, "k_cuda_embedding_fwd_vp%s(%s, %s, %s, %lld, %lld, (int64_t)ctx->tp * %lld, %lld);",
         sfx(e, y), ref(e, y), ref(e, ids), ref(e, table), (long long)cg_numel(ids),
         (long long)cg_dim(y, -1), (long long)V, (long long)V);
    return;
  }
  int64_t V = cg_dim(y, 0), h = cg_dim(y, -1);
  if (into_grads(e, y))
    emit_embedding_add(e, n, ir_fmt("(int64_t)ctx->tp * %lld", (long long)V), V);
  else
    emit(e, "k_cuda_embedding_bwd_vp%s(%s, %s, %s, %lld, %lld, %lld, (int64_t)ctx->tp * %lld);",
         sfx(e, n->in[1]), ref(e, y), ref(e, ids), ref(e, n->in[1]), (long long)cg_numel(ids),
         (long long)V, (long long)h, (long long)V);
}

/* The loss over this rank's columns [tp * V, (tp + 1) * V) of the logits,
 * as on the CPU: all-reduces of the row max (MAX), then of the sum of
 * exponentials and, forward, of the target logit (SUM), one real per row
 * each, in the device scratch. With bf16 logits the kernels read them in
 * their _bf16 forms, and these statistics stay fp32 (Megatron-LM's
 * vocabulary-parallel cross-entropy works on fp32 logits): a bf16 row
 * max and sum of exponentials would cost the loss 3 significant digits
 * for a few bytes per row. */
static void emit_vocab_loss(CgEmitter *e, const IrNode *n) {
  const IrValue *logits = n->in[0], *targets = n->in[1];
  if (!cg_need_i32(e, n, targets)) return;
  int64_t V = cg_dim(logits, -1), rows = cg_numel(targets), t = e->g->mesh[IR_AXIS_TENSOR];
  int64_t valid = ir_attr_has(n, "valid") ? ir_attr_int(n, "valid") : 0;
  if (valid <= 0) valid = V * (t > 1 ? t : 1);
  const char *L = ref(e, logits), *T = ref(e, targets), *s = sfx(e, logits);
  emit(e, "{");
  e->depth++;
  emit(e, "const int64_t lo = (int64_t)ctx->tp * %lld;", (long long)V);
  emit(e, "const int64_t n = %lld - lo < 0 ? 0 : %lld - lo > %lld ? %lld : %lld - lo;",
       (long long)valid, (long long)valid, (long long)V, (long long)V, (long long)valid);
  emit(e, "real *mx = cu_tp_scratch(), *se = mx + %lld;", (long long)rows);
  emit(e, "k_cuda_ce_vp_max%s(mx, %s, %lld, %lld, n);", s, L, (long long)rows, (long long)V);
  cg_comm_allreduce(e, "mx", "mx", rows, "RT_COMM_MAX");
  emit(e, "k_cuda_ce_vp_sumexp%s(se, %s, mx, %lld, %lld, n);", s, L, (long long)rows,
       (long long)V);
  cg_comm_allreduce(e, "se", "se", rows, "RT_COMM_SUM");
  if (n->op == IR_OP_CROSS_ENTROPY) {
    emit(e, "real *tg = mx + %lld;", (long long)(2 * rows));
    emit(e, "k_cuda_ce_vp_target%s(tg, %s, %s, %lld, %lld, lo, n, %lld);", s, L, T,
         (long long)rows, (long long)V, (long long)valid);
    cg_comm_allreduce(e, "tg", "tg", rows, "RT_COMM_SUM");
    emit(e, "k_cuda_ce_vp_loss(%s, mx, se, tg, %lld);", ref(e, n->out[0]), (long long)rows);
  } else {
    emit(e, "k_cuda_ce_vp_bwd%s(%s, %s, %s, %s, mx, se, %lld, %lld, lo, n);", s,
         ref(e, n->out[0]), L, T, ref(e, n->in[2]), (long long)rows, (long long)V);
  }
  e->depth--;
  emit(e, "}");
}

/* Dropout on a tensor-parallel split: each rank draws its own stream, the
 * CPU's tp_seed. */
static void emit_rank_dropout(CgEmitter *e, const IrNode *n) {
  if (graph_dropout(e, n, "0x9e3779b97f4a7c15ull * (uint64_t)(ctx->tp + 1)")) return;
  emit(e, "k_cuda_dropout_%s%s(%s, %s, %lld, ctx->training ? %s : 0, tp_seed(ctx), %lld);",
       n->op == IR_OP_DROPOUT ? "fwd" : "bwd", sfx(e, n->in[0]), ref(e, n->out[0]), ref(e, n->in[0]),
       (long long)cg_numel(n->in[0]), cg_real(ir_attr_float(n, "rate")),
       (long long)ir_attr_int(n, "site"));
}

/* The forms that need the rank at run time (cpu_tp.c has the CPU's). */
static void emit_tp_form(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  switch (n->op) {
  case IR_OP_EMBEDDING:
  case IR_OP_EMBEDDING_GRAD: emit_vocab_embedding(e, n); return;
  case IR_OP_CROSS_ENTROPY:
  case IR_OP_CROSS_ENTROPY_GRAD: emit_vocab_loss(e, n); return;
  case IR_OP_DROPOUT:
  case IR_OP_DROPOUT_GRAD: emit_rank_dropout(e, n); return;
  default: cg_error(e, n, "no tensor-parallel form of this op on the CUDA target");
  }
}

/* ------------------------------------------------------------ the op table */

/* How the CUDA target writes an op that runs on its own; an elementwise op
 * with a formula (ir/ops.def) needs no line: the fused kernels write it.
 * The same ops as the CPU target's table. */
static void (*const cuda_kernels[IR_OP_COUNT])(CgEmitter *e, int index) = {
    [IR_OP_EMBEDDING] = emit_embedding,
    [IR_OP_ARANGE] = emit_arange,
    [IR_OP_ZEROS] = emit_zeros,
    [IR_OP_MATMUL] = emit_matmul,
    [IR_OP_LINEAR] = emit_linear,
    [IR_OP_RESHAPE] = emit_reshape,
    [IR_OP_TRANSPOSE] = emit_transpose,
    [IR_OP_SPLIT_HEADS] = emit_split_heads,
    [IR_OP_MERGE_HEADS] = emit_merge_heads,
    [IR_OP_SPLIT] = emit_split,
    [IR_OP_CONCAT] = emit_concat,
    [IR_OP_DROPOUT] = emit_dropout,
    [IR_OP_LAYERNORM] = emit_layernorm,
    [IR_OP_RMSNORM] = emit_rmsnorm,
    [IR_OP_SOFTMAX] = emit_softmax,
    [IR_OP_CAUSAL_MASK] = emit_causal_mask,
    [IR_OP_ROPE] = emit_rope,
    [IR_OP_ATTENTION] = emit_attention,
    [IR_OP_CROSS_ENTROPY] = emit_loss,
    [IR_OP_LINEAR_DX] = emit_linear_dx,
    [IR_OP_LINEAR_DW] = emit_linear_dw,
    [IR_OP_SUM_TO] = emit_sum_to,
    [IR_OP_DROPOUT_GRAD] = emit_dropout,
    [IR_OP_LAYERNORM_GRAD] = emit_layernorm_grad,
    [IR_OP_RMSNORM_GRAD] = emit_rmsnorm_grad,
    [IR_OP_SOFTMAX_GRAD] = emit_softmax_grad,
    [IR_OP_ATTENTION_GRAD] = emit_attention,
    [IR_OP_EMBEDDING_GRAD] = emit_embedding,
    [IR_OP_CROSS_ENTROPY_GRAD] = emit_loss,
    [IR_OP_TP_SLICE] = emit_tp_slice,
    [IR_OP_TP_COPY] = emit_tp_copy,
};

static bool cuda_writes_op(IrOp op) { return cuda_kernels[op] || cg_formula_writes_op(op); }

/* Ops written in their tensor-parallel form when an attribute says so. */
static bool tp_form(const IrNode *n) { return cg_flag(n, "vocab_parallel") || cg_flag(n, "per_rank"); }

static void cuda_node(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (in_epilogue(e, index)) emit(e, "/* in the epilogue of the GEMM that computes its operand */");
  else if (tp_form(n)) emit_tp_form(e, index);
  else if (cuda_kernels[n->op]) cuda_kernels[n->op](e, index);
  else cg_error(e, n, "not supported");
}

/* ---------------------------------------------------- gradients, program */

static void cuda_accumulate(CgEmitter *e, const IrValue *param, const IrValue *grad) {
  int64_t n = cg_numel(grad);
  if (n != cg_numel(param)) die("gradient of %s with %lld elements", param->name, (long long)n);
  /* The param's slot in the gradients: where WGT(...) is in the weights. */
  emit(e, "k_cuda_accumulate%s(GRD%s, %s, %lld);", sfx(e, grad), cg_ref(e, param) + 3, ref(e, grad),
       (long long)n);
}

/* Only a compiler built with the CUDA libraries can write a build file
 * that links them, and only one whose CUDA runtime links the NCCL backend
 * programs of more than one rank. */
static void check_supported(CgEmitter *e) {
  static const char *const axis[] = {"--tp", "--pp", "--dp"};
  for (int a = 0; a < 3 && !SHARDC_CUDA_NCCL; a++)
    if (cg_mesh(e->g, (IrMeshAxis)a) > 1 || (a == IR_AXIS_PIPELINE && e->nchunks > 1)) {
      ir_error(ir_cmdline, "cuda target: programs of more than one rank (%s) need the NCCL "
                           "backend, and this shardc was built without NCCL; compile with "
                           "t = p = d = 1",
               axis[a]);
      e->errors++;
      cuda_state(e)->refused = true;
      return;
    }
  if (e->plan->real_bytes != 4) {
    ir_error(ir_cmdline, "cuda target: the programs are fp32 (--dtype f64 is for gradient checks, "
                         "on the CPU target)");
    e->errors++;
    cuda_state(e)->refused = true;
    return;
  }
  if (!SHARDC_RT_LIBS_CUDA[0]) {
    ir_error(ir_cmdline, "cuda target: this shardc was built without the CUDA libraries (nvcc was "
                         "not found when it was configured); reconfigure with nvcc on PATH");
    e->errors++;
  }
}

/* comm.h (C, with C11's _Noreturn) and the device scratch of the
 * collectives, a __device__ array of the program (nodes run one after the
 * other on one stream, so one serves them all), when the program has any. */
static void emit_tp_prologue(CgEmitter *e) {
  bool per_rank;
  int64_t need = cg_tp_needs(e, &per_rank);
  if (!cg_comm_used(e) && need == 0 && !per_rank) return;
  emit(e, "/* Tensor parallelism: the collectives run on ctx->tp_comm (runtime/comm.h, whose");
  emit(e, " * NCCL backend takes device memory). */");
  emit(e, "#define _Noreturn [[noreturn]]");
  emit(e, "extern \"C\" {");
  emit(e, "#include \"runtime/comm.h\"");
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

/* What the bf16 programs add: the typed pointers of ref(), the weights'
 * working copy, the conversions of the fused kernels and the bf16 forms of
 * the shared layout calls (layout_prefix). */
static void emit_bf16_prologue(CgEmitter *e) {
  emit(e, "/* bf16: the step's values are bf16 (kc_bf16, its bits), the weights are read");
  emit(e, " * from their bf16 working copy, which the device layer keeps fresh. */");
  emit(e, "extern \"C\" uint16_t *rt_dev_weights_bf16(const real *w, int64_t n);");
  emit(e, "#define BF(p) ((kc_bf16 *)(p))");
  /* The copy is of the program's whole weights region (every chunk's). */
  emit(e, "#define W16(elems) (rt_dev_weights_bf16(ctx->weights, ctx->model->nweights) + (elems))");
  emit(e, "__device__ __forceinline__ real cu_f(real x) { return x; }");
  emit(e, "__device__ __forceinline__ real cu_f(kc_bf16 x) {");
  emit(e, "  return __bfloat162float(__ushort_as_bfloat16(x));");
  emit(e, "}");
  emit(e, "__device__ __forceinline__ kc_bf16 cu_b(real x) {");
  emit(e, "  return __bfloat16_as_ushort(__float2bfloat16(x));");
  emit(e, "}");
  emit(e, "/* The two bf16 of a 32-bit word of the vector loops (the lower address in");
  emit(e, " * the low half), widened and rounded as one at a time. */");
  emit(e, "__device__ __forceinline__ real cu_f_lo(unsigned w) { return cu_f((kc_bf16)(w & 0xffffu)); }");
  emit(e, "__device__ __forceinline__ real cu_f_hi(unsigned w) { return cu_f((kc_bf16)(w >> 16)); }");
  emit(e, "__device__ __forceinline__ unsigned cu_b2(real lo, real hi) {");
  emit(e, "  return (unsigned)cu_b(lo) | (unsigned)cu_b(hi) << 16;");
  emit(e, "}");
  emit(e, "__device__ __forceinline__ void cu_st(real *y, real x) { *y = x; }");
  emit(e, "__device__ __forceinline__ void cu_st(kc_bf16 *y, real x) { *y = cu_b(x); }");
  emit(e, "/* y[j] = the sum over r of x[r, j] (rows of n), in row order, in double. */");
  emit(e, "template <typename TY, typename T>");
  emit(e, "__global__ void cu_sum_rows(TY *__restrict__ y, const T *__restrict__ x, int64_t rows, "
          "int64_t n) {");
  emit(e, "  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n;");
  emit(e, "       j += (int64_t)gridDim.x * blockDim.x) {");
  emit(e, "    double s = 0;");
  emit(e, "    for (int64_t r = 0; r < rows; r++) s += cu_f(x[r * n + j]);");
  emit(e, "    cu_st(&y[j], (real)s);");
  emit(e, "  }");
  emit(e, "}");
  emit(e, "[[maybe_unused]] static void cu_bf16_transpose(real *y, const real *x, int64_t outer, "
          "int64_t n0, int64_t mid, int64_t n1, int64_t inner) {");
  emit(e, "  k_cuda_transpose_bf16(BF(y), (const kc_bf16 *)x, outer, n0, mid, n1, inner);");
  emit(e, "}");
  static const char *const heads[] = {"split", "merge"};
  for (int k = 0; k < 2; k++) {
    emit(e, "[[maybe_unused]] static void cu_bf16_%s_heads(real *y, const real *x, int64_t b, "
            "int64_t s, int64_t H, int64_t d) {",
         heads[k]);
    emit(e, "  k_cuda_%s_heads_bf16(BF(y), (const kc_bf16 *)x, b, s, H, d);", heads[k]);
    emit(e, "}");
  }
  emit_blank(e);
}

/* ------------------------------------------------------------ CUDA graphs */

/* Which chunk functions the runtime may capture once as a CUDA graph and
 * replay (abi/model.h RtGraphs), decided here from what each function's
 * code does, so that nothing about it is left to chance at run time. A
 * function may be captured when all it does is launch kernels, cuBLASLt
 * calls and device-to-device copies on the compute stream at addresses
 * that depend only on ctx's pointers (the runtime keys its graphs by
 * them) and on ctx->tp (fixed for a rank's run). Not one that calls the
 * host in the middle: a collective over rt_comm (NCCL with host waits),
 * the data-parallel BUCKET_READY and POLL hooks. Per-step scalars passed
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
static bool graph_dropout(CgEmitter *e, const IrNode *n, const char *mix) {
  if (graph_why_not(e->chunk, fn_of(e->chunk, n))) return false;
  emit(e, "k_cuda_dropout_step_%s%s(%s, %s, %lld, %s, cu_step(), %s, %lld);",
       n->op == IR_OP_DROPOUT ? "fwd" : "bwd", sfx(e, n->in[0]), ref(e, n->out[0]),
       ref(e, n->in[0]), (long long)cg_numel(n->in[0]), cg_real(ir_attr_float(n, "rate")), mix,
       (long long)ir_attr_int(n, "site"));
  return true;
}

/* The step's values in device memory, for the step form of dropout. */
static void emit_graphs_prologue(CgEmitter *e) {
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

/* What the code of a capturable function must not contain: a call that
 * talks to the host, waits, allocates, or a per-step value passed by
 * value. The functions' text is checked against it once written, so that
 * a change to what the core or this target writes cannot make a function
 * that graph_why_not lets through unsafe to capture without notice. */
static const char *const graph_unsafe[] = {
    "rt_comm_", "BUCKET_READY(", "POLL()", "ctx->seed", "ctx->training", "tp_seed(",
    "Synchronize", "cudaMalloc", "cudaFree", "rt_dev_alloc", "DeviceToHost", "HostToDevice",
};

static void check_graph_text(CgEmitter *e) {
  fflush(e->out);
  for (int c = 0; c < e->nchunks; c++)
    for (int f = 0; f < 3; f++) {
      if (graph_why_not(&e->chunks[c], f)) continue;
      const char *head = ir_fmt("static void %s(RtCtx *ctx) {\n", graph_fn_name(e, c, f));
      const char *body = strstr(e->buf, head), *end = body ? strstr(body, "\n}\n") : NULL;
      if (!end) die("cuda target: no function %s in the program", graph_fn_name(e, c, f));
      for (size_t k = 0; k < sizeof graph_unsafe / sizeof *graph_unsafe; k++) {
        const char *hit = strstr(body, graph_unsafe[k]);
        if (hit && hit < end)
          die("cuda target: %s is marked capturable as a CUDA graph but contains %s",
              graph_fn_name(e, c, f), graph_unsafe[k]);
      }
    }
}

/* The graph table (abi/model.h RtGraphs): one line per chunk function. */
static void emit_graphs_table(CgEmitter *e) {
  check_graph_text(e);
  emit(e, "/* CUDA graphs (abi/model.h RtGraphs): why each chunk function may not be");
  emit(e, " * captured and replayed as a graph; NULL where it may. */");
  emit(e, "static const char *const cu_graph_why_not[] = {");
  e->depth++;
  for (int c = 0; c < e->nchunks; c++)
    for (int f = 0; f < 3; f++) {
      const char *why = graph_why_not(&e->chunks[c], f);
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

static void cuda_prologue(CgEmitter *e) {
  check_supported(e);
  emit(e, "#include <math.h>");
  emit(e, "#include <stdint.h>");
  emit(e, "#include <stdio.h>");
  emit(e, "#include <stdlib.h>");
  emit(e, "#include <time.h>");
  emit_blank(e);
  emit(e, "#include <cuda_runtime.h>");
  if (bf16_mode(e)) emit(e, "#include <cuda_bf16.h>");
  emit_blank(e);
  emit(e, "#include \"kernels/cuda/kernels_cuda.h\"");
  emit(e, "#include \"kernels/cuda/launch.h\"");
  /* The elementwise formulas the fused kernels call (ir/ops.def's FORMULA
   * lines over kernels/formulas.h). */
  emit(e, "#include \"kernels/cuda/formulas.cuh\"");
  emit(e, "extern \"C\" {");
  emit(e, "#include \"abi/model.h\"");
  emit(e, "}");
  emit_blank(e);
  emit(e, "/* A failed CUDA call ends the program with the call, the file and line and");
  emit(e, " * CUDA's error string; a launch is checked right after it. */");
  emit(e, "static void cu_check(cudaError_t err, const char *call, const char *file, int line) {");
  emit(e, "  if (err == cudaSuccess) return;");
  emit(e, "  fprintf(stderr, \"error: cuda: %%s:%%d: %%s: %%s\\n\", file, line, call, "
          "cudaGetErrorString(err));");
  emit(e, "  exit(1);");
  emit(e, "}");
  emit(e, "#define CU_CHECK(call) cu_check((call), #call, __FILE__, __LINE__)");
  emit(e, "#define CU_LAUNCHED() CU_CHECK(cudaGetLastError())");
  emit(e, "#define CU_ALIGN256(p) ((void *)(((uintptr_t)(p) + 255) & ~(uintptr_t)255))");
  emit(e, "#define CU_ALIGNED16(p) ((uintptr_t)(p) %% 16 == 0)");
  emit_blank(e);
  emit_tp_prologue(e);
  emit_graphs_prologue(e);
  if (bf16_mode(e)) emit_bf16_prologue(e);
  emit(e, "/* The generated kernels' grid: enough blocks to fill every multiprocessor a");
  emit(e, " * few times over, fewer for a small tensor; each thread strides through");
  emit(e, " * the rest. No result depends on it (no kernel here reduces). */");
  emit(e, "#define CU_THREADS %d", CUDA_THREADS);
  emit(e, "#define CU_LAUNCH(grid, ...) KC_LAUNCH(grid, CU_THREADS, 0, k_cuda_stream(), __VA_ARGS__)");
  emit(e, "static unsigned cu_grid(int64_t n) {");
  emit(e, "  static int64_t most;");
  emit(e, "  if (!most) {");
  emit(e, "    int device = 0, sms = 0;");
  emit(e, "    CU_CHECK(cudaGetDevice(&device));");
  emit(e, "    CU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));");
  emit(e, "    most = 4 * (int64_t)(sms > 0 ? sms : 1) * (2048 / CU_THREADS);");
  emit(e, "  }");
  emit(e, "  int64_t blocks = (n + CU_THREADS - 1) / CU_THREADS;");
  emit(e, "  return (unsigned)(blocks < 1 ? 1 : blocks < most ? blocks : most);");
  emit(e, "}");
  emit(e, "/* Whether the fused kernels may take their 16-byte loops: yes unless");
  emit(e, " * SHARD_CUDA_VECTOR=0, which runs the element-at-a-time loops instead (the");
  emit(e, " * same bits: tests/gpu/run.sh's vector check compares the two). */");
  emit(e, "[[maybe_unused]] static int cu_vector(void) {");
  emit(e, "  static int on = -1;");
  emit(e, "  if (on < 0) {");
  emit(e, "    const char *s = getenv(\"SHARD_CUDA_VECTOR\");");
  emit(e, "    on = !(s && s[0] == '0' && !s[1]);");
  emit(e, "  }");
  emit(e, "  return on;");
  emit(e, "}");
  emit_blank(e);
  emit(e, "/* embedding_grad added into its slot: thread j owns column j and adds the");
  emit(e, " * rows in token order, so equal ids never race and the sums are the CPU's.");
  emit(e, " * The slot holds rows [lo, lo + V) of the table; other ids are another rank's. */");
  if (bf16_mode(e)) emit(e, "template <typename T>");
  emit(e, "__global__ void cu_embedding_add(real *__restrict__ g, const int32_t *__restrict__ ids,");
  emit(e, "                                 const %s *__restrict__ dy, int64_t rows, int64_t h,",
       bf16_mode(e) ? "T" : "real");
  emit(e, "                                 int64_t lo, int64_t V) {");
  emit(e, "  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < h;");
  emit(e, "       j += (int64_t)gridDim.x * blockDim.x)");
  emit(e, "    for (int64_t r = 0; r < rows; r++) {");
  emit(e, "      const int64_t row = (int64_t)ids[r] - lo;");
  emit(e, "      if (row >= 0 && row < V) g[row * h + j] += %s;",
       bf16_mode(e) ? "cu_f(dy[r * h + j])" : "dy[r * h + j]");
  emit(e, "    }");
  emit(e, "}");
  emit_blank(e);
  emit(e, "/* y[r] = the sum of row r of x [M, n], in order, in double: the CPU's order. */");
  if (bf16_mode(e)) emit(e, "template <typename TY, typename T>");
  emit(e, "__global__ void cu_sum_last(%s *__restrict__ y, const %s *__restrict__ x, "
          "int64_t M, int64_t n) {",
       bf16_mode(e) ? "TY" : "real", bf16_mode(e) ? "T" : "real");
  emit(e, "  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < M;");
  emit(e, "       r += (int64_t)gridDim.x * blockDim.x) {");
  emit(e, "    double s = 0;");
  emit(e, "    for (int64_t j = 0; j < n; j++) s += %s;", bf16_mode(e) ? "cu_f(x[r * n + j])" : "x[r * n + j]");
  emit(e, "    %s;", bf16_mode(e) ? "cu_st(&y[r], (real)s)" : "y[r] = (real)s");
  emit(e, "  }");
  emit(e, "}");
  emit_blank(e);
  emit(e, "/* The per-op timer: built with -DSHARD_PROFILE (make EXTRA_CFLAGS=-DSHARD_PROFILE),");
  emit(e, " * the program waits for the GPU after every node and prints where a step's");
  emit(e, " * time goes when training ends. */");
  emit(e, "#ifdef SHARD_PROFILE");
  emit(e, "extern \"C\" void rt_prof_enable(void);");
  emit(e, "extern \"C\" void rt_prof_add(const char *what, double seconds);");
  emit(e, "static double prof_t0;");
  emit(e, "static double prof_now(void) {");
  emit(e, "  struct timespec t;");
  emit(e, "  CU_CHECK(cudaStreamSynchronize(k_cuda_stream()));");
  emit(e, "  clock_gettime(CLOCK_MONOTONIC, &t);");
  emit(e, "  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;");
  emit(e, "}");
  emit(e, "#define PROF_START() (prof_t0 = prof_now())");
  emit(e, "#define PROF(what) \\");
  emit(e, "  do { double t = prof_now(); rt_prof_add(what, t - prof_t0); prof_t0 = t; } while (0)");
  emit(e, "#else");
  emit(e, "#define PROF_START() ((void)0)");
  emit(e, "#define PROF(what) ((void)0)");
  emit(e, "#endif");
  emit_blank(e);
  emit(e, "/* One kernel per run of elementwise nodes. */");
  emit_fused_kernels(e);
}

/* The kernel's own scratch function for node i, as an expression of the
 * generated program; NULL for a node whose scratch is the GEMM workspace. */
static const char *scratch_call(const IrNode *n) {
  switch (n->op) {
  case IR_OP_ATTENTION_GRAD: {
    int64_t H, K, d;
    cg_attention_dims(n, &H, &K, &d);
    return ir_fmt("k_cuda_attention_scratch(%lld, %lld, %lld)", (long long)cg_dim(n->in[0], 0),
                  (long long)cg_dim(n->in[0], 1), (long long)H);
  }
  case IR_OP_LAYERNORM_GRAD:
  case IR_OP_RMSNORM_GRAD:
    return ir_fmt("k_cuda_norm_bwd_scratch(%lld, %lld)", (long long)cg_rows(n->in[0]),
                  (long long)cg_dim(n->in[0], -1));
  case IR_OP_CROSS_ENTROPY: return ir_fmt("k_cuda_ce_scratch(%lld)", (long long)cg_numel(n->in[1]));
  default: return NULL;
  }
}

/* main() checks, before anything runs, that every kernel wants no more
 * scratch than the memory plan holds for it, then hands over to rt_main,
 * which needs the GPU only once it allocates the plan (so --help works on
 * a machine without one). */
static void cuda_entry(CgEmitter *e) {
  emit_graphs_table(e);
  emit(e, "int main(int argc, char **argv) {");
  e->depth++;
  const char **seen = ir_alloc(sizeof(char *) * 64);
  int nseen = 0;
  for (int c = 0; c < e->nchunks; c++)
    for (int i = 0; i < e->chunks[c].g->nodes.len; i++) {
      const IrNode *n = e->chunks[c].g->nodes.items[i];
      const char *call = e->chunks[c].plan->scratch_offset[i] >= 0 ? scratch_call(n) : NULL;
      if (!call) continue;
      const char *check = ir_fmt("if (%s > %lldLL) {", call,
                                 (long long)e->chunks[c].plan->scratch_bytes[i]);
      bool dup = false;
      for (int k = 0; k < nseen; k++) dup |= strcmp(seen[k], check) == 0;
      if (dup || nseen == 64) continue;
      seen[nseen++] = check;
      emit(e, "%s", check);
      e->depth++;
      emit(e, "fprintf(stderr, \"%%s: internal error: %s wants more scratch than the memory plan "
              "holds\\n\", argv[0]);",
           ir_op_info(n->op)->name);
      emit(e, "return 1;");
      e->depth--;
      emit(e, "}");
    }
  emit(e, "#ifdef SHARD_PROFILE");
  emit(e, "rt_prof_enable();");
  emit(e, "#endif");
  emit(e, "/* The core's model table with this target's graph table. */");
  emit(e, "static RtModel model;");
  emit(e, "model = rt_model;");
  emit(e, "model.graphs = &cu_graphs;");
  emit(e, "return rt_main(&model, argc, argv);");
  e->depth--;
  emit(e, "}");
}

static void cuda_buildfile(CgEmitter *e, const char *const *programs, int nprograms) {
  const char *arch;
  if (!cg_target_arg(e, "--cuda-arch", &arch) || !arch) arch = CUDA_DEFAULT_ARCH;
  emit(e, "# Builds the rank programs of this directory for the GPU against the shardc");
  emit(e, "# runtime. Written by `shardc compile --target cuda`; `shardc build DIR` runs it.");
  emit(e, "NVCC = %s", SHARDC_NVCC);
  emit(e, "# The GPU's compute capability (shardc compile --cuda-arch; make ARCH=sm_80).");
  emit(e, "ARCH = %s", arch);
  /* The core's tables name only the fields they set, as C does; C++ warns
   * about the others under -Wextra, which are zero by the same rule. */
  emit(e, "NVCCFLAGS = -O3 -std=c++20 -arch=$(ARCH) -Xcompiler=-Wall,-Wextra,"
          "-Wno-missing-field-initializers%s", SHARDC_CUDA_HOST_FLAGS);
  emit(e, "CPPFLAGS = -I%s -I%s/kernels/cuda", SHARDC_SOURCE_DIR, SHARDC_SOURCE_DIR);
  emit(e, "RTLIBS = %s", SHARDC_RT_LIBS_CUDA);
  emit(e, "LDLIBS = -Xcompiler=%s -lcublasLt -cudart shared %s", SHARDC_OPENMP_FLAGS,
       SHARDC_CUDA_LINK_LIBS);
  emit(e, "# For instance -DSHARD_PROFILE: a per-op timer (see the top of the program).");
  emit(e, "EXTRA_CFLAGS =");
  emit_blank(e);
  cg_buildfile_rules(e, programs, nprograms, "$(NVCC) $(NVCCFLAGS)");
}

/* ---------------------------------------------------------------- policy */

/* Reals of scratch a node needs: the GEMMs' cuBLASLt workspace, the
 * attention backward's row statistics (a float pair per query row and
 * head), the norms' row statistics and partial weight gradients, and the
 * loss's per-row doubles. Sizes as kernels_cuda.h's k_cuda_*_scratch. */
static int64_t cuda_scratch_bytes(const IrNode *n) {
  switch (n->op) {
  case IR_OP_MATMUL:
  case IR_OP_LINEAR: return CUDA_GEMM_WORKSPACE;
  /* And the stash of a bias gradient in the epilogue (stash_bytes). */
  case IR_OP_LINEAR_DX: return CUDA_GEMM_WORKSPACE + stash_bytes(cg_dim(n->out[0], -1));
  case IR_OP_LINEAR_DW: return CUDA_GEMM_WORKSPACE + stash_bytes(cg_dim(n->in[1], -1));
  case IR_OP_ATTENTION_GRAD: {
    int64_t H, K, d;
    cg_attention_dims(n, &H, &K, &d);
    return 2 * cg_dim(n->in[0], 0) * H * cg_dim(n->in[0], 1) * 4;
  }
  case IR_OP_LAYERNORM_GRAD:
  case IR_OP_RMSNORM_GRAD: {
    int64_t rows = cg_rows(n->in[0]), chunks = (rows + CUDA_NORM_CHUNK - 1) / CUDA_NORM_CHUNK;
    return 2 * rows * 4 + 2 * chunks * cg_dim(n->in[0], -1) * 8;
  }
  case IR_OP_CROSS_ENTROPY: return (cg_numel(n->in[1]) > 0 ? cg_numel(n->in[1]) : 1) * 8;
  default: return 0;
  }
}

static int64_t cuda_scratch_reals(const IrNode *n) { return (cuda_scratch_bytes(n) + 3) / 4; }

/* One stream: one copy of each node's scratch, and no row chunks (a kernel
 * covers all rows of a node at once). */
static const PassMemPolicy cuda_memplan = {
    .threads = 1,
    .scratch_reals = cuda_scratch_reals,
    .row_chunks = false,
};

static void cuda_permute(CgEmitter *e, const char *dst, const char *src, int64_t a, int64_t b,
                         int64_t part, bool low) {
  if (low)
    emit(e, "k_cuda_transpose_bf16(BF(%s), (const kc_bf16 *)%s, 1, %lld, 1, %lld, %lld);", dst,
         src, (long long)a, (long long)b, (long long)part);
  else
    emit(e, "k_cuda_transpose(%s, %s, 1, %lld, 1, %lld, %lld);", dst, src, (long long)a,
         (long long)b, (long long)part);
}

/* --cuda-arch: a compute capability nvcc takes, sm_NN or compute_NN. */
static const char *check_arch(const char *value) {
  if (strncmp(value, "sm_", 3) == 0 || strncmp(value, "compute_", 8) == 0) return NULL;
  return ir_fmt("--cuda-arch: expected sm_NN, got '%s'", value);
}

/* --cuda-arch sm_NN: the GPU architecture the build file builds for
 * (CUDA_DEFAULT_ARCH without it). --no-gemm-epilogue: a GELU, its
 * gradient and a bias gradient after a GEMM run as kernels of their own
 * instead of in cuBLASLt's epilogue (for comparison). */
static const CgTargetOption cuda_options[] = {
    {"--cuda-arch", check_arch},
    {"--no-gemm-epilogue", NULL},
    {NULL, NULL},
};

static void *cuda_state_new(CgEmitter *e) {
  (void)e;
  CudaState *st = ir_alloc(sizeof *st);
  memset(st, 0, sizeof *st);
  return st;
}

const CgTarget cg_target_cuda = {
    .name = "cuda",
    .doc = "CUDA C++ for NVIDIA GPUs (fp32 or bf16; cuBLASLt GEMMs, NCCL between "
           "ranks, nvcc)",
    .source_ext = ".cu",
    .buildfile_name = "Makefile",
    .precisions = CG_PRECISION_FP32 | CG_PRECISION_BF16,
    .memory = CG_MEMORY_GPU,
    /* Its programs of many ranks (over NCCL) are taken only by name until
     * they have been checked on GPUs (docs/targets.md). */
    .runs_many_ranks = false,
    .options = cuda_options,
    .memplan = &cuda_memplan,
    .writes_op = cuda_writes_op,
    .state_new = cuda_state_new,
    .prologue = cuda_prologue,
    .node = cuda_node,
    .fused = cuda_fused,
    .accumulate = cuda_accumulate,
    /* The collectives' rank-major copies (collectives.c), in device memory. */
    .permute = cuda_permute,
    .comm_scratch = "cu_tp_scratch()",
    .entry = cuda_entry,
    .buildfile = cuda_buildfile,
};
