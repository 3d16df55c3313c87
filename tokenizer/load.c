/* Reading tokenizers from the files other tools write, and writing
 * Hugging Face's tokenizer.json. Every error names the file and, where the
 * format has them, the line (and column) or the token. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The whole file, NUL-terminated, or NULL after tok_fail. */
static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return tok_fail("%s: %s", path, strerror(errno)), NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = tok_xmalloc(cap);
  for (size_t got; (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (n + 1 == cap) buf = tok_xrealloc(buf, cap *= 2);
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) return free(buf), tok_fail("%s: read error", path), NULL;
  buf[n] = 0;
  *len = n;
  return buf;
}

static void line_col(const char *text, const char *at, int *line, int *col) {
  *line = 1, *col = 1;
  for (const char *p = text; p < at && *p; p++) {
    if (*p == '\n') ++*line, *col = 1;
    else ++*col;
  }
}

static cJSON *parse_json(const char *path) {
  size_t len;
  char *text = read_all(path, &len);
  if (!text) return NULL;
  if (strlen(text) != len) {
    int line, col;
    line_col(text, text + strlen(text), &line, &col);
    free(text);
    return tok_fail("%s:%d:%d: a NUL byte in a JSON file", path, line, col), NULL;
  }
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithOpts(text, &end, true);
  if (!j) {
    int line, col;
    line_col(text, end ? end : text, &line, &col);
    tok_fail("%s:%d:%d: not valid JSON", path, line, col);
  }
  free(text);
  return j;
}

/* One token of a vocabulary, by id, while the file is being read. */
typedef struct Entry {
  unsigned char *bytes; /* NULL: no token has this id yet */
  size_t len;
  bool special;
} Entry;

typedef struct Table {
  Entry *e;
  int64_t n, cap;
} Table;

static bool table_put(Table *tb, const char *file, int64_t id, const unsigned char *bytes, size_t len,
                      const char *what) {
  if (id < 0 || id >= (1 << 24))
    return tok_fail("%s: %s: id %lld is out of range (0 .. 16777215)", file, what, (long long)id);
  if (id >= tb->cap) {
    int64_t cap = tb->cap ? tb->cap : 1024;
    while (cap <= id) cap *= 2;
    tb->e = tok_xrealloc(tb->e, (size_t)cap * sizeof *tb->e);
    memset(tb->e + tb->cap, 0, (size_t)(cap - tb->cap) * sizeof *tb->e);
    tb->cap = cap;
  }
  Entry *e = &tb->e[id];
  if (e->bytes && (e->len != len || memcmp(e->bytes, bytes, len) != 0))
    return tok_fail("%s: %s: id %lld is given to two different tokens", file, what, (long long)id);
  if (!e->bytes) {
    e->bytes = tok_xmalloc(len);
    memcpy(e->bytes, bytes, len);
    e->len = len;
  }
  if (id >= tb->n) tb->n = id + 1;
  return true;
}

static void table_free(Table *tb) {
  for (int64_t i = 0; i < tb->cap; i++) free(tb->e[i].bytes);
  free(tb->e);
}

/* Builds the vocabulary of a table whose ids run 0..n-1 without a gap. */
static TokBpe *table_build(Table *tb, const char *file) {
  for (int64_t i = 0; i < tb->n; i++)
    if (!tb->e[i].bytes) {
      tok_fail("%s: no token has id %lld, below the largest id %lld: ids must run from 0 without gaps",
               file, (long long)i, (long long)tb->n - 1);
      return NULL;
    }
  if (tb->n == 0) return tok_fail("%s: the vocabulary is empty", file), NULL;
  TokBpe *t = tok_new();
  for (int64_t i = 0; i < tb->n; i++) tok_add_token(t, tb->e[i].bytes, tb->e[i].len);
  for (int64_t i = 0; i < tb->n; i++)
    if (tb->e[i].special) tok_add_special(t, (uint32_t)i);
  if (!tok_check_bytes(t, file)) return tok_free(t), NULL;
  return t;
}

/* The "token": id object of vocab.json and of tokenizer.json's model.
 * vocab.json has no list of special tokens, so there (eot_special) the
 * end-of-text token is one, as in GPT-2; tokenizer.json lists its own. */
