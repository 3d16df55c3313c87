/* Makes the files the runtime's shell tests feed to the toy model:
 *
 *   rt_testtool seq OUT N MOD          tokens i % MOD, i < N
 *   rt_testtool text OUT STRING REPEAT the bytes of STRING, REPEAT times
 *   rt_testtool header OUT INDEX VALUE overwrite int32 INDEX of the header
 *   rt_testtool token OUT POS VALUE    overwrite the uint16 token at POS
 *   rt_testtool st OUT JSON NBYTES     a safetensors file: the JSON header as
 *                                      given, then NBYTES zero bytes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

static int usage(void) {
  fprintf(stderr, "usage: rt_testtool seq|text|header|token|st OUT ...\n");
  return 2;
}

static int patch(const char *path, long offset, const void *bytes, size_t n) {
  FILE *f = fopen(path, "r+b");
  if (!f || fseek(f, offset, SEEK_SET) != 0 || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
    perror(path);
    return 1;
  }
  return 0;
}

static int write_st(const char *path, const char *json, long nbytes) {
  FILE *f = fopen(path, "wb");
  if (!f) return perror(path), 1;
  unsigned long long n = strlen(json);
  unsigned char len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (unsigned char)(n >> (8 * i));
  fwrite(len, 1, 8, f);
  fputs(json, f);
  for (long i = 0; i < nbytes; i++)
    fputc(0, f);
  return fclose(f) != 0;
}

int main(int argc, char **argv) {
  if (argc < 5) return usage();
  const char *cmd = argv[1], *out = argv[2];
  if (!strcmp(cmd, "seq")) {
    long n = atol(argv[3]), mod = atol(argv[4]);
    uint16_t *t = malloc((size_t)n * 2 + 2);
    for (long i = 0; i < n; i++)
      t[i] = (uint16_t)(i % mod);
    int rc = rt_data_write_shard(out, t, n) != 0;
    free(t);
    return rc;
  }
  if (!strcmp(cmd, "text")) {
    size_t len = strlen(argv[3]);
    long rep = atol(argv[4]), n = (long)len * rep;
    uint16_t *t = malloc((size_t)n * 2 + 2);
    for (long i = 0; i < n; i++)
      t[i] = (unsigned char)argv[3][i % (long)len];
    int rc = rt_data_write_shard(out, t, n) != 0;
    free(t);
    return rc;
  }
  if (!strcmp(cmd, "header")) {
    int32_t v = (int32_t)atol(argv[4]);
    return patch(out, 4 * atol(argv[3]), &v, 4);
  }
  if (!strcmp(cmd, "token")) {
    uint16_t v = (uint16_t)atol(argv[4]);
    return patch(out, 1024 + 2 * atol(argv[3]), &v, 2);
  }
  if (!strcmp(cmd, "st")) return write_st(out, argv[3], atol(argv[4]));
  return usage();
}
