/* `shardc data`: turns a text file into token shards in llm.c's format,
 * byte-level (vocab 256) by default, or with a byte-level BPE tokenizer
 * read from files (--tokenizer) or trained on the text (--bpe N). The text
 * streams through in one pass (two with --bpe: counting words, then
 * encoding), so a file larger than memory works; shards of a set size
 * (--shard-tokens) are written one after the other. Its constants come
 * from abi/formats.h, which the runtime reads them from too. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../abi/formats.h"
#include "../tokenizer/tokenizer.h"
#include "bpe_text.h"
#include "driver.h"

static const DrvOption data_options[] = {
    {"-o", "OUT.bin", "the training shard to write (required); with --shard-tokens, OUT_000000.bin, ..."},
    {"--val", "VAL.bin", "also write a validation shard from the end of the text"},
    {"--val-fraction", "F", "share of the text for --val (default 0.1)"},
    {"--tokenizer", "FILES", "encode with a byte-level BPE: tokenizer.json, vocab.json,merges.txt, or a tiktoken rank file"},
    {"--bpe", "N", "train a byte-level BPE vocabulary of N tokens (257..65536) on the text, then encode with it"},
    {"--shard-tokens", "N", "write shards of N tokens each (the last one shorter) instead of one file"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_data_command = {
    "data", "TEXT -o OUT.bin [--val VAL.bin] [--tokenizer FILES | --bpe N] [--shard-tokens N]",
    "turn a text file into token shards (byte-level, or byte-level BPE)",
    "Without a tokenizer each byte of TEXT becomes one token (0..255). With\n"
    "--tokenizer or --bpe the text is encoded with GPT-2's pre-tokenisation and\n"
    "the BPE merges; every document starts with the end-of-text token, and a\n"
    "literal <|endoftext|> in the text separates documents. OUT.tokenizer\n"
    "(and OUT.tokenizer.json with --bpe) records the tokenizer beside the\n"
    "shards, where `shardc sample` finds it. Shards use llm.c's format: a\n"
    "header of 256 int32 (magic 20240520, version 1, token count) and then\n"
    "the tokens as uint16, so vocabularies above 65,536 are refused. Files are\n"
    "written to a temporary name and renamed.",
    data_options, drv_cmd_data};

static int fail(const char *path, const char *what) {
  fprintf(stderr, "shardc data: error: %s: %s\n", path, what);
  return 1;
}

/* ------------------------------------------------------------ shards */

/* A stream of tokens into one shard, or into numbered shards of a set
 * size. Each file is written to a temporary name and renamed when
 * complete, so a crash leaves either no file or a whole one. */
typedef struct Sink {
  const char *path;   /* as given: OUT.bin */
  int64_t per_shard;  /* 0: one file, named path */
  int index;
  FILE *f;
  const char *tmp, *name;
  int64_t in_file, total;
  uint16_t buf[8192];
  size_t nbuf;
} Sink;

static const char *strip_bin(const char *path) {
  size_t n = strlen(path);
  return n > 4 && strcmp(path + n - 4, ".bin") == 0 ? ir_fmt("%.*s", (int)(n - 4), path) : path;
}

static bool sink_open(Sink *s) {
  s->name = s->per_shard ? ir_fmt("%s_%06d.bin", strip_bin(s->path), s->index++) : s->path;
  s->tmp = ir_fmt("%s.tmp.%d", s->name, (int)getpid());
  s->f = fopen(s->tmp, "wb");
  if (!s->f) return fail(s->tmp, strerror(errno)), false;
  int32_t header[SHARD_HEADER_INTS] = {0};
  s->in_file = 0;
  return fwrite(header, sizeof header, 1, s->f) == 1 || (fail(s->tmp, strerror(errno)), false);
}

static bool sink_flush(Sink *s) {
  bool ok = fwrite(s->buf, sizeof s->buf[0], s->nbuf, s->f) == s->nbuf; /* little-endian hosts only */
  s->nbuf = 0;
  return ok || (fail(s->tmp, strerror(errno)), false);
}

static bool sink_close(Sink *s) {
  if (!s->f) return true;
  if (!sink_flush(s)) return false;
  int32_t header[3] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)s->in_file};
  bool ok = fseek(s->f, 0, SEEK_SET) == 0 && fwrite(header, sizeof header, 1, s->f) == 1;
  ok = ok && fflush(s->f) == 0 && fsync(fileno(s->f)) == 0;
  ok = (fclose(s->f) == 0) && ok;
  s->f = NULL;
  if (!ok || rename(s->tmp, s->name) != 0) {
    int err = errno;
    unlink(s->tmp);
    return fail(s->name, strerror(err)), false;
  }
  /* The progress line, if one is showing, gives way to this one. */
  if (isatty(STDERR_FILENO)) fputs("\r\033[K", stderr), fflush(stderr);
  printf("wrote %s: %s tokens\n", s->name, ir_fmt("%lld", (long long)s->in_file));
  fflush(stdout);
  return true;
}

