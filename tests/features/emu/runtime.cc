/* The CUDA runtime API on the CPU (see cuda_runtime_api.h): devices,
 * errors, memory, copies, streams, events, stream capture and graphs.
 *
 * Device memory is host memory, but every allocation is recorded, so that
 * a copy or memset that leaves its allocation, a free of something that is
 * not an allocation and cudaPointerGetAttributes behave as on a GPU. Work
 * runs when it is enqueued, so streams and events only keep the state CUDA
 * would report. While a stream captures, the work enqueued on it (and on
 * streams that joined the capture by waiting on one of its events) is
 * recorded into the graph instead; the calls a capture forbids fail with
 * CUDA's error and invalidate it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "emu.h"

struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::shared_ptr<const std::vector<std::function<void()>>> ops;
};
struct CUstream_st {
  unsigned flags;
  CUgraph_st *graph;   /* the capture this stream records into, if any */
  bool origin;         /* the stream that began the capture */
  bool invalidated;
  cudaStreamCaptureMode mode;
  uint64_t ops, joined; /* ops recorded on it; how many of them the origin waited for */
};
struct CUevent_st {
  unsigned flags;
  bool recorded;
  double time;
  CUgraph_st *graph; /* recorded during a capture */
  CUstream_st *stream;
  uint64_t ops;
  CUstream_st *at_stream; /* recorded outside a capture: on this stream, */
  uint64_t at;            /* after this much of its work (the order's count) */
  /* What at_stream had seen of other streams when the event was recorded:
   * a stream that waits on the event sees that too (CUDA's order is
   * transitive: the event follows the waits queued before it). */
  std::vector<std::pair<CUstream_st *, uint64_t>> saw;
};
struct CUmemPoolHandle_st {
  uint64_t release_threshold;
};

