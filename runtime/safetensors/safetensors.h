/* safetensors files: an 8-byte little-endian header length N, N bytes of
 * JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}, and
 * "__metadata__": {string: string}}), then the tensor bytes, offsets
 * counted from the end of the header. */
#ifndef SHARD_RT_SAFETENSORS_H
#define SHARD_RT_SAFETENSORS_H

#include <stdint.h>

#include "../../abi/model.h"
#include "util.h"

typedef struct RtStTensor {
  char *name;
  const char *dtype; /* "F32", "BF16", ... */
  int dsize;         /* bytes per element */
  int rank;
  int64_t shape[RT_MAX_RANK];
  int64_t numel, begin, end;
  int part; /* 0: in the file itself; k > 0: in parts[k - 1] of a sharded set */
  /* A tensor made of others (rt_st_stack): its nstack pieces, each of
   * shape[1:], read one after the other; begin, end and part unused. */
  struct RtStTensor *stack;
  int nstack;
} RtStTensor;

typedef struct RtStFile {
  char *path;
  int fd;
  int64_t data_start, data_bytes;
  RtStTensor *t;
  int n;
  char **meta_key, **meta_val;
  int nmeta;
  /* A sharded set (rt_st_open_set): the files its index names, whose
   * tensors t lists together; fd is then -1. */
  struct RtStFile *parts;
  int nparts;
} RtStFile;

/* Opens and checks the whole header: length, JSON, every dtype, shape and
 * offset range. Any problem is a fatal error naming the file. */
void rt_st_open(RtStFile *f, const char *path);
/* The same returning -1 with the error in *e (the file closed) instead of
 * exiting: what the fuzz harness calls. */
int rt_st_open_checked(RtStFile *f, const char *path, RtErr *e);
void rt_st_close(RtStFile *f);
/* Opens what --init-from names, as one file: a safetensors file; a
 * sharded set of them through its index (Hugging Face's
 * model.safetensors.index.json: {"weight_map": {tensor: file}}, the files
 * beside it), whose tensors are all listed in t; or a folder holding
 * either (the index first). Every file of a set is opened and checked;
 * a tensor the index places in a file that lacks it, or one in two
 * files, is an error. The metadata is the first part's. -1 with the
 * error in *e otherwise. */
int rt_st_open_set(RtStFile *f, const char *path, RtErr *e);
const RtStTensor *rt_st_find(const RtStFile *f, const char *name);
/* Adds to f a tensor NAME [n, piece shape...] whose k-th slice is
 * pieces[k] (tensors of f, all of one shape, as a Hugging Face checkpoint
 * keeps one tensor per expert); reading it reads the pieces in order,
 * each converted from its own dtype. The pieces stay in f. */
void rt_st_stack(RtStFile *f, const char *name, const RtStTensor *const *pieces, int n);
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
 * The temporary is PATH.tmp.HOST.PID.N (rt_st_tmp_name), a name no other
 * writer uses; RT_ST_TMP_MARK is what marks it as ours for the clean-up
 * of leftovers (checkpoint.c).
 *
 * Fault injection for the tests: with RT_FAULT_AFTER_BYTES=N in the
 * environment the process dies (exit status 3, nothing cleaned up) once N
 * bytes of checkpoint data have been written, counted over the whole run. */
void rt_st_write(const char *path, const RtStOut *t, int n, const char *const *meta, int nmeta);
#define RT_ST_TMP_MARK ".tmp."
char *rt_st_tmp_name(const char *path);

/* Checksums (st_check.c; abi/formats.h: CKPT_CHECKSUMS_KEY). rt_st_write
 * puts one per tensor in the metadata of every file it writes: XXH64 of
 * the tensor's bytes as stored, so that a flipped byte, a truncated
 * tensor or two tensors whose names were swapped are found. */
typedef struct RtXxh64 {
  uint64_t v[4];
  uint64_t total;
  unsigned char buf[32];
  unsigned fill;
} RtXxh64;
void rt_xxh64_init(RtXxh64 *s);
void rt_xxh64_update(RtXxh64 *s, const void *data, size_t n);
uint64_t rt_xxh64_digest(const RtXxh64 *s);
uint64_t rt_xxh64(const void *data, size_t n);
/* The manifest of n tensors (malloc'd text, one "HEX16 NAME" line each). */
char *rt_st_checksums_text(const RtStOut *t, int n);
typedef struct RtStSum {
  char *name;
  uint64_t hash;
} RtStSum;
/* Parses a manifest (path names the file in errors): -1 with the error in
 * *e for a malformed line or a name listed twice; else the entries, sorted
 * by name, in *out (free with rt_st_sums_free). */
int rt_st_checksums_parse(const char *text, const char *path, RtStSum **out, int *n, RtErr *e);
const RtStSum *rt_st_sums_find(const RtStSum *s, int n, const char *name);
void rt_st_sums_free(RtStSum *s, int n);
/* Reads every tensor of f and compares it with the manifest: 1 when all
 * match, 0 when the file holds no manifest (written elsewhere, or by an
 * older shardc), -1 with the error in *e (naming the first tensor that
 * differs, one the manifest lacks or one it lists that the file lacks). */
int rt_st_verify(const RtStFile *f, RtErr *e);

#endif
