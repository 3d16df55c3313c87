/* rt_main: the flags, the checks of the compiler's tables, the one
 * allocation of the memory plan, and the training loop of a rank program
 * (the microbatches of one chunk here, a pipeline stage's table in exec.c). */
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../abi/formats.h"
#include "../../abi/job.h"
#include "batch.h"
#include "checkpoint.h"
#include "device.h"
#include "dp.h"
#include "exec.h"
#include "gradcheck.h"
#include "graphs.h"
#include "init.h"
#include "log.h"
#include "moe_report.h"
#include "optim.h"
#include "rt.h"
#include "sample.h"
#include "tp.h"
#include "trace.h"
#include "update.h"
#include "util.h"
#include "watchdog.h"
#include "window.h"
#include "zero.h"

/* The tables come from the compiler; a mismatch here is its bug, but a
 * message beats writing outside the plan or hanging a job. */

/* Whether `bytes` at location `off` of chunk c lie inside one of its two
 * buffers (model.h: activations below c->activations, temporaries above). */
static int in_chunk(const RtChunk *c, int64_t off, int64_t bytes) {
  if (off < 0 || bytes < 0) return 0;
  if (off < c->activations) return off + bytes <= c->activations;
  return off + bytes <= c->activations + c->temporaries;
}

/* Each part of a message inside the chunk's memory, its elements reals or
 * (RtModel.messages_bf16) 2 bytes. */
static int parts_inside(const RtModel *m, const RtChunk *c, const RtMsgPart *p, int n) {
  int64_t elem = m->messages_bf16 ? 2 : (int64_t)sizeof(real);
  if (n < 0 || (n > 0 && !p)) return 0;
  for (int i = 0; i < n; i++)
    if (p[i].numel <= 0 || !in_chunk(c, p[i].offset, p[i].numel * elem)) return 0;
  return 1;
}

static void check_chunk(const RtModel *m, int c, int p) {
  const char *what = m->name;
  const RtChunk *ch = &m->chunks[c];
  int nv = p * m->nchunks, vs = ch->vstage, last = vs == nv - 1;
  if (!ch->forward || !ch->backward)
    rt_fatal(what, "internal error: chunk %d has no forward or backward", c);
  if (vs != rt_vstage(p, m->vshape, m->stage, c))
    rt_fatal(what, "internal error: chunk %d of stage %d is virtual stage %d, not %d", c, m->stage,
             vs, rt_vstage(p, m->vshape, m->stage, c));
  if (ch->activations < 0 || ch->temporaries < 0 || ch->temporaries > m->plan.temporaries)
    rt_fatal(what, "internal error: chunk %d needs %lld bytes of temporaries, the plan has %lld", c,
             (long long)ch->temporaries, (long long)m->plan.temporaries);
  if (ch->weights_begin < 0 || ch->weights_begin > ch->weights_end ||
      ch->weights_end > m->nweights)
    rt_fatal(what, "internal error: chunk %d's weights lie outside the weights", c);
  if (ch->ninputs < 0 || (ch->ninputs > 0 && !ch->inputs))
    rt_fatal(what, "internal error: bad input table of chunk %d", c);
  for (int i = 0; i < ch->ninputs; i++) {
    const RtInput *in = &ch->inputs[i];
    if (in->numel != m->batch * m->seq || !in_chunk(ch, in->offset_bytes, in->numel * 4))
      rt_fatal(what, "internal error: input %s is not [batch, seq] inside chunk %d's memory",
               in->name, c);
  }
  if (ch->has_loss != last)
    rt_fatal(what, "internal error: chunk %d (virtual stage %d of %d) %s the loss", c, vs, nv,
             ch->has_loss ? "computes" : "does not compute");
  if (ch->has_loss) {
    int64_t elem = m->logits_bf16 ? 2 : (int64_t)sizeof(real);
    int64_t logits = m->batch * m->seq * rt_logits_cols(m) * elem;
    if (!in_chunk(ch, ch->loss_offset, sizeof(real)) ||
        !in_chunk(ch, ch->dloss_offset, sizeof(real)) || !in_chunk(ch, ch->logits_offset, logits))
      rt_fatal(what, "internal error: loss, d_loss or logits lie outside chunk %d's memory", c);
  }
  /* Messages: an activation in from the previous virtual stage (but on the
   * first), out to the next (but on the last); gradients the other way. */
  int in = p > 1 && vs > 0, out = p > 1 && !last;
  if (!parts_inside(m, ch, ch->recv_act, ch->nrecv_act) ||
      !parts_inside(m, ch, ch->send_act, ch->nsend_act) ||
      !parts_inside(m, ch, ch->recv_grad, ch->nrecv_grad) ||
      !parts_inside(m, ch, ch->send_grad, ch->nsend_grad) || (ch->nrecv_act > 0) != in ||
      (ch->nsend_grad > 0) != in || (ch->nsend_act > 0) != out || (ch->nrecv_grad > 0) != out)
    rt_fatal(what, "internal error: the message parts of chunk %d (virtual stage %d) are wrong", c,
             vs);
}

/* Buckets: disjoint, in order, inside their chunk's weights, covering
 * every parameter; with ZeRO-1 a multiple of d; marked tied when they hold
 * a tied parameter (whose sum over the embedding group must come first). */
