/* The emulator's own checks: that it computes what CUDA would (shuffles,
 * barriers, bf16 rounding, cuBLASLt's epilogues, graph replay) and that it
 * catches what it promises to catch (divergent barriers, bad shuffle
 * masks, bad launch configurations, copies outside an allocation, calls a
 * capture forbids, shared memory read before it is written). Misuse that
 * aborts runs in a child process, which must die with the expected
 * message. One line per check; exit 1 if any fails. */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../../kernels/cuda/common.cuh"
#include "../../../kernels/cuda/launch.h"

static int failures;

static void expect(bool ok, const char *what) {
  printf("%-60s %s\n", what, ok ? "ok" : "FAIL");
  failures += !ok;
}

/* Runs fn in a child, which must abort with `message` on stderr. */
static void expect_abort(void (*fn)(), const char *message, const char *what) {
  int fds[2];
  if (pipe(fds)) abort();
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    fn();
    _exit(0);
  }
  close(fds[1]);
  char buf[4096];
  size_t n = 0;
  ssize_t r;
  while (n < sizeof buf - 1 && (r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
  buf[n] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  bool ok = WIFSIGNALED(status) && strstr(buf, message);
  expect(ok, what);
  if (!ok) fprintf(stderr, "  child said: %s\n", buf);
}

/* ------------------------------------------------------------- kernels */

__global__ void shuffles(int *out) {
  int lane = threadIdx.x % 32;
  int x = __shfl_xor_sync(0xffffffffu, lane * 10, 3);
  int i = __shfl_sync(0xffffffffu, lane, 5);
  int d = __shfl_down_sync(0xffffffffu, lane, 4);
  int u = __shfl_up_sync(0xffffffffu, lane, 2, 8);
  unsigned b = __ballot_sync(0xffffffffu, lane % 3 == 0);
  out[threadIdx.x * 5 + 0] = x;
  out[threadIdx.x * 5 + 1] = i;
  out[threadIdx.x * 5 + 2] = d;
  out[threadIdx.x * 5 + 3] = u;
  out[threadIdx.x * 5 + 4] = (int)b;
}

/* Block reversal through shared memory: needs the barrier. */
template <typename T> __global__ void reverse(T *y, const T *x) {
  __shared__ T buf[256];
  buf[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  y[blockIdx.x * blockDim.x + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

__global__ void read_shared(float *y) {
  __shared__ float buf[64];
  if (threadIdx.x == 0) buf[1] = 1.0f;
  __syncthreads();
  y[threadIdx.x] = buf[threadIdx.x];
}

__global__ void divergent_barrier(int *) {
  if (threadIdx.x < 16) return;
  __syncthreads();
}

__global__ void two_barriers(int *) {
  if (threadIdx.x % 2) __syncthreads();
  else __syncthreads();
}

__global__ void bad_mask(int *out) {
  if (threadIdx.x % 32 < 16) out[0] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

__global__ void add_one(float *y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] += 1.0f;
}

/* Dynamic shared memory of the launch's size: each thread writes its
 * index at both ends, then reads its neighbour's back. */
__global__ void dynamic_reverse(int *y, int bytes) {
  KC_DYNAMIC_SHARED(raw);
  int *buf = (int *)raw, n = bytes / 4;
  buf[threadIdx.x] = (int)threadIdx.x;
  buf[n - 1 - threadIdx.x] = (int)threadIdx.x;
  __syncthreads();
  y[threadIdx.x] = buf[n - 1 - (blockDim.x - 1 - threadIdx.x)] + buf[blockDim.x - 1 - threadIdx.x];
}

/* cp.async: each thread copies 4 floats into shared memory, reads them
 * before the wait (y[0..]) and after it (y[4 * blockDim.x ..]). */
__global__ void async_copy(float *y, const float *x) {
  alignas(16) __shared__ float buf[4 * 64];
  int t = (int)threadIdx.x;
  kc_cp_async16(&buf[4 * t], &x[4 * t]);
  kc_cp_async_commit();
  y[t] = buf[4 * t];
  kc_cp_async_wait<0>();
  y[64 + t] = buf[4 * t + 3];
}

__global__ void async_unwaited(float *y, const float *x) {
  alignas(16) __shared__ float buf[4 * 32];
  kc_cp_async16(&buf[4 * threadIdx.x], &x[4 * threadIdx.x]);
  kc_cp_async_commit();
  y[threadIdx.x] = 0;
}

static void run_async_unwaited() {
  float *d;
  cudaMalloc((void **)&d, 1024);
  KC_LAUNCH(1, 32, 0, 0, async_unwaited)(d, (const float *)d);
}

/* 16-byte vector loads through kernels/cuda/common.cuh's kc_ldv, from
 * element `at` of x: 4 floats each. */
__global__ void vector_load(float *y, const float *x, int at) {
  float v[4];
  kc_ldv<float, 4>(x + at, threadIdx.x, v);
  for (int i = 0; i < 4; i++) y[4 * threadIdx.x + i] = v[i];
}

static void run_misaligned_vector() {
  float *d;
  cudaMalloc((void **)&d, 256);
  KC_LAUNCH(1, 4, 0, 0, vector_load)(d, (const float *)d, 1);
}

static void run_divergent() {
  int *d;
  cudaMalloc((void **)&d, 4);
  KC_LAUNCH(1, 64, 0, 0, divergent_barrier)(d);
}
static void run_two_barriers() {
  int *d;
  cudaMalloc((void **)&d, 4);
  KC_LAUNCH(1, 64, 0, 0, two_barriers)(d);
}
static void run_bad_mask() {
  int *d;
  cudaMalloc((void **)&d, 4);
  KC_LAUNCH(1, 32, 0, 0, bad_mask)(d);
}

/* Hopper's limits: 48 KB of dynamic shared memory without the attribute,
 * up to 227 KB with it, and an attribute above that refused. */
static void test_dynamic_shared() {
  int *d, h[64];
  cudaMalloc((void **)&d, sizeof h);
  const int big = 100 * 1024, optin = 227 * 1024;
  cudaGetLastError();
  KC_LAUNCH_FN(1, 64, 48 * 1024, 0, dynamic_reverse)(d, 48 * 1024);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  bool ok = cudaGetLastError() == cudaSuccess;
  for (int t = 0; t < 64; t++) ok &= h[t] == 2 * (63 - t);
  expect(ok, "48 KiB of dynamic shared memory without the attribute");
  KC_LAUNCH_FN(1, 64, big, 0, dynamic_reverse)(d, big);
  expect(cudaGetLastError() == cudaErrorInvalidConfiguration,
         "100 KiB dynamic without the attribute: cudaErrorInvalidConfiguration");
  expect(cudaFuncSetAttribute(dynamic_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              optin + 1) == cudaErrorInvalidValue,
         "above 227 KiB: cudaErrorInvalidValue");
  cudaGetLastError();
  expect(cudaFuncSetAttribute(dynamic_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              optin) == cudaSuccess, "the attribute at 227 KiB");
  memset(h, 0, sizeof h);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  KC_LAUNCH_FN(1, 64, big, 0, dynamic_reverse)(d, big);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  ok = cudaGetLastError() == cudaSuccess;
  for (int t = 0; t < 64; t++) ok &= h[t] == 2 * (63 - t);
  expect(ok, "100 KiB of dynamic shared memory with the attribute");
  KC_LAUNCH_FN(1, 64, optin + 16, 0, dynamic_reverse)(d, optin + 16);
  expect(cudaGetLastError() == cudaErrorInvalidConfiguration,
         "227 KiB + 16 with the attribute: cudaErrorInvalidConfiguration");
  cudaFree(d);
}

/* A copy lands at its wait, not before: a read before the wait sees the
 * NaN bytes of unwritten shared memory, as a kernel that forgets the wait
 * might on the hardware; a thread that never waits aborts. */
static void test_async_copies() {
  float x[256], y[128], *dx, *dy;
  for (int i = 0; i < 256; i++) x[i] = (float)i;
  cudaMalloc((void **)&dx, sizeof x);
  cudaMalloc((void **)&dy, sizeof y);
  cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice);
  KC_LAUNCH(1, 64, 0, 0, async_copy)(dy, (const float *)dx);
  cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost);
  bool before = true, after = true;
  for (int t = 0; t < 64; t++) before &= isnan(y[t]), after &= y[64 + t] == (float)(4 * t + 3);
  expect(before && after, "cp.async lands at its wait (NaN before, the data after)");
  expect_abort(run_async_unwaited, "cp.async copies it never waited for",
               "a thread that exits with copies not waited for aborts");
  cudaFree(dx);
  cudaFree(dy);
}

static void test_kernels() {
  int *d, h[64 * 5];
  cudaMalloc((void **)&d, sizeof h);
  KC_LAUNCH(1, 64, 0, 0, shuffles)(d);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  bool ok = true;
  for (int t = 0; t < 64; t++) {
    int l = t % 32;
    unsigned ballot = 0;
    for (int k = 0; k < 32; k += 3) ballot |= 1u << k;
    ok &= h[t * 5] == (l ^ 3) * 10 && h[t * 5 + 1] == 5 && h[t * 5 + 2] == (l + 4 < 32 ? l + 4 : l) &&
          h[t * 5 + 3] == (l % 8 >= 2 ? l - 2 : l) && (unsigned)h[t * 5 + 4] == ballot;
  }
  expect(ok, "shuffles (xor, idx, down, up with width 8) and ballot");
  cudaFree(d);

  float x[512], y[512], *dx, *dy;
  for (int i = 0; i < 512; i++) x[i] = (float)i;
  cudaMalloc((void **)&dx, sizeof x);
  cudaMalloc((void **)&dy, sizeof y);
  cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice);
  KC_LAUNCH(2, 256, 0, 0, reverse)(dy, (const float *)dx);
  cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost);
  ok = true;
  for (int i = 0; i < 512; i++) ok &= y[i] == x[i / 256 * 256 + 255 - i % 256];
  expect(ok, "__syncthreads and __shared__ in a template kernel");

  KC_LAUNCH(1, 64, 0, 0, read_shared)(dy);
  cudaMemcpy(y, dy, 64 * 4, cudaMemcpyDeviceToHost);
  expect(y[1] == 1.0f && isnan(y[0]) && isnan(y[63]), "shared memory is NaN until written");

  expect_abort(run_divergent, "has exited (a barrier in divergent code)", "a barrier some threads skip aborts");
  expect_abort(run_two_barriers, "threads wait at different __syncthreads", "two different barriers abort");
  float v16[16], w16[16], *dv;
  for (int i = 0; i < 16; i++) v16[i] = (float)i;
  cudaMalloc((void **)&dv, 2 * sizeof v16);
  cudaMemcpy(dv, v16, sizeof v16, cudaMemcpyHostToDevice);
  KC_LAUNCH(1, 4, 0, 0, vector_load)(dv + 16, (const float *)dv, 0);
  cudaMemcpy(w16, dv + 16, sizeof w16, cudaMemcpyDeviceToHost);
  expect(memcmp(v16, w16, sizeof v16) == 0, "aligned 16-byte vector loads (kc_ldv)");
  cudaFree(dv);
  expect_abort(run_misaligned_vector, "misaligned 16-byte access", "a misaligned 16-byte vector load aborts");
  expect_abort(run_bad_mask, "is in the mask 0xffffffff of the warp collective", "a shuffle whose mask names absent lanes aborts");

  cudaGetLastError();
  KC_LAUNCH(1, 1025, 0, 0, add_one)(dy, 1);
  expect(cudaGetLastError() == cudaErrorInvalidConfiguration, "1025 threads: cudaErrorInvalidConfiguration");
  KC_LAUNCH(dim3(1, 65536), 32, 0, 0, add_one)(dy, 1);
  expect(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y 65536: cudaErrorInvalidConfiguration");
  KC_LAUNCH(1, 32, 49 * 1024, 0, add_one)(dy, 1);
  expect(cudaGetLastError() == cudaErrorInvalidConfiguration, "49 KiB shared: cudaErrorInvalidConfiguration");
  expect(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears the error");
  cudaFree(dx);
  cudaFree(dy);
  test_dynamic_shared();
  test_async_copies();
}

/* ----------------------------------------------------- memory, graphs */

static void test_memory() {
  float *d, h[16] = {0};
  cudaMalloc((void **)&d, 8 * sizeof(float));
  expect(cudaMemcpy(d, h, 9 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
         "a copy past the end of an allocation: cudaErrorInvalidValue");
  expect(cudaMemcpy(h, d + 1, 8 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
         "a copy from inside past the end: cudaErrorInvalidValue");
  expect(cudaMemcpy(h, h + 8, 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
         "host memory named as device: cudaErrorInvalidValue");
  expect(cudaMemset(d + 4, 0, 5 * sizeof(float)) == cudaErrorInvalidValue,
         "a memset past the end: cudaErrorInvalidValue");
  struct cudaPointerAttributes a;
  cudaPointerGetAttributes(&a, d + 3);
  bool dev = a.type == cudaMemoryTypeDevice;
  cudaPointerGetAttributes(&a, h);
  expect(dev && a.type == cudaMemoryTypeUnregistered, "cudaPointerGetAttributes: device and host");
  expect(cudaFree(d + 1) == cudaErrorInvalidValue, "a free inside an allocation fails");
  expect(cudaFree(d) == cudaSuccess && cudaFree(d) == cudaErrorInvalidValue, "a double free fails");
  cudaGetLastError();
}

static void test_graphs() {
  float *d, h[100];
  cudaStream_t s, side;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaMalloc((void **)&d, sizeof h);
  cudaMemsetAsync(d, 0, sizeof h, s);
  cudaEvent_t fork, join;
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
  expect(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
  KC_LAUNCH(3, 32, 0, s, add_one)(d, 100);
  cudaEventRecord(fork, s);
  cudaStreamWaitEvent(side, fork, 0);
  KC_LAUNCH(1, 64, 0, side, add_one)(d, 100);
  cudaEventRecord(join, side);
  cudaStreamWaitEvent(s, join, 0);
  cudaStreamCaptureStatus st;
  cudaStreamIsCapturing(s, &st);
  /* Device memory is host memory here: a look that records nothing. */
  expect(st == cudaStreamCaptureStatusActive && d[0] == 0, "captured work does not run");
  cudaGraph_t g = nullptr;
  cudaGraphExec_t x = nullptr;
  expect(cudaStreamEndCapture(s, &g) == cudaSuccess && cudaGraphInstantiate(&x, g, 0) == cudaSuccess,
         "end capture (with a forked and rejoined stream), instantiate");
  cudaGraphDestroy(g); /* the executable graph keeps what it replays */
  cudaGraphLaunch(x, s);
  cudaGraphLaunch(x, s);
  cudaStreamSynchronize(s);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  expect(h[0] == 4 && h[99] == 4, "two launches of the graph replay it twice");

  /* The legacy stream does not synchronise with a non-blocking stream, so
   * work on it during that stream's capture runs; with a blocking one it
   * would, and fails. */
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  KC_LAUNCH(1, 32, 0, 0, add_one)(d, 1);
  bool ran = cudaGetLastError() == cudaSuccess && d[0] == 5;
  expect(cudaStreamEndCapture(s, &g) == cudaSuccess && ran,
         "legacy-stream work during a non-blocking stream's capture runs");
  cudaGraphDestroy(g);
  cudaStream_t blocking;
  cudaStreamCreate(&blocking);
  cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal);
  KC_LAUNCH(1, 32, 0, 0, add_one)(d, 1);
  expect(cudaGetLastError() == cudaErrorStreamCaptureImplicit &&
             cudaStreamEndCapture(blocking, &g) == cudaErrorStreamCaptureInvalidated,
         "and during a blocking stream's capture fails, invalidating it");
  cudaStreamDestroy(blocking);

  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  expect(cudaMemcpy(h, d, 4, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureUnsupported,
         "cudaMemcpy during a global capture fails");
  expect(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated,
         "and the capture ends invalidated");
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  cudaEventRecord(fork, s);
  cudaStreamWaitEvent(side, fork, 0);
  KC_LAUNCH(1, 32, 0, side, add_one)(d, 100);
  expect(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureUnjoined,
         "a forked stream that never rejoins: cudaErrorStreamCaptureUnjoined");
  cudaGetLastError();
  cudaGraphExecDestroy(x);
  cudaFree(d);
  cudaStreamDestroy(s);
  cudaStreamDestroy(side);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
}

static void test_bf16() {
  expect(__bfloat16_as_ushort(__float2bfloat16(1.00390625f)) == 0x3f80 &&
             __bfloat16_as_ushort(__float2bfloat16(1.01171875f)) == 0x3f82 &&
             isnan(__bfloat162float(__float2bfloat16(NAN))),
         "bf16: round to nearest even (ties to even), NaN kept");
}

/* ------------------------------------------------------------ cuBLASLt */

static float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* D (m x n) = epi(A (m x k) B (k x n)), all column-major, against loops. */
static void test_epilogue(cublasLtHandle_t h, cublasLtEpilogue_t epi, const char *what) {
  const int m = 5, n = 3, k = 4;
  float A[m * k], B[k * n], bias[8] = {0}, aux[8 * n], D[m * n];
  for (int i = 0; i < m * k; i++) A[i] = (float)(i % 7) / 7 - 0.4f;
  for (int i = 0; i < k * n; i++) B[i] = (float)(i % 5) / 5 - 0.3f;
  for (int i = 0; i < 8; i++) bias[i] = 0.1f * (float)i;
  for (int i = 0; i < 8 * n; i++) aux[i] = 0.05f * (float)i - 0.5f;
  float *dA, *dB, *db, *daux, *dD;
  cudaMalloc((void **)&dA, sizeof A), cudaMalloc((void **)&dB, sizeof B);
  cudaMalloc((void **)&db, sizeof bias), cudaMalloc((void **)&daux, sizeof aux);
  cudaMalloc((void **)&dD, sizeof D);
  cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
  cudaMemcpy(db, bias, sizeof bias, cudaMemcpyHostToDevice);
  cudaMemcpy(daux, aux, sizeof aux, cudaMemcpyHostToDevice);
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &db, sizeof db);
  int64_t ld = 8;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux, sizeof daux);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
  /* BGRADB runs with B transposed only (cublaslt.cc): B is then stored
   * n x k, B[l + j k] of op(B) at B[j + l n]. */
  bool tb = epi == CUBLASLT_EPILOGUE_BGRADB;
  if (tb) {
    float Bt[k * n];
    for (int l = 0; l < k; l++)
      for (int j = 0; j < n; j++) Bt[j + l * n] = B[l + j * k];
    cudaMemcpy(dB, Bt, sizeof Bt, cudaMemcpyHostToDevice);
    int32_t op = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof op);
  }
  cublasLtMatrixLayout_t la, lb, ld_;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m);
  if (tb) cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, n, k, n);
  else cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k);
  cublasLtMatrixLayoutCreate(&ld_, CUDA_R_32F, m, n, m);
  float one = 1, zero = 0;
  cublasStatus_t s = cublasLtMatmul(h, desc, &one, dA, la, dB, lb, &zero, nullptr, ld_, dD, ld_,
                                    nullptr, nullptr, 0, 0);
  float gotb[8], gotaux[8 * n];
  cudaMemcpy(D, dD, sizeof D, cudaMemcpyDeviceToHost);
  cudaMemcpy(gotb, db, sizeof gotb, cudaMemcpyDeviceToHost);
  cudaMemcpy(gotaux, daux, sizeof gotaux, cudaMemcpyDeviceToHost);
  double err = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double v = 0;
      for (int l = 0; l < k; l++) v += A[i + l * m] * B[l + j * k];
      float pre = (float)v + (epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_BIAS ? bias[i] : 0);
      float want = pre;
      if (epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        want = gelu(pre);
        err = fmax(err, fabs(gotaux[i + j * 8] - pre));
      }
      if (epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
        float x = aux[i + j * 8], t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
        want = pre * (0.5f * (1 + t) + 0.5f * x * (1 - t * t) * 0.7978845608028654f * (1 + 3 * 0.044715f * x * x));
      }
      err = fmax(err, fabs(D[i + j * m] - want));
    }
  if (epi == CUBLASLT_EPILOGUE_DGELU_BGRAD || epi == CUBLASLT_EPILOGUE_BGRADA || epi == CUBLASLT_EPILOGUE_BGRADB) {
    int len = epi == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    for (int r = 0; r < len; r++) {
      double sum = 0;
      if (epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) for (int j = 0; j < n; j++) sum += D[r + j * m];
      if (epi == CUBLASLT_EPILOGUE_BGRADA) for (int l = 0; l < k; l++) sum += A[r + l * m];
      if (epi == CUBLASLT_EPILOGUE_BGRADB) for (int l = 0; l < k; l++) sum += B[l + r * k];
      err = fmax(err, fabs(gotb[r] - sum));
    }
  }
  expect(s == CUBLAS_STATUS_SUCCESS && err < 1e-5, what);
  cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld_);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(dA), cudaFree(dB), cudaFree(db), cudaFree(daux), cudaFree(dD);
}

