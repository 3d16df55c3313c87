/* Saving and loading checkpoints (see checkpoint.h).
 *
 * Files hold whole unpadded tensors by name, whatever the layout (t, p, d,
 * v, ZeRO) of the job that wrote them or reads them:
 *
 * - Saving runs in three hops. With ZeRO, each data-parallel rank holds
 *   only its part of the Adam state (and of the reduced gradients): the
 *   data-parallel rank 0 of each (stage, tp) collects the others' parts.
 *   Then the dp 0 ranks of each stage gather every tensor over the tensor
 *   axis (rt_tp_gather) onto tensor rank 0, the stage's leader. Then each
 *   leader sends its stage's tensors, with their names and shapes, to world
 *   rank 0 (which runs another program when p > 1, so it cannot know them),
 *   which sorts them by name and writes the file.
 * - Loading needs no communication: every rank reads the file and keeps
 *   its stage's tensors, its tensor-parallel part of each, and with ZeRO
 *   its own part of the Adam state.
 *
 * The point-to-point messages go over the world communicator, so that the
 * counters of the mesh axes (--comm-stats) only ever count training
 * traffic; between two ranks they match in posting order.
 *
 * Everything here works on host arrays: the entry points at the end copy
 * the model memory they read out of the device first (device.h), and what
 * they load back into it last, so a checkpoint does not depend on the
 * device that wrote it. */
#include "checkpoint.h"
#include "data.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../abi/formats.h"
#include "comm.h"
#include "device.h"
#include "ep.h"
#include "tp.h"
#include "util.h"
#include "zero.h"


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

/* ------------------------------------------------------------- the mesh */

/* Where this rank stands. Without MPI (one rank) the mesh is 1 x 1 x 1. */
typedef struct Place {
  RtComms *c; /* NULL without MPI */
  RtMesh mesh;
  RtCoord at;
  int rank; /* in the world */
} Place;

static Place place_of(void) {
  Place L = {rt_tp_comms(), {1, 1, 1}, {0, 0, 0}, 0};
  if (L.c) {
    L.mesh = L.c->mesh;
    L.at = L.c->coord;
    L.rank = L.c->rank;
  }
  return L;
}

/* Whether the optimizer state (and, after the reduction, the gradient) is
 * sharded over the data-parallel ranks (runtime/zero.h). */
static int sharded(const RtModel *m, const Place *L) { return m->zero && L->mesh.dp > 1; }

/* MPI counts are ints: long arrays go as several messages, cut the same
 * way on both sides. */
#define PIECE ((int64_t)1 << 28)

static void send_reals(const Place *L, const real *buf, int64_t n, int peer) {
  for (int64_t i = 0; i < n; i += PIECE)
    rt_comm_send(L->c->world, buf + i, n - i < PIECE ? n - i : PIECE, RT_COMM_REAL, peer);
}

static void recv_reals(const Place *L, real *buf, int64_t n, int peer) {
  for (int64_t i = 0; i < n; i += PIECE)
    rt_comm_recv(L->c->world, buf + i, n - i < PIECE ? n - i : PIECE, RT_COMM_REAL, peer);
}

/* ------------------------------------------------- ZeRO: the owned parts */

/* Elements of a weights-shaped array that cover every bucket. */
static int64_t span_of(const RtModel *m) {
  int64_t n = m->nweights;
  for (int j = 0; j < m->nbuckets; j++)
    if (m->buckets[j].offset + m->buckets[j].numel > n)
      n = m->buckets[j].offset + m->buckets[j].numel;
  return n;
}

/* Between a weights-shaped array and data-parallel rank i's packed parts
 * (runtime/zero.h: the owned part of every bucket, in bucket order), one
 * way (to_packed: src is weights-shaped) or the other. */
/* only: -1 every bucket, 0 the ordinary ones, 1 the expert ones (--ep). */
static void move_some(const RtModel *m, int i, int d, const real *src, real *dst, int to_packed,
                      int only) {
  int64_t base = 0;
  for (int j = 0; j < m->nbuckets; j++) {
    int64_t b, e;
    rt_zero_part(&m->buckets[j], i, d, &b, &e);
    if (only < 0 || only == (m->buckets[j].expert > 1))
      memcpy(dst + (to_packed ? base : b), src + (to_packed ? b : base),
             (size_t)(e - b) * sizeof *dst);
    base += e - b;
  }
}

static void move_parts(const RtModel *m, int i, int d, const real *src, real *dst, int to_packed) {
  move_some(m, i, d, src, dst, to_packed, -1);
}

/* The whole of a sharded array, as a weights-shaped array, on the
 * data-parallel rank 0 of this (stage, tp); the other data-parallel ranks
 * send their parts and get NULL. `packed` is this rank's packed parts;
 * elements in no bucket come out 0. With --ep E the expert buckets of
 * data-parallel rank i belong to expert rank i % E: data-parallel rank
 * r < E collects those of its own experts (and rank 0 the rest too), so
 * that the expert group then gathers whole experts (stage_tensors). */
static real *collect_shards(const RtModel *m, const Place *L, const real *packed) {
  int d = L->mesh.dp, E = rt_ep_size(), me = L->at.dp;
  int64_t n = rt_zero_state_numel(m, d);
  RtCoord peer = L->at;
  if (me != 0) {
    peer.dp = 0;
    send_reals(L, packed, n, rt_mesh_rank(L->mesh, peer));
    if (me < E || me % E == 0) return NULL;
    peer.dp = me % E;
    send_reals(L, packed, n, rt_mesh_rank(L->mesh, peer));
    return NULL;
  }
  real *full = rt_xcalloc((size_t)span_of(m), sizeof *full);
  move_parts(m, 0, d, packed, full, 0);
  real *part = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *part);
  for (int i = 1; i < d; i++) {
    peer.dp = i;
    recv_reals(L, part, n, rt_mesh_rank(L->mesh, peer));
    move_some(m, i, d, part, full, 0, i % E == 0 ? -1 : 0);
  }
  free(part);
  return full;
}

