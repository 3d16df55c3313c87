/* What the files of tokenizer/ share; nothing outside this folder sees it. */
#ifndef SHARDC_TOKENIZER_INTERNAL_H
#define SHARDC_TOKENIZER_INTERNAL_H

#include "tokenizer.h"

enum { TOK_MAX_SPECIAL = 64 };

/* The classes GPT-2's pattern distinguishes: \p{L}, \p{N}, \s, the rest. */
enum { TOK_OTHER, TOK_LETTER, TOK_NUMBER, TOK_SPACE };

/* A vocabulary, its merges, and the encoder's cache and scratch. */
struct TokBpe {
  int64_t n;                 /* ids 0..n-1 */
  uint32_t *off, *len, cap;  /* token id -> its bytes in pool */
  unsigned char *pool;
  size_t pool_n, pool_cap;
  int32_t byte_id[256];      /* the token of each single byte */
  /* (left, right) -> (rank, merged id); key 0 marks an empty slot. */
  uint64_t *mkey;
  uint32_t *mrank, *mres;
  size_t mcap, mcount;
  /* bytes -> id + 1 (0: empty), over every token. */
  uint32_t *vtab;
  size_t vcap;
  bool ignore_merges;        /* a piece that is a token is that token (tiktoken) */
  int nspecial;
  uint32_t special[TOK_MAX_SPECIAL];
  bool special_first[256];   /* the first bytes of special tokens */
  int64_t eot;
  /* The cache: piece bytes -> its ids, which encoding reuses for repeated
   * words. Cleared when full, so memory stays bounded on any input. */
  uint64_t *ckey;            /* hash | 1; 0: empty */
  uint32_t *cpos, *cn;       /* where the piece's bytes, then ids, start in cdata */
  size_t ccap, ccount;
  uint32_t *cdata;
  size_t cdata_n, cdata_cap;
  /* Scratch of the merge loop. */
  uint32_t *sym, *prev, *next;
  uint64_t *heap;
  size_t scratch_cap;
};

bool tok_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *tok_xmalloc(size_t n);
void *tok_xrealloc(void *p, size_t n);

TokBpe *tok_new(void);
/* Appends a token with the next id; returns the id. */
uint32_t tok_add_token(TokBpe *t, const unsigned char *bytes, size_t len);
int64_t tok_find(const TokBpe *t, const unsigned char *bytes, size_t len);
void tok_add_merge(TokBpe *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t res);
bool tok_has_merge(const TokBpe *t, uint32_t a, uint32_t b);
void tok_add_special(TokBpe *t, uint32_t id);
/* Checks that every byte has its token; false (with the file named) if not. */
bool tok_check_bytes(TokBpe *t, const char *file);

/* UTF-8 and the pre-tokenisation. */
int tok_class(uint32_t cp);
/* Checks text[0..n) for invalid UTF-8; the offset reported counts from base. */
bool tok_check_utf8(const unsigned char *s, size_t n, uint64_t base);
/* The end of the pre-token that starts at i (valid UTF-8 assumed). */
size_t tok_next_piece(const unsigned char *s, size_t i, size_t n);
/* The length of the special token at text[i..n), or 0. */
size_t tok_special_at(const TokBpe *t, const unsigned char *s, size_t i, size_t n, uint32_t *id);

/* GPT-2's printable stand-ins for bytes, in the files' token strings. */
uint32_t tok_byte_char(unsigned char b);
/* Decodes a token string of those stand-ins into bytes (out must hold
 * strlen(s) bytes); -1 if a character is not a stand-in. */
int64_t tok_chars_to_bytes(const char *s, unsigned char *out);
/* Encodes bytes as stand-ins, UTF-8, NUL-terminated (out: 2 * n + 1 bytes). */
void tok_bytes_to_chars(const unsigned char *b, size_t n, char *out);

uint64_t tok_hash(const unsigned char *p, size_t n);

#endif
