/* The vocabulary, its merge table, and encoding: special tokens first,
 * then GPT-2's pre-tokenisation, then the merges of each piece, lowest
 * rank first and, among equal ranks, leftmost first (what tokenizers and
 * tiktoken both do). Pieces repeat a lot in text, so their ids are cached. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { CACHE_SLOTS = 1 << 18, CACHE_DATA = 1 << 23 };

TokBpe *tok_new(void) {
  TokBpe *t = calloc(1, sizeof *t);
  if (!t) abort();
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  t->eot = -1;
  return t;
}

void tok_free(TokBpe *t) {
  if (!t) return;
  free(t->off), free(t->len), free(t->pool), free(t->mkey), free(t->mrank), free(t->mres);
  free(t->vtab), free(t->ckey), free(t->cpos), free(t->cn), free(t->cdata);
  free(t->sym), free(t->prev), free(t->next), free(t->heap);
  free(t);
}

int64_t tok_vocab_size(const TokBpe *t) { return t->n; }
int64_t tok_eot(const TokBpe *t) { return t->eot; }

const unsigned char *tok_token_bytes(const TokBpe *t, int64_t id, size_t *len) {
  if (id < 0 || id >= t->n) return NULL;
  *len = t->len[id];
  return t->pool + t->off[id];
}

static void vtab_insert(TokBpe *t, uint32_t id) {
  size_t mask = t->vcap - 1;
  size_t h = tok_hash(t->pool + t->off[id], t->len[id]) & mask;
  while (t->vtab[h]) h = (h + 1) & mask;
  t->vtab[h] = id + 1;
}

int64_t tok_find(const TokBpe *t, const unsigned char *bytes, size_t len) {
  if (!t->vcap) return -1;
  size_t mask = t->vcap - 1;
  for (size_t h = tok_hash(bytes, len) & mask; t->vtab[h]; h = (h + 1) & mask) {
    uint32_t id = t->vtab[h] - 1;
    if (t->len[id] == len && memcmp(t->pool + t->off[id], bytes, len) == 0) return id;
  }
  return -1;
}

uint32_t tok_add_token(TokBpe *t, const unsigned char *bytes, size_t len) {
  if ((uint32_t)t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 1024;
    t->off = tok_xrealloc(t->off, t->cap * sizeof *t->off);
    t->len = tok_xrealloc(t->len, t->cap * sizeof *t->len);
  }
  if (t->pool_n + len > t->pool_cap) {
    t->pool_cap = 2 * (t->pool_n + len) + 4096;
    t->pool = tok_xrealloc(t->pool, t->pool_cap);
  }
  uint32_t id = (uint32_t)t->n++;
  memcpy(t->pool + t->pool_n, bytes, len);
  t->off[id] = (uint32_t)t->pool_n;
  t->len[id] = (uint32_t)len;
  t->pool_n += len;
  if (len == 1 && t->byte_id[bytes[0]] < 0) t->byte_id[bytes[0]] = (int32_t)id;
  /* The table of bytes -> id stays at most half full. */
  if (2 * (size_t)t->n > t->vcap) {
    free(t->vtab);
    t->vcap = t->vcap ? 2 * t->vcap : 4096;
    t->vtab = calloc(t->vcap, sizeof *t->vtab);
    if (!t->vtab) abort();
    for (uint32_t i = 0; i < (uint32_t)t->n; i++) vtab_insert(t, i);
  } else if (tok_find(t, bytes, len) < 0) {
    vtab_insert(t, id); /* a second token with the same bytes is never looked up */
  }
  return id;
}

static inline uint64_t pair_key(uint32_t a, uint32_t b) { return ((uint64_t)a << 32 | b) + 1; }

static inline size_t merge_slot(const TokBpe *t, uint64_t key) {
  size_t mask = t->mcap - 1, h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & mask;
  while (t->mkey[h] && t->mkey[h] != key) h = (h + 1) & mask;
  return h;
}

void tok_add_merge(TokBpe *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t res) {
  if (2 * (t->mcount + 1) > t->mcap) {
    uint64_t *ok = t->mkey;
    uint32_t *orank = t->mrank, *ores = t->mres;
    size_t ocap = t->mcap;
    t->mcap = ocap ? 2 * ocap : 4096;
    t->mkey = calloc(t->mcap, sizeof *t->mkey);
    t->mrank = tok_xmalloc(t->mcap * sizeof *t->mrank);
    t->mres = tok_xmalloc(t->mcap * sizeof *t->mres);
    if (!t->mkey) abort();
    for (size_t i = 0; i < ocap; i++) {
      if (!ok[i]) continue;
      size_t h = merge_slot(t, ok[i]);
      t->mkey[h] = ok[i], t->mrank[h] = orank[i], t->mres[h] = ores[i];
    }
    free(ok), free(orank), free(ores);
  }
  uint64_t key = pair_key(a, b);
  size_t h = merge_slot(t, key);
  /* A pair listed twice keeps its first (lowest) rank. */
  if (t->mkey[h] && t->mrank[h] <= rank) return;
  if (!t->mkey[h]) t->mcount++;
  t->mkey[h] = key, t->mrank[h] = rank, t->mres[h] = res;
}

