/* NCCL over MPI, for the CPU emulator of tests/features/emu (include/nccl.h is the
 * API): what lets runtime/comm_nccl.c run, for real, on machines without a
 * GPU. Buffers are the emulator's device memory, which is host memory, so
 * the messages go straight from and to them.
 *
 * Communicators. An ncclUniqueId carries the world rank of the process
 * that made it, a number of its own (the tag of its bootstrap) and a
 * random nonce. In ncclCommInitRank each member sends the maker its
 * (NCCL rank, world rank) and the maker, which must be a member, sends
 * everyone the table; the members then build an MPI communicator of their
 * own with MPI_Comm_create_group, which involves them alone. Nothing
 * here is collective over MPI_COMM_WORLD, since communicators are made for
 * subsets of the ranks, in an order that differs between ranks. A private
 * MPI communicator keeps the messages of one NCCL communicator from those
 * of every other and from the program's own MPI traffic. ncclCommSplit is
 * MPI_Comm_split of the parent's own MPI communicator, which orders the
 * members of a color by key, then by their rank in the parent, as NCCL.
 *
 * Operations. Every operation is a small state machine of non-blocking
 * MPI requests. Outside a group it runs to completion before the call
 * returns: the emulator's streams do their work when it is enqueued, so
 * the result must be there once the call returns. Between ncclGroupStart
 * and ncclGroupEnd operations are only recorded; ncclGroupEnd posts all
 * of them and progresses them together until every one has completed, so
 * a send and a receive to the same peer in one group cannot deadlock, and
 * neither can collectives of several communicators in one group, posted
 * in different orders on different ranks.
 *
 * Order. A reduction goes to one rank (rank 0, or the root of ncclReduce),
 * which folds the contributions in rank order, x0 op x1 op x2 ..., one
 * element at a time, and sends the result back (all-reduce) or each rank
 * its block (reduce-scatter, block r of the rank-major buffer to rank r).
 * The result is therefore the same bits on every rank and in every run,
 * whatever the timing. bf16 is added in fp32 and rounded to bf16 once, at
 * the end, which is comm.h's rule for its bf16 reductions (and the MPI
 * backend's); NCCL's ring rounds at every hop instead, in ring order, so a
 * GPU's bf16 sums of three ranks or more may differ from these in the last
 * bit. ncclAvg is the sum divided by the number of ranks. Sends and receives between two ranks
 * match in posting order (one tag), as NCCL's do; collectives carry a
 * per-communicator sequence number in their tag.
 *
 * Differences from NCCL, on purpose or for want of need: a received
 * message of the wrong length is an error (ncclInvalidUsage), where NCCL
 * cannot tell; fp16 and fp8 move but do not reduce (ncclInvalidArgument);
 * ncclCommInitRank inside a group runs at once; the stream argument is
 * not used (see above). ncclCommAbort tells the other members, without
 * waiting for them, and a member waiting in an operation of that
 * communicator then fails it with ncclRemoteError, which
 * ncclCommGetAsyncError reports from then on. */
#include <limits.h>
#include <mpi.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Messages longer than this go in pieces (MPI counts are ints); the test
 * builds a copy with tiny pieces so that the splitting is exercised. */
#ifndef NCCL_EMU_PIECE
#define NCCL_EMU_PIECE ((size_t)1 << 30)
#endif

enum {
  TAG_BOOT = 1 << 20, /* + the maker's id number, on MPI_COMM_WORLD; the next span
                         for MPI_Comm_create_group */
  TAG_BOOT_SPAN = 1 << 16,
  TAG_P2P = 1, /* on a communicator's own MPI communicator */
  TAG_ABORT = 2,
  TAG_COLL = 16, /* + the sequence number, modulo span */
};

#define ID_MAGIC 0x4e43434c454d5531ull /* "NCCLEMU1" */

typedef struct Id {
  uint64_t magic, nonce;
  int32_t maker;  /* world rank */
  uint32_t number;
} Id;

struct ncclComm {
  MPI_Comm mc;
  int rank, nranks;
  int *world; /* world rank of each rank */
  unsigned long seq; /* collectives posted */
  ncclResult_t async;
  char last[512];
};