/* collect_shards on expert rank r = dp > 0 of the first expert group:
 * its experts' parts from itself and the ranks r + E, r + 2E, ...; the
 * ordinary buckets are rank 0's. Called right after collect_shards. */
static real *collect_expert_shards(const RtModel *m, const Place *L, const real *packed) {
  int d = L->mesh.dp, E = rt_ep_size(), me = L->at.dp;
  int64_t n = rt_zero_state_numel(m, d);
  real *full = rt_xcalloc((size_t)span_of(m), sizeof *full);
  move_some(m, me, d, packed, full, 0, 1);
  real *part = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *part);
  RtCoord peer = L->at;
  for (int i = me + E; i < d; i += E) {
    peer.dp = i;
    recv_reals(L, part, n, rt_mesh_rank(L->mesh, peer));
    move_some(m, i, d, part, full, 0, 1);
  }
  free(part);
  return full;
}

/* ------------------------------------------------------ tensors to write */

/* One whole tensor of a file. `group` orders the file: the weights (or
 * gradients) first, then exp_avg, then exp_avg_sq. */
typedef struct Tensor {
  char *name;
  int group;
  int rank;
  int64_t shape[RT_MAX_RANK];
  int64_t numel;
  const real *data;
  real *owned; /* data, when the list allocated it */
} Tensor;

typedef struct List {
  Tensor *t;
  int n, cap;
  real **keep; /* arrays the tensors point into */
  int nkeep;
} List;

static Tensor *list_add(List *l) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    Tensor *t = rt_xcalloc((size_t)l->cap, sizeof *t);
    if (l->n) memcpy(t, l->t, (size_t)l->n * sizeof *t);
    free(l->t);
    l->t = t;
  }
  Tensor *t = &l->t[l->n++];
  memset(t, 0, sizeof *t);
  return t;
}

static void list_keep(List *l, real *a) {
  if (!a) return;
  real **k = rt_xmalloc((size_t)(l->nkeep + 1) * sizeof *k);
  if (l->nkeep) memcpy(k, l->keep, (size_t)l->nkeep * sizeof *k);
  free(l->keep);
  l->keep = k;
  l->keep[l->nkeep++] = a;
}

static void list_free(List *l) {
  for (int i = 0; i < l->n; i++) {
    free(l->t[i].name);
    free(l->t[i].owned);
  }
  for (int i = 0; i < l->nkeep; i++)
    free(l->keep[i]);
  free(l->t);
  free(l->keep);
  memset(l, 0, sizeof *l);
}

static const char *const suffixes[3] = {"", ".exp_avg", ".exp_avg_sq"};

/* Whether p is stored as a whole tensor this rank does not hold as it is:
 * split over the tensor-parallel ranks, padded, or one expert rank's
 * experts (runtime/tp.h). */
static int gathered(const RtParam *p) { return p->split || p->unpadded > 0 || p->expert; }

/* Whether this stage writes p: the copy of a tied parameter that the last
 * pipeline stage (or virtual stage, tied 2) holds is the first stage's
 * under the same name. */
static int writes(const RtParam *p, const Place *L) {
  return !p->tied || (L->at.pp == 0 && p->tied != 2);
}

/* The whole tensors of this stage's parameters in `base` (a weights-shaped
 * array of this rank's parts) onto tensor-parallel rank 0 of data-parallel
 * rank 0, appended to l there. Collective over the tensor axis, and for
 * expert parameters over the expert group (the first E data-parallel
 * ranks, which hold every expert between them). */
static void stage_tensors(const Rt *rt, const Place *L, List *l, const real *base, int group) {
  const RtModel *m = rt->model;
  int leader = L->at.tp == 0 && L->at.dp == 0;
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    if (!writes(prm, L) || (L->at.dp != 0 && !prm->expert)) continue;
    const real *data = base + prm->offset;
    real *full = NULL;
    int64_t numel = prm->numel;
    if (gathered(prm)) {
      numel = rt_tp_full_numel(prm);
      full = leader ? rt_xmalloc((size_t)(numel > 0 ? numel : 1) * sizeof *full) : NULL;
      rt_tp_gather(prm, data, full);
      data = full;
    }
    if (!leader) continue;
    Tensor *t = list_add(l);
    size_t len = strlen(prm->name) + strlen(suffixes[group]) + 1;
    t->name = rt_xmalloc(len);
    snprintf(t->name, len, "%s%s", prm->name, suffixes[group]);
    t->group = group;
    t->rank = prm->rank;
    rt_tp_full_shape(prm, t->shape);
    t->numel = numel;
    t->data = data;
    t->owned = full;
  }
}

/* A stage's tensors travel to world rank 0 as: two int32 (the count of
 * tensors and the int32 words of the description), the description (per
 * tensor: group, rank, name length, the shape as int64, the name), then
 * every tensor's data in the same order. */
static void put(unsigned char **p, const void *v, size_t n) {
  memcpy(*p, v, n);
  *p += n;
}

static void get(const unsigned char **p, void *v, size_t n) {
  memcpy(v, *p, n);
  *p += n;
}

