/* The MPI part both backends of comm.h are built on (mpi_core.c): the
 * MPI backend (comm_mpi.c) is its operations under comm.h's names, the
 * NCCL backend (comm_nccl.c) runs them for host memory and wraps them for
 * device memory. Private to runtime/comm/. */
#ifndef SHARD_RT_MPI_CORE_H
#define SHARD_RT_MPI_CORE_H

#include <mpi.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "watchdog.h"

struct RtComm {
  MPI_Comm comm;
  int rank, size;
  int *members; /* world rank of each rank of the communicator */
  const char *name;
  RtCommStats stats;
};

/* An operation in flight over MPI: what comm.h's RtCommReq is in the MPI
 * backend, and what an NCCL request holds when it runs over MPI. */
typedef struct MpiReq MpiReq;

/* What the backend built on the core must end once a fatal message is out
 * and before the job goes down (the NCCL backend: its communicators, set
 * as it starts); NULL for nothing. */
extern void (*rt_mpi_before_exit)(void);

/* comm.h's rt_comm_fatal: reports the message naming this rank, then
 * brings the job down. */
_Noreturn void rt_mpi_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void rt_mpi_vfatal(const char *fmt, va_list ap);

/* MPI_CHECK(comm, MPI_Foo(...)): the communicator (may be NULL) names the
 * group in the message; the text of the call up to its '(' names the
 * function. */
#define MPI_CHECK(c, call) rt_mpi_check((call), (c), #call, __FILE__, __LINE__)
/* The same for a call that may wait for other ranks: the watchdog
 * (watchdog.h) reports it as what this rank is doing while it waits. */
#define MPI_WAITING(c, fn, call)                                                                   \
  do {                                                                                             \
    rt_wd_comm(fn, (c)->name);                                                                     \
    MPI_CHECK(c, call);                                                                            \
    rt_wd_comm_done();                                                                             \
  } while (0)
void rt_mpi_check(int err, const RtComm *c, const char *call, const char *file, int line);

/* 1 once rt_mpi_init has run (and rt_mpi_finalize has not). */
int rt_mpi_inited(void);

/* The checks every operation makes of its arguments (comm.h's rules),
 * and its bytes counted by abi/comm.h's rules. */
int rt_mpi_check_count(RtComm *c, const char *fn, int64_t count);
void rt_mpi_check_rank(RtComm *c, const char *fn, const char *role, int r);
void rt_mpi_check_disjoint(RtComm *c, const char *fn, const void *a, size_t na, const void *b,
                           size_t nb);
void rt_mpi_count_bytes(RtComm *c, RtCommKind kind, int64_t count, RtCommType type);

/* comm.h's operations over MPI, under the names rt_mpi_*. */
void rt_mpi_init(int *argc, char ***argv);
void rt_mpi_finalize(void);
RtComms *rt_mpi_comms_new(RtMesh mesh);
void rt_mpi_comms_free(RtComms *cs);
RtComm *rt_mpi_comm_split(RtComm *c, int color, int key, const char *name);
void rt_mpi_comm_free(RtComm *c);
void rt_mpi_allreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t, RtCommOp op);
void rt_mpi_allgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t);
void rt_mpi_reduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                           RtCommOp op);
void rt_mpi_broadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root);
void rt_mpi_send(RtComm *c, const void *b, int64_t n, RtCommType t, int peer);
void rt_mpi_recv(RtComm *c, void *b, int64_t n, RtCommType t, int peer);
void rt_mpi_barrier(RtComm *c);
void rt_mpi_alltoall(RtComm *c, const void *s, void *r, int64_t n, RtCommType t);
void rt_mpi_alltoallv(RtComm *c, const void *s, const int64_t *sc, void *r, const int64_t *rc,
                      RtCommType t);
/* alltoallv's checks and counting, for both backends: the counts (host
 * memory), the buffers' overlap, and each peer's count against recv_counts
 * (exchanged over MPI). Returns the elements sent; *nrecv the received. */
int64_t rt_mpi_check_alltoallv(RtComm *c, const char *fn, const void *send, const int64_t *sc,
                               void *recv, const int64_t *rc, RtCommType type, int64_t *nrecv);
MpiReq *rt_mpi_iallreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                          RtCommOp op);
MpiReq *rt_mpi_iallgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t);
MpiReq *rt_mpi_ireduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                               RtCommOp op);
MpiReq *rt_mpi_ibroadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root);
MpiReq *rt_mpi_isend(RtComm *c, const void *b, int64_t n, RtCommType t, int peer);
MpiReq *rt_mpi_irecv(RtComm *c, void *b, int64_t n, RtCommType t, int peer);
MpiReq *rt_mpi_ibarrier(RtComm *c);
void rt_mpi_wait(MpiReq *req);
void rt_mpi_waitall(MpiReq **reqs, int n);
int rt_mpi_test(MpiReq *req);

#endif
