/* The NCCL stand-in of tests/features/emu (nccl_mpi.c) against NCCL's definitions,
 * under mpirun (tests/features/emu/nccl.cmake):
 * - every operation (all-reduce, reduce, reduce-scatter, all-gather,
 *   broadcast, send/receive) in and out of place, every reduction on every
 *   reducing type (bf16 too), counts 0, 1, 7, 1001 and 65537, against a
 *   serial computation;
 * - on several communicators at once: the world, the world in reverse
 *   order (its maker is the last world rank), and the even and the odd
 *   ranks, made in an order that differs between ranks;
 * - groups: a send and a receive to the same peer, three messages to one
 *   peer arriving in posting order, collectives of two communicators
 *   posted in opposite orders on even and odd ranks, nesting;
 * - determinism: random fp32 and bf16 sums equal, to the bit, the fold in
 *   rank order x0 + x1 + ... (bf16 in fp32, rounded once: comm.h's rule)
 *   and are the same on every rank;
 * - errors: bad arguments, a message of the wrong length, and a member
 *   that aborts while the others wait (they must fail, promptly, naming
 *   it; ncclCommAbort must not wait).
 * A failed check ends the job (MPI_Abort) with the check's text. */
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int me, nworld;
enum { C_COLL, C_GROUP, C_DET, C_ERR, C_NCAT };
static long nchecks[C_NCAT];
static const char *const cat_name[C_NCAT] = {"collective", "group", "determinism", "error"};

__attribute__((format(printf, 2, 3))) static void check(int line, const char *fmt, ...);
#define CHECK(cat, cond, ...)                                                                      \
  do {                                                                                             \
    nchecks[cat]++;                                                                                \
    if (!(cond)) check(__LINE__, __VA_ARGS__);                                                     \
  } while (0)

