/* Saving and loading checkpoints (see checkpoint.h). */
#include "checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tp.h"
#include "util.h"

#define STATE_FORMAT "shardc-state-1"

/* mkdir -p */
static void make_dirs(const char *dir) {
  char *p = rt_xstrdup(dir);
  for (char *s = p + 1;; s++) {
    char c = *s;
    if (c != '/' && c != 0) continue;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) rt_fatal(p, "cannot create: %s", strerror(errno));
    *s = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) rt_fatal(dir, "not a folder");
  free(p);
}

static char *join(const char *dir, const char *file) {
  size_t n = strlen(dir) + strlen(file) + 2;
  char *s = rt_xmalloc(n);
  snprintf(s, n, "%s/%s", dir, file);
  return s;
}

/* Metadata as key/value pairs; the values live in one arena per save. */
typedef struct Meta {
  const char *kv[2 * 64];
  int n;
  char text[64][64];
} Meta;

static void meta_add(Meta *m, const char *key, const char *value) {
  if (m->n >= 64) abort(); /* the table below is fixed: a bug, not input */
  m->kv[2 * m->n] = key;
  m->kv[2 * m->n + 1] = value ? value : "";
  m->n++;
}

static void meta_addf(Meta *m, const char *key, const char *fmt, long long v) {
  snprintf(m->text[m->n], sizeof m->text[0], fmt, v);
  meta_add(m, key, m->text[m->n]);
}

static void model_meta(Rt *rt, Meta *m) {
  meta_add(m, "model", rt->model->name);
  meta_add(m, "source", rt->model->source);
  meta_add(m, "defines", rt->model->defines);
  meta_add(m, "real", RT_REAL_NAME);
  meta_addf(m, "step", "%lld", (long long)rt->step);
}

/* Whether p is stored as a whole tensor this rank does not hold as it is:
 * split over the tensor-parallel ranks, or padded (runtime/tp.h). */
static int gathered(const RtParam *p) { return p->split || p->unpadded > 0; }

/* The tensors of one file: per parameter (+ suffix) the whole unpadded
 * tensor, read in place from `base` when this rank holds it whole, else
 * gathered from the tensor-parallel ranks into a buffer of its own. */
typedef struct Outs {
  RtStOut *out;
  char **names;
  int64_t (*shapes)[RT_MAX_RANK];
  real **owned;
  int n;
} Outs;

static void add_params(Rt *rt, Outs *o, const real *base, const char *suffix) {
  int writer = rt_tp_world_rank() == 0;
  for (int p = 0; p < rt->model->nparams; p++) {
    const RtParam *prm = &rt->model->params[p];
    size_t len = strlen(prm->name) + strlen(suffix) + 1;
    char *name = rt_xmalloc(len);
    snprintf(name, len, "%s%s", prm->name, suffix);
    int k = o->n++;
    o->names[k] = name;
    rt_tp_full_shape(prm, o->shapes[k]);
    const real *data = base + prm->offset;
    int64_t numel = prm->numel;
    if (gathered(prm)) {
      /* Every rank takes part in the gather; rank 0 keeps the result. */
      numel = rt_tp_full_numel(prm);
      real *full = writer ? rt_xmalloc((size_t)numel * sizeof *full) : NULL;
      rt_tp_gather(prm, data, full);
      o->owned[k] = full;
      data = full;
    }
    o->out[k] = (RtStOut){name, prm->rank, o->shapes[k], data, numel};
  }
}

/* Collective over the tensor-parallel ranks; only rank 0 of the job
 * writes the file. */
static void write_params(Rt *rt, const char *path, const real *const *bases,
                         const char *const *suffixes, int nbases, Meta *meta) {
  size_t total = (size_t)(rt->model->nparams * nbases);
  Outs o = {rt_xcalloc(total, sizeof *o.out), rt_xcalloc(total, sizeof *o.names),
            rt_xcalloc(total, sizeof *o.shapes), rt_xcalloc(total, sizeof *o.owned), 0};
  for (int b = 0; b < nbases; b++)
    add_params(rt, &o, bases[b], suffixes[b]);
  if (rt_tp_world_rank() == 0) rt_st_write(path, o.out, o.n, meta->kv, meta->n);
  for (int i = 0; i < o.n; i++) {
    free(o.names[i]);
    free(o.owned[i]);
  }
  free(o.names);
  free(o.shapes);
  free(o.owned);
  free(o.out);
}