/* After an error: the shard being written goes (the ones before it are
 * complete and stay). */
static void sink_abort(Sink *s) {
  if (!s->f) return;
  fclose(s->f);
  s->f = NULL;
  unlink(s->tmp);
}

static bool sink_put(Sink *s, const uint32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int64_t limit = s->per_shard ? s->per_shard : INT32_MAX;
    if (s->f && s->in_file == limit) {
      if (!s->per_shard) return fail(s->name, "more than 2^31 - 1 tokens do not fit one shard (see --shard-tokens)"), false;
      if (!sink_close(s)) return false;
    }
    if (!s->f && !sink_open(s)) return false;
    s->buf[s->nbuf++] = (uint16_t)ids[i];
    s->in_file++, s->total++;
    if (s->nbuf == sizeof s->buf / sizeof s->buf[0] && !sink_flush(s)) return false;
  }
  return true;
}

/* ------------------------------------------------------------ reading */

/* Hands out the text in chunks that end where encoding may cut it (see
 * tok_safe_cut), and a switch to the validation part at `split`. */
typedef struct Reader {
  const char *path;
  FILE *f;
  unsigned char *buf;
  size_t cap, len, taken;
  uint64_t base, size, split; /* base: the offset of buf[0] */
  bool eof, bytes;            /* bytes: byte-level, any cut will do */
  int part;                   /* 0: training text, 1: validation text */
  double start, shown;
  const char *what;
  int64_t *tokens;            /* for the progress line, or NULL */
} Reader;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *human_time(double s) {
  if (s >= 3600) return ir_fmt("%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
  if (s >= 60) return ir_fmt("%dm%02ds", (int)(s / 60), (int)s % 60);
  return ir_fmt("%ds", (int)s);
}

/* The progress line, on a terminal only, a few times a second. */
static void show_progress(Reader *r, bool last) {
  if (!isatty(STDERR_FILENO)) return;
  double t = now_s();
  if (!last && t - r->shown < 0.25) return;
  r->shown = t;
  double done = (double)(r->base + r->taken), el = t - r->start, rate = el > 0 ? done / el : 0;
  double left = rate > 0 ? ((double)r->size - done) / rate : 0;
  fprintf(stderr, "\r%s: %.1f / %.1f MB (%3.0f%%)", r->what, done / 1e6, (double)r->size / 1e6,
          r->size ? 100 * done / (double)r->size : 100.0);
  if (r->tokens) fprintf(stderr, " | %lld tokens", (long long)*r->tokens);
  fprintf(stderr, " | %.2f MB/s | %s %s   ", rate / 1e6, last ? "took" : "left",
          human_time(last ? el : left));
  if (last) fputc('\n', stderr);
  fflush(stderr);
}

static bool reader_open(Reader *r, const char *path, double frac, bool bytes) {
  *r = (Reader){.path = path, .bytes = bytes};
  r->f = fopen(path, "rb");
  struct stat st;
  if (!r->f || fstat(fileno(r->f), &st) != 0) return fail(path, strerror(errno)), false;
  if (!S_ISREG(st.st_mode)) return fail(path, "not a regular file"), false;
  r->size = (uint64_t)st.st_size;
  r->split = frac > 0 ? r->size - (uint64_t)((double)r->size * frac) : r->size;
  /* SHARDC_DATA_CHUNK_BYTES makes the chunks small, so that the tests cut
   * a small text in many places. */
  const char *chunk = getenv("SHARDC_DATA_CHUNK_BYTES");
  r->cap = chunk && atol(chunk) >= 16 ? (size_t)atol(chunk) : 4 << 20;
  r->buf = malloc(r->cap);
  if (!r->buf) die("out of memory reading %s", path);
  return true;
}

static bool reader_rewind(Reader *r) {
  r->len = r->taken = 0;
  r->base = 0;
  r->eof = false;
  r->part = 0;
  return fseek(r->f, 0, SEEK_SET) == 0 || (fail(r->path, strerror(errno)), false);
}

/* The next chunk of the current part: *n = 0 when the part is over. */
static bool reader_next(Reader *r, const unsigned char **chunk, size_t *n, int part) {
  *n = 0;
  if (r->part != part) return true;
  memmove(r->buf, r->buf + r->taken, r->len - r->taken);
  r->len -= r->taken, r->base += r->taken, r->taken = 0;
  for (;;) {
    if (!r->eof && r->len < r->cap) {
      size_t got = fread(r->buf + r->len, 1, r->cap - r->len, r->f);
      if (ferror(r->f)) return fail(r->path, "read error"), false;
      r->len += got;
      r->eof = got == 0 && feof(r->f);
      if (!r->eof && r->len < r->cap) continue;
    }
    size_t cut = 0;
    bool to_val = part == 0 && r->base + r->len >= r->split && r->split < r->size;
    if (to_val) {
      /* The validation part starts after the first line break at or past
       * the split (at the split itself for byte-level, or when the text has
       * no line break left), never inside a UTF-8 character. */
      cut = (size_t)(r->split - r->base);
      if (!r->bytes) {
        const unsigned char *nl = memchr(r->buf + cut, '\n', r->len - cut);
        if (nl) cut = (size_t)(nl - r->buf) + 1;
        else if (!r->eof) cut = 0; /* read on to find the line break */
        while (cut && cut < r->len && (r->buf[cut] & 0xC0) == 0x80) cut++;
      }
    } else {
      cut = r->eof || r->bytes ? r->len : tok_safe_cut(r->buf, r->len);
    }
    if (cut == 0 && !r->eof) { /* no place to cut: a longer buffer */
      r->buf = realloc(r->buf, r->cap *= 2);
      if (!r->buf) die("out of memory reading %s: no line break to cut the text at", r->path);
      continue;
    }
    *chunk = r->buf;
    *n = cut;
    r->taken = cut;
    if (to_val) r->part = 1;
    show_progress(r, false);
    return true;
  }
}

static void reader_close(Reader *r) {
  if (r->f) fclose(r->f);
  free(r->buf);
}

/* Encodes one part of the text into its shards. */
static bool encode_part(Reader *r, int part, TokBpe *tok, Sink *s) {
  TokIds ids = {0};
  bool ok = true;
  r->tokens = &s->total;
  if (tok) { /* each document starts with the end-of-text token, as in llm.c's data */
    uint32_t eot = (uint32_t)tok_eot(tok);
    ok = sink_put(s, &eot, 1);
  }
  const unsigned char *chunk;
  size_t n;
  while (ok && (ok = reader_next(r, &chunk, &n, part)) && n > 0) {
    ids.n = 0;
    if (tok && !tok_encode(tok, chunk, n, r->base, &ids)) {
      ok = fail(r->path, tok_error()) == 0;
      break;
    }
    if (!tok) {
      if (ids.cap < n) ids.ids = realloc(ids.ids, (ids.cap = n) * sizeof *ids.ids);
      if (!ids.ids) die("out of memory");
      for (size_t i = 0; i < n; i++) ids.ids[i] = chunk[i];
      ids.n = n;
    }
    ok = sink_put(s, ids.ids, ids.n);
  }
  free(ids.ids);
  if (ok && s->total < 2) ok = fail(r->path, "too little text to make a shard") == 0;
  if (!ok) {
    sink_abort(s);
    return false;
  }
  show_progress(r, true);
  return sink_close(s);
}

static void show_merges(int64_t done, int64_t total) {
  if (!isatty(STDERR_FILENO)) return;
  fprintf(stderr, "\rtraining the vocabulary: %lld / %lld merges", (long long)done, (long long)total);
  if (done >= total) fputc('\n', stderr);
  fflush(stderr);
}

/* Counts the words of the training part and learns `size` tokens. */
static TokBpe *train(Reader *r, int64_t size) {
  TokTrainer *tr = tok_trainer_new();
  r->what = "counting words";
  r->tokens = NULL;
  const unsigned char *chunk;
  size_t n;
  bool ok;
  while ((ok = reader_next(r, &chunk, &n, 0)) && n > 0)
    if (!tok_trainer_feed(tr, chunk, n, r->base)) {
      fail(r->path, tok_error());
      return NULL;
    }
  if (!ok) return NULL;
  show_progress(r, true);
  TokBpe *tok = tok_trainer_finish(tr, size, show_merges);
  if (tok_vocab_size(tok) < size)
    fprintf(stderr, "shardc data: note: the text has pairs for %lld tokens only, not %lld\n",
            (long long)tok_vocab_size(tok), (long long)size);
  return reader_rewind(r) ? tok : NULL;
}

/* OUT.tokenizer names the tokenizer files of the shards, one spec on one
 * line (see drv_find_tokenizer); with --bpe, OUT.tokenizer.json is the
 * vocabulary itself. */
static bool record_tokenizer(const char *out, TokBpe *tok, const char *files) {
  const char *prefix = strip_bin(out);
  const char *spec = files ? drv_absolute_files(files) : NULL;
  if (!files) {
    const char *json = ir_fmt("%s.tokenizer.json", prefix);
    if (!tok_save_json(tok, json)) return fail(json, tok_error()) == 0;
    printf("wrote %s: %lld tokens (the vocabulary)\n", json, (long long)tok_vocab_size(tok));
    const char *slash = strrchr(json, '/');
    spec = slash ? slash + 1 : json;
  }
  const char *side = ir_fmt("%s.tokenizer", prefix);
  FILE *f = fopen(side, "w");
  bool ok = f && fprintf(f, "%s\n", spec) > 0;
  ok = f && fclose(f) == 0 && ok;
  return ok || fail(side, strerror(errno)) == 0;
}

int drv_cmd_data(int nargs, DrvArg *args) {
  const char *in = drv_model_arg(&drv_data_command, nargs, args);
  const char *out = drv_value(nargs, args, "-o");
  const char *val = drv_value(nargs, args, "--val");
  const char *frac_s = drv_value(nargs, args, "--val-fraction");
  const char *files = drv_value(nargs, args, "--tokenizer");
  const char *bpe_s = drv_value(nargs, args, "--bpe");
  const char *shard_s = drv_value(nargs, args, "--shard-tokens");
  if (!in) return 1;
  if (!out) return drv_usage_error(&drv_data_command, "no output given (-o OUT.bin)");
  double frac = 0.1;
  if (frac_s) {
    char *end;
    frac = strtod(frac_s, &end);
    if (*end || end == frac_s || !(frac > 0 && frac < 1))
      return drv_usage_error(&drv_data_command, "--val-fraction: expected a number in (0, 1), got '%s'",
                             frac_s);
  }
  if (frac_s && !val)
    return drv_usage_error(&drv_data_command, "--val-fraction needs --val");
  if (files && bpe_s) return drv_usage_error(&drv_data_command, "--tokenizer and --bpe exclude each other");
  long long bpe = 0, per_shard = 0;
  char *end;
  if (bpe_s && ((bpe = strtoll(bpe_s, &end, 10)), *end || end == bpe_s || bpe < 257 || bpe > 65536))
    return drv_usage_error(&drv_data_command,
                           "--bpe: expected a vocabulary size in 257..65536 (256 bytes, merges and "
                           "<|endoftext|>; shards hold uint16 ids), got '%s'", bpe_s);
  if (shard_s && ((per_shard = strtoll(shard_s, &end, 10)), *end || end == shard_s || per_shard < 2 ||
                  per_shard > INT32_MAX))
    return drv_usage_error(&drv_data_command, "--shard-tokens: expected a count in 2..2147483647, got '%s'",
                           shard_s);
  TokBpe *tok = NULL;
  if (files) {
    tok = tok_load(files);
    if (!tok) return fprintf(stderr, "shardc data: error: %s\n", tok_error()), 1;
    if (tok_vocab_size(tok) > 65536) {
      fprintf(stderr, "shardc data: error: %s: a vocabulary of %lld tokens does not fit llm.c's token "
              "shards, whose ids are uint16 (at most 65,536 tokens)\n", files, (long long)tok_vocab_size(tok));
      return tok_free(tok), 1;
    }
    if (tok_eot(tok) < 0) {
      fprintf(stderr, "shardc data: error: %s: the vocabulary has no %s token to separate documents\n",
              files, TOK_EOT_TEXT);
      return tok_free(tok), 1;
    }
  }
  Reader r;
  bool ok = reader_open(&r, in, val ? frac : 0, !files && !bpe_s);
  r.start = now_s();
  if (ok && bpe_s) ok = (tok = train(&r, bpe)) != NULL;
  Sink train_sink = {.path = out, .per_shard = per_shard};
  Sink val_sink = {.path = val, .per_shard = per_shard};
  r.what = "encoding";
  r.start = now_s();
  ok = ok && encode_part(&r, 0, tok, &train_sink);
  ok = ok && (!val || encode_part(&r, 1, tok, &val_sink));
  ok = ok && (!tok || record_tokenizer(out, tok, files));
  reader_close(&r);
  tok_free(tok);
  return ok ? 0 : 1;
}
