/* A safetensors file built in memory for the harnesses that fuzz one part
 * of a valid file (its metadata): two F32 tensors, "a" [2] and "b" [3],
 * and the metadata given, written to the memory file of fuzz_input.h. */
#ifndef SHARD_FUZZ_ST_H
#define SHARD_FUZZ_ST_H

#include "fuzz_input.h"

#include <cjson/cJSON.h>
#include <string.h>

/* kv: nkv pairs of NUL-terminated strings. Returns the file's path. */
static const char *fuzz_st_file(const char *const *kv, int nkv) {
  static const float a[2] = {1.5f, -2}, b[3] = {0.25f, 4, -8};
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
  for (int i = 0; i < nkv; i++) {
    cJSON_DeleteItemFromObject(meta, kv[2 * i]);
    cJSON_AddStringToObject(meta, kv[2 * i], kv[2 * i + 1]);
  }
  const char *names[2] = {"a", "b"};
  int sizes[2] = {2, 3}, offset = 0;
  for (int t = 0; t < 2; t++) {
    cJSON *e = cJSON_AddObjectToObject(root, names[t]);
    cJSON_AddStringToObject(e, "dtype", "F32");
    cJSON *shape = cJSON_AddArrayToObject(e, "shape");
    cJSON_AddItemToArray(shape, cJSON_CreateNumber(sizes[t]));
    cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(off, cJSON_CreateNumber(offset));
    cJSON_AddItemToArray(off, cJSON_CreateNumber(offset + 4 * sizes[t]));
    offset += 4 * sizes[t];
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) abort();
  size_t hlen = strlen(text), total = 8 + hlen + sizeof a + sizeof b;
  unsigned char *file = malloc(total);
  if (!file) abort();
  for (int i = 0; i < 8; i++) file[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  memcpy(file + 8, text, hlen);
  memcpy(file + 8 + hlen, a, sizeof a);
  memcpy(file + 8 + hlen + sizeof a, b, sizeof b);
  free(text);
  const char *path = fuzz_input_file(file, total);
  free(file);
  return path;
}

#endif
