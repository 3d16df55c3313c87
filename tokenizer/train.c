/* Training a byte-level BPE vocabulary: the corpus is pre-tokenised as for
 * encoding and only the distinct pieces and their counts are kept, so a
 * large corpus streams through. Then the most frequent adjacent pair is
 * merged, again and again; pair counts are updated for the words that
 * hold the pair only, and a heap with lazy updates finds the next one. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct TokTrainer {
  uint64_t *key;        /* hash | 1; 0: empty */
  uint32_t *wpos, *wlen;
  int64_t *count;
  size_t cap, n;
  unsigned char *pool;
  size_t pool_n, pool_cap;
};

TokTrainer *tok_trainer_new(void) {
  TokTrainer *tr = calloc(1, sizeof *tr);
  if (!tr) abort();
  tr->cap = 1 << 16;
  tr->key = calloc(tr->cap, sizeof *tr->key);
  tr->wpos = tok_xmalloc(tr->cap * sizeof *tr->wpos);
  tr->wlen = tok_xmalloc(tr->cap * sizeof *tr->wlen);
  tr->count = tok_xmalloc(tr->cap * sizeof *tr->count);
  if (!tr->key) abort();
  return tr;
}

static void grow_words(TokTrainer *tr) {
  size_t ocap = tr->cap;
  uint64_t *okey = tr->key;
  uint32_t *opos = tr->wpos, *olen = tr->wlen;
  int64_t *ocount = tr->count;
  tr->cap *= 2;
  tr->key = calloc(tr->cap, sizeof *tr->key);
  tr->wpos = tok_xmalloc(tr->cap * sizeof *tr->wpos);
  tr->wlen = tok_xmalloc(tr->cap * sizeof *tr->wlen);
  tr->count = tok_xmalloc(tr->cap * sizeof *tr->count);
  if (!tr->key) abort();
  for (size_t i = 0; i < ocap; i++) {
    if (!okey[i]) continue;
    size_t h = (size_t)(okey[i] >> 7) & (tr->cap - 1);
    while (tr->key[h]) h = (h + 1) & (tr->cap - 1);
    tr->key[h] = okey[i], tr->wpos[h] = opos[i], tr->wlen[h] = olen[i], tr->count[h] = ocount[i];
  }
  free(okey), free(opos), free(olen), free(ocount);
}

static void count_piece(TokTrainer *tr, const unsigned char *p, size_t n) {
  uint64_t key = tok_hash(p, n) | 1;
  size_t mask = tr->cap - 1, h = (size_t)(key >> 7) & mask;
  for (; tr->key[h]; h = (h + 1) & mask)
    if (tr->key[h] == key && tr->wlen[h] == n && memcmp(tr->pool + tr->wpos[h], p, n) == 0) {
      tr->count[h]++;
      return;
    }
  if (tr->pool_n + n > tr->pool_cap) {
    tr->pool_cap = 2 * (tr->pool_n + n) + (1 << 20);
    tr->pool = tok_xrealloc(tr->pool, tr->pool_cap);
  }
  memcpy(tr->pool + tr->pool_n, p, n);
  tr->key[h] = key, tr->wpos[h] = (uint32_t)tr->pool_n, tr->wlen[h] = (uint32_t)n, tr->count[h] = 1;
  tr->pool_n += n;
  if (2 * ++tr->n > tr->cap) grow_words(tr);
}

bool tok_trainer_feed(TokTrainer *tr, const unsigned char *s, size_t n, uint64_t base) {
  if (!tok_check_utf8(s, n, base)) return false;
  if (tr->pool_n + n > UINT32_MAX)
    return tok_fail("the training corpus has more than 4 GiB of distinct words");
  const size_t elen = strlen(TOK_EOT_TEXT);
  /* The end-of-text marks separate documents; they are not learned. */
  for (size_t start = 0; start < n;) {
    const unsigned char *e = memmem(s + start, n - start, TOK_EOT_TEXT, elen);
    size_t stop = e ? (size_t)(e - s) : n;
    for (size_t i = start; i < stop;) {
      size_t j = tok_next_piece(s, i, stop);
      count_piece(tr, s + i, j - i);
      i = j;
    }
    start = e ? stop + elen : n;
  }
  return true;
}

/* ------------------------------------------------------------ merging */

typedef struct Pair {
  uint32_t a, b;
  int64_t count;
  uint32_t *where, nwhere, capwhere; /* words that hold (or held) the pair */
} Pair;

typedef struct HeapItem {
  int64_t count;
  uint32_t a, b, pair;
} HeapItem;

typedef struct Merger {
  uint32_t **sym, *len;   /* each word's symbols */
  int64_t *count;
  size_t nwords;
  Pair *pairs;
  size_t npairs, cappairs;
  uint64_t *pkey;         /* pair key + 1; 0: empty */
  uint32_t *pidx;
  size_t pcap;
  HeapItem *heap;
  size_t nheap, capheap;
  /* Scratch of one merge: the words it visited (by merge number), a copy
   * of the pair's word list, the pairs it made. */
  uint32_t *stamp, *list, *touched;
  size_t caplist, ntouched, captouched;
} Merger;