namespace kc_emu {

cudaError_t set_last_error(cudaError_t e);

namespace {

enum Kind { DEVICE, PINNED, SYMBOL };
struct Alloc {
  size_t bytes;
  Kind kind;
  int device;
};

struct {
  bool init;
  int ndevices, device;
  size_t total;
  cudaError_t last;
  std::map<uintptr_t, Alloc> allocs;
  long long waits; /* host waits for the device (count_wait) */
  size_t used;
  std::set<CUstream_st *> streams;
  std::set<CUevent_st *> events;
  std::set<CUgraph_st *> graphs;
  std::set<CUgraphExec_st *> execs;
  CUmemPoolHandle_st pools[64];
} R;

void print_waits() { fprintf(stderr, "cuda emulation: %lld host waits\n", R.waits); }

/* A call that makes the host wait for the device on a GPU: stream, event
 * and device synchronisations and the blocking copies. With
 * SHARD_EMU_WAIT_STATS set the process prints their count at its end, so
 * that a test can count a step's host synchronisations. */
void count_wait() { R.waits++; }

void init() {
  if (R.init) return;
  R.init = true;
  if (getenv("SHARD_EMU_WAIT_STATS")) atexit(print_waits);
  const char *d = getenv("SHARD_EMU_DEVICES");
  R.ndevices = d ? atoi(d) : 1;
  if (R.ndevices < 0 || R.ndevices > 64) die("SHARD_EMU_DEVICES=%s: 0 to 64 devices", d);
  const char *m = getenv("SHARD_EMU_MEMORY");
  R.total = m ? (size_t)strtoull(m, nullptr, 10) : (size_t)140 << 30;
}

cudaError_t fail(cudaError_t e) { return set_last_error(e); }

cudaError_t need_device() {
  init();
  return R.ndevices > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

double now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The allocation holding p, or null. */
const std::pair<const uintptr_t, Alloc> *find(const void *p) {
  uintptr_t a = (uintptr_t)p;
  auto it = R.allocs.upper_bound(a);
  if (it == R.allocs.begin()) return nullptr;
  --it;
  return a < it->first + (it->second.bytes ? it->second.bytes : 1) ? &*it : nullptr;
}

bool is_device(const void *p) {
  auto *a = find(p);
  return a && a->second.kind != PINNED;
}

/* A stream handle CUDA would accept: the legacy and per-thread defaults or
 * one created and not yet destroyed. */
CUstream_st *stream_of(cudaStream_t s, bool *ok) {
  *ok = s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread || R.streams.count(s);
  return *ok && s != cudaStreamLegacy && s != cudaStreamPerThread ? s : nullptr;
}

/* A capture that forbids what is being done now ends invalidated: any
 * call that may synchronise (legacy_only: work on the legacy stream, which
 * synchronises with blocking streams only) under a capture that is not
 * relaxed. */
bool capture_forbids(const char *what, bool legacy_only = false) {
  for (CUstream_st *s : R.streams)
    if (s->graph && !s->invalidated && s->mode != cudaStreamCaptureModeRelaxed &&
        (!legacy_only || !(s->flags & cudaStreamNonBlocking))) {
      note("%s while a stream captures: cudaErrorStreamCaptureUnsupported, and the capture is "
           "invalidated", what);
      for (CUstream_st *t : R.streams)
        if (t->graph == s->graph) t->invalidated = true;
      return true;
    }
  return false;
}

cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return fail(cudaErrorInvalidMemcpyDirection);
  bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
            (kind == cudaMemcpyDefault && is_device(dst));
  bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
            (kind == cudaMemcpyDefault && is_device(src));
  if (n == 0) return cudaSuccess;
  if (dd && !device_range(dst, n)) {
    note("copy of %zu bytes to %p: not inside one device allocation", n, dst);
    return fail(cudaErrorInvalidValue);
  }
  if (sd && !device_range(src, n)) {
    note("copy of %zu bytes from %p: not inside one device allocation", n, src);
    return fail(cudaErrorInvalidValue);
  }
  if ((!dd && is_device(dst)) || (!sd && is_device(src))) {
    note("copy of %zu bytes from %p to %p: a device pointer where kind %d says host", n, src, dst,
         (int)kind);
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t alloc(void **ptr, size_t size, Kind kind) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (!ptr) return fail(cudaErrorInvalidValue);
  if (kind == DEVICE && R.used + size > R.total) return fail(cudaErrorMemoryAllocation);
  void *p = nullptr;
  /* The exact size, so that AddressSanitizer sees a kernel that leaves its
   * buffer; 256-byte aligned as cudaMalloc's. */
  if (posix_memalign(&p, 256, size ? size : 1)) return fail(cudaErrorMemoryAllocation);
  R.allocs[(uintptr_t)p] = Alloc{size, kind, R.device};
  if (kind == DEVICE) R.used += size;
  *ptr = p;
  return cudaSuccess;
}

/* The order between streams (below). */
void forget_written(uintptr_t lo, uintptr_t hi);
void use(cudaStream_t stream, const void *p, size_t bytes, const char *what);

cudaError_t release(void *p, Kind kind) {
  if (!p) return cudaSuccess;
  auto it = R.allocs.find((uintptr_t)p);
  if (it == R.allocs.end() || it->second.kind != kind) {
    note("free of %p, which is not the start of a live %s allocation", p,
         kind == DEVICE ? "device" : "pinned host");
    return fail(cudaErrorInvalidValue);
  }
  if (kind == DEVICE) R.used -= it->second.bytes;
  forget_written(it->first, it->first + it->second.bytes);
  R.allocs.erase(it);
  free(p);
  return cudaSuccess;
}

cudaError_t set_memory(void *p, int value, size_t n, cudaStream_t stream, bool async) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (n && !device_range(p, n)) {
    note("memset of %zu bytes at %p: not inside one device allocation", n, p);
    return fail(cudaErrorInvalidValue);
  }
  use(async ? stream : nullptr, p, n, async ? "cudaMemsetAsync" : "cudaMemset");
  if (!async) {
    if (capture_forbids("cudaMemset")) return fail(cudaErrorStreamCaptureUnsupported);
    memset(p, value, n);
    return cudaSuccess;
  }
  return enqueue(stream, [p, value, n]() { memset(p, value, n); }, "cudaMemsetAsync");
}

/* A new stream or event (flags up to max), kept in `live`; and its end. */
template <typename H> cudaError_t create(std::set<H *> &live, H **out, unsigned flags, unsigned max) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (!out || flags > max) return fail(cudaErrorInvalidValue);
  H *h = new H();
  h->flags = flags;
  live.insert(h);
  *out = h;
  return cudaSuccess;
}
template <typename H> cudaError_t destroy(std::set<H *> &live, H *h) {
  if (!live.count(h)) return fail(cudaErrorInvalidResourceHandle);
  live.erase(h);
  delete h;
  return cudaSuccess;
}

} // namespace

