/* tests/runtime/comm's comm_test.c run against the NCCL backend of comm.h
 * (runtime/comm_nccl.c) under the CPU emulator, with every buffer it
 * allocates in device memory: so that the operations on the axis
 * communicators go through comm_nccl.c's NCCL path (the stand-in of
 * nccl_mpi.c), those on the world, which has no NCCL twin, through its
 * host staging, and the counters, requests, groups of kept messages,
 * streams and events are comm_nccl.c's own. The host scalars comm_test.c
 * keeps in static arrays stay host memory and take the MPI path, as the
 * runtime's do.
 *
 * Besides comm_test.c's modes, failures on the NCCL path (a mesh whose
 * tensor communicator is the whole world, every rank but one waiting in
 * an all-reduce of device memory on it):
 *   comm_device_test nccl_fail R   rank R fails (rt_comm_fatal)
 *   comm_device_test nccl_exit R   rank R exits(1) without a word
 *   comm_device_test nccl_hang R   rank R stops answering; the others'
 *                                  watchdog (--timeout 2) ends them
 * and the order between streams (the blocking calls and waits order the
 * compute stream after NCCL's, the host does not wait):
 *   comm_device_test nccl_order    an all-reduce on a communicator split
 *                                  from another over the other's sum (the
 *                                  order between streams is transitive);
 *                                  a copy on the compute stream after a
 *                                  blocking all-reduce and after a wait
 *                                  reads the sum; one after a non-blocking
 *                                  all-reduce not waited for is refused
 *                                  by the emulator, as it races on a GPU */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *dev_calloc(size_t n, size_t size) {
  void *p = NULL;
  if (cudaMalloc(&p, n * size) != cudaSuccess || cudaMemset(p, 0, n * size) != cudaSuccess) {
    fprintf(stderr, "comm_device_test: cudaMalloc of %zu bytes failed\n", n * size);
    exit(1);
  }
  return p;
}

static void dev_free(void *p) {
  if (cudaFree(p) != cudaSuccess) {
    fprintf(stderr, "comm_device_test: cudaFree failed\n");
    exit(1);
  }
}

#define calloc dev_calloc
#define free dev_free
#define main comm_test_main
#include "../../runtime/comm/comm_test.c"
#undef calloc
#undef free
#undef main

#include "kernels_cuda.h"
#include "watchdog.h"

/* The test has not checked the NCCL path unless its operations took it. */
static void report_nccl(void) {
  long long ops = 0, groups = 0;
  shard_nccl_emu_ops(&ops, &groups);
  if (ops == 0) {
    fprintf(stderr, "comm_device_test: rank %d: no operation went through NCCL\n", me);
    _exit(1);
  }
  if (me == 0) printf("  rank 0: %lld operations on NCCL, %lld groups of messages\n", ops, groups);
}

static int nccl_failure(const char *mode, int who) {
  if (!strcmp(mode, "nccl_hang")) rt_wd_start("comm_device_test"), rt_wd_timeout(2);
  RtComms *cs = rt_comms_new((RtMesh){nworld, 1, 1});
  RtComm *t = cs->axis[RT_AXIS_TENSOR];
  float *x = dev_calloc(1000, sizeof *x);
  rt_comm_barrier(rt_comm_world());
  if (me == who) {
    usleep(200 * 1000); /* let the others block first */
    if (!strcmp(mode, "nccl_exit")) exit(1);
    if (!strcmp(mode, "nccl_fail")) rt_comm_fatal("injected failure, on purpose");
    for (;;) pause();
  }
  rt_comm_allreduce(t, x, x, 1000, RT_COMM_F32, RT_COMM_SUM);
  fprintf(stderr, "rank %d: the failure did not stop the job\n", me);
  return 0;
}

/* Each rank adds (rank + 1): the sum is n (n + 1) / 2 everywhere. */
static int nccl_order(void) {
  RtComms *cs = rt_comms_new((RtMesh){nworld, 1, 1});
  RtComm *t = cs->axis[RT_AXIS_TENSOR];
  float *x = dev_calloc(1000, sizeof *x), h[1000], want = (float)(nworld * (nworld + 1) / 2);
  cudaStream_t compute = k_cuda_stream();
  /* The order is transitive: a blocking all-reduce on t, then one over its
   * sum on a communicator split from t (another stream), which waits for
   * the compute stream, which waited for t's. */
  RtComm *split = rt_comm_split(t, 0, me, "split");
  for (int i = 0; i < 1000; i++) h[i] = (float)(me + 1);
  cudaMemcpyAsync(x, h, sizeof h, cudaMemcpyHostToDevice, compute);
  rt_comm_allreduce(t, x, x, 1000, RT_COMM_F32, RT_COMM_SUM);
  rt_comm_allreduce(split, x, x, 1000, RT_COMM_F32, RT_COMM_SUM);
  cudaMemcpyAsync(h, x, sizeof h, cudaMemcpyDeviceToHost, compute);
  cudaStreamSynchronize(compute);
  rt_comm_free(split);
  if (me == 0)
    printf("  all-reduce, then another communicator's over its sum: %g (want %g)\n", h[0],
           want * (float)nworld);
  if (h[0] != want * (float)nworld || h[999] != want * (float)nworld) {
    fprintf(stderr, "rank %d: the sum of sums is %g, not %g\n", me, h[0], want * (float)nworld);
    return 1;
  }
  for (int way = 0; way < 3; way++) {
    for (int i = 0; i < 1000; i++) h[i] = (float)(me + 1);
    cudaMemcpyAsync(x, h, sizeof h, cudaMemcpyHostToDevice, compute);
    RtCommReq *r = NULL;
    if (way == 0) rt_comm_allreduce(t, x, x, 1000, RT_COMM_F32, RT_COMM_SUM);
    else r = rt_comm_iallreduce(t, x, x, 1000, RT_COMM_F32, RT_COMM_SUM);
    if (way == 1) rt_comm_wait(r);
    if (way == 2 && me == 0)
      fprintf(stderr, "rank 0: reading a non-blocking all-reduce's sum before its wait\n");
    cudaMemcpyAsync(h, x, sizeof h, cudaMemcpyDeviceToHost, compute);
    cudaStreamSynchronize(compute);
    if (me == 0)
      printf("  %s: sum %g (want %g)\n", way == 0 ? "blocking all-reduce, then a copy" :
             way == 1 ? "non-blocking all-reduce, wait, then a copy" : "no wait", h[0], want);
    if (h[0] != want || h[999] != want) {
      fprintf(stderr, "rank %d: the sum is %g, not %g\n", me, h[0], want);
      return 1;
    }
    if (way == 2) rt_comm_wait(r);
  }
  fprintf(stderr, "rank %d: the copy before the wait was not refused\n", me);
  return 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "check";
  if (!strcmp(mode, "check")) atexit(report_nccl);
  if (strncmp(mode, "nccl_", 5) != 0) return comm_test_main(argc, argv);
  rt_comm_init(&argc, &argv);
  me = rt_comm_world_rank();
  nworld = rt_comm_world_size();
  if (nworld < 2) rt_comm_fatal("comm_device_test %s needs at least 2 ranks", mode);
  int rc = !strcmp(mode, "nccl_order") ? nccl_order()
                                        : nccl_failure(mode, argc > 2 ? atoi(argv[2]) % nworld : 1);
  rt_comm_finalize();
  return rc;
}
