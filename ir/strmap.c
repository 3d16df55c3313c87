/* A map from strings to pointers (open addressing, linear probing, FNV-1a),
 * kept at most half full. The frontend's symbol tables, the IR parser's and
 * the passes' name sets all use it: a model of a million statements must not
 * make every lookup a scan. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

uint64_t ir_hash_bytes(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* The slot that holds the key name[0..n), or the empty slot where it goes. */
static size_t probe(const IrStrMap *m, const char *name, size_t n) {
  size_t i = (size_t)ir_hash_bytes(IR_HASH_SEED, name, n) & (m->cap - 1);
  while (m->keys[i] && !(strncmp(m->keys[i], name, n) == 0 && m->keys[i][n] == '\0'))
    i = (i + 1) & (m->cap - 1);
  return i;
}

static void *alloc_slots(const IrStrMap *m, size_t size) {
  void *p = m->arena ? ir_alloc(m->cap * size) : calloc(m->cap, size);
  if (!p) die("out of memory");
  return p;
}

static void grow(IrStrMap *m) {
  IrStrMap old = *m;
  m->cap = old.cap ? old.cap * 2 : 64;
  m->keys = alloc_slots(m, sizeof *m->keys);
  m->vals = alloc_slots(m, sizeof *m->vals);
  for (size_t i = 0; i < old.cap; i++)
    if (old.keys[i]) {
      size_t j = probe(m, old.keys[i], strlen(old.keys[i]));
      m->keys[j] = old.keys[i];
      m->vals[j] = old.vals[i];
    }
  if (!m->arena) {
    free(old.keys);
    free(old.vals);
  }
}

void *ir_strmap_put(IrStrMap *m, const char *key, void *val) {
  if (!key || !val) die("ir_strmap_put: NULL key or value");
  if (2 * (m->len + 1) > m->cap) grow(m);
  size_t i = probe(m, key, strlen(key));
  void *old = m->keys[i] ? m->vals[i] : NULL;
  if (!m->keys[i]) {
    m->keys[i] = key;
    m->len++;
  }
  m->vals[i] = val;
  return old;
}

void *ir_strmap_add(IrStrMap *m, const char *key, void *val) {
  void *old = ir_strmap_get(m, key);
  if (!old) ir_strmap_put(m, key, val);
  return old;
}

void *ir_strmap_getn(const IrStrMap *m, const char *name, size_t n) {
  if (!m->len) return NULL;
  size_t i = probe(m, name, n);
  return m->keys[i] ? m->vals[i] : NULL;
}

void *ir_strmap_get(const IrStrMap *m, const char *key) {
  return ir_strmap_getn(m, key, strlen(key));
}

void ir_strmap_free(IrStrMap *m) {
  if (!m->arena) {
    free(m->keys);
    free(m->vals);
  }
  *m = (IrStrMap){0};
}
