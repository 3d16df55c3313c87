/* The compiler's memory: one bump arena, freed as a whole at exit. Nothing
 * in the compiler frees an individual object, which keeps passes simple. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct Chunk {
  struct Chunk *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
} Chunk;

static Chunk *arena_head;

void *ir_alloc(size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (!arena_head || arena_head->used + size > arena_head->size) {
    size_t cap = size > (1u << 20) ? size : (1u << 20);
    Chunk *c = malloc(sizeof(Chunk) + cap);
    if (!c) die("out of memory allocating %zu bytes", size);
    c->next = arena_head;
    c->used = 0;
    c->size = cap;
    arena_head = c;
  }
  void *p = arena_head->data + arena_head->used;
  arena_head->used += size;
  memset(p, 0, size);
  return p;
}

void ir_arena_free_all(void) {
  while (arena_head) {
    Chunk *next = arena_head->next;
    free(arena_head);
    arena_head = next;
  }
}

char *ir_strndup(const char *s, size_t n) {
  char *p = ir_alloc(n + 1);
  memcpy(p, s, n);
  return p;
}

char *ir_strdup(const char *s) { return ir_strndup(s, strlen(s)); }

char *ir_vfmt(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  char *p = ir_alloc((size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  return p;
}

char *ir_fmt(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *p = ir_vfmt(fmt, ap);
  va_end(ap);
  return p;
}

/* Growth copies into a fresh arena block; the old block is simply left
 * behind, which costs little for the sizes a model graph reaches. */
void ir_vec_push(IrVec *v, void *item) {
  if (v->len == v->cap) {
    int cap = v->cap ? v->cap * 2 : 8;
    void **items = ir_alloc(sizeof(void *) * (size_t)cap);
    if (v->len) memcpy(items, v->items, sizeof(void *) * (size_t)v->len);
    v->items = items;
    v->cap = cap;
  }
  v->items[v->len++] = item;
}
