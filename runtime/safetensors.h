/* safetensors files: an 8-byte little-endian header length N, N bytes of
 * JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}, and
 * "__metadata__": {string: string}}), then the tensor bytes, offsets
 * counted from the end of the header. */
#ifndef SHARD_RT_SAFETENSORS_H
#define SHARD_RT_SAFETENSORS_H

#include <stdint.h>

#include "../abi/model.h"
#include "util.h"

typedef struct RtStTensor {
  char *name;
  const char *dtype; /* "F32", "BF16", ... */
  int dsize;         /* bytes per element */
  int rank;
  int64_t shape[RT_MAX_RANK];
  int64_t numel, begin, end;
} RtStTensor;

typedef struct RtStFile {
  char *path;
  int fd;
  int64_t data_start, data_bytes;
  RtStTensor *t;
  int n;
  char **meta_key, **meta_val;
  int nmeta;
} RtStFile;

/* Opens and checks the whole header: length, JSON, every dtype, shape and
 * offset range. Any problem is a fatal error naming the file. */
void rt_st_open(RtStFile *f, const char *path);
/* The same returning -1 with the error in *e (the file closed) instead of
 * exiting: what the fuzz harness calls. */
int rt_st_open_checked(RtStFile *f, const char *path, RtErr *e);
void rt_st_close(RtStFile *f);
const RtStTensor *rt_st_find(const RtStFile *f, const char *name);
/* A __metadata__ value, NULL when absent. */
const char *rt_st_meta(const RtStFile *f, const char *key);
/* Reads a tensor into reals, converting from F32, F64, F16 or BF16. */
void rt_st_read(const RtStFile *f, const RtStTensor *t, real *dst);
int rt_st_read_checked(const RtStFile *f, const RtStTensor *t, real *dst, RtErr *e);
/* "[768, 2304]" */
const char *rt_st_shape_str(char *buf, int len, int rank, const int64_t *shape);

typedef struct RtStOut {
  const char *name;
  int rank;
  const int64_t *shape;
  const real *data;
  int64_t numel;
} RtStOut;

/* Writes the tensors (dtype F32 or F64 as `real` is) and the metadata
 * (nmeta key/value pairs) so that a crash at any moment leaves either the
 * old file or the new one at PATH: PATH.tmp, fsync, rename, fsync of the
 * folder. Errors are fatal.
 *
 * Fault injection for the tests: with RT_FAULT_AFTER_BYTES=N in the
 * environment the process dies (exit status 3, nothing cleaned up) once N
 * bytes of checkpoint data have been written, counted over the whole run. */
void rt_st_write(const char *path, const RtStOut *t, int n, const char *const *meta, int nmeta);

#endif