static void check_buckets(const RtModel *m, int d) {
  const char *what = m->name;
  if (d <= 1) return;
  if (m->nbuckets < 1 || !m->buckets)
    rt_fatal(what, "internal error: a data-parallel program without gradient buckets");
  for (int j = 0; j < m->nbuckets; j++) {
    const RtBucket *b = &m->buckets[j];
    if (b->chunk < 0 || b->chunk >= m->nchunks || b->numel <= 0 ||
        b->offset < m->chunks[b->chunk].weights_begin ||
        b->offset + b->numel > m->chunks[b->chunk].weights_end ||
        (j > 0 && b->offset < m->buckets[j - 1].offset + m->buckets[j - 1].numel) ||
        (m->zero && b->numel % d))
      rt_fatal(what, "internal error: bucket %d [%lld, +%lld) of chunk %d is out of place", j,
               (long long)b->offset, (long long)b->numel, b->chunk);
  }
  for (int i = 0; i < m->nparams; i++) {
    const RtParam *q = &m->params[i];
    int64_t covered = 0;
    for (int j = 0; j < m->nbuckets; j++) {
      const RtBucket *b = &m->buckets[j];
      int64_t lo = b->offset > q->offset ? b->offset : q->offset;
      int64_t hi = b->offset + b->numel < q->offset + q->numel ? b->offset + b->numel
                                                               : q->offset + q->numel;
      if (lo >= hi) continue;
      covered += hi - lo;
      if (q->tied && !b->tied)
        rt_fatal(what, "internal error: bucket %d holds tied %s but is not marked tied", j,
                 q->name);
    }
    if (covered != q->numel)
      rt_fatal(what, "internal error: the buckets cover %lld of the %lld elements of %s",
               (long long)covered, (long long)q->numel, q->name);
  }
}

static int is_message(int kind) { return kind == RT_SCHED_SEND || kind == RT_SCHED_RECV; }

/* What each (chunk, microbatch) of the table ends as: backward done (2),
 * or also its weight gradient (3) where the chunk's backward is split. */
static int final_state(const RtModel *m, int c) { return rt_chunk_wgrad(m, c) ? 3 : 2; }

/* The stage's action table: what the executor relies on. The compiler's
 * verifier proved the tables deadlock-free together; this checks the one
 * the runtime got. */
static void check_actions(const RtModel *m, int p) {
  const char *what = m->name;
  int v = m->nchunks, mb = m->microbatches, nv = p * v;
  if (!m->actions || m->nactions <= 0 || mb < 1)
    rt_fatal(what, "internal error: a pipeline stage without an action table");
  /* 1: F done, 2: B done, per (chunk, microbatch) */
  unsigned char *done = rt_xcalloc((size_t)(v * mb), 1);
  int opt = 0;
  for (int32_t i = 0; i < m->nactions; i++) {
    const RtSchedAction *a = &m->actions[i];
    int k = a->kind, c = a->chunk, bad = 0;
    if (k == RT_SCHED_W && c >= 0 && c < v && !rt_chunk_wgrad(m, c))
      rt_fatal(what, "internal error: a W action for chunk %d, whose backward is not split", c);
    if (k < 0 || k >= RT_SCHED_NKINDS) bad = 1;
    else if (k == RT_SCHED_REDUCE_GRADS) bad = c < -1 || c >= v;
    else if (k == RT_SCHED_OPT_STEP) bad = opt++ > 0;
    else if (c < 0 || c >= v || a->mb < 0 || a->mb >= mb) bad = 1;
    if (!bad && (a->flags & RT_SCHED_JOIN))
      bad = !is_message(k) || i == 0 || !is_message(m->actions[i - 1].kind);
    if (!bad && (k == RT_SCHED_F || k == RT_SCHED_B || k == RT_SCHED_W)) {
      /* F, then B, then W when the chunk has one: states 1, 2, 3. */
      unsigned char *st = &done[c * mb + a->mb];
      int want = k == RT_SCHED_F ? 0 : k == RT_SCHED_B ? 1 : 2;
      bad = *st != want;
      *st = (unsigned char)(want + 1);
    }
    if (!bad && is_message(k)) {
      int vs = m->chunks[c].vstage, act = a->msg == RT_SCHED_ACT;
      /* An activation comes from vs - 1 and goes to vs + 1; gradients the
       * other way. */
      int from_prev = (k == RT_SCHED_RECV) == act;
      int other = from_prev ? vs - 1 : vs + 1;
      bad = (a->msg != RT_SCHED_ACT && a->msg != RT_SCHED_GRAD) || other < 0 || other >= nv ||
            a->peer != rt_vstage_stage(p, m->vshape, other) ||
            rt_vstage_stage(p, m->vshape, other) == m->stage;
    }
    /* The optimizer after every backward; a chunk's reduction after its
     * last one (an earlier backward would still add to the buckets). */
    if (!bad && k == RT_SCHED_OPT_STEP)
      for (int j = 0; j < v * mb && !bad; j++) bad = done[j] != final_state(m, j / mb);
    if (!bad && k == RT_SCHED_REDUCE_GRADS)
      for (int j = 0; j < v * mb && !bad; j++)
        bad = (c < 0 || j / mb == c) && done[j] != final_state(m, j / mb);
    if (bad)
      rt_fatal(what, "internal error: action %d (%s chunk %d microbatch %d peer %d) of stage %d's "
                     "table is invalid here",
               (int)i, rt_sched_kind_name(k), c, a->mb, a->peer, m->stage);
  }
  for (int j = 0; j < v * mb; j++)
    if (done[j] != final_state(m, j / mb))
      rt_fatal(what, "internal error: stage %d's table misses F, B or W of chunk %d, microbatch %d",
               m->stage, j / mb, j % mb);
  if (opt != 1) rt_fatal(what, "internal error: stage %d's table has %d optimizer steps", m->stage, opt);
  free(done);
}

