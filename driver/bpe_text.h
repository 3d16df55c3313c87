/* The driver's side of BPE tokenizers: where a data set's tokenizer is
 * recorded, and sampling text through one (rank programs see ids only). */
#ifndef SHARDC_DRIVER_BPE_TEXT_H
#define SHARDC_DRIVER_BPE_TEXT_H

#include "../tokenizer/tokenizer.h"

/* FILES (comma separated) with each path made absolute. */
const char *drv_absolute_files(const char *files);
/* The tokenizer that `shardc data` recorded beside the shards that a
 * --data value names (PREFIX.bin, PREFIX_000000.bin, PREFIX_*.bin, or
 * another glob, whose folder holds one .tokenizer file): the spec read
 * from PREFIX.tokenizer, with its relative paths resolved, or NULL when
 * there is none. */
const char *drv_find_tokenizer(const char *data);
/* The tokenizer of `shardc sample`: FILES when given, else the one
 * recorded beside DATA (the checkpoint's --data), else none (*tok = NULL:
 * bytes). False after an error: it does not load, or it has more tokens
 * than the model's vocabulary, read from the checkpoint's -D list. */
bool drv_sample_tokenizer(const char *files, const char *data, const char *defines, TokBpe **tok);
/* Runs a rank program that samples with --sample-ids: encodes the prompt
 * (argv[prompt_at] is replaced), then decodes the ids it prints and writes
 * their bytes to stdout as they come. Returns the exit status. */
int drv_sample_through(TokBpe *tok, const char *program, char **argv, int prompt_at);

#endif
