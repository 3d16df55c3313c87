/* Schedules from files: each stage's compute actions as text, one line per
 * stage, and the builder that turns them into tables (docs/schedules.md,
 * "Schedules from files").
 *
 *   # 1F1B for p = 2, m = 3: stage 0, then stage 1
 *   F0.0 F1.0 B0.0 F2.0 B1.0 B2.0
 *   F0.0 B0.0 F1.0 B1.0 F2.0 B2.0
 *
 * `F3.1` is the forward of microbatch 3 on the stage's chunk 1, `B3.1` its
 * backward, `W3.1` its weight gradient alone. The file fixes p (its lines),
 * v and m (the largest chunk and microbatch, plus one). Messages are not
 * written: the builder derives them from the order, the way 1F1B posts
 * them (see derive_stage), and the verifier then checks the tables like
 * any built-in schedule's. What can be told from one line alone (syntax,
 * an action twice or missing, a backward before its forward) is reported
 * here, as FILE:LINE:COL; what needs the stages together (a hang, messages
 * out of order) is the verifier's. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"
#include "schedule.h"

/* Keeps a file's v and m within what a table can hold (sched_build
 * checks p v m again). */
enum { MAX_CHUNK = 32767, MAX_MB = 1 << 22, MAX_ERRORS = 12 };

/* One action of the file and where it was written. */
typedef struct ScriptAction {
  RtSchedKind kind; /* F, B or W */
  int chunk, mb;
  int line, col;
} ScriptAction;

typedef struct ScriptStage {
  ScriptAction *a;
  int n, cap;
  int line; /* where the stage's line is */
} ScriptStage;

struct SchedScript {
  char *name; /* the file, for messages */
  ScriptStage *stages;
  int p, v, m, cap;
  bool step_batches; /* derive_stage's second form */
};

/* The errors, one per line, up to MAX_ERRORS and a count. */
typedef struct ScriptErrors {
  char *buf;
  size_t len;
  int count;
} ScriptErrors;

static void __attribute__((format(printf, 2, 3))) script_err(ScriptErrors *e, const char *fmt, ...) {
  if (++e->count > MAX_ERRORS) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n >= (int)sizeof line) n = (int)sizeof line - 1;
  char *grown = realloc(e->buf, e->len + (size_t)n + 2);
  if (!grown) die("out of memory reading a schedule file");
  e->buf = grown;
  memcpy(e->buf + e->len, line, (size_t)n);
  e->len += (size_t)n;
  e->buf[e->len++] = '\n';
  e->buf[e->len] = 0;
}

static void *grow(void *p, int *cap, int n, size_t size) {
  if (n < *cap) return p;
  *cap = *cap ? *cap * 2 : 16;
  void *q = realloc(p, size * (size_t)*cap);
  if (!q) die("out of memory reading a schedule file");
  return q;
}

void sched_script_free(SchedScript *s) {
  if (!s) return;
  for (int r = 0; r < s->p; r++) free(s->stages[r].a);
  free(s->stages);
  free(s->name);
  free(s);
}

/* ---------------------------------------------------------------- syntax */

