/* Tests of the communication layer (runtime/comm.h) and the rank layout
 * (abi/mesh.h), run under mpirun by tests/runtime/comm/tests.cmake.
 *
 *   comm_test layout     the layout arithmetic alone (no MPI)
 *   comm_test check      every collective, blocking and non-blocking, on the
 *                        world and on the communicators of every mesh whose
 *                        size is the world's, against a serial computation;
 *                        membership of the sub-communicators; determinism
 *                        of reductions; the byte counters
 *   comm_test fail R     rank R fails (rt_comm_fatal) while the others wait
 *   comm_test exit R     rank R exits(1) without a word while the others wait
 *   comm_test truncate   rank 1 receives into too small a buffer (an MPI error)
 *   comm_test short      rank 1 receives fewer elements than it expects
 *   comm_test mesh       a mesh that does not fit the world
 *   comm_test misuse     a send to a peer that does not exist
 *   comm_test a2a R      rank R expects more of rank 0 in an alltoallv than it sends
 * The failure modes must bring every rank down; tests/runtime/comm/fail.sh checks
 * that mpirun exits non-zero, promptly, with the failing rank's message.
 *
 * A failed check is fatal on the rank that sees it (its message names the
 * check), so the test cannot pass with one rank silently wrong. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "util.h"

static int me, nworld;
enum { C_LAYOUT, C_MEMBERS, C_COLL, C_P2P, C_DET, C_BYTES, C_NCAT };
static long nchecks[C_NCAT]; /* per category, summed over the ranks at the end */
static const char *cat_name[C_NCAT] = {"layout", "membership", "collective", "point-to-point",
                                       "determinism", "byte counter"};

#define CHECK(cat, cond, ...)                                                                 \
  do {                                                                                        \
    nchecks[cat]++;                                                                           \
    if (!(cond)) fail_check(__LINE__, __VA_ARGS__);                                           \
  } while (0)

__attribute__((format(printf, 2, 3))) static _Noreturn void fail_check(int line, const char *fmt,
                                                                         ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rt_comm_fatal("check failed (comm_test.c:%d): %s", line, msg);
}

/* ---- Layout ------------------------------------------------------------ */

static const RtMesh layouts[] = {{2, 2, 2}, {4, 1, 2}, {1, 4, 2}, {8, 1, 1}};

static void check_group(RtMesh m, RtAxis a, int rank, const int *want, int nwant) {
  int got[16];
  int n = rt_mesh_group(m, a, rank, got);
  int same = n == nwant;
  for (int i = 0; same && i < n; i++) same = got[i] == want[i];
  CHECK(C_LAYOUT, same, "t=%d p=%d d=%d: %s group of rank %d", m.tp, m.pp, m.dp, rt_axis_name(a),
        rank);
}

/* Hand-worked examples, one rank of each layout. */
static void layout_examples(void) {
  RtMesh m = {2, 2, 2};
  RtCoord c = rt_mesh_coord(m, 5);
  CHECK(C_LAYOUT, c.tp == 1 && c.dp == 0 && c.pp == 1, "(2,2,2) rank 5 = (tp 1, dp 0, pp 1)");
  check_group(m, RT_AXIS_TENSOR, 5, (int[]){4, 5}, 2);
  check_group(m, RT_AXIS_DATA, 5, (int[]){5, 7}, 2);
  check_group(m, RT_AXIS_PIPELINE, 5, (int[]){1, 5}, 2);
  check_group(m, RT_AXIS_EMBED, 5, (int[]){1, 5}, 2);
  m = (RtMesh){4, 1, 2};
  c = rt_mesh_coord(m, 6);
  CHECK(C_LAYOUT, c.tp == 2 && c.dp == 1 && c.pp == 0, "(4,1,2) rank 6 = (tp 2, dp 1, pp 0)");
  check_group(m, RT_AXIS_TENSOR, 6, (int[]){4, 5, 6, 7}, 4);
  check_group(m, RT_AXIS_DATA, 6, (int[]){2, 6}, 2);
  check_group(m, RT_AXIS_PIPELINE, 6, (int[]){6}, 1);
  check_group(m, RT_AXIS_EMBED, 6, (int[]){6}, 1);
  m = (RtMesh){1, 4, 2};
  c = rt_mesh_coord(m, 5);
  CHECK(C_LAYOUT, c.tp == 0 && c.dp == 1 && c.pp == 2, "(1,4,2) rank 5 = (tp 0, dp 1, pp 2)");
  check_group(m, RT_AXIS_TENSOR, 5, (int[]){5}, 1);
  check_group(m, RT_AXIS_DATA, 5, (int[]){4, 5}, 2);
  check_group(m, RT_AXIS_PIPELINE, 5, (int[]){1, 3, 5, 7}, 4);
  check_group(m, RT_AXIS_EMBED, 5, NULL, 0);
  check_group(m, RT_AXIS_EMBED, 7, (int[]){1, 7}, 2);
  m = (RtMesh){8, 1, 1};
  c = rt_mesh_coord(m, 3);
  CHECK(C_LAYOUT, c.tp == 3 && c.dp == 0 && c.pp == 0, "(8,1,1) rank 3 = (tp 3, dp 0, pp 0)");
  check_group(m, RT_AXIS_TENSOR, 3, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
  check_group(m, RT_AXIS_DATA, 3, (int[]){3}, 1);
  check_group(m, RT_AXIS_EMBED, 3, (int[]){3}, 1);
}

/* Every rank: the formula, the round trip, and that the groups of each
 * axis partition the ranks (the embedding groups: the first and last
 * stages), each rank sitting at its coordinate in its group. */
static void layout_properties(RtMesh m) {
  int n = rt_mesh_size(m), seen[RT_AXIS_COUNT][64] = {{0}};
  for (int r = 0; r < n; r++) {
    RtCoord c = rt_mesh_coord(m, r);
    CHECK(C_LAYOUT, c.tp + m.tp * (c.dp + m.dp * c.pp) == r && rt_mesh_rank(m, c) == r,
          "rank %d round trip", r);
    CHECK(C_LAYOUT, c.tp < m.tp && c.dp < m.dp && c.pp < m.pp, "rank %d coords in range", r);
    for (int a = 0; a < RT_AXIS_COUNT; a++) {
      int g[64], k = rt_mesh_group(m, (RtAxis)a, r, g), idx = rt_mesh_axis_index(m, (RtAxis)a, r);
      CHECK(C_LAYOUT, k == 0 ? idx == -1 : idx >= 0 && idx < k && g[idx] == r,
            "rank %d at its place in its %s group", r, rt_axis_name((RtAxis)a));
      for (int i = 0; i < k; i++) seen[a][g[i]]++;
    }
    int t0 = r - c.tp;
    int g[64], k = rt_mesh_group(m, RT_AXIS_TENSOR, r, g);
    for (int i = 0; i < k; i++) CHECK(C_LAYOUT, g[i] == t0 + i, "tensor group consecutive");
  }
  for (int r = 0; r < n; r++)
    for (int a = 0; a < RT_AXIS_COUNT; a++) {
      int want = a != RT_AXIS_EMBED ? rt_mesh_size((RtMesh){a == RT_AXIS_TENSOR ? m.tp : 1,
                                                            a == RT_AXIS_PIPELINE ? m.pp : 1,
                                                            a == RT_AXIS_DATA ? m.dp : 1})
                                    : !rt_mesh_in_embed(m, r) ? 0 : m.pp > 1 ? 2 : 1;
      CHECK(C_LAYOUT, seen[a][r] == want, "t=%d p=%d d=%d: rank %d in %d %s groups, not %d", m.tp,
            m.pp, m.dp, r, seen[a][r], rt_axis_name((RtAxis)a), want);
    }
}

static void test_layout(void) {
  layout_examples();
  for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) layout_properties(layouts[i]);
  /* Meshes of other sizes too: every factorisation up to 16 ranks. */
  for (int t = 1; t <= 16; t++)
    for (int p = 1; t * p <= 16; p++)
      for (int d = 1; t * p * d <= 16; d++) layout_properties((RtMesh){t, p, d});
}

