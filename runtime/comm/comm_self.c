/* The backend of comm.h for a machine without MPI: a world of one rank.
 *
 * Rank programs always link a backend, since the runtime's tensor-parallel
 * code names the functions of comm.h; where CMake finds no MPI they link
 * this one. Every communicator has one rank, so a collective is a copy of
 * the send buffer into the receive buffer, and a mesh of more than one rank
 * is the same fatal error as under MPI with too few ranks. */
#include "comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct RtComm {
  const char *name;
  RtCommStats stats;
};

/* Completed at once: the request only exists so that wait can free it. */
struct RtCommReq {
  int done;
};

static struct {
  int init;
  RtComm world;
} g = {0, {"world", {{0}, {0}, 0}}};

_Noreturn void rt_comm_fatal(const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rt_error(g.init ? "rank 0" : NULL, "%s", msg);
  exit(1);
}

void rt_comm_init(int *argc, char ***argv) {
  (void)argc, (void)argv;
  g.init = 1;
}

void rt_comm_finalize(void) { g.init = 0; }
int rt_comm_world_rank(void) { return 0; }
int rt_comm_world_size(void) { return 1; }
int rt_comm_local_rank(void) { return 0; }
RtComm *rt_comm_world(void) { return &g.world; }

RtComms *rt_comms_new(RtMesh mesh) {
  if (!rt_mesh_valid(mesh))
    rt_comm_fatal("invalid mesh t=%d p=%d d=%d: each size must be at least 1", mesh.tp, mesh.pp,
                  mesh.dp);
  if (rt_mesh_size(mesh) != 1)
    rt_comm_fatal("the mesh t=%d x p=%d x d=%d needs %d ranks, but the world has 1 (this "
                  "program was built without MPI)",
                  mesh.tp, mesh.pp, mesh.dp, rt_mesh_size(mesh));
  RtComms *cs = rt_xcalloc(1, sizeof *cs);
  cs->mesh = mesh;
  cs->world = &g.world;
  for (int a = 0; a < RT_AXIS_COUNT; a++) {
    RtComm *c = rt_xcalloc(1, sizeof *c);
    c->name = rt_axis_name((RtAxis)a);
    cs->axis[a] = c;
  }
  return cs;
}

void rt_comms_free(RtComms *cs) {
  if (!cs) return;
  for (int a = 0; a < RT_AXIS_COUNT; a++) free(cs->axis[a]);
  free(cs);
}

/* One rank: every split is a group of one. */
RtComm *rt_comm_split(RtComm *parent, int color, int key, const char *name) {
  (void)parent, (void)color, (void)key;
  RtComm *c = rt_xcalloc(1, sizeof *c);
  c->name = name;
  return c;
}
void rt_comm_free(RtComm *c) { free(c); }

int rt_comm_rank(const RtComm *c) { return (void)c, 0; }
int rt_comm_size(const RtComm *c) { return (void)c, 1; }
const char *rt_comm_name(const RtComm *c) { return c->name; }

int rt_comm_world_rank_of(const RtComm *c, int r) {
  if (r != 0) rt_comm_fatal("rank %d is not in the %s communicator of 1 rank", r, c->name);
  return 0;
}

static void count(RtComm *c, RtCommKind kind) { c->stats.calls[kind]++; }

static void copy(const void *send, void *recv, int64_t n, RtCommType type) {
  if (send != recv && n > 0) memmove(recv, send, (size_t)n * (size_t)rt_comm_type_size(type));
}

void rt_comm_allreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t, RtCommOp op) {
  (void)op;
  count(c, RT_COMM_ALLREDUCE);
  copy(s, r, n, t);
}
void rt_comm_allgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  count(c, RT_COMM_ALLGATHER);
  copy(s, r, n, t);
}
void rt_comm_reduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                            RtCommOp op) {
  (void)op;
  count(c, RT_COMM_REDUCE_SCATTER);
  copy(s, r, n, t);
}
void rt_comm_broadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root) {
  (void)b, (void)n, (void)t;
  if (root != 0) rt_comm_fatal("rt_comm_broadcast on the %s communicator: root %d is out of range", c->name, root);
  count(c, RT_COMM_BROADCAST);
}
void rt_comm_send(RtComm *c, const void *b, int64_t n, RtCommType t, int peer) {
  (void)b, (void)n, (void)t, (void)peer;
  rt_comm_fatal("rt_comm_send on the %s communicator: no peer in a world of one", c->name);
}
void rt_comm_recv(RtComm *c, void *b, int64_t n, RtCommType t, int peer) {
  (void)b, (void)n, (void)t, (void)peer;
  rt_comm_fatal("rt_comm_recv on the %s communicator: no peer in a world of one", c->name);
}
void rt_comm_barrier(RtComm *c) { count(c, RT_COMM_BARRIER); }
void rt_comm_alltoall(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  count(c, RT_COMM_ALLTOALL);
  copy(s, r, n, t);
}
/* The one part is this rank's own: what it sends is what it receives. */
void rt_comm_alltoallv(RtComm *c, const void *s, const int64_t *sc, void *r, const int64_t *rc,
                       RtCommType t) {
  if (!sc || !rc || sc[0] < 0 || sc[0] != rc[0])
    rt_comm_fatal("rt_comm_alltoallv on the %s communicator: rank 0 sends %lld elements here, "
                  "%lld were expected",
                  c->name, sc ? (long long)sc[0] : -1LL, rc ? (long long)rc[0] : -1LL);
  count(c, RT_COMM_ALLTOALL);
  copy(s, r, sc[0], t);
}

static RtCommReq *done(void) {
  RtCommReq *r = rt_xcalloc(1, sizeof *r);
  r->done = 1;
  return r;
}

RtCommReq *rt_comm_iallreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                              RtCommOp op) {
  rt_comm_allreduce(c, s, r, n, t, op);
  return done();
}
RtCommReq *rt_comm_iallgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  rt_comm_allgather(c, s, r, n, t);
  return done();
}
RtCommReq *rt_comm_ireduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                                   RtCommOp op) {
  rt_comm_reduce_scatter(c, s, r, n, t, op);
  return done();
}
RtCommReq *rt_comm_ibroadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root) {
  rt_comm_broadcast(c, b, n, t, root);
  return done();
}
RtCommReq *rt_comm_isend(RtComm *c, const void *b, int64_t n, RtCommType t, int peer) {
  rt_comm_send(c, b, n, t, peer);
  return done();
}
RtCommReq *rt_comm_irecv(RtComm *c, void *b, int64_t n, RtCommType t, int peer) {
  rt_comm_recv(c, b, n, t, peer);
  return done();
}
RtCommReq *rt_comm_ibarrier(RtComm *c) {
  rt_comm_barrier(c);
  return done();
}

void rt_comm_wait(RtCommReq *req) {
  if (!req) rt_comm_fatal("rt_comm_wait: no request (NULL)");
  free(req);
}

void rt_comm_waitall(RtCommReq **reqs, int n) {
  for (int i = 0; i < n; i++)
    if (reqs[i]) rt_comm_wait(reqs[i]), reqs[i] = NULL;
}

int rt_comm_test(RtCommReq *req) {
  rt_comm_wait(req);
  return 1;
}

RtCommStats rt_comm_stats(const RtComm *c) { return c->stats; }
void rt_comm_stats_reset(RtComm *c) { memset(&c->stats, 0, sizeof c->stats); }
