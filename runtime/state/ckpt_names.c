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

void rt_ckpt_strip_prefix(RtStFile *f, const RtModel *m) {
  char *prefix = common_prefix(f, m);
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
