/* The CUDA target's entry in the table of targets (codegen/targets.c):
 * its facts (precisions, memory, options), its memory policy, and the
 * hooks the emitter core calls. */
#include <string.h>

#include "cuda.h"

static void cuda_accumulate(CgEmitter *e, const IrValue *param, const IrValue *grad) {
  int64_t n = cg_numel(grad);
  if (n != cg_numel(param)) die("gradient of %s with %lld elements", param->name, (long long)n);
  /* The param's slot in the gradients: where WGT(...) is in the weights. */
  emit(e, "k_cuda_accumulate%s(GRD%s, %s, %lld);", cuda_sfx(e, grad), cg_ref(e, param) + 3,
       cuda_ref(e, grad), (long long)n);
  cg_launch(e, CG_K_ELEMENTWISE, NULL, 0, cg_listing_bytes(e, grad) + 4.0 * (double)n,
            4.0 * (double)n);
}

/* ---------------------------------------------------------------- policy */

/* Reals of scratch a node needs: the GEMMs' cuBLASLt workspace, the
 * attention backward's row statistics (sum(dy y), a float per query row
 * and head), the norms' row statistics and partial weight gradients, and the
 * loss's per-row doubles. Sizes as kernels_cuda.h's k_cuda_*_scratch. */
static int64_t cuda_scratch_bytes(const IrNode *n) {
  switch (n->op) {
  case IR_OP_MATMUL:
  case IR_OP_LINEAR: return CUDA_GEMM_WORKSPACE;
  /* And the stash of a bias gradient in the epilogue (gemm_epilogue.h). */
  case IR_OP_LINEAR_DX: return CUDA_GEMM_WORKSPACE + pass_gemm_stash_bytes(cg_dim(n->out[0], -1));
  case IR_OP_LINEAR_DW: return CUDA_GEMM_WORKSPACE + pass_gemm_stash_bytes(cg_dim(n->in[1], -1));
  case IR_OP_ATTENTION_GRAD: {
    int64_t H, K, d;
    cg_attention_dims(n, &H, &K, &d);
    /* The flash backward's fp32 partial sums of dq, their rows padded to
     * a tile's, then sum(dy y) per row. */
    int64_t b = cg_dim(n->in[0], 0), s = cg_dim(n->in[0], 1);
    int64_t rows = (s + CUDA_ATT_TILE - 1) / CUDA_ATT_TILE * CUDA_ATT_TILE;
    return CUDA_ATT_SPLITS * b * H * rows * d * 4 + b * H * s * 4;
  }
  case IR_OP_LAYERNORM_GRAD:
  case IR_OP_RMSNORM_GRAD: {
    int64_t rows = cg_rows(n->in[0]), chunks = (rows + CUDA_NORM_CHUNK - 1) / CUDA_NORM_CHUNK;
    return 2 * rows * 4 + 2 * chunks * cg_dim(n->in[0], -1) * 8;
  }
  /* And 8 bytes for a loss kept in bf16 (ops.c's emit_loss). */
  case IR_OP_CROSS_ENTROPY: return (cg_numel(n->in[1]) > 0 ? cg_numel(n->in[1]) : 1) * 8 + 8;
  /* The padded operands of the grouped products after the workspace, at
   * 4 bytes an element (k_cuda_grouped_scratch; bf16 needs half). */
  case IR_OP_GROUPED_LINEAR:
  case IR_OP_GROUPED_LINEAR_DX:
  case IR_OP_GROUPED_LINEAR_DW: {
    const IrValue *w = n->op == IR_OP_GROUPED_LINEAR_DW ? n->out[0] : n->in[1];
    int64_t E = cg_numel(n->in[2]), per = cg_cuda_moe_per(n);
    int64_t cols = cg_dim(w, 1) + cg_dim(w, 2), r = (E + 1) * 4;
    return CUDA_GEMM_WORKSPACE + 256 + (r + 255) / 256 * 256 + E * per * cols * 4 + 2 * 256;
  }
  default: return 0;
  }
}

static int64_t cuda_scratch_reals(const IrNode *n) { return (cuda_scratch_bytes(n) + 3) / 4; }

/* One stream: one copy of each node's scratch, and no row chunks (a kernel
 * covers all rows of a node at once). A GEMM's scratch starts with its
 * cuBLASLt workspace, which gemm-epilogue leaves alone. */
static const PassMemPolicy cuda_memplan = {
    .threads = 1,
    .scratch_reals = cuda_scratch_reals,
    .row_chunks = false,
    .gemm_workspace = CUDA_GEMM_WORKSPACE,
};

static void cuda_permute(CgEmitter *e, const char *dst, const char *src, int64_t a, int64_t b,
                         int64_t part, bool low) {
  if (low)
    emit(e, "k_cuda_transpose_bf16(BF(%s), (const kc_bf16 *)%s, 1, %lld, 1, %lld, %lld);", dst,
         src, (long long)a, (long long)b, (long long)part);
  else
    emit(e, "k_cuda_transpose(%s, %s, 1, %lld, 1, %lld, %lld);", dst, src, (long long)a,
         (long long)b, (long long)part);
  cg_launch_copy(e, (double)(a * b * part) * (low ? 2 : 4));
}

/* --cuda-arch: a compute capability nvcc takes, sm_NN or compute_NN. */
static const char *check_arch(const char *value) {
  if (strncmp(value, "sm_", 3) == 0 || strncmp(value, "compute_", 8) == 0) return NULL;
  return ir_fmt("--cuda-arch: expected sm_NN, got '%s'", value);
}

/* --cuda-arch sm_NN: the GPU architecture the build file builds for
 * (CUDA_DEFAULT_ARCH without it). --no-gemm-epilogue is the gemm-epilogue
 * pass's option (PassOptions), not one of codegen. */
static const CgTargetOption cuda_options[] = {
    {"--cuda-arch", "sm_NN", "the GPU architecture to build for (default " CUDA_DEFAULT_ARCH ")",
     check_arch},
    {NULL, NULL, NULL, NULL},
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
    /* The shared pipelines, then the choice of the GEMM epilogues on the
     * memory plans (passes/gemm_epilogue.c), which the GEMMs' code reads. */
    .pipeline = CG_PIPELINE ",gemm-epilogue",
    .pipeline_pp = CG_PIPELINE_PP ",gemm-epilogue",
    .gemm_epilogues = true,
    /* The LM head's GEMMs at 50304 columns rather than 50257 (REFERENCE.md):
     * the padding is masked in the loss, so losses and gradients are the
     * unpadded model's, and checkpoints hold the unpadded tables. */
    .vocab_pad_always = true,
    /* Its programs of many ranks (over NCCL) are taken only by name until
     * they have been checked on GPUs (docs/targets.md). */
    .runs_many_ranks = false,
    .options = cuda_options,
    .memplan = &cuda_memplan,
    .writes_op = cg_cuda_writes_op,
    .state_new = cuda_state_new,
    .prologue = cg_cuda_prologue,
    .node = cg_cuda_node,
    .fused = cg_cuda_fused,
    .accumulate = cuda_accumulate,
    /* The collectives' rank-major copies (collectives.c), in device memory. */
    .permute = cuda_permute,
    .comm_scratch = "cu_tp_scratch()",
    .entry = cg_cuda_entry,
    .buildfile = cg_cuda_buildfile,
};
