/* A map from pointers to pointers (open addressing, linear probing). Passes
 * use it to attach facts to values and nodes: an unrolled graph holds many
 * thousands of them, so linear searches would not do. */
#include <stdint.h>
#include <stdlib.h>

#include "ir.h"

static size_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static size_t probe(const IrPtrMap *m, const void *key) {
  size_t i = hash_ptr(key) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return i;
}

void ir_ptrmap_put(IrPtrMap *m, const void *key, void *val) {
  if (!key || !val) die("ir_ptrmap_put: NULL key or value");
  if (2 * (m->len + 1) > m->cap) {
    IrPtrMap old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->len = 0;
    if (m->arena) {
      m->keys = ir_alloc(m->cap * sizeof *m->keys);
      m->vals = ir_alloc(m->cap * sizeof *m->vals);
    } else {
      m->keys = calloc(m->cap, sizeof *m->keys);
      m->vals = calloc(m->cap, sizeof *m->vals);
    }
    if (!m->keys || !m->vals) die("out of memory");
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i]) ir_ptrmap_put(m, old.keys[i], old.vals[i]);
    if (!m->arena) {
      free(old.keys);
      free(old.vals);
    }
  }
  size_t i = probe(m, key);
  if (!m->keys[i]) m->len++;
  m->keys[i] = key;
  m->vals[i] = val;
}

void *ir_ptrmap_get(const IrPtrMap *m, const void *key) {
  if (!m->cap || !key) return NULL;
  size_t i = probe(m, key);
  return m->keys[i] ? m->vals[i] : NULL;
}

void ir_ptrmap_free(IrPtrMap *m) {
  if (!m->arena) {
    free(m->keys);
    free(m->vals);
  }
  *m = (IrPtrMap){0};
}