cudaError_t set_last_error(cudaError_t e) {
  if (e != cudaSuccess) R.last = e;
  return e;
}

void vnote(const char *fmt, va_list ap) {
  fprintf(stderr, "shard cuda emulator: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vnote(fmt, ap);
  va_end(ap);
}

bool device_range(const void *p, size_t bytes) {
  auto *a = find(p);
  return a && a->second.kind != PINNED &&
         (uintptr_t)p + bytes <= a->first + a->second.bytes;
}

/* ---- the order between streams ----------------------------------------
 * The emulator runs a stream's work when it is queued, so a kernel that
 * uses an NCCL result on another stream without waiting for it passes
 * here and races on the hardware. The order catches that. Each stream
 * counts the work queued on it; an event carries its stream's count when
 * recorded; a stream that waits on it has seen that much of the event's
 * stream, and the host has seen all it synchronised with. What an NCCL
 * operation writes (shard_emu_nccl_wrote) is kept with its stream and
 * count; a kernel whose pointer argument lies in it, a copy or an NCCL
 * operation that touches it, from a stream that has not seen it, aborts
 * with both named. The legacy stream and a blocking stream see each
 * other, as CUDA's legacy semantics have it. */
namespace {

struct Written {
  uintptr_t lo, hi;
  CUstream_st *s;
  uint64_t at;
  const char *what;
};
struct {
  std::map<CUstream_st *, uint64_t> count;
  std::map<std::pair<CUstream_st *, CUstream_st *>, uint64_t> seen; /* (waiter, stream) */
  std::vector<Written> written;
} Ord;

bool blocking(CUstream_st *s) { return !s || !(s->flags & cudaStreamNonBlocking); }

bool ordered(CUstream_st *s, const Written &w) {
  if (s == w.s || ((!s || !w.s) && blocking(s) && blocking(w.s))) return true;
  auto it = Ord.seen.find({s, w.s});
  return it != Ord.seen.end() && it->second >= w.at;
}

/* The host has seen stream s up to `at` (everything, by default). */
void host_saw(CUstream_st *s, uint64_t at = UINT64_MAX) {
  auto &w = Ord.written;
  for (size_t i = 0; i < w.size();)
    if ((w[i].s == s || (!s && blocking(w[i].s))) && w[i].at <= at) w[i] = w.back(), w.pop_back();
    else i++;
}

/* Freed memory: what was written there is nobody's any more. */
void forget_written(uintptr_t lo, uintptr_t hi) {
  auto &w = Ord.written;
  for (size_t i = 0; i < w.size();)
    if (w[i].lo < hi && lo < w[i].hi) w[i] = w.back(), w.pop_back();
    else i++;
}

void use(cudaStream_t stream, const void *p, size_t bytes, const char *what) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok || (s && s->graph) || !p) return;
  uintptr_t lo = (uintptr_t)p, hi = lo + (bytes ? bytes : 1);
  char name[2][32];
  for (const Written &w : Ord.written)
    if (lo < w.hi && w.lo < hi && !ordered(s, w)) {
      for (int k = 0; k < 2; k++) {
        CUstream_st *t = k ? w.s : s;
        if (t) snprintf(name[k], sizeof name[k], "stream %p", (void *)t);
        else snprintf(name[k], sizeof name[k], "the legacy stream");
      }
      die("%s on %s uses %p, which %s on %s writes, before the stream waited for an event "
          "recorded after it (cudaStreamWaitEvent) or the host synchronised: on a GPU the two "
          "race", what, name[0], p, w.what, name[1]);
    }
}

} // namespace

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work, const char *what) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok) {
    note("%s on stream %p, which does not exist", what, (void *)stream);
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (s && s->graph) {
    if (s->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
    s->graph->ops.push_back(std::move(work));
    s->ops++;
    return cudaSuccess;
  }
  if (!s && capture_forbids(what, true)) return fail(cudaErrorStreamCaptureImplicit);
  Ord.count[s]++;
  work();
  return cudaSuccess;
}

cudaError_t symbol_address(void **ptr, const void *symbol, size_t bytes) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (!ptr) return fail(cudaErrorInvalidValue);
  if (!find(symbol)) R.allocs[(uintptr_t)symbol] = Alloc{bytes, SYMBOL, R.device};
  *ptr = (void *)symbol;
  return cudaSuccess;
}

} // namespace kc_emu

