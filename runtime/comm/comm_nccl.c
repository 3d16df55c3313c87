/* The NCCL backend of comm.h: what the CUDA target's rank programs talk
 * through. MPI starts the job and keeps doing what it does on the CPU
 * (rank, world, the communicators' layout, host memory); NCCL moves
 * device memory.
 *
 * Built on the MPI core (mpi_core.h), whose operations (rt_mpi_allreduce,
 * ...) are the MPI backend's own code: the host side, the argument checks,
 * the byte counters and the communicators of the mesh. This file wraps
 * each operation: when both buffers are device memory
 * (cudaPointerGetAttributes) and the communicator has an NCCL twin, the
 * operation runs on NCCL; otherwise (host scalars, checkpoint gathers,
 * the world communicator, groups of one rank) it runs over MPI, any
 * device buffer staged through host memory. That is comm.h's "Memory"
 * paragraph.
 *
 * Devices. The device is this rank's local rank on its node
 * (OMPI_COMM_WORLD_LOCAL_RANK, else SLURM_LOCALID, else MPI's shared-memory
 * split) modulo the node's GPUs, set in rt_comm_init before the device
 * layer (device_cuda.c) first touches the GPU; the device layer keeps the
 * device that is current.
 *
 * Communicators. Each axis communicator of more than one rank (tensor,
 * pipeline, data, embedding group) gets an NCCL communicator over the same
 * ranks in the same order: its rank 0 makes an ncclUniqueId, MPI_Bcast
 * gives it to the others, ncclCommInitRank joins them. Every rank builds
 * the axes in the same order, so the initialisations cannot wait on each
 * other in a cycle. The expert groups of --ep are split from the data
 * axis's twin (rt_comm_split).
 *
 * Streams. Each NCCL communicator has its own stream, on which its
 * operations run in the order they were posted; before each, that stream
 * waits (an event) for the work issued so far on the compute stream
 * (k_cuda_stream()), so a send reads what the kernels wrote. Separate
 * streams keep a receive that waits for a later stage from holding up
 * the tensor-parallel all-reduces behind it, which on one stream could
 * close a cycle between stages that MPI's independent requests never
 * form. A wait, and every blocking call, is ordered on the device, not
 * on the host: the compute stream waits (cudaStreamWaitEvent) for the
 * operation's event, so whatever the compute stream runs next sees the
 * result, and the host goes on queueing the step. The host waits only
 * where a value must reach it (the step's loss, the norms' sums, a
 * staged copy), and those reads are on the compute stream, after the
 * collectives they depend on. rt_comm_test still asks on the host
 * whether the event has passed, polling ncclCommGetAsyncError on every
 * communicator meanwhile. (The device layer allocates and frees
 * stream-ordered, cudaMallocAsync: a cudaFree would wait for every stream
 * of the device, an NCCL receive in flight included; a buffer freed after
 * a wait is freed after the operation on the compute stream's order.)
 *
 * Point to point. comm.h has no tags and matches messages in posting
 * order, which is NCCL's rule. Sends and receives posted one after the
 * other on one communicator (a pipeline step slot's messages) are kept
 * and issued together in one ncclGroupStart/ncclGroupEnd, in posting
 * order, when the runtime next waits, tests, or calls any other
 * operation: two stages that each send to the other before receiving
 * would otherwise deadlock, since an NCCL send does not finish before its
 * receive is posted.
 *
 * Determinism. NCCL promises that one all-reduce gives every rank of the
 * communicator the same bits, and that the algorithm (ring, tree, NVLS,
 * CollNet), the protocol (LL, LL128, Simple) and the number of channels
 * are chosen from the message size, the topology and the environment, not
 * from timing; it does not promise that a different choice (another NCCL
 * version, another topology, NCCL_ALGO or NCCL_PROTO set differently)
 * adds in the same order. By default NCCL chooses (NVLS, tree and LL128
 * are worth their bandwidth); under --deterministic (rt_deterministic)
 * the runtime pins the choice that is the same on every machine:
 * NCCL_ALGO=Ring and NCCL_PROTO=Simple unless the user has set them
 * (setenv without overwriting, before the first communicator).
 * The sums still need not match the MPI backend's to the bit: the CPU
 * target agrees with the CUDA target within rounding, not bit for bit.
 *
 * Errors. Every NCCL and CUDA call is checked (NCCL_CHECK, CUDA_CHECK); a
 * failure, or an asynchronous error seen while waiting, or a failure of
 * the MPI part, is reported first (the peers see the abort and fail too,
 * and their MPI_Abort could otherwise end this rank before it has said
 * why), then aborts every NCCL communicator of this rank (ncclCommAbort,
 * so that no kernel stays stuck on a dead peer) and brings the job down as
 * the MPI core does (rt_mpi_fatal: the launcher ends the job under `shardc
 * run`, MPI_Abort otherwise). A rank that stops answering without an error
 * is the watchdog's (watchdog.c): every NCCL call that may wait for peers
 * (an operation, a group's end: connections are made at first use)
 * reports what it waits for, and the launcher or --timeout ends the job.
 * A wait no longer stops the host, so an operation that never completes
 * on the device holds up the step's next host wait (the loss read back)
 * instead, which --timeout ends the same way. NCCL cannot check a received message's
 * length: a mismatch between two ranks' programs shows as wrong data or a
 * hang (the MPI backend reports it). */
