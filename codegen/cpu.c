/* The CPU target: C with OpenMP. GEMMs go through k_gemm (OpenBLAS), the
 * other ops through the kernels of kernels/cpu/kernels.h, and each chain of
 * elementwise ops becomes one loop. */
#include <string.h>
#include <unistd.h>

#include "cpu.h"

/* Baked in by CMake (codegen/CMakeLists.txt); the defaults let this file
 * compile on its own. */
#ifndef SHARDC_SOURCE_DIR
#define SHARDC_SOURCE_DIR "."
#endif
#ifndef SHARDC_C_COMPILER
#define SHARDC_C_COMPILER "cc"
#endif
#ifndef SHARDC_OPENMP_FLAGS
#define SHARDC_OPENMP_FLAGS "-fopenmp"
#endif
/* Flags the libraries were built with that the program must share: the
 * sanitizers of a sanitizer build, and for clang the silencing of its
 * "loop not vectorized" remarks, which -Werror would turn into errors. */
#ifndef SHARDC_BUILD_FLAGS
#define SHARDC_BUILD_FLAGS ""
#endif
#ifndef SHARDC_NATIVE_FLAGS
#define SHARDC_NATIVE_FLAGS ""
#endif
#ifndef SHARDC_LINK_LIBS
#define SHARDC_LINK_LIBS "-lopenblas -lcjson -lm"
#endif
#ifndef SHARDC_RT_LIBS_F32
#define SHARDC_RT_LIBS_F32 "libshard_rt_f32.a libshard_data.a libshard_kernels_f32.a"
#endif
#ifndef SHARDC_RT_LIBS_F64
#define SHARDC_RT_LIBS_F64 "libshard_rt_f64.a libshard_data.a libshard_kernels_f64.a"
#endif

/* Loops over fewer elements run on the calling thread, as the kernels'
 * own loops do (K_PAR_MIN): waking a team costs more than the work. */
#define PAR_MIN 32768

/* Reals of attention scratch one thread needs at sequence length s. It must
 * equal k_attention_scratch(s) of kernels/cpu; the generated program checks
 * that it does before it runs. */
#define CPU_ATTENTION_SCRATCH(s) (2 * 64 * (int64_t)(s))

/* The threads whose kernel scratch the plan holds. Rank programs run with
 * at most this many OpenMP threads, so that the plan (and hence the bytes
 * `shardc compile` prints) does not depend on the machine. */
#define CPU_THREADS 32

/* What the CPU target keeps while it writes one program. */
typedef struct CpuState {
  int chunk_state; /* which braces of a run of row chunks are open (chunks_begin) */
  bool team;       /* writing a sunk node: GEMMs in their team form */
  /* Inside a run of row chunks (PassMemPlan.chunked): the rows of one
   * chunk, whose first row the generated code holds in `r0` (and its
   * number in `chunk`); 0 elsewhere, and for the sunk nodes after it. */
  int64_t chunk_rows;
} CpuState;

static CpuState *cpu_state(CgEmitter *e) { return e->state; }

int64_t cg_cpu_chunk_rows(CgEmitter *e) { return cpu_state(e)->chunk_rows; }

/* ---------------------------------------------------------------- shapes */

static const char *ref(CgEmitter *e, const IrValue *v) { return cg_ref(e, v); }

/* Inside a run of row chunks (cg_cpu_chunk_rows(e) > 0) a node works on rows
 * r0 .. r0 + chunk_rows - 1 of its row-shaped operands: rrows is how many
 * rows it sees, rref where its first one starts. Outside, the whole. */
static int64_t rrows(CgEmitter *e, const IrValue *v) {
  return cg_cpu_chunk_rows(e) ? cg_cpu_chunk_rows(e) : cg_rows(v);
}

static const char *rref(CgEmitter *e, const IrValue *v) {
  if (!cg_cpu_chunk_rows(e)) return ref(e, v);
  return ir_fmt("(%s + r0 * %lld)", ref(e, v), (long long)cg_dim(v, -1));
}

/* GEMMs that produce a gradient straight into its slot add (beta = 1). */
static const char *beta_of(CgEmitter *e, const IrValue *out) {
  return cg_buf(e, out)->region == PASS_REGION_GRADS ? "1" : "0";
}

/* ------------------------------------------------------------ fused loops */

typedef struct Load {
  const IrValue *v;
  CgBc bc;
  const char *index;
} Load;

typedef struct Fused {
  int first, last;
  const IrType *shape;
  Load *loads;
  int nloads;
  bool two_level; /* rows r of `cols` elements: suffix operands read [j], row operands [r] */
  int64_t cols;
  int64_t per; /* in a row chunk: its elements; 0 outside */
} Fused;

static void collect_loads(CgEmitter *e, Fused *f) {
  int cap = 0;
  for (int k = f->first; k <= f->last; k++) cap += cg_node(e, k)->nin;
  f->loads = ir_alloc((size_t)(cap ? cap : 1) * sizeof *f->loads);
  for (int k = f->first; k <= f->last; k++) {
    const IrNode *n = cg_node(e, k);
    for (int j = 0; j < n->nin; j++) {
      const IrValue *v = n->in[j];
      bool seen = cg_in_run(e, f->first, f->last, v);
      for (int l = 0; l < f->nloads && !seen; l++) seen = f->loads[l].v == v;
      if (!seen) f->loads[f->nloads++] = (Load){v, cg_bcast(&v->type, f->shape), NULL};
    }
  }
  /* One loop of rows works when every broadcast operand repeats along the
   * same row length: a bias [h] over [b, s, h], or a per-row scalar. */
  f->cols = 0;
  f->two_level = true;
  for (int l = 0; l < f->nloads; l++) {
    CgBc bc = f->loads[l].bc;
    if (bc.kind == CG_BC_GENERAL || ((bc.kind == CG_BC_SUFFIX || bc.kind == CG_BC_ROW) && f->cols &&
                                  f->cols != bc.size))
      f->two_level = false;
    if (bc.kind == CG_BC_SUFFIX || bc.kind == CG_BC_ROW) f->cols = bc.size;
  }
  if (!f->cols || (f->per && f->per % f->cols)) f->two_level = false;
  for (int l = 0; l < f->nloads; l++) {
    Load *ld = &f->loads[l];
    switch (ld->bc.kind) {
    case CG_BC_FULL: ld->index = "i"; break;
    case CG_BC_SCALAR: ld->index = "0"; break;
    case CG_BC_SUFFIX: ld->index = f->two_level ? "j" : ir_fmt("i %% %lld", (long long)ld->bc.size); break;
    case CG_BC_ROW: ld->index = f->two_level ? "r" : ir_fmt("i / %lld", (long long)ld->bc.size); break;
    case CG_BC_GENERAL: ld->index = cg_bcast_index(&ld->v->type, f->shape, "i"); break;
    }
  }
}

/* A run and the names of its outputs' pointers, for the hooks below. */
typedef struct Run {
  const Fused *f;
  const char **store;
} Run;