/* The most frequent pair first; among equals the smallest ids, so that
 * training is deterministic. */
static bool before(const HeapItem *x, const HeapItem *y) {
  if (x->count != y->count) return x->count > y->count;
  if (x->a != y->a) return x->a < y->a;
  return x->b < y->b;
}

static void hpush(Merger *m, uint32_t p) {
  if (m->nheap == m->capheap)
    m->heap = tok_xrealloc(m->heap, (m->capheap = 2 * m->capheap + 1024) * sizeof *m->heap);
  HeapItem v = {m->pairs[p].count, m->pairs[p].a, m->pairs[p].b, p};
  size_t i = m->nheap++;
  while (i > 0 && before(&v, &m->heap[(i - 1) / 2])) m->heap[i] = m->heap[(i - 1) / 2], i = (i - 1) / 2;
  m->heap[i] = v;
}

static HeapItem hpop(Merger *m) {
  HeapItem top = m->heap[0], v = m->heap[--m->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= m->nheap) break;
    if (c + 1 < m->nheap && before(&m->heap[c + 1], &m->heap[c])) c++;
    if (!before(&m->heap[c], &v)) break;
    m->heap[i] = m->heap[c], i = c;
  }
  m->heap[i] = v;
  return top;
}

static uint32_t pair_of(Merger *m, uint32_t a, uint32_t b) {
  if (2 * (m->npairs + 1) > m->pcap) {
    free(m->pkey), free(m->pidx);
    m->pcap = m->pcap ? 2 * m->pcap : 1 << 16;
    m->pkey = calloc(m->pcap, sizeof *m->pkey);
    m->pidx = tok_xmalloc(m->pcap * sizeof *m->pidx);
    if (!m->pkey) abort();
    for (uint32_t i = 0; i < m->npairs; i++) {
      uint64_t k = ((uint64_t)m->pairs[i].a << 32 | m->pairs[i].b) + 1;
      size_t h = (size_t)((k * 0x9e3779b97f4a7c15ull) >> 17) & (m->pcap - 1);
      while (m->pkey[h]) h = (h + 1) & (m->pcap - 1);
      m->pkey[h] = k, m->pidx[h] = i;
    }
  }
  uint64_t k = ((uint64_t)a << 32 | b) + 1;
  size_t h = (size_t)((k * 0x9e3779b97f4a7c15ull) >> 17) & (m->pcap - 1);
  for (; m->pkey[h]; h = (h + 1) & (m->pcap - 1))
    if (m->pkey[h] == k) return m->pidx[h];
  if (m->npairs == m->cappairs)
    m->pairs = tok_xrealloc(m->pairs, (m->cappairs = 2 * m->cappairs + 4096) * sizeof *m->pairs);
  m->pairs[m->npairs] = (Pair){a, b, 0, NULL, 0, 0};
  m->pkey[h] = k, m->pidx[h] = (uint32_t)m->npairs;
  return (uint32_t)m->npairs++;
}

/* Adds (sign 1) or removes (sign -1) the pairs of word w to the counts. */
static void count_word(Merger *m, uint32_t w, int sign, uint32_t z, uint32_t **touched, size_t *ntouched,
                       size_t *captouched) {
  uint32_t *s = m->sym[w];
  for (uint32_t i = 0; i + 1 < m->len[w]; i++) {
    uint32_t p = pair_of(m, s[i], s[i + 1]);
    Pair *pp = &m->pairs[p];
    pp->count += sign * m->count[w];
    if (sign < 0) continue;
    if (!pp->nwhere || pp->where[pp->nwhere - 1] != w) {
      if (pp->nwhere == pp->capwhere)
        pp->where = tok_xrealloc(pp->where, (pp->capwhere = 2 * pp->capwhere + 4) * sizeof *pp->where);
      pp->where[pp->nwhere++] = w;
    }
    if (touched && (s[i] == z || s[i + 1] == z)) {
      if (*ntouched == *captouched)
        *touched = tok_xrealloc(*touched, (*captouched = 2 * *captouched + 64) * sizeof **touched);
      (*touched)[(*ntouched)++] = p;
    }
  }
}