#include "comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels_cuda.h"
#include "mpi_core.h"
#include "util.h"
#include "watchdog.h"

/* ---- State --------------------------------------------------------------- */

/* The NCCL twin of one axis communicator, and its stream. */
typedef struct Nccl {
  RtComm *comm;
  ncclComm_t nc;
  cudaStream_t stream;
} Nccl;

/* A host view of a buffer: the buffer itself in host memory, else a copy
 * of its bytes (taken after the compute stream's work). `in` places a
 * buffer that lies inside another's staged copy (the in-place forms). */
typedef struct Staged {
  const char *dev;
  char *host;
  size_t bytes;
  int copy;
} Staged;

/* One request: an MPI one (host memory, or device memory staged through
 * the host copies it keeps until it completes) or an NCCL operation,
 * which is either issued (its event is recorded after it on the stream)
 * or still waiting in the group of pending messages. */
struct RtCommReq {
  MpiReq *mpi;
  Staged keep[2];
  int back[2]; /* keep[i] goes back to the device once complete */
  cudaEvent_t done;
  int pending;
  const char *what; /* the NCCL function, for the watchdog */
  const char *comm; /* the communicator's name */
};

/* A send or receive kept for the next group. */
typedef struct P2p {
  int send;
  void *buf;
  size_t count;
  ncclDataType_t type;
  int peer;
  Nccl *n;
  RtCommReq *req;
} P2p;

/* The runtime builds one set of communicators (tp.c) and the two expert
 * groups of --ep (ep.c); room for two of each. */
enum { MAX_TWINS = 2 * (RT_AXIS_COUNT + 2) };

static struct {
  Nccl comms[MAX_TWINS];
  int ncomms;
  cudaEvent_t ready; /* the compute stream's work so far */
  P2p *p2p;
  int np2p, p2p_cap;
  int failing;   /* a failure is being reported: no more NCCL calls */
  int no_device; /* no GPU visible: MPI only, host memory only */
} nc;

/* ---- Failures -------------------------------------------------------------- */

static void abort_all(void) {
  if (nc.failing) return;
  nc.failing = 1;
  for (int i = 0; i < nc.ncomms; i++) (void)ncclCommAbort(nc.comms[i].nc);
  nc.ncomms = 0;
}

_Noreturn void rt_comm_fatal(const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rt_mpi_fatal("%s", msg);
}

/* NCCL_CHECK(n, ncclFoo(...)): n (may be NULL) names the communicator; the
 * message of rt_comm_fatal names the rank. */
#define NCCL_CHECK(n, call) nccl_check((call), (n), #call, __FILE__, __LINE__)
#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)
/* An NCCL call that may wait for the peers (connections are set up at an
 * operation's first use): the watchdog says what this rank waits in. */
#define NCCL_WAITING(n, fn, call)                                                                  \
  do {                                                                                             \
    rt_wd_comm(fn, (n)->comm->name);                                                               \
    NCCL_CHECK(n, call);                                                                           \
    rt_wd_comm_done();                                                                             \
  } while (0)

static void nccl_check(ncclResult_t r, const Nccl *n, const char *call, const char *file,
                       int line) {
  if (r == ncclSuccess) return;
  const char *last = n ? ncclGetLastError(n->nc) : ncclGetLastError(NULL);
  rt_comm_fatal("%.*s%s%s%s failed: %s%s%s (%s:%d)", (int)strcspn(call, "("), call,
                n ? " on the " : "", n ? n->comm->name : "", n ? " communicator" : "",
                ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "", file, line);
}