static void check(int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "nccl_test: rank %d: check failed (nccl_test.c:%d): %s\n", me, line, msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

#define NCCL_OK(call)                                                                              \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess)                                                                         \
      check(__LINE__, "%s: %s: %s", #call, ncclGetErrorString(r_), ncclGetLastError(NULL));        \
  } while (0)

/* ---- Communicators --------------------------------------------------------------- */

/* One communicator as the test knows it: who is which rank. */
typedef struct Comm {
  const char *name;
  ncclComm_t nc;
  int rank, size;
  int world[64]; /* world rank of each rank */
} Comm;

/* Joins the communicator of the given members (world ranks, in rank
 * order); its rank 0 makes the id and sends it to the others itself. */
static void join(Comm *c, const char *name, const int *members, int n) {
  c->name = name;
  c->size = n;
  c->rank = -1;
  for (int r = 0; r < n; r++) {
    c->world[r] = members[r];
    if (members[r] == me) c->rank = r;
  }
  ncclUniqueId id;
  if (c->rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    for (int r = 1; r < n; r++) MPI_Send(&id, sizeof id, MPI_BYTE, members[r], 7, MPI_COMM_WORLD);
  } else {
    MPI_Recv(&id, sizeof id, MPI_BYTE, members[0], 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  NCCL_OK(ncclCommInitRank(&c->nc, n, id, c->rank));
  int got = -1;
  NCCL_OK(ncclCommUserRank(c->nc, &got));
  CHECK(C_COLL, got == c->rank, "%s: user rank %d, not %d", name, got, c->rank);
  NCCL_OK(ncclCommCount(c->nc, &got));
  CHECK(C_COLL, got == n, "%s: count %d, not %d", name, got, n);
}

/* ncclCommSplit of `from` by parity, keyed by world rank: the evens' and
 * the odds' communicators again, ranked by world rank whatever the
 * parent's order; then a split in which world rank 0 takes no color
 * (NCCL_SPLIT_NOCOLOR) and gets no communicator. */
static void split(Comm *from, Comm *c) {
  c->name = me % 2 ? "odds (split)" : "evens (split)";
  NCCL_OK(ncclCommSplit(from->nc, me % 2, me, &c->nc, NULL));
  c->size = 0;
  for (int r = me % 2; r < nworld; r += 2) c->world[c->size++] = r;
  c->rank = me / 2;
  int got = -1;
  NCCL_OK(ncclCommUserRank(c->nc, &got));
  CHECK(C_COLL, got == c->rank, "%s: user rank %d, not %d", c->name, got, c->rank);
  NCCL_OK(ncclCommCount(c->nc, &got));
  CHECK(C_COLL, got == c->size, "%s: count %d, not %d", c->name, got, c->size);
  ncclComm_t rest = NULL;
  NCCL_OK(ncclCommSplit(from->nc, me == 0 ? NCCL_SPLIT_NOCOLOR : 0, 0, &rest, NULL));
  CHECK(C_COLL, (rest == NULL) == (me == 0), "split without a color: %s communicator",
        rest ? "a" : "no");
  if (rest) NCCL_OK(ncclCommDestroy(rest));
}

/* ---- Values ------------------------------------------------------------------------- */

static const ncclDataType_t types[] = {ncclInt8,  ncclUint8,   ncclInt32,   ncclUint32, ncclInt64,
                                       ncclUint64, ncclFloat32, ncclFloat64, ncclBfloat16};
static const char *type_name(ncclDataType_t t) {
  static const char *const names[] = {"i8",  "u8",  "i32", "u32", "i64", "u64",
                                      "f16", "f32", "f64", "bf16"};
  return t <= ncclBfloat16 ? names[t] : "?";
}
static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
static const char *const op_name[] = {"sum", "prod", "max", "min", "avg"};

static size_t tsize(ncclDataType_t t) {
  return t <= ncclUint8 ? 1 : t == ncclBfloat16 ? 2 : t <= ncclUint32 || t == ncclFloat32 ? 4 : 8;
}
static int is_unsigned(ncclDataType_t t) {
  return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}

static float bf16_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t bf16_of(float f) { /* round to nearest even; no NaNs here */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* Element i of world rank w: small integers (0..3 unsigned, -3..3
 * otherwise), so that sums, products, maxima and minima of up to 64 ranks
 * are exact in every type. */
static long value(ncclDataType_t t, int w, size_t i, int salt) {
  long v = (long)(((unsigned long)(w + 1) * 7919u + i * 104729u + (unsigned long)salt * 31337u) % 7);
  return is_unsigned(t) ? v % 4 : v - 3;
}

static void put(void *b, ncclDataType_t t, size_t i, double v) {
  switch (t) {
  case ncclInt8: ((int8_t *)b)[i] = (int8_t)v; break;
  case ncclUint8: ((uint8_t *)b)[i] = (uint8_t)v; break;
  case ncclInt32: ((int32_t *)b)[i] = (int32_t)v; break;
  case ncclUint32: ((uint32_t *)b)[i] = (uint32_t)v; break;
  case ncclInt64: ((int64_t *)b)[i] = (int64_t)v; break;
  case ncclUint64: ((uint64_t *)b)[i] = (uint64_t)v; break;
  case ncclFloat32: ((float *)b)[i] = (float)v; break;
  case ncclFloat64: ((double *)b)[i] = v; break;
  case ncclBfloat16: ((uint16_t *)b)[i] = bf16_of((float)v); break;
  default: break;
  }
}

static double get(const void *b, ncclDataType_t t, size_t i) {
  switch (t) {
  case ncclInt8: return ((const int8_t *)b)[i];
  case ncclUint8: return ((const uint8_t *)b)[i];
  case ncclInt32: return ((const int32_t *)b)[i];
  case ncclUint32: return ((const uint32_t *)b)[i];
  case ncclInt64: return (double)((const int64_t *)b)[i];
  case ncclUint64: return (double)((const uint64_t *)b)[i];
  case ncclFloat32: return ((const float *)b)[i];
  case ncclFloat64: return ((const double *)b)[i];
  case ncclBfloat16: return bf16_float(((const uint16_t *)b)[i]);
  default: return NAN;
  }
}

static void fill(void *b, ncclDataType_t t, size_t n, int w, size_t from, int salt) {
  for (size_t i = 0; i < n; i++) put(b, t, i, (double)value(t, w, from + i, salt));
}

/* The reduction of element i over c's ranks, as the type computes it. */
static double reduced(const Comm *c, ncclDataType_t t, ncclRedOp_t op, size_t i, int salt) {
  double a = (double)value(t, c->world[0], i, salt);
  for (int r = 1; r < c->size; r++) {
    double b = (double)value(t, c->world[r], i, salt);
    a = op == ncclProd ? a * b : op == ncclMax ? fmax(a, b) : op == ncclMin ? fmin(a, b) : a + b;
  }
  if (op != ncclAvg) return a;
  if (t == ncclFloat64) return a / c->size;
  if (t == ncclFloat32) return (float)a / (float)c->size;
  if (t == ncclBfloat16) return bf16_float(bf16_of((float)a / (float)c->size));
  return (double)((long)a / c->size); /* integer division truncates */
}

static void *alloc(size_t n, ncclDataType_t t) {
  void *p = calloc(n ? n : 1, tsize(t));
  if (!p) check(__LINE__, "out of memory");
  return p;
}

/* ---- Collectives -------------------------------------------------------------------- */

typedef struct Case {
  Comm *c;
  ncclDataType_t t;
  size_t n;
  int salt;
} Case;

#define S ((cudaStream_t)0)

static void all_reduce(Case k, ncclRedOp_t op, int inplace) {
  void *s = alloc(k.n, k.t), *d = inplace ? s : alloc(k.n, k.t);
  fill(s, k.t, k.n, me, 0, k.salt);
  NCCL_OK(ncclAllReduce(s, d, k.n, k.t, op, k.c->nc, S));
  for (size_t i = 0; i < k.n; i++)
    CHECK(C_COLL, get(d, k.t, i) == reduced(k.c, k.t, op, i, k.salt),
          "allreduce%s %s %s n=%zu on %s [%zu]: %g, not %g", inplace ? " in place" : "",
          op_name[op], type_name(k.t), k.n, k.c->name, i, get(d, k.t, i),
          reduced(k.c, k.t, op, i, k.salt));
  free(s);
  if (!inplace) free(d);
}

static void reduce(Case k, ncclRedOp_t op, int root) {
  void *s = alloc(k.n, k.t), *d = alloc(k.n, k.t);
  fill(s, k.t, k.n, me, 0, k.salt);
  NCCL_OK(ncclReduce(s, k.c->rank == root ? d : NULL, k.n, k.t, op, root, k.c->nc, S));
  for (size_t i = 0; k.c->rank == root && i < k.n; i++)
    CHECK(C_COLL, get(d, k.t, i) == reduced(k.c, k.t, op, i, k.salt),
          "reduce to %d %s %s n=%zu on %s [%zu]", root, op_name[op], type_name(k.t), k.n,
          k.c->name, i);
  free(s);
  free(d);
}

static void reduce_scatter(Case k, ncclRedOp_t op, int inplace) {
  size_t part = k.n, sz = tsize(k.t);
  void *s = alloc(part * (size_t)k.c->size, k.t), *d0 = alloc(part, k.t);
  void *d = inplace ? (char *)s + part * sz * (size_t)k.c->rank : d0;
  fill(s, k.t, part * (size_t)k.c->size, me, 0, k.salt);
  NCCL_OK(ncclReduceScatter(s, d, part, k.t, op, k.c->nc, S));
  for (size_t i = 0; i < part; i++)
    CHECK(C_COLL, get(d, k.t, i) == reduced(k.c, k.t, op, part * (size_t)k.c->rank + i, k.salt),
          "reduce-scatter%s %s %s n=%zu on %s [%zu]", inplace ? " in place" : "", op_name[op],
          type_name(k.t), part, k.c->name, i);
  for (size_t i = 0; inplace && i < part * (size_t)k.c->size; i++)
    if (i / part != (size_t)k.c->rank)
      CHECK(C_COLL, get(s, k.t, i) == (double)value(k.t, me, i, k.salt),
            "in-place reduce-scatter keeps the other blocks");
  free(s);
  free(d0);
}

static void all_gather(Case k, int inplace) {
  size_t part = k.n, sz = tsize(k.t);
  void *d = alloc(part * (size_t)k.c->size, k.t), *s0 = alloc(part, k.t);
  void *s = inplace ? (char *)d + part * sz * (size_t)k.c->rank : s0;
  fill(s, k.t, part, me, 0, k.salt);
  NCCL_OK(ncclAllGather(s, d, part, k.t, k.c->nc, S));
  for (int r = 0; r < k.c->size; r++)
    for (size_t i = 0; i < part; i++)
      CHECK(C_COLL, get(d, k.t, part * (size_t)r + i) == (double)value(k.t, k.c->world[r], i, k.salt),
            "allgather%s %s n=%zu on %s: block %d [%zu]", inplace ? " in place" : "",
            type_name(k.t), part, k.c->name, r, i);
  free(d);
  free(s0);
}

static void broadcast(Case k, int root, int inplace) {
  void *s = alloc(k.n, k.t), *d = inplace ? s : alloc(k.n, k.t);
  if (k.c->rank == root) fill(s, k.t, k.n, me, 0, k.salt);
  NCCL_OK(ncclBroadcast(s, d, k.n, k.t, root, k.c->nc, S));
  for (size_t i = 0; i < k.n; i++)
    CHECK(C_COLL, get(d, k.t, i) == (double)value(k.t, k.c->world[root], i, k.salt),
          "broadcast%s from %d %s n=%zu on %s", inplace ? " in place" : "", root,
          type_name(k.t), k.n, k.c->name);
  free(s);
  if (!inplace) free(d);
}

static void collectives(Comm *c) {
  static const size_t counts[] = {0, 1, 7, 1001, 65537};
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
    for (size_t ni = 0; ni < sizeof counts / sizeof *counts; ni++) {
      if (counts[ni] > 1001 && types[ti] != ncclFloat32 && types[ti] != ncclBfloat16) continue;
      Case k = {c, types[ti], counts[ni], (int)(ti * 8 + ni)};
      for (size_t oi = 0; oi < sizeof ops / sizeof *ops; oi++) {
        all_reduce(k, ops[oi], 0);
        reduce_scatter(k, ops[oi], 0);
      }
      all_reduce(k, ncclSum, 1);
      reduce_scatter(k, ncclMax, 1);
      reduce(k, ncclSum, c->size - 1);
      reduce(k, ncclMin, 0);
      all_gather(k, 0);
      all_gather(k, 1);
      broadcast(k, 0, 0);
      broadcast(k, c->size - 1, 1);
    }
}

/* ---- Groups --------------------------------------------------------------------------- */

/* Each rank sends to and receives from both neighbours of a ring (the
 * same peer twice on two ranks), three messages each way, in one group. */
static void ring(Comm *c) {
  int n = c->size, next = (c->rank + 1) % n, prev = (c->rank + n - 1) % n;
  static const size_t len[3] = {1, 7, 1001};
  int32_t *out[3], *in_prev[3], *in_next[3];
  NCCL_OK(ncclGroupStart());
  for (int m = 0; m < 3; m++) {
    out[m] = alloc(len[m], ncclInt32), in_prev[m] = alloc(len[m], ncclInt32);
    in_next[m] = alloc(len[m], ncclInt32);
    fill(out[m], ncclInt32, len[m], me, 0, 50 + m);
    NCCL_OK(ncclRecv(in_prev[m], len[m], ncclInt32, prev, c->nc, S));
    NCCL_OK(ncclSend(out[m], len[m], ncclInt32, next, c->nc, S));
    NCCL_OK(ncclSend(out[m], len[m], ncclInt32, prev, c->nc, S));
    NCCL_OK(ncclRecv(in_next[m], len[m], ncclInt32, next, c->nc, S));
  }
  NCCL_OK(ncclGroupEnd());
  for (int m = 0; m < 3; m++) {
    for (size_t i = 0; i < len[m]; i++) {
      CHECK(C_GROUP, in_prev[m][i] == value(ncclInt32, c->world[prev], i, 50 + m),
            "ring on %s: message %d from the previous rank, in order", c->name, m);
      CHECK(C_GROUP, in_next[m][i] == value(ncclInt32, c->world[next], i, 50 + m),
            "ring on %s: message %d from the next rank, in order", c->name, m);
    }
    free(out[m]), free(in_prev[m]), free(in_next[m]);
  }
}

/* All-reduces on two communicators and a ring on the first in one group,
 * the two all-reduces in opposite orders on even and odd ranks, the
 * second group nested in the first. */
static void mixed_group(Comm *a, Comm *b) {
  enum { N = 333 };
  float *xa = alloc(N, ncclFloat32), *xb = alloc(N, ncclFloat32);
  int32_t *to = alloc(N, ncclInt32), *from = alloc(N, ncclInt32);
  fill(xa, ncclFloat32, N, me, 0, 60);
  fill(xb, ncclFloat32, N, me, 0, 61);
  fill(to, ncclInt32, N, me, 0, 62);
  int next = (a->rank + 1) % a->size, prev = (a->rank + a->size - 1) % a->size;
  NCCL_OK(ncclGroupStart());
  if (me % 2) NCCL_OK(ncclAllReduce(xb, xb, N, ncclFloat32, ncclSum, b->nc, S));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(to, N, ncclInt32, next, a->nc, S));
  NCCL_OK(ncclAllReduce(xa, xa, N, ncclFloat32, ncclSum, a->nc, S));
  NCCL_OK(ncclRecv(from, N, ncclInt32, prev, a->nc, S));
  NCCL_OK(ncclGroupEnd());
  if (me % 2 == 0) NCCL_OK(ncclAllReduce(xb, xb, N, ncclFloat32, ncclSum, b->nc, S));
  NCCL_OK(ncclGroupEnd());
  for (size_t i = 0; i < N; i++) {
    CHECK(C_GROUP, xa[i] == reduced(a, ncclFloat32, ncclSum, i, 60), "grouped allreduce on %s",
          a->name);
    CHECK(C_GROUP, xb[i] == reduced(b, ncclFloat32, ncclSum, i, 61), "grouped allreduce on %s",
          b->name);
    CHECK(C_GROUP, from[i] == value(ncclInt32, a->world[prev], i, 62), "grouped receive on %s",
          a->name);
  }
  free(xa), free(xb), free(to), free(from);
}

/* ---- Determinism ------------------------------------------------------------------------ */

/* Random values whose sums round: the result must be the left fold in
 * rank order, to the bit, on every rank. */
static void determinism(Comm *c, ncclDataType_t t, size_t n) {
  size_t sz = tsize(t);
  char *x = alloc(n, t), *y = alloc(n, t), *all = alloc(n * (size_t)c->size, t);
  uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    put(x, t, i, (double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  NCCL_OK(ncclAllReduce(x, y, n, t, ncclSum, c->nc, S));
  NCCL_OK(ncclAllGather(x, all, n, t, c->nc, S));
  for (size_t i = 0; i < n; i++) {
    float a = (float)get(all, t, i);
    for (int r = 1; r < c->size; r++) a += (float)get(all, t, (size_t)r * n + i);
    CHECK(C_DET, t == ncclBfloat16 ? ((uint16_t *)y)[i] == bf16_of(a) : ((float *)y)[i] == a,
          "%s sum on %s [%zu] is the fold in rank order", type_name(t), c->name, i);
  }
  NCCL_OK(ncclAllGather(y, all, n, t, c->nc, S));
  for (int r = 0; r < c->size; r++)
    CHECK(C_DET, memcmp(all + (size_t)r * n * sz, y, n * sz) == 0,
          "%s sum on %s: rank %d has other bits", type_name(t), c->name, r);
  free(x), free(y), free(all);
}

/* ---- Errors ------------------------------------------------------------------------------ */

static void expect(ncclResult_t got, ncclResult_t want, ncclComm_t c, const char *text,
                   const char *what) {
  const char *last = ncclGetLastError(c);
  CHECK(C_ERR, got == want && (!text || strstr(last, text)),
        "%s: result %d (%s), not %d; last error '%s' should contain '%s'", what, got,
        ncclGetErrorString(got), want, last, text ? text : "");
}

static void misuse(Comm *c) {
  float x[4] = {0};
  expect(ncclSend(x, 4, ncclFloat32, c->size, c->nc, S), ncclInvalidArgument, c->nc,
         "is not a rank", "send to a peer out of range");
  expect(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, NULL, S), ncclInvalidArgument, NULL,
         "comm is NULL", "allreduce without a communicator");
  expect(ncclAllReduce(x, x, 4, ncclFloat32, (ncclRedOp_t)17, c->nc, S), ncclInvalidArgument,
         c->nc, "unknown reduction", "unknown reduction");
  expect(ncclAllReduce(x, x, 2, ncclFloat16, ncclSum, c->nc, S), ncclInvalidArgument, c->nc,
         "does not reduce", "fp16 sum");
  expect(ncclGroupEnd(), ncclInvalidUsage, NULL, "without ncclGroupStart", "unmatched group end");
  ncclUniqueId bogus;
  memset(&bogus, 0, sizeof bogus);
  ncclComm_t nc;
  expect(ncclCommInitRank(&nc, 2, bogus, 0), ncclInvalidArgument, NULL, "not an id",
         "an id not made by ncclGetUniqueId");
}

/* Rank 0 sends 5 floats, rank 1 expects 10. */
static void wrong_length(Comm *c) {
  float x[10] = {0};
  if (c->rank == 0) NCCL_OK(ncclSend(x, 5, ncclFloat32, 1, c->nc, S));
  if (c->rank == 1)
    expect(ncclRecv(x, 10, ncclFloat32, 0, c->nc, S), ncclInvalidUsage, c->nc,
           "a message of 20 bytes arrived from rank 0 where 40 were expected", "short message");
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The last rank aborts a fresh communicator of everyone while the others
 * wait in an all-reduce on it. */
static void abort_member(void) {
  Comm a;
  int all[64];
  for (int r = 0; r < nworld; r++) all[r] = r;
  join(&a, "abort", all, nworld);
  float x[100] = {0};
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now();
  if (me == nworld - 1) {
    NCCL_OK(ncclCommAbort(a.nc));
    CHECK(C_ERR, now() - t0 < 1, "ncclCommAbort took %.2f s", now() - t0);
  } else {
    char want[128];
    snprintf(want, sizeof want, "rank %d (world rank %d) aborted the communicator", nworld - 1,
             nworld - 1);
    expect(ncclAllReduce(x, x, 100, ncclFloat32, ncclSum, a.nc, S), ncclRemoteError, a.nc, want,
           "allreduce with a member gone");
    ncclResult_t async = ncclSuccess;
    NCCL_OK(ncclCommGetAsyncError(a.nc, &async));
    CHECK(C_ERR, async == ncclRemoteError, "async error after a member aborted: %d", async);
    CHECK(C_ERR, now() - t0 < 5, "the failure took %.2f s to show", now() - t0);
  }
  /* The others abort only once everyone has seen the first one's note. */
  MPI_Barrier(MPI_COMM_WORLD);
  if (me != nworld - 1) NCCL_OK(ncclCommAbort(a.nc));
}

/* ---- Main ----------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &nworld);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (nworld < 2 || nworld > 64) check(__LINE__, "run on 2 to 64 ranks, not %d", nworld);
  double t0 = now();
  int fwd[64], rev[64], half[32], nh = 0;
  for (int r = 0; r < nworld; r++) fwd[r] = r, rev[r] = nworld - 1 - r;
  for (int r = me % 2; r < nworld; r += 2) half[nh++] = r;
  Comm world, back, part, halves;
  /* Even ranks make their half first, odd ranks after the world. */
  if (me % 2 == 0) join(&part, "evens", half, nh);
  join(&world, "world", fwd, nworld);
  if (me % 2) join(&part, "odds", half, nh);
  join(&back, "reversed", rev, nworld);
  split(&back, &halves);
  Comm *comms[] = {&world, &back, &part, &halves};
  for (int i = 0; i < 4; i++) {
    collectives(comms[i]);
    if (comms[i]->size > 1) ring(comms[i]);
  }
  mixed_group(&world, &back);
  mixed_group(&back, &part);
  for (int i = 0; i < 3; i++) {
    determinism(comms[i], ncclFloat32, 4099);
    determinism(comms[i], ncclBfloat16, 4099);
  }
  misuse(&world);
  wrong_length(&world);
  abort_member();
  for (int i = 0; i < 4; i++) NCCL_OK(ncclCommDestroy(comms[i]->nc));
  long total[C_NCAT];
  MPI_Reduce(nchecks, total, C_NCAT, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (me == 0) {
    printf("nccl emulation: %d ranks; communicators world, reversed (made by world rank %d), "
           "evens and odds, made in rank-dependent order, and split again from reversed\n", nworld, nworld - 1);
    printf("  every op in and out of place, sum/prod/max/min/avg on i8 u8 i32 u32 i64 u64 f32 "
           "f64 bf16, counts 0 1 7 1001 65537 (the largest f32/bf16 only)\n");
    for (int i = 0; i < C_NCAT; i++)
      printf("  %-12s %8ld checks passed (all ranks)\n", cat_name[i], total[i]);
    printf("  %.2f s\n", now() - t0);
  }
  MPI_Finalize();
  return 0;
}