static bool read_vocab(cJSON *vocab, const char *file, Table *tb, bool eot_special) {
  if (!cJSON_IsObject(vocab)) return tok_fail("%s: the vocabulary is not a JSON object", file);
  unsigned char *buf = NULL;
  size_t bufcap = 0;
  bool ok = true;
  for (cJSON *it = vocab->child; ok && it; it = it->next) {
    const char *s = it->string;
    size_t sl = strlen(s);
    if (sl + 1 > bufcap) buf = tok_xrealloc(buf, bufcap = 2 * sl + 64);
    if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int64_t)it->valuedouble) {
      ok = tok_fail("%s: token \"%s\": its id is not an integer", file, s);
      break;
    }
    int64_t len = tok_chars_to_bytes(s, buf);
    bool special = eot_special && strcmp(s, TOK_EOT_TEXT) == 0;
    if (len < 0) {
      ok = tok_fail("%s: token \"%s\" (id %lld) is not in byte-level form (GPT-2's printable "
                    "stand-ins for bytes)", file, s, (long long)it->valuedouble);
      break;
    }
    ok = table_put(tb, file, (int64_t)it->valuedouble, buf, (size_t)len, s);
    if (ok && special) tb->e[(int64_t)it->valuedouble].special = true;
  }
  free(buf);
  return ok;
}

/* One merge "A B": both sides and their concatenation must be tokens. */
static bool add_merge_text(TokBpe *t, const char *where, const char *a, const char *b, uint32_t rank) {
  size_t la = strlen(a), lb = strlen(b);
  unsigned char *buf = tok_xmalloc(la + lb + 1);
  int64_t na = tok_chars_to_bytes(a, buf), nb = na < 0 ? -1 : tok_chars_to_bytes(b, buf + na);
  bool ok = false;
  if (na < 0 || nb < 0) {
    tok_fail("%s: merge \"%s %s\" is not in byte-level form", where, a, b);
  } else {
    int64_t ia = tok_find(t, buf, (size_t)na), ib = tok_find(t, buf + na, (size_t)nb);
    int64_t ir = tok_find(t, buf, (size_t)(na + nb));
    if (ia < 0 || ib < 0)
      tok_fail("%s: merge \"%s %s\": \"%s\" is not in the vocabulary", where, a, b, ia < 0 ? a : b);
    else if (ir < 0)
      tok_fail("%s: merge \"%s %s\": the merged token \"%s%s\" is not in the vocabulary", where, a, b,
               a, b);
    else
      ok = true, tok_add_merge(t, (uint32_t)ia, (uint32_t)ib, rank, (uint32_t)ir);
  }
  free(buf);
  return ok;
}

static TokBpe *load_vocab_merges(const char *vocab_path, const char *merges_path) {
  cJSON *vocab = parse_json(vocab_path);
  if (!vocab) return NULL;
  Table tb = {0};
  TokBpe *t = read_vocab(vocab, vocab_path, &tb, true) ? table_build(&tb, vocab_path) : NULL;
  cJSON_Delete(vocab);
  table_free(&tb);
  if (!t) return NULL;
  size_t len;
  char *text = read_all(merges_path, &len);
  if (!text) return tok_free(t), NULL;
  int line = 0;
  uint32_t rank = 0;
  bool ok = true;
  for (char *p = text, *nl; ok && p < text + len; p = nl + 1) {
    nl = memchr(p, '\n', (size_t)(text + len - p));
    if (!nl) nl = text + len;
    line++;
    if (memchr(p, 0, (size_t)(nl - p))) {
      ok = tok_fail("%s:%d: a NUL byte in the line", merges_path, line);
      break;
    }
    *nl = 0;
    if (nl > p && nl[-1] == '\r') nl[-1] = 0;
    if (line == 1 && strncmp(p, "#version", 8) == 0) continue;
    if (!*p) continue;
    char *sp = strchr(p, ' ');
    if (!sp || sp == p || !sp[1] || strchr(sp + 1, ' ')) {
      ok = tok_fail("%s:%d: expected two tokens separated by one space, got \"%s\"", merges_path, line, p);
      break;
    }
    *sp = 0;
    char where[64];
    snprintf(where, sizeof where, "%d", line);
    size_t need = strlen(merges_path) + sizeof where + 2;
    char *label = tok_xmalloc(need);
    snprintf(label, need, "%s:%s", merges_path, where);
    ok = add_merge_text(t, label, p, sp + 1, rank++);
    free(label);
  }
  free(text);
  if (!ok) return tok_free(t), NULL;
  return t;
}

static const char *json_type(cJSON *o) {
  cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
  return cJSON_IsString(ty) ? ty->valuestring : "";
}