/* What a collective or message does. */
typedef enum { K_ALLREDUCE, K_REDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_SEND, K_RECV } Kind;
static const char *const kind_name[] = {"ncclAllReduce", "ncclReduce", "ncclReduceScatter",
                                        "ncclAllGather", "ncclBroadcast", "ncclSend", "ncclRecv"};

typedef struct Op {
  Kind kind;
  ncclComm_t c;
  const char *send;
  char *recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root; /* the root or the peer */
  cudaStream_t stream;
  int tag;
  int phase; /* 0 posted first, 1 second round, 2 done */
  MPI_Request *req;
  size_t *want; /* bytes each receive must get; SIZE_MAX for sends */
  int nreq, capreq;
  char *tmp;
} Op;

static struct {
  int depth; /* of ncclGroupStart */
  Op *ops;
  int nops, capops;
  uint32_t ids; /* made by this process */
  int tag_span;
  long long nops_run, ngroups; /* for the tests: shard_nccl_emu_ops */
  int stats, me;
  char last[512];
  char algo[64], proto[64]; /* NCCL_ALGO and NCCL_PROTO at the first ncclCommInitRank */
} st;

/* ---- Errors ---------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static ncclResult_t fail(ncclComm_t c, ncclResult_t r,
                                                                const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st.last, sizeof st.last, fmt, ap);
  va_end(ap);
  if (c) snprintf(c->last, sizeof c->last, "%s", st.last);
  return r;
}

static ncclResult_t mpi_failed(ncclComm_t c, int err, const char *what) {
  char msg[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) len = snprintf(msg, sizeof msg, "%d", err);
  msg[len < 0 ? 0 : len > MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING : len] = 0;
  return fail(c, ncclSystemError, "%s failed: %s", what, msg);
}

#define MPI_TRY(c, call)                                                                           \
  do {                                                                                             \
    int err_ = (call);                                                                             \
    if (err_ != MPI_SUCCESS) return mpi_failed((c), err_, #call);                                  \
  } while (0)

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t c) { return c ? c->last : st.last; }

ncclResult_t ncclGetVersion(int *version) {
  if (!version) return fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

/* ---- Communicators ----------------------------------------------------------- */

static ncclResult_t need_mpi(const char *fn) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized)
    return fail(NULL, ncclInvalidUsage, "%s: the emulation needs MPI initialised", fn);
  if (!st.tag_span) {
    void *ub = NULL;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    long top = flag && ub ? (long)*(int *)ub : 32767;
    if (top < TAG_BOOT + 2 * TAG_BOOT_SPAN)
      return fail(NULL, ncclSystemError, "%s: MPI's largest tag %ld is too small", fn, top);
    st.tag_span = (int)(top - TAG_COLL < (1 << 24) ? top - TAG_COLL : (1 << 24));
  }
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *out) {
  ncclResult_t r = need_mpi("ncclGetUniqueId");
  if (r != ncclSuccess) return r;
  if (!out) return fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  Id id = {ID_MAGIC, 0, 0, st.ids++};
  MPI_Comm_rank(MPI_COMM_WORLD, &id.maker);
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  id.nonce = ((uint64_t)t.tv_sec * 1000000007ull) ^ (uint64_t)t.tv_nsec ^
             ((uint64_t)getpid() << 32) ^ ((uint64_t)id.number << 48);
  memset(out, 0, sizeof *out);
  memcpy(out->internal, &id, sizeof id);
  return ncclSuccess;
}

/* Waits for n requests, without spinning a core away from the others. */
static int wait_reqs(MPI_Request *req, int n, MPI_Status *sts) {
  const struct timespec pause = {0, 20000};
  for (;;) {
    int done = 0, err = MPI_Testall(n, req, &done, sts ? sts : MPI_STATUSES_IGNORE);
    if (err != MPI_SUCCESS || done) return err;
    nanosleep(&pause, NULL);
  }
}

/* The maker's half of the bootstrap: every member's (rank, world rank),
 * then the table to each. */
