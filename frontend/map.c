/* Open addressing with linear probing, kept at most half full. Growing
 * leaves the old arrays in the arena, which costs at most as much again. */
#include <string.h>

#include "map.h"

static unsigned hash(const char *s) {
  unsigned h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* The slot that holds key, or the empty slot where it would go. */
static int slot(const FeMap *m, const char *key) {
  int i = (int)(hash(key) & (unsigned)(m->cap - 1));
  while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & (m->cap - 1);
  return i;
}

void *fe_map_get(const FeMap *m, const char *key) {
  if (m->len == 0) return NULL;
  int i = slot(m, key);
  return m->keys[i] ? m->vals[i] : NULL;
}

static void grow(FeMap *m) {
  FeMap old = *m;
  m->cap = old.cap ? old.cap * 2 : 16;
  m->keys = ir_alloc(sizeof(char *) * (size_t)m->cap);
  m->vals = ir_alloc(sizeof(void *) * (size_t)m->cap);
  for (int i = 0; i < old.cap; i++)
    if (old.keys[i]) {
      int j = slot(m, old.keys[i]);
      m->keys[j] = old.keys[i];
      m->vals[j] = old.vals[i];
    }
}

void fe_map_put(FeMap *m, const char *key, void *val) {
  if (2 * (m->len + 1) > m->cap) grow(m);
  int i = slot(m, key);
  if (!m->keys[i]) {
    m->keys[i] = key;
    m->len++;
  }
  m->vals[i] = val;
}