static const char *operand(CgEmitter *e, const void *run, const IrValue *v) {
  const Fused *f = ((const Run *)run)->f;
  if (cg_in_run(e, f->first, f->last, v)) return cg_reg(e, v);
  for (int l = 0; l < f->nloads; l++)
    if (f->loads[l].v == v) return ir_fmt("x%d[%s]", l, f->loads[l].index);
  unreachable();
}

static void store(CgEmitter *e, const void *run, const IrValue *out, int slot, const char *reg) {
  emit(e, "%s[i] %s= %s;", ((const Run *)run)->store[slot],
       cg_buf(e, out)->region == PASS_REGION_GRADS ? "+" : "", reg);
}

static void emit_fused_body(CgEmitter *e, const Fused *f, const char **store_names) {
  Run run = {f, store_names};
  CgRunHooks h = {operand, store, &run};
  cg_formula_body(e, f->first, f->last, &h);
}

static void cpu_fused(CgEmitter *e, int first, int last) {
  /* In a chunk: its elements, [chunk * per, (chunk + 1) * per), by rows
   * when a chunk holds whole rows of the loop. */
  int64_t per = cg_cpu_chunk_rows(e) * cg_dim(cg_node(e, first)->out[0], -1);
  Fused f = {.first = first, .last = last, .shape = &cg_node(e, first)->out[0]->type, .per = per};
  collect_loads(e, &f);
  int64_t N = ir_type_numel(f.shape);
  emit(e, "{");
  e->depth++;
  for (int l = 0; l < f.nloads; l++)
    emit(e, "const real *restrict x%d = %s;", l, ref(e, f.loads[l].v));
  const char **store = ir_alloc(sizeof *store * (size_t)(2 * (last - first + 1)));
  const IrValue **outs = ir_alloc(sizeof *outs * (size_t)(2 * (last - first + 1)));
  int nstore = 0;
  for (int k = first; k <= last; k++) {
    const IrNode *n = cg_node(e, k);
    for (int j = 0; j < n->nout; j++)
      if (cg_buf(e, n->out[j])->region != PASS_REGION_NONE) {
        outs[nstore] = n->out[j], store[nstore] = ir_fmt("y%d", nstore);
        emit(e, "real *restrict %s = %s;", store[nstore++], ref(e, n->out[j]));
      }
  }
  bool par = N >= PAR_MIN && !cg_cpu_chunk_rows(e);
  if (f.two_level) {
    if (par) emit(e, "#pragma omp parallel for schedule(static)");
    if (cg_cpu_chunk_rows(e))
      emit(e, "for (int64_t r = chunk * %lld; r < (chunk + 1) * %lld; r++) {",
           (long long)(per / f.cols), (long long)(per / f.cols));
    else
      emit(e, "for (int64_t r = 0; r < %lld; r++) {", (long long)(N / f.cols));
    e->depth++;
    emit(e, "#pragma omp simd");
    emit(e, "for (int64_t j = 0; j < %lld; j++) {", (long long)f.cols);
    e->depth++;
    emit(e, "const int64_t i = r * %lld + j;", (long long)f.cols);
    emit_fused_body(e, &f, store);
    e->depth--;
    emit(e, "}");
  } else {
    emit(e, par ? "#pragma omp parallel for simd schedule(static)" : "#pragma omp simd");
    if (cg_cpu_chunk_rows(e))
      emit(e, "for (int64_t i = chunk * %lld; i < (chunk + 1) * %lld; i++) {", (long long)per,
           (long long)per);
    else
      emit(e, "for (int64_t i = 0; i < %lld; i++) {", (long long)N);
    e->depth++;
    emit_fused_body(e, &f, store);
  }
  e->depth--;
  emit(e, "}");
  e->depth--;
  emit(e, "}");
  const char *loop = ir_fmt("(loop) %s", cg_listing_ops(e, first, last));
  cg_launch_values(e, CG_K_ELEMENTWISE, loop, f.loads, sizeof *f.loads, f.nloads, outs, nstore);
}

/* ------------------------------------------------------------------ GEMMs */

static void gemm(CgEmitter *e, int ta, int tb, int64_t M, int64_t N, int64_t K, const char *A,
                 int64_t lda, const char *B, int64_t ldb, const char *beta, const char *C,
                 int64_t ldc) {
  /* Alone, the GEMM is cut into blocks the threads share; in a row chunk it
   * runs on the chunk's thread. */
  emit(e, "%s(%d, %d, %lld, %lld, %lld, 1, %s, %lld, %s, %lld, %s, %s, %lld);",
       cg_cpu_chunk_rows(e) ? "k_gemm" : cpu_state(e)->team ? "k_gemm_blocks_team" : "k_gemm_blocks", ta, tb,
       (long long)M, (long long)N,
       (long long)K, A, (long long)lda, B, (long long)ldb, beta, C, (long long)ldc);
  cg_launch_gemm(e, NULL, 1, M, N, K, lda, ldb, ldc, e->plan->real_bytes, e->plan->real_bytes,
                 strcmp(beta, "1") == 0);
}

/* a[..., m, k] @ b[..., k, n]: one GEMM when b is shared and a's rows are
 * contiguous, a batched GEMM otherwise (a shared operand has stride 0). */
static void emit_matmul(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *a = n->in[0], *b = n->in[1], *y = n->out[0];
  CgMatmul mm;
  if (!cg_matmul_shape(e, n, &mm)) return;
  const char *beta = beta_of(e, y);
  if (cg_cpu_chunk_rows(e)) /* a shared 2-D b (memplan's row_local): a's rows in one GEMM */
    gemm(e, 0, mm.tb, cg_cpu_chunk_rows(e), mm.n, mm.k, rref(e, a), mm.lda, ref(e, b), mm.ldb,
         beta, rref(e, y), mm.n);
  else if (mm.form == CG_MM_ONE)
    gemm(e, mm.ta, mm.tb, mm.m, mm.n, mm.k, ref(e, a), mm.lda, ref(e, b), mm.ldb, beta, ref(e, y),
         mm.n);
  else if (mm.form == CG_MM_ROWS)
    gemm(e, 0, mm.tb, mm.batch * mm.m, mm.n, mm.k, ref(e, a), mm.lda, ref(e, b), mm.ldb, beta,
         ref(e, y), mm.n);
  else
    emit(e, "k_gemm_batched(%d, %d, %lld, %lld, %lld, %lld, 1, %s, %lld, %lld, %s, %lld, %lld, "
            "%s, %s, %lld, %lld);",
         mm.ta, mm.tb, (long long)mm.batch, (long long)mm.m, (long long)mm.n, (long long)mm.k,
         ref(e, a), (long long)mm.lda, (long long)mm.sa, ref(e, b), (long long)mm.ldb,
         (long long)mm.sb, beta, ref(e, y), (long long)mm.n, (long long)(mm.m * mm.n)),
    cg_launch_gemm(e, NULL, mm.batch, mm.m, mm.n, mm.k, mm.lda, mm.ldb, mm.n,
                   e->plan->real_bytes, e->plan->real_bytes, strcmp(beta, "1") == 0);
}