using namespace kc_emu;

extern "C" {

/* ---------------------------------------------------------------- devices */

cudaError_t cudaGetDeviceCount(int *count) {
  init();
  if (!count) return fail(cudaErrorInvalidValue);
  *count = R.ndevices;
  return R.ndevices ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (device < 0 || device >= R.ndevices) return fail(cudaErrorInvalidDevice);
  R.device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (!device) return fail(cudaErrorInvalidValue);
  *device = R.device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (!p) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= R.ndevices) return fail(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "shard CUDA emulator (H200-like)");
  p->totalGlobalMem = R.total;
  p->sharedMemPerBlock = 48 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->memoryBusWidth = 6144;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  struct cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return e;
  if (!value) return fail(cudaErrorInvalidValue);
  switch (attr) {
  case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
  case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
  case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
  case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
  case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
  case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
  case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
  case cudaDevAttrWarpSize: *value = 32; break;
  case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
  case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
  case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
  case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)p.sharedMemPerMultiprocessor; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
  default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  count_wait();
  if (capture_forbids("cudaDeviceSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
  Ord.written.clear();
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (!free_bytes || !total) return fail(cudaErrorInvalidValue);
  *total = R.total;
  *free_bytes = R.total - R.used;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) { return v ? (*v = CUDART_VERSION, cudaSuccess) : fail(cudaErrorInvalidValue); }
cudaError_t cudaRuntimeGetVersion(int *v) { return v ? (*v = CUDART_VERSION, cudaSuccess) : fail(cudaErrorInvalidValue); }

/* ----------------------------------------------------------------- errors */

cudaError_t cudaGetLastError(void) {
  cudaError_t e = R.last;
  R.last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return R.last; }

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define E(x) case x: return #x;
  E(cudaSuccess) E(cudaErrorInvalidValue) E(cudaErrorMemoryAllocation)
  E(cudaErrorInitializationError) E(cudaErrorInvalidConfiguration) E(cudaErrorInvalidSymbol)
  E(cudaErrorInvalidDevicePointer) E(cudaErrorInvalidMemcpyDirection) E(cudaErrorNoDevice)
  E(cudaErrorInvalidDevice) E(cudaErrorInvalidResourceHandle) E(cudaErrorIllegalState) E(cudaErrorNotReady)
  E(cudaErrorIllegalAddress) E(cudaErrorAssert) E(cudaErrorLaunchFailure) E(cudaErrorNotSupported)
  E(cudaErrorStreamCaptureUnsupported) E(cudaErrorStreamCaptureInvalidated)
  E(cudaErrorStreamCaptureMerge) E(cudaErrorStreamCaptureUnmatched)
  E(cudaErrorStreamCaptureUnjoined) E(cudaErrorStreamCaptureIsolation)
  E(cudaErrorStreamCaptureImplicit) E(cudaErrorStreamCaptureWrongThread) E(cudaErrorUnknown)
#undef E
  }
  return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
  case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
  case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
  case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
  case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
  case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
  default: return cudaGetErrorName(e);
  }
}

