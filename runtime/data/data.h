/* Token data in llm.c's shard format: a header of 256 int32 (magic
 * 20240520, version 1, the token count, the rest zero) and then the tokens
 * as little-endian uint16.
 *
 * A data set is the sorted list of shards a file name or glob names. It is
 * read in windows of batch*seq+1 tokens: shard by shard, each shard gives
 * the windows that start at tokens 0, batch*seq, 2*batch*seq, ... and fit
 * inside it, and after the last shard the order starts again at the first.
 * Window w's first batch*seq tokens are the inputs, the batch*seq tokens
 * from position 1 on are the targets (each input's next token).
 *
 * No model types appear here, so that the driver (`shardc data`) can link
 * this file without the runtime. */
#ifndef SHARD_RT_DATA_H
#define SHARD_RT_DATA_H

#include <stdint.h>

#include "util.h"

typedef struct RtData RtData;

/* Opens and checks every shard PATTERN names: header, size, at least one
 * window, every token id below vocab. Any problem is a fatal error naming
 * the file. */
RtData *rt_data_open(const char *pattern, int64_t batch, int64_t seq, int64_t vocab);
/* The same returning NULL with the error in *e instead of exiting. */
RtData *rt_data_open_checked(const char *pattern, int64_t batch, int64_t seq, int64_t vocab,
                             RtErr *e);
void rt_data_close(RtData *d);
/* The sorted file list of a pattern (a plain name as it is), each string
 * and the array malloc'd; NULL with the error in *e when a glob matches
 * nothing. */
char **rt_data_expand(const char *pattern, int *n, RtErr *e);

int rt_data_shards(const RtData *d);
int64_t rt_data_tokens(const RtData *d);
/* Windows in one pass over all shards (one epoch). */
int64_t rt_data_windows(const RtData *d);

/* The window read at `step` (0-based): window step mod windows in order,
 * or, shuffled, position step mod windows of a permutation of the windows
 * that depends only on (seed, epoch). Returns the window's index. */
int64_t rt_data_window_at(RtData *d, int64_t step, int shuffle, uint64_t seed);
/* Copies window `w`'s batch*seq+1 tokens to out. */
void rt_data_read(RtData *d, int64_t w, int32_t *out);
/* The same returning -1 with the error in *e (a file changed or replaced
 * since it was opened, a token outside the vocabulary) instead of
 * exiting. */
int rt_data_read_checked(RtData *d, int64_t w, int32_t *out, RtErr *e);
/* Where window `w` lies, for messages and tests. */
const char *rt_data_window_file(const RtData *d, int64_t w, int64_t *first_token);

/* Writes tokens as one shard. Returns 0, or -1 after printing an error
 * that names the file. */
int rt_data_write_shard(const char *path, const uint16_t *tokens, int64_t n);

#endif