/* A decimal number at *q up to limit; false when there is none. */
static bool number(const char **q, int limit, int *out) {
  const char *c = *q;
  long long v = 0;
  if (*c < '0' || *c > '9') return false;
  while (*c >= '0' && *c <= '9') {
    v = v * 10 + (*c++ - '0');
    if (v > limit) return false;
  }
  *q = c, *out = (int)v;
  return true;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* One word of a line: F<mb>.<chunk>, B..., W...; false after an error. */
static bool parse_action(const char *w, int len, ScriptAction *a, ScriptErrors *e,
                         const char *file) {
  const char *q = w + 1;
  a->kind = w[0] == 'F' ? RT_SCHED_F : w[0] == 'B' ? RT_SCHED_B : RT_SCHED_W;
  bool ok = strchr("FBW", w[0]) && w[0] && number(&q, MAX_MB - 1, &a->mb) && *q == '.' &&
            (++q, number(&q, MAX_CHUNK - 1, &a->chunk)) && q == w + len;
  if (!ok)
    script_err(e, "%s:%d:%d: expected an action such as F0.1 (the forward of microbatch 0 on "
               "chunk 1), B0.1 or W0.1, got '%.*s'", file, a->line, a->col, len > 40 ? 40 : len, w);
  return ok;
}

/* Splits the text into stages and actions. */
static void parse_text(SchedScript *s, const char *text, ScriptErrors *e) {
  int line = 1;
  for (const char *c = text; *c;) {
    const char *end = strchr(c, '\n');
    if (!end) end = c + strlen(c);
    const char *hash = memchr(c, '#', (size_t)(end - c)), *stop = hash ? hash : end;
    ScriptStage *st = NULL;
    for (const char *w = c; w < stop;) {
      if (is_space(*w)) {
        w++;
        continue;
      }
      int len = 0;
      while (w + len < stop && !is_space(w[len])) len++;
      if (!st) {
        s->stages = grow(s->stages, &s->cap, s->p, sizeof *s->stages);
        st = &s->stages[s->p++];
        *st = (ScriptStage){.line = line};
      }
      ScriptAction a = {.line = line, .col = (int)(w - c) + 1};
      if (parse_action(w, len, &a, e, s->name)) {
        st->a = grow(st->a, &st->cap, st->n, sizeof *st->a);
        st->a[st->n++] = a;
        if (a.chunk + 1 > s->v) s->v = a.chunk + 1;
        if (a.mb + 1 > s->m) s->m = a.mb + 1;
      }
      w += len;
    }
    line++;
    c = *end ? end + 1 : end;
  }
  if (s->p == 0 && e->count == 0) script_err(e, "%s: no stages (one line of actions per stage)", s->name);
}

/* ------------------------------------------------------- one stage alone */

static const char *kind_letter(RtSchedKind k) { return k == RT_SCHED_F ? "F" : k == RT_SCHED_B ? "B" : "W"; }

/* Each (kind, chunk, microbatch) once, each backward after its forward and
 * each weight gradient after its backward; every F and B present, and
 * every W once the stage has any. */
static void check_stage(const SchedScript *s, int r, ScriptErrors *e) {
  const ScriptStage *st = &s->stages[r];
  size_t cells = (size_t)s->v * (size_t)s->m;
  int *seen[3];
  for (int k = 0; k < 3; k++) {
    seen[k] = malloc(sizeof(int) * cells);
    if (!seen[k]) die("out of memory reading a schedule file");
    for (size_t i = 0; i < cells; i++) seen[k][i] = -1;
  }
  bool has_w = false;
  for (int i = 0; i < st->n; i++) {
    const ScriptAction *a = &st->a[i];
    size_t cell = (size_t)a->chunk * (size_t)s->m + (size_t)a->mb;
    int k = a->kind == RT_SCHED_F ? 0 : a->kind == RT_SCHED_B ? 1 : 2;
    has_w |= k == 2;
    if (seen[k][cell] >= 0) {
      const ScriptAction *f = &st->a[seen[k][cell]];
      script_err(e, "%s:%d:%d: %s%d.%d appears twice on stage %d (first at %d:%d)", s->name,
                 a->line, a->col, kind_letter(a->kind), a->mb, a->chunk, r, f->line, f->col);
      continue;
    }
    seen[k][cell] = i;
    if (k > 0 && seen[k - 1][cell] < 0)
      script_err(e, "%s:%d:%d: %s%d.%d comes before %s%d.%d on stage %d", s->name, a->line,
                 a->col, kind_letter(a->kind), a->mb, a->chunk, k == 1 ? "its forward F" : "its backward B",
                 a->mb, a->chunk, r);
  }
  for (size_t cell = 0; cell < cells; cell++)
    for (int k = 0; k < (has_w ? 3 : 2); k++)
      if (seen[k][cell] < 0) {
        script_err(e, "%s:%d: stage %d has no %s%d.%d (each stage runs every microbatch 0..%d on "
                   "every chunk 0..%d%s)", s->name, st->line, r, kind_letter(k == 0 ? RT_SCHED_F :
                   k == 1 ? RT_SCHED_B : RT_SCHED_W), (int)(cell % (size_t)s->m),
                   (int)(cell / (size_t)s->m), s->m - 1, s->v - 1,
                   k == 2 ? ", and its W for every B once it has one" : "");
        cell = cells; /* one line per stage is enough */
        break;
      }
  for (int k = 0; k < 3; k++) free(seen[k]);
}

SchedScript *sched_script_parse(const char *name, const char *text, char **error) {
  SchedScript *s = calloc(1, sizeof *s);
  if (!s) die("out of memory reading a schedule file");
  s->name = strcpy(malloc(strlen(name) + 1), name);
  ScriptErrors e = {0};
  parse_text(s, text, &e);
  if ((int64_t)s->v * s->m > MAX_MB)
    script_err(&e, "%s: %d chunks x %d microbatches are more than a schedule can hold", name, s->v, s->m);
  for (int r = 0; e.count == 0 && r < s->p; r++) check_stage(s, r, &e);
  if (e.count > MAX_ERRORS) {
    int more = e.count - MAX_ERRORS;
    e.count = 0;
    script_err(&e, "... and %d more", more);
  }
  *error = e.buf;
  if (e.buf) {
    sched_script_free(s);
    return NULL;
  }
  return s;
}

SchedScript *sched_script_load(const char *path, char **error) {
  FILE *f = fopen(path, "rb");
  char *text = NULL;
  size_t len = 0, cap = 0;
  if (f) {
    for (;;) {
      if (len + 4096 + 1 > cap) {
        cap = (len + 4096 + 1) * 2;
        char *grown = realloc(text, cap);
        if (!grown) die("out of memory reading a schedule file");
        text = grown;
      }
      size_t got = fread(text + len, 1, 4096, f);
      len += got;
      if (got < 4096) break;
    }
  }
  if (!f || ferror(f)) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s: cannot read: %s\n", path, strerror(errno));
    if (f) fclose(f);
    free(text);
    *error = strcpy(malloc(strlen(msg) + 1), msg);
    return NULL;
  }
  fclose(f);
  text[len] = 0;
  if (strlen(text) != len) {
    free(text);
    char msg[600];
    snprintf(msg, sizeof msg, "%s: not a text file (it holds a zero byte)\n", path);
    *error = strcpy(malloc(strlen(msg) + 1), msg);
    return NULL;
  }
  SchedScript *s = sched_script_parse(path, text, error);
  free(text);
  return s;
}

