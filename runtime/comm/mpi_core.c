/* The MPI part of comm.h's backends (mpi_core.h): MPI's world, the
 * communicators of the mesh, the argument checks, the byte counters and
 * every operation over MPI. The MPI backend (comm_mpi.c) is these
 * operations under comm.h's names; the NCCL backend (comm_nccl.c) runs
 * them for host memory and wraps them for device memory. Every MPI call is
 * checked; MPI reports errors to us (the world's error handler is
 * MPI_ERRORS_RETURN) so that we can say which rank failed and what it was
 * doing before MPI_Abort takes the whole job down. */
#include "mpi_core.h"

#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"
#include "watchdog.h"

/* A request remembers what to check or finish once MPI is done: the size a
 * receive must have had, the copy out of the temporary buffer of an
 * in-place reduce-scatter, and the sum of a bf16 reduction's gathered
 * parts (nparts > 0: tmp holds nparts runs of `count` bf16, reduced into
 * dst). */
struct MpiReq {
  MPI_Request req;
  RtComm *comm;
  const char *what;     /* the MPI function that started it */
  int64_t expect;       /* elements a receive must get; -1 for the others */
  RtCommType type;
  int peer;
  void *tmp, *dst;      /* copy tmp to dst (bytes) when complete */
  size_t bytes;
  int nparts;           /* a bf16 reduction: the ranks' parts in tmp */
  int64_t count;
  RtCommOp op;
};

void (*rt_mpi_before_exit)(void);

static struct {
  int init;
  int rank, size, local_rank;
  RtComm world;
} g = {.rank = -1};

_Noreturn void rt_mpi_vfatal(const char *fmt, va_list ap) {
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  rt_wd_fail(msg);
  if (g.rank >= 0) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", g.rank);
    rt_error(who, "%s", msg);
  } else {
    rt_error(NULL, "%s", msg);
  }
  fflush(stderr);
  if (rt_mpi_before_exit) rt_mpi_before_exit();
  /* Under `shardc run` the launcher ends the job (every other rank exits
   * with status 1, abi/job.h) and names this rank in its message. */
  if (rt_wd_supervised()) {
    fflush(stdout);
    _exit(1);
  }
  /* MPI_Abort kills every process of the job, including those blocked in a
   * collective that this rank will never join: that is what keeps a failure
   * from turning into a hang. */
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

_Noreturn void rt_mpi_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rt_mpi_vfatal(fmt, ap);
}