/* ---- Data -------------------------------------------------------------- */

static const RtCommType types[] = {RT_COMM_F32, RT_COMM_F64, RT_COMM_I32};
static const char *type_name[] = {"f32", "f64", "i32"};

/* The value element i of world rank r contributes: small integers (times
 * 1/4 for floats), so that every sum is exact in any order and a serial
 * computation must agree to the bit. */
static double value(int r, int64_t i, int salt) {
  long v = ((long)(r + 1) * 7919 + i * 104729 + (long)salt * 31337) % 2001 - 1000;
  return (double)v;
}

static double get(const void *buf, RtCommType t, int64_t i) {
  switch (t) {
  case RT_COMM_F32: return ((const float *)buf)[i];
  case RT_COMM_F64: return ((const double *)buf)[i];
  default: return ((const int32_t *)buf)[i];
  }
}

static void put(void *buf, RtCommType t, int64_t i, double v) {
  switch (t) {
  case RT_COMM_F32: ((float *)buf)[i] = (float)(v / 4); break;
  case RT_COMM_F64: ((double *)buf)[i] = v / 4; break;
  default: ((int32_t *)buf)[i] = (int32_t)v; break;
  }
}

/* What get() returns for a stored value v. */
static double stored(RtCommType t, double v) {
  return t == RT_COMM_I32 ? v : v / 4;
}

static void fill(void *buf, RtCommType t, int64_t n, int wrank, int64_t from, int salt) {
  for (int64_t i = 0; i < n; i++) put(buf, t, i, value(wrank, from + i, salt));
}

static double reduce(RtComm *c, RtCommOp op, int64_t i, int salt) {
  double acc = op == RT_COMM_SUM ? 0 : -INFINITY;
  for (int r = 0; r < rt_comm_size(c); r++) {
    double v = value(rt_comm_world_rank_of(c, r), i, salt);
    acc = op == RT_COMM_SUM ? acc + v : fmax(acc, v);
  }
  return acc;
}

static void *alloc(int64_t n) {
  return calloc((size_t)(n ? n : 1), 8);
}

/* ---- Collectives against serial results --------------------------------- */

typedef struct Case {
  RtComm *c;
  RtCommType t;
  int64_t n;
  int nb; /* the non-blocking form */
  int salt;
} Case;

static const char *form(int nb) {
  return nb ? "non-blocking" : "blocking";
}

/* Completes a request: by rt_comm_wait, or (every other time) by polling
 * rt_comm_test, so that both ways are exercised. */
static void complete(RtCommReq *r) {
  static int k;
  if (!r) return;
  if (k++ % 2 == 0) {
    rt_comm_wait(r);
    return;
  }
  while (!rt_comm_test(r)) {
  }
}

