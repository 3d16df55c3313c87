/* The names of weights written by other tools (see checkpoint.h). A model
 * file names its parameters as Hugging Face does, less the prefix of the
 * base model (`transformer.` in GPT-2, `model.` in LLaMA, `gpt_neox.` in
 * NeoX), so that a file of theirs loads once that prefix is found, with
 * no table of models here; what no prefix explains, a map file says. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../abi/suggest.h"
#include "checkpoint.h"
#include "tp.h"

static void rename_tensor(RtStTensor *t, const char *name) {
  free(t->name);
  t->name = rt_xstrdup(name);
}

/* ------------------------------------------------------------ nearest names */

/* The edit distance of a and b (abi/suggest.h's, as every "did you mean"),
 * capped at `cap`: names differ in a prefix or a layer number, and anything
 * further than that is no suggestion. */
static int distance(const char *a, const char *b, int cap) {
  int d = suggest_distance(a, (int)strlen(a), b, (int)strlen(b), 0);
  return d < cap ? d : cap;
}

/* A name that ends with `name` after a '.' (the same tensor under a
 * prefix) counts as nearer than any spelling difference. */
static int score(const char *cand, const char *name, int cap) {
  size_t n = strlen(cand), m = strlen(name);
  if (n > m && cand[n - m - 1] == '.' && !strcmp(cand + n - m, name)) return 0;
  return 1 + distance(cand, name, cap - 1);
}