static void send_stage(const Place *L, const List *l) {
  size_t bytes = 0;
  for (int i = 0; i < l->n; i++)
    bytes += 3 * sizeof(int32_t) + (size_t)l->t[i].rank * sizeof(int64_t) + strlen(l->t[i].name);
  size_t words = (bytes + 3) / 4;
  unsigned char *desc = rt_xcalloc(words + 1, 4), *p = desc;
  for (int i = 0; i < l->n; i++) {
    const Tensor *t = &l->t[i];
    int32_t head[3] = {t->group, t->rank, (int32_t)strlen(t->name)};
    put(&p, head, sizeof head);
    put(&p, t->shape, (size_t)t->rank * sizeof(int64_t));
    put(&p, t->name, (size_t)head[2]);
  }
  int32_t sizes[2] = {l->n, (int32_t)words};
  rt_comm_send(L->c->world, sizes, 2, RT_COMM_I32, 0);
  rt_comm_send(L->c->world, desc, (int64_t)words, RT_COMM_I32, 0);
  for (int i = 0; i < l->n; i++)
    send_reals(L, l->t[i].data, l->t[i].numel, 0);
  free(desc);
}

static void recv_stage(const Place *L, int stage, List *l) {
  RtCoord c = {0, 0, stage};
  int from = rt_mesh_rank(L->mesh, c);
  int32_t sizes[2];
  rt_comm_recv(L->c->world, sizes, 2, RT_COMM_I32, from);
  unsigned char *desc = rt_xcalloc((size_t)sizes[1] + 1, 4);
  rt_comm_recv(L->c->world, desc, sizes[1], RT_COMM_I32, from);
  const unsigned char *p = desc;
  int first = l->n;
  for (int i = 0; i < sizes[0]; i++) {
    Tensor *t = list_add(l);
    int32_t head[3];
    get(&p, head, sizeof head);
    t->group = head[0];
    t->rank = head[1];
    get(&p, t->shape, (size_t)t->rank * sizeof(int64_t));
    t->name = rt_xmalloc((size_t)head[2] + 1);
    get(&p, t->name, (size_t)head[2]);
    t->name[head[2]] = 0;
    t->numel = 1;
    for (int k = 0; k < t->rank; k++)
      t->numel *= t->shape[k];
  }
  free(desc);
  for (int i = first; i < l->n; i++) {
    Tensor *t = &l->t[i];
    t->owned = rt_xmalloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof *t->owned);
    t->data = t->owned;
    recv_reals(L, t->owned, t->numel, from);
  }
}

/* Names in natural order: runs of digits compare as numbers, so that h.2
 * comes before h.10. */
static int natural_cmp(const char *a, const char *b) {
  while (*a && *b) {
    if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
      while (*a == '0') a++;
      while (*b == '0') b++;
      size_t na = 0, nb = 0;
      while (isdigit((unsigned char)a[na])) na++;
      while (isdigit((unsigned char)b[nb])) nb++;
      if (na != nb) return na < nb ? -1 : 1;
      int c = strncmp(a, b, na);
      if (c) return c;
      a += na, b += nb;
      continue;
    }
    if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
    a++, b++;
  }
  return *a ? 1 : *b ? -1 : 0;
}

static int tensor_cmp(const void *x, const void *y) {
  const Tensor *a = x, *b = y;
  if (a->group != b->group) return a->group < b->group ? -1 : 1;
  int c = natural_cmp(a->name, b->name);
  return c ? c : strcmp(a->name, b->name);
}

/* What a file is made of, in this program: per group a weights-shaped
 * array that is the same on every data-parallel rank (the weights, and
 * without ZeRO the optimizer state and the reduced gradients), or with
 * ZeRO the packed Adam state, or the gradients valid on the owned parts
 * only. */
typedef enum Kind { WHOLE, PACKED, OWNED } Kind;

typedef struct Source {
  const real *data;
  Kind kind;
} Source;

/* Every tensor of the model, in file order, into `out` on world rank 0
 * (empty elsewhere). Collective over the world: every rank calls it. */
static void collect(const Rt *rt, const Source *src, int nsrc, List *out) {
  const RtModel *m = rt->model;
  Place L = place_of();
  int d = L.mesh.dp;
  const real *base[3];
  real *whole[3] = {NULL, NULL, NULL};
  for (int s = 0; s < nsrc; s++) {
    base[s] = src[s].data;
    if (src[s].kind == WHOLE || !sharded(m, &L)) continue;
    const real *packed = src[s].data;
    real *tmp = NULL;
    if (src[s].kind == OWNED) {
      tmp = rt_xmalloc((size_t)(rt_zero_state_numel(m, d) + 1) * sizeof *tmp);
      move_parts(m, L.at.dp, d, src[s].data, tmp, 1);
      packed = tmp;
    }
    whole[s] = collect_shards(m, &L, packed);
    if (L.at.dp > 0 && L.at.dp < rt_ep_size()) whole[s] = collect_expert_shards(m, &L, packed);
    base[s] = whole[s];
    free(tmp);
  }
  /* Without ZeRO the data-parallel replicas hold the same values; with it
   * dp 0 now holds the whole. With --ep the first expert group's ranks
   * hold the experts between them, and gather them onto dp 0. */
  if (L.at.dp < rt_ep_size()) {
    List mine = {0};
    for (int s = 0; s < nsrc; s++)
      stage_tensors(rt, &L, &mine, base[s], s);
    if (L.at.tp == 0 && L.at.dp == 0 && L.rank != 0) send_stage(&L, &mine);
    if (L.rank == 0) {
      *out = mine;
      memset(&mine, 0, sizeof mine);
      for (int r = 1; r < L.mesh.pp; r++)
        recv_stage(&L, r, out);
    }
    list_free(&mine);
  }
  if (L.rank != 0) {
    for (int s = 0; s < nsrc; s++)
      free(whole[s]);
    return;
  }
  for (int s = 0; s < nsrc; s++)
    list_keep(out, whole[s]);
  qsort(out->t, (size_t)out->n, sizeof *out->t, tensor_cmp);
  for (int i = 1; i < out->n; i++)
    if (!strcmp(out->t[i].name, out->t[i - 1].name))
      rt_fatal(m->name, "internal error: two pipeline stages hold tensor %s", out->t[i].name);
}