static _Noreturn void mpi_fail(int err, const RtComm *c, const char *fn, int fnlen,
                               const char *file, int line) {
  char msg[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
    len = snprintf(msg, sizeof msg, "error %d", err);
  msg[len < 0 ? 0 : len > MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING : len] = 0;
  rt_mpi_fatal("%.*s%s%s%s failed: %s (%s:%d)", fnlen, fn, c ? " on the " : "", c ? c->name : "",
                c ? " communicator" : "", msg, file, line);
}

void rt_mpi_check(int err, const RtComm *c, const char *call, const char *file, int line) {
  if (err != MPI_SUCCESS) mpi_fail(err, c, call, (int)strcspn(call, "("), file, line);
}

static void need_init(const char *fn) {
  if (!g.init) rt_mpi_fatal("%s: rt_comm_init was not called", fn);
}

int rt_mpi_inited(void) { return g.init; }

void rt_mpi_init(int *argc, char ***argv) {
  if (g.init) return;
  int inited = 0, provided = 0;
  MPI_CHECK(NULL, MPI_Initialized(&inited));
  if (!inited) MPI_CHECK(NULL, MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  else MPI_CHECK(NULL, MPI_Query_thread(&provided));
  MPI_CHECK(NULL, MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(NULL, MPI_Comm_rank(MPI_COMM_WORLD, &g.rank));
  MPI_CHECK(NULL, MPI_Comm_size(MPI_COMM_WORLD, &g.size));
  if (provided < MPI_THREAD_FUNNELED)
    rt_mpi_fatal("MPI provides thread level %d, FUNNELED (%d) is needed", provided,
                  MPI_THREAD_FUNNELED);
  MPI_Comm node;
  MPI_CHECK(NULL, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g.rank,
                                      MPI_INFO_NULL, &node));
  MPI_CHECK(NULL, MPI_Comm_rank(node, &g.local_rank));
  MPI_CHECK(NULL, MPI_Comm_free(&node));
  g.world.comm = MPI_COMM_WORLD;
  g.world.rank = g.rank;
  g.world.size = g.size;
  g.world.name = "world";
  g.world.members = rt_xmalloc(sizeof(int) * (size_t)g.size);
  for (int i = 0; i < g.size; i++) g.world.members[i] = i;
  g.init = 1;
}

void rt_mpi_finalize(void) {
  if (!g.init) return;
  MPI_CHECK(NULL, MPI_Finalize());
  free(g.world.members);
  g.world.members = NULL;
  g.init = 0;
}

int rt_comm_world_rank(void) {
  need_init("rt_comm_world_rank");
  return g.rank;
}

int rt_comm_world_size(void) {
  need_init("rt_comm_world_size");
  return g.size;
}

int rt_comm_local_rank(void) {
  need_init("rt_comm_local_rank");
  return g.local_rank;
}

RtComm *rt_comm_world(void) {
  need_init("rt_comm_world");
  return &g.world;
}

int rt_comm_rank(const RtComm *c) { return c->rank; }
int rt_comm_size(const RtComm *c) { return c->size; }
const char *rt_comm_name(const RtComm *c) { return c->name; }

int rt_comm_world_rank_of(const RtComm *c, int r) {
  if (r < 0 || r >= c->size)
    rt_mpi_fatal("rank %d is not in the %s communicator of %d ranks", r, c->name, c->size);
  return c->members[r];
}

/* ---- Communicators of the mesh ----------------------------------------- */

/* Splits the world into the groups of one axis. The color of a group is
 * the world rank of its first member, which no other group shares; the key
 * is the rank's coordinate on the axis, so that the rank inside the group
 * is that coordinate. Ranks without a group (middle stages for the
 * embedding group) get NULL. */
static RtComm *split_axis(RtMesh mesh, RtAxis axis) {
  int members[1 << 10], *m = members;
  int most = mesh.tp > mesh.pp ? mesh.tp : mesh.pp;
  most = most > mesh.dp ? most : mesh.dp;
  if (most > (int)(sizeof members / sizeof *members)) m = rt_xmalloc(sizeof(int) * (size_t)most);
  int n = rt_mesh_group(mesh, axis, g.rank, m);
  int color = n > 0 ? m[0] : MPI_UNDEFINED;
  int key = rt_mesh_axis_index(mesh, axis, g.rank);
  MPI_Comm comm;
  MPI_CHECK(&g.world, MPI_Comm_split(MPI_COMM_WORLD, color, key < 0 ? 0 : key, &comm));
  RtComm *c = NULL;
  if (n > 0) {
    c = rt_xcalloc(1, sizeof *c);
    c->comm = comm;
    c->name = rt_axis_name(axis);
    MPI_CHECK(c, MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MPI_CHECK(c, MPI_Comm_rank(comm, &c->rank));
    MPI_CHECK(c, MPI_Comm_size(comm, &c->size));
    if (c->size != n || c->rank != key)
      rt_mpi_fatal("the %s communicator has rank %d of %d, the layout says %d of %d", c->name,
                    c->rank, c->size, key, n);
    c->members = rt_xmalloc(sizeof(int) * (size_t)n);
    memcpy(c->members, m, sizeof(int) * (size_t)n);
  }
  if (m != members) free(m);
  return c;
}

RtComms *rt_mpi_comms_new(RtMesh mesh) {
  need_init("rt_comms_new");
  if (!rt_mesh_valid(mesh))
    rt_mpi_fatal("invalid mesh t=%d p=%d d=%d: each size must be at least 1", mesh.tp, mesh.pp,
                  mesh.dp);
  if (rt_mesh_size(mesh) != g.size)
    rt_mpi_fatal("the mesh t=%d x p=%d x d=%d needs %d ranks, but the world has %d", mesh.tp,
                  mesh.pp, mesh.dp, rt_mesh_size(mesh), g.size);
  RtComms *cs = rt_xcalloc(1, sizeof *cs);
  cs->mesh = mesh;
  cs->rank = g.rank;
  cs->coord = rt_mesh_coord(mesh, g.rank);
  cs->world = &g.world;
  for (int a = 0; a < RT_AXIS_COUNT; a++) cs->axis[a] = split_axis(mesh, (RtAxis)a);
  return cs;
}

void rt_mpi_comms_free(RtComms *cs) {
  if (!cs) return;
  for (int a = 0; a < RT_AXIS_COUNT; a++) {
    RtComm *c = cs->axis[a];
    if (!c) continue;
    MPI_CHECK(c, MPI_Comm_free(&c->comm));
    free(c->members);
    free(c);
  }
  free(cs);
}

RtComm *rt_mpi_comm_split(RtComm *parent, int color, int key, const char *name) {
  MPI_Comm comm;
  MPI_CHECK(parent, MPI_Comm_split(parent->comm, color, key, &comm));
  RtComm *c = rt_xcalloc(1, sizeof *c);
  c->comm = comm;
  c->name = name;
  MPI_CHECK(c, MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  MPI_CHECK(c, MPI_Comm_rank(comm, &c->rank));
  MPI_CHECK(c, MPI_Comm_size(comm, &c->size));
  c->members = rt_xmalloc(sizeof(int) * (size_t)c->size);
  MPI_CHECK(c, MPI_Allgather(&g.rank, 1, MPI_INT, c->members, 1, MPI_INT, comm));
  return c;
}

void rt_mpi_comm_free(RtComm *c) {
  if (!c) return;
  MPI_CHECK(c, MPI_Comm_free(&c->comm));
  free(c->members);
  free(c);
}

/* ---- Argument checks and counters -------------------------------------- */

static MPI_Datatype mpi_type(RtComm *c, const char *fn, RtCommType t) {
  switch (t) {
  case RT_COMM_F32: return MPI_FLOAT;
  case RT_COMM_F64: return MPI_DOUBLE;
  case RT_COMM_I32: return MPI_INT32_T;
  case RT_COMM_BF16: return MPI_UINT16_T; /* moved as bits; reductions: bf16_reduce */
  default: rt_mpi_fatal("%s on the %s communicator: unknown element type %d", fn, c->name, (int)t);
  }
}

static MPI_Op mpi_op(RtComm *c, const char *fn, RtCommOp op) {
  switch (op) {
  case RT_COMM_SUM: return MPI_SUM;
  case RT_COMM_MAX: return MPI_MAX;
  default: rt_mpi_fatal("%s on the %s communicator: unknown reduction %d", fn, c->name, (int)op);
  }
}

/* MPI counts are ints: a larger message would need splitting, which no
 * CPU-target program comes near. */
int rt_mpi_check_count(RtComm *c, const char *fn, int64_t count) {
  need_init(fn);
  if (!c) rt_mpi_fatal("%s: no communicator (NULL)", fn);
  if (count < 0 || count > INT_MAX)
    rt_mpi_fatal("%s on the %s communicator: count %lld is out of range (0 to %d)", fn, c->name,
                  (long long)count, INT_MAX);
  return (int)count;
}

void rt_mpi_check_rank(RtComm *c, const char *fn, const char *role, int r) {
  if (r < 0 || r >= c->size)
    rt_mpi_fatal("%s on the %s communicator: %s %d is out of range (it has %d ranks)", fn,
                  c->name, role, r, c->size);
}

/* Rejects send and receive buffers that overlap, other than in the in-place
 * forms the caller has already recognised. */
void rt_mpi_check_disjoint(RtComm *c, const char *fn, const void *a, size_t na, const void *b,
                           size_t nb) {
  const char *pa = a, *pb = b;
  if (na && nb && pa < pb + nb && pb < pa + na)
    rt_mpi_fatal("%s on the %s communicator: the send and receive buffers overlap", fn, c->name);
}

void rt_mpi_count_bytes(RtComm *c, RtCommKind kind, int64_t count, RtCommType type) {
  int64_t b = rt_comm_bytes(kind, c->size, count, type);
  c->stats.calls[kind]++;
  c->stats.bytes[kind] += b;
  if (kind != RT_COMM_RECV) c->stats.sent += b;
}

RtCommStats rt_comm_stats(const RtComm *c) { return c->stats; }

void rt_comm_stats_reset(RtComm *c) { memset(&c->stats, 0, sizeof c->stats); }

static MpiReq *req_new(RtComm *c, const char *what) {
  MpiReq *r = rt_xcalloc(1, sizeof *r);
  r->req = MPI_REQUEST_NULL;
  r->comm = c;
  r->what = what;
  r->expect = -1;
  return r;
}

/* ---- bf16 reductions ---------------------------------------------------- *
 * MPI has no bf16 type, and a user-defined MPI_Op would not do: MPI fixes
 * the order of a non-commutative op's operands but lets the implementation
 * group them, and every partial result would be rounded to bf16 again. So
 * each rank gathers the parts it reduces (all of them for an all-reduce,
 * its own block of each rank's for a reduce-scatter, through MPI_Alltoall)
 * and adds them itself in rank order in fp32, rounding once to nearest
 * even: the same bits on every rank, in every run, whatever MPI chooses.
 * It moves (n - 1) S bytes for an all-reduce instead of a ring's
 * 2 (n - 1) S / n; only host memory and the staged path take it (the CUDA
 * target's device buffers go through ncclBfloat16). */

static float bf16_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t float_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* dst[j] = the reduction of parts[r * count + j] over r = 0, 1, ..., in order. */
static void bf16_reduce(void *dst, const void *parts, int nparts, int64_t count, RtCommOp op) {
  const uint16_t *x = parts;
  uint16_t *y = dst;
  for (int64_t j = 0; j < count; j++) {
    float acc = bf16_float(x[j]);
    for (int r = 1; r < nparts; r++) {
      float v = bf16_float(x[(int64_t)r * count + j]);
      acc = op == RT_COMM_MAX ? (v > acc || v != v ? v : acc) : acc + v;
    }
    y[j] = float_bf16(acc);
  }
}

/* The bf16 all-reduce (alltoall = 0) or reduce-scatter (1) of `n` result
 * elements into recv; the parts travel as MPI_UINT16_T. */
static MpiReq *bf16_reduction(RtComm *c, const void *send, void *recv, int n, RtCommOp op,
                                 int alltoall, int nb) {
  void *parts = rt_xmalloc((size_t)c->size * (size_t)n * 2 + 1);
  const char *what = alltoall ? (nb ? "MPI_Ialltoall" : "MPI_Alltoall")
                              : (nb ? "MPI_Iallgather" : "MPI_Allgather");
  if (!nb) {
    if (alltoall)
      MPI_WAITING(c, what, MPI_Alltoall(send, n, MPI_UINT16_T, parts, n, MPI_UINT16_T, c->comm));
    else
      MPI_WAITING(c, what, MPI_Allgather(send, n, MPI_UINT16_T, parts, n, MPI_UINT16_T, c->comm));
    bf16_reduce(recv, parts, c->size, n, op);
    free(parts);
    return NULL;
  }
  MpiReq *r = req_new(c, what);
  r->tmp = parts, r->dst = recv, r->nparts = c->size, r->count = n, r->op = op;
  if (alltoall)
    MPI_CHECK(c, MPI_Ialltoall(send, n, MPI_UINT16_T, parts, n, MPI_UINT16_T, c->comm, &r->req));
  else
    MPI_CHECK(c, MPI_Iallgather(send, n, MPI_UINT16_T, parts, n, MPI_UINT16_T, c->comm, &r->req));
  return r;
}

/* ---- Collectives ------------------------------------------------------- *
 * Each operation is written once: with `nb` it starts the non-blocking form
 * and returns its request, without it completes and returns NULL. */

static MpiReq *allreduce(RtComm *c, const void *send, void *recv, int64_t count,
                            RtCommType type, RtCommOp op, int nb) {
  const char *fn = nb ? "rt_comm_iallreduce" : "rt_comm_allreduce";
  int n = rt_mpi_check_count(c, fn, count);
  MPI_Datatype t = mpi_type(c, fn, type);
  MPI_Op o = mpi_op(c, fn, op);
  size_t bytes = (size_t)n * (size_t)rt_comm_type_size(type);
  if (send != recv) rt_mpi_check_disjoint(c, fn, send, bytes, recv, bytes);
  const void *s = send == recv ? MPI_IN_PLACE : send;
  rt_mpi_count_bytes(c, RT_COMM_ALLREDUCE, count, type);
  if (type == RT_COMM_BF16) return bf16_reduction(c, send, recv, n, op, 0, nb);
  if (!nb) {
    MPI_WAITING(c, "MPI_Allreduce", MPI_Allreduce(s, recv, n, t, o, c->comm));
    return NULL;
  }
  MpiReq *r = req_new(c, "MPI_Iallreduce");
  MPI_CHECK(c, MPI_Iallreduce(s, recv, n, t, o, c->comm, &r->req));
  return r;
}

static MpiReq *allgather(RtComm *c, const void *send, void *recv, int64_t count,
                            RtCommType type, int nb) {
  const char *fn = nb ? "rt_comm_iallgather" : "rt_comm_allgather";
  int n = rt_mpi_check_count(c, fn, count);
  MPI_Datatype t = mpi_type(c, fn, type);
  size_t part = (size_t)n * (size_t)rt_comm_type_size(type);
  /* MPI's in-place all-gather takes this rank's part from its place in the
   * receive buffer, which is NCCL's in-place form too. */
  int inplace = send == (const char *)recv + part * (size_t)c->rank;
  if (!inplace) rt_mpi_check_disjoint(c, fn, send, part, recv, part * (size_t)c->size);
  const void *s = inplace ? MPI_IN_PLACE : send;
  rt_mpi_count_bytes(c, RT_COMM_ALLGATHER, count, type);
  if (!nb) {
    MPI_WAITING(c, "MPI_Allgather", MPI_Allgather(s, n, t, recv, n, t, c->comm));
    return NULL;
  }
  MpiReq *r = req_new(c, "MPI_Iallgather");
  MPI_CHECK(c, MPI_Iallgather(s, n, t, recv, n, t, c->comm, &r->req));
  return r;
}

/* MPI's in-place reduce-scatter leaves the result at the start of the
 * buffer and NCCL's at the rank's part: to keep NCCL's meaning (and the
 * rest of the send buffer intact) the in-place form reduces into a
 * temporary and copies it into place when done. */
static MpiReq *reduce_scatter(RtComm *c, const void *send, void *recv, int64_t count,
                                 RtCommType type, RtCommOp op, int nb) {
  const char *fn = nb ? "rt_comm_ireduce_scatter" : "rt_comm_reduce_scatter";
  int n = rt_mpi_check_count(c, fn, count);
  MPI_Datatype t = mpi_type(c, fn, type);
  MPI_Op o = mpi_op(c, fn, op);
  size_t part = (size_t)n * (size_t)rt_comm_type_size(type);
  int inplace = recv == (const char *)send + part * (size_t)c->rank;
  if (!inplace) rt_mpi_check_disjoint(c, fn, send, part * (size_t)c->size, recv, part);
  if (type == RT_COMM_BF16) {
    rt_mpi_count_bytes(c, RT_COMM_REDUCE_SCATTER, count, type);
    return bf16_reduction(c, send, recv, n, op, 1, nb);
  }
  void *out = inplace ? rt_xmalloc(part) : recv;
  rt_mpi_count_bytes(c, RT_COMM_REDUCE_SCATTER, count, type);
  if (!nb) {
    MPI_WAITING(c, "MPI_Reduce_scatter_block",
                MPI_Reduce_scatter_block(send, out, n, t, o, c->comm));
    if (inplace) memcpy(recv, out, part), free(out);
    return NULL;
  }
  MpiReq *r = req_new(c, "MPI_Ireduce_scatter_block");
  if (inplace) r->tmp = out, r->dst = recv, r->bytes = part;
  MPI_CHECK(c, MPI_Ireduce_scatter_block(send, out, n, t, o, c->comm, &r->req));
  return r;
}

static MpiReq *broadcast(RtComm *c, void *buf, int64_t count, RtCommType type, int root,
                            int nb) {
  const char *fn = nb ? "rt_comm_ibroadcast" : "rt_comm_broadcast";
  int n = rt_mpi_check_count(c, fn, count);
  MPI_Datatype t = mpi_type(c, fn, type);
  rt_mpi_check_rank(c, fn, "root", root);
  rt_mpi_count_bytes(c, RT_COMM_BROADCAST, count, type);
  if (!nb) {
    MPI_WAITING(c, "MPI_Bcast", MPI_Bcast(buf, n, t, root, c->comm));
    return NULL;
  }
  MpiReq *r = req_new(c, "MPI_Ibcast");
  MPI_CHECK(c, MPI_Ibcast(buf, n, t, root, c->comm, &r->req));
  return r;
}

/* One tag for every message: matching is by order of posting alone, as
 * with NCCL (see comm.h). */
enum { TAG = 0 };

static MpiReq *p2p_send(RtComm *c, const void *buf, int64_t count, RtCommType type, int peer,
                       int nb) {
  const char *fn = nb ? "rt_comm_isend" : "rt_comm_send";
  int n = rt_mpi_check_count(c, fn, count);
  MPI_Datatype t = mpi_type(c, fn, type);
  rt_mpi_check_rank(c, fn, "peer", peer);
  rt_mpi_count_bytes(c, RT_COMM_SEND, count, type);
  if (!nb) {
    MPI_WAITING(c, "MPI_Send", MPI_Send(buf, n, t, peer, TAG, c->comm));
    return NULL;
  }
  MpiReq *r = req_new(c, "MPI_Isend");
  MPI_CHECK(c, MPI_Isend(buf, n, t, peer, TAG, c->comm, &r->req));
  return r;
}

/* A message shorter than the receive is no error to MPI, but it is a
 * mismatch between the two ranks' programs: say so. */
static void check_received(RtComm *c, const MPI_Status *st, int64_t expect, RtCommType type,
                           int peer) {
  int got = 0;
  MPI_CHECK(c, MPI_Get_count(st, mpi_type(c, "receive", type), &got));
  if (got != expect)
    rt_mpi_fatal("receive on the %s communicator: rank %d sent %d elements, %lld were expected",
                  c->name, peer, got, (long long)expect);
}

static MpiReq *p2p_recv(RtComm *c, void *buf, int64_t count, RtCommType type, int peer, int nb) {
  const char *fn = nb ? "rt_comm_irecv" : "rt_comm_recv";
  int n = rt_mpi_check_count(c, fn, count);
  MPI_Datatype t = mpi_type(c, fn, type);
  rt_mpi_check_rank(c, fn, "peer", peer);
  rt_mpi_count_bytes(c, RT_COMM_RECV, count, type);
  if (!nb) {
    MPI_Status st;
    MPI_WAITING(c, "MPI_Recv", MPI_Recv(buf, n, t, peer, TAG, c->comm, &st));
    check_received(c, &st, count, type, peer);
    return NULL;
  }
  MpiReq *r = req_new(c, "MPI_Irecv");
  r->expect = count, r->type = type, r->peer = peer;
  MPI_CHECK(c, MPI_Irecv(buf, n, t, peer, TAG, c->comm, &r->req));
  return r;
}

static MpiReq *barrier(RtComm *c, int nb) {
  rt_mpi_check_count(c, nb ? "rt_comm_ibarrier" : "rt_comm_barrier", 0);
  rt_mpi_count_bytes(c, RT_COMM_BARRIER, 0, RT_COMM_I32);
  if (!nb) {
    MPI_WAITING(c, "MPI_Barrier", MPI_Barrier(c->comm));
    return NULL;
  }
  MpiReq *r = req_new(c, "MPI_Ibarrier");
  MPI_CHECK(c, MPI_Ibarrier(c->comm, &r->req));
  return r;
}

/* ---- All-to-all ---------------------------------------------------------- */

void rt_mpi_alltoall(RtComm *c, const void *send, void *recv, int64_t count, RtCommType type) {
  const char *fn = "rt_comm_alltoall";
  int n = rt_mpi_check_count(c, fn, count);
  if ((int64_t)n * c->size > INT_MAX)
    rt_mpi_fatal("%s on the %s communicator: %lld elements in all are more than %d", fn, c->name,
                 (long long)n * c->size, INT_MAX);
  MPI_Datatype t = mpi_type(c, fn, type);
  size_t all = (size_t)n * (size_t)c->size * (size_t)rt_comm_type_size(type);
  rt_mpi_check_disjoint(c, fn, send, all, recv, all);
  rt_mpi_count_bytes(c, RT_COMM_ALLTOALL, count, type);
  MPI_WAITING(c, "MPI_Alltoall", MPI_Alltoall(send, n, t, recv, n, t, c->comm));
}

/* The sum of one side's counts, each checked; MPI's displacements are
 * ints, so the sum must be one too. */
static int64_t check_counts(RtComm *c, const char *fn, const char *side, const int64_t *k) {
  if (!k) rt_mpi_fatal("%s on the %s communicator: no %s counts (NULL)", fn, c->name, side);
  int64_t sum = 0;
  for (int r = 0; r < c->size; r++) {
    if (k[r] < 0 || k[r] > INT_MAX)
      rt_mpi_fatal("%s on the %s communicator: %s count %lld for rank %d is out of range (0 to %d)",
                   fn, c->name, side, (long long)k[r], r, INT_MAX);
    sum += k[r];
  }
  if (sum > INT_MAX)
    rt_mpi_fatal("%s on the %s communicator: %lld elements to %s in all are more than %d", fn,
                 c->name, (long long)sum, side, INT_MAX);
  return sum;
}

int64_t rt_mpi_check_alltoallv(RtComm *c, const char *fn, const void *send, const int64_t *sc,
                               void *recv, const int64_t *rc, RtCommType type, int64_t *nrecv) {
  rt_mpi_check_count(c, fn, 0);
  mpi_type(c, fn, type);
  int64_t ns = check_counts(c, fn, "send", sc), nr = check_counts(c, fn, "receive", rc);
  size_t esz = (size_t)rt_comm_type_size(type);
  rt_mpi_check_disjoint(c, fn, send, (size_t)ns * esz, recv, (size_t)nr * esz);
  /* What each peer says it sends here, against what this rank expects: a
   * mismatch would otherwise be a truncation error, silent short data, or
   * (on NCCL) a hang. n ints each way: little beside the data. */
  int32_t *out = rt_xmalloc(sizeof(int32_t) * 2 * (size_t)c->size), *in = out + c->size;
  for (int r = 0; r < c->size; r++) out[r] = (int32_t)sc[r];
  MPI_WAITING(c, "MPI_Alltoall", MPI_Alltoall(out, 1, MPI_INT32_T, in, 1, MPI_INT32_T, c->comm));
  for (int r = 0; r < c->size; r++)
    if (in[r] != rc[r]) {
      int32_t got = in[r];
      free(out);
      rt_mpi_fatal("%s on the %s communicator: rank %d sends %d elements here, %lld were expected",
                   fn, c->name, r, got, (long long)rc[r]);
    }
  free(out);
  c->stats.calls[RT_COMM_ALLTOALL]++;
  int64_t b = rt_comm_alltoallv_bytes(c->size, c->rank, sc, type);
  c->stats.bytes[RT_COMM_ALLTOALL] += b;
  c->stats.sent += b;
  *nrecv = nr;
  return ns;
}

void rt_mpi_alltoallv(RtComm *c, const void *send, const int64_t *sc, void *recv,
                      const int64_t *rc, RtCommType type) {
  const char *fn = "rt_comm_alltoallv";
  int64_t nr;
  rt_mpi_check_alltoallv(c, fn, send, sc, recv, rc, type, &nr);
  int *k = rt_xmalloc(sizeof(int) * 4 * (size_t)c->size);
  int *scount = k, *sdispl = k + c->size, *rcount = k + 2 * c->size, *rdispl = k + 3 * c->size;
  for (int r = 0, so = 0, ro = 0; r < c->size; r++) {
    scount[r] = (int)sc[r], sdispl[r] = so, so += scount[r];
    rcount[r] = (int)rc[r], rdispl[r] = ro, ro += rcount[r];
  }
  MPI_Datatype t = mpi_type(c, fn, type);
  MPI_WAITING(c, "MPI_Alltoallv",
              MPI_Alltoallv(send, scount, sdispl, t, recv, rcount, rdispl, t, c->comm));
  free(k);
}

void rt_mpi_allreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t, RtCommOp op) {
  allreduce(c, s, r, n, t, op, 0);
}
void rt_mpi_allgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  allgather(c, s, r, n, t, 0);
}
void rt_mpi_reduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                            RtCommOp op) {
  reduce_scatter(c, s, r, n, t, op, 0);
}
void rt_mpi_broadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root) {
  broadcast(c, b, n, t, root, 0);
}
void rt_mpi_send(RtComm *c, const void *b, int64_t n, RtCommType t, int peer) {
  p2p_send(c, b, n, t, peer, 0);
}
void rt_mpi_recv(RtComm *c, void *b, int64_t n, RtCommType t, int peer) {
  p2p_recv(c, b, n, t, peer, 0);
}
void rt_mpi_barrier(RtComm *c) { barrier(c, 0); }