/* ----------------------------------------------------------------- memory */

cudaError_t cudaMalloc(void **ptr, size_t size) {
  if (capture_forbids("cudaMalloc")) return fail(cudaErrorStreamCaptureUnsupported);
  return alloc(ptr, size, DEVICE);
}
cudaError_t cudaFree(void *ptr) {
  if (capture_forbids("cudaFree")) return fail(cudaErrorStreamCaptureUnsupported);
  return release(ptr, DEVICE);
}

/* Stream-ordered allocation inside a capture would be a memory node of the
 * graph, which the emulator does not model: it says so and fails. */
cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok) return fail(cudaErrorInvalidResourceHandle);
  if (s && s->graph) {
    note("cudaMallocAsync on a capturing stream: the emulator does not record allocation nodes");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  return alloc(ptr, size, DEVICE);
}
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok) return fail(cudaErrorInvalidResourceHandle);
  if (s && s->graph) {
    note("cudaFreeAsync on a capturing stream: the emulator does not record free nodes");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  return release(ptr, DEVICE);
}

cudaError_t cudaMallocHost(void **ptr, size_t size) { return alloc(ptr, size, PINNED); }
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
  (void)flags;
  return alloc(ptr, size, PINNED);
}
cudaError_t cudaFreeHost(void *ptr) { return release(ptr, PINNED); }

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (!attr) return fail(cudaErrorInvalidValue);
  auto *a = find(ptr);
  attr->device = a ? a->second.device : -2;
  attr->type = !a ? cudaMemoryTypeUnregistered
                  : a->second.kind == PINNED ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  attr->devicePointer = a ? (void *)ptr : nullptr;
  attr->hostPointer = !a || a->second.kind == PINNED ? (void *)ptr : nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t e = need_device();
  if (e == cudaSuccess) e = check_copy(dst, src, n, kind);
  if (e != cudaSuccess) return e;
  if (capture_forbids("cudaMemcpy")) return fail(cudaErrorStreamCaptureUnsupported);
  use(nullptr, dst, n, "cudaMemcpy"), use(nullptr, src, n, "cudaMemcpy");
  count_wait();
  if (n) memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  cudaError_t e = need_device();
  if (e == cudaSuccess) e = check_copy(dst, src, n, kind);
  if (e != cudaSuccess) return e;
  use(stream, dst, n, "cudaMemcpyAsync"), use(stream, src, n, "cudaMemcpyAsync");
  return enqueue(stream, [dst, src, n]() { if (n) memmove(dst, src, n); }, "cudaMemcpyAsync");
}

cudaError_t cudaMemset(void *p, int value, size_t n) { return set_memory(p, value, n, nullptr, false); }
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t stream) {
  return set_memory(p, value, n, stream, true);
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  if (!pool) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= R.ndevices) return fail(cudaErrorInvalidDevice);
  *pool = &R.pools[device];
  return cudaSuccess;
}