/* ------------------------------------------------------------ metadata */

/* Metadata as key/value pairs; the values live in one arena per save. */
#define META_MAX 64
typedef struct Meta {
  const char *kv[2 * META_MAX];
  int n;
  char text[META_MAX][1024]; /* flag values hold paths */
  char keys[META_MAX][48];
} Meta;

static void meta_add(Meta *m, const char *key, const char *value) {
  if (m->n >= META_MAX) abort(); /* the table below is fixed: a bug, not input */
  m->kv[2 * m->n] = key;
  m->kv[2 * m->n + 1] = value ? value : "";
  m->n++;
}

static void meta_addf(Meta *m, const char *key, const char *fmt, long long v) {
  snprintf(m->text[m->n], sizeof m->text[0], fmt, v);
  meta_add(m, key, m->text[m->n]);
}

static void model_meta(const Rt *rt, Meta *m) {
  meta_add(m, "model", rt->model->name);
  meta_add(m, "source", rt->model->source);
  meta_add(m, "defines", rt->model->defines);
  meta_add(m, "real", RT_REAL_NAME);
  meta_addf(m, "step", "%lld", (long long)rt->step);
  meta_add(m, CKPT_RUN_ID_KEY, rt->run_id);
}

static int axis(int n) { return n > 0 ? n : 1; }

/* The layout a program was compiled for, "t=2 p=2 d=1 v=1 zero=0". */
static void layout_str(const RtModel *m, char *buf, size_t len) {
  snprintf(buf, len, "t=%d p=%d d=%d v=%d zero=%d", axis(m->mesh_tp), axis(m->mesh_pp),
           axis(m->mesh_dp), axis(m->nchunks), m->zero ? 1 : 0);
}

/* The metadata of the state file: the step, the RNG, the flags that
 * decide the next steps, and (for information) the layout it was saved
 * under. */
static Meta *state_meta(const Rt *rt) {
  Meta *m = rt_xcalloc(1, sizeof *m);
  meta_add(m, "format", CKPT_STATE_FORMAT);
  model_meta(rt, m);
  snprintf(m->text[m->n], sizeof m->text[0], "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64,
           rt->rng.s[0], rt->rng.s[1], rt->rng.s[2], rt->rng.s[3]);
  meta_add(m, "rng", m->text[m->n]);
  /* The data position is the step: the window order is a function of
   * (seed, epoch), so the flags below and the step rebuild it. */
  meta_addf(m, "data_position", "%lld", (long long)rt->step);
  /* Where that step's window lies, so that --resume can say it continues
   * at the same token of the same shard, or that the data set changed. */
  if (rt->train) {
    int64_t token, w = rt_data_window_at(rt->train, rt->step, !rt->f.no_shuffle, (uint64_t)rt->f.seed);
    const char *file = rt_data_window_file(rt->train, w, &token), *base = strrchr(file, '/');
    meta_add(m, "data_file", base ? base + 1 : file);
    meta_addf(m, "data_token", "%lld", (long long)token);
  }
  layout_str(rt->model, m->text[m->n], sizeof m->text[0]);
  meta_add(m, "layout", m->text[m->n]);
  for (int i = 0; i < rt_flags_saved_count(); i++) {
    snprintf(m->keys[m->n], sizeof m->keys[0], "flag.%s", rt_flags_saved_name(i));
    rt_flags_saved_value(&rt->f, i, m->text[m->n], sizeof m->text[0]);
    meta_add(m, m->keys[m->n], m->text[m->n]);
  }
  return m;
}

/* ---------------------------------------------------------------- writing */

/* Writes the tensors of groups [0, ngroups) of l. */
static void write_file(const char *path, const List *l, int ngroups, const Meta *meta) {
  RtStOut *out = rt_xcalloc((size_t)l->n + 1, sizeof *out);
  int n = 0;
  for (int i = 0; i < l->n; i++)
    if (l->t[i].group < ngroups)
      out[n++] = (RtStOut){l->t[i].name, l->t[i].rank, l->t[i].shape, l->t[i].data,
                           l->t[i].numel};
  rt_st_write(path, out, n, meta->kv, meta->n);
  free(out);
}

/* ---------------------------------------------------- the device's side */

/* Reals of the weights and the grads regions that a checkpoint moves:
 * every parameter and every bucket. */
static int64_t region_numel(const RtModel *m) { return span_of(m); }

/* A host copy of n reals of model memory. */
static real *to_host(const real *dev, int64_t n) {
  real *host = rt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *host);
  rt_dev_to_host(host, dev, n * (int64_t)sizeof *host);
  return host;
}

typedef void Loader(const Rt *rt, const RtStFile *f, const char *suffix, real *base);

/* Runs a loader of this file on a host copy of n reals of model memory
 * and puts the copy back: what the file does not cover keeps its value. */
static void load_into(const Rt *rt, const RtStFile *f, const char *suffix, Loader *load, real *dev,
                      int64_t n) {
  real *host = to_host(dev, n);
  load(rt, f, suffix, host);
  rt_dev_from_host(dev, host, n * (int64_t)sizeof *host);
  free(host);
}

/* The first tensor of l holding a NaN or an infinity, or NULL. */
static const Tensor *first_nonfinite(const List *l) {
  for (int i = 0; i < l->n; i++)
    for (int64_t k = 0; k < l->t[i].numel; k++)
      if (!isfinite((double)l->t[i].data[k])) return &l->t[i];
  return NULL;
}