const char *rt_ckpt_nearest(const RtStFile *f, const char *name, char *buf, size_t len) {
  enum { KEEP = 3 };
  int cap = (int)strlen(name) / 2 + 2;
  int best[KEEP], at[KEEP], n = 0;
  for (int i = 0; i < f->n; i++) {
    int s = score(f->t[i].name, name, cap);
    if (s >= cap || (n == KEEP && s >= best[KEEP - 1])) continue;
    int k = n < KEEP ? n++ : KEEP - 1; /* the slot freed at the end, then moved up */
    for (; k > 0 && best[k - 1] > s; k--) best[k] = best[k - 1], at[k] = at[k - 1];
    best[k] = s, at[k] = i;
  }
  buf[0] = 0;
  size_t used = 0;
  for (int k = 0; k < n && used < len; k++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", k ? ", " : "", f->t[at[k]].name);
  return n ? buf : NULL;
}

/* ------------------------------------------------------------ the prefix */

typedef struct Count {
  char *prefix;
  int n;
} Count;

/* The prefix P (ending in '.') that turns the most parameter names the
 * file lacks into names it holds: the one of the base model. */
static char *common_prefix(const RtStFile *f, const RtModel *m) {
  Count *c = rt_xcalloc((size_t)f->n + 1, sizeof *c);
  int nc = 0;
  for (int p = 0; p < m->nparams; p++) {
    const char *name = m->params[p].name;
    if (rt_st_find(f, name)) continue;
    size_t len = strlen(name);
    for (int i = 0; i < f->n; i++) {
      const char *t = f->t[i].name;
      size_t tl = strlen(t);
      if (tl <= len || t[tl - len - 1] != '.' || strcmp(t + tl - len, name)) continue;
      int k = 0;
      while (k < nc && (strlen(c[k].prefix) != tl - len || strncmp(c[k].prefix, t, tl - len))) k++;
      if (k == nc) {
        c[nc].prefix = rt_xmalloc(tl - len + 1);
        memcpy(c[nc].prefix, t, tl - len);
        c[nc++].prefix[tl - len] = 0;
      }
      c[k].n++;
    }
  }
  int top = -1;
  for (int k = 0; k < nc; k++)
    if (top < 0 || c[k].n > c[top].n) top = k;
  char *won = top >= 0 ? c[top].prefix : NULL;
  for (int k = 0; k < nc; k++)
    if (k != top) free(c[k].prefix);
  free(c);
  return won;
}

/* ------------------------------------------------------------ stacked experts */

/* A routed layer's experts are one parameter with a leading expert
 * dimension (`layers.0.block_sparse_moe.experts.w1.weight` [E, ffn,
 * hidden]) where Hugging Face keeps one tensor per expert, the index
 * after a word of the name (`...experts.3.w1.weight`). The piece names of
 * a parameter: its name with ".N" inserted after its word `at` (a '.'
 * of the name), under the file's prefix. */
static char *piece_name(const char *prefix, const char *name, size_t at, long long k) {
  size_t n = strlen(prefix) + strlen(name) + 32;
  char *s = rt_xmalloc(n);
  snprintf(s, n, "%s%.*s.%lld%s", prefix, (int)at, name, k, name + at);
  return s;
}

/* How many tensors of f are pieces at `at` of name (any index), and the
 * largest index among them. */
static int count_pieces(const RtStFile *f, const char *prefix, const char *name, size_t at,
                        long long *top) {
  size_t pl = strlen(prefix);
  int n = 0;
  *top = -1;
  for (int i = 0; i < f->n; i++) {
    const char *t = f->t[i].name;
    if (strncmp(t, prefix, pl) || strncmp(t + pl, name, at) || t[pl + at] != '.') continue;
    char *end;
    long long k = strtoll(t + pl + at + 1, &end, 10);
    if (end == t + pl + at + 1 || strcmp(end, name + at)) continue;
    n++;
    if (k > *top) *top = k;
  }
  return n;
}

/* Stacks the pieces of parameter prm (found at `at`) into one tensor of
 * its name; an expert missing, one of another shape or another count of
 * experts than the model's is a fatal error naming the tensor. */
static void stack_param(RtStFile *f, const RtParam *prm, const char *prefix, size_t at) {
  int64_t shape[RT_MAX_RANK];
  rt_tp_full_shape(prm, shape);
  long long E = shape[0], top;
  char want[200], got[200], whole[200];
  rt_st_shape_str(want, sizeof want, prm->rank - 1, shape + 1);
  rt_st_shape_str(whole, sizeof whole, prm->rank, shape);
  int n = count_pieces(f, prefix, prm->name, at, &top);
  char *first = piece_name(prefix, prm->name, at, 0), *last = piece_name(prefix, prm->name, at, top);
  if (n == top + 1 && n != E)
    rt_fatal(f->path, "%d experts in the file (%s to %s), the model has %lld (%s %s): set -D "
             "experts=%d, or bring the checkpoint of this shape", n, first, last, E, prm->name,
             whole, n);
  const RtStTensor **pieces = rt_xcalloc((size_t)E, sizeof *pieces);
  for (long long k = 0; k < E; k++) {
    char *pn = piece_name(prefix, prm->name, at, k);
    const RtStTensor *t = pieces[k] = rt_st_find(f, pn);
    if (!t)
      rt_fatal(f->path, "missing tensor %s: expert %lld of the %lld the model stacks into %s %s "
               "(the file holds %d of them, up to %s)", pn, k, E, prm->name, whole, n, last);
    int same = t->rank == prm->rank - 1;
    for (int d = 0; same && d < t->rank; d++)
      same = t->shape[d] == shape[d + 1];
    if (!same)
      rt_fatal(f->path, "tensor %s has shape %s, the model expects %s (expert %lld of %s %s)", pn,
               rt_st_shape_str(got, sizeof got, t->rank, t->shape), want, k, prm->name, whole);
    free(pn);
  }
  if (n != E)
    rt_fatal(f->path, "%d experts in the file (up to %s), the model has %lld (%s %s)", n, last, E,
             prm->name, whole);
  rt_st_stack(f, prm->name, pieces, (int)E);
  free(pieces);
  free(first);
  free(last);
}

/* Every parameter of at least 2 dims the file lacks whose name, with an
 * index after one of its words, names a tensor of the file (under the
 * prefix or none) is stacked from those; a note counts them. */
static void stack_experts(RtStFile *f, const RtModel *m, const char *prefix) {
  int stacked = 0, pieces = 0;
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    if (prm->rank < 2 || rt_st_find(f, prm->name)) continue;
    for (const char *dot = strchr(prm->name, '.'); dot; dot = strchr(dot + 1, '.')) {
      size_t at = (size_t)(dot - prm->name);
      const char *pre = NULL;
      for (int k = 0; k < 2 && !pre; k++) {
        char *pn = piece_name(k ? "" : prefix, prm->name, at, 0);
        if (rt_st_find(f, pn)) pre = k ? "" : prefix;
        free(pn);
      }
      if (!pre) continue;
      stack_param(f, prm, pre, at);
      stacked++;
      pieces += (int)f->t[f->n - 1].nstack;
      break;
    }
  }
  if (stacked)
    rt_say("note: %s: %d tensors (one per expert) stacked into %d parameter%s\n", f->path, pieces,
           stacked, stacked == 1 ? "" : "s");
}

