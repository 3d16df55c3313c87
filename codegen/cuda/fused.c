/* The CUDA target's fused elementwise kernels: each run of elementwise
 * nodes the memory plan fuses becomes one generated __global__ kernel at
 * file scope that reads each operand once and writes each output once,
 * with a 16-byte vector loop where the addresses allow, and its launch. */
#include "cuda.h"

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
  for (int l = 0; l < f.nloads; l++) bf |= f.loads[l].full && cuda_low(e, f.loads[l].v);
  for (int k = 0; k < f.nstores; k++) bf |= cuda_low(e, f.stores[k]);
  f.width = bf ? 8 : 4;
  int64_t N = ir_type_numel(f.shape);
  f.vectorizable = N >= f.width;
  return f;
}

/* Operand v of the run at element i: a register of the run, a lane of the
 * vector loop's, or a load (widened from bf16 by cu_f). */
static const char *operand(CgEmitter *e, const void *run, const IrValue *v) {
  const Fused *f = run;
  if (cg_in_run(e, f->first, f->last, v)) return cg_reg(e, v);
  for (int l = 0; l < f->nloads; l++)
    if (f->loads[l].v == v)
      return f->vec && f->loads[l].full ? ir_fmt("x%dl[l]", l)
             : cuda_low(e, v)           ? ir_fmt("cu_f(x%d[%s])", l, f->loads[l].index)
                                        : ir_fmt("x%d[%s]", l, f->loads[l].index);
  unreachable();
}

/* Output `slot` of the run: into its lane of the vector loop, or to memory
 * (rounded by cu_b for bf16, added for a gradient slot). */
static void store(CgEmitter *e, const void *run, const IrValue *out, int slot, const char *reg) {
  const Fused *f = run;
  if (cuda_low(e, out))
    emit(e, f->vec ? "y%dl[l] = %s;" : "y%d[i] = cu_b(%s);", slot, reg);
  else
    emit(e, f->vec ? "y%dl[l] %s= %s;" : "y%d[i] %s= %s;", slot,
         cg_buf(e, out)->region == PASS_REGION_GRADS ? "+" : "", reg);
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
  CgRunHooks h = {operand, store, f};
  cg_formula_body(e, f->first, f->last, &h);
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
  emit(e,
       "for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < %lldLL; q += step) {",
       (long long)(ir_type_numel(f->shape) / w));
  e->depth++;
  for (int l = 0; l < f->nloads; l++)
    if (f->loads[l].full) emit_vec_read(e, f, "x", l, cuda_low(e, f->loads[l].v), "const ");
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
  for (int s = 0; s < f->nstores; s++) emit_vec_write(e, f, s, cuda_low(e, f->stores[s]));
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
    params = ir_fmt("%s, const %s *__restrict__ x%d", params, cuda_ctype(e, f.loads[l].v), l);
  for (int s = 0; s < f.nstores; s++)
    params = ir_fmt("%s, %s *__restrict__ y%d", params, cuda_ctype(e, f.stores[s]), s);
  emit(e, "__global__ void %s(%s) {", kernel_name(e, first), params);
  e->depth++;
  emit(e, "const int64_t step = (int64_t)gridDim.x * blockDim.x;");
  if (f.vectorizable) emit_vector_loop(e, &f);
  else emit(e, "(void)vec;");
  int64_t N = ir_type_numel(f.shape), tail = N / f.width * f.width;
  const char *from =
      f.vectorizable && tail < N ? ir_fmt("(vec ? %lldLL : 0) + ", (long long)tail) : "";
  emit(
      e,
      "for (int64_t i = %sblockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < %lldLL; i += step) {",
      from, (long long)N);
  e->depth++;
  emit_element(e, &f);
  e->depth--;
  emit(e, "}");
  e->depth--;
  emit(e, "}");
  emit_blank(e);
}

static bool all_written(CgEmitter *e, int first, int last) {
  for (int k = first; k <= last; k++)
    if (!e->target->writes_op(cg_node(e, k)->op)) return false;
  return true;
}

/* Every fused run of every chunk, in the order the core hands them to
 * cuda_fused, as kernels at file scope: a kernel cannot be defined inside
 * forward() or backward(), so the prologue walks the plans first. */
void cg_cuda_fused_kernels(CgEmitter *e) {
  IrGraph *g0 = e->g;
  const PassMemPlan *p0 = e->plan;
  const CgChunk *c0 = e->chunk;
  for (int c = 0; c < e->nchunks; c++) {
    e->chunk = &e->chunks[c], e->g = e->chunk->g, e->plan = e->chunk->plan;
    const PassMemPlan *p = e->plan;
    for (int i = 0; i < e->g->nodes.len; i++) {
      if (p->view[i] || p->absorbed[i] || !p->fused[i]) continue;
      int last = p->group_last[i];
      if (all_written(e, i, last) && !cg_cuda_in_epilogue(e, i)) emit_fused_kernel(e, i, last);
      i = last;
    }
  }
  e->g = g0, e->plan = p0, e->chunk = c0;
}

void cg_cuda_fused(CgEmitter *e, int first, int last) {
  if (cg_cuda_in_epilogue(e, first)) {
    emit(e, "/* in the epilogue of the GEMM that computes its operand */");
    return;
  }
  Fused f = fused_of(e, first, last);
  /* The vector loop when every pointer it moves 16 bytes at a time through
   * is 16-byte aligned (the plan's 64-byte regions hold whole vectors), and
   * unless SHARD_CUDA_VECTOR=0 turns it off (cu_vector). */
  char *args = ir_strdup(""), *aligned = ir_strdup("");
  for (int l = 0; l < f.nloads; l++) {
    args = ir_fmt("%s, %s", args, cuda_ref(e, f.loads[l].v));
    if (f.loads[l].full)
      aligned = ir_fmt("%s && CU_ALIGNED16(%s)", aligned, cuda_ref(e, f.loads[l].v));
  }
  for (int s = 0; s < f.nstores; s++) {
    args = ir_fmt("%s, %s", args, cuda_ref(e, f.stores[s]));
    aligned = ir_fmt("%s && CU_ALIGNED16(%s)", aligned, cuda_ref(e, f.stores[s]));
  }
  int64_t N = ir_type_numel(f.shape);
  emit(e, "{");
  e->depth++;
  emit(e, "const int vec = %s;", f.vectorizable ? ir_fmt("cu_vector()%s", aligned) : "0");
  emit(e, "CU_LAUNCH(cu_grid(vec ? %lldLL : %lldLL), %s)(vec%s);", (long long)(N / f.width),
       (long long)N, kernel_name(e, first), args);
  cg_launch_values(e, CG_K_ELEMENTWISE, NULL, f.loads, sizeof *f.loads, f.nloads, f.stores,
                   f.nstores);
  e->depth--;
  emit(e, "}");
  emit(e, "CU_LAUNCHED();");
}