static ncclResult_t boot_maker(ncclComm_t c, const Id *id, int tag) {
  int me = c->world[c->rank];
  for (int r = 0; r < c->nranks; r++) c->world[r] = r == c->rank ? me : -1;
  for (int k = 1; k < c->nranks; k++) {
    uint64_t msg[4];
    MPI_Request q;
    MPI_TRY(c, MPI_Irecv(msg, 4, MPI_UINT64_T, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &q));
    MPI_TRY(c, wait_reqs(&q, 1, NULL));
    int r = (int)msg[1];
    if (msg[0] != id->nonce || (int)msg[2] != c->nranks || r < 0 || r >= c->nranks ||
        c->world[r] != -1)
      return fail(c, ncclInvalidUsage,
                  "ncclCommInitRank: world rank %d joined as rank %d of %d, which does not fit "
                  "this communicator of %d ranks (another id, or a rank given twice)",
                  (int)msg[3], r, (int)msg[2], c->nranks);
    c->world[r] = (int)msg[3];
  }
  for (int r = 0; r < c->nranks; r++) {
    if (r == c->rank) continue;
    MPI_Request q;
    MPI_TRY(c, MPI_Isend(c->world, c->nranks, MPI_INT, c->world[r], tag, MPI_COMM_WORLD, &q));
    MPI_TRY(c, wait_reqs(&q, 1, NULL));
  }
  return ncclSuccess;
}

static ncclResult_t boot_member(ncclComm_t c, const Id *id, int tag) {
  uint64_t msg[4] = {id->nonce, (uint64_t)c->rank, (uint64_t)c->nranks,
                     (uint64_t)c->world[c->rank]};
  MPI_Request q[2];
  MPI_TRY(c, MPI_Isend(msg, 4, MPI_UINT64_T, id->maker, tag, MPI_COMM_WORLD, &q[0]));
  MPI_TRY(c, MPI_Irecv(c->world, c->nranks, MPI_INT, id->maker, tag, MPI_COMM_WORLD, &q[1]));
  MPI_TRY(c, wait_reqs(q, 2, NULL));
  return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t c, const Id *id) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  c->world[c->rank] = me;
  int tag = TAG_BOOT + (int)(id->number % TAG_BOOT_SPAN);
  ncclResult_t r = me == id->maker ? boot_maker(c, id, tag) : boot_member(c, id, tag);
  if (r != ncclSuccess) return r;
  MPI_Group all, mine;
  MPI_TRY(c, MPI_Comm_group(MPI_COMM_WORLD, &all));
  MPI_TRY(c, MPI_Group_incl(all, c->nranks, c->world, &mine));
  /* A tag of its own: the maker's last tables may still be on their way. */
  MPI_TRY(c, MPI_Comm_create_group(MPI_COMM_WORLD, mine, tag + TAG_BOOT_SPAN, &c->mc));
  MPI_Group_free(&mine);
  MPI_Group_free(&all);
  MPI_TRY(c, MPI_Comm_set_errhandler(c->mc, MPI_ERRORS_RETURN));
  return ncclSuccess;
}

/* With SHARD_NCCL_EMU_STATS set, each process says at its end what went
 * through the emulation, so that a test can tell it was used at all, and
 * which algorithm and protocol a real NCCL would have been told to use
 * (the environment it saw when the first communicator was made: where
 * comm_nccl.c pins them under --deterministic). */
static void print_stats(void) {
  fprintf(stderr, "nccl emulation: world rank %d: %lld operations, %lld groups, NCCL_ALGO=%s "
          "NCCL_PROTO=%s\n", st.me, st.nops_run, st.ngroups, st.algo, st.proto);
}

static void seen_env(char *out, size_t len, const char *name) {
  const char *v = getenv(name);
  snprintf(out, len, "%s", v && *v ? v : "(unset)");
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  ncclResult_t r = need_mpi("ncclCommInitRank");
  if (r != ncclSuccess) return r;
  if (!st.stats && getenv("SHARD_NCCL_EMU_STATS")) {
    MPI_Comm_rank(MPI_COMM_WORLD, &st.me);
    st.stats = 1;
    seen_env(st.algo, sizeof st.algo, "NCCL_ALGO");
    seen_env(st.proto, sizeof st.proto, "NCCL_PROTO");
    atexit(print_stats);
  }
  Id id;
  memcpy(&id, commId.internal, sizeof id);
  if (!comm) return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  if (id.magic != ID_MAGIC)
    return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: not an id of ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: rank %d of %d ranks", rank, nranks);
  ncclComm_t c = calloc(1, sizeof *c);
  if (c) c->world = calloc((size_t)nranks, sizeof *c->world);
  if (!c || !c->world) {
    free(c);
    return fail(NULL, ncclSystemError, "ncclCommInitRank: out of memory");
  }
  c->rank = rank;
  c->nranks = nranks;
  c->mc = MPI_COMM_NULL;
  r = init_rank(c, &id);
  if (r != ncclSuccess) {
    free(c->world);
    free(c);
    return r;
  }
  *comm = c;
  return ncclSuccess;
}