/* x[..., in] @ w + bias; w is [in, out], or [out, in] when transposed. */
static void emit_linear(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *w = n->in[1], *y = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t in = cg_dim(x, -1), out = cg_dim(y, -1), rows = rrows(e, x);
  gemm(e, 0, tr, rows, out, in, rref(e, x), in, ref(e, w), tr ? in : out, beta_of(e, y),
       rref(e, y), out);
  if (n->nin == 3) emit(e, "k_add_bias(%s, %s, %lld, %lld);", rref(e, y), ref(e, n->in[2]),
                        (long long)rows, (long long)out),
      cg_launch(e, CG_K_ELEMENTWISE, NULL, 0, 2.0 * (double)(rows * out) * e->plan->real_bytes,
                (double)(rows * out) * e->plan->real_bytes);
}

/* dx[..., in] = dy[..., out] w^T (w^T^T = w when transposed). */
static void emit_linear_dx(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *dy = n->in[0], *w = n->in[1], *dx = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t out = cg_dim(dy, -1), in = cg_dim(dx, -1), rows = rrows(e, dy);
  gemm(e, 0, !tr, rows, in, out, rref(e, dy), out, ref(e, w), tr ? in : out, beta_of(e, dx),
       rref(e, dx), in);
}

/* dw = x^T dy [in, out], or dy^T x [out, in] when transposed, summed over
 * every leading dim by the GEMM's inner dimension. */
static void emit_linear_dw(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *dy = n->in[1], *dw = n->out[0];
  int tr = (int)ir_attr_int(n, "transposed");
  int64_t in = cg_dim(x, -1), out = cg_dim(dy, -1), rows = cg_rows(x);
  if (tr)
    gemm(e, 1, 0, out, in, rows, ref(e, dy), out, ref(e, x), in, beta_of(e, dw), ref(e, dw), in);
  else
    gemm(e, 1, 0, in, out, rows, ref(e, x), in, ref(e, dy), out, beta_of(e, dw), ref(e, dw), out);
}

/* ----------------------------------------------------------------- layout */

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

static void emit_copy(CgEmitter *e, const IrValue *y, const IrValue *x) {
  emit(e, "memcpy(%s, %s, %lld * sizeof(real));", ref(e, y), ref(e, x), (long long)cg_numel(x));
  cg_launch_copy(e, (double)cg_numel(x) * e->plan->real_bytes);
}

static void emit_transpose(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (!cg_transpose_call(e, n, "k_")) emit_copy(e, n->out[0], n->in[0]);
}

static void emit_split_heads(CgEmitter *e, int index) { cg_heads_call(e, cg_node(e, index), true, "k_"); }
static void emit_merge_heads(CgEmitter *e, int index) { cg_heads_call(e, cg_node(e, index), false, "k_"); }

/* A split that is not a view: one strided block copy per part. */
static void emit_split(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int axis = norm_axis(ir_attr_int(n, "axis"), x->type.rank);
  int64_t outer = cg_dims_prod(&x->type, 0, axis), cols = cg_numel(x) / outer, part = cols / n->nout;
  if (cg_cpu_chunk_rows(e)) outer = cg_cpu_chunk_rows(e); /* along the last axis (memplan's row_local) */
  for (int j = 0; j < n->nout; j++)
    emit(e, "k_copy2d(%s, %lld, %s%s, %lld, %lld, %lld);", rref(e, n->out[j]), (long long)part,
         rref(e, x), j ? ir_fmt(" + %lld", (long long)(j * part)) : "", (long long)cols,
         (long long)outer, (long long)part),
        cg_launch_copy(e, (double)(outer * part) * e->plan->real_bytes);
}

/* x[..., start:end, ...]: one strided block copy, as a part of split. */
static void emit_slice(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int axis = norm_axis(ir_attr_int(n, "axis"), x->type.rank);
  int64_t outer = cg_dims_prod(&x->type, 0, axis), cols = cg_numel(x) / outer;
  int64_t part = cg_numel(n->out[0]) / outer;
  int64_t at = ir_attr_int(n, "start") * (cols / x->type.shape[axis]);
  emit(e, "k_copy2d(%s, %lld, %s%s, %lld, %lld, %lld);", rref(e, n->out[0]), (long long)part,
       rref(e, x), at ? ir_fmt(" + %lld", (long long)at) : "", (long long)cols, (long long)outer,
       (long long)part);
  cg_launch_copy(e, (double)(outer * part) * e->plan->real_bytes);
}

static void emit_concat(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *y = n->out[0];
  int axis = norm_axis(ir_attr_int(n, "axis"), y->type.rank);
  int64_t outer = cg_dims_prod(&y->type, 0, axis), cols = cg_numel(y) / outer, at = 0;
  int64_t rows = cg_cpu_chunk_rows(e) ? cg_cpu_chunk_rows(e) : outer; /* along the last axis in a chunk */
  for (int j = 0; j < n->nin; j++) {
    int64_t c = cg_numel(n->in[j]) / outer;
    emit(e, "k_copy2d(%s%s, %lld, %s, %lld, %lld, %lld);", rref(e, y),
         at ? ir_fmt(" + %lld", (long long)at) : "", (long long)cols, rref(e, n->in[j]),
         (long long)c, (long long)rows, (long long)c);
    cg_launch_copy(e, (double)(rows * c) * e->plan->real_bytes);
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
  case CG_BC_SCALAR:
  case CG_BC_SUFFIX:
    emit(e, "k_sum_rows(%s, %s, %lld, %lld);", ref(e, y), ref(e, x), (long long)(N / M), (long long)M);
    cg_launch_node(e, CG_K_REDUCTION, NULL, n);
    return;
  case CG_BC_ROW:
    emit(e, "{");
    e->depth++;
    emit(e, "real *restrict y = %s;", ref(e, y));
    emit(e, "const real *restrict x = %s;", ref(e, x));
    if (N >= PAR_MIN) emit(e, "#pragma omp parallel for schedule(static)");
    emit(e, "for (int64_t r = 0; r < %lld; r++) {", (long long)M);
    e->depth++;
    emit(e, "double s = 0;");
    emit(e, "for (int64_t j = 0; j < %lld; j++) s += x[r * %lld + j];", (long long)bc.size,
         (long long)bc.size);
    emit(e, "y[r] = (real)s;");
    e->depth--;
    emit(e, "}");
    e->depth--;
    emit(e, "}");
    cg_launch_node(e, CG_K_REDUCTION, "(loop) sum_to", n);
    return;
  case CG_BC_GENERAL:
    emit(e, "{");
    e->depth++;
    emit(e, "real *restrict y = %s;", ref(e, y));
    emit(e, "const real *restrict x = %s;", ref(e, x));
    emit(e, "memset(y, 0, %lld * sizeof(real));", (long long)M);
    emit(e, "for (int64_t i = 0; i < %lld; i++) y[%s] += x[i];", (long long)N,
         cg_bcast_index(&y->type, &x->type, "i"));
    e->depth--;
    emit(e, "}");
    cg_launch_node(e, CG_K_REDUCTION, "(loop) sum_to", n);
    return;
  }
}

/* ------------------------------------------------------- the other kernels */