static bool pool_ok(cudaMemPool_t pool) {
  return pool >= &R.pools[0] && pool < &R.pools[R.ndevices];
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  if (!pool_ok(pool) || !value) return fail(cudaErrorInvalidValue);
  if (attr == cudaMemPoolAttrReleaseThreshold) pool->release_threshold = *(uint64_t *)value;
  else if (attr < cudaMemPoolReuseFollowEventDependencies || attr > cudaMemPoolReuseAllowInternalDependencies)
    return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  if (!pool_ok(pool) || !value) return fail(cudaErrorInvalidValue);
  switch (attr) {
  case cudaMemPoolAttrReleaseThreshold: *(uint64_t *)value = pool->release_threshold; break;
  case cudaMemPoolAttrReservedMemCurrent:
  case cudaMemPoolAttrUsedMemCurrent:
  case cudaMemPoolAttrReservedMemHigh:
  case cudaMemPoolAttrUsedMemHigh: *(uint64_t *)value = R.used; break;
  default: *(int *)value = 1; break;
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  (void)keep;
  return pool_ok(pool) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

/* ------------------------------------------------------- streams, events */

int shard_emu_stream_valid(cudaStream_t stream) {
  bool ok;
  stream_of(stream, &ok);
  return ok;
}

void shard_emu_stream_use(cudaStream_t stream, const void *p, size_t bytes, const char *what) {
  use(stream, p, bytes, what);
}

/* Kept until every stream has seen it (or the host has); a range written
 * again on the same stream replaces its older entry. */
void shard_emu_nccl_wrote(cudaStream_t stream, const void *p, size_t bytes, const char *what) {
  use(stream, p, bytes, what);
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok || (s && s->graph) || !p || !bytes) return;
  auto &ws = Ord.written;
  for (size_t i = 0; i < ws.size();) {
    bool all = ordered(nullptr, ws[i]);
    for (CUstream_st *t : R.streams) all = all && ordered(t, ws[i]);
    if (all || (ws[i].s == s && ws[i].lo == (uintptr_t)p && ws[i].hi == (uintptr_t)p + bytes))
      ws[i] = ws.back(), ws.pop_back();
    else i++;
  }
  ws.push_back(Written{(uintptr_t)p, (uintptr_t)p + bytes, s, ++Ord.count[s], what});
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  return create(R.streams, stream, flags, cudaStreamNonBlocking);
}
cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) { return destroy(R.streams, stream); }

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  cudaError_t e = need_device();
  if (e != cudaSuccess) return e;
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok) return fail(cudaErrorInvalidResourceHandle);
  if ((s && s->graph) || (!s && capture_forbids("cudaStreamSynchronize on the default stream"))) {
    if (s) s->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  count_wait();
  host_saw(s);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok) return fail(cudaErrorInvalidResourceHandle);
  return s && s->graph ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *data) {
  if (!fn) return fail(cudaErrorInvalidValue);
  return enqueue(stream, [fn, data]() { fn(data); }, "cudaLaunchHostFunc");
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  return create(R.events, event, flags, 7);
}
cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t event) { return destroy(R.events, event); }

/* Recorded inside a capture, an event marks a point of the graph (what a
 * stream waiting on it depends on); outside, the time it was reached. */
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok || !R.events.count(event)) return fail(cudaErrorInvalidResourceHandle);
  if (s && s->graph) {
    event->graph = s->graph;
    event->stream = s;
    event->ops = s->ops;
    return cudaSuccess;
  }
  if (!s && capture_forbids("cudaEventRecord on the default stream", true))
    return fail(cudaErrorStreamCaptureImplicit);
  event->graph = nullptr;
  event->recorded = true;
  event->time = now();
  event->at_stream = s;
  event->at = Ord.count[s];
  event->saw.clear();
  for (const auto &kv : Ord.seen)
    if (kv.first.first == s) event->saw.push_back({kv.first.second, kv.second});
  return cudaSuccess;
}

/* A stream that waits on an event of a capture joins the capture; the
 * origin waiting on a joined stream's event is where that stream's work so
 * far rejoins it. */
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok || !R.events.count(event)) return fail(cudaErrorInvalidResourceHandle);
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (!event->graph) {
    if (event->recorded && !(s && s->graph)) {
      uint64_t &seen = Ord.seen[{s, event->at_stream}];
      if (event->at > seen) seen = event->at;
      for (const auto &p : event->saw) {
        if (p.first == s) continue;
        uint64_t &also = Ord.seen[{s, p.first}];
        if (p.second > also) also = p.second;
      }
    }
    return cudaSuccess;
  }
  if (!s) return fail(cudaErrorStreamCaptureImplicit);
  if (!s->graph) {
    s->graph = event->graph;
    s->origin = false;
    s->invalidated = event->stream->invalidated;
    s->mode = event->stream->mode;
    s->ops = s->joined = 0;
    return cudaSuccess;
  }
  if (s->graph != event->graph) return fail(cudaErrorStreamCaptureIsolation);
  if (s->origin && !event->stream->origin && event->ops > event->stream->joined)
    event->stream->joined = event->ops;
  return cudaSuccess;
}