MpiReq *rt_mpi_iallreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                              RtCommOp op) {
  return allreduce(c, s, r, n, t, op, 1);
}
MpiReq *rt_mpi_iallgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  return allgather(c, s, r, n, t, 1);
}
MpiReq *rt_mpi_ireduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                                   RtCommOp op) {
  return reduce_scatter(c, s, r, n, t, op, 1);
}
MpiReq *rt_mpi_ibroadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root) {
  return broadcast(c, b, n, t, root, 1);
}
MpiReq *rt_mpi_isend(RtComm *c, const void *b, int64_t n, RtCommType t, int peer) {
  return p2p_send(c, b, n, t, peer, 1);
}
MpiReq *rt_mpi_irecv(RtComm *c, void *b, int64_t n, RtCommType t, int peer) {
  return p2p_recv(c, b, n, t, peer, 1);
}
MpiReq *rt_mpi_ibarrier(RtComm *c) { return barrier(c, 1); }

/* ---- Completion -------------------------------------------------------- */

static void finish(MpiReq *r, const MPI_Status *st) {
  if (r->expect >= 0) check_received(r->comm, st, r->expect, r->type, r->peer);
  if (r->nparts) bf16_reduce(r->dst, r->tmp, r->nparts, r->count, r->op), free(r->tmp);
  else if (r->tmp) memcpy(r->dst, r->tmp, r->bytes), free(r->tmp);
  free(r);
}

