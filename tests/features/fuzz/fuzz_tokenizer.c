/* Fuzzing the tokenizer readers (tokenizer/load.c): GPT-2's vocab.json +
 * merges.txt, Hugging Face's tokenizer.json and tiktoken's rank files.
 * tok_load picks the reader by file name, so the input's first byte picks
 * the format (mod 3) and the rest is the file's text; for vocab.json +
 * merges.txt a NUL byte separates the two files (none: merges.txt is
 * empty). Each file is a memory file reached through a symlink of the
 * right name in a private folder, made once.
 *
 * A tokenizer that loads then encodes a fixed text that walks the
 * pre-tokenisation's corners, and the input's own bytes; every id must be
 * below the vocabulary size and name a token. A bug is a crash, a
 * sanitizer report, a hang, an id out of range, or a failure without a
 * message. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../tokenizer/tokenizer.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { TOKJSON, VOCAB, MERGES, TIKTOKEN, NFILES };
static const char *const names[NFILES] = {"tokenizer.json", "vocab.json", "merges.txt", "ranks.tiktoken"};
static int fds[NFILES];
static char paths[NFILES][256];

/* The folder goes at exit (the memory files with the process). */
static char dirname_[160];
static void remove_dir(void) {
  for (int i = 0; i < NFILES; i++) unlink(paths[i]);
  rmdir(dirname_);
}

static void setup(void) {
  static bool done;
  if (done) return;
  const char *dir = fuzz_temp_dir(dirname_, sizeof dirname_, "tokenizer");
  atexit(remove_dir);
  for (int i = 0; i < NFILES; i++) {
    char target[64];
    fds[i] = memfd_create(names[i], 0);
    if (fds[i] < 0) perror("memfd_create"), abort();
    /* The link resolves in whichever process opens it: ours. */
    snprintf(target, sizeof target, "/proc/self/fd/%d", fds[i]);
    snprintf(paths[i], sizeof paths[i], "%s/%s", dir, names[i]);
    if (symlink(target, paths[i]) != 0) perror("symlink"), abort();
  }
  done = true;
}

static void put(int which, const uint8_t *data, size_t size) {
  if (ftruncate(fds[which], 0) != 0 || (size && pwrite(fds[which], data, size, 0) != (ssize_t)size))
    perror("writing the fuzz input"), abort();
}

static void check_ids(TokBpe *t, const unsigned char *text, size_t n) {
  TokIds ids = {0};
  if (tok_encode(t, text, n, 0, &ids)) {
    int64_t vocab = tok_vocab_size(t);
    for (size_t i = 0; i < ids.n; i++) {
      size_t len;
      if ((int64_t)ids.ids[i] >= vocab || !tok_token_bytes(t, ids.ids[i], &len)) abort();
    }
  } else if (!*tok_error()) {
    abort();
  }
  free(ids.ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  setup();
  int kind = data[0] % 3;
  const uint8_t *body = data + 1;
  size_t n = size - 1;
  char files[600];
  if (kind == 0) {
    put(TOKJSON, body, n);
    snprintf(files, sizeof files, "%s", paths[TOKJSON]);
  } else if (kind == 1) {
    const uint8_t *nul = memchr(body, 0, n);
    size_t nv = nul ? (size_t)(nul - body) : n;
    put(VOCAB, body, nv);
    put(MERGES, nul ? nul + 1 : body, nul ? n - nv - 1 : 0);
    snprintf(files, sizeof files, "%s,%s", paths[VOCAB], paths[MERGES]);
  } else {
    put(TIKTOKEN, body, n);
    snprintf(files, sizeof files, "%s", paths[TIKTOKEN]);
  }
  TokBpe *t = tok_load(files);
  if (!t) {
    if (!*tok_error()) abort();
    return 0;
  }
  static const char corners[] =
      "Hello world's  it's   \t\n\n  I'll we've you're 123 4567 \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87"
      " \xf0\x9f\x98\x80!! <|endoftext|>next  \r\n'S 'LL ?!.. end";
  check_ids(t, (const unsigned char *)corners, sizeof corners - 1);
  check_ids(t, body, n);
  tok_free(t);
  return 0;
}