void rt_ckpt_strip_prefix(RtStFile *f, const RtModel *m) {
  char *prefix = common_prefix(f, m);
  stack_experts(f, m, prefix ? prefix : "");
  if (!prefix) return;
  size_t pl = strlen(prefix);
  int renamed = 0;
  for (int p = 0; p < m->nparams; p++) {
    const char *name = m->params[p].name;
    if (rt_st_find(f, name)) continue; /* held as it is, or renamed already (a tied copy) */
    char *full = rt_xmalloc(pl + strlen(name) + 1);
    memcpy(full, prefix, pl);
    strcpy(full + pl, name);
    RtStTensor *t = (RtStTensor *)rt_st_find(f, full);
    if (t) rename_tensor(t, name), renamed++;
    free(full);
  }
  if (renamed)
    rt_say("note: %s: %d tensor%s read without the prefix '%s'\n", f->path, renamed,
           renamed == 1 ? "" : "s", prefix);
  free(prefix);
}

/* ------------------------------------------------------------ map files */

/* One line "MODEL_NAME FILE_NAME" of a map; false (with the error in *e)
 * for a malformed one. Blank lines and '#' comments are skipped. */
static int parse_line(char *line, const char *path, int lineno, char **ours, char **theirs,
                      RtErr *e) {
  char *hash = strchr(line, '#');
  if (hash) *hash = 0;
  char *save = NULL, *a = strtok_r(line, " \t\r", &save), *b = a ? strtok_r(NULL, " \t\r", &save) : NULL;
  *ours = a, *theirs = b;
  if (!a) return 0;
  if (!b || strtok_r(NULL, " \t\r", &save))
    return rt_err_set(e, path, "line %d: expected two names, the model's and the file's "
                      "(\"h.0.attn.c_attn.weight transformer.h.0.attn.c_attn.weight\")", lineno);
  return 0;
}

void rt_ckpt_apply_map(RtStFile *f, const char *map) {
  FILE *fp = fopen(map, "r");
  if (!fp) rt_fatal(map, "cannot open: %s", strerror(errno));
  /* The renames take effect together, so that a map may swap two names. */
  int n = 0, cap = 64;
  RtStTensor **from = rt_xmalloc((size_t)cap * sizeof *from);
  char **to = rt_xmalloc((size_t)cap * sizeof *to);
  char line[4096], near[600];
  RtErr e;
  int lineno = 0, rc = 0;
  while (!rc && fgets(line, sizeof line, fp)) {
    lineno++;
    char *ours, *theirs;
    if (!strchr(line, '\n') && !feof(fp)) {
      rc = rt_err_set(&e, map, "line %d: longer than %zu bytes", lineno, sizeof line - 2);
      break;
    }
    line[strcspn(line, "\n")] = 0;
    if ((rc = parse_line(line, map, lineno, &ours, &theirs, &e)) || !ours) continue;
    RtStTensor *t = (RtStTensor *)rt_st_find(f, theirs);
    if (!t) {
      const char *hint = rt_ckpt_nearest(f, theirs, near, sizeof near);
      rc = rt_err_set(&e, map, "line %d: %s holds no tensor %s%s%s", lineno, f->path, theirs,
                      hint ? "; nearest names in it: " : "", hint ? hint : "");
      break;
    }
    for (int i = 0; i < n && !rc; i++)
      if (from[i] == t || !strcmp(to[i], ours))
        rc = rt_err_set(&e, map, "line %d: %s is mapped twice", lineno, from[i] == t ? theirs : ours);
    if (rc) break;
    if (n == cap) {
      cap *= 2;
      if (!(from = realloc(from, (size_t)cap * sizeof *from)) || !(to = realloc(to, (size_t)cap * sizeof *to)))
        rt_fatal(map, "out of memory");
    }
    from[n] = t;
    to[n++] = rt_xstrdup(ours);
  }
  fclose(fp);
  /* A new name another tensor of the file keeps would make two. */
  for (int i = 0; i < n && !rc; i++)
    for (int k = 0; k < f->n && !rc; k++) {
      int moved = 0;
      for (int j = 0; j < n && !moved; j++) moved = from[j] == &f->t[k];
      if (!moved && !strcmp(f->t[k].name, to[i]))
        rc = rt_err_set(&e, map, "%s already holds a tensor %s, which the map gives to %s too",
                        f->path, to[i], from[i]->name);
    }
  if (rc) rt_err_fatal(&e);
  for (int i = 0; i < n; i++) {
    rename_tensor(from[i], to[i]);
    free(to[i]);
  }
  free(from);
  free(to);
  rt_say("note: %s: %d tensor%s renamed by %s\n", f->path, n, n == 1 ? "" : "s", map);
}
