/* `shardc data`: turns a text file into byte-level token shards (vocab 256)
 * in llm.c's format, so the demo corpus, and any text a user has, trains
 * without other tools. Its constants come from abi/formats.h, which the runtime
 * reads them from too. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../abi/formats.h"
#include "driver.h"

static const DrvOption data_options[] = {
    {"-o", "OUT.bin", "the training shard to write (required)"},
    {"--val", "VAL.bin", "also write a validation shard from the end of the text"},
    {"--val-fraction", "F", "share of the text for --val (default 0.1)"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_data_command = {
    "data", "TEXT -o OUT.bin [--val VAL.bin [--val-fraction F]]",
    "turn a text file into byte-level token shards (vocab 256)",
    "Each byte of TEXT becomes one token (0..255). Shards use llm.c's format:\n"
    "a header of 256 int32 (magic 20240520, version 1, token count) and then\n"
    "the tokens as uint16. Files are written to a temporary name and renamed.",
    data_options, drv_cmd_data};

static int fail(const char *path, const char *what) {
  fprintf(stderr, "shardc data: error: %s: %s\n", path, what);
  return 1;
}

/* Writes one shard atomically: a crash leaves either the old file or the
 * whole new one. */
static int write_shard(const char *path, const unsigned char *bytes, size_t n) {
  if (n > 0x7fffffff) return fail(path, "more than 2^31 tokens do not fit one shard");
  char *tmp = ir_fmt("%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return fail(tmp, strerror(errno));
  int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)n};
  bool ok = fwrite(header, sizeof header, 1, f) == 1;
  uint16_t buf[4096];
  for (size_t i = 0; ok && i < n; i += 4096) {
    size_t m = n - i < 4096 ? n - i : 4096;
    for (size_t j = 0; j < m; j++) buf[j] = bytes[i + j]; /* little-endian hosts only */
    ok = fwrite(buf, sizeof buf[0], m, f) == m;
  }
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return fail(path, strerror(err));
  }
  printf("wrote %s: %s tokens\n", path, ir_fmt("%zu", n));
  return 0;
}

int drv_cmd_data(int nargs, DrvArg *args) {
  const char *in = drv_model_arg(&drv_data_command, nargs, args);
  const char *out = drv_value(nargs, args, "-o");
  const char *val = drv_value(nargs, args, "--val");
  const char *frac_s = drv_value(nargs, args, "--val-fraction");
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
  FILE *f = fopen(in, "rb");
  if (!f) return fail(in, strerror(errno));
  size_t cap = 1 << 20, n = 0;
  unsigned char *text = malloc(cap);
  for (size_t got; text && (got = fread(text + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) text = realloc(text, cap *= 2);
  }
  bool read_error = ferror(f);
  fclose(f);
  if (!text) die("out of memory reading %s", in);
  if (read_error) {
    free(text);
    return fail(in, "read error");
  }
  size_t nval = val ? (size_t)((double)n * frac) : 0;
  if (n - nval < 2 || (val && nval < 2)) {
    free(text);
    return fail(in, "too little text to make a shard");
  }
  int rc = write_shard(out, text, n - nval);
  if (rc == 0 && val) rc = write_shard(val, text + n - nval, nval);
  free(text);
  return rc;
}