static void cuda_check(cudaError_t err, const char *call, const char *file, int line) {
  if (err != cudaSuccess)
    rt_comm_fatal("%.*s failed: %s (%s:%d)", (int)strcspn(call, "("), call,
                  cudaGetErrorString(err), file, line);
}

/* An error another rank's failure (or a broken connection) left on a
 * communicator ends this rank too. */
static void poll_async(void) {
  for (int i = 0; i < nc.ncomms; i++) {
    ncclResult_t st = ncclSuccess;
    NCCL_CHECK(&nc.comms[i], ncclCommGetAsyncError(nc.comms[i].nc, &st));
    if (st == ncclSuccess || st == ncclInProgress) continue;
    const char *last = ncclGetLastError(nc.comms[i].nc);
    rt_comm_fatal("NCCL reported an asynchronous error on the %s communicator: %s%s%s",
                  nc.comms[i].comm->name, ncclGetErrorString(st), last && *last ? ": " : "",
                  last ? last : "");
  }
}

/* ---- Bootstrap --------------------------------------------------------------- */

/* The local rank the launcher gives, else MPI's. */
static int local_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                     "MPI_LOCALRANKID"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    char *end;
    long r = v && *v ? strtol(v, &end, 10) : -1;
    if (v && *v && !*end && r >= 0) return (int)r;
  }
  return rt_comm_local_rank();
}

/* Without a GPU the backend is the MPI core alone (host memory): a rank
 * program then stops at its first use of the device, with the device
 * layer's "no CUDA device" error, and the comm tests run on machines
 * without one (tests/codegen/cuda). */
void rt_comm_init(int *argc, char ***argv) {
  if (rt_mpi_inited()) return;
  /* Every fatal error, the MPI core's too, aborts the NCCL communicators
   * once the message is out (see Errors at the top). */
  rt_mpi_before_exit = abort_all;
  rt_mpi_init(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    nc.no_device = 1;
    return;
  }
  CUDA_CHECK(cudaSetDevice(local_rank() % count));
  /* --deterministic: reductions in the same order on every machine (see the top). */
  if (rt_deterministic) {
    setenv("NCCL_ALGO", "Ring", 0);
    setenv("NCCL_PROTO", "Simple", 0);
  }
}

void rt_comm_finalize(void) {
  if (!rt_mpi_inited()) return;
  for (int i = 0; i < nc.ncomms; i++) CUDA_CHECK(cudaStreamSynchronize(nc.comms[i].stream));
  rt_mpi_finalize();
}

/* A free slot for c's NCCL twin, with its stream. */
static Nccl *new_twin(RtComm *c) {
  if (nc.ncomms == MAX_TWINS)
    rt_comm_fatal("more than %d NCCL communicators (rt_comms_new called again?)", MAX_TWINS);
  Nccl *n = &nc.comms[nc.ncomms];
  n->comm = c;
  n->nc = NULL;
  CUDA_CHECK(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
  return n;
}

/* The NCCL twin of c: the id from c's rank 0, over c's MPI communicator. */
static void nccl_twin(RtComm *c) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  Nccl *n = new_twin(c);
  if (c->rank == 0) NCCL_CHECK(n, ncclGetUniqueId(&id));
  MPI_WAITING(c, "MPI_Bcast", MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->comm));
  rt_wd_comm("ncclCommInitRank", c->name);
  NCCL_CHECK(n, ncclCommInitRank(&n->nc, c->size, id, c->rank));
  rt_wd_comm_done();
  nc.ncomms++;
}

RtComms *rt_comms_new(RtMesh mesh) {
  RtComms *cs = rt_mpi_comms_new(mesh);
  if (nc.no_device) return cs;
  if (!nc.ready) CUDA_CHECK(cudaEventCreateWithFlags(&nc.ready, cudaEventDisableTiming));
  for (int a = 0; a < RT_AXIS_COUNT; a++)
    if (cs->axis[a] && cs->axis[a]->size > 1) nccl_twin(cs->axis[a]);
  return cs;
}

static void flush(void);
static Nccl *twin(const RtComm *c);

/* An expert group of --ep (runtime/mesh/ep.c): MPI's split for the host
 * side, then its NCCL twin, split from the parent's (ncclCommSplit, NCCL
 * 2.18 on: collective over the parent, no id to broadcast; a rank whose
 * group is itself alone takes no color). Without ncclCommSplit, or
 * without a parent twin, the twin is made as the axes' are. A group of
 * one rank has none: its operations run over MPI, as an axis of one
 * rank's do. */