static void save_state(Rt *rt, const char *path) {
  Meta *m = rt_xcalloc(1, sizeof *m);
  meta_add(m, "format", STATE_FORMAT);
  model_meta(rt, m);
  char rng[4 * 17];
  snprintf(rng, sizeof rng, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, rt->rng.s[0],
           rt->rng.s[1], rt->rng.s[2], rt->rng.s[3]);
  meta_add(m, "rng", rng);
  /* The data position is the step: the window order is a function of
   * (seed, epoch), so the flags below and the step rebuild it. */
  meta_addf(m, "data_position", "%lld", (long long)rt->step);
  char names[64][48];
  for (int i = 0; i < rt_flags_saved_count(); i++) {
    snprintf(names[i], sizeof names[i], "flag.%s", rt_flags_saved_name(i));
    rt_flags_saved_value(&rt->f, i, m->text[m->n], sizeof m->text[0]);
    meta_add(m, names[i], m->text[m->n]);
  }
  const real *bases[3] = {rt->ctx.weights, rt->adam_m, rt->adam_v};
  const char *suffixes[3] = {"", ".exp_avg", ".exp_avg_sq"};
  write_params(rt, path, bases, suffixes, rt->adam_m ? 3 : 1, m);
  free(m);
}

void rt_ckpt_save(Rt *rt) {
  if (rt_tp_world_rank() == 0) make_dirs(rt->f.save);
  char *state = join(rt->f.save, "state.safetensors");
  char *model = join(rt->f.save, "model.safetensors");
  save_state(rt, state);
  Meta *m = rt_xcalloc(1, sizeof *m);
  meta_add(m, "format", "pt"); /* what Hugging Face's loaders look for */
  model_meta(rt, m);
  const real *bases[1] = {rt->ctx.weights};
  const char *suffixes[1] = {""};
  write_params(rt, model, bases, suffixes, 1, m);
  free(m);
  free(state);
  free(model);
}

void rt_ckpt_dump_grads(Rt *rt, const char *path) {
  Meta *m = rt_xcalloc(1, sizeof *m);
  model_meta(rt, m);
  const real *bases[1] = {rt->ctx.grads};
  const char *suffixes[1] = {""};
  write_params(rt, path, bases, suffixes, 1, m);
  free(m);
}

/* Finds NAME+suffix (or, for weights from Hugging Face files, with a
 * "transformer." prefix) and checks its shape; 0 after reporting an error. */
static const RtStTensor *find_param(const RtStFile *f, const RtParam *prm, const char *suffix) {
  char name[512], alt[540], want[200], got[200];
  int64_t shape[RT_MAX_RANK];
  rt_tp_full_shape(prm, shape);
  snprintf(name, sizeof name, "%s%s", prm->name, suffix);
  snprintf(alt, sizeof alt, "transformer.%s", name);
  const RtStTensor *t = rt_st_find(f, name);
  if (!t && !*suffix) t = rt_st_find(f, alt);
  rt_st_shape_str(want, sizeof want, prm->rank, shape);
  if (!t) {
    rt_error(f->path, "missing tensor %s (the model expects %s)", name, want);
    return NULL;
  }
  int same = t->rank == prm->rank;
  for (int d = 0; same && d < prm->rank; d++)
    same = t->shape[d] == shape[d];
  if (!same) {
    rt_error(f->path, "tensor %s has shape %s, the model expects %s", name,
             rt_st_shape_str(got, sizeof got, t->rank, t->shape), want);
    return NULL;
  }
  return t;
}

/* Reads every parameter (+ suffix) into base; all problems are reported
 * before exiting. Files hold whole unpadded tensors: every rank reads them
 * (checkpoints live where all ranks see them) and keeps its part. */