static bool is_null_or_absent(cJSON *o, const char *key) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return !v || cJSON_IsNull(v);
}

/* tokenizer.json's pre_tokenizer: byte-level, with GPT-2's pattern and no
 * prefix space, alone or as the only step of a Sequence. */
static bool check_pre_tokenizer(cJSON *pre, const char *file) {
  if (strcmp(json_type(pre), "Sequence") == 0) {
    cJSON *steps = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    if (cJSON_GetArraySize(steps) == 1) pre = cJSON_GetArrayItem(steps, 0);
  }
  if (!pre || strcmp(json_type(pre), "ByteLevel") != 0)
    return tok_fail("%s: pre_tokenizer \"%s\" is not supported: only ByteLevel (GPT-2's) is", file,
                    pre ? json_type(pre) : "null");
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space")))
    return tok_fail("%s: pre_tokenizer ByteLevel with add_prefix_space true is not supported", file);
  if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "use_regex")))
    return tok_fail("%s: pre_tokenizer ByteLevel with use_regex false is not supported", file);
  return true;
}

/* tokenizer.json's added_tokens: raw text (not byte stand-ins), each a
 * special token that encoding splits out first. */
static bool read_added(cJSON *added, const char *path, Table *tb) {
  int i = 0;
  for (cJSON *a = added ? added->child : NULL; a; a = a->next, i++) {
    cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
    cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
    if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || !*content->valuestring)
      return tok_fail("%s: added_tokens[%d] needs a numeric \"id\" and a non-empty \"content\"", path, i);
    const char *c = content->valuestring;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "lstrip")) ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "rstrip")) ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "single_word")))
      return tok_fail("%s: added_tokens[%d] (\"%s\"): lstrip, rstrip and single_word are not supported",
                      path, i, c);
    if (!tok_check_utf8((const unsigned char *)c, strlen(c), 0))
      return tok_fail("%s: added_tokens[%d]: invalid UTF-8", path, i);
    if (!table_put(tb, path, (int64_t)id->valuedouble, (const unsigned char *)c, strlen(c), c)) return false;
    tb->e[(int64_t)id->valuedouble].special = true;
  }
  return true;
}

/* tokenizer.json's model.merges, in rank order. Older files write "A B",
 * newer ones ["A", "B"]. A merge is named by its index in the array, as
 * cJSON keeps no line numbers. */
static bool read_merges_json(TokBpe *t, cJSON *merges, const char *path) {
  uint32_t rank = 0;
  bool good = true;
  for (cJSON *m = merges->child; good && m; m = m->next, rank++) {
    char *a = NULL, *b = NULL, *copy = NULL;
    if (cJSON_IsString(m)) {
      copy = strdup(m->valuestring);
      char *sp = strchr(copy, ' ');
      if (sp && sp != copy && sp[1] && !strchr(sp + 1, ' ')) *sp = 0, a = copy, b = sp + 1;
    } else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
      a = m->child->valuestring, b = m->child->next->valuestring;
    }
    size_t need = strlen(path) + 48;
    char *label = tok_xmalloc(need);
    snprintf(label, need, "%s: model.merges[%u]", path, rank);
    good = a && *a && *b;
    if (!good) tok_fail("%s: expected \"A B\" or [\"A\", \"B\"]", label);
    good = good && add_merge_text(t, label, a, b, rank);
    free(label);
    free(copy);
  }
  return good;
}

/* Refuses what a byte-level BPE model of GPT-2's kind does not have. */
static bool check_model(cJSON *root, cJSON *model, const char *path) {
  if (!cJSON_IsObject(model)) return tok_fail("%s: no \"model\" object: not a tokenizer.json", path);
  if (*json_type(model) && strcmp(json_type(model), "BPE") != 0)
    return tok_fail("%s: model type \"%s\" is not supported: only BPE is", path, json_type(model));
  if (!is_null_or_absent(root, "normalizer"))
    return tok_fail("%s: a normalizer (\"%s\") is not supported: byte-level BPE has none", path,
                    json_type(cJSON_GetObjectItemCaseSensitive(root, "normalizer")));
  if (!check_pre_tokenizer(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path)) return false;
  if (!is_null_or_absent(model, "continuing_subword_prefix") || !is_null_or_absent(model, "end_of_word_suffix") ||
      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
    return tok_fail("%s: continuing_subword_prefix, end_of_word_suffix and byte_fallback are not "
                    "supported in a byte-level BPE model", path);
  if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(model, "merges")))
    return tok_fail("%s: model.merges is not an array", path);
  return true;
}