/* After a save, both files must be this run's at this step: a file of
 * another step or run means another process writes into the folder (the
 * lock keeps runs of this machine's shardc out, not every writer). */
static void check_saved(const Rt *rt, const char *dir) {
  static const char *const files[] = {CKPT_STATE_FILE, CKPT_MODEL_FILE};
  char step[32];
  snprintf(step, sizeof step, "%lld", (long long)rt->step);
  for (int i = 0; i < 2; i++) {
    char *path = join(dir, files[i]);
    RtStFile f;
    RtErr e;
    if (rt_st_open_checked(&f, path, &e)) rt_err_fatal(&e);
    const char *s = rt_st_meta(&f, "step"), *id = rt_st_meta(&f, CKPT_RUN_ID_KEY);
    if (!s || strcmp(s, step) || !id || strcmp(id, rt->run_id))
      rt_fatal(path, "just saved as step %s of run %s, it now holds step %s of run %s: another "
               "process writes into this folder; this checkpoint cannot be trusted", step,
               rt->run_id, s ? s : "(none)", id ? id : "(none)");
    rt_st_close(&f);
    free(path);
  }
}

const char *rt_ckpt_save(Rt *rt) {
  static char *written;
  free(written);
  written = rt->f.keep_last ? rt_ckpt_step_dir(rt->f.save, rt->step) : rt_xstrdup(rt->f.save);
  Place L = place_of();
  int64_t nw = region_numel(rt->model), ns = rt_zero_state_numel(rt->model, rt->mesh.dp);
  real *w = to_host(rt->ctx.weights, nw);
  real *am = rt->adam_m ? to_host(rt->adam_m, ns) : NULL;
  real *av = rt->adam_v ? to_host(rt->adam_v, ns) : NULL;
  Source src[3] = {{w, WHOLE}, {am, PACKED}, {av, PACKED}};
  List l = {0};
  collect(rt, src, rt->adam_m ? 3 : 1, &l);
  if (L.rank == 0) {
    /* Never a non-finite state over a good checkpoint (the update's own
     * check, rt_update, stops the run before this can happen). */
    const Tensor *bad = first_nonfinite(&l);
    if (bad)
      rt_fatal(rt->f.save, "not saved: tensor %s of step %lld holds a NaN or an infinity; the "
               "checkpoint already there is kept", bad->name, (long long)rt->step);
    make_dirs(written);
    char *state = join(written, CKPT_STATE_FILE);
    char *model = join(written, CKPT_MODEL_FILE);
    /* The state first: a crash between the two renames leaves a new state
     * (complete by itself) beside the old weights, never the reverse. */
    Meta *m = state_meta(rt);
    write_file(state, &l, 3, m);
    memset(m, 0, sizeof *m);
    meta_add(m, "format", "pt"); /* what Hugging Face's loaders look for */
    model_meta(rt, m);
    write_file(model, &l, 1, m);
    free(m);
    free(state);
    free(model);
    check_saved(rt, written);
    if (rt->f.keep_last) rt_ckpt_publish(rt->f.save, rt->step, rt->f.keep_last);
  }
  list_free(&l); /* its tensors may point into the host copies */
  free(w);
  free(am);
  free(av);
  return written;
}

void rt_ckpt_dump_grads(Rt *rt, const char *path) {
  Place L = place_of();
  real *g = to_host(rt->ctx.grads, region_numel(rt->model));
  Source src[1] = {{g, OWNED}};
  List l = {0};
  collect(rt, src, 1, &l);
  if (L.rank == 0) {
    Meta *m = rt_xcalloc(1, sizeof *m);
    model_meta(rt, m);
    write_file(path, &l, 1, m);
    free(m);
  }
  list_free(&l);
  free(g);
}

/* ---------------------------------------------------------------- reading */

/* Finds NAME+suffix (or, for weights from Hugging Face files, with a
 * "transformer." prefix) and checks its shape; NULL with the problem in
 * `err` otherwise, a missing tensor with the file's nearest names. */
static const RtStTensor *find_param(const RtStFile *f, const RtParam *prm, const char *suffix,
                                    int hint_missing, char *err, size_t errlen) {
  char name[512], alt[540], want[200], got[200], near[600];
  int64_t shape[RT_MAX_RANK];
  rt_tp_full_shape(prm, shape);
  snprintf(name, sizeof name, "%s%s", prm->name, suffix);
  snprintf(alt, sizeof alt, "transformer.%s", name);
  const RtStTensor *t = rt_st_find(f, name);
  if (!t && !*suffix) t = rt_st_find(f, alt);
  rt_st_shape_str(want, sizeof want, prm->rank, shape);
  if (!t) {
    /* The search costs a pass over the file's names: for the line shown only. */
    const char *hint = hint_missing ? rt_ckpt_nearest(f, name, near, sizeof near) : NULL;
    snprintf(err, errlen, "missing tensor %s (the model expects %s)%s%s", name, want,
             hint ? "; nearest names in the file: " : "", hint ? hint : "");
    return NULL;
  }
  int same = t->rank == prm->rank;
  for (int d = 0; same && d < prm->rank; d++)
    same = t->shape[d] == shape[d];
  if (!same) {
    snprintf(err, errlen, "tensor %s has shape %s, the model expects %s", name,
             rt_st_shape_str(got, sizeof got, t->rank, t->shape), want);
    return NULL;
  }
  return t;
}