static void check_allreduce(Case k, RtCommOp op, int inplace) {
  void *s = alloc(k.n), *d = inplace ? s : alloc(k.n);
  fill(s, k.t, k.n, rt_comm_world_rank(), 0, k.salt);
  if (k.nb) complete(rt_comm_iallreduce(k.c, s, d, k.n, k.t, op));
  else rt_comm_allreduce(k.c, s, d, k.n, k.t, op);
  for (int64_t i = 0; i < k.n; i++) {
    double want = reduce(k.c, op, i, k.salt);
    CHECK(C_COLL, get(d, k.t, i) == stored(k.t, want), "%s allreduce %s %s n=%lld on %s [%lld]",
          form(k.nb), op == RT_COMM_SUM ? "sum" : "max", type_name[k.t], (long long)k.n,
          rt_comm_name(k.c), (long long)i);
  }
  free(s);
  if (!inplace) free(d);
}

static void check_allgather(Case k, int inplace) {
  int n = rt_comm_size(k.c), me_c = rt_comm_rank(k.c);
  void *d = alloc(k.n * n), *s = alloc(k.n);
  int esz = rt_comm_type_size(k.t);
  void *src = inplace ? (char *)d + (size_t)(k.n * me_c * esz) : s;
  fill(src, k.t, k.n, rt_comm_world_rank(), 0, k.salt);
  if (k.nb) complete(rt_comm_iallgather(k.c, src, d, k.n, k.t));
  else rt_comm_allgather(k.c, src, d, k.n, k.t);
  for (int r = 0; r < n; r++)
    for (int64_t i = 0; i < k.n; i++)
      CHECK(C_COLL, get(d, k.t, r * k.n + i) ==
                        stored(k.t, value(rt_comm_world_rank_of(k.c, r), i, k.salt)),
            "%s allgather%s %s n=%lld on %s", form(k.nb), inplace ? " in place" : "",
            type_name[k.t], (long long)k.n, rt_comm_name(k.c));
  free(d);
  free(s);
}

static void check_reduce_scatter(Case k, RtCommOp op, int inplace) {
  int n = rt_comm_size(k.c), me_c = rt_comm_rank(k.c);
  int esz = rt_comm_type_size(k.t);
  void *s = alloc(k.n * n), *d0 = alloc(k.n);
  void *d = inplace ? (char *)s + (size_t)(k.n * me_c * esz) : d0;
  fill(s, k.t, k.n * n, rt_comm_world_rank(), 0, k.salt);
  if (k.nb) complete(rt_comm_ireduce_scatter(k.c, s, d, k.n, k.t, op));
  else rt_comm_reduce_scatter(k.c, s, d, k.n, k.t, op);
  for (int64_t i = 0; i < k.n; i++)
    CHECK(C_COLL, get(d, k.t, i) == stored(k.t, reduce(k.c, op, me_c * k.n + i, k.salt)),
          "%s reduce-scatter%s %s %s n=%lld on %s", form(k.nb), inplace ? " in place" : "",
          op == RT_COMM_SUM ? "sum" : "max", type_name[k.t], (long long)k.n, rt_comm_name(k.c));
  /* In place, the rest of the send buffer must be left alone. */
  for (int64_t i = 0; inplace && i < k.n * n; i++)
    if (i / k.n != me_c)
      CHECK(C_COLL, get(s, k.t, i) == stored(k.t, value(rt_comm_world_rank(), i, k.salt)),
            "in-place reduce-scatter keeps the other parts");
  free(s);
  free(d0);
}

static void check_broadcast(Case k, int root) {
  void *b = alloc(k.n);
  if (rt_comm_rank(k.c) == root) fill(b, k.t, k.n, rt_comm_world_rank(), 0, k.salt);
  if (k.nb) complete(rt_comm_ibroadcast(k.c, b, k.n, k.t, root));
  else rt_comm_broadcast(k.c, b, k.n, k.t, root);
  int wroot = rt_comm_world_rank_of(k.c, root);
  for (int64_t i = 0; i < k.n; i++)
    CHECK(C_COLL, get(b, k.t, i) == stored(k.t, value(wroot, i, k.salt)),
          "%s broadcast from %d %s n=%lld on %s", form(k.nb), root, type_name[k.t],
          (long long)k.n, rt_comm_name(k.c));
  free(b);
}

/* All sizes on the world; the sub-communicators skip the largest, which
 * only makes the run longer. */
static void check_collectives(RtComm *c) {
  static const int64_t sizes[] = {1, 7, 1000, 65537};
  int nsizes = c == rt_comm_world() ? 4 : 3;
  for (int ti = 0; ti < 3; ti++)
    for (int si = 0; si < nsizes; si++)
      for (int nb = 0; nb < 2; nb++) {
        if (sizes[si] > 1000 && types[ti] != RT_COMM_F32) continue; /* one large type is enough */
        Case k = {c, types[ti], sizes[si], nb, ti * 8 + si * 2 + nb};
        check_allreduce(k, RT_COMM_SUM, 0);
        check_allreduce(k, RT_COMM_MAX, 0);
        check_allreduce(k, RT_COMM_SUM, 1);
        check_allgather(k, 0);
        check_allgather(k, 1);
        check_reduce_scatter(k, RT_COMM_SUM, 0);
        check_reduce_scatter(k, RT_COMM_MAX, 0);
        check_reduce_scatter(k, RT_COMM_SUM, 1);
        check_broadcast(k, 0);
        check_broadcast(k, rt_comm_size(c) - 1);
      }
  if (c == rt_comm_world()) { /* an empty message is no error */
    Case k = {c, RT_COMM_F32, 0, 0, 1};
    check_allreduce(k, RT_COMM_SUM, 0);
    check_allgather(k, 0);
  }
  rt_comm_barrier(c);
  complete(rt_comm_ibarrier(c));
}

