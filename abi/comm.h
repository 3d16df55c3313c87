/* The bytes a rank sends in one call of a collective: what the compiler's
 * communication report predicts (passes/comm_report.c, `shardc compile
 * --report comm`) and what the runtime's communicators count
 * (runtime/comm/comm.h, rt_comm_stats), which must agree to the byte
 * (bench/tp_overhead.sh checks it).
 *
 * Every call counts as the bandwidth-optimal (ring) algorithm sends it,
 * whatever algorithm the backend really chose, so the numbers are a
 * property of the program. With n ranks and S = count * element size,
 * each call sends:
 *   allreduce       2 * (n - 1) * S / n      (S = the whole buffer)
 *   allgather       (n - 1) * S              (S = one rank's part; the
 *   reduce_scatter  (n - 1) * S               whole buffer is n * S)
 *   broadcast       (n - 1) * S / n          (the (n - 1) * S every
 *                                             broadcast moves, shared evenly)
 *   send            S
 *   recv            S received (counted apart: none of what a rank sends)
 *   barrier         0
 *   alltoall        (n - 1) * S              (S = one peer's part)
 *   alltoallv       the bytes of the send counts to the other ranks
 *                   (a rank's part for itself moves nothing); the
 *                   compiler predicts it from the planned worst case
 * Divisions are integer divisions of the product, per call. A
 * communicator of one rank sends nothing. */
#ifndef SHARD_ABI_COMM_H
#define SHARD_ABI_COMM_H

#include <stdint.h>

typedef enum RtCommKind {
  RT_COMM_ALLREDUCE,
  RT_COMM_ALLGATHER,
  RT_COMM_REDUCE_SCATTER,
  RT_COMM_BROADCAST,
  RT_COMM_SEND,
  RT_COMM_RECV,
  RT_COMM_BARRIER,
  RT_COMM_ALLTOALL, /* rt_comm_alltoall and rt_comm_alltoallv */
  RT_COMM_NKINDS
} RtCommKind;

/* S times num / den is what one call counts, by the table above (n > 1). */
static inline int64_t rt_comm_ring_num(RtCommKind kind, int n) {
  switch (kind) {
  case RT_COMM_ALLREDUCE: return 2 * (int64_t)(n - 1);
  case RT_COMM_ALLGATHER:
  case RT_COMM_REDUCE_SCATTER:
  case RT_COMM_BROADCAST:
  case RT_COMM_ALLTOALL: return n - 1;
  case RT_COMM_SEND:
  case RT_COMM_RECV: return 1;
  default: return 0;
  }
}
static inline int64_t rt_comm_ring_den(RtCommKind kind, int n) {
  return kind == RT_COMM_ALLREDUCE || kind == RT_COMM_BROADCAST ? n : 1;
}

/* The bytes one call of `kind` on n ranks adds to the counters, for
 * `bytes` = count * element size. */
static inline int64_t rt_comm_ring_bytes(RtCommKind kind, int n, int64_t bytes) {
  if (n <= 1) return 0;
  return rt_comm_ring_num(kind, n) * bytes / rt_comm_ring_den(kind, n);
}

#endif