/* Whether any rank found a problem: each stage checks its own tensors, so
 * one stage may fail while the others would go on (and, with nothing left
 * to do, finish and leave MPI while the failing ranks bring the job down).
 * Ranks without a problem wait here for the failing ranks' rt_fatal to end
 * the job. Collective over the world. */
static void agree(int errors) {
  Place L = place_of();
  if (!L.c || rt_comm_size(L.c->world) == 1) return;
  int32_t any = errors > 0;
  rt_comm_allreduce(L.c->world, &any, &any, 1, RT_COMM_I32, RT_COMM_MAX);
  if (any && !errors) rt_comm_barrier(L.c->world); /* never completes */
}

/* The checksums of f, compared on world rank 0 (which reads the whole
 * file once more) unless --no-verify, which says so; every rank learns
 * the outcome. Collective over the world. */
static void verify_file(const Rt *rt, const RtStFile *f) {
  Place L = place_of();
  RtErr e;
  int rc = 1;
  if (L.rank == 0 && rt->f.no_verify)
    rt_say("note: %s: checksums not verified (--no-verify)\n", f->path);
  else if (L.rank == 0 && (rc = rt_st_verify(f, &e)) == 0)
    rt_say("note: %s holds no checksums (written by another program or an older shardc): its "
           "tensors are not verified\n", f->path);
  agree(rc < 0);
  if (rc < 0) rt_err_fatal(&e);
}

/* The first element of x[0, n) that is a NaN or an infinity, or -1. */
static int64_t nonfinite_at(const real *x, int64_t n) {
  for (int64_t k = 0; k < n; k++)
    if (!isfinite((double)x[k])) return k;
  return -1;
}

/* Reads every parameter of this program (+ suffix) into base, a
 * weights-shaped array: this rank's part of each whole tensor. The tied
 * copy of a later stage reads the tensor of its name like the original.
 * All problems are reported, then the run stops on every rank. */
static void load_params(const Rt *rt, const RtStFile *f, const char *suffix, real *base) {
  const RtModel *m = rt->model;
  const RtStTensor **found = rt_xcalloc((size_t)m->nparams + 1, sizeof *found);
  /* One line says what is wrong: the first problem, how many others
   * there are and the last of them, which is the same on every rank of a
   * stage (the stage's first rank says it). A file of another model
   * would otherwise give one line per tensor. */
  char err[1024], first[1024], last[1024];
  int errors = 0;
  for (int p = 0; p < m->nparams; p++) {
    found[p] = find_param(f, &m->params[p], suffix, errors == 0, err, sizeof err);
    if (found[p]) continue;
    memcpy(errors++ ? last : first, err, sizeof err);
  }
  agree(errors);
  if (errors == 1) rt_fatal(f->path, "%s", first);
  if (errors) {
    /* The first problem's hint serves for the last. */
    char *hint = strstr(last, "; nearest names");
    if (hint) *hint = 0;
    rt_fatal(f->path, "%s; and %d more problem%s, the last: %s", first, errors - 1,
             errors == 2 ? "" : "s", last);
  }
  /* Weights or moments that are not finite would make every step
   * non-finite: refused at load, naming the tensor. */
  const RtStTensor *bad = NULL;
  int64_t bad_at = -1;
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *prm = &m->params[p];
    if (!gathered(prm)) {
      rt_st_read(f, found[p], base + prm->offset);
      if (!bad && (bad_at = nonfinite_at(base + prm->offset, prm->numel)) >= 0) bad = found[p];
      continue;
    }
    int64_t n = rt_tp_full_numel(prm);
    real *full = rt_xmalloc((size_t)(n + 1) * sizeof *full);
    rt_st_read(f, found[p], full);
    if (!bad && (bad_at = nonfinite_at(full, n)) >= 0) bad = found[p];
    rt_tp_take(prm, full, base + prm->offset);
    free(full);
  }
  free(found);
  agree(bad != NULL);
  if (bad)
    rt_fatal(f->path, "tensor %s holds a NaN or an infinity (element %lld): a run cannot start "
             "from non-finite values", bad->name, (long long)bad_at);
}

/* AdamW's m or v: with ZeRO only this data-parallel rank's parts. */
static void load_state(const Rt *rt, const RtStFile *f, const char *suffix, real *state) {
  const RtModel *m = rt->model;
  Place L = place_of();
  if (!sharded(m, &L)) {
    load_params(rt, f, suffix, state);
    return;
  }
  real *full = rt_xcalloc((size_t)span_of(m), sizeof *full);
  load_params(rt, f, suffix, full);
  move_parts(m, L.at.dp, L.mesh.dp, full, state, 1);
  free(full);
}

void rt_ckpt_init_from(Rt *rt, const char *path) {
  RtStFile f;
  RtErr e;
  if (rt_st_open_set(&f, path, &e)) rt_err_fatal(&e);
  verify_file(rt, &f); /* the checksums are by the file's own names */
  if (rt->f.init_map) rt_ckpt_apply_map(&f, rt->f.init_map);
  rt_ckpt_strip_prefix(&f, rt->model);
  load_into(rt, &f, "", load_params, rt->ctx.weights, region_numel(rt->model));
  rt_st_close(&f);
}

/* ------------------------------------------------- the model of a file */

/* Whether p is a tensor of the weights in a file (not an AdamW moment). */
static int is_weight(const char *name) {
  size_t n = strlen(name);
  return !(n > 8 && !strcmp(name + n - 8, ".exp_avg")) &&
         !(n > 11 && !strcmp(name + n - 11, ".exp_avg_sq"));
}

/* What makes the model of file f another than this program's: its name,
 * the -D values, this stage's parameters (each in the file under its name
 * with its whole shape; its first tensor-parallel, data-parallel rank
 * checks) and the number of weight tensors of all stages. Collective over
 * the world. Returns the differences found by this rank, one a line. */