static void check_model(const RtModel *m) {
  const char *what = m->name;
  int p = m->mesh_pp > 0 ? m->mesh_pp : 1, d = m->mesh_dp > 0 ? m->mesh_dp : 1;
  int64_t wbytes = m->nweights * (int64_t)sizeof(real);
  if (m->batch <= 0 || m->seq <= 0 || m->vocab <= 0 || !m->chunks || m->nchunks < 1)
    rt_fatal(what, "internal error: bad model tables (batch, seq, vocab or chunks)");
  if ((p == 1 && (m->nchunks != 1 || m->stage != 0)) || m->stage < 0 || m->stage >= p)
    rt_fatal(what, "internal error: stage %d of %d with %d chunks", m->stage, p, m->nchunks);
  if (m->plan.weights < wbytes || m->plan.grads < wbytes)
    rt_fatal(what, "internal error: the memory plan holds fewer bytes than the %lld weights",
             (long long)m->nweights);
  for (int i = 0; i < m->nparams; i++) {
    const RtParam *q = &m->params[i];
    int64_t n = 1;
    for (int k = 0; k < q->rank; k++)
      n *= q->shape[k];
    if (q->rank < 0 || q->rank > RT_MAX_RANK || n != q->numel || q->offset < 0 ||
        q->offset + q->numel > m->nweights)
      rt_fatal(what, "internal error: parameter %s lies outside the weights", q->name);
    if (q->tied && p == 1)
      rt_fatal(what, "internal error: parameter %s is tied in a program of one stage", q->name);
  }
  int64_t activations = 0;
  for (int c = 0; c < m->nchunks; c++) {
    check_chunk(m, c, p);
    activations += m->chunks[c].activations;
  }
  if (activations > m->plan.activations)
    rt_fatal(what, "internal error: the chunks keep %lld bytes, the plan's activations are %lld",
             (long long)activations, (long long)m->plan.activations);
  check_buckets(m, d);
  if (p > 1) check_actions(m, p);
}

/* Cheap checks of flag combinations, all reported before exiting. */
static void check_flags(const RtFlags *f) {
  int errors = 0;
  if (f->save_every > 0 && !f->save) rt_error("--save-every", "needs --save DIR"), errors++;
  if (f->keep_last > 0 && !f->save) rt_error("--keep-last", "needs --save DIR"), errors++;
  if (f->eval_every > 0 && !f->val_data) rt_error("--eval-every", "needs --val-data"), errors++;
  if (f->steps > 0 && !f->data && !f->gradcheck)
    rt_error("--steps", "training needs --data (or --steps 0)"), errors++;
  if (f->dump_grads && f->steps == 0) rt_error("--dump-grads", "needs a step to run"), errors++;
  if (errors) exit(1);
}

/* A file a flag names, for the comparison of outputs with inputs. */
typedef struct Named {
  const char *flag;
  char *path;
  struct stat st;
  int exists;
} Named;

static void add_named(Named **v, int *n, const char *flag, const char *path) {
  Named *g = rt_xmalloc((size_t)(*n + 1) * sizeof *g);
  if (*n) memcpy(g, *v, (size_t)*n * sizeof *g);
  free(*v);
  *v = g;
  Named *x = &g[(*n)++];
  x->flag = flag;
  x->path = rt_xstrdup(path);
  x->exists = stat(path, &x->st) == 0;
}

static void add_pattern(Named **v, int *n, const char *flag, const char *pattern) {
  RtErr e;
  int k = 0;
  char **paths = pattern ? rt_data_expand(pattern, &k, &e) : NULL;
  for (int i = 0; i < k; i++) {
    add_named(v, n, flag, paths[i]);
    free(paths[i]);
  }
  free(paths); /* a pattern that matches nothing is open_data's error */
}

/* Whether two named files are one: the same inode when both exist. */
static int same_file(const Named *a, const Named *b) {
  return a->exists && b->exists && a->st.st_dev == b->st.st_dev && a->st.st_ino == b->st.st_ino;
}

/* An output that names an input would destroy it (--log-json over the
 * training data truncates it), and two outputs that name one file would
 * mix. Every output is compared with every input and every other output,
 * by inode (a link or another spelling of the path is the same file),
 * before anything is opened for writing. All conflicts are reported. */
static void check_outputs(const RtFlags *f) {
  Named *in = NULL, *out = NULL;
  int nin = 0, nout = 0, errors = 0;
  add_pattern(&in, &nin, "--data", f->data);
  add_pattern(&in, &nin, "--val-data", f->val_data);
  if (f->init_from) add_named(&in, &nin, "--init-from", f->init_from);
  if (f->resume) {
    char *dir = rt_ckpt_resolve(f->resume);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_STATE_FILE);
    add_named(&in, &nin, "--resume", path);
    free(dir);
  }
  if (f->save) {
    /* What --save writes is an output too (in DIR, or its step folders). */
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", f->save, CKPT_STATE_FILE);
    add_named(&out, &nout, "--save", path);
    snprintf(path, sizeof path, "%s/%s", f->save, CKPT_MODEL_FILE);
    add_named(&out, &nout, "--save", path);
  }
  int first = nout;
  if (f->log_json) add_named(&out, &nout, "--log-json", f->log_json);
  if (f->trace) add_named(&out, &nout, "--trace", f->trace);
  if (f->dump_grads) add_named(&out, &nout, "--dump-grads", f->dump_grads);
  for (int i = first; i < nout; i++) {
    for (int j = 0; j < nin; j++)
      if (same_file(&out[i], &in[j]))
        rt_error(out[i].flag, "%s is also %s %s: writing it would destroy that input (refused "
                 "before anything is written)", out[i].path, in[j].flag, in[j].path), errors++;
    for (int j = 0; j < i; j++)
      if (same_file(&out[i], &out[j]) || !strcmp(out[i].path, out[j].path))
        rt_error(out[i].flag, "%s is also the output of %s: two outputs cannot share a file",
                 out[i].path, out[j].flag), errors++;
  }
  for (int i = 0; i < nin; i++) free(in[i].path);
  for (int i = 0; i < nout; i++) free(out[i].path);
  free(in);
  free(out);
  if (errors) exit(1);
}

