/* The CUDA target (codegen/cuda/, one concern per file): one GPU, fp32 or bf16 (--precision bf16:
 * below). The program is CUDA C++ (.cu) whose host code calls the kernels of
 * kernels/cuda/kernels_cuda.h (GEMMs through cuBLASLt) on the device layer's stream, and each chain
 * of elementwise ops becomes one generated __global__ kernel that reads and writes each tensor
 * once. Model memory is the plan's one allocation on the GPU (runtime/device_cuda.c); the kernels'
 * workspaces (cuBLASLt's, the attention backward's statistics, the norms' partial sums, the loss's
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
#ifndef SHARDC_CODEGEN_CUDA_H
#define SHARDC_CODEGEN_CUDA_H

#include "../../passes/gemm_epilogue.h"
#include "../target.h"
#include "../listing.h"

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

/* The flash attention backward's fp32 partial sums of dq and the rows of
 * its tiles they are padded to (FB_SPLITS and FA_COLS of
 * kernels/cuda/attention.cu). */
#define CUDA_ATT_SPLITS 4
#define CUDA_ATT_TILE 32

/* What the target keeps while it writes one program. */
typedef struct CudaState {
  /* The program was refused as a whole (cg_cuda_check_supported): no
   * more errors. */
  bool refused;
} CudaState;

static inline CudaState *cuda_state(CgEmitter *e) { return e->state; }

/* The bf16 programs: those whose plan sizes the step's values at 2 bytes. */
static inline bool cuda_bf16(CgEmitter *e) { return e->plan->policy.low_bytes == 2; }

/* Whether the kernels see v as bf16: a weight (its working copy) or a
 * value the plan sized at 2 bytes an element. */
static inline bool cuda_low(CgEmitter *e, const IrValue *v) { return pass_memplan_low(e->plan, v); }

/* The suffix of a kernel's form for v: "_bf16" where v is bf16. */
static inline const char *cuda_sfx(CgEmitter *e, const IrValue *v) {
  return cuda_low(e, v) ? "_bf16" : "";
}

/* A typed pointer to v: real * or, for a bf16 value, kc_bf16 * (a weight's
 * working copy). */
static inline const char *cuda_ref(CgEmitter *e, const IrValue *v) {
  const char *r = cg_ref(e, v);
  if (!cuda_low(e, v)) return r;
  if (cg_buf(e, v)->region == PASS_REGION_WEIGHTS) return ir_fmt("W16%s", r + 3);
  return ir_fmt("BF(%s)", r);
}

static inline const char *cuda_ctype(CgEmitter *e, const IrValue *v) {
  return cuda_low(e, v) ? "kc_bf16" : "real";
}

static inline int cuda_norm_axis(int64_t axis, int rank) {
  return (int)(axis < 0 ? axis + rank : axis);
}

/* GEMMs that produce a gradient straight into its slot add (beta = 1). */
static inline bool cuda_into_grads(CgEmitter *e, const IrValue *out) {
  return cg_buf(e, out)->region == PASS_REGION_GRADS;
}

/* fused.c: the kernels of every fused run of every chunk, at file scope
 * (the prologue writes them: a kernel cannot be defined inside forward());
 * the launch of one run (CgTarget.fused). */
void cg_cuda_fused_kernels(CgEmitter *e);
void cg_cuda_fused(CgEmitter *e, int first, int last);

/* gemm.c: the GEMM nodes' calls. */
void cg_cuda_matmul(CgEmitter *e, int index);
void cg_cuda_linear(CgEmitter *e, int index);
void cg_cuda_linear_dx(CgEmitter *e, int index);
void cg_cuda_linear_dw(CgEmitter *e, int index);
/* The cuBLASLt workspace of GEMM node `index` (its scratch's start). */
void cg_cuda_gemm_workspace(CgEmitter *e, int index);

/* The GEMM epilogues of the chunk being written, as the gemm-epilogue
 * pass chose them on its plan (gemm_epilogue.h): the gelu linear i
 * absorbs and the gelu_grad linear_dx i absorbs (-1: none); the bias
 * gradient GEMM i computes (NULL: none); whether node j's code is an
 * earlier GEMM's epilogue (then it writes none of its own). */
static inline const PassEpilogues *cuda_epilogues(CgEmitter *e) {
  const PassEpilogues *c = e->chunk ? e->chunk->epilogues : NULL;
  if (!c || c->plan != e->plan) die("a chunk without the epilogues of its plan");
  return c;
}
static inline int cg_cuda_epi_gelu(CgEmitter *e, int i) { return cuda_epilogues(e)->gelu[i]; }
static inline int cg_cuda_epi_dgelu(CgEmitter *e, int i) { return cuda_epilogues(e)->dgelu[i]; }
static inline const IrValue *cg_cuda_epi_bgrad(CgEmitter *e, int i) {
  int k = cuda_epilogues(e)->bgrad[i];
  return k >= 0 ? cg_node(e, k)->out[0] : NULL;
}
static inline bool cg_cuda_in_epilogue(CgEmitter *e, int j) {
  return cuda_epilogues(e)->owner[j] >= 0;
}

/* ops.c: y = x (a cast where one is bf16); embedding_grad's rows [lo, lo +
 * V) added into its slot; the code of a node that runs alone
 * (CgTarget.node) and whether the target writes op (CgTarget.writes_op). */
void cg_cuda_copy(CgEmitter *e, const IrValue *y, const IrValue *x);
void cg_cuda_embedding_add(CgEmitter *e, const IrNode *n, const char *lo, int64_t V);
/* Where loss node `index`'s kernel writes its fp32 loss, and the rounding
 * into the value where the plan keeps it in bf16 (nothing otherwise). */
const char *cg_cuda_loss_out(CgEmitter *e, int index);
void cg_cuda_loss_round(CgEmitter *e, int index);
void cg_cuda_node(CgEmitter *e, int index);
bool cg_cuda_writes_op(IrOp op);
/* The most rows one expert holds in grouped product n (grouped_linear and
 * its gradients): the capacity of the dispatch that counted them, or the
 * tokens where a router chose the experts (k distinct ones a token), else
 * all the rows. The padded operands of moe.cu are that many rows an expert. */
int64_t cg_cuda_moe_per(const IrNode *n);

/* tp.c: tp_slice, tp_copy, the forms that need the rank at run time
 * (vocabulary-parallel embedding and loss, per-rank dropout), and the
 * includes and device scratch they and the collectives need. */
void cg_cuda_tp_slice(CgEmitter *e, int index);
void cg_cuda_tp_copy(CgEmitter *e, int index);
void cg_cuda_tp_form(CgEmitter *e, int index);
void cg_cuda_tp_prologue(CgEmitter *e);

/* graphs.c: dropout n in its step form where its function may be captured
 * (false elsewhere: the caller writes the plain form, `mix` being the
 * seed's xor); the step values captured dropouts read; the graph table. */
bool cg_cuda_graph_dropout(CgEmitter *e, const IrNode *n, const char *mix);
void cg_cuda_graphs_prologue(CgEmitter *e);
void cg_cuda_graphs_table(CgEmitter *e);

/* program.c: the refusals of a program this shardc cannot build; the
 * prologue, main() and the build file (CgTarget.prologue, .entry,
 * .buildfile). */
void cg_cuda_check_supported(CgEmitter *e);
void cg_cuda_prologue(CgEmitter *e);
void cg_cuda_entry(CgEmitter *e);
void cg_cuda_buildfile(CgEmitter *e, const char *const *programs, int nprograms);

#endif