RtComm *rt_comm_split(RtComm *c, int color, int key, const char *name) {
  flush();
  RtComm *s = rt_mpi_comm_split(c, color, key, name);
  if (nc.no_device) return s;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  Nccl *p = twin(c);
  if (p) {
    ncclComm_t made = NULL;
    rt_wd_comm("ncclCommSplit", c->name);
    NCCL_CHECK(p, ncclCommSplit(p->nc, s->size > 1 ? color : NCCL_SPLIT_NOCOLOR, key, &made, NULL));
    rt_wd_comm_done();
    if (s->size > 1) {
      Nccl *n = new_twin(s);
      n->nc = made;
      nc.ncomms++;
    }
    return s;
  }
#endif
  if (s->size > 1) nccl_twin(s);
  return s;
}

/* c's twin, if it has one, destroyed once its stream's work is done. */
static void drop_twin(RtComm *c) {
  for (int i = 0; i < nc.ncomms; i++)
    if (c && nc.comms[i].comm == c) {
      CUDA_CHECK(cudaStreamSynchronize(nc.comms[i].stream));
      NCCL_CHECK(&nc.comms[i], ncclCommDestroy(nc.comms[i].nc));
      CUDA_CHECK(cudaStreamDestroy(nc.comms[i].stream));
      nc.comms[i] = nc.comms[--nc.ncomms];
      return;
    }
}

void rt_comm_free(RtComm *c) {
  if (!c) return;
  flush();
  drop_twin(c);
  rt_mpi_comm_free(c);
}

void rt_comms_free(RtComms *cs) {
  if (!cs) return;
  flush();
  for (int a = 0; a < RT_AXIS_COUNT; a++) drop_twin(cs->axis[a]);
  rt_mpi_comms_free(cs);
}

/* ---- Where the buffers are ------------------------------------------------------ */

static Nccl *twin(const RtComm *c) {
  for (int i = 0; i < nc.ncomms; i++)
    if (nc.comms[i].comm == c) return &nc.comms[i];
  return NULL;
}