void sched_script_shape(const SchedScript *s, int *p, int *v, int *m) {
  *p = s->p, *v = s->v, *m = s->m;
}

/* ------------------------------------------------------- the messages */

/* The stage at the other end of the message a compute action of stage r
 * receives (send = false) or sends, or -1 when it has none: F receives
 * its input from virtual stage vs - 1 and sends its output to vs + 1, B
 * the other way; W has no messages, and neither have the ends of the
 * virtual pipeline or a single stage (the placement of schedule.c). */
static int peer(const SchedOptions *o, int r, const ScriptAction *a, bool send) {
  if (a->kind == RT_SCHED_W || o->pp == 1) return -1;
  int vs = a->chunk * o->pp + r, pv = o->pp * o->vpp;
  int other = (a->kind == RT_SCHED_F) == send ? vs + 1 : vs - 1;
  return other < 0 || other >= pv ? -1 : other % o->pp;
}

static RtSchedMsg msg_of(const ScriptAction *a) { return a->kind == RT_SCHED_F ? RT_SCHED_ACT : RT_SCHED_GRAD; }

static void emit(SchedBuilder *b, int r, const ScriptAction *a) {
  if (a->kind == RT_SCHED_F) sched_f(b, r, a->chunk, a->mb);
  else if (a->kind == RT_SCHED_B) sched_b(b, r, a->chunk, a->mb);
  else sched_w(b, r, a->chunk, a->mb);
}

/* Stage r's table from its compute order, as 1F1B posts its messages:
 * each action's input is received just before it and its result sent
 * just after; when the send after one action and the receive before the
 * next are with the same peer, the two are one batch (the neighbours
 * exchange in the same step, each would otherwise wait for the other to
 * receive), else the send goes alone and then the receive. This gives
 * 1F1B's tables exactly for m >= p (sched_test file). */
static void derive_1f1b(SchedBuilder *b, const SchedOptions *o, const ScriptStage *st, int r) {
  for (int i = 0; i < st->n; i++) {
    const ScriptAction *a = &st->a[i], *next = i + 1 < st->n ? &st->a[i + 1] : NULL;
    if (i == 0 && peer(o, r, a, false) >= 0) sched_recv(b, r, msg_of(a), a->chunk, a->mb);
    emit(b, r, a);
    int to = peer(o, r, a, true), from = next ? peer(o, r, next, false) : -1;
    if (to >= 0 && to == from) {
      sched_batch_begin(b, r);
      sched_send(b, r, msg_of(a), a->chunk, a->mb);
      sched_recv(b, r, msg_of(next), next->chunk, next->mb);
      sched_batch_end(b, r);
      continue;
    }
    if (to >= 0) sched_send(b, r, msg_of(a), a->chunk, a->mb);
    if (from >= 0) sched_recv(b, r, msg_of(next), next->chunk, next->mb);
  }
}