/* ---- bf16 --------------------------------------------------------------- *
 * comm.h's bf16 reductions add the ranks' parts in rank order in fp32 and
 * round once to nearest even. The values are chosen so that bf16 sums are
 * inexact: a reduction that rounded after every addition, or added in
 * another order, gives other bits for many elements (counted and printed,
 * so the check is seen to discriminate). */

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t bf16_value(int wrank, int64_t i, int salt) {
  return to_bf16((float)value(wrank, i, salt) * 0.0137f + (float)(wrank % 3) * 1.7f);
}

/* The reduction of element i over c's ranks: rank order in fp32, rounded
 * once (stepwise = 0) or after every addition (1). */
static uint16_t bf16_want(RtComm *c, RtCommOp op, int64_t i, int salt, int stepwise) {
  float acc = from_bf16(bf16_value(rt_comm_world_rank_of(c, 0), i, salt));
  for (int r = 1; r < rt_comm_size(c); r++) {
    float v = from_bf16(bf16_value(rt_comm_world_rank_of(c, r), i, salt));
    acc = op == RT_COMM_MAX ? fmaxf(acc, v) : acc + v;
    if (stepwise) acc = from_bf16(to_bf16(acc));
  }
  return to_bf16(acc);
}

static long bf16_discriminating; /* elements where the two roundings differ */

static void check_bf16_reduction(RtComm *c, int64_t n, int nb, RtCommOp op, int scatter,
                                 int inplace) {
  int size = rt_comm_size(c), r = rt_comm_rank(c), salt = (int)n + 3 * nb + 7 * scatter;
  int64_t total = scatter ? n * size : n;
  uint16_t *s = alloc(total), *d0 = alloc(n);
  uint16_t *d = !inplace ? d0 : scatter ? s + n * r : s;
  for (int64_t i = 0; i < total; i++) s[i] = bf16_value(rt_comm_world_rank(), i, salt);
  RtCommReq *q = NULL;
  if (scatter && nb) q = rt_comm_ireduce_scatter(c, s, d, n, RT_COMM_BF16, op);
  else if (scatter) rt_comm_reduce_scatter(c, s, d, n, RT_COMM_BF16, op);
  else if (nb) q = rt_comm_iallreduce(c, s, d, n, RT_COMM_BF16, op);
  else rt_comm_allreduce(c, s, d, n, RT_COMM_BF16, op);
  complete(q);
  for (int64_t i = 0; i < n; i++) {
    int64_t at = scatter ? r * n + i : i;
    CHECK(C_COLL, d[i] == bf16_want(c, op, at, salt, 0),
          "%s bf16 %s%s %s n=%lld on %s [%lld]: %#x, not the rank-order fp32 %s rounded once",
          form(nb), scatter ? "reduce-scatter" : "allreduce", inplace ? " in place" : "",
          op == RT_COMM_SUM ? "sum" : "max", (long long)n, rt_comm_name(c), (long long)i, d[i],
          op == RT_COMM_SUM ? "sum" : "max");
    if (op == RT_COMM_SUM && bf16_want(c, op, at, salt, 1) != d[i]) bf16_discriminating++;
  }
  free(s);
  free(d0);
}

/* The reductions, and the bits of an all-gather, a broadcast and a send. */
static void check_bf16(RtComm *c) {
  static const int64_t sizes[] = {1, 7, 1000};
  for (int si = 0; si < 3; si++)
    for (int nb = 0; nb < 2; nb++)
      for (int scatter = 0; scatter < 2; scatter++) {
        check_bf16_reduction(c, sizes[si], nb, RT_COMM_SUM, scatter, 0);
        check_bf16_reduction(c, sizes[si], nb, RT_COMM_SUM, scatter, 1);
        check_bf16_reduction(c, sizes[si], nb, RT_COMM_MAX, scatter, 0);
      }
  int size = rt_comm_size(c), r = rt_comm_rank(c);
  uint16_t *all = alloc(7 * size), b[7];
  for (int i = 0; i < 7; i++) all[r * 7 + i] = b[i] = bf16_value(rt_comm_world_rank(), i, 99);
  rt_comm_allgather(c, all + r * 7, all, 7, RT_COMM_BF16);
  rt_comm_broadcast(c, b, 7, RT_COMM_BF16, size - 1);
  for (int q = 0; q < size; q++)
    for (int i = 0; i < 7; i++)
      CHECK(C_COLL, all[q * 7 + i] == bf16_value(rt_comm_world_rank_of(c, q), i, 99),
            "bf16 allgather on %s", rt_comm_name(c));
  for (int i = 0; i < 7; i++)
    CHECK(C_COLL, b[i] == bf16_value(rt_comm_world_rank_of(c, size - 1), i, 99),
          "bf16 broadcast on %s", rt_comm_name(c));
  if (size > 1) {
    uint16_t m[5], got[5];
    for (int i = 0; i < 5; i++) m[i] = bf16_value(rt_comm_world_rank(), i, 5);
    RtCommReq *q = rt_comm_irecv(c, got, 5, RT_COMM_BF16, (r + size - 1) % size);
    rt_comm_send(c, m, 5, RT_COMM_BF16, (r + 1) % size);
    complete(q);
    for (int i = 0; i < 5; i++)
      CHECK(C_P2P, got[i] == bf16_value(rt_comm_world_rank_of(c, (r + size - 1) % size), i, 5),
            "bf16 send/recv on %s", rt_comm_name(c));
  }
  free(all);
}

/* ---- All-to-all ------------------------------------------------------- */

/* Elements rank q sends rank p in the alltoallv check: uneven, and zero
 * for about a quarter of the pairs (the rank's own part among them on
 * some ranks), as a router's choices give. */