static TokBpe *load_tokenizer_json(const char *path) {
  cJSON *root = parse_json(path);
  if (!root) return NULL;
  TokBpe *t = NULL;
  Table tb = {0};
  cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (check_model(root, model, path) &&
      read_vocab(cJSON_GetObjectItemCaseSensitive(model, "vocab"), path, &tb, false) &&
      read_added(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), path, &tb))
    t = table_build(&tb, path);
  if (t) {
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    if (!read_merges_json(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), path)) tok_free(t), t = NULL;
  }
  table_free(&tb);
  cJSON_Delete(root);
  return t;
}

static int b64_value(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes standard base64 (with its padding); -1 if malformed. */
static int64_t b64_decode(const char *s, size_t n, unsigned char *out) {
  if (n == 0 || n % 4) return -1;
  int64_t k = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4];
    for (int j = 0; j < 4; j++) {
      bool pad = s[i + j] == '=' && i + 4 == n && j >= 2 && (j == 3 || s[i + 3] == '=');
      v[j] = pad ? 0 : b64_value((unsigned char)s[i + j]);
      if (v[j] < 0) return -1;
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    out[k++] = (unsigned char)(w >> 16);
    if (s[i + 2] != '=') out[k++] = (unsigned char)(w >> 8);
    if (s[i + 3] != '=') out[k++] = (unsigned char)w;
  }
  return k;
}

static TokBpe *load_tiktoken(const char *path) {
  size_t len;
  char *text = read_all(path, &len);
  if (!text) return NULL;
  Table tb = {0};
  bool ok = true;
  int line = 0;
  unsigned char *buf = tok_xmalloc(len + 1);
  for (char *p = text, *nl; ok && p < text + len; p = nl + 1) {
    nl = memchr(p, '\n', (size_t)(text + len - p));
    if (!nl) nl = text + len;
    line++;
    char *e = nl;
    if (e > p && e[-1] == '\r') e--;
    if (e == p) continue;
    char *sp = memchr(p, ' ', (size_t)(e - p));
    int64_t n = sp ? b64_decode(p, (size_t)(sp - p), buf) : -1;
    char *end = NULL;
    long long rank = sp ? strtoll(sp + 1, &end, 10) : -1;
    if (n <= 0 || !sp || end != e || end == sp + 1 || rank < 0) {
      ok = tok_fail("%s:%d: expected \"BASE64 RANK\" (a base64 token, one space, a rank >= 0)", path, line);
      break;
    }
    char what[64];
    snprintf(what, sizeof what, "line %d", line);
    if (rank < tb.cap && tb.e[rank].bytes) {
      ok = tok_fail("%s:%d: rank %lld is given twice", path, line, rank);
      break;
    }
    ok = table_put(&tb, path, rank, buf, (size_t)n, what);
  }
  free(buf);
  free(text);
  TokBpe *t = ok ? table_build(&tb, path) : NULL;
  table_free(&tb);
  if (!t) return NULL;
  /* A rank file lists tokens, not merges: two adjacent parts merge when
   * their bytes together are a token, at that token's rank. Every way of
   * cutting a token into two tokens is therefore a merge. */
  for (int64_t id = 0; id < t->n; id++) {
    const unsigned char *b = t->pool + t->off[id];
    for (uint32_t k = 1; k < t->len[id]; k++) {
      int64_t a = tok_find(t, b, k), c = tok_find(t, b + k, t->len[id] - k);
      if (a >= 0 && c >= 0) tok_add_merge(t, (uint32_t)a, (uint32_t)c, (uint32_t)id, (uint32_t)id);
    }
  }
  t->ignore_merges = true; /* tiktoken takes a piece that is a token as it is */
  if (tok_find(t, (const unsigned char *)TOK_EOT_TEXT, strlen(TOK_EOT_TEXT)) < 0)
    tok_add_special(t, tok_add_token(t, (const unsigned char *)TOK_EOT_TEXT, strlen(TOK_EOT_TEXT)));
  return t;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

TokBpe *tok_load(const char *files) {
  char *copy = strdup(files), *second = strchr(copy, ',');
  TokBpe *t = NULL;
  if (second) *second++ = 0;
  if (second && strchr(second, ','))
    tok_fail("%s: at most two files (vocab.json,merges.txt)", files);
  else if (second) {
    bool swap = ends_with(copy, ".txt") && ends_with(second, ".json");
    const char *v = swap ? second : copy, *m = swap ? copy : second;
    if (!ends_with(v, ".json"))
      tok_fail("%s: two files are a vocab.json and a merges.txt; neither ends in .json", files);
    else t = load_vocab_merges(v, m);
  } else if (ends_with(copy, ".json")) {
    t = load_tokenizer_json(copy);
  } else {
    t = load_tiktoken(copy);
  }
  free(copy);
  return t;
}

/* ------------------------------------------------------------ writing */

typedef struct MergeRow {
  uint32_t rank, a, b;
} MergeRow;

static int by_rank(const void *x, const void *y) {
  const MergeRow *p = x, *q = y;
  return (p->rank > q->rank) - (p->rank < q->rank);
}

static char *token_chars(const TokBpe *t, uint32_t id) {
  char *s = tok_xmalloc(2 * t->len[id] + 1);
  tok_bytes_to_chars(t->pool + t->off[id], t->len[id], s);
  return s;
}

/* Everything of tokenizer.json but the model: the special tokens and the
 * byte-level steps around it. */
static cJSON *json_frame(const TokBpe *t) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  for (int k = 0; k < t->nspecial; k++) {
    cJSON *a = cJSON_CreateObject();
    uint32_t id = t->special[k];
    char *content = strndup((const char *)t->pool + t->off[id], t->len[id]);
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddFalseToObject(a, "single_word");
    cJSON_AddFalseToObject(a, "lstrip");
    cJSON_AddFalseToObject(a, "rstrip");
    cJSON_AddTrueToObject(a, "normalized");
    cJSON_AddTrueToObject(a, "special");
    cJSON_AddItemToArray(added, a);
    free(content);
  }
  cJSON_AddNullToObject(root, "normalizer");
  const char *byte_level[] = {"pre_tokenizer", "post_processor", "decoder"};
  for (int i = 0; i < 3; i++) {
    cJSON *o = cJSON_AddObjectToObject(root, byte_level[i]);
    cJSON_AddStringToObject(o, "type", "ByteLevel");
    cJSON_AddFalseToObject(o, "add_prefix_space");
    cJSON_AddTrueToObject(o, "trim_offsets");
    cJSON_AddTrueToObject(o, "use_regex");
  }
  return root;
}

