/* The launch listing (listing.c): every kernel launch and library call a
 * rank program makes in one training step, recorded by the code
 * generators at the point where they write it, and written at compile
 * time into the program folder as kernels.json, which `shardc simulate
 * --program DIR` prices on a hardware description (planner/
 * program_cost.c; docs/targets.md, "The cost report").
 *
 * The hooks are one line each, right after the emit() that writes the
 * call: cg_launch and its forms below record the call the emitter just
 * wrote (its kernel's name read off that line unless given), with the
 * FLOPs and the bytes the generated code reads and writes, from the same
 * values and sizes the emitter passed to the call. The emitter core marks
 * where each node's code ends (cg_listing_prof, at its PROF label, which
 * is what the per-op timer of a -DSHARD_PROFILE build charges), so every
 * record knows its node, function and label; a node that wrote code but
 * recorded nothing gets a record priced from the node itself, marked
 * "unlisted", so that a new kernel shows up even before its hook does.
 * cg_listing_program adds the runtime's own work of a step (loading the
 * inputs, the loss read back, zeroing the gradients, the gradient norm,
 * AdamW, the update's finiteness check) and files the program's records;
 * cg_listing_write writes the file. One program set is written at a time
 * (the compiler is single-threaded), so the records live in this file.
 * Private to codegen/. */
#ifndef SHARDC_CODEGEN_LISTING_H
#define SHARDC_CODEGEN_LISTING_H

#include "target.h"

/* What a launch does, for the report's classes. */
typedef enum CgKClass {
  CG_K_GEMM,        /* cuBLASLt, OpenBLAS: matrix products */
  CG_K_ATTENTION,   /* fused attention */
  CG_K_ELEMENTWISE, /* fused elementwise runs, dropout, bias adds, casts, accumulations */
  CG_K_NORM,        /* layernorm, rmsnorm, softmax, forward and backward */
  CG_K_REDUCTION,   /* sums over rows (bias gradients), the loss, embedding gradients, norms */
  CG_K_COPY,        /* layout copies, splits, concats, memset, device-to-device copies */
  CG_K_COLLECTIVE,  /* rt_comm: all-reduce, all-gather, reduce-scatter */
  CG_K_OPTIMIZER,   /* the runtime's AdamW / SGD update */
  CG_K_HOST,        /* copies between host and device, host waits */
  CG_NKCLASS
} CgKClass;
extern const char *const cg_kclass_names[CG_NKCLASS];

/* The bytes v takes as the generated code reads or writes it: its
 * elements at 2 bytes where the plan keeps it in bf16 (a weight's working
 * copy included), 4 for ids, else the program's real. */
double cg_listing_bytes(CgEmitter *e, const IrValue *v);

/* The call just written: `kernel` its name (NULL: read off the last line
 * written), with its FLOPs and the bytes it reads and writes. */
void cg_launch(CgEmitter *e, CgKClass cls, const char *kernel, double flops, double read,
               double written);
/* A copy just written that reads and writes `bytes`. */
void cg_launch_copy(CgEmitter *e, double bytes);
/* The same, reading every input of node n and writing every output as the
 * plan keeps them (an output added into a gradient slot is read too);
 * FLOPs those of the node's matrix products. Inside a loop over row
 * chunks (cg_listing_repeat) each call moves its chunk's share. */
void cg_launch_node(CgEmitter *e, CgKClass cls, const char *kernel, const IrNode *n);
/* A matrix product just written: batch products of [M, K] by [K, N] into
 * [M, N] with leading dimensions lda, ldb, ldc, operands of ab bytes an
 * element and the result of c; `add`: C is read and added to. */
void cg_launch_gemm(CgEmitter *e, const char *kernel, int64_t batch, int64_t M, int64_t N,
                    int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int ab, int c, bool add);
/* Attention node n (forward or backward) just written. */
void cg_launch_attention(CgEmitter *e, const char *kernel, const IrNode *n);
/* A run of elementwise nodes just written: the values it loads, each once
 * (reads[i * stride bytes], the emitter's own table of loads), and the
 * outputs it stores (a gradient slot is read and added to). */
void cg_launch_values(CgEmitter *e, CgKClass cls, const char *kernel, const void *reads,
                      size_t stride, int nreads, const IrValue *const *writes, int nwrites);
/* A collective of rt_comm just written: op ("allreduce", "allgather",
 * "reduce_scatter") over the tensor axis's members, `bytes` the whole
 * tensor (the all-gather's result, the reduce-scatter's input). It
 * blocks the host until it is done. */
void cg_launch_comm(CgEmitter *e, const char *op, int64_t members, double bytes);
/* More bytes the call just recorded reads and writes (a GEMM's epilogue
 * operands). */
void cg_launch_add_bytes(CgEmitter *e, double read, double written);
/* The launch just recorded synchronises the host. */
void cg_launch_sync(CgEmitter *e);
/* The launch just recorded runs `threads` threads in all, each looping
 * over `steps` elements in turn (cu_embedding_add's one thread per
 * column): too few threads to fill a GPU wait a memory latency a step. */
void cg_launch_serial(CgEmitter *e, int64_t threads, int64_t steps);
/* The ops of nodes first..last, once each: "add+gelu". */
const char *cg_listing_ops(CgEmitter *e, int first, int last);
/* Inside a loop over the plan's row chunks the calls run once per chunk
 * (the CPU target's runs): calls per microbatch n; 1 after it. */
void cg_listing_repeat(CgEmitter *e, int64_t n);

/* The emitter core, as it opens the emitter of a file. */
void cg_listing_open(CgEmitter *e);
/* The emitter core, after nodes first..last's code (-1, -1: code of no
 * node, an accumulation), at their PROF label, which it returns. */
const char *cg_listing_prof(CgEmitter *e, int first, int last, const char *label);
/* Function f (0 forward, 1 backward, 2 wgrad) of chunk c runs as a
 * captured CUDA graph (CgTarget's graph table). */
void cg_listing_graph(CgEmitter *e, int chunk, int f, bool captured);
/* After program pr's code: the runtime's work of a step, and the
 * program's records filed under its name. */
struct CgProgram;
struct CgLayout;
void cg_listing_program(CgEmitter *e, const struct CgProgram *pr);
/* kernels.json into the layout's folder; false after reporting why not. */
bool cg_listing_write(const struct CgLayout *l);

#endif