/* A run's identity (CKPT_RUN_ID_KEY): a hash of what decides its
 * trajectory from the start, the model (its name and -D values) and
 * --seed. It is not random, so that the same command gives the same
 * checkpoint to the byte (docs/reliability.md, determinism) and a resumed
 * run's files equal an uninterrupted run's; runs of other models or seeds
 * differ, and --resume keeps the id of the run it continues. */
static void new_run_id(Rt *rt) {
  RtXxh64 h;
  rt_xxh64_init(&h);
  const char *parts[2] = {rt->model->name, rt->model->defines ? rt->model->defines : ""};
  for (int i = 0; i < 2; i++) rt_xxh64_update(&h, parts[i], strlen(parts[i]) + 1);
  int64_t seed = rt->f.seed;
  rt_xxh64_update(&h, &seed, sizeof seed);
  snprintf(rt->run_id, sizeof rt->run_id, "%016llx", (unsigned long long)rt_xxh64_digest(&h));
}

/* The microbatches per replica: with a pipeline the table's m, which
 * --global-batch must match; without, what --global-batch makes of it. */
static void open_data(Rt *rt) {
  const RtModel *m = rt->model;
  RtFlags *f = &rt->f;
  int d = rt->mesh.dp;
  int64_t per = m->batch * d; /* sequences of one microbatch on every replica */
  if (rt->mesh.pp > 1) {
    int64_t want = (int64_t)m->microbatches * per;
    if (f->global_batch == 0) f->global_batch = want;
    if (f->global_batch != want)
      rt_fatal("--global-batch",
               "this pipeline stage's schedule runs %d microbatch%s of %lld sequence%s on each "
               "of %d data-parallel replica%s, a global batch of %lld, not %lld (recompile with "
               "`shardc compile ... --global-batch %lld`)",
               m->microbatches, m->microbatches == 1 ? "" : "es", (long long)m->batch,
               m->batch == 1 ? "" : "s", d, d == 1 ? "" : "s", (long long)want,
               (long long)f->global_batch, (long long)f->global_batch);
    rt->micro = m->microbatches;
  } else {
    if (f->global_batch == 0) f->global_batch = (m->microbatches > 0 ? m->microbatches : 1) * per;
    /* The words of shardc compile, run, schedule and simulate. */
    if (f->global_batch % per)
      rt_fatal(NULL, "--global-batch %lld is not a multiple of microbatch %lld x dp %d",
               (long long)f->global_batch, (long long)m->batch, d);
    rt->micro = f->global_batch / per;
  }
  rt->rows = m->batch * m->seq;
  if (f->data) rt->train = rt_data_open(f->data, f->global_batch, m->seq, m->vocab);
  if (f->val_data) rt->val = rt_data_open(f->val_data, m->batch, m->seq, m->vocab);
  if (f->steps < 0) f->steps = rt->train ? rt_data_windows(rt->train) : 0;
}

/* OpenBLAS's GEMM buffer (BUFFER_SIZE of its x86-64 build: 32 << 22),
 * one per thread that runs a GEMM; the slack covers the runtime's own
 * small buffers and the threads' stacks. */
#define OPENBLAS_BUFFER ((int64_t)128 << 20)
#define AS_SLACK ((int64_t)64 << 20)
/* What MPI_Init adds to a rank's address space: Open MPI 4.1 on the
 * 2-core test machine grew a process by 159 MiB alone, 167 MiB with 2
 * ranks, 215 with 4 and 231 with 8 (VmSize before and after; mostly its
 * components and their shared-memory segments). The bound is the lowest
 * of them, so that a job it refuses could not have started. */
#define MPI_START ((int64_t)150 << 20)

/* Under an address-space limit (ulimit -v), checks that what this rank
 * still needs fits, and stops with an error naming the limit when it
 * does not: the plan's plan_bytes, OpenBLAS's GEMM buffers for
 * gemm_threads threads and, when mpi_start, MPI's own start. OpenBLAS
 * retries a failing mmap of its buffer forever, inside the first GEMM,
 * where the run would spin without a word, and Open MPI's start crashes
 * (SIGSEGV) on a failing one, so this runs before MPI starts (without the
 * plan, which the device layer may not hold in host memory) and again
 * before the plan is allocated. Does nothing without a limit. */