/* The model: its vocabulary in byte stand-ins and its merges by rank. */
static void json_model(cJSON *root, const TokBpe *t) {
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddNullToObject(model, "unk_token");
  cJSON_AddNullToObject(model, "continuing_subword_prefix");
  cJSON_AddNullToObject(model, "end_of_word_suffix");
  cJSON_AddFalseToObject(model, "fuse_unk");
  cJSON_AddFalseToObject(model, "byte_fallback");
  cJSON_AddBoolToObject(model, "ignore_merges", t->ignore_merges);
  cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
  for (uint32_t id = 0; id < (uint32_t)t->n; id++) {
    char *s = token_chars(t, id);
    cJSON_AddNumberToObject(vocab, s, id);
    free(s);
  }
  MergeRow *rows = tok_xmalloc(t->mcount * sizeof *rows);
  size_t nr = 0;
  for (size_t i = 0; i < t->mcap; i++)
    if (t->mkey[i]) {
      uint64_t k = t->mkey[i] - 1;
      rows[nr++] = (MergeRow){t->mrank[i], (uint32_t)(k >> 32), (uint32_t)k};
    }
  qsort(rows, nr, sizeof *rows, by_rank);
  cJSON *merges = cJSON_AddArrayToObject(model, "merges");
  for (size_t i = 0; i < nr; i++) {
    char *a = token_chars(t, rows[i].a), *b = token_chars(t, rows[i].b);
    size_t need = strlen(a) + strlen(b) + 2;
    char *line = tok_xmalloc(need);
    snprintf(line, need, "%s %s", a, b);
    cJSON_AddItemToArray(merges, cJSON_CreateString(line));
    free(a), free(b), free(line);
  }
  free(rows);
}

bool tok_save_json(const TokBpe *t, const char *path) {
  cJSON *root = json_frame(t);
  json_model(root, t);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  size_t plen = strlen(path) + 32;
  char *tmp = tok_xmalloc(plen);
  snprintf(tmp, plen, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  ok = f && (fclose(f) == 0) && ok;
  ok = ok && rename(tmp, path) == 0;
  if (!ok) tok_fail("%s: %s", path, strerror(errno)), remove(tmp);
  free(tmp);
  free(text);
  return ok;
}
