/* What the emulator's own sources share (runtime.cc, cublaslt.cc): the
 * table of device allocations and the enqueueing of work on a stream. */
#ifndef SHARD_EMU_EMU_H
#define SHARD_EMU_EMU_H

#include <cuda_runtime.h>

#include <stdarg.h>

#include <functional>

namespace kc_emu {

/* Prints "shard cuda emulator: ..." and aborts: for misuse that CUDA would
 * answer with a hang, a fault or undefined behaviour. */
[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the reason an API call fails, once per call, to stderr. */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vnote(const char *fmt, va_list ap);

/* Whether [p, p + bytes) lies inside one device allocation. */
bool device_range(const void *p, size_t bytes);

/* Runs `work` now, or records it when the stream captures. */
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work, const char *what);

} // namespace kc_emu

#endif