static int on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (!p || nc.no_device || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* The NCCL twin when the operation runs on NCCL: every buffer on the
 * device. */
static Nccl *nccl_for(RtComm *c, const void *a, const void *b) {
  Nccl *n = c ? twin(c) : NULL;
  return n && on_device(a) && on_device(b) ? n : NULL;
}

/* bf16 sums and maxima are NCCL's: fp32 arithmetic inside, rounded to
 * bf16 at each step of its ring (the MPI path rounds once; the two agree
 * within bf16's rounding, not to the bit). */
static ncclDataType_t nccl_type(RtCommType t) {
  switch (t) {
  case RT_COMM_F64: return ncclFloat64;
  case RT_COMM_I32: return ncclInt32;
  case RT_COMM_BF16: return ncclBfloat16;
  default: return ncclFloat32;
  }
}

static ncclRedOp_t nccl_op(RtCommOp op) { return op == RT_COMM_MAX ? ncclMax : ncclSum; }

/* ---- Issuing on the stream ------------------------------------------------------ */

static RtCommReq *req_of(const char *what, const RtComm *c) {
  RtCommReq *r = rt_xcalloc(1, sizeof *r);
  r->what = what;
  r->comm = c->name;
  return r;
}

/* n's stream waits for the compute stream's work so far. */
static void after_compute(const Nccl *n) {
  CUDA_CHECK(cudaEventRecord(nc.ready, k_cuda_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(n->stream, nc.ready, 0));
}

static void mark_done(RtCommReq *r, const Nccl *n) {
  CUDA_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(r->done, n->stream));
  r->pending = 0;
}

/* The kept sends and receives (all on one communicator), as one group in
 * posting order. */
static void flush(void) {
  if (nc.np2p == 0) return;
  Nccl *n = nc.p2p[0].n;
  after_compute(n);
  NCCL_CHECK(NULL, ncclGroupStart());
  for (int i = 0; i < nc.np2p; i++) {
    P2p *m = &nc.p2p[i];
    if (m->send) NCCL_CHECK(n, ncclSend(m->buf, m->count, m->type, m->peer, n->nc, n->stream));
    else NCCL_CHECK(n, ncclRecv(m->buf, m->count, m->type, m->peer, n->nc, n->stream));
  }
  NCCL_WAITING(n, "ncclGroupEnd", ncclGroupEnd());
  for (int i = 0; i < nc.np2p; i++) mark_done(nc.p2p[i].req, n);
  nc.np2p = 0;
}

static void req_free(RtCommReq *r) {
  if (r->done) CUDA_CHECK(cudaEventDestroy(r->done));
  free(r);
}

/* 1 once r's event has passed; checks the communicators meanwhile. */
static int passed(RtCommReq *r) {
  if (r->pending) flush();
  cudaError_t e = cudaEventQuery(r->done);
  if (e == cudaSuccess) return 1;
  if (e != cudaErrorNotReady) CUDA_CHECK(e);
  poll_async();
  return 0;
}

/* The compute stream waits for r's operation; the host does not. The
 * event may be destroyed once the wait is queued (CUDA keeps what a
 * queued wait needs). Asynchronous errors are still polled, as any
 * other call of this backend does, without waiting. */
static void wait_nccl(RtCommReq *r) {
  if (r->pending) flush();
  CUDA_CHECK(cudaStreamWaitEvent(k_cuda_stream(), r->done, 0));
  poll_async();
  req_free(r);
}

/* Completes (blocking form, returns NULL) or hands back the request. */
static RtCommReq *issued(RtCommReq *r, const Nccl *n, int nb) {
  mark_done(r, n);
  if (nb) return r;
  wait_nccl(r);
  return NULL;
}

/* A non-blocking MPI operation, on the host views a and b (either may be
 * NULL): staged copies stay with the request, so that the operation stays
 * non-blocking (an irecv posted before the matching isend on both sides
 * must not wait), and go back to the device when it completes. */
static RtCommReq *wrap_mpi(MpiReq *m, const RtComm *c, const Staged *a, int back_a,
                           const Staged *b, int back_b) {
  RtCommReq *r = req_of("MPI", c);
  r->mpi = m;
  if (a) r->keep[0] = *a, r->back[0] = back_a;
  if (b) r->keep[1] = *b, r->back[1] = back_b;
  return r;
}

/* ---- Host staging ------------------------------------------------------------------ */

static Staged stage(const void *p, size_t bytes, const Staged *in) {
  Staged s = {p, (char *)p, bytes, 0};
  if (in && in->copy && (const char *)p >= in->dev && (const char *)p < in->dev + in->bytes) {
    s.host = in->host + ((const char *)p - in->dev);
    return s;
  }
  if (!bytes || !on_device(p)) return s;
  s.copy = 1;
  s.host = rt_xmalloc(bytes);
  CUDA_CHECK(cudaMemcpyAsync(s.host, p, bytes, cudaMemcpyDeviceToHost, k_cuda_stream()));
  CUDA_CHECK(cudaStreamSynchronize(k_cuda_stream()));
  return s;
}

/* The staged copy back into device memory (when `back`), then freed. */
static void unstage(Staged *s, int back) {
  if (!s->copy) return;
  if (back) {
    CUDA_CHECK(cudaMemcpyAsync((void *)s->dev, s->host, s->bytes, cudaMemcpyHostToDevice,
                               k_cuda_stream()));
    CUDA_CHECK(cudaStreamSynchronize(k_cuda_stream()));
  }
  free(s->host);
  s->copy = 0;
}

static size_t nbytes(int64_t count, RtCommType t) {
  return count > 0 ? (size_t)count * (size_t)rt_comm_type_size(t) : 0;
}

/* ---- Collectives ------------------------------------------------------------------- */

/* Each is written once, as in mpi_core.c: with nb the non-blocking form.
 * On NCCL the checks are the MPI backend's, then the call; over MPI the
 * non-blocking form stays non-blocking, staged or not (wrap_mpi). */

static RtCommReq *nc_allreduce(RtComm *c, const void *send, void *recv, int64_t count,
                               RtCommType type, RtCommOp op, int nb) {
  const char *fn = nb ? "rt_comm_iallreduce" : "rt_comm_allreduce";
  flush();
  Nccl *n = nccl_for(c, send, recv);
  size_t bytes = nbytes(count, type);
  if (!n) {
    Staged r = stage(recv, bytes, NULL), s = stage(send, bytes, &r);
    if (nb) return wrap_mpi(rt_mpi_iallreduce(c, s.host, r.host, count, type, op), c, &s, 0, &r, 1);
    rt_mpi_allreduce(c, s.host, r.host, count, type, op);
    unstage(&s, 0), unstage(&r, 1);
    return NULL;
  }
  rt_mpi_check_count(c, fn, count);
  if (send != recv) rt_mpi_check_disjoint(c, fn, send, bytes, recv, bytes);
  rt_mpi_count_bytes(c, RT_COMM_ALLREDUCE, count, type);
  after_compute(n);
  RtCommReq *r = req_of("ncclAllReduce", c);
  NCCL_WAITING(n, "ncclAllReduce",
               ncclAllReduce(send, recv, (size_t)count, nccl_type(type), nccl_op(op), n->nc,
                             n->stream));
  return issued(r, n, nb);
}

static RtCommReq *nc_allgather(RtComm *c, const void *send, void *recv, int64_t count,
                               RtCommType type, int nb) {
  const char *fn = nb ? "rt_comm_iallgather" : "rt_comm_allgather";
  flush();
  Nccl *n = nccl_for(c, send, recv);
  size_t part = nbytes(count, type);
  if (!n) {
    Staged r = stage(recv, part * (size_t)c->size, NULL), s = stage(send, part, &r);
    if (nb) return wrap_mpi(rt_mpi_iallgather(c, s.host, r.host, count, type), c, &s, 0, &r, 1);
    rt_mpi_allgather(c, s.host, r.host, count, type);
    unstage(&s, 0), unstage(&r, 1);
    return NULL;
  }
  rt_mpi_check_count(c, fn, count);
  if (send != (const char *)recv + part * (size_t)c->rank)
    rt_mpi_check_disjoint(c, fn, send, part, recv, part * (size_t)c->size);
  rt_mpi_count_bytes(c, RT_COMM_ALLGATHER, count, type);
  after_compute(n);
  RtCommReq *r = req_of("ncclAllGather", c);
  NCCL_WAITING(n, "ncclAllGather",
               ncclAllGather(send, recv, (size_t)count, nccl_type(type), n->nc, n->stream));
  return issued(r, n, nb);
}

static RtCommReq *nc_reduce_scatter(RtComm *c, const void *send, void *recv, int64_t count,
                                    RtCommType type, RtCommOp op, int nb) {
  const char *fn = nb ? "rt_comm_ireduce_scatter" : "rt_comm_reduce_scatter";
  flush();
  Nccl *n = nccl_for(c, send, recv);
  size_t part = nbytes(count, type);
  if (!n) {
    Staged s = stage(send, part * (size_t)c->size, NULL), r = stage(recv, part, &s);
    /* In place, the result is inside the send buffer's copy. */
    int inside = r.host != recv && !r.copy;
    if (nb)
      return wrap_mpi(rt_mpi_ireduce_scatter(c, s.host, r.host, count, type, op), c, &r, 1, &s,
                      inside);
    rt_mpi_reduce_scatter(c, s.host, r.host, count, type, op);
    unstage(&r, 1), unstage(&s, inside);
    return NULL;
  }
  rt_mpi_check_count(c, fn, count);
  if (recv != (const char *)send + part * (size_t)c->rank)
    rt_mpi_check_disjoint(c, fn, send, part * (size_t)c->size, recv, part);
  rt_mpi_count_bytes(c, RT_COMM_REDUCE_SCATTER, count, type);
  after_compute(n);
  RtCommReq *r = req_of("ncclReduceScatter", c);
  NCCL_WAITING(n, "ncclReduceScatter",
               ncclReduceScatter(send, recv, (size_t)count, nccl_type(type), nccl_op(op), n->nc,
                                 n->stream));
  return issued(r, n, nb);
}

static RtCommReq *nc_broadcast(RtComm *c, void *buf, int64_t count, RtCommType type, int root,
                               int nb) {
  const char *fn = nb ? "rt_comm_ibroadcast" : "rt_comm_broadcast";
  flush();
  Nccl *n = nccl_for(c, buf, buf);
  if (!n) {
    Staged b = stage(buf, nbytes(count, type), NULL);
    if (nb) return wrap_mpi(rt_mpi_ibroadcast(c, b.host, count, type, root), c, &b, 1, NULL, 0);
    rt_mpi_broadcast(c, b.host, count, type, root);
    unstage(&b, 1);
    return NULL;
  }
  rt_mpi_check_count(c, fn, count);
  rt_mpi_check_rank(c, fn, "root", root);
  rt_mpi_count_bytes(c, RT_COMM_BROADCAST, count, type);
  after_compute(n);
  RtCommReq *r = req_of("ncclBroadcast", c);
  NCCL_WAITING(n, "ncclBroadcast",
               ncclBroadcast(buf, buf, (size_t)count, nccl_type(type), root, n->nc, n->stream));
  return issued(r, n, nb);
}

/* A send or receive: kept for the next group on NCCL (see the top). */
static RtCommReq *nc_p2p(RtComm *c, void *buf, int64_t count, RtCommType type, int peer, int send,
                         int nb) {
  const char *fn = send ? (nb ? "rt_comm_isend" : "rt_comm_send")
                        : (nb ? "rt_comm_irecv" : "rt_comm_recv");
  Nccl *n = nccl_for(c, buf, buf);
  if (!n) {
    flush();
    Staged b = stage(buf, nbytes(count, type), NULL);
    if (nb)
      return wrap_mpi(send ? rt_mpi_isend(c, b.host, count, type, peer)
                           : rt_mpi_irecv(c, b.host, count, type, peer), c, &b, !send, NULL, 0);
    if (send) rt_mpi_send(c, b.host, count, type, peer);
    else rt_mpi_recv(c, b.host, count, type, peer);
    unstage(&b, !send);
    return NULL;
  }
  rt_mpi_check_count(c, fn, count);
  rt_mpi_check_rank(c, fn, "peer", peer);
  rt_mpi_count_bytes(c, send ? RT_COMM_SEND : RT_COMM_RECV, count, type);
  if (nc.np2p > 0 && nc.p2p[0].n != n) flush(); /* a group is one communicator's */
  if (nc.np2p == nc.p2p_cap) {
    nc.p2p_cap = nc.p2p_cap ? 2 * nc.p2p_cap : 16;
    nc.p2p = realloc(nc.p2p, sizeof *nc.p2p * (size_t)nc.p2p_cap);
    if (!nc.p2p) rt_comm_fatal("out of memory keeping %d messages", nc.p2p_cap);
  }
  RtCommReq *r = req_of(send ? "ncclSend" : "ncclRecv", c);
  r->pending = 1;
  nc.p2p[nc.np2p++] = (P2p){send, buf, (size_t)count, nccl_type(type), peer, n, r};
  if (nb) return r;
  wait_nccl(r);
  return NULL;
}

static RtCommReq *nc_barrier(RtComm *c, int nb) {
  flush();
  if (nb) return wrap_mpi(rt_mpi_ibarrier(c), c, NULL, 0, NULL, 0);
  rt_mpi_barrier(c);
  return NULL;
}

/* NCCL has no all-to-all of its own: it is one group of a send and a
 * receive per peer with a part (the rank's own part included, which NCCL
 * copies), as NCCL's documentation writes it. The counts are host memory
 * and checked against the peers' over MPI first (rt_mpi_check_alltoallv),
 * since NCCL would hang on a mismatch rather than report it. */
static void nc_alltoallv(RtComm *c, const void *send, const int64_t *sc, void *recv,
                         const int64_t *rc, RtCommType type) {
  const char *fn = "rt_comm_alltoallv";
  flush();
  Nccl *n = nccl_for(c, send, recv);
  if (!n) {
    /* The sizes to stage; rt_mpi_alltoallv checks the counts themselves. */
    int64_t ns = 0, nr = 0;
    for (int p = 0; sc && rc && p < c->size; p++)
      ns += sc[p] > 0 ? sc[p] : 0, nr += rc[p] > 0 ? rc[p] : 0;
    Staged s = stage(send, nbytes(ns, type), NULL), r = stage(recv, nbytes(nr, type), NULL);
    rt_mpi_alltoallv(c, s.host, sc, r.host, rc, type);
    unstage(&s, 0), unstage(&r, 1);
    return;
  }
  int64_t nr;
  rt_mpi_check_alltoallv(c, fn, send, sc, recv, rc, type, &nr);
  size_t esz = (size_t)rt_comm_type_size(type);
  after_compute(n);
  RtCommReq *q = req_of("ncclGroupEnd", c);
  NCCL_CHECK(n, ncclGroupStart());
  for (int p = 0, so = 0, ro = 0; p < c->size; so += (int)sc[p], ro += (int)rc[p], p++) {
    if (sc[p])
      NCCL_CHECK(n, ncclSend((const char *)send + (size_t)so * esz, (size_t)sc[p], nccl_type(type),
                             p, n->nc, n->stream));
    if (rc[p])
      NCCL_CHECK(n, ncclRecv((char *)recv + (size_t)ro * esz, (size_t)rc[p], nccl_type(type), p,
                             n->nc, n->stream));
  }
  NCCL_WAITING(n, "ncclGroupEnd", ncclGroupEnd());
  issued(q, n, 0);
}

/* Equal parts: the alltoallv whose counts are all `count` (the bytes are
 * the same by abi/comm.h's rules, (n - 1) * S). */
static void nc_alltoall(RtComm *c, const void *send, void *recv, int64_t count,
                        RtCommType type) {
  int64_t *k = rt_xmalloc(sizeof(int64_t) * (size_t)c->size);
  for (int r = 0; r < c->size; r++) k[r] = count;
  nc_alltoallv(c, send, k, recv, k, type);
  free(k);
}

void rt_comm_allreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t, RtCommOp op) {
  nc_allreduce(c, s, r, n, t, op, 0);
}
void rt_comm_allgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  nc_allgather(c, s, r, n, t, 0);
}
void rt_comm_reduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                            RtCommOp op) {
  nc_reduce_scatter(c, s, r, n, t, op, 0);
}
void rt_comm_broadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root) {
  nc_broadcast(c, b, n, t, root, 0);
}
void rt_comm_send(RtComm *c, const void *b, int64_t n, RtCommType t, int peer) {
  nc_p2p(c, (void *)b, n, t, peer, 1, 0);
}
void rt_comm_recv(RtComm *c, void *b, int64_t n, RtCommType t, int peer) {
  nc_p2p(c, b, n, t, peer, 0, 0);
}
void rt_comm_barrier(RtComm *c) { nc_barrier(c, 0); }
void rt_comm_alltoall(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  nc_alltoall(c, s, r, n, t);
}
void rt_comm_alltoallv(RtComm *c, const void *s, const int64_t *sc, void *r, const int64_t *rc,
                       RtCommType t) {
  nc_alltoallv(c, s, sc, r, rc, t);
}