static void emit_attention(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *q = n->in[0];
  int64_t H, K, d;
  cg_attention_dims(n, &H, &K, &d);
  int causal = (int)ir_attr_int(n, "causal");
  /* In a chunk: its whole sequences (memplan's row_local). */
  int64_t b = cg_cpu_chunk_rows(e) ? cg_cpu_chunk_rows(e) / cg_dim(q, 1) : cg_dim(q, 0);
  /* The key-padding mask [b, s] has one element per position (row): in a
   * chunk it starts at r0 itself, not at r0 rows of its last dim. */
  int mi = n->op == IR_OP_ATTENTION ? 3 : 6;
  const char *mask = "NULL";
  if (n->nin > mi) {
    if (!cg_need_i32(e, n, n->in[mi])) return;
    mask = cg_cpu_chunk_rows(e) ? ir_fmt("(%s + r0)", ref(e, n->in[mi])) : ref(e, n->in[mi]);
  }
  if (n->op == IR_OP_ATTENTION && n->nin > mi)
    emit(e, "k_attention_masked_fwd(%s, %s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %d, %s);",
         rref(e, n->out[0]), rref(e, q), rref(e, n->in[1]), rref(e, n->in[2]), mask, (long long)b,
         (long long)cg_dim(q, 1), (long long)H, (long long)K, (long long)d, causal, cg_scratch(e, index));
  else if (n->op == IR_OP_ATTENTION)
    emit(e, "k_attention_fwd(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %d, %s);",
         rref(e, n->out[0]), rref(e, q), rref(e, n->in[1]), rref(e, n->in[2]), (long long)b,
         (long long)cg_dim(q, 1), (long long)H, (long long)K, (long long)d, causal, cg_scratch(e, index));
  else if (n->nin > mi)
    emit(e, "k_attention_masked_bwd(%s, %s, %s, %s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %lld, "
            "%lld, %d, %s);",
         rref(e, n->out[0]), rref(e, n->out[1]), rref(e, n->out[2]), rref(e, n->in[4]),
         rref(e, q), rref(e, n->in[1]), rref(e, n->in[2]), rref(e, n->in[3]), mask, (long long)b,
         (long long)cg_dim(q, 1), (long long)H, (long long)K, (long long)d, causal, cg_scratch(e, index));
  else
    emit(e, "k_attention_bwd(%s, %s, %s, %s, %s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld, %d, %s);",
         rref(e, n->out[0]), rref(e, n->out[1]), rref(e, n->out[2]), rref(e, n->in[4]),
         rref(e, q), rref(e, n->in[1]), rref(e, n->in[2]), rref(e, n->in[3]), (long long)b,
         (long long)cg_dim(q, 1), (long long)H, (long long)K, (long long)d, causal, cg_scratch(e, index));
  cg_launch_attention(e, NULL, n);
}

/* layernorm(x, w[, bias]) and add_layernorm(a, b, w[, bias]), whose x is
 * the sum s = a + b it writes as its first result. */