bool tok_has_merge(const TokBpe *t, uint32_t a, uint32_t b) {
  return t->mcap && t->mkey[merge_slot(t, pair_key(a, b))];
}

static inline bool find_merge(const TokBpe *t, uint32_t a, uint32_t b, uint32_t *rank, uint32_t *res) {
  if (!t->mcap) return false;
  size_t h = merge_slot(t, pair_key(a, b));
  if (!t->mkey[h]) return false;
  *rank = t->mrank[h], *res = t->mres[h];
  return true;
}

void tok_add_special(TokBpe *t, uint32_t id) {
  for (int k = 0; k < t->nspecial; k++)
    if (t->special[k] == id) return;
  if (t->nspecial == TOK_MAX_SPECIAL || t->len[id] == 0) return;
  t->special[t->nspecial++] = id;
  t->special_first[t->pool[t->off[id]]] = true;
  if (t->len[id] == strlen(TOK_EOT_TEXT) && memcmp(t->pool + t->off[id], TOK_EOT_TEXT, t->len[id]) == 0)
    t->eot = id;
}

bool tok_check_bytes(TokBpe *t, const char *file) {
  for (int b = 0; b < 256; b++)
    if (t->byte_id[b] < 0)
      return tok_fail("%s: the vocabulary has no token for byte 0x%02X; a byte-level BPE "
                      "vocabulary holds all 256 bytes",
                      file, b);
  return true;
}

/* ------------------------------------------------------------ merging */

/* A heap entry: rank in the high 32 bits, the position of the pair's left
 * symbol in the low ones, so that the smallest entry is the lowest rank
 * and then the leftmost pair. */
static inline void heap_push(uint64_t *h, size_t *n, uint64_t v) {
  size_t i = (*n)++;
  while (i > 0 && h[(i - 1) / 2] > v) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
  h[i] = v;
}

static inline uint64_t heap_pop(uint64_t *h, size_t *n) {
  uint64_t top = h[0], v = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1] < h[c]) c++;
    if (h[c] >= v) break;
    h[i] = h[c], i = c;
  }
  h[i] = v;
  return top;
}

static void grow_scratch(TokBpe *t, size_t n) {
  if (n <= t->scratch_cap) return;
  t->scratch_cap = 2 * n;
  t->sym = tok_xrealloc(t->sym, t->scratch_cap * sizeof *t->sym);
  t->prev = tok_xrealloc(t->prev, t->scratch_cap * sizeof *t->prev);
  t->next = tok_xrealloc(t->next, t->scratch_cap * sizeof *t->next);
  t->heap = tok_xrealloc(t->heap, 2 * t->scratch_cap * sizeof *t->heap);
}

static inline void push_pair(TokBpe *t, size_t *nh, uint32_t i) {
  uint32_t rank, res;
  if (find_merge(t, t->sym[i], t->sym[t->next[i]], &rank, &res))
    heap_push(t->heap, nh, (uint64_t)rank << 32 | i);
}

/* Merges the bytes of one piece; appends its ids to out. Symbols live at
 * the position of their first byte, in a linked list; a popped heap entry
 * whose pair has changed since it was pushed is skipped. */
static void merge_piece(TokBpe *t, const unsigned char *p, size_t n, TokIds *out) {
  grow_scratch(t, n + 1);
  uint32_t *sym = t->sym, *next = t->next, *prev = t->prev;
  const uint32_t END = (uint32_t)n;
  for (size_t i = 0; i < n; i++) {
    sym[i] = (uint32_t)t->byte_id[p[i]];
    next[i] = (uint32_t)i + 1;
    prev[i] = i ? (uint32_t)i - 1 : END;
  }
  size_t nh = 0;
  for (uint32_t i = 0; i + 1 < n; i++) push_pair(t, &nh, i);
  while (nh) {
    uint64_t e = heap_pop(t->heap, &nh);
    uint32_t i = (uint32_t)e, rank = (uint32_t)(e >> 32), r, res;
    if (sym[i] == UINT32_MAX || next[i] == END) continue;
    uint32_t j = next[i];
    if (!find_merge(t, sym[i], sym[j], &r, &res) || r != rank) continue;
    sym[i] = res;
    sym[j] = UINT32_MAX;
    next[i] = next[j];
    if (next[j] != END) prev[next[j]] = i;
    if (prev[i] != END) push_pair(t, &nh, prev[i]);
    if (next[i] != END) push_pair(t, &nh, i);
  }
  for (uint32_t i = 0; i != END; i = next[i]) {
    if (out->n == out->cap) {
      out->cap = out->cap ? 2 * out->cap : 4096;
      out->ids = tok_xrealloc(out->ids, out->cap * sizeof *out->ids);
    }
    out->ids[out->n++] = sym[i];
  }
}