/* The heuristic's answer for an m x n x k fp32 problem with epilogue epi,
 * A and B transposed or not, and the aux matrix's leading dimension. */
static cublasStatus_t heuristic(cublasLtHandle_t h, cublasLtEpilogue_t epi, bool ta, bool tb,
                                int64_t aux_ld) {
  const int m = 16, n = 8, k = 24;
  cublasLtMatmulDesc_t d;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, ta ? k : m, ta ? m : k, ta ? k : m);
  cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, tb ? n : k, tb ? k : n, tb ? n : k);
  cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, m, n, m);
  cublasLtMatmulPreference_t p;
  cublasLtMatmulPreferenceCreate(&p);
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, d, a, b, c, c, p, 1, &r, &found);
  cublasLtMatrixLayoutDestroy(a), cublasLtMatrixLayoutDestroy(b), cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulPreferenceDestroy(p);
  cublasLtMatmulDescDestroy(d);
  return s == CUBLAS_STATUS_SUCCESS && found != 1 ? CUBLAS_STATUS_INTERNAL_ERROR : s;
}

/* What the library refuses, the emulator refuses (cublaslt.cc's refused),
 * and what it runs stays accepted. */
static void test_refusals(cublasLtHandle_t h) {
  const cublasStatus_t OK = CUBLAS_STATUS_SUCCESS, NO = CUBLAS_STATUS_NOT_SUPPORTED;
  expect(heuristic(h, CUBLASLT_EPILOGUE_BGRADA, false, false, 16) == OK &&
             heuristic(h, CUBLASLT_EPILOGUE_BGRADA, false, true, 16) == OK,
         "cuBLASLt: BGRADA with transa = N is offered");
  expect(heuristic(h, CUBLASLT_EPILOGUE_BGRADA, true, false, 16) == NO,
         "cuBLASLt: BGRADA with transa = T: NOT_SUPPORTED");
  expect(heuristic(h, CUBLASLT_EPILOGUE_BGRADB, false, true, 16) == OK &&
             heuristic(h, CUBLASLT_EPILOGUE_BGRADB, true, true, 16) == OK,
         "cuBLASLt: BGRADB with transb = T is offered");
  expect(heuristic(h, CUBLASLT_EPILOGUE_BGRADB, false, false, 16) == NO,
         "cuBLASLt: BGRADB with transb = N: NOT_SUPPORTED");
  expect(heuristic(h, CUBLASLT_EPILOGUE_DGELU, false, false, 16) == OK &&
             heuristic(h, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false, false, 24) == OK,
         "cuBLASLt: aux leading dimensions 16 and 24 are offered");
  expect(heuristic(h, CUBLASLT_EPILOGUE_DGELU, false, false, 20) == NO &&
             heuristic(h, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false, false, 17) == NO,
         "cuBLASLt: an aux leading dimension not a multiple of 8: NOT_SUPPORTED");
}