/* Collective over c (outside a group: the emulation runs it at once);
 * NCCL_SPLIT_NOCOLOR gives no communicator (*newcomm NULL). The
 * configuration is the parent's, whatever config says. */
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
  (void)config;
  if (!c || !newcomm) return fail(c, ncclInvalidArgument, "ncclCommSplit: NULL argument");
  if (c->mc == MPI_COMM_NULL) return fail(c, ncclInvalidUsage, "ncclCommSplit: comm is not initialised");
  if (color < NCCL_SPLIT_NOCOLOR)
    return fail(c, ncclInvalidArgument, "ncclCommSplit: color %d is negative", color);
  if (st.depth) return fail(c, ncclInvalidUsage, "ncclCommSplit inside a group: the emulation cannot");
  *newcomm = NULL;
  MPI_Comm mc;
  MPI_TRY(c, MPI_Comm_split(c->mc, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mc));
  if (mc == MPI_COMM_NULL) return ncclSuccess;
  ncclComm_t n = calloc(1, sizeof *n);
  int size = 0;
  MPI_Comm_size(mc, &size);
  if (n) n->world = calloc((size_t)size, sizeof *n->world);
  if (!n || !n->world) {
    free(n);
    MPI_Comm_free(&mc);
    return fail(c, ncclSystemError, "ncclCommSplit: out of memory");
  }
  n->mc = mc;
  n->nranks = size;
  MPI_Comm_rank(mc, &n->rank);
  MPI_TRY(c, MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN));
  MPI_TRY(c, MPI_Allgather(&c->world[c->rank], 1, MPI_INT, n->world, 1, MPI_INT, mc));
  *newcomm = n;
  return ncclSuccess;
}

static void comm_free(ncclComm_t c) {
  free(c->world);
  free(c);
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return fail(NULL, ncclInvalidArgument, "ncclCommDestroy: comm is NULL");
  if (c->mc != MPI_COMM_NULL) MPI_TRY(c, MPI_Comm_free(&c->mc));
  comm_free(c);
  return ncclSuccess;
}

