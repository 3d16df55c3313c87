/* Tensor parallelism in the runtime: starting the communication layer for
 * the mesh the program was compiled for, and everything that needs to know
 * how a parameter is split over the tensor-parallel ranks (initialisation,
 * checkpoints, --dump-grads, the global gradient norm, sampling) or what
 * the ranks sent (--comm-stats).
 *
 * A program of one rank (t = p = d = 1) started without mpirun never
 * starts MPI and behaves bit for bit as before: every function here then
 * takes the one-rank path. */
#ifndef SHARD_RT_TP_H
#define SHARD_RT_TP_H

#include "rt.h"

/* The runtime/comm/comm.h element type of `real`. */
#ifdef SHARD_REAL_F64
#define RT_COMM_REAL RT_COMM_F64
#else
#define RT_COMM_REAL RT_COMM_F32
#endif

/* Starts the communication layer when the mesh has more than one rank or
 * the program runs under mpirun; checks that the job has t * p * d ranks;
 * builds the mesh's communicators and fills rt->mesh, rt->coord and
 * ctx.tp, tp_size and tp_comm.
 * Ranks other than 0 print only errors (and --comm-stats), and only rank 0
 * writes --log-json. Fatal errors then name the rank and bring every rank
 * down. Call after the flags are parsed. */
void rt_tp_init(Rt *rt, int *argc, char ***argv);
/* Whether rt_tp_init will start the communication layer (MPI). */
int rt_tp_uses_mpi(const Rt *rt);
/* Shuts the communication layer down at the end of a successful run. */
void rt_tp_finalize(Rt *rt);

/* This process's rank in the job (0 without MPI), its tensor-parallel rank
 * and the tensor-parallel size. Only world rank 0 writes files. */
int rt_tp_world_rank(void);
/* Ranks in the job (1 without MPI). */
int rt_tp_world_size(void);
/* The least of every rank's x; collective over the world (x without MPI). */
double rt_tp_world_min(double x);
/* The largest of every rank's x (a flag); collective over the world. */
int rt_tp_world_any(int x);
void rt_tp_world_barrier(void);
int rt_tp_rank(void);
int rt_tp_size(void);
/* The communicators of the mesh (world, tensor, pipeline, data, embed) and
 * this rank's coordinates; NULL when the program runs without MPI (one
 * rank). */
struct RtComms *rt_tp_comms(void);

/* Columns of the logits this rank computes. */
static inline int64_t rt_logits_cols(const RtModel *m) {
  return m->logits_cols > 0 ? m->logits_cols : m->vocab;
}

/* ---- parameters as whole, unpadded tensors ------------------------------ */

/* The whole unpadded tensor of p: its shape (p->rank dims) and elements. */
void rt_tp_full_shape(const RtParam *p, int64_t *shape);
int64_t rt_tp_full_numel(const RtParam *p);
/* Where element i of tensor-parallel rank r's part of p lies in the whole
 * unpadded tensor (a row-major index), or -1 when it is padding. */
int64_t rt_tp_full_index(const RtParam *p, int r, int64_t i);
/* Gathers the whole unpadded tensor of p from the ranks' parts (`part` is
 * this rank's: p->numel reals). Collective over the tensor axis; `full`
 * (rt_tp_full_numel reals) is written on tensor-parallel rank 0 only and
 * may be NULL elsewhere. An expert parameter (--ep) is collective over
 * the expert group instead, and written on its expert rank 0. Both are host memory (checkpoints stage their
 * tensors out of the device first), and so is the pair of rt_tp_take. */
void rt_tp_gather(const RtParam *p, const real *part, real *full);
/* This rank's part of p from the whole unpadded tensor; padding gets 0. */
void rt_tp_take(const RtParam *p, const real *full, real *part);

/* ---- a training step ---------------------------------------------------- */

/* The global gradient norm: split parameters summed over the tensor axis,
 * replicated ones counted once. With t = 1, rt_grad_norm of optim.h. */
double rt_tp_grad_norm(Rt *rt);
/* --comm-stats: the byte counters around one optimizer step. begin at its
 * start, mark when the microbatches' forward and backward are done (what
 * the program's collectives sent, which the compiler's comm report
 * predicts: its total times the microbatches), end after the optimizer
 * (what the runtime's own reductions of the step sent, the gradient norm's).
 * end prints one line per rank. Gathers for checkpoints and --dump-grads
 * are not counted. */
void rt_tp_step_begin(Rt *rt);
void rt_tp_step_mark(Rt *rt);
void rt_tp_step_end(Rt *rt, int64_t step);

/* The whole row of logits (all t parts joined, rt_logits_cols * t
 * elements: reals, or bf16 with `bf16` set) from this rank's `cols`
 * columns. Collective over the tensor axis; with t = 1 it returns `part`
 * itself. part and whole are model memory (the logits where the forward
 * left them, device.h). */
const void *rt_tp_gather_row(const void *part, int64_t cols, int bf16, void *whole);

#endif
