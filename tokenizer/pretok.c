/* GPT-2's pre-tokenisation, by hand. The pattern is
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * and tok_next_piece follows its alternatives in order, with the
 * backtracking that the look-ahead of the fifth one implies, so no regex
 * library is needed. \p{L} and \p{N} come from unicode_tables.h; \s is
 * Unicode's White_Space property, which is what Oniguruma (Hugging Face's
 * tokenizers) and Rust's regex (tiktoken) mean by it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "unicode_tables.h"

static _Thread_local char error_text[1024];

const char *tok_error(void) { return error_text; }

bool tok_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_text, sizeof error_text, fmt, ap);
  va_end(ap);
  return false;
}

void *tok_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "shardc: out of memory (%zu bytes in the tokenizer)\n", n);
    abort();
  }
  return p;
}

void *tok_xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) {
    fprintf(stderr, "shardc: out of memory (%zu bytes in the tokenizer)\n", n);
    abort();
  }
  return p;
}

uint64_t tok_hash(const unsigned char *p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  memcpy(&w, p + i, n - i);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < r[mid][0]) hi = mid;
    else if (cp > r[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

static bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

/* The classes of the Basic Multilingual Plane, computed once: most text
 * never needs the binary searches. */
static unsigned char bmp_class[0x10000];
static bool bmp_ready;

static int slow_class(uint32_t cp) {
  if (is_white_space(cp)) return TOK_SPACE;
  if (in_ranges(tok_letter_ranges, sizeof tok_letter_ranges / sizeof tok_letter_ranges[0], cp))
    return TOK_LETTER;
  if (in_ranges(tok_number_ranges, sizeof tok_number_ranges / sizeof tok_number_ranges[0], cp))
    return TOK_NUMBER;
  return TOK_OTHER;
}

int tok_class(uint32_t cp) {
  if (cp < 0x10000) {
    if (!bmp_ready) {
      for (uint32_t c = 0; c < 0x10000; c++) bmp_class[c] = (unsigned char)slow_class(c);
      bmp_ready = true;
    }
    return bmp_class[cp];
  }
  return slow_class(cp);
}

/* Decodes the code point at s[i] of valid UTF-8; returns its length. */
static inline size_t decode(const unsigned char *s, size_t i, uint32_t *cp) {
  unsigned c = s[i];
  if (c < 0x80) return *cp = c, 1;
  if (c < 0xE0) return *cp = (c & 0x1F) << 6 | (s[i + 1] & 0x3F), 2;
  if (c < 0xF0) return *cp = (c & 0x0F) << 12 | (s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F), 3;
  *cp = (c & 0x07) << 18 | (s[i + 1] & 0x3F) << 12 | (s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
  return 4;
}

bool tok_check_utf8(const unsigned char *s, size_t n, uint64_t base) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len = c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; k++) ok = (s[i + k] & 0xC0) == 0x80;
    if (ok && len == 3) { /* overlong forms and surrogates */
      ok = !(c == 0xE0 && s[i + 1] < 0xA0) && !(c == 0xED && s[i + 1] >= 0xA0);
    } else if (ok && len == 4) { /* overlong forms and code points above U+10FFFF */
      ok = !(c == 0xF0 && s[i + 1] < 0x90) && !(c == 0xF4 && s[i + 1] >= 0x90);
    }
    if (!ok)
      return tok_fail("invalid UTF-8 at byte offset %llu (byte 0x%02X)", (unsigned long long)(base + i),
                      c);
    i += len;
  }
  return true;
}

static inline int class_at(const unsigned char *s, size_t i, size_t *len) {
  if (s[i] < 0x80) {
    *len = 1;
    return bmp_ready ? bmp_class[s[i]] : tok_class(s[i]);
  }
  uint32_t cp;
  *len = decode(s, i, &cp);
  return tok_class(cp);
}

size_t tok_next_piece(const unsigned char *s, size_t i, size_t n) {
  /* 's|'t|'re|'ve|'m|'ll|'d */
  if (s[i] == '\'' && i + 1 < n) {
    unsigned char a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      unsigned char b = s[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  size_t len;
  int c = class_at(s, i, &len);
  size_t j = i;
  /*  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional space, then a run */
  if (s[i] == ' ' && i + 1 < n) {
    size_t len2;
    int c2 = class_at(s, i + 1, &len2);
    if (c2 != TOK_SPACE) c = c2, j = i + 1, len = len2;
  }
  if (c != TOK_SPACE) {
    j += len;
    while (j < n && class_at(s, j, &len) == c) j += len;
    return j;
  }
  /* \s+(?!\S) | \s+ : a run of white space, less its last character when
   * something else follows and the run has more than one. */
  size_t last = i;
  j = i + len;
  while (j < n && class_at(s, j, &len) == TOK_SPACE) last = j, j += len;
  if (j == n || last == i) return j;
  return last;
}

size_t tok_special_at(const TokBpe *t, const unsigned char *s, size_t i, size_t n, uint32_t *id) {
  size_t best = 0;
  for (int k = 0; k < t->nspecial; k++) {
    uint32_t sid = t->special[k];
    size_t len = t->len[sid];
    /* The longest special token that matches wins, as in tokenizers. */
    if (len > best && len <= n - i && memcmp(s + i, t->pool + t->off[sid], len) == 0)
      best = len, *id = sid;
  }
  return best;
}

static inline bool ascii_space_or_high(unsigned char c) {
  return c >= 0x80 || c == ' ' || (c >= 0x09 && c <= 0x0D);
}

size_t tok_safe_cut(const unsigned char *s, size_t n) {
  /* Cutting at i, in "x\n|y" with x and y not white space, changes no
   * piece: every alternative of the pattern stops at the line break, and
   * the break is a piece by itself whether or not the text goes on (the
   * white space rules look one character ahead only). A non-ASCII x or y
   * is passed over rather than decoded. */
  for (size_t i = n; i-- > 2;)
    if (s[i - 1] == '\n' && !ascii_space_or_high(s[i - 2]) && !ascii_space_or_high(s[i])) return i;
  return 0;
}

/* GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the
 * others for 256, 257, ... in byte order. */
uint32_t tok_byte_char(unsigned char b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
  uint32_t k = 0;
  for (unsigned c = 0; c < b; c++)
    if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) k++;
  return 256 + k;
}

int64_t tok_chars_to_bytes(const char *str, unsigned char *out) {
  static int16_t inverse[324];
  static bool ready;
  if (!ready) {
    for (int i = 0; i < 324; i++) inverse[i] = -1;
    for (int b = 0; b < 256; b++) inverse[tok_byte_char((unsigned char)b)] = (int16_t)b;
    ready = true;
  }
  const unsigned char *s = (const unsigned char *)str;
  size_t n = strlen(str);
  if (!tok_check_utf8(s, n, 0)) return -1;
  int64_t k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += decode(s, i, &cp);
    if (cp >= 324 || inverse[cp] < 0) return -1;
    out[k++] = (unsigned char)inverse[cp];
  }
  return k;
}

void tok_bytes_to_chars(const unsigned char *b, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t cp = tok_byte_char(b[i]);
    if (cp < 0x80) {
      out[k++] = (char)cp;
    } else {
      out[k++] = (char)(0xC0 | cp >> 6);
      out[k++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  out[k] = 0;
}