static void model_diffs(const Rt *rt, const RtStFile *f, char *out, size_t len) {
  const RtModel *m = rt->model;
  Place L = place_of();
  int lines = 0;
  out[0] = 0;
  const char *name = rt_st_meta(f, "model"), *defines = rt_st_meta(f, "defines");
  if (L.rank == 0) {
    if (!name || strcmp(name, m->name))
      rt_ckpt_diff_add(out, len, &lines, "model: '%s' in the checkpoint, '%s' in this program",
                       name ? name : "", m->name);
    rt_ckpt_define_diffs(defines ? defines : "", m->defines, 1, out, len, &lines);
    rt_ckpt_define_diffs(m->defines, defines ? defines : "", 0, out, len, &lines);
  }
  int32_t mine = 0, total;
  if (L.at.tp == 0 && L.at.dp == 0)
    for (int p = 0; p < m->nparams; p++) {
      const RtParam *prm = &m->params[p];
      if (!writes(prm, &L)) continue;
      mine++;
      char err[1024];
      if (!find_param(f, prm, "", lines == 0, err, sizeof err))
        rt_ckpt_diff_add(out, len, &lines, "%s", err);
    }
  total = mine;
  if (L.c && rt_comm_size(L.c->world) > 1)
    rt_comm_allreduce(L.c->world, &mine, &total, 1, RT_COMM_I32, RT_COMM_SUM);
  int held = 0;
  for (int i = 0; i < f->n; i++) held += is_weight(f->t[i].name);
  if (L.rank == 0 && held != total)
    rt_ckpt_diff_add(out, len, &lines, "the checkpoint holds %d weight tensors, this model %d",
                     held, (int)total);
}

/* Stops every rank with one error listing the differences of all ranks
 * (rank 0 says it) when f holds another model. Collective over the world. */
static void refuse_other_model(const Rt *rt, const RtStFile *f, const char *what) {
  enum { PART = 2048 };
  Place L = place_of();
  int n = L.c ? rt_comm_size(L.c->world) : 1;
  char *mine = rt_xcalloc(PART, 1), *all = rt_xcalloc((size_t)n, PART);
  model_diffs(rt, f, mine, PART);
  if (n > 1)
    rt_comm_allgather(L.c->world, mine, all, PART / 4, RT_COMM_I32);
  else
    memcpy(all, mine, PART);
  size_t cap = (size_t)n * PART + 1, used = 0;
  char *text = rt_xcalloc(cap, 1);
  for (int r = 0; r < n; r++) {
    char *part = all + (size_t)r * PART;
    part[PART - 1] = 0;
    /* The ranks of a stage find the same problems; keep one copy. */
    if (*part && !strstr(text, part)) used += (size_t)snprintf(text + used, cap - used, "%s", part);
  }
  free(mine);
  free(all);
  if (!used) {
    free(text);
    return;
  }
  if (L.rank == 0) rt_fatal(f->path, "%s:%s", what, text);
  if (n > 1) rt_comm_barrier(L.c->world); /* never completes: rank 0 ends the job */
  exit(1);
}

void rt_ckpt_check_save(Rt *rt) {
  if (!rt->f.save) return;
  char *dir = rt_ckpt_resolve(rt->f.save);
  char *path = join(dir, CKPT_STATE_FILE);
  struct stat st;
  if (stat(path, &st) != 0) {
    free(path);
    path = join(dir, CKPT_MODEL_FILE);
  }
  free(dir);
  if (stat(path, &st) == 0) {
    RtStFile f;
    rt_st_open(&f, path);
    refuse_other_model(rt, &f,
                       "a checkpoint of another model than this program's: --save will not "
                       "overwrite it (save elsewhere, or remove it); the differences");
    rt_st_close(&f);
  }
  free(path);
  /* Then, the folder being ours to write: world rank 0 writes every checkpoint: it holds the folder's lock for
   * the whole run, and clears what an interrupted save of an earlier run
   * left. Taken before the first step, so that a folder that cannot be
   * written fails now and not after the training. */
  Place L = place_of();
  if (L.rank == 0 && rt->lock_fd < 0) {
    make_dirs(rt->f.save);
    rt->lock_fd = rt_ckpt_lock(rt->f.save);
    int n = rt_ckpt_clean_temporaries(rt->f.save);
    if (n) rt_say("note: removed %d temporar%s an interrupted save left in %s\n", n,
                  n == 1 ? "y" : "ies", rt->f.save);
  }
}

/* The folder a resumed run saves into: --save when given (with a note
 * when it is not the one resumed from), else the folder resumed from. */
static void resume_save_dir(Rt *rt, int i, const char *saved, const char *origin) {
  if (rt_flags_restore(&rt->f, i, rt->f.resume, origin)) {
    char *a = realpath(rt->f.save, NULL), *b = realpath(rt->f.resume, NULL);
    if (!a || !b || strcmp(a, b))
      rt_say("note: this run resumes from %s and saves into %s (--save)\n", rt->f.resume,
             rt->f.save);
    free(a);
    free(b);
  } else if (*saved && strcmp(saved, rt->f.resume)) {
    rt_say("note: saving into %s, the folder resumed from (the run that wrote it saved into %s; "
           "--save DIR to choose)\n",
           rt->f.resume, saved);
  }
}

/* Flags the command line left out take the checkpoint's values; given
 * ones that differ get a note, since the run will not repeat the original. */