static void check_address_space(int64_t plan_bytes, int gemm_threads, int mpi_start) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  if (gemm_threads < 1) gemm_threads = 1;
  int64_t mpi = mpi_start ? MPI_START : 0;
  int64_t need = plan_bytes + gemm_threads * OPENBLAS_BUFFER + AS_SLACK + mpi;
  /* A reservation without access counts against the limit as the real
   * mappings will, and costs no memory. */
  void *p = mmap(NULL, (size_t)need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) {
    munmap(p, (size_t)need);
    return;
  }
  char a[32], b[32];
  rt_fatal("ulimit -v", "the address-space limit of %llu KiB leaves no room for the %s this rank "
           "still needs (%s%s, and a GEMM buffer of 128 MiB for each OpenBLAS thread, %d here): "
           "raise or remove the limit, or run fewer threads (OMP_NUM_THREADS)",
           (unsigned long long)(rl.rlim_cur / 1024), rt_fmt_bytes(a, sizeof a, need),
           mpi_start ? "MPI's start, about 150 MiB" : "the memory plan's ",
           mpi_start ? "" : rt_fmt_bytes(b, sizeof b, plan_bytes), gemm_threads);
}

/* The one allocation of model memory (device.h): weights, gradients,
 * optimizer state and (one chunk) activations and temporaries, each at a
 * 64-byte boundary, all zero (and touched, so the resident size shows the
 * plan from the start). A pipeline stage's activations and temporaries are
 * the executor's. */
/* A plan that does not fit is an error before anything is allocated,
 * not an allocation that fails (or a machine that swaps) later: the plan's
 * bytes times the ranks of this machine against what it has available.
 * Host memory under `shardc run` was checked there, exactly (each stage's
 * plan times its ranks; this rank knows only its own). */
static int check_memory(const RtPlan *p) {
  const char *source;
  int host;
  int64_t avail = rt_dev_mem_available(&source, &host);
  int64_t per = rt_plan_total(p);
  int ranks = rt_local_ranks();
  if (host) check_address_space(per, omp_get_max_threads(), 0);
  if (host && getenv(JOB_DIR_ENV)) return host;
  if (avail < 0 || per * ranks <= avail) return host;
  char a[32], b[32], c[32];
  rt_fatal(NULL, "the memory plan needs %s for the %d rank%s of this machine (%s per rank), more "
           "than the %s available (%s)", rt_fmt_bytes(b, sizeof b, per * ranks), ranks,
           ranks == 1 ? "" : "s", rt_fmt_bytes(a, sizeof a, per), rt_fmt_bytes(c, sizeof c, avail),
           source);
  return host;
}

/* A field of /proc/self/status in bytes (VmRSS: resident now, VmHWM: the
 * peak), or -1 where there is none. */
