/* The file formats that a rank program reads and writes and that the
 * compiler's tools write too: token shards and checkpoints. Constants
 * only, so that the compiler side (`shardc data`) and the runtime agree by
 * construction without either linking the other.
 *
 * Token shards are llm.c's format, so data prepared for llm.c trains here
 * unchanged: a header of SHARD_HEADER_INTS int32 (SHARD_MAGIC,
 * SHARD_VERSION, the token count, the rest zero), then the tokens as
 * uint16. docs/formats.md describes both formats in full. */
#ifndef SHARD_ABI_FORMATS_H
#define SHARD_ABI_FORMATS_H

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)

/* A checkpoint is a folder: the weights by parameter name in
 * CKPT_MODEL_FILE, the optimizer state and the run's metadata (its
 * "format" key is CKPT_STATE_FORMAT) in CKPT_STATE_FILE. */
#define CKPT_MODEL_FILE "model.safetensors"
#define CKPT_STATE_FILE "state.safetensors"
#define CKPT_STATE_FORMAT "shardc-state-1"
/* With --keep-last, DIR holds one checkpoint folder per saved step,
 * CKPT_STEP_FMT of the step, and CKPT_LATEST_FILE names the newest
 * complete one (one line: the folder's name). */
#define CKPT_STEP_FMT "step-%08lld"
#define CKPT_LATEST_FILE "latest"
/* The lock a run holds on its --save folder for its whole life (flock):
 * "pid N host H" of the holder, for the refusal of a second run. */
#define CKPT_LOCK_FILE ".shardc-lock"
/* Metadata of both files: the run that wrote them (random at a fresh
 * start, kept across --resume) and the per-tensor checksums, one line per
 * tensor, "HEX16 NAME", HEX16 the XXH64 (seed 0) of the tensor's bytes as
 * stored. */
#define CKPT_RUN_ID_KEY "run_id"
#define CKPT_CHECKSUMS_KEY "checksums.xxh64"

#endif
