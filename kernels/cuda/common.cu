/* The library's stream and its error reporting. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.cuh"

static cudaStream_t current_stream = 0;

void k_cuda_set_stream(cudaStream_t stream) { current_stream = stream; }
cudaStream_t kc_stream(void) { return current_stream; }
cudaStream_t k_cuda_stream(void) { return current_stream; }

void kc_die(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "shard cuda kernels: %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}