static int64_t a2a_count(int q, int p, int64_t scale) {
  int k = (q * 3 + p * 5 + 1) % 4;
  return k ? k * scale + (q + p) % 3 : 0;
}

/* Fills, or checks, one part of an all-to-all: element i of the part
 * world rank q sends rank p of c is value(q, p * 100000 + i), so that
 * every received element names its sender and its place. */
static void a2a_fill(void *buf, RtCommType t, int64_t at, int64_t len, int p, int salt) {
  fill((char *)buf + at * rt_comm_type_size(t), t, len, rt_comm_world_rank(), p * 100000, salt);
}
static void a2a_expect(RtComm *c, const void *buf, RtCommType t, int64_t at, int64_t len, int q,
                       int salt, const char *what) {
  int w = rt_comm_world_rank_of(c, q);
  for (int64_t i = 0; i < len; i++)
    CHECK(C_COLL, get(buf, t, at + i) == stored(t, value(w, rt_comm_rank(c) * 100000 + i, salt)),
          "%s %s on %s: element %lld of the %lld from %d", what, type_name[t],
          rt_comm_name(c), (long long)i, (long long)len, q);
}

/* alltoall of equal parts, then alltoallv with a2a_count's parts. The
 * count arrays are host memory (static), the data the allocator's. */
static void check_alltoall(RtComm *c) {
  int n = rt_comm_size(c), me_c = rt_comm_rank(c);
  static int64_t sc[64], rc[64];
  for (int ti = 0; ti < 3; ti++)
    for (int64_t len = 1; len <= 1000; len *= 31) {
      RtCommType t = types[ti];
      int salt = 300 + ti;
      void *s = alloc(len * n), *d = alloc(len * n);
      for (int p = 0; p < n; p++) a2a_fill(s, t, p * len, len, p, salt);
      rt_comm_alltoall(c, s, d, len, t);
      for (int q = 0; q < n; q++) a2a_expect(c, d, t, q * len, len, q, salt, "alltoall");
      free(s), free(d);

      int64_t ns = 0, nr = 0;
      for (int p = 0; p < n; p++) {
        ns += sc[p] = a2a_count(me_c, p, len);
        nr += rc[p] = a2a_count(p, me_c, len);
      }
      s = alloc(ns), d = alloc(nr);
      for (int p = 0, at = 0; p < n; at += (int)sc[p], p++) a2a_fill(s, t, at, sc[p], p, salt + 10);
      rt_comm_alltoallv(c, s, sc, d, rc, t);
      for (int q = 0, at = 0; q < n; at += (int)rc[q], q++)
        a2a_expect(c, d, t, at, rc[q], q, salt + 10, "alltoallv");
      free(s), free(d);
    }
}

/* ---- Point to point ---------------------------------------------------- */

static void check_message(RtComm *c, const void *b, RtCommType t, int64_t n, int from, int salt,
                          const char *what) {
  int w = rt_comm_world_rank_of(c, from);
  for (int64_t i = 0; i < n; i++)
    CHECK(C_P2P, get(b, t, i) == stored(t, value(w, i, salt)), "%s %s n=%lld from %d on %s",
          what, type_name[t], (long long)n, from, rt_comm_name(c));
}

/* A ring: blocking (rank 0 sends first, the others receive first, so that
 * the ring cannot deadlock whatever the size), then non-blocking with
 * three messages of different sizes in flight to the same peer, which must
 * arrive in the order posted. */
static void check_p2p(RtComm *c) {
  int n = rt_comm_size(c), r = rt_comm_rank(c), next = (r + 1) % n, prev = (r + n - 1) % n;
  if (n < 2) return;
  for (int ti = 0; ti < 3; ti++) {
    RtCommType t = types[ti];
    void *s = alloc(1000), *d = alloc(1000);
    fill(s, t, 1000, rt_comm_world_rank(), 0, 100 + ti);
    if (r == 0) rt_comm_send(c, s, 1000, t, next), rt_comm_recv(c, d, 1000, t, prev);
    else rt_comm_recv(c, d, 1000, t, prev), rt_comm_send(c, s, 1000, t, next);
    check_message(c, d, t, 1000, prev, 100 + ti, "blocking send/recv");
    static const int64_t len[3] = {1, 7, 1000};
    void *ss[3], *dd[3];
    RtCommReq *rq[6];
    for (int m = 0; m < 3; m++) {
      ss[m] = alloc(len[m]), dd[m] = alloc(len[m]);
      fill(ss[m], t, len[m], rt_comm_world_rank(), 0, 200 + m);
      rq[m] = rt_comm_irecv(c, dd[m], len[m], t, prev);
    }
    for (int m = 0; m < 3; m++) rq[3 + m] = rt_comm_isend(c, ss[m], len[m], t, next);
    complete(rq[0]);
    rq[0] = NULL;
    rt_comm_waitall(rq, 6);
    for (int m = 0; m < 3; m++) {
      check_message(c, dd[m], t, len[m], prev, 200 + m, "non-blocking send/recv in order");
      free(ss[m]), free(dd[m]);
    }
    free(s), free(d);
  }
}

/* ---- Determinism -------------------------------------------------------- */

/* Random floats (whose sums do round) summed by every rank of c: each
 * rank gets the same bits, and again on every repetition. Reports whether
 * the blocking and non-blocking forms agree, which MPI does not promise. */
