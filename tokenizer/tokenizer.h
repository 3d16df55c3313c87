/* Byte-level BPE tokenizers (GPT-2's kind): reading the files other tools
 * write (GPT-2's vocab.json + merges.txt, Hugging Face's tokenizer.json,
 * tiktoken's rank files), training a vocabulary on a corpus, encoding with
 * GPT-2's pre-tokenisation and special tokens, decoding, and writing a
 * tokenizer.json that Hugging Face's `tokenizers` loads. This folder
 * includes nothing of ours: the compiler's driver uses it, rank programs
 * never do (they see token ids only). */
#ifndef SHARDC_TOKENIZER_H
#define SHARDC_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct TokBpe TokBpe;

/* The end-of-text token's text: documents are separated by it. */
#define TOK_EOT_TEXT "<|endoftext|>"

/* A growable array of token ids. */
typedef struct TokIds {
  uint32_t *ids;
  size_t n, cap;
} TokIds;

/* The message of the last failure of any function below ("FILE:LINE: ..."),
 * for the caller to print. */
const char *tok_error(void);

/* Reads a tokenizer from a comma-separated list of files: one
 * tokenizer.json (a BPE model with a ByteLevel pre-tokenizer), a
 * vocab.json and a merges.txt (in either order), or one tiktoken rank file
 * (any other name; "<|endoftext|>" then gets the id after the last rank).
 * NULL on failure, see tok_error(). */
TokBpe *tok_load(const char *files);
void tok_free(TokBpe *t);

/* The number of ids (the largest id + 1), and the end-of-text id or -1. */
int64_t tok_vocab_size(const TokBpe *t);
int64_t tok_eot(const TokBpe *t);

/* Appends the ids of text[0..n) to out: special tokens that occur in the
 * text become their ids, the rest is pre-tokenised and merged. Returns
 * false on invalid UTF-8 (tok_error() names the byte offset, counted from
 * `base`, which streaming callers advance). */
bool tok_encode(TokBpe *t, const unsigned char *text, size_t n, uint64_t base, TokIds *out);

/* The bytes of one token (NULL for an id out of range). */
const unsigned char *tok_token_bytes(const TokBpe *t, int64_t id, size_t *len);

/* A point at which text may be cut so that encoding the two parts gives
 * the ids of the whole: after a line break that has no white space on
 * either side. Returns the largest such point below n, or 0. A special
 * token with a line break inside it could span such a point; GPT-2's and
 * ours have none. */
size_t tok_safe_cut(const unsigned char *text, size_t n);

/* Training: feed the corpus in pieces cut at tok_safe_cut points, then
 * learn vocab_size - 257 merges (256 byte tokens first, in byte order,
 * then the merges, then "<|endoftext|>" as the last id). */
typedef struct TokTrainer TokTrainer;
TokTrainer *tok_trainer_new(void);
bool tok_trainer_feed(TokTrainer *tr, const unsigned char *text, size_t n, uint64_t base);
/* Ends training. `progress`, when not NULL, is called now and then with
 * the merges done so far. Frees the trainer. */
TokBpe *tok_trainer_finish(TokTrainer *tr, int64_t vocab_size,
                           void (*progress)(int64_t done, int64_t total));

/* Writes Hugging Face's tokenizer.json format (loadable by
 * tokenizers.Tokenizer.from_file). False on failure, see tok_error(). */
bool tok_save_json(const TokBpe *t, const char *path);

#endif