/* Tells every other member, never waiting for one (a dead peer must not
 * hold this rank up); the MPI communicator is left to the end of the
 * process, since freeing it could wait on messages in flight. */
ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclSuccess;
  static int32_t note; /* sent from here, never changed */
  for (int r = 0; r < c->nranks; r++) {
    MPI_Request q;
    if (r != c->rank && MPI_Isend(&note, 1, MPI_INT32_T, r, TAG_ABORT, c->mc, &q) == MPI_SUCCESS)
      MPI_Request_free(&q);
  }
  comm_free(c);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *out) {
  if (!c || !out) return fail(c, ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
  *out = c->async;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *count) {
  if (!c || !count) return fail(c, ncclInvalidArgument, "ncclCommCount: NULL argument");
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
  if (!c || !rank) return fail(c, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
  *rank = c->rank;
  return ncclSuccess;
}

/* ---- Element types and reductions ----------------------------------------------- */

static size_t type_size(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 0;
  }
}

static float bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Round to nearest, ties to even; a NaN stays a (quiet) NaN. */
static uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* a op b for the arithmetic types; sums and products of integers wrap
 * (done unsigned), as NCCL's do. */
#define COMBINE(T, U, a, b, op)                                                                    \
  ((op) == ncclMax   ? ((a) > (b) ? (a) : (b))                                                    \
   : (op) == ncclMin ? ((a) < (b) ? (a) : (b))                                                    \
   : (op) == ncclProd ? (T)((U)(a) * (U)(b))                                                      \
                      : (T)((U)(a) + (U)(b)))

#define FOLD(T, U)                                                                                 \
  for (size_t i = 0; i < n; i++) {                                                                 \
    T a = ((const T *)in[0])[i];                                                                   \
    for (int r = 1; r < k; r++) a = COMBINE(T, U, a, ((const T *)in[r])[i], op);                  \
    if (op == ncclAvg) a = (T)(a / (T)k);                                                          \
    ((T *)out)[i] = a;                                                                             \
  }

/* out[i] = in[0][i] op in[1][i] op ... op in[k-1][i], left to right. out
 * may be one of the inputs: each element is read before it is written. */
static void fold(void *out, const void *const *in, int k, size_t n, ncclDataType_t t,
                 ncclRedOp_t op) {
  switch (t) {
  case ncclInt8: FOLD(int8_t, uint8_t) break;
  case ncclUint8: FOLD(uint8_t, uint8_t) break;
  case ncclInt32: FOLD(int32_t, uint32_t) break;
  case ncclUint32: FOLD(uint32_t, uint32_t) break;
  case ncclInt64: FOLD(int64_t, uint64_t) break;
  case ncclUint64: FOLD(uint64_t, uint64_t) break;
  case ncclFloat32: FOLD(float, float) break;
  case ncclFloat64: FOLD(double, double) break;
  case ncclBfloat16:
    for (size_t i = 0; i < n; i++) {
      float a = bf16_to_float(((const uint16_t *)in[0])[i]);
      for (int r = 1; r < k; r++) {
        float b = bf16_to_float(((const uint16_t *)in[r])[i]);
        a = COMBINE(float, float, a, b, op);
      }
      if (op == ncclAvg) a /= (float)k;
      ((uint16_t *)out)[i] = float_to_bf16(a);
    }
    break;
  default: break;
  }
}

/* ---- Operations ------------------------------------------------------------------ */

static ncclResult_t add_req(Op *o, size_t want) {
  if (o->nreq == o->capreq) {
    int cap = o->capreq ? 2 * o->capreq : 8;
    MPI_Request *q = realloc(o->req, sizeof *q * (size_t)cap);
    if (q) o->req = q;
    size_t *w = q ? realloc(o->want, sizeof *w * (size_t)cap) : NULL;
    if (w) o->want = w;
    if (!q || !w) return fail(o->c, ncclSystemError, "%s: out of memory", kind_name[o->kind]);
    o->capreq = cap;
  }
  o->want[o->nreq] = want;
  o->req[o->nreq++] = MPI_REQUEST_NULL;
  return ncclSuccess;
}

/* A message of any length, in pieces of at most NCCL_EMU_PIECE bytes;
 * both sides cut the same length the same way. */
static ncclResult_t post(Op *o, int send, const void *buf, size_t bytes, int peer, int tag) {
  size_t off = 0;
  do {
    size_t n = bytes - off < NCCL_EMU_PIECE ? bytes - off : NCCL_EMU_PIECE;
    ncclResult_t r = add_req(o, send ? SIZE_MAX : n);
    if (r != ncclSuccess) return r;
    MPI_Request *q = &o->req[o->nreq - 1];
    char *p = (char *)buf + off;
    if (send) MPI_TRY(o->c, MPI_Isend(p, (int)n, MPI_BYTE, peer, tag, o->c->mc, q));
    else MPI_TRY(o->c, MPI_Irecv(p, (int)n, MPI_BYTE, peer, tag, o->c->mc, q));
    off += n;
  } while (off < bytes);
  return ncclSuccess;
}

static size_t op_bytes(const Op *o) { return o->count * type_size(o->type); }

/* The length of what the root gathers: everyone's whole send buffer. */
static size_t gathered(const Op *o) {
  return op_bytes(o) * (o->kind == K_REDUCE_SCATTER ? (size_t)o->c->nranks : 1);
}

static ncclResult_t start_reduction(Op *o) {
  ncclComm_t c = o->c;
  size_t len = gathered(o);
  if (c->rank != o->root) return post(o, 1, o->send, len, o->root, o->tag);
  o->tmp = malloc(len * (size_t)(c->nranks > 1 ? c->nranks : 2));
  if (!o->tmp) return fail(c, ncclSystemError, "%s: out of memory", kind_name[o->kind]);
  for (int r = 0, slot = 0; r < c->nranks; r++)
    if (r != o->root) {
      ncclResult_t e = post(o, 0, o->tmp + len * (size_t)slot++, len, r, o->tag);
      if (e != ncclSuccess) return e;
    }
  return ncclSuccess;
}

/* The root folds what it gathered, in rank order, and sends the result
 * on; the others wait for their part of it. */
static ncclResult_t finish_reduction(Op *o) {
  ncclComm_t c = o->c;
  size_t len = gathered(o), part = op_bytes(o);
  o->nreq = 0;
  if (c->rank != o->root) {
    if (o->kind == K_REDUCE) return ncclSuccess;
    return post(o, 0, o->recv, part, o->root, o->tag);
  }
  const void **in = malloc(sizeof *in * (size_t)c->nranks);
  if (!in) return fail(c, ncclSystemError, "%s: out of memory", kind_name[o->kind]);
  for (int r = 0, slot = 0; r < c->nranks; r++)
    in[r] = r == o->root ? (const void *)o->send : o->tmp + len * (size_t)slot++;
  /* A reduce-scatter folds into the last slot (free: it holds nothing
   * the fold still needs once each element is read), so that recv, which
   * may lie inside send, is written only afterwards. */
  char *out = o->kind == K_REDUCE_SCATTER ? o->tmp + len * (size_t)(c->nranks - 1) : o->recv;
  fold(out, in, c->nranks, len / type_size(o->type), o->type, o->op);
  free(in);
  if (o->kind == K_REDUCE) return ncclSuccess;
  if (o->kind == K_REDUCE_SCATTER) memmove(o->recv, out + part * (size_t)o->root, part);
  for (int r = 0; r < c->nranks; r++) {
    if (r == o->root) continue;
    const char *from = o->kind == K_REDUCE_SCATTER ? out + part * (size_t)r : o->recv;
    ncclResult_t e = post(o, 1, from, part, r, o->tag);
    if (e != ncclSuccess) return e;
  }
  return ncclSuccess;
}

static ncclResult_t start(Op *o) {
  ncclComm_t c = o->c;
  size_t part = op_bytes(o);
  int n = c->nranks, me = c->rank;
  switch (o->kind) {
  case K_ALLREDUCE: case K_REDUCE: case K_REDUCE_SCATTER: return start_reduction(o);
  case K_ALLGATHER: {
    char *mine = o->recv + part * (size_t)me;
    if (o->send != mine) memmove(mine, o->send, part);
    for (int r = 0; r < n; r++) {
      if (r == me) continue;
      ncclResult_t e = post(o, 1, mine, part, r, o->tag);
      if (e == ncclSuccess) e = post(o, 0, o->recv + part * (size_t)r, part, r, o->tag);
      if (e != ncclSuccess) return e;
    }
    return ncclSuccess;
  }
  case K_BROADCAST:
    if (me != o->root) return post(o, 0, o->recv, part, o->root, o->tag);
    if (o->send != o->recv) memmove(o->recv, o->send, part);
    for (int r = 0; r < n; r++) {
      ncclResult_t e = r == me ? ncclSuccess : post(o, 1, o->recv, part, r, o->tag);
      if (e != ncclSuccess) return e;
    }
    return ncclSuccess;
  case K_SEND: return post(o, 1, o->send, part, o->root, TAG_P2P);
  case K_RECV: return post(o, 0, o->recv, part, o->root, TAG_P2P);
  }
  return ncclSuccess;
}

/* The next round once a round's requests have completed. */
static ncclResult_t advance(Op *o) {
  int reduction = o->kind == K_ALLREDUCE || o->kind == K_REDUCE || o->kind == K_REDUCE_SCATTER;
  if (o->phase == 0 && reduction) {
    o->phase = 1;
    ncclResult_t r = finish_reduction(o);
    if (r != ncclSuccess || o->nreq > 0) return r;
  }
  o->phase = 2;
  return ncclSuccess;
}

/* A received piece of the wrong length: the two ranks' programs disagree. */
static ncclResult_t check_lengths(Op *o, const MPI_Status *sts) {
  for (int i = 0; i < o->nreq; i++) {
    if (o->want[i] == SIZE_MAX) continue;
    int got = 0;
    MPI_Get_count(&sts[i], MPI_BYTE, &got);
    if ((size_t)got != o->want[i])
      return fail(o->c, ncclInvalidUsage,
                  "%s on rank %d: a message of %d bytes arrived from rank %d where %zu were "
                  "expected (the two ranks disagree on the count or type)",
                  kind_name[o->kind], o->c->rank, got, sts[i].MPI_SOURCE, o->want[i]);
  }
  return ncclSuccess;
}

/* A member that aborted the communicator fails what this rank waits for. */
static ncclResult_t check_abort(ncclComm_t c, const char *fn) {
  int flag = 0;
  MPI_Status s;
  if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_ABORT, c->mc, &flag, &s) != MPI_SUCCESS || !flag)
    return ncclSuccess;
  c->async = ncclRemoteError;
  return fail(c, ncclRemoteError, "%s: rank %d (world rank %d) aborted the communicator", fn,
              s.MPI_SOURCE, c->world[s.MPI_SOURCE]);
}