static void test_cublaslt() {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  test_epilogue(h, CUBLASLT_EPILOGUE_BIAS, "cuBLASLt BIAS");
  test_epilogue(h, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "cuBLASLt GELU_AUX_BIAS (D and the aux matrix)");
  test_epilogue(h, CUBLASLT_EPILOGUE_DGELU_BGRAD, "cuBLASLt DGELU_BGRAD (D and the bias gradient)");
  test_epilogue(h, CUBLASLT_EPILOGUE_BGRADA, "cuBLASLt BGRADA");
  test_epilogue(h, CUBLASLT_EPILOGUE_BGRADB, "cuBLASLt BGRADB (B transposed)");
  test_refusals(h);
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulDesc_t d;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, 4, 3, 4);
  cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, 4, 2, 2); /* ld below rows */
  cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, 4, 2, 4);
  cublasLtMatmulPreference_t p;
  cublasLtMatmulPreferenceCreate(&p);
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  expect(cublasLtMatmulAlgoGetHeuristic(h, d, a, b, c, c, p, 1, &r, &found) == CUBLAS_STATUS_INVALID_VALUE,
         "cuBLASLt: k mismatch or ld < rows: CUBLAS_STATUS_INVALID_VALUE");
  int32_t wrong = 0;
  expect(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &wrong, sizeof wrong) ==
             CUBLAS_STATUS_INVALID_VALUE,
         "cuBLASLt: an attribute of the wrong size: CUBLAS_STATUS_INVALID_VALUE");
  cublasLtMatrixLayoutDestroy(a), cublasLtMatrixLayoutDestroy(b), cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulPreferenceDestroy(p);
  cublasLtMatmulDescDestroy(d);
  cublasLtDestroy(h);
}

int main() {
  test_kernels();
  test_memory();
  test_graphs();
  test_bf16();
  test_cublaslt();
  printf("%s\n", failures ? "some checks failed" : "all checks passed");
  return failures ? 1 : 0;
}