static int64_t proc_status_bytes(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  size_t n = strlen(field);
  int64_t kb = -1;
  while (kb < 0 && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') kb = strtoll(line + n + 1, NULL, 10);
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

/* The host memory resident right before the plan's allocation (libraries,
 * OpenMP's and MPI's start-up), for report_memory; -1 on a device whose
 * plan is not host memory. */
static int64_t rss_before_plan = -1;

static void allocate(Rt *rt) {
  const RtModel *m = rt->model;
  const RtPlan *p = &m->plan;
  if (check_memory(p)) rss_before_plan = proc_status_bytes("VmRSS");
  int one_chunk = rt->mesh.pp == 1;
  int64_t w = RT_ALIGN64(p->weights), g = RT_ALIGN64(p->grads), o = RT_ALIGN64(p->optimizer);
  int64_t total = w + g + o + (one_chunk ? RT_ALIGN64(p->activations + p->temporaries) : 0);
  rt->mem = rt_dev_alloc(total, "the memory plan");
  rt_dev_zero(rt->mem, total);
  rt->ctx.model = m;
  rt->ctx.weights = (real *)rt->mem;
  rt->ctx.grads = (real *)(rt->mem + w);
  if (one_chunk) {
    rt->ctx.activations = rt->mem + w + g + o;
    rt->ctx.temporaries = rt->ctx.activations + m->chunks[0].activations;
  }
  rt->ctx.training = 1;
  if (rt->f.optimizer == RT_OPT_ADAMW) {
    /* With ZeRO-1 this replica's shard of m and v only (zero.h). */
    int64_t state = rt_zero_state_numel(m, rt->mesh.dp);
    int64_t need = 2 * state * (int64_t)sizeof(real);
    if (p->optimizer < need)
      rt_fatal("--optimizer",
               "AdamW needs %lld bytes of state, the memory plan has %lld "
               "(use --optimizer sgd)",
               (long long)need, (long long)p->optimizer);
    rt->adam_m = (real *)(rt->mem + w + g);
    rt->adam_v = rt->adam_m + state;
  }
  rt->window = rt_xmalloc((size_t)(rt->f.global_batch * m->seq + 1) * sizeof *rt->window);
  rt->norm_chunks = (m->nweights + RT_NORM_CHUNK - 1) / RT_NORM_CHUNK;
  rt->norm_partials = rt_xcalloc((size_t)rt->norm_chunks + 1, sizeof *rt->norm_partials);
}

static void print_data(const char *what, const char *pattern, RtData *d, const char *order) {
  char tok[32];
  rt_say("%s: %s | %d shard%s, %s tokens, %lld windows%s\n", what, pattern, rt_data_shards(d),
         rt_data_shards(d) == 1 ? "" : "s", rt_fmt_thousands(tok, sizeof tok, rt_data_tokens(d)),
         (long long)rt_data_windows(d), order);
}

/* The total that print_banner prints: the plan's regions with a pipeline
 * stage's stash at its peak, its message buffers and, with d > 1, MPI's
 * staging of the gradient buckets (what the process allocates). */
static int64_t printed_plan_total(Rt *rt) {
  const RtPlan *p = &rt->model->plan;
  int64_t act = rt->exec ? rt_exec_stash_bytes(rt) : p->activations;
  int64_t msgs = rt->exec ? rt_exec_message_bytes(rt) : 0;
  return p->weights + p->grads + p->optimizer + act + p->temporaries + msgs +
         rt_dp_staging_bytes(rt);
}

/* What no plan counts, measured on the host device at the end of a run:
 * the peak resident size less the size before the plan's allocation, less
 * the plan as run, which counts MPI's reduction staging at the peak the
 * buckets' timing gave (dp.h) where the banner printed its bound. The rest
 * is OpenBLAS's packing buffers (one per thread, touched as far as the
 * largest GEMM needs), MPI's own buffers and the runtime's (the token
 * window, the logs, the watchdog); bench/cpu_train.sh holds used / plan
 * within 5%. World rank 0 only, like the banner. */
static void report_memory(Rt *rt) {
  int64_t peak = proc_status_bytes("VmHWM");
  if (rss_before_plan < 0 || peak < 0) return;
  int64_t staged = rt_dp_staging_peak_bytes(rt);
  int64_t used = peak - rss_before_plan;
  int64_t plan = printed_plan_total(rt) - rt_dp_staging_bytes(rt) + staged;
  int64_t out = used - plan;
  char a[32], b[32], c[32], d[32], st[96] = "";
  if (rt->dp)
    snprintf(st, sizeof st, " (MPI's reduction staging at its peak %s)",
             rt_fmt_bytes(d, sizeof d, staged));
  rt_say("memory: peak resident %s, %s more than before the plan | plan as run %s%s | outside "
         "the plan %s%s (%+.1f%%: OpenBLAS's buffers, MPI's and the runtime's)\n",
         rt_fmt_bytes(a, sizeof a, peak), rt_fmt_bytes(b, sizeof b, used),
         rt_fmt_bytes(c, sizeof c, plan), st, out < 0 ? "-" : "",
         rt_fmt_bytes(d, sizeof d, out < 0 ? -out : out),
         plan > 0 ? 100.0 * (double)out / (double)plan : 0.0);
}

/* Collective over the pipeline communicator (the stages' peaks). */
static void print_banner(Rt *rt) {
  const RtModel *m = rt->model;
  const RtPlan *p = &m->plan;
  char b[6][32], n[32], line[768];
  int64_t nparam = 0;
  for (int i = 0; i < m->nparams; i++)
    nparam += m->params[i].numel;
  rt_say("model %s (%s%s%s) | %s | %s parameters in %d tensors | %d threads\n", m->name, m->source,
         *m->defines ? " " : "", m->defines, RT_REAL_NAME, rt_fmt_thousands(n, sizeof n, nparam),
         m->nparams, omp_get_max_threads());
  if (rt->mesh.dp == 1)
    rt_say("batch %lld x seq %lld | global batch %lld (%lld microbatch%s) | %lld steps\n",
           (long long)m->batch, (long long)m->seq, (long long)rt->f.global_batch,
           (long long)rt->micro, rt->micro == 1 ? "" : "es", (long long)rt->f.steps);
  else
    rt_say("batch %lld x seq %lld | global batch %lld (%lld microbatch%s on each of %d replicas) "
           "| %lld steps\n",
           (long long)m->batch, (long long)m->seq, (long long)rt->f.global_batch,
           (long long)rt->micro, rt->micro == 1 ? "" : "es", rt->mesh.dp, (long long)rt->f.steps);
  /* A pipeline stage keeps the activations of every microbatch in flight
   * (its table's peak), not the plan's one slot per chunk: the total is
   * what the process allocates. */
  int64_t act = rt->exec ? rt_exec_stash_bytes(rt) : p->activations;
  /* With d > 1, MPI's copies of the gradient buckets in flight (dp.h). */
  int64_t staging = rt_dp_staging_bytes(rt);
  /* A pipeline stage's message buffers (exec.h). */
  int64_t msgs = rt->exec ? rt_exec_message_bytes(rt) : 0;
  char st[160] = "";
  int sn = 0;
  if (msgs)
    sn += snprintf(st + sn, sizeof st - (size_t)sn, " | messages %s",
                   rt_fmt_bytes(b[5], 32, msgs));
  if (staging)
    snprintf(st + sn, sizeof st - (size_t)sn, " | MPI's reduction staging up to %s",
             rt_fmt_bytes(b[5], 32, staging));
  rt_say("memory plan: weights %s | grads %s | optimizer %s | activations %s%s | temporaries %s%s "
         "| total %s\n",
         rt_fmt_bytes(b[0], 32, p->weights), rt_fmt_bytes(b[1], 32, p->grads),
         rt_fmt_bytes(b[2], 32, p->optimizer), rt_fmt_bytes(b[3], 32, act),
         rt->exec ? " (the pipeline's stash at its peak)" : "", rt_fmt_bytes(b[4], 32, p->temporaries),
         st,
         rt_fmt_bytes(b[5], 32, printed_plan_total(rt)));
  if (rt->exec) {
    rt_exec_describe(rt, line, sizeof line);
    rt_say("pipeline: %s\n", line);
  }
  if (rt->dp) {
    rt_dp_describe(rt, line, sizeof line);
    rt_say("data parallel: %s\n", line);
  }
  if (m->graphs) {
    rt_graphs_describe(rt, line, sizeof line);
    rt_say("cuda graphs: %s\n", line);
  }
  if (rt->train)
    print_data("train data", rt->f.data, rt->train, rt->f.no_shuffle ? ", in order" : ", shuffled");
  if (rt->val) print_data("val data", rt->f.val_data, rt->val, "");
  fflush(stdout);
}

static void initial_weights(Rt *rt) {
  if (rt->f.resume) {
    rt_ckpt_resume_load(rt);
    rt_say("resumed from %s at step %lld\n", rt->f.resume, (long long)rt->step);
    return;
  }
  /* Computed by the host through a view of the weights (on the CPU device
   * the weights themselves, so the peak stays within the memory plan); the
   * region's elements that no parameter covers keep allocate()'s zeros. */
  int64_t bytes = rt->model->nweights * (int64_t)sizeof(real);
  real *w = rt_dev_view_begin(rt->ctx.weights, bytes);
  rt_init_params(rt->model, w, (uint64_t)rt->f.seed);
  rt_dev_view_end(rt->ctx.weights, w, bytes, 1);
  if (rt->f.init_from) {
    rt_ckpt_init_from(rt, rt->f.init_from);
    rt_say("weights from %s\n", rt->f.init_from);
  }
}

static void save(Rt *rt) {
  rt_wd_phase("step %lld: saving a checkpoint", (long long)rt->step);
  const char *dir = rt_ckpt_save(rt);
  rt_say("saved %s (step %lld)\n", dir, (long long)rt->step);
  fflush(stdout);
}

/* One optimizer step; fills in what the logs report. */
static void train_step(Rt *rt, int64_t s, int dump, RtStepInfo *info) {
  const RtModel *m = rt->model;
  double t0 = rt_now();
  rt->skipped = 0;
  rt_wd_phase("step %lld", (long long)(s + 1));
  rt_inject_fault(s + 1);
  rt_trace_step(s);
  rt_tp_step_begin(rt);
  rt_fetch_window(rt, s);
  rt_prof_add("S data", rt_now() - t0);
  if (rt->exec) {
    /* The table's OPT_STEP runs rt_update. */
    info->loss = rt_exec_step(rt, s, dump, info);
  } else {
    info->loss = rt_window_grads(rt, rt->window, s);
    double u = rt_trace_now();
    rt_tp_step_mark(rt);
    rt_update(rt, s, dump, info);
    rt_trace_add_kind(RT_SCHED_OPT_STEP, 0, 0, u, rt_trace_now());
  }
  rt->step = s + 1;
  rt_end_window(rt);
  rt_dev_sync(); /* the step's time includes all of its work */
  double dt = rt_now() - t0 - rt->skipped;
  info->step = s + 1;
  info->steps = rt->f.steps;
  info->tokens_per_s = dt > 0 ? (double)(rt->f.global_batch * m->seq) / dt : 0;
  info->elapsed = dt;
  rt_tp_step_end(rt, s + 1);
}

/* Ends a run whose data changed under it, after the save (when --save
 * is set) of the last step that ran. The ranks that found the change
 * name the file; the others say why they stop too. */
static _Noreturn void data_stopped(Rt *rt) {
  const RtFlags *f = &rt->f;
  char kept[1024];
  if (f->save)
    snprintf(kept, sizeof kept, "the run stopped after step %lld and saved it first (%s: "
             "--resume continues from it)", (long long)rt->step, f->save);
  else
    snprintf(kept, sizeof kept, "the run stopped after step %lld, without --save: nothing was "
             "saved", (long long)rt->step);
  if (rt->data_failed)
    rt_fatal(*rt->data_err.what ? rt->data_err.what : NULL, "%s; %s", rt->data_err.msg, kept);
  rt_fatal("--data", "a data file changed under another rank (whose message names it); %s", kept);
}

static void train(Rt *rt) {
  const RtFlags *f = &rt->f;
  RtLog log = {.tokens_per_step = f->global_batch * rt->model->seq};
  rt_log_open(&log, f->log_json, f->resume ? rt->step : -1);
  int64_t first = rt->step, saved_at = -1;
  int data_stop = 0;
  rt_trace_open(rt, first);
  RtStepInfo info = {0};
  if (f->resume && first >= f->steps)
    rt_say("nothing to train: the checkpoint is at step %lld of %lld\n", (long long)first,
           (long long)f->steps);
  for (int64_t s = first; s < f->steps; s++) {
    info = (RtStepInfo){0};
    train_step(rt, s, f->dump_grads && s == first, &info);
    rt_moe_step(&info);
    rt_log_time(&log, info.elapsed);
    /* A non-finite loss with finite gradients (the update ran). */
    if (!isfinite(info.loss) && isfinite(info.grad_norm)) {
      if (f->on_nan == RT_NAN_STOP)
        rt_fatal("--on-nan", "stopped at step %lld: its loss is %g", (long long)(s + 1), info.loss);
      rt_error(NULL, "step %lld: the loss is %g but the gradients are finite: the update was "
               "applied", (long long)(s + 1), info.loss);
    }
    int last = s + 1 == f->steps;
    if (rt->val && ((f->eval_every && (s + 1) % f->eval_every == 0) || last)) {
      info.has_val = 1;
      rt_wd_phase("step %lld: validation", (long long)(s + 1));
      info.val_loss = rt_eval(rt);
    }
    if (s == first || (s + 1) % f->log_every == 0 || last) rt_log_progress(&log, &info);
    if (info.has_val) rt_say("step %lld | val loss %.4f\n", (long long)(s + 1), info.val_loss);
    rt_log_json(&log, &info);
    if (f->save && f->save_every && (s + 1) % f->save_every == 0 && !last) {
      save(rt);
      saved_at = rt->step;
    }
    /* Preemption: every rank stops after the same step, whichever got the
     * signal (one flag reduced over the world per step). */
    if (rt_tp_world_any(rt_wd_stop_requested())) {
      rt->preempted = 1;
      break;
    }
    /* A data file that changed under the run (found when the next step's
     * window was read ahead): every rank stops after this step, and the
     * run saves before it fails, so that the work since the last
     * checkpoint is kept. */
    if (rt_tp_world_any(rt->data_failed)) {
      data_stop = 1;
      break;
    }
  }
  rt_log_close(&log);
  rt_trace_close(rt);
  if (rt->nan_steps)
    rt_say("note: the updates of %lld step%s were dropped (non-finite gradients, --on-nan skip)\n",
           (long long)rt->nan_steps, rt->nan_steps == 1 ? "" : "s");
  rt_prof_report(rt->step - first);
  rt_dp_report(rt);
  rt_moe_report();
  int trained = rt->step > first;
  /* A stop right after a periodic save has nothing new to write. */
  if (f->save && (trained || !f->resume) && rt->step != saved_at) save(rt);
  if (data_stop) data_stopped(rt);
  if (rt->preempted) {
    /* The checkpoint (if any) is written: the job may go. */
    int sig = rt_wd_stop_signal();
    rt_say("stopped by %s after step %lld of %lld%s%s%s (exit status %d)\n",
           sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal on another rank",
           (long long)rt->step, (long long)f->steps, f->save ? "; saved " : "",
           f->save ? f->save : "", f->save ? ", continue with --resume it" : "",
           JOB_EXIT_PREEMPTED);
    fflush(stdout);
    return;
  }
  if (rt->val && !info.has_val) info.has_val = 1, info.val_loss = rt_eval(rt);
  if (trained) report_memory(rt);
  if (trained && info.has_val)
    rt_say("final: train loss %.4f | val loss %.4f\n", info.loss, info.val_loss);
  else if (trained)
    rt_say("final: train loss %.4f\n", info.loss);
  else if (info.has_val)
    rt_say("final: val loss %.4f\n", info.val_loss);
  fflush(stdout);
}

/* Sampling and gradient checks run the whole model on one rank's
 * memory: a pipeline stage or a replica that must talk to others cannot. */
static void check_mesh_flags(Rt *rt) {
  if (rt->mesh.pp == 1 && rt->mesh.dp == 1) return;
  if (rt->f.sample_prompt)
    rt_fatal("--sample-prompt",
             "needs a program of one pipeline stage and one data-parallel replica (this one was "
             "compiled for p=%d, d=%d); sample from the saved checkpoint with a p=1 program "
             "(compile without --pp and --dp, run it with --init-from DIR/model.safetensors "
             "--steps 0)",
             rt->mesh.pp, rt->mesh.dp);
  if (rt->f.gradcheck)
    rt_fatal("--gradcheck",
             "runs on one rank: compile the model without --tp, --pp and --dp (this program was "
             "compiled for p=%d, d=%d)",
             rt->mesh.pp, rt->mesh.dp);
}

int rt_main(const RtModel *model, int argc, char **argv) {
  static Rt state;
  Rt *rt = &state;
  rt->model = model;
  rt->lock_fd = -1;
  rt_wd_signals();
  rt_wd_start(argc > 0 ? argv[0] : NULL);
  check_model(model);
  rt_flags_parse(&rt->f, argc, argv, argc > 0 ? argv[0] : "rank0");
  rt_quiet = (int)rt->f.quiet;
  rt_deterministic = (int)rt->f.deterministic;
  rt_wd_timeout(rt->f.timeout);
  if (rt_tp_uses_mpi(rt)) check_address_space(0, omp_get_max_threads(), 1);
  rt_tp_init(rt, &argc, &argv);
  rt_wd_place(rt->coord.tp, rt->coord.pp, rt->coord.dp);
  check_mesh_flags(rt);
  if (rt->f.init_from && rt->f.resume)
    rt_fatal("--init-from", "cannot be combined with --resume (which loads weights too)");
  if (rt->f.init_map && !rt->f.init_from) rt_fatal("--init-map", "renames what --init-from reads: give both");
  new_run_id(rt);
  if (rt->f.resume)
    rt_ckpt_resume_open(rt);
  else
    rt_rng_seed(&rt->rng, rt_key2((uint64_t)rt->f.seed, 0x73616d706c65 /* "sample" */));
  check_flags(&rt->f);
  check_outputs(&rt->f);
  rt_ckpt_check_save(rt);
  open_data(rt);
  allocate(rt);
  rt_dp_init(rt);
  rt_exec_init(rt);
  print_banner(rt);
  initial_weights(rt);
  if (rt->f.gradcheck) return rt_gradcheck(rt);
  rt_wd_graceful(1);
  train(rt);
  rt_wd_graceful(0);
  if (rt->f.sample_prompt && !rt->preempted) rt_sample(rt);
  rt_data_close(rt->train);
  rt_data_close(rt->val);
  rt_graphs_finish(rt);
  rt_exec_free(rt);
  rt_dp_free(rt);
  rt_end_window(rt);
  rt_dev_stage_free(rt->stage);
  free(rt->window);
  free(rt->norm_partials);
  rt_dev_free(rt->mem);
  rt_tp_finalize(rt);
  int status = rt->preempted ? JOB_EXIT_PREEMPTED : 0;
  rt_wd_finish(status);
  return status;
}