/* One look at o: 1 when it has moved on. */
static int poll_op(Op *o, ncclResult_t *res) {
  MPI_Status sts[64], *s = o->nreq <= 64 ? sts : malloc(sizeof *s * (size_t)o->nreq);
  int done = 0, moved = 0;
  int err = s ? MPI_Testall(o->nreq, o->req, &done, s) : MPI_ERR_NO_MEM;
  if (err != MPI_SUCCESS) *res = mpi_failed(o->c, err, "MPI_Testall");
  else if (done && (*res = check_lengths(o, s)) == ncclSuccess) *res = advance(o), moved = 1;
  else if (!done) *res = check_abort(o->c, kind_name[o->kind]);
  if (s != sts) free(s);
  return moved;
}

/* After a failure: no receive may write into a buffer later. */
static void forget(Op *o) {
  for (int i = 0; i < o->nreq; i++) {
    if (o->req[i] == MPI_REQUEST_NULL) continue;
    if (o->want[i] != SIZE_MAX) MPI_Cancel(&o->req[i]);
    MPI_Request_free(&o->req[i]);
  }
}

static void op_free(Op *o) {
  free(o->req);
  free(o->want);
  free(o->tmp);
}

/* Starts every operation, then progresses them all until each is done. */
static ncclResult_t run(Op *ops, int n) {
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < n && r == ncclSuccess; i++) r = start(&ops[i]);
  const struct timespec pause = {0, 20000};
  for (int left = n; r == ncclSuccess && left > 0;) {
    int moved = 0;
    left = 0;
    for (int i = 0; i < n && r == ncclSuccess; i++) {
      if (ops[i].phase == 2) continue;
      moved |= poll_op(&ops[i], &r);
      left += ops[i].phase != 2;
    }
    if (!moved && left && r == ncclSuccess) nanosleep(&pause, NULL);
  }
  for (int i = 0; i < n; i++) {
    if (r != ncclSuccess) forget(&ops[i]);
    op_free(&ops[i]);
  }
  return r;
}

