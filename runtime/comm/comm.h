/* Communication between the ranks of one training job.
 *
 * One interface, several backends: comm_mpi.c carries the CPU target's
 * messages over MPI; an NCCL backend for the CUDA target implements the same
 * functions. A program links exactly one backend (shard_comm_mpi, ...), so
 * nothing here names a type of MPI or NCCL.
 *
 * The world is split into communicators along the axes of the mesh (see
 * mesh.h for the rank layout): one for the tensor-parallel group of this
 * rank, one for its pipeline, one for its data-parallel replicas, and one for
 * the embedding group (first and last stage of its pipeline).
 *
 * Threads. Only the thread that called rt_comm_init may call these
 * functions (MPI_THREAD_FUNNELED): OpenMP regions compute, the main thread
 * communicates between them.
 *
 * Errors. Every backend call is checked. Any failure, on any rank, prints
 * `shardc: error: rank R: what failed and why` and brings down every rank
 * of the job (MPI_Abort), so a job never hangs waiting for a dead peer.
 * Misuse (a peer out of range, overlapping buffers, a negative count) is
 * reported the same way.
 *
 * Determinism. A reduction called with the same arguments on the same
 * communicator gives the same bits on every rank of it, in every run: the
 * MPI backend uses MPI_Allreduce / MPI_Reduce_scatter_block, whose
 * algorithm (and so the order in which the ranks' values are added) Open
 * MPI chooses from the communicator size and the message size only, never
 * from timing, and whose result is the same on all ranks. The blocking and
 * the non-blocking form of one reduction may use different algorithms and
 * so may differ in the last bits from each other: a program that must be
 * reproducible uses the same form for the same reduction every time (which
 * generated code does). tests/runtime/comm checks all of this.
 *
 * Point to point. There are no tags: messages from one rank to another on
 * one communicator are matched in the order they were posted, on both
 * sides, as NCCL does it. Code that works on one backend therefore works on
 * the other.
 *
 * Memory. Tensor data passed here is model memory of the device the
 * program links (device.h): gradient buckets, weights, tied parameters,
 * pipeline message buffers, a row of logits. The runtime also passes host
 * memory: a few scalars (losses, norms, checks) and the host copies that
 * checkpoints gather. On the CPU device the two are the same memory; a
 * backend paired with a device of its own memory (NCCL) takes device
 * pointers for the first kind and moves the host ones itself (staged, or
 * over MPI).
 *
 * Launching (the recipe `shardc run` follows; tests/runtime/comm/mpirun.sh applies it):
 *
 *     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
 *     mpirun -np N --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
 *            -x OMP_NUM_THREADS=T PROGRAM ARGS
 *
 * - the two OMPI_ALLOW_* variables only when running as root (Open MPI
 *   refuses root otherwise);
 * - --oversubscribe when N may exceed the cores (Open MPI counts one slot
 *   per core and refuses more ranks than slots); it is harmless otherwise,
 *   so the recipe always passes it;
 * - mpi_yield_when_idle: a rank waiting for a message gives its core away
 *   instead of spinning. Open MPI does so by itself only when N exceeds the
 *   slots; with N ranks of T threads filling the cores, or any other load
 *   on the machine, spinning ranks slow down the ones that compute (2 ranks
 *   on a busy 2-core machine: 0.6 s with it, up to 9 s without);
 * - --bind-to none because each rank runs OpenMP threads: Open MPI's default
 *   binding would pin all threads of a rank to one core;
 * - T = max(1, cores / N) threads per rank, so the ranks together use each
 *   core once.
 * mpirun exits non-zero when any rank fails; its stderr then holds the
 * failing rank's `shardc: error: rank R: ...` line.
 *
 * Under Slurm the same recipe is (driver/launch.c, and the launch.sh that
 * `shardc compile` writes):
 *
 *     OMP_NUM_THREADS=T OMPI_MCA_mpi_yield_when_idle=1 \
 *     srun --ntasks=N --mpi=pmix --overcommit --multi-prog CONF
 *
 * - --mpi=pmix: Open MPI reads its rank and world from Slurm's PMIx server
 *   (Debian's Open MPI has no PMI-2 client);
 * - --overcommit is srun's --oversubscribe; T counts the ranks per node;
 * - CONF gives each block of ranks its program (`0-1 /abs/stage0 ARGS`). */
#ifndef SHARD_RT_COMM_H
#define SHARD_RT_COMM_H

#include <stdint.h>

#include "../../abi/comm.h"
#include "../../abi/mesh.h"