/* The actions of the step starting at i: a forward followed by a
 * backward is one step (the steady state of 1F1B), anything else one
 * action. */
static int step_len(const ScriptStage *st, int i) {
  return i + 1 < st->n && st->a[i].kind == RT_SCHED_F && st->a[i + 1].kind == RT_SCHED_B ? 2 : 1;
}

/* The same as Megatron-LM's interleaved schedule posts them: the stage
 * runs in steps (step_len), and each step ends with ONE batch that sends
 * what the step produced and receives the inputs of the next step. A
 * stage then never waits on a lone send while its own next input waits
 * to be received, which a chain of stages around the ring of the virtual
 * pipeline (chunk c of the last stage feeding chunk c + 1 of the first)
 * would otherwise do. */
static void derive_steps(SchedBuilder *b, const SchedOptions *o, const ScriptStage *st, int r) {
  for (int i = 0; i < st->n;) {
    int n = step_len(st, i), j = i + n;
    if (i == 0)
      for (int k = 0; k < n; k++)
        if (peer(o, r, &st->a[k], false) >= 0)
          sched_recv(b, r, msg_of(&st->a[k]), st->a[k].chunk, st->a[k].mb);
    for (int k = i; k < j; k++) emit(b, r, &st->a[k]);
    sched_batch_begin(b, r);
    for (int k = i; k < j; k++)
      if (peer(o, r, &st->a[k], true) >= 0) sched_send(b, r, msg_of(&st->a[k]), st->a[k].chunk, st->a[k].mb);
    for (int k = j; j < st->n && k < j + step_len(st, j); k++)
      if (peer(o, r, &st->a[k], false) >= 0)
        sched_recv(b, r, msg_of(&st->a[k]), st->a[k].chunk, st->a[k].mb);
    sched_batch_end(b, r);
    i = j;
  }
}

static bool build_script(SchedBuilder *b, const SchedOptions *o) {
  const SchedScript *s = o->script;
  if (!s) return sched_fail(b, "the file schedule was built without its file");
  if (o->vpp_group > 0)
    return sched_fail(b, "--vpp-group groups the microbatches of the interleaved schedule; %s "
                         "gives its own order", s->name);
  if (s->p != o->pp || s->v != o->vpp || s->m != o->microbatches)
    return sched_fail(b, "%s schedules p = %d stages (its lines), v = %d chunks and m = %d "
                         "microbatches, but the configuration has p = %d, v = %d, m = %d",
                      s->name, s->p, s->v, s->m, o->pp, o->vpp, o->microbatches);
  for (int r = 0; r < s->p; r++)
    if (s->step_batches) derive_steps(b, o, &s->stages[r], r);
    else derive_1f1b(b, o, &s->stages[r], r);
  return true;
}

const SchedDef sched_script_def = {
    "file", "a schedule read from a file (--schedule-file): each stage's compute order",
    build_script, NULL, NULL, NULL, false};

/* Says which file the verifier's report is about: its stages and
 * actions are those of the derived tables (docs/schedules.md). */
static void explain(const SchedScript *script, SchedReport *rep) {
  if (!rep->error) return;
  const char *head = ": the stages' orders, with the messages derived from them, do not verify:\n";
  char *text = malloc(strlen(script->name) + strlen(head) + strlen(rep->error) + 1);
  if (!text) die("out of memory reading a schedule file");
  strcat(strcat(strcpy(text, script->name), head), rep->error);
  free(rep->error);
  rep->error = text;
}

/* The first form, and when its tables do not verify the second; the
 * report is the first form's when neither does (the one 1F1B's reader
 * expects). */
RtSchedule *sched_build_script(SchedScript *script, const SchedOptions *o, const SchedTimes *times,
                               bool timeline, SchedReport *rep) {
  SchedOptions so = *o;
  so.script = script;
  script->step_batches = false;
  RtSchedule *s = sched_build(&sched_script_def, &so, times, timeline, rep);
  if (s) return s;
  if (!rep->error || strncmp(rep->error, "deadlock", 8) != 0) {
    explain(script, rep);
    return NULL;
  }
  SchedReport second;
  script->step_batches = true;
  s = sched_build(&sched_script_def, &so, times, timeline, &second);
  script->step_batches = false;
  if (!s) {
    sched_report_free(&second);
    explain(script, rep);
    return NULL;
  }
  sched_report_free(rep);
  *rep = second;
  return s;
}