static void emit_layernorm(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int p = n->op == IR_OP_ADD_LAYERNORM ? 2 : 1; /* the weight's input */
  const char *bias = n->nin == p + 2 ? ref(e, n->in[p + 1]) : "NULL";
  if (p == 2)
    emit(e, "k_add_layernorm_fwd(%s, %s, %s, %s, %s, %s, %lld, %lld, %s);", rref(e, n->out[0]),
         rref(e, n->out[1]), rref(e, x), rref(e, n->in[1]), ref(e, n->in[2]), bias,
         (long long)rrows(e, x), (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")));
  else
    emit(e, "k_layernorm_fwd(%s, %s, %s, %s, %lld, %lld, %s);", rref(e, n->out[0]), rref(e, x),
         ref(e, n->in[1]), bias, (long long)rrows(e, x), (long long)cg_dim(x, -1),
         cg_real(ir_attr_float(n, "eps")));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_rmsnorm(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  if (n->op == IR_OP_ADD_RMSNORM)
    emit(e, "k_add_rmsnorm_fwd(%s, %s, %s, %s, %s, %lld, %lld, %s);", rref(e, n->out[0]),
         rref(e, n->out[1]), rref(e, x), rref(e, n->in[1]), ref(e, n->in[2]),
         (long long)rrows(e, x), (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")));
  else
    emit(e, "k_rmsnorm_fwd(%s, %s, %s, %lld, %lld, %s);", rref(e, n->out[0]), rref(e, x),
         ref(e, n->in[1]), (long long)rrows(e, x), (long long)cg_dim(x, -1),
         cg_real(ir_attr_float(n, "eps")));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

/* The norm gradients; with a fourth input (add-norm's residual gradient)
 * the _res kernels add it to dx. */
static const char *res_sfx(const IrNode *n) { return n->nin > 3 ? "_res" : ""; }

static const char *res_arg(CgEmitter *e, const IrNode *n) {
  return n->nin > 3 ? ir_fmt("%s, ", ref(e, n->in[3])) : "";
}

static void emit_layernorm_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  /* A layernorm without a bias has no use for db. */
  const PassBuf *db = n->nout == 3 ? cg_buf(e, n->out[2]) : NULL;
  bool want_db = db && (db->uses > 0 || db->grad_of);
  emit(e, "k_layernorm_bwd%s(%s, %s, %s, %s, %s, %s, %s%lld, %lld, %s);", res_sfx(n),
       ref(e, n->out[0]), ref(e, n->out[1]), want_db ? ref(e, n->out[2]) : "NULL",
       ref(e, n->in[2]), ref(e, x), ref(e, n->in[1]), res_arg(e, n), (long long)cg_rows(x),
       (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_rmsnorm_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_rmsnorm_bwd%s(%s, %s, %s, %s, %s, %s%lld, %lld, %s);", res_sfx(n), ref(e, n->out[0]),
       ref(e, n->out[1]), ref(e, n->in[2]), ref(e, x), ref(e, n->in[1]), res_arg(e, n),
       (long long)cg_rows(x), (long long)cg_dim(x, -1), cg_real(ir_attr_float(n, "eps")));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_softmax(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_softmax_fwd(%s, %s, %lld, %lld);", ref(e, n->out[0]), ref(e, x),
       (long long)cg_rows(x), (long long)cg_dim(x, -1));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_softmax_grad(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  emit(e, "k_softmax_bwd(%s, %s, %s, %lld, %lld);", ref(e, n->out[0]), ref(e, x),
       ref(e, n->in[1]), (long long)cg_rows(x), (long long)cg_dim(x, -1));
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

static void emit_causal_mask(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int64_t s = cg_dim(x, -1);
  emit(e, "k_causal_mask(%s, %s, %lld, %lld, %s);", ref(e, n->out[0]), ref(e, x),
       (long long)(cg_numel(x) / (s * s)), (long long)s, cg_real(ir_attr_float(n, "fill")));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
}

/* In a chunk: its whole sequences (memplan's row_local). */
static void emit_rope(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0];
  int64_t H = ir_attr_int(n, "heads");
  int64_t b = cg_cpu_chunk_rows(e) ? cg_cpu_chunk_rows(e) / cg_dim(x, -2) : cg_numel(x) / (cg_dim(x, -2) * cg_dim(x, -1));
  int64_t d = cg_dim(x, -1) / H, r = ir_attr_int(n, "dims");
  emit(e, "k_rope_part(%s, %s, %lld, %lld, %lld, %lld, %lld, %s, %d);", rref(e, n->out[0]),
       rref(e, x), (long long)b, (long long)cg_dim(x, -2), (long long)H, (long long)d,
       (long long)(r ? r : d), cg_real(ir_attr_float(n, "theta")), (int)ir_attr_int(n, "inverse"));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
}

static void emit_dropout(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  /* In evaluation the rate is 0: the kernel copies. */
  emit(e, "k_dropout_%s(%s, %s, %lld, ctx->training ? %s : 0, ctx->seed, %lld);",
       n->op == IR_OP_DROPOUT ? "fwd" : "bwd", ref(e, n->out[0]), ref(e, n->in[0]),
       (long long)cg_numel(n->in[0]), cg_real(ir_attr_float(n, "rate")),
       (long long)ir_attr_int(n, "site"));
  cg_launch_node(e, CG_K_ELEMENTWISE, NULL, n);
}

static void emit_loss(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *logits = n->in[0], *targets = n->in[1];
  if (!cg_need_i32(e, n, targets)) return;
  int64_t V = cg_dim(logits, -1), rows = cg_numel(targets);
  int ignore = ir_attr_has(n, "ignore") ? (int)ir_attr_int(n, "ignore") : 0;
  if (ignore && n->op == IR_OP_CROSS_ENTROPY)
    emit(e, "k_cross_entropy_ign_fwd(%s, %s, %s, %lld, %lld, %lld, 1);", ref(e, n->out[0]),
         ref(e, logits), ref(e, targets), (long long)rows, (long long)V, (long long)V);
  else if (ignore)
    emit(e, "k_cross_entropy_ign_bwd(%s, %s, %s, %s, %lld, %lld, %lld, 1);", ref(e, n->out[0]),
         ref(e, logits), ref(e, targets), ref(e, n->in[2]), (long long)rows, (long long)V,
         (long long)V);
  else if (n->op == IR_OP_CROSS_ENTROPY)
    emit(e, "k_cross_entropy_fwd(%s, %s, %s, %lld, %lld, %lld);", ref(e, n->out[0]),
         ref(e, logits), ref(e, targets), (long long)rows, (long long)V, (long long)V);
  else
    emit(e, "k_cross_entropy_bwd(%s, %s, %s, %s, %lld, %lld, %lld);", ref(e, n->out[0]),
         ref(e, logits), ref(e, targets), ref(e, n->in[2]), (long long)rows, (long long)V,
         (long long)V);
  cg_launch_node(e, CG_K_REDUCTION, NULL, n);
}

/* embedding_grad straight into the gradient slot: dy's rows added to the
 * rows the ids picked. Threads split the columns, so that two equal ids
 * never race and every element sums its rows in the same order. With
 * vp_rows > 0 the slot is this rank's rows [tp * vp_rows, (tp + 1) * vp_rows)
 * of a vocabulary-parallel table, and ids outside it add nothing. */
void cg_cpu_embedding_scatter(CgEmitter *e, const IrNode *n, int64_t vp_rows) {
  const IrValue *ids = n->in[0], *dy = n->in[1], *y = n->out[0];
  int64_t rows = cg_numel(ids), h = cg_dim(y, -1);
  emit(e, "{");
  e->depth++;
  emit(e, "real *restrict g = %s;", ref(e, y));
  emit(e, "const int32_t *restrict ids = %s;", ref(e, ids));
  emit(e, "const real *restrict dy = %s;", ref(e, dy));
  if (vp_rows) emit(e, "const int64_t lo = (int64_t)ctx->tp * %lld;", (long long)vp_rows);
  if (rows * h >= PAR_MIN) emit(e, "#pragma omp parallel for schedule(static)");
  emit(e, "for (int64_t c = 0; c < %lld; c += 64) {", (long long)h);
  e->depth++;
  emit(e, "const int64_t end = c + 64 < %lld ? c + 64 : %lld;", (long long)h, (long long)h);
  emit(e, "for (int64_t r = 0; r < %lld; r++) {", (long long)rows);
  e->depth++;
  if (vp_rows) {
    emit(e, "const int64_t row = (int64_t)ids[r] - lo;");
    emit(e, "if (row < 0 || row >= %lld) continue;", (long long)vp_rows);
    emit(e, "real *restrict gr = g + row * %lld;", (long long)h);
  } else {
    emit(e, "real *restrict gr = g + (int64_t)ids[r] * %lld;", (long long)h);
  }
  emit(e, "const real *restrict dr = dy + r * %lld;", (long long)h);
  emit(e, "#pragma omp simd");
  emit(e, "for (int64_t j = c; j < end; j++) gr[j] += dr[j];");
  e->depth--;
  emit(e, "}");
  e->depth--;
  emit(e, "}");
  e->depth--;
  emit(e, "}");
  cg_launch(e, CG_K_REDUCTION, "(loop) embedding scatter", 0, cg_listing_bytes(e, ids) +
            2 * cg_listing_bytes(e, dy), cg_listing_bytes(e, dy));
}

static void emit_embedding(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *ids = n->in[0], *y = n->out[0];
  if (!cg_need_i32(e, n, ids)) return;
  if (n->op == IR_OP_EMBEDDING) /* in a chunk: its ids, one per row */
    emit(e, "k_embedding_fwd(%s, %s%s, %s, %lld, %lld);", rref(e, y), ref(e, ids),
         cg_cpu_chunk_rows(e) ? " + r0" : "", ref(e, n->in[1]),
         (long long)(cg_cpu_chunk_rows(e) ? cg_cpu_chunk_rows(e) : cg_numel(ids)), (long long)cg_dim(y, -1)),
        cg_launch_node(e, CG_K_COPY, NULL, n);
  else if (cg_buf(e, y)->region == PASS_REGION_GRADS)
    cg_cpu_embedding_scatter(e, n, 0);
  else
    emit(e, "k_embedding_bwd(%s, %s, %s, %lld, %lld, %lld);", ref(e, y), ref(e, ids),
         ref(e, n->in[1]), (long long)cg_numel(ids), (long long)cg_dim(y, 0), (long long)cg_dim(y, -1)),
        cg_launch_node(e, CG_K_REDUCTION, NULL, n);
}

static void emit_arange(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *y = n->out[0];
  if (y->type.dtype != IR_I32) cg_error(e, n, "arange must be i32");
  else emit(e, "k_arange(%s, %lld);", ref(e, y), (long long)cg_numel(y)),
    cg_launch_node(e, CG_K_COPY, NULL, cg_node(e, index));
}

static void emit_zeros(CgEmitter *e, int index) {
  const IrValue *y = cg_node(e, index)->out[0];
  emit(e, "memset(%s, 0, %lld * sizeof(%s));", ref(e, y), (long long)cg_numel(y),
       y->type.dtype == IR_I32 ? "int32_t" : "real");
  cg_launch(e, CG_K_COPY, NULL, 0, 0, cg_listing_bytes(e, y));
}

/* A view unless the plan says otherwise. */
static void emit_reshape(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  emit_copy(e, n->out[0], n->in[0]);
}

/* The routed layer's kernels (kernels/cpu/moe.c): tokens T and their k
 * choices from the weights' shape [..., k], the one every op of the
 * family carries or derives. */
static int64_t moe_k(const IrValue *w) { return cg_dim(w, -1); }
static int64_t moe_tokens(const IrValue *w) { return cg_numel(w) / cg_dim(w, -1); }

static void emit_router(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *l = n->in[0];
  int64_t E = cg_dim(l, -1);
  int score = (int)ir_attr_int(n, "score"), norm = (int)ir_attr_int(n, "normalize");
  if (n->op == IR_OP_ROUTER)
    emit(e, "k_router_fwd(%s, %s, %s, %lld, %lld, %lld, %d, %d);", ref(e, n->out[0]),
         ref(e, n->out[1]), ref(e, l), (long long)(cg_numel(l) / E), (long long)E,
         (long long)ir_attr_int(n, "k"), score, norm);
  else
    emit(e, "k_router_bwd(%s, %s, %s, %s, %lld, %lld, %lld, %d, %d);", ref(e, n->out[0]),
         ref(e, l), ref(e, n->in[1]), ref(e, n->in[2]), (long long)(cg_numel(l) / E),
         (long long)E, (long long)ir_attr_int(n, "k"), score, norm);
  cg_launch_node(e, CG_K_NORM, NULL, n);
}

/* router_load, router_z_loss and their gradients: per-token statistics of
 * the logits summed over the tokens. */
static void emit_router_load(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *l = n->in[0];
  int64_t E = cg_dim(l, -1);
  if (n->op == IR_OP_ROUTER_Z_LOSS || n->op == IR_OP_ROUTER_Z_LOSS_GRAD)
    emit(e, "k_router_z_loss_%s(%s, %s%s%s, %lld, %lld);",
         n->op == IR_OP_ROUTER_Z_LOSS ? "fwd" : "bwd", ref(e, n->out[0]), ref(e, l),
         n->op == IR_OP_ROUTER_Z_LOSS ? "" : ", ", n->op == IR_OP_ROUTER_Z_LOSS ? "" : ref(e, n->in[1]),
         (long long)(cg_numel(l) / E), (long long)E);
  else if (n->op == IR_OP_ROUTER_LOAD)
    emit(e, "k_router_load_fwd(%s, %s, %lld, %lld, %lld);", ref(e, n->out[0]), ref(e, l),
         (long long)(cg_numel(l) / E), (long long)E, (long long)ir_attr_int(n, "k"));
  else
    emit(e, "k_router_load_bwd(%s, %s, %s, %lld, %lld);", ref(e, n->out[0]), ref(e, l),
         ref(e, n->in[1]), (long long)(cg_numel(l) / E), (long long)E);
  cg_launch_node(e, CG_K_REDUCTION, NULL, n);
}

static void emit_moe_dispatch(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *x = n->in[0], *ex = n->in[1];
  int64_t E = cg_numel(n->out[2]);
  emit(e, "k_moe_dispatch(%s, %s, %s, %s, %s, %lld, %lld, %lld, %lld, %lld);", ref(e, n->out[0]),
       ref(e, n->out[1]), ref(e, n->out[2]), ref(e, x), ref(e, ex), (long long)moe_tokens(ex),
       (long long)moe_k(ex), (long long)cg_dim(x, -1), (long long)E,
       (long long)ir_moe_capacity(ir_attr_float(n, "capacity"), cg_numel(ex), E));
  cg_launch_node(e, CG_K_COPY, NULL, n);
}

/* moe_combine(rows, pos, weights), moe_undispatch(drows, pos): the same
 * kernel, the second with weights 1. */
static void emit_moe_combine(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *rows = n->in[0], *y = n->out[0];
  int64_t T = cg_numel(y) / cg_dim(y, -1);
  if (n->op == IR_OP_MOE_COMBINE_GRAD)
    emit(e, "k_moe_combine_bwd(%s, %s, %s, %s, %s, %s, %lld, %lld, %lld);", ref(e, n->out[0]),
         ref(e, n->out[1]), ref(e, rows), ref(e, n->in[1]), ref(e, n->in[2]), ref(e, n->in[3]),
         (long long)moe_tokens(n->in[2]), (long long)moe_k(n->in[2]), (long long)cg_dim(rows, -1));
  else
    emit(e, "k_moe_combine(%s, %s, %s, %s, %lld, %lld, %lld);", ref(e, y), ref(e, rows),
         ref(e, n->in[1]), n->op == IR_OP_MOE_COMBINE ? ref(e, n->in[2]) : "NULL", (long long)T,
         (long long)(cg_dim(rows, 0) / T), (long long)cg_dim(rows, -1));
  cg_launch_node(e, CG_K_REDUCTION, NULL, n);
}

/* grouped_linear(x, w, counts), _dx(dy, w, counts), _dw(x, dy, counts). */
static void emit_grouped_linear(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  const IrValue *c = n->in[2];
  int tr = (int)ir_attr_int(n, "transposed");
  const IrValue *w = n->op == IR_OP_GROUPED_LINEAR_DW ? n->out[0] : n->in[1];
  int64_t in = cg_dim(w, tr ? 2 : 1), out = cg_dim(w, tr ? 1 : 2);
  const char *name = n->op == IR_OP_GROUPED_LINEAR ? "" : n->op == IR_OP_GROUPED_LINEAR_DX ? "_dx" : "_dw";
  emit(e, "k_grouped_linear%s(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %d);", name,
       ref(e, n->out[0]), ref(e, n->in[0]), ref(e, n->in[1]), ref(e, c),
       (long long)cg_dim(n->in[0], 0), (long long)cg_numel(c), (long long)in, (long long)out, tr);
  cg_launch_node(e, CG_K_GEMM, NULL, n);
}

/* ------------------------------------------------------------ the op table */

/* How the CPU target writes an op that runs on its own (or on one chunk
 * of rows, memplan's row_local): the kernel calls of its node. An
 * elementwise op with a formula (ir/ops.def) needs no line: the fused
 * loops write it. An op with neither (collectives, tp_copy, pp_boundary)
 * is cpu_tp.c's or the core's; a node that reaches none is not
 * supported. A new op with kernels of its own adds its line here. */
static void (*const cpu_kernels[IR_OP_COUNT])(CgEmitter *e, int index) = {
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
    [IR_OP_ROUTER] = emit_router,
    [IR_OP_ROUTER_GRAD] = emit_router,
    [IR_OP_ROUTER_LOAD] = emit_router_load,
    [IR_OP_ROUTER_LOAD_GRAD] = emit_router_load,
    [IR_OP_ROUTER_Z_LOSS] = emit_router_load,
    [IR_OP_ROUTER_Z_LOSS_GRAD] = emit_router_load,
    [IR_OP_MOE_DISPATCH] = emit_moe_dispatch,
    [IR_OP_MOE_UNDISPATCH] = emit_moe_combine,
    [IR_OP_MOE_COMBINE] = emit_moe_combine,
    [IR_OP_MOE_COMBINE_GRAD] = emit_moe_combine,
    [IR_OP_GROUPED_LINEAR] = emit_grouped_linear,
    [IR_OP_GROUPED_LINEAR_DX] = emit_grouped_linear,
    [IR_OP_GROUPED_LINEAR_DW] = emit_grouped_linear,
};

static bool cpu_writes_op(IrOp op) {
  return cpu_kernels[op] || cg_formula_writes_op(op) || cg_cpu_tp_writes_op(op);
}

static void cpu_node(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (cg_cpu_tp_node(e, n)) return; /* tp_slice, vocabulary-parallel and per-rank ops */
  if (cpu_kernels[n->op]) cpu_kernels[n->op](e, index);
  else cg_error(e, n, "not supported");
}

/* ---------------------------------------------------- gradients, program */

static void cpu_accumulate(CgEmitter *e, const IrValue *param, const IrValue *grad) {
  int64_t n = cg_numel(grad);
  if (n != cg_numel(param)) die("gradient of %s with %lld elements", param->name, (long long)n);
  emit(e, "{");
  e->depth++;
  /* The param's slot in the gradients: where WGT(...) is in the weights. */
  const char *w = cg_ref(e, param);
  emit(e, "real *restrict g = GRD%s;", w + 3);
  emit(e, "const real *restrict x = %s;", ref(e, grad));
  emit(e, n >= PAR_MIN ? "#pragma omp parallel for simd schedule(static)" : "#pragma omp simd");
  emit(e, "for (int64_t i = 0; i < %lld; i++) g[i] += x[i];", (long long)n);
  e->depth--;
  emit(e, "}");
  cg_launch(e, CG_K_ELEMENTWISE, "(loop) accumulate", 0, 2.0 * (double)n * e->plan->real_bytes,
            (double)n * e->plan->real_bytes);
}

/* The chunks of a run share the threads dynamically, so that a thread the
 * machine delays holds up no fixed share. Kernels called inside run on
 * the calling thread (nested regions are off; OpenBLAS is told when it is
 * the pthread build). A run with sunk reductions opens the region around
 * the chunk loop, and the reductions follow the loop's barrier in it. */
static void chunks_begin(CgEmitter *e, int first, int last) {
  bool sunk = false;
  for (int i = first; i <= last; i++) sunk |= e->plan->sunk[i];
  emit(e, "{");
  e->depth++;
  emit(e, "const int blas = k_blas_serial_begin();");
  if (sunk) {
    emit(e, "#pragma omp parallel");
    emit(e, "{");
    e->depth++;
    emit(e, "#pragma omp for schedule(dynamic, 1)");
  } else {
    emit(e, "#pragma omp parallel for schedule(dynamic, 1)");
  }
  emit(e, "for (int64_t chunk = 0; chunk < %lld; chunk++) {", (long long)e->plan->nchunks);
  e->depth++;
  emit(e, "const int64_t r0 = chunk * %lld;", (long long)e->plan->chunk_rows);
  emit(e, "(void)r0;");
  cpu_state(e)->chunk_state = sunk ? 2 : 1;
  cpu_state(e)->chunk_rows = e->plan->chunk_rows;
  cg_listing_repeat(e, e->plan->nchunks);
}

static void chunks_after(CgEmitter *e) {
  e->depth--;
  emit(e, "}"); /* the loop over chunks; the region stays open */
  cpu_state(e)->chunk_state = 3;
  cpu_state(e)->chunk_rows = 0;
  cg_listing_repeat(e, 1);
}

static void chunks_end(CgEmitter *e) {
  if (cpu_state(e)->chunk_state == 2) chunks_after(e);
  e->depth--;
  emit(e, "}"); /* the loop over chunks (1) or the parallel region (3) */
  emit(e, "k_blas_serial_end(blas);");
  e->depth--;
  emit(e, "}");
  cpu_state(e)->chunk_state = 0;
  cpu_state(e)->chunk_rows = 0;
  cg_listing_repeat(e, 1);
}

/* A sunk node (memplan's sinkable): the team shares its blocks. */
static void team_node(CgEmitter *e, int index) {
  const IrNode *n = cg_node(e, index);
  if (n->op == IR_OP_SUM_TO) {
    const IrValue *x = n->in[0], *y = n->out[0];
    emit(e, "k_sum_rows_team(%s, %s, %lld, %lld);", ref(e, y), ref(e, x),
         (long long)(cg_numel(x) / cg_numel(y)), (long long)cg_numel(y));
    cg_launch_node(e, CG_K_REDUCTION, NULL, n);
    return;
  }
  if (n->op != IR_OP_LINEAR_DW) unreachable();
  cpu_state(e)->team = true;
  emit_linear_dw(e, index);
  cpu_state(e)->team = false;
}

/* The chunks in one parallel loop; with sunk nodes, the region stays
 * open after it for the team to share them. */
static void cpu_row_chunks(CgEmitter *e, int first, int last) {
  chunks_begin(e, first, last);
  cg_chunk_body(e, first, last);
  if (cpu_state(e)->chunk_state == 2) {
    chunks_after(e);
    for (int i = cg_next_sunk(e, first - 1, last); i >= 0; i = cg_next_sunk(e, i, last))
      team_node(e, i);
  }
  chunks_end(e);
}

static void cpu_prologue(CgEmitter *e) {
  emit(e, "#include <math.h>");
  emit(e, "#include <omp.h>");
  emit(e, "#include <stdint.h>");
  emit(e, "#include <stdio.h>");
  emit(e, "#include <string.h>");
  emit_blank(e);
  emit(e, "#include \"kernels/cpu/kernels.h\"");
  emit(e, "#include \"abi/model.h\"");
  emit_blank(e);
  cg_cpu_tp_prologue(e);
  emit(e, "/* The per-op timer: built with -DSHARD_PROFILE (make EXTRA_CFLAGS=-DSHARD_PROFILE),");
  emit(e, " * the program prints where a step's time goes when training ends. */");
  emit(e, "#ifdef SHARD_PROFILE");
  emit(e, "void rt_prof_enable(void);");
  emit(e, "void rt_prof_add(const char *what, double seconds);");
  emit(e, "static double prof_t0;");
  emit(e, "#define PROF_START() (prof_t0 = omp_get_wtime())");
  emit(e, "#define PROF(what) \\");
  emit(e, "  do { double t = omp_get_wtime(); rt_prof_add(what, t - prof_t0); prof_t0 = t; } while (0)");
  emit(e, "#else");
  emit(e, "#define PROF_START() ((void)0)");
  emit(e, "#define PROF(what) ((void)0)");
  emit(e, "#endif");
  emit_blank(e);
}

/* main() caps the threads at what the plan holds scratch for, after
 * checking that the kernels want no more scratch than it planned. */
static void cpu_entry(CgEmitter *e) {
  emit(e, "int main(int argc, char **argv) {");
  e->depth++;
  int64_t seen[64];
  int nseen = 0;
  for (int c = 0; c < e->nchunks; c++)
  for (int i = 0; i < e->chunks[c].g->nodes.len; i++) {
    const IrNode *n = e->chunks[c].g->nodes.items[i];
    if (e->chunks[c].plan->scratch_offset[i] < 0) continue;
    int64_t s = cg_dim(n->in[0], 1);
    bool dup = false;
    for (int k = 0; k < nseen; k++) dup |= seen[k] == s;
    if (dup || nseen == 64) continue;
    seen[nseen++] = s;
    emit(e, "if (k_attention_scratch(%lld) > %lldLL) {", (long long)s,
         (long long)CPU_ATTENTION_SCRATCH(s));
    e->depth++;
    emit(e, "fprintf(stderr, \"%%s: internal error: attention wants more scratch than the "
            "memory plan holds\\n\", argv[0]);");
    emit(e, "return 1;");
    e->depth--;
    emit(e, "}");
  }
  emit(e, "if (omp_get_max_threads() > PLAN_THREADS) omp_set_num_threads(PLAN_THREADS);");
  emit(e, "/* Kernels inside a parallel loop over row chunks run on their thread. */");
  emit(e, "omp_set_max_active_levels(1);");
  emit(e, "#ifdef SHARD_PROFILE");
  emit(e, "rt_prof_enable();");
  emit(e, "#endif");
  emit(e, "return rt_main(&rt_model, argc, argv);");
  e->depth--;
  emit(e, "}");
}

/* Debian's default OpenBLAS is the pthread build: its worker threads spin
 * (sched_yield) next to OpenMP's team, and on a machine with few cores the
 * two pools take turns instead of working; a rank program ran several times
 * slower for it. The OpenMP build of the same library shares OpenMP's team.
 * When pkg-config pointed at .../openblas-pthread/ and the OpenMP build sits
 * next to it (libopenblas-openmp-dev), the program links that one, with an
 * rpath: the loader would otherwise follow the system's alternative for
 * libopenblas.so.0 back to the pthread build. */
static const char *blas_link_libs(void) {
  const char *libs = SHARDC_LINK_LIBS, *at = strstr(libs, "openblas-pthread");
  if (!at) return libs;
  const char *start = at;
  while (start > libs && start[-1] != ' ') start--;
  if (strncmp(start, "-L", 2) != 0) return libs;
  const char *end = at + strlen("openblas-pthread");
  const char *dir = ir_fmt("%.*sopenblas-openmp", (int)(at - start - 2), start + 2);
  if (access(ir_fmt("%s/libopenblas.so", dir), R_OK) != 0) return libs;
  while (*end == '/') end++;
  return ir_fmt("%.*s-L%s -Wl,-rpath,%s%s", (int)(start - libs), libs, dir, dir, end);
}

static void cpu_buildfile(CgEmitter *e, const char *const *programs, int nprograms) {
  bool f64 = e->plan->real_bytes == 8;
  emit(e, "# Builds the rank programs of this directory against the shardc runtime.");
  emit(e, "# Written by `shardc compile`; `shardc build DIR` runs it.");
  emit(e, "CC = %s", SHARDC_C_COMPILER);
  /* -fno-trapping-math as for the kernels (kernels/CMakeLists.txt): without
   * it the clamps of the inline k_exp stay branches and the fused GELU
   * loops do not vectorise. It changes no result. */
  emit(e, "CFLAGS = -std=gnu11 -O3 %s -fno-trapping-math %s %s", SHARDC_NATIVE_FLAGS,
       SHARDC_OPENMP_FLAGS, SHARDC_BUILD_FLAGS);
  emit(e, "CPPFLAGS = -I%s%s", SHARDC_SOURCE_DIR, f64 ? " -DSHARD_REAL_F64" : "");
  emit(e, "RTLIBS = %s", f64 ? SHARDC_RT_LIBS_F64 : SHARDC_RT_LIBS_F32);
  emit(e, "LDLIBS = %s %s", SHARDC_OPENMP_FLAGS, blas_link_libs());
  emit(e, "# For instance -DSHARD_PROFILE: a per-op timer (see the top of the program).");
  emit(e, "EXTRA_CFLAGS =");
  emit_blank(e);
  cg_buildfile_rules(e, programs, nprograms, "$(CC) $(CFLAGS)");
}

/* ---------------------------------------------------------------- policy */

/* The kernel scratch of a node: attention (forward and backward) holds one
 * block of CPU_ATTENTION_SCRATCH reals per thread; q is [b, s, H*d]. */
static int64_t cpu_scratch_reals(const IrNode *n) {
  if (n->op != IR_OP_ATTENTION && n->op != IR_OP_ATTENTION_GRAD) return 0;
  return CPU_ATTENTION_SCRATCH(n->in[0]->type.shape[1]);
}

static const PassMemPolicy cpu_memplan = {
    .threads = CPU_THREADS,
    .scratch_reals = cpu_scratch_reals,
    .row_chunks = true,
};

static void *cpu_state_new(CgEmitter *e) {
  (void)e;
  CpuState *st = ir_alloc(sizeof *st);
  memset(st, 0, sizeof *st);
  return st;
}

/* The plan's threads and the scratch each holds, which main() checks
 * against the kernels' and caps OpenMP at. */
static void cpu_plan_defines(CgEmitter *e) {
  int64_t scratch = 0;
  for (int c = 0; c < e->nchunks; c++)
    if (e->chunks[c].plan->scratch_per_thread > scratch) scratch = e->chunks[c].plan->scratch_per_thread;
  emit(e, "/* Kernel scratch is planned for this many threads, of this many reals each. */");
  emit(e, "#define PLAN_THREADS %d", e->plan->threads);
  emit(e, "#define PLAN_ATTENTION_SCRATCH %lldLL", (long long)scratch);
}

/* The CPU target plans no low-precision values: `low` is never set. */
static void cpu_permute(CgEmitter *e, const char *dst, const char *src, int64_t a, int64_t b,
                        int64_t part, bool low) {
  if (low) die("cpu target: a bf16 permutation");
  emit(e, "k_transpose(%s, %s, 1, %lld, 1, %lld, %lld);", dst, src, (long long)a, (long long)b,
       (long long)part);
  cg_launch_copy(e, (double)(a * b * part) * e->plan->real_bytes);
}

const CgTarget cg_target_cpu = {
    .name = "cpu",
    .doc = "C with OpenMP and OpenBLAS; ranks talk through MPI",
    .source_ext = ".c",
    .buildfile_name = "Makefile",
    .precisions = CG_PRECISION_FP32,
    .memory = CG_MEMORY_HOST,
    .memplan = &cpu_memplan,
    .writes_op = cpu_writes_op,
    .state_new = cpu_state_new,
    .prologue = cpu_prologue,
    .plan_defines = cpu_plan_defines,
    .node = cpu_node,
    .fused = cpu_fused,
    .row_chunks = cpu_row_chunks,
    .accumulate = cpu_accumulate,
    .permute = cpu_permute,
    .comm_scratch = "tp_scratch",
    .entry = cpu_entry,
    .buildfile = cpu_buildfile,
};