typedef struct RtComm RtComm;       /* a group of ranks */
typedef struct RtCommReq RtCommReq; /* a non-blocking operation in flight */

/* RT_COMM_BF16: bfloat16 (its 16 bits, the upper half of an fp32), what
 * the CUDA target's bf16 programs move their activations in. Its sums and
 * maxima are formed in fp32 and rounded to bf16 once: on NCCL, ncclBfloat16;
 * over MPI, which has no bf16, the ranks' parts are gathered and added in
 * rank order, ((x0 + x1) + x2) + ..., in fp32, then rounded to nearest even,
 * so the result is the same on every rank and in every run. */
typedef enum RtCommType { RT_COMM_F32, RT_COMM_F64, RT_COMM_I32, RT_COMM_BF16, RT_COMM_NTYPES } RtCommType;
typedef enum RtCommOp { RT_COMM_SUM, RT_COMM_MAX } RtCommOp;

/* Bytes of one element of a type. */
static inline int rt_comm_type_size(RtCommType type) {
  return type == RT_COMM_F64 ? 8 : type == RT_COMM_BF16 ? 2 : 4;
}

/* ---- Bootstrap ---------------------------------------------------------- */

/* Initialises the backend (MPI_Init_thread with FUNNELED) and learns this
 * rank and the world size. Without mpirun the program is a world of one. */
void rt_comm_init(int *argc, char ***argv);
/* Shuts the backend down (MPI_Finalize), after every operation has
 * completed; communicators of rt_comms_new are freed first by rt_comms_free. */
void rt_comm_finalize(void);
int rt_comm_world_rank(void);
int rt_comm_world_size(void);
/* This rank's index among the ranks of its node (a GPU program uses
 * local rank modulo GPUs per node as its device). */
int rt_comm_local_rank(void);
/* Prints `shardc: error: rank R: message` and brings every rank down with
 * exit status 1. Usable before rt_comm_init (then it just exits). */
_Noreturn void rt_comm_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- Communicators ------------------------------------------------------ */

/* All ranks. Owned by the backend. */
RtComm *rt_comm_world(void);

/* This rank's communicators of a t x p x d mesh. */
typedef struct RtComms {
  RtMesh mesh;
  RtCoord coord;                 /* this rank's (tp, dp, pp) */
  int rank;                      /* in the world */
  RtComm *world;
  RtComm *axis[RT_AXIS_COUNT];   /* axis[RT_AXIS_EMBED] is NULL on middle stages */
} RtComms;

/* Builds the communicators of the mesh; collective over the world, so every
 * rank calls it with the same mesh. A world whose size is not t*p*d is
 * fatal, with both numbers in the message. */
RtComms *rt_comms_new(RtMesh mesh);
void rt_comms_free(RtComms *c);

/* The ranks of c with the same color, ordered by key, as a communicator
 * named `name` (the expert groups of --ep, cut out of the data axis);
 * collective over c. Freed by rt_comm_free, before rt_comms_free. On NCCL
 * the group's twin is split from c's (ncclCommSplit). */
RtComm *rt_comm_split(RtComm *c, int color, int key, const char *name);
void rt_comm_free(RtComm *c);

int rt_comm_rank(const RtComm *c);
int rt_comm_size(const RtComm *c);
/* "world", "tensor", "pipeline", "data", "embed": for messages. */
const char *rt_comm_name(const RtComm *c);
/* The world rank of the rank that is `r` in this communicator. */
int rt_comm_world_rank_of(const RtComm *c, int r);

/* ---- Collectives -------------------------------------------------------- *
 * Counts are in elements. `count` is what each rank contributes:
 * - allreduce: send and recv hold count elements; send == recv works in place.
 * - allgather: send holds count, recv count * size (rank r's part at
 *   r * count); in place when send == recv + rank * count.
 * - reduce_scatter: send holds count * size, recv count (the reduction of
 *   everyone's part at rank * count); in place when recv == send + rank * count.
 * - broadcast: buf holds count elements, the root's are copied to all.
 * Any other overlap of send and recv is misuse. */
void rt_comm_allreduce(RtComm *c, const void *send, void *recv, int64_t count, RtCommType type,
                       RtCommOp op);
void rt_comm_allgather(RtComm *c, const void *send, void *recv, int64_t count, RtCommType type);
void rt_comm_reduce_scatter(RtComm *c, const void *send, void *recv, int64_t count,
                            RtCommType type, RtCommOp op);