static int check_determinism(RtComm *c, RtCommType t, int64_t n) {
  int sz = rt_comm_size(c), esz = rt_comm_type_size(t);
  size_t bytes = (size_t)(n * esz);
  char *s = alloc(n), *first[2] = {alloc(n), alloc(n)}, *d = alloc(n), *all = alloc(n * sz);
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rt_comm_world_rank() + 1);
  for (int64_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double v = (double)(x >> 11) / 9007199254740992.0 * 2 - 1;
    if (t == RT_COMM_F32) ((float *)s)[i] = (float)v;
    else ((double *)s)[i] = v;
  }
  for (int nb = 0; nb < 2; nb++)
    for (int rep = 0; rep < 3; rep++) {
      char *out = rep == 0 ? first[nb] : d;
      if (nb) rt_comm_wait(rt_comm_iallreduce(c, s, out, n, t, RT_COMM_SUM));
      else rt_comm_allreduce(c, s, out, n, t, RT_COMM_SUM);
      CHECK(C_DET, memcmp(out, first[nb], bytes) == 0, "%s allreduce %s n=%lld on %s repeats",
            form(nb), type_name[t], (long long)n, rt_comm_name(c));
      rt_comm_allgather(c, out, all, n * esz / 4, RT_COMM_I32);
      for (int r = 0; r < sz; r++)
        CHECK(C_DET, memcmp(all + (size_t)r * bytes, out, bytes) == 0,
              "%s allreduce %s n=%lld on %s: rank %d has other bits", form(nb), type_name[t],
              (long long)n, rt_comm_name(c), r);
    }
  int same_forms = memcmp(first[0], first[1], bytes) == 0;
  free(s), free(first[0]), free(first[1]), free(d), free(all);
  return same_forms;
}

/* ---- Byte counters ---------------------------------------------------- */

/* The rules of comm.h written out again, independently of rt_comm_bytes. */
static void check_counters(RtComm *c) {
  int n = rt_comm_size(c), r = rt_comm_rank(c);
  static float f[1001];
  static double g[16 * 13];
  static int32_t k[16 * 7];
  rt_comm_stats_reset(c);
  rt_comm_allreduce(c, f, f, 1000, RT_COMM_F32, RT_COMM_SUM);     /* S = 4000 */
  rt_comm_wait(rt_comm_iallreduce(c, g, g, 13, RT_COMM_F64, RT_COMM_MAX)); /* S = 104 */
  rt_comm_allgather(c, g, g + 13, 13, RT_COMM_F64);                /* part 104 */
  rt_comm_reduce_scatter(c, k, k + 7 * n, 7, RT_COMM_I32, RT_COMM_SUM); /* part 28 */
  rt_comm_broadcast(c, f, 1001, RT_COMM_F32, 0);                   /* S = 4004 */
  rt_comm_barrier(c);
  if (n > 1) {
    RtCommReq *q[2] = {rt_comm_irecv(c, g, 13, RT_COMM_F64, (r + n - 1) % n),
                       rt_comm_isend(c, g + 13, 13, RT_COMM_F64, (r + 1) % n)};
    rt_comm_waitall(q, 2);
  }
  rt_comm_alltoall(c, g, g + 104, 7, RT_COMM_F64); /* part 56 */
  int64_t sc[64], rc[64], a2av = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = a2a_count(r, p, 1), rc[p] = a2a_count(p, r, 1);
    if (p != r) a2av += 4 * sc[p];
  }
  rt_comm_alltoallv(c, k, sc, k + 56, rc, RT_COMM_I32);
  RtCommStats st = rt_comm_stats(c);
  int64_t want[RT_COMM_NKINDS] = {
      [RT_COMM_ALLREDUCE] = 2 * (n - 1) * 4000 / n + 2 * (n - 1) * 104 / n,
      [RT_COMM_ALLGATHER] = (n - 1) * 104,
      [RT_COMM_REDUCE_SCATTER] = (n - 1) * 28,
      [RT_COMM_BROADCAST] = (n - 1) * 4004 / n,
      [RT_COMM_SEND] = n > 1 ? 104 : 0,
      [RT_COMM_RECV] = n > 1 ? 104 : 0,
      [RT_COMM_ALLTOALL] = (n - 1) * 56 + a2av,
  };
  int64_t calls[RT_COMM_NKINDS] = {2, 1, 1, 1, n > 1, n > 1, 1, 2};
  int64_t sent = 0;
  for (int i = 0; i < RT_COMM_NKINDS; i++) {
    CHECK(C_BYTES, st.bytes[i] == want[i], "%s: kind %d counted %lld bytes, not %lld",
          rt_comm_name(c), i, (long long)st.bytes[i], (long long)want[i]);
    CHECK(C_BYTES, st.calls[i] == calls[i], "%s: kind %d counted %lld calls, not %lld",
          rt_comm_name(c), i, (long long)st.calls[i], (long long)calls[i]);
    if (i != RT_COMM_RECV) sent += want[i];
  }
  CHECK(C_BYTES, st.sent == sent, "%s: sent %lld, not %lld", rt_comm_name(c), (long long)st.sent,
        (long long)sent);
  rt_comm_stats_reset(c);
  st = rt_comm_stats(c);
  CHECK(C_BYTES, st.sent == 0 && st.calls[RT_COMM_ALLREDUCE] == 0, "reset clears the counters");
}

