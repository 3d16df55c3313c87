/* The CUDA target's program around the chunk functions: its prologue (the
 * prelude of kernels/cuda/prelude.cuh and what depends on the model), its
 * main() and the build file; and the check that this shardc can build it. */
#include <string.h>

#include "cuda.h"

/* Only a compiler built with the CUDA libraries can write a build file
 * that links them, and only one whose CUDA runtime links the NCCL backend
 * programs of more than one rank. */
void cg_cuda_check_supported(CgEmitter *e) {
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

void cg_cuda_prologue(CgEmitter *e) {
  cg_cuda_check_supported(e);
  /* Everything that does not depend on the model (kernels/cuda/prelude.cuh,
   * real CUDA source): includes, checks, the grid, bf16 conversions, the
   * programs' own kernels and the per-op timer. */
  emit(e, "#include \"kernels/cuda/prelude.cuh\"");
  emit_blank(e);
  cg_cuda_tp_prologue(e);
  cg_cuda_graphs_prologue(e);
  emit(e, "/* One kernel per run of elementwise nodes. */");
  cg_cuda_fused_kernels(e);
}

/* The kernel's own scratch function for node i, as an expression of the
 * generated program; NULL for a node whose scratch is the GEMM workspace. */
static const char *scratch_call(const IrNode *n) {
  switch (n->op) {
  case IR_OP_ATTENTION_GRAD: {
    int64_t H, K, d;
    cg_attention_dims(n, &H, &K, &d);
    return ir_fmt("k_cuda_attention_scratch(%lld, %lld, %lld, %lld)", (long long)cg_dim(n->in[0], 0),
                  (long long)cg_dim(n->in[0], 1), (long long)H, (long long)d);
  }
  case IR_OP_LAYERNORM_GRAD:
  case IR_OP_RMSNORM_GRAD:
    return ir_fmt("k_cuda_norm_bwd_scratch(%lld, %lld)", (long long)cg_rows(n->in[0]),
                  (long long)cg_dim(n->in[0], -1));
  case IR_OP_CROSS_ENTROPY: return ir_fmt("k_cuda_ce_scratch(%lld)", (long long)cg_numel(n->in[1]));
  case IR_OP_GROUPED_LINEAR:
  case IR_OP_GROUPED_LINEAR_DX:
  case IR_OP_GROUPED_LINEAR_DW: {
    /* After the cuBLASLt workspace; the check is of the fp32 size. */
    const IrValue *w = n->op == IR_OP_GROUPED_LINEAR_DW ? n->out[0] : n->in[1];
    return ir_fmt("%lldLL + k_cuda_grouped_scratch(%lld, %lld, %lld, %lld, 0)",
                  (long long)CUDA_GEMM_WORKSPACE, (long long)cg_numel(n->in[2]),
                  (long long)cg_cuda_moe_per(n), (long long)cg_dim(w, 1), (long long)cg_dim(w, 2));
  }
  default: return NULL;
  }
}

/* main() checks, before anything runs, that every kernel wants no more
 * scratch than the memory plan holds for it, then hands over to rt_main,
 * which needs the GPU only once it allocates the plan (so --help works on
 * a machine without one). */
void cg_cuda_entry(CgEmitter *e) {
  cg_cuda_graphs_table(e);
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

void cg_cuda_buildfile(CgEmitter *e, const char *const *programs, int nprograms) {
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