/* The emulated runtime's, where the program links it (the stand-in's own
 * test does not): the stream must be one it knows, and must not capture,
 * since the operation runs now and would be missing from the graph. */
#pragma weak shard_emu_stream_valid
#pragma weak cudaStreamIsCapturing
#pragma weak shard_emu_stream_use
#pragma weak shard_emu_nccl_wrote

/* The order between streams (runtime.cc), where the program links the
 * emulated runtime: what the operation reads must not be another stream's
 * NCCL result this stream has not waited for, and what it writes is kept
 * for the streams that read it next. The sizes are NCCL's. */
static void order(const Op *o, const char *fn) {
  if (!shard_emu_stream_use || !shard_emu_nccl_wrote) return;
  size_t e = type_size(o->type), n = o->count * e, all = n * (size_t)o->c->nranks;
  size_t in = o->kind == K_REDUCE_SCATTER ? all : n, out = o->kind == K_ALLGATHER ? all : n;
  int reads = o->kind != K_RECV && (o->kind != K_BROADCAST || o->c->rank == o->root);
  int writes = o->kind != K_SEND && (o->kind != K_REDUCE || o->c->rank == o->root);
  if (reads) shard_emu_stream_use(o->stream, o->send, in, fn);
  if (writes) shard_emu_nccl_wrote(o->stream, o->recv, out, fn);
}

static ncclResult_t check_stream(ncclComm_t c, const char *fn, cudaStream_t s) {
  if (shard_emu_stream_valid && !shard_emu_stream_valid(s))
    return fail(c, ncclInvalidArgument, "%s: not a stream of this process", fn);
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing && cudaStreamIsCapturing(s, &cap) == cudaSuccess &&
      cap != cudaStreamCaptureStatusNone)
    return fail(c, ncclInvalidUsage, "%s: the stream captures, which the emulation cannot", fn);
  return ncclSuccess;
}