static void restore_flags(Rt *rt, const RtStFile *f) {
  for (int i = 0; i < rt_flags_saved_count(); i++) {
    char key[64], now[1024], origin[600];
    snprintf(key, sizeof key, "flag.%s", rt_flags_saved_name(i));
    const char *v = rt_st_meta(f, key);
    if (!v) continue;
    snprintf(origin, sizeof origin, "%s: %s", f->path, key);
    if (!strcmp(rt_flags_saved_name(i), "save")) {
      resume_save_dir(rt, i, v, origin);
      continue;
    }
    rt_flags_saved_value(&rt->f, i, now, sizeof now);
    if (rt_flags_restore(&rt->f, i, v, origin) && strcmp(now, v))
      rt_say("note: --%s %s differs from the checkpoint's %s\n", rt_flags_saved_name(i), now,
             *v ? v : "(none)");
  }
}

/* A folder whose model file belongs to another run than its state file
 * was mixed by hand (or written by two runs): refused. The same run at
 * another step is a save interrupted between its two files, which the
 * state alone resumes. World rank 0 checks; collective over the world. */
static void check_pair(const RtStFile *state, const char *dir) {
  Place L = place_of();
  char *path = join(dir, CKPT_MODEL_FILE);
  RtStFile f;
  RtErr e;
  int mixed = 0;
  struct stat sb;
  if (L.rank == 0 && stat(path, &sb) == 0) {
    if (rt_st_open_checked(&f, path, &e)) {
      mixed = 1;
    } else {
      const char *a = rt_st_meta(state, CKPT_RUN_ID_KEY), *b = rt_st_meta(&f, CKPT_RUN_ID_KEY);
      const char *sa = rt_st_meta(state, "step"), *sb2 = rt_st_meta(&f, "step");
      if (a && b && strcmp(a, b)) {
        mixed = 1;
        rt_err_set(&e, dir, "--resume: this folder mixes two runs: %s is step %s of run %s, %s "
                   "step %s of run %s (refused: the next steps would continue neither)",
                   CKPT_STATE_FILE, sa ? sa : "?", a, CKPT_MODEL_FILE, sb2 ? sb2 : "?", b);
      } else if (sa && sb2 && strcmp(sa, sb2)) {
        rt_say("note: %s is of step %s, %s of step %s (a save was interrupted between its two "
               "files); resuming from the state\n", CKPT_MODEL_FILE, sb2, CKPT_STATE_FILE, sa);
      }
      rt_st_close(&f);
    }
  }
  free(path);
  agree(mixed);
  if (mixed) rt_err_fatal(&e);
}

void rt_ckpt_resume_open(Rt *rt) {
  char *dir = rt_ckpt_resolve(rt->f.resume);
  char *path = join(dir, CKPT_STATE_FILE);
  RtStFile *f = &rt->resume;
  rt_st_open(f, path);
  RtCkptState st;
  RtErr e;
  if (rt_ckpt_state_fields(f, &st, &e)) rt_err_fatal(&e);
  verify_file(rt, f);
  check_pair(f, dir);
  const char *id = rt_st_meta(f, CKPT_RUN_ID_KEY);
  if (id && *id) snprintf(rt->run_id, sizeof rt->run_id, "%s", id);
  refuse_other_model(rt, f, "--resume: a checkpoint of another model than this program's; the "
                            "differences");
  rt->step = st.step;
  memcpy(rt->rng.s, st.rng, sizeof st.rng);
  restore_flags(rt, f);
  /* Any layout loads any other's checkpoint; say when they differ. */
  const char *saved = rt_st_meta(f, "layout");
  char now[128];
  layout_str(rt->model, now, sizeof now);
  if (saved && strcmp(saved, now))
    rt_say("note: the checkpoint was saved under %s, this program runs %s\n", saved, now);
  free(path);
  free(dir);
}

/* The shard and token the resumed step reads, against those the saving
 * run would have read next: the same, or a warning that the data set
 * changed (more shards, another order), since the run then does not
 * continue the one saved. World rank 0 says it. */
static void check_data_position(const Rt *rt, const RtStFile *f) {
  const char *file = rt_st_meta(f, "data_file"), *tok = rt_st_meta(f, "data_token");
  if (!rt->train || !file || !tok || place_of().rank != 0) return;
  int64_t token, w = rt_data_window_at(rt->train, rt->step, !rt->f.no_shuffle, (uint64_t)rt->f.seed);
  const char *now = rt_data_window_file(rt->train, w, &token), *base = strrchr(now, '/');
  base = base ? base + 1 : now;
  if (!strcmp(base, file) && token == atoll(tok))
    rt_say("data: step %lld continues at token %lld of %s, where the saved run stopped\n",
           (long long)rt->step + 1, (long long)token, base);
  else
    fprintf(stderr, "shardc: warning: --resume: step %lld reads %s from token %lld, but the saved run "
            "would have read %s from token %s: the data set (%s) is not the one it trained on\n",
            (long long)rt->step + 1, base, (long long)token, file, tok, rt->f.data);
}

void rt_ckpt_resume_load(Rt *rt) {
  RtStFile *f = &rt->resume;
  check_data_position(rt, f);
  load_into(rt, f, "", load_params, rt->ctx.weights, region_numel(rt->model));
  if (rt->adam_m) {
    char probe[512];
    if (rt->model->nparams > 0) {
      snprintf(probe, sizeof probe, "%s.exp_avg", rt->model->params[0].name);
      if (!rt_st_find(f, probe))
        rt_fatal(f->path, "no AdamW state in this checkpoint (saved with --optimizer sgd?)");
    }
    int64_t ns = rt_zero_state_numel(rt->model, rt->mesh.dp);
    load_into(rt, f, ".exp_avg", load_state, rt->adam_m, ns);
    load_into(rt, f, ".exp_avg_sq", load_state, rt->adam_v, ns);
  }
  rt_st_close(f);
}