/* The status of a completed collective is undefined in MPI; only receives
 * (in finish) look at theirs. */
static void check_done(MpiReq *r, int err, const char *fn) {
  if (err == MPI_SUCCESS) return;
  char what[96];
  int n = snprintf(what, sizeof what, "%s of %s", fn, r->what);
  mpi_fail(err, r->comm, what, n, __FILE__, __LINE__);
}

void rt_mpi_wait(MpiReq *r) {
  if (!r) rt_mpi_fatal("rt_comm_wait: no request (NULL)");
  MPI_Status st;
  rt_wd_comm(r->what, r->comm->name);
  check_done(r, MPI_Wait(&r->req, &st), "MPI_Wait");
  rt_wd_comm_done();
  finish(r, &st);
}

void rt_mpi_waitall(MpiReq **reqs, int n) {
  for (int i = 0; i < n; i++)
    if (reqs[i]) rt_mpi_wait(reqs[i]), reqs[i] = NULL;
}

int rt_mpi_test(MpiReq *r) {
  if (!r) rt_mpi_fatal("rt_comm_test: no request (NULL)");
  MPI_Status st;
  int done = 0;
  check_done(r, MPI_Test(&r->req, &done, &st), "MPI_Test");
  if (!done) return 0;
  finish(r, &st);
  return 1;
}