/* ------------------------------------------------------------ the cache */

static void cache_clear(TokBpe *t) {
  if (!t->ckey) {
    t->ccap = CACHE_SLOTS;
    t->ckey = tok_xmalloc(t->ccap * sizeof *t->ckey);
    t->cpos = tok_xmalloc(t->ccap * sizeof *t->cpos);
    t->cn = tok_xmalloc(t->ccap * sizeof *t->cn);
    t->cdata_cap = CACHE_DATA;
    t->cdata = tok_xmalloc(t->cdata_cap * sizeof *t->cdata);
  }
  memset(t->ckey, 0, t->ccap * sizeof *t->ckey);
  t->ccount = 0;
  t->cdata_n = 0;
}

static inline void push_id(TokIds *out, uint32_t id) {
  if (out->n == out->cap) {
    out->cap = out->cap ? 2 * out->cap : 4096;
    out->ids = tok_xrealloc(out->ids, out->cap * sizeof *out->ids);
  }
  out->ids[out->n++] = id;
}

/* The piece's bytes are stored in cdata too (packed 4 to a word), so that
 * a hash collision is never taken for a hit. */
static void encode_piece(TokBpe *t, const unsigned char *p, size_t n, TokIds *out) {
  if (n == 1) return push_id(out, (uint32_t)t->byte_id[p[0]]);
  if (t->ignore_merges) {
    int64_t id = tok_find(t, p, n);
    if (id >= 0) return push_id(out, (uint32_t)id);
  }
  if (n > 256) return merge_piece(t, p, n, out); /* rare and long: not worth caching */
  uint64_t key = tok_hash(p, n) | 1;
  size_t mask = t->ccap - 1, h = (size_t)(key >> 7) & mask;
  size_t words = (n + 3) / 4;
  for (; t->ckey[h]; h = (h + 1) & mask) {
    if (t->ckey[h] != key) continue;
    const uint32_t *d = t->cdata + t->cpos[h];
    if (d[0] != n || memcmp(d + 1, p, n) != 0) continue;
    uint32_t k = t->cn[h];
    if (out->n + k > out->cap) {
      out->cap = 2 * (out->n + k) + 4096;
      out->ids = tok_xrealloc(out->ids, out->cap * sizeof *out->ids);
    }
    memcpy(out->ids + out->n, d + 1 + words, k * sizeof *d);
    out->n += k;
    return;
  }
  size_t before = out->n;
  merge_piece(t, p, n, out);
  size_t k = out->n - before;
  if (2 * (t->ccount + 1) > t->ccap || t->cdata_n + 1 + words + k > t->cdata_cap) {
    cache_clear(t);
    for (h = (size_t)(key >> 7) & mask; t->ckey[h]; h = (h + 1) & mask) {}
  }
  uint32_t *d = t->cdata + t->cdata_n;
  d[0] = (uint32_t)n;
  d[words] = 0;
  memcpy(d + 1, p, n);
  memcpy(d + 1 + words, out->ids + before, k * sizeof *d);
  t->ckey[h] = key, t->cpos[h] = (uint32_t)t->cdata_n, t->cn[h] = (uint32_t)k;
  t->cdata_n += 1 + words + k;
  t->ccount++;
}

static void encode_ordinary(TokBpe *t, const unsigned char *s, size_t n, TokIds *out) {
  for (size_t i = 0; i < n;) {
    size_t j = tok_next_piece(s, i, n);
    encode_piece(t, s + i, j - i, out);
    i = j;
  }
}

bool tok_encode(TokBpe *t, const unsigned char *s, size_t n, uint64_t base, TokIds *out) {
  if (!tok_check_utf8(s, n, base)) return false;
  if (!t->ckey) cache_clear(t);
  size_t start = 0;
  if (t->nspecial) {
    for (size_t i = 0; i < n; i++) {
      if (!t->special_first[s[i]]) continue;
      uint32_t id;
      size_t len = tok_special_at(t, s, i, n, &id);
      if (!len) continue;
      encode_ordinary(t, s + start, i - start, out);
      push_id(out, id);
      i += len - 1;
      start = i + 1;
    }
  }
  encode_ordinary(t, s + start, n - start, out);
  return true;
}