/* The formula on known numbers, the ones the comm report will print. */
static void check_bytes_table(void) {
  static const struct {
    RtCommKind k;
    int n;
    int64_t count;
    RtCommType t;
    int64_t want;
  } tab[] = {
      {RT_COMM_ALLREDUCE, 2, 1000, RT_COMM_F32, 4000},
      {RT_COMM_ALLREDUCE, 4, 1000, RT_COMM_F32, 6000},
      {RT_COMM_ALLREDUCE, 8, 1000, RT_COMM_F32, 7000},
      {RT_COMM_ALLREDUCE, 3, 7, RT_COMM_F64, 74}, /* 2 * 2 * 56 / 3 = 74.67 */
      {RT_COMM_ALLREDUCE, 1, 1000, RT_COMM_F32, 0},
      {RT_COMM_ALLGATHER, 4, 7, RT_COMM_F64, 168},
      {RT_COMM_REDUCE_SCATTER, 8, 7, RT_COMM_I32, 196},
      {RT_COMM_BROADCAST, 8, 1001, RT_COMM_F32, 3503}, /* 7 * 4004 / 8 = 3503.5 */
      {RT_COMM_SEND, 2, 5, RT_COMM_F64, 40},
      {RT_COMM_BARRIER, 8, 0, RT_COMM_I32, 0},
      {RT_COMM_ALLTOALL, 4, 7, RT_COMM_F64, 168},
      {RT_COMM_ALLTOALL, 1, 7, RT_COMM_F64, 0},
  };
  for (size_t i = 0; i < sizeof tab / sizeof *tab; i++)
    CHECK(C_BYTES, rt_comm_bytes(tab[i].k, tab[i].n, tab[i].count, tab[i].t) == tab[i].want,
          "rt_comm_bytes table entry %zu", i);
}

/* ---- The communicators of a mesh --------------------------------------- */

static void check_members(RtComms *cs) {
  for (int a = 0; a < RT_AXIS_COUNT; a++) {
    RtComm *c = cs->axis[a];
    int want[64], n = rt_mesh_group(cs->mesh, (RtAxis)a, me, want);
    CHECK(C_MEMBERS, (c == NULL) == (n == 0), "%s communicator exists iff the rank has a group",
          rt_axis_name((RtAxis)a));
    if (!c) continue;
    CHECK(C_MEMBERS, rt_comm_size(c) == n && rt_comm_rank(c) == rt_mesh_axis_index(cs->mesh, a, me),
          "%s communicator: size and rank", rt_comm_name(c));
    int got[64];
    rt_comm_allgather(c, &me, got, 1, RT_COMM_I32); /* who really answers */
    for (int i = 0; i < n; i++)
      CHECK(C_MEMBERS, got[i] == want[i] && rt_comm_world_rank_of(c, i) == want[i],
            "t=%d p=%d d=%d: member %d of the %s communicator of rank %d is %d, not %d",
            cs->mesh.tp, cs->mesh.pp, cs->mesh.dp, i, rt_comm_name(c), me, got[i], want[i]);
  }
  RtCoord k = rt_mesh_coord(cs->mesh, me);
  CHECK(C_MEMBERS, cs->coord.tp == k.tp && cs->coord.dp == k.dp && cs->coord.pp == k.pp,
        "coordinates of the comms");
}

/* The meshes each world size is checked on: for 8 ranks those the layout
 * tests name, for fewer every factorisation. */