RtCommReq *rt_comm_iallreduce(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                              RtCommOp op) {
  return nc_allreduce(c, s, r, n, t, op, 1);
}
RtCommReq *rt_comm_iallgather(RtComm *c, const void *s, void *r, int64_t n, RtCommType t) {
  return nc_allgather(c, s, r, n, t, 1);
}
RtCommReq *rt_comm_ireduce_scatter(RtComm *c, const void *s, void *r, int64_t n, RtCommType t,
                                   RtCommOp op) {
  return nc_reduce_scatter(c, s, r, n, t, op, 1);
}
RtCommReq *rt_comm_ibroadcast(RtComm *c, void *b, int64_t n, RtCommType t, int root) {
  return nc_broadcast(c, b, n, t, root, 1);
}
RtCommReq *rt_comm_isend(RtComm *c, const void *b, int64_t n, RtCommType t, int peer) {
  return nc_p2p(c, (void *)b, n, t, peer, 1, 1);
}
RtCommReq *rt_comm_irecv(RtComm *c, void *b, int64_t n, RtCommType t, int peer) {
  return nc_p2p(c, b, n, t, peer, 0, 1);
}
RtCommReq *rt_comm_ibarrier(RtComm *c) { return nc_barrier(c, 1); }

/* ---- Completion ----------------------------------------------------------------------- */

/* An MPI request has completed: its staged results go to the device. */
static void mpi_done(RtCommReq *r) {
  for (int i = 0; i < 2; i++) unstage(&r->keep[i], r->back[i]);
  free(r);
}

void rt_comm_wait(RtCommReq *r) {
  if (!r) rt_comm_fatal("rt_comm_wait: no request (NULL)");
  if (r->mpi) {
    flush();
    rt_mpi_wait(r->mpi);
    mpi_done(r);
  } else if (r->done || r->pending) {
    wait_nccl(r);
  } else {
    req_free(r);
  }
}

void rt_comm_waitall(RtCommReq **reqs, int n) {
  for (int i = 0; i < n; i++)
    if (reqs[i]) rt_comm_wait(reqs[i]), reqs[i] = NULL;
}

int rt_comm_test(RtCommReq *r) {
  if (!r) rt_comm_fatal("rt_comm_test: no request (NULL)");
  if (r->mpi) {
    flush();
    if (!rt_mpi_test(r->mpi)) return 0;
    mpi_done(r);
    return 1;
  }
  if ((r->done || r->pending) && !passed(r)) return 0;
  req_free(r);
  return 1;
}