void rt_comm_broadcast(RtComm *c, void *buf, int64_t count, RtCommType type, int root);
/* All-to-all, blocking (what moves tokens to the ranks of their experts):
 * - alltoall: equal parts. send and recv hold count * size; the part at
 *   r * count of send goes to rank r, and rank r's part for this rank
 *   lands at r * count of recv. Its usual use is the exchange of the
 *   counts an alltoallv then moves (count 1, RT_COMM_I32).
 * - alltoallv: parts of any size, zero included, packed in rank order.
 *   send_counts[r] elements go to rank r, from send + the sum of
 *   send_counts[0..r-1]; recv_counts[r] elements come from rank r, to recv
 *   + the sum of recv_counts[0..r-1]. The count arrays hold size entries
 *   each and are host memory, whatever memory the data is in.
 *   recv_counts[r] on this rank must equal send_counts[me] on rank r: the
 *   MPI backend reports a mismatch as fatal, naming both ranks; NCCL
 *   cannot see it (see comm_nccl.c).
 * send and recv must not overlap (no in-place form). */
void rt_comm_alltoall(RtComm *c, const void *send, void *recv, int64_t count, RtCommType type);
void rt_comm_alltoallv(RtComm *c, const void *send, const int64_t *send_counts, void *recv,
                       const int64_t *recv_counts, RtCommType type);
/* Peers are ranks in `c`. */
void rt_comm_send(RtComm *c, const void *buf, int64_t count, RtCommType type, int peer);
void rt_comm_recv(RtComm *c, void *buf, int64_t count, RtCommType type, int peer);
void rt_comm_barrier(RtComm *c);

/* The same, without waiting. The buffers belong to the operation until it
 * completes: neither read the result nor touch the input before then. */
RtCommReq *rt_comm_iallreduce(RtComm *c, const void *send, void *recv, int64_t count,
                              RtCommType type, RtCommOp op);
RtCommReq *rt_comm_iallgather(RtComm *c, const void *send, void *recv, int64_t count,
                              RtCommType type);
RtCommReq *rt_comm_ireduce_scatter(RtComm *c, const void *send, void *recv, int64_t count,
                                   RtCommType type, RtCommOp op);
RtCommReq *rt_comm_ibroadcast(RtComm *c, void *buf, int64_t count, RtCommType type, int root);
RtCommReq *rt_comm_isend(RtComm *c, const void *buf, int64_t count, RtCommType type, int peer);
RtCommReq *rt_comm_irecv(RtComm *c, void *buf, int64_t count, RtCommType type, int peer);
RtCommReq *rt_comm_ibarrier(RtComm *c);

/* Waits for the operation and frees the request. */
void rt_comm_wait(RtCommReq *req);
/* rt_comm_wait on each of n requests (NULL entries are skipped). */
void rt_comm_waitall(RtCommReq **reqs, int n);
/* 1 when the operation has completed (the request is then freed and must
 * not be used again), 0 while it is in flight. Without a progress thread
 * MPI advances non-blocking collectives only inside its calls: an executor
 * that overlaps communication with computation calls this between kernels. */
int rt_comm_test(RtCommReq *req);

/* ---- Byte counters ------------------------------------------------------ *
 * Every communicator counts, per kind of operation (abi/comm.h), the calls
 * and the bytes this rank SENT by the rules of abi/comm.h, which the
 * compiler's comm report follows too; recv counts in bytes[RT_COMM_RECV]
 * the S it received. Non-blocking forms count when they are posted.
 * `sent` is the sum over all kinds but RT_COMM_RECV. */
typedef struct RtCommStats {
  int64_t calls[RT_COMM_NKINDS];
  int64_t bytes[RT_COMM_NKINDS];
  int64_t sent;
} RtCommStats;

/* What one alltoallv adds to the counters of rank `me` of n: the bytes
 * of its parts for the other ranks. */
static inline int64_t rt_comm_alltoallv_bytes(int n, int me, const int64_t *send_counts,
                                              RtCommType type) {
  int64_t b = 0;
  for (int r = 0; r < n; r++)
    if (r != me) b += send_counts[r] * rt_comm_type_size(type);
  return b;
}
/* The bytes one call of `kind` on n ranks adds to the counters. */
static inline int64_t rt_comm_bytes(RtCommKind kind, int n, int64_t count, RtCommType type) {
  return rt_comm_ring_bytes(kind, n, count * rt_comm_type_size(type));
}
RtCommStats rt_comm_stats(const RtComm *c);
void rt_comm_stats_reset(RtComm *c);

#endif
