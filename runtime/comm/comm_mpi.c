/* The MPI backend of comm.h: what the CPU target's rank programs talk
 * through. It is the MPI core (mpi_core.c) under comm.h's names; a request
 * of this backend is the core's MpiReq. */
#include "comm.h"
#include "mpi_core.h"

_Noreturn void rt_comm_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rt_mpi_vfatal(fmt, ap);
}

void rt_comm_init(int *argc, char ***argv) { rt_mpi_init(argc, argv); }
void rt_comm_finalize(void) { rt_mpi_finalize(); }
RtComms *rt_comms_new(RtMesh mesh) { return rt_mpi_comms_new(mesh); }
void rt_comms_free(RtComms *cs) { rt_mpi_comms_free(cs); }
RtComm *rt_comm_split(RtComm *c, int color, int key, const char *name) {
  return rt_mpi_comm_split(c, color, key, name);
}
void rt_comm_free(RtComm *c) { rt_mpi_comm_free(c); }

void rt_comm_allreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t, RtCommOp op) {
  rt_mpi_allreduce(c, s, r, n, t, op);
}
void rt_comm_allgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  rt_mpi_allgather(c, s, r, n, t);
}
void rt_comm_reduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                            RtCommOp op) {
  rt_mpi_reduce_scatter(c, s, r, n, t, op);
}
void rt_comm_broadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root) {
  rt_mpi_broadcast(c, b, n, t, root);
}
void rt_comm_send(RtComm *c, const void *b, int64_t n, RtCommType t, int peer) {
  rt_mpi_send(c, b, n, t, peer);
}
void rt_comm_recv(RtComm *c, void *b, int64_t n, RtCommType t, int peer) {
  rt_mpi_recv(c, b, n, t, peer);
}
void rt_comm_barrier(RtComm *c) { rt_mpi_barrier(c); }
void rt_comm_alltoall(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  rt_mpi_alltoall(c, s, r, n, t);
}
void rt_comm_alltoallv(RtComm *c, const void *s, const int64_t *sc, void *r, const int64_t *rc,
                       RtCommType t) {
  rt_mpi_alltoallv(c, s, sc, r, rc, t);
}

RtCommReq *rt_comm_iallreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                              RtCommOp op) {
  return (RtCommReq *)rt_mpi_iallreduce(c, s, r, n, t, op);
}
RtCommReq *rt_comm_iallgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  return (RtCommReq *)rt_mpi_iallgather(c, s, r, n, t);
}
RtCommReq *rt_comm_ireduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                                   RtCommOp op) {
  return (RtCommReq *)rt_mpi_ireduce_scatter(c, s, r, n, t, op);
}
RtCommReq *rt_comm_ibroadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root) {
  return (RtCommReq *)rt_mpi_ibroadcast(c, b, n, t, root);
}
RtCommReq *rt_comm_isend(RtComm *c, const void *b, int64_t n, RtCommType t, int peer) {
  return (RtCommReq *)rt_mpi_isend(c, b, n, t, peer);
}
RtCommReq *rt_comm_irecv(RtComm *c, void *b, int64_t n, RtCommType t, int peer) {
  return (RtCommReq *)rt_mpi_irecv(c, b, n, t, peer);
}
RtCommReq *rt_comm_ibarrier(RtComm *c) { return (RtCommReq *)rt_mpi_ibarrier(c); }

void rt_comm_wait(RtCommReq *req) { rt_mpi_wait((MpiReq *)req); }
void rt_comm_waitall(RtCommReq **reqs, int n) { rt_mpi_waitall((MpiReq **)reqs, n); }
int rt_comm_test(RtCommReq *req) { return rt_mpi_test((MpiReq *)req); }