/* The trainer's distinct pieces as words of byte symbols; frees the trainer. */
static void merger_from(Merger *m, TokTrainer *tr) {
  m->nwords = tr->n;
  m->sym = tok_xmalloc((m->nwords + 1) * sizeof *m->sym);
  m->len = tok_xmalloc((m->nwords + 1) * sizeof *m->len);
  m->count = tok_xmalloc((m->nwords + 1) * sizeof *m->count);
  m->stamp = calloc(m->nwords + 1, sizeof *m->stamp);
  if (!m->stamp) abort();
  size_t w = 0;
  for (size_t i = 0; i < tr->cap; i++) {
    if (!tr->key[i]) continue;
    m->sym[w] = tok_xmalloc(tr->wlen[i] * sizeof **m->sym);
    for (uint32_t k = 0; k < tr->wlen[i]; k++) m->sym[w][k] = tr->pool[tr->wpos[i] + k];
    m->len[w] = tr->wlen[i];
    m->count[w] = tr->count[i];
    w++;
  }
  free(tr->key), free(tr->wpos), free(tr->wlen), free(tr->count), free(tr->pool), free(tr);
  for (uint32_t i = 0; i < m->nwords; i++) count_word(m, i, 1, UINT32_MAX, NULL, NULL, NULL);
  for (uint32_t p = 0; p < m->npairs; p++) hpush(m, p);
}

static void merger_free(Merger *m) {
  free(m->stamp), free(m->touched), free(m->list), free(m->heap), free(m->pkey), free(m->pidx);
  for (size_t p = 0; p < m->npairs; p++) free(m->pairs[p].where);
  free(m->pairs);
  for (size_t i = 0; i < m->nwords; i++) free(m->sym[i]);
  free(m->sym), free(m->len), free(m->count);
}

/* Replaces (a, b) by z in every word that holds it (the merge numbered
 * `stamp`), moving the pair counts of those words only, and queues the
 * pairs with z that it made. */
static void merge_words(Merger *m, uint32_t pair, uint32_t z, uint32_t stamp) {
  Pair *pp = &m->pairs[pair];
  uint32_t a = pp->a, b = pp->b;
  /* The pair's word list may grow below (count_word), so walk a copy. */
  size_t nlist = pp->nwhere;
  if (nlist > m->caplist) m->list = tok_xrealloc(m->list, (m->caplist = 2 * nlist) * sizeof *m->list);
  memcpy(m->list, pp->where, nlist * sizeof *m->list);
  m->ntouched = 0;
  for (size_t k = 0; k < nlist; k++) {
    uint32_t wi = m->list[k];
    if (m->stamp[wi] == stamp) continue;
    m->stamp[wi] = stamp;
    uint32_t *s = m->sym[wi], n = m->len[wi], o = 0;
    bool found = false;
    for (uint32_t i = 0; i + 1 < n && !found; i++) found = s[i] == a && s[i + 1] == b;
    if (!found) continue;
    count_word(m, wi, -1, z, NULL, NULL, NULL);
    for (uint32_t i = 0; i < n;) {
      if (i + 1 < n && s[i] == a && s[i + 1] == b) s[o++] = z, i += 2;
      else s[o++] = s[i++];
    }
    m->len[wi] = o;
    count_word(m, wi, 1, z, &m->touched, &m->ntouched, &m->captouched);
  }
  /* A pair pushed twice leaves a stale entry, which the loop skips. */
  for (size_t k = 0; k < m->ntouched; k++) hpush(m, m->touched[k]);
}

TokBpe *tok_trainer_finish(TokTrainer *tr, int64_t vocab_size, void (*progress)(int64_t, int64_t)) {
  TokBpe *t = tok_new();
  for (int b = 0; b < 256; b++) {
    unsigned char c = (unsigned char)b;
    tok_add_token(t, &c, 1);
  }
  Merger m = {0};
  merger_from(&m, tr);
  /* The merges make tokens until the vocabulary, with the end-of-text
   * token still to come, holds vocab_size ids. */
  int64_t total = vocab_size - 257, done = 0;
  unsigned char *buf = NULL;
  size_t capbuf = 0;
  while (t->n < vocab_size - 1 && m.nheap) {
    HeapItem top = hpop(&m);
    Pair *pp = &m.pairs[top.pair];
    if (top.count != pp->count) {
      if (pp->count > 0) hpush(&m, top.pair);
      continue;
    }
    if (top.count <= 0) break;
    size_t la = t->len[pp->a], lb = t->len[pp->b];
    if (la + lb > capbuf) buf = tok_xrealloc(buf, capbuf = 2 * (la + lb));
    memcpy(buf, t->pool + t->off[pp->a], la);
    memcpy(buf + la, t->pool + t->off[pp->b], lb);
    /* Two merges may spell the same token ("ab c", "a bc"): it keeps its
     * first id, as in tokenizers' trainer. */
    int64_t old = tok_find(t, buf, la + lb);
    uint32_t z = old >= 0 ? (uint32_t)old : tok_add_token(t, buf, la + lb);
    tok_add_merge(t, pp->a, pp->b, (uint32_t)done, z);
    done++;
    merge_words(&m, top.pair, z, (uint32_t)done);
    if (progress && done % 256 == 0) progress(t->n - 256, total);
  }
  if (progress) progress(t->n - 256, total);
  free(buf);
  merger_free(&m);
  tok_add_special(t, tok_add_token(t, (const unsigned char *)TOK_EOT_TEXT, strlen(TOK_EOT_TEXT)));
  return t;
}