static void load_params(const Rt *rt, const RtStFile *f, const char *suffix, real *base) {
  const RtModel *m = rt->model;
  const RtStTensor **found = rt_xcalloc((size_t)m->nparams, sizeof *found);
  int errors = 0;
  for (int p = 0; p < m->nparams; p++)
    errors += !(found[p] = find_param(f, &m->params[p], suffix));
  if (errors) exit(1);
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    if (!gathered(prm)) {
      rt_st_read(f, found[p], base + prm->offset);
      continue;
    }
    real *full = rt_xmalloc((size_t)rt_tp_full_numel(prm) * sizeof *full);
    rt_st_read(f, found[p], full);
    rt_tp_take(prm, full, base + prm->offset);
    free(full);
  }
  free(found);
}

void rt_ckpt_init_from(Rt *rt, const char *path) {
  RtStFile f;
  rt_st_open(&f, path);
  load_params(rt, &f, "", rt->ctx.weights);
  rt_st_close(&f);
}

static int64_t meta_int(const RtStFile *f, const char *key) {
  const char *v = rt_st_meta(f, key);
  char *end;
  if (!v) rt_fatal(f->path, "no '%s' in the metadata", key);
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno || x < 0)
    rt_fatal(f->path, "bad '%s' in the metadata: '%s'", key, v);
  return x;
}

static void restore_rng(Rt *rt, const RtStFile *f) {
  const char *v = rt_st_meta(f, "rng");
  if (!v || strlen(v) != 64) rt_fatal(f->path, "no valid 'rng' in the metadata");
  for (int i = 0; i < 4; i++) {
    char word[17], *end;
    memcpy(word, v + 16 * i, 16);
    word[16] = 0;
    rt->rng.s[i] = strtoull(word, &end, 16);
    if (*end) rt_fatal(f->path, "bad 'rng' in the metadata: '%s'", v);
  }
}

/* Flags the command line left out take the checkpoint's values; given
 * ones that differ get a note, since the run will not repeat the original. */
static void restore_flags(Rt *rt, const RtStFile *f) {
  for (int i = 0; i < rt_flags_saved_count(); i++) {
    char key[64], now[256], origin[600];
    snprintf(key, sizeof key, "flag.%s", rt_flags_saved_name(i));
    const char *v = rt_st_meta(f, key);
    if (!v) continue;
    snprintf(origin, sizeof origin, "%s: %s", f->path, key);
    rt_flags_saved_value(&rt->f, i, now, sizeof now);
    if (rt_flags_restore(&rt->f, i, v, origin) && strcmp(now, v))
      rt_say("note: --%s %s differs from the checkpoint's %s\n", rt_flags_saved_name(i), now,
             *v ? v : "(none)");
  }
}

void rt_ckpt_resume_open(Rt *rt) {
  char *path = join(rt->f.resume, "state.safetensors");
  RtStFile *f = &rt->resume;
  rt_st_open(f, path);
  const char *format = rt_st_meta(f, "format"), *name = rt_st_meta(f, "model");
  if (!format || strcmp(format, STATE_FORMAT))
    rt_fatal(path, "not a training state written by --save (format '%s')", format ? format : "");
  if (!name || strcmp(name, rt->model->name))
    rt_fatal(path, "a checkpoint of model '%s', this program trains '%s'", name ? name : "",
             rt->model->name);
  rt->step = meta_int(f, "step");
  restore_rng(rt, f);
  restore_flags(rt, f);
  free(path);
}

void rt_ckpt_resume_load(Rt *rt) {
  RtStFile *f = &rt->resume;
  load_params(rt, f, "", rt->ctx.weights);
  if (rt->adam_m && rt->model->nparams > 0) {
    char probe[512];
    snprintf(probe, sizeof probe, "%s.exp_avg", rt->model->params[0].name);
    if (!rt_st_find(f, probe))
      rt_fatal(f->path, "no AdamW state in this checkpoint (saved with --optimizer sgd?)");
    load_params(rt, f, ".exp_avg", rt->adam_m);
    load_params(rt, f, ".exp_avg_sq", rt->adam_v);
  }
  rt_st_close(f);
}