/* Checks the arguments, then runs the operation or keeps it for the
 * group's end. */
static ncclResult_t enqueue(Op o) {
  const char *fn = kind_name[o.kind];
  ncclComm_t c = o.c;
  if (!c) return fail(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
  if (c->mc == MPI_COMM_NULL) return fail(c, ncclInvalidUsage, "%s: comm is not initialised", fn);
  if (!type_size(o.type)) return fail(c, ncclInvalidArgument, "%s: unknown type %d", fn, o.type);
  int reduction = o.kind == K_ALLREDUCE || o.kind == K_REDUCE || o.kind == K_REDUCE_SCATTER;
  if (reduction && (o.op < ncclSum || o.op > ncclAvg))
    return fail(c, ncclInvalidArgument, "%s: unknown reduction %d", fn, o.op);
  if (reduction && (o.type == ncclFloat16 || o.type >= ncclFloat8e4m3))
    return fail(c, ncclInvalidArgument, "%s: type %d does not reduce in the emulation", fn, o.type);
  if (o.root < 0 || o.root >= c->nranks)
    return fail(c, ncclInvalidArgument, "%s: %s %d is not a rank of %d", fn,
                o.kind == K_SEND || o.kind == K_RECV ? "peer" : "root", o.root, c->nranks);
  int needs_recv = o.kind != K_SEND && (o.kind != K_REDUCE || c->rank == o.root);
  if (o.count && ((o.kind != K_RECV && !o.send) || (needs_recv && !o.recv)))
    return fail(c, ncclInvalidArgument, "%s: a buffer is NULL", fn);
  if (o.count > SIZE_MAX / 8 / (size_t)c->nranks)
    return fail(c, ncclInvalidArgument, "%s: count %zu is too large", fn, o.count);
  ncclResult_t bad = check_stream(c, fn, o.stream);
  if (bad != ncclSuccess) return bad;
  if (o.count) order(&o, fn);
  st.nops_run++;
  if (o.kind != K_SEND && o.kind != K_RECV) o.tag = TAG_COLL + (int)(c->seq++ % (unsigned long)st.tag_span);
  if (o.count == 0) return ncclSuccess; /* NCCL moves nothing either */
  if (st.depth == 0) return run(&o, 1);
  if (st.nops == st.capops) {
    int cap = st.capops ? 2 * st.capops : 16;
    Op *p = realloc(st.ops, sizeof *p * (size_t)cap);
    if (!p) return fail(c, ncclSystemError, "%s: out of memory", fn);
    st.ops = p, st.capops = cap;
  }
  st.ops[st.nops++] = o;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  st.depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (st.depth == 0) return fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--st.depth > 0) return ncclSuccess;
  int n = st.nops;
  st.nops = 0;
  st.ngroups += n > 0;
  return run(st.ops, n);
}

static Op op_of(Kind k, const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                int root, ncclComm_t c, cudaStream_t stream) {
  return (Op){.kind = k, .c = c, .send = s, .recv = r, .count = n, .type = t, .op = op,
              .root = root, .stream = stream};
}

void shard_nccl_emu_ops(long long *ops, long long *groups) {
  *ops = st.nops_run;
  *groups = st.ngroups;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t stream) {
  return enqueue(op_of(K_ALLREDUCE, s, r, n, t, op, 0, c, stream));
}

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t c, cudaStream_t stream) {
  return enqueue(op_of(K_REDUCE, s, r, n, t, op, root, c, stream));
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t stream) {
  return enqueue(op_of(K_REDUCE_SCATTER, s, r, n, t, op, 0, c, stream));
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t stream) {
  return enqueue(op_of(K_ALLGATHER, s, r, n, t, ncclSum, 0, c, stream));
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t stream) {
  return enqueue(op_of(K_BROADCAST, s, r, n, t, ncclSum, root, c, stream));
}

ncclResult_t ncclBcast(void *b, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                       cudaStream_t stream) {
  return ncclBroadcast(b, b, n, t, root, c, stream);
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t stream) {
  return enqueue(op_of(K_SEND, s, NULL, n, t, ncclSum, peer, c, stream));
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t stream) {
  return enqueue(op_of(K_RECV, NULL, r, n, t, ncclSum, peer, c, stream));
}