static const RtMesh meshes[] = {{2, 2, 2}, {4, 1, 2}, {1, 4, 2}, {8, 1, 1},
                                {2, 2, 1}, {2, 1, 2}, {1, 2, 2}, {4, 1, 1}, {1, 4, 1}, {1, 1, 4},
                                {2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {1, 1, 1}};

/* The expert groups of --ep as runtime/mesh/ep.c cuts them out of a data
 * axis of an even size d: groups of two consecutive ranks and the d/2
 * ranks holding the same experts; each checked as an axis is (on NCCL,
 * the split's twin), then freed. */
static void check_splits(RtComm *data) {
  int d = rt_comm_size(data), r = rt_comm_rank(data);
  if (d < 2 || d % 2) return;
  RtComm *parts[2] = {rt_comm_split(data, r / 2, r % 2, "expert"),
                      rt_comm_split(data, r % 2, r / 2, "expert replicas")};
  int want[2][2] = {{2, r % 2}, {d / 2, r / 2}};
  for (int i = 0; i < 2; i++) {
    CHECK(C_COLL, rt_comm_size(parts[i]) == want[i][0] && rt_comm_rank(parts[i]) == want[i][1],
          "%s: rank %d of %d, not %d of %d", rt_comm_name(parts[i]), rt_comm_rank(parts[i]),
          rt_comm_size(parts[i]), want[i][1], want[i][0]);
    check_collectives(parts[i]);
    check_alltoall(parts[i]);
  }
  for (int i = 0; i < 2; i++) rt_comm_free(parts[i]);
}

static void check_meshes(int *nmeshes, int *same_forms, int *ndet) {
  for (size_t i = 0; i < sizeof meshes / sizeof *meshes; i++) {
    if (rt_mesh_size(meshes[i]) != nworld) continue;
    RtComms *cs = rt_comms_new(meshes[i]);
    check_members(cs);
    for (int a = 0; a < RT_AXIS_COUNT; a++) {
      RtComm *c = cs->axis[a];
      if (!c) continue;
      check_collectives(c);
      check_bf16(c);
      check_p2p(c);
      check_alltoall(c);
      check_counters(c);
      if (rt_comm_size(c) > 1) *same_forms &= check_determinism(c, RT_COMM_F32, 4099), ++*ndet;
    }
    check_splits(cs->axis[RT_AXIS_DATA]);
    rt_comm_barrier(rt_comm_world());
    rt_comms_free(cs);
    ++*nmeshes;
  }
}

static int run_checks(void) {
  double t0 = rt_now();
  test_layout();
  check_bytes_table();
  RtComm *w = rt_comm_world();
  check_collectives(w);
  check_bf16(w);
  check_p2p(w);
  check_alltoall(w);
  check_counters(w);
  int same_forms = 1, ndet = 0, nmeshes = 0;
  if (nworld > 1) {
    same_forms &= check_determinism(w, RT_COMM_F32, 65537);
    same_forms &= check_determinism(w, RT_COMM_F64, 1000);
    ndet += 2;
  }
  check_meshes(&nmeshes, &same_forms, &ndet);
  /* Counts summed over the ranks as doubles: exact far beyond any count. */
  double total[C_NCAT];
  for (int i = 0; i < C_NCAT; i++) total[i] = (double)nchecks[i];
  rt_comm_allreduce(w, total, total, C_NCAT, RT_COMM_F64, RT_COMM_SUM);
  double disc = (double)bf16_discriminating;
  rt_comm_allreduce(w, &disc, &disc, 1, RT_COMM_F64, RT_COMM_SUM);
  if (me == 0) {
    printf("comm: %d ranks; the world and every communicator of %d meshes:", nworld, nmeshes);
    for (size_t i = 0; i < sizeof meshes / sizeof *meshes; i++)
      if (rt_mesh_size(meshes[i]) == nworld)
        printf(" (t%d,p%d,d%d)", meshes[i].tp, meshes[i].pp, meshes[i].dp);
    printf("\n  all collectives blocking and non-blocking (wait and test), f32/f64/i32, "
           "sizes 1/7/1000 (+0 and 65537 on the world), in place and not\n");
    printf("  all-to-all: equal parts (1/31/961 elements) and uneven ones, zero to about a "
           "quarter of the peers, every element checked\n");
    printf("  bf16: all-reduce and reduce-scatter (sum, max) equal to the rank-order fp32 "
           "result rounded once, on %.0f elements where rounding after each addition "
           "differs; all-gather, broadcast and send/recv move the bits\n",
           disc);
    for (int i = 0; i < C_NCAT; i++)
      printf("  %-15s %9.0f checks passed (all ranks)\n", cat_name[i], total[i]);
    printf("  determinism: %d reductions gave the same bits on every rank and every repeat; "
           "blocking and non-blocking forms %s\n",
           ndet, same_forms ? "agreed too" : "differed in the last bits (allowed)");
    printf("  %.2f s\n", rt_now() - t0);
  }
  return 0;
}

/* ---- Failures ---------------------------------------------------------- */

/* Every rank first makes sure the others are up, then the chosen one fails
 * while the others block in operations that can never complete without it. */
static int run_failure(const char *mode, int who) {
  RtComm *w = rt_comm_world();
  int32_t x[40] = {0};
  rt_comm_barrier(w);
  if (!strcmp(mode, "mesh")) {
    rt_comms_new((RtMesh){2, 3, 5});
  } else if (!strcmp(mode, "misuse")) {
    if (me == who) rt_comm_send(w, x, 1, RT_COMM_I32, 99);
  } else if (!strcmp(mode, "truncate") || !strcmp(mode, "short")) {
    int big = !strcmp(mode, "short");
    if (me == 0) rt_comm_send(w, x, big ? 5 : 10, RT_COMM_I32, 1);
    if (me == 1) rt_comm_recv(w, x, big ? 10 : 5, RT_COMM_I32, 0);
  } else if (!strcmp(mode, "a2a")) {
    int64_t sc[64] = {0}, rc[64] = {0};
    for (int p = 0; p < nworld; p++) sc[p] = rc[p] = 2;
    if (me == who) rc[0] = 3; /* rank 0 sends 2 */
    rt_comm_alltoallv(w, x, sc, x + 20, rc, RT_COMM_I32);
  } else if (me == who) {
    usleep(200 * 1000); /* let the others block first */
    if (!strcmp(mode, "exit")) exit(1);
    rt_comm_fatal("injected failure, on purpose");
  } else {
    rt_comm_allreduce(w, x, x, 10, RT_COMM_I32, RT_COMM_SUM);
  }
  /* Anyone still here waits for a message that never comes. */
  rt_comm_recv(w, x, 1, RT_COMM_I32, (me + 1) % nworld);
  fprintf(stderr, "rank %d: the failure did not stop the job\n", me);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "check";
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!strcmp(mode, "layout")) { /* arithmetic only: no MPI */
    test_layout();
    check_bytes_table();
    printf("layout: %ld checks passed: 4 hand-worked ranks of (t,p,d) = (2,2,2) (4,1,2) "
           "(1,4,2) (8,1,1); formula, round trip and group partitions for every mesh "
           "up to 16 ranks; %ld byte-rule entries\n",
           nchecks[C_LAYOUT], nchecks[C_BYTES]);
    return 0;
  }
  rt_comm_init(&argc, &argv);
  me = rt_comm_world_rank();
  nworld = rt_comm_world_size();
  int rc;
  if (!strcmp(mode, "check")) {
    rc = run_checks();
  } else if (!strcmp(mode, "fail") || !strcmp(mode, "exit") || !strcmp(mode, "truncate") ||
             !strcmp(mode, "short") || !strcmp(mode, "mesh") || !strcmp(mode, "misuse") ||
             !strcmp(mode, "a2a")) {
    if (nworld < 2) rt_comm_fatal("comm_test %s needs at least 2 ranks", mode);
    rc = run_failure(mode, argc > 2 ? atoi(argv[2]) % nworld : 1);
  } else {
    rt_comm_fatal("comm_test: unknown mode '%s'", mode);
  }
  rt_comm_finalize();
  return rc;
}