/* An event that has passed tells the host its stream's work up to it. */
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!R.events.count(event)) return fail(cudaErrorInvalidResourceHandle);
  if (event->recorded && !event->graph) host_saw(event->at_stream, event->at);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!R.events.count(event)) return fail(cudaErrorInvalidResourceHandle);
  init();
  count_wait();
  if (event->recorded && !event->graph) host_saw(event->at_stream, event->at);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!R.events.count(start) || !R.events.count(end) || (start->flags & cudaEventDisableTiming) ||
      (end->flags & cudaEventDisableTiming) || !start->recorded || !end->recorded)
    return fail(cudaErrorInvalidResourceHandle);
  *ms = (float)((end->time - start->time) * 1e3);
  return cudaSuccess;
}

/* ------------------------------------------------------ capture, graphs */

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok) return fail(cudaErrorInvalidResourceHandle);
  if (!s) return fail(cudaErrorStreamCaptureUnsupported); /* the legacy stream cannot capture */
  if (s->graph) return fail(cudaErrorIllegalState);
  if (mode < cudaStreamCaptureModeGlobal || mode > cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue);
  s->graph = new CUgraph_st();
  R.graphs.insert(s->graph);
  s->origin = true;
  s->invalidated = false;
  s->mode = mode;
  s->ops = s->joined = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok) return fail(cudaErrorInvalidResourceHandle);
  if (!graph) return fail(cudaErrorInvalidValue);
  if (!s || !s->graph) return fail(cudaErrorIllegalState);
  if (!s->origin) return fail(cudaErrorStreamCaptureUnmatched);
  CUgraph_st *g = s->graph;
  bool invalid = false, unjoined = false;
  for (CUstream_st *t : R.streams)
    if (t->graph == g) {
      invalid |= t->invalidated;
      if (!t->origin && t->joined < t->ops) unjoined = true;
      t->graph = nullptr;
      t->origin = t->invalidated = false;
    }
  *graph = nullptr;
  if (invalid || unjoined) {
    if (unjoined) note("cudaStreamEndCapture: a stream that joined the capture has work the "
                       "capturing stream never waited for");
    R.graphs.erase(g);
    delete g;
    return fail(invalid ? cudaErrorStreamCaptureInvalidated : cudaErrorStreamCaptureUnjoined);
  }
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
  bool ok;
  CUstream_st *s = stream_of(stream, &ok);
  if (!ok) return fail(cudaErrorInvalidResourceHandle);
  if (!status) return fail(cudaErrorInvalidValue);
  *status = !s || !s->graph ? cudaStreamCaptureStatusNone
            : s->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
  if (!exec || flags) return fail(cudaErrorInvalidValue);
  if (!R.graphs.count(graph)) return fail(cudaErrorInvalidResourceHandle);
  CUgraphExec_st *x = new CUgraphExec_st();
  x->ops = std::make_shared<const std::vector<std::function<void()>>>(graph->ops);
  R.execs.insert(x);
  *exec = x;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                          unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!R.execs.count(exec)) return fail(cudaErrorInvalidResourceHandle);
  auto ops = exec->ops;
  return enqueue(stream, [ops]() { for (const auto &op : *ops) op(); }, "cudaGraphLaunch");
}

cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  bool ok;
  stream_of(stream, &ok);
  if (!ok || !R.execs.count(exec)) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return destroy(R.execs, exec); }
cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return destroy(R.graphs, graph); }

} // extern "C"
