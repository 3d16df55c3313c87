/* rt_main: the flags, the one allocation of the memory plan, and the
 * training loop of a rank program. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "gradcheck.h"
#include "log.h"
#include "optim.h"
#include "rt.h"
#include "sample.h"
#include "tp.h"
#include "util.h"

/* Elements per partial sum of the gradient norm (see rt_grad_norm). */
#define NORM_CHUNK 65536

#define ALIGN64(x) (((x) + 63) / 64 * 64)

/* The per-op timer (log.c): a no-op unless the program was built with
 * -DSHARD_PROFILE. */
void rt_prof_add(const char *what, double seconds);
void rt_prof_report(int64_t steps);

/* The tables come from the compiler; a mismatch here is its bug, but a
 * message beats writing outside the plan. */
static void check_model(const RtModel *m) {
  const char *what = m->name;
  int64_t region = m->plan.activations + m->plan.temporaries,
          wbytes = m->nweights * (int64_t)sizeof(real);
  if (m->batch <= 0 || m->seq <= 0 || m->vocab <= 0 || !m->forward || !m->backward)
    rt_fatal(what, "internal error: bad model tables (batch, seq, vocab or functions)");
  if (m->plan.weights < wbytes || m->plan.grads < wbytes)
    rt_fatal(what, "internal error: the memory plan holds fewer bytes than the %lld weights",
             (long long)m->nweights);
  for (int p = 0; p < m->nparams; p++) {
    const RtParam *q = &m->params[p];
    int64_t n = 1;
    for (int d = 0; d < q->rank; d++)
      n *= q->shape[d];
    if (q->rank < 0 || q->rank > RT_MAX_RANK || n != q->numel || q->offset < 0 ||
        q->offset + q->numel > m->nweights)
      rt_fatal(what, "internal error: parameter %s lies outside the weights", q->name);
  }
  for (int i = 0; i < m->ninputs; i++) {
    const RtInput *in = &m->inputs[i];
    if (in->numel != m->batch * m->seq || in->offset_bytes < 0 ||
        in->offset_bytes + in->numel * 4 > region)
      rt_fatal(what, "internal error: input %s is not [batch, seq] inside the activations",
               in->name);
  }
  int64_t logits = m->batch * m->seq * rt_logits_cols(m) * (int64_t)sizeof(real);
  if (m->loss_offset < 0 || m->loss_offset + (int64_t)sizeof(real) > region ||
      m->dloss_offset < 0 || m->dloss_offset + (int64_t)sizeof(real) > region ||
      m->logits_offset < 0 || m->logits_offset + logits > region)
    rt_fatal(what, "internal error: loss, d_loss or logits lie outside the activations");
}

/* Cheap checks of flag combinations, all reported before exiting. */
static void check_flags(const RtFlags *f) {
  int errors = 0;
  if (f->save_every > 0 && !f->save) rt_error("--save-every", "needs --save DIR"), errors++;
  if (f->eval_every > 0 && !f->val_data) rt_error("--eval-every", "needs --val-data"), errors++;
  if (f->steps > 0 && !f->data && !f->gradcheck)
    rt_error("--steps", "training needs --data (or --steps 0)"), errors++;
  if (f->dump_grads && f->steps == 0) rt_error("--dump-grads", "needs a step to run"), errors++;
  if (errors) exit(1);
}

static void open_data(Rt *rt) {
  const RtModel *m = rt->model;
  RtFlags *f = &rt->f;
  if (f->global_batch == 0) f->global_batch = m->batch;
  if (f->global_batch % m->batch)
    rt_fatal("--global-batch", "%lld is not a multiple of the model's batch %lld",
             (long long)f->global_batch, (long long)m->batch);
  rt->micro = f->global_batch / m->batch;
  rt->rows = m->batch * m->seq;
  if (f->data) rt->train = rt_data_open(f->data, f->global_batch, m->seq, m->vocab);
  if (f->val_data) rt->val = rt_data_open(f->val_data, m->batch, m->seq, m->vocab);
  if (f->steps < 0) f->steps = rt->train ? rt_data_windows(rt->train) : 0;
}

/* The one allocation: weights, gradients, optimizer state, activations and
 * temporaries, each at a 64-byte boundary, all zero (and touched, so the
 * resident size shows the plan from the start). */
static void allocate(Rt *rt) {
  const RtModel *m = rt->model;
  const RtPlan *p = &m->plan;
  int64_t w = ALIGN64(p->weights), g = ALIGN64(p->grads), o = ALIGN64(p->optimizer);
  int64_t total = w + g + o + ALIGN64(p->activations + p->temporaries);
  void *mem = NULL;
  if (posix_memalign(&mem, 64, (size_t)total) != 0)
    rt_fatal(NULL, "out of memory allocating the memory plan (%lld bytes)", (long long)total);
  memset(mem, 0, (size_t)total);
  rt->mem = mem;
  rt->ctx.model = m;
  rt->ctx.weights = (real *)rt->mem;
  rt->ctx.grads = (real *)(rt->mem + w);
  rt->ctx.activations = rt->mem + w + g + o;
  rt->ctx.training = 1;
  if (rt->f.optimizer == RT_OPT_ADAMW) {
    int64_t need = 2 * m->nweights * (int64_t)sizeof(real);
    if (p->optimizer < need)
      rt_fatal("--optimizer",
               "AdamW needs %lld bytes of state, the memory plan has %lld "
               "(use --optimizer sgd)",
               (long long)need, (long long)p->optimizer);
    rt->adam_m = (real *)(rt->mem + w + g);
    rt->adam_v = rt->adam_m + m->nweights;
  }
  rt->window = rt_xmalloc((size_t)(rt->f.global_batch * m->seq + 1) * sizeof *rt->window);
  rt->norm_chunks = (m->nweights + NORM_CHUNK - 1) / NORM_CHUNK;
  rt->norm_partials = rt_xcalloc((size_t)rt->norm_chunks + 1, sizeof *rt->norm_partials);
}

static void print_data(const char *what, const char *pattern, RtData *d, const char *order) {
  char tok[32];
  rt_say("%s: %s | %d shard%s, %s tokens, %lld windows%s\n", what, pattern, rt_data_shards(d),
         rt_data_shards(d) == 1 ? "" : "s", rt_fmt_thousands(tok, sizeof tok, rt_data_tokens(d)),
         (long long)rt_data_windows(d), order);
}

static void print_banner(Rt *rt) {
  const RtModel *m = rt->model;
  const RtPlan *p = &m->plan;
  char b[6][32], n[32];
  int64_t nparam = 0;
  for (int i = 0; i < m->nparams; i++)
    nparam += m->params[i].numel;
  rt_say("model %s (%s%s%s) | %s | %s parameters in %d tensors | %d threads\n", m->name, m->source,
         *m->defines ? " " : "", m->defines, RT_REAL_NAME, rt_fmt_thousands(n, sizeof n, nparam),
         m->nparams, omp_get_max_threads());
  rt_say("batch %lld x seq %lld | global batch %lld (%lld microbatch%s) | %lld steps\n",
         (long long)m->batch, (long long)m->seq, (long long)rt->f.global_batch,
         (long long)rt->micro, rt->micro == 1 ? "" : "es", (long long)rt->f.steps);
  rt_say("memory plan: weights %s | grads %s | optimizer %s | activations %s | temporaries %s | "
         "total %s\n",
         rt_fmt_bytes(b[0], 32, p->weights), rt_fmt_bytes(b[1], 32, p->grads),
         rt_fmt_bytes(b[2], 32, p->optimizer), rt_fmt_bytes(b[3], 32, p->activations),
         rt_fmt_bytes(b[4], 32, p->temporaries),
         rt_fmt_bytes(b[5], 32,
                      p->weights + p->grads + p->optimizer + p->activations + p->temporaries));
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
  rt_init_params(rt->model, rt->ctx.weights, (uint64_t)rt->f.seed);
  if (rt->f.init_from) {
    rt_ckpt_init_from(rt, rt->f.init_from);
    rt_say("weights from %s\n", rt->f.init_from);
  }
}

static void save(Rt *rt) {
  rt_ckpt_save(rt);
  rt_say("saved %s (step %lld)\n", rt->f.save, (long long)rt->step);
  fflush(stdout);
}

/* One optimizer step; fills in what the logs report. */
static void train_step(Rt *rt, int64_t s, int dump, RtStepInfo *info) {
  const RtModel *m = rt->model;
  double t0 = rt_now(), skipped = 0;
  rt_tp_step_begin(rt);
  rt_fetch_window(rt, s);
  rt_prof_add("S data", rt_now() - t0);
  info->loss = rt_window_grads(rt, rt->window, s);
  rt_tp_step_mark(rt);
  if (dump) {
    double t = rt_now();
    rt_ckpt_dump_grads(rt, rt->f.dump_grads);
    skipped = rt_now() - t;
  }
  double t1 = rt_now();
  info->grad_norm = rt_tp_size() > 1 ? rt_tp_grad_norm(rt)
                                      : rt_grad_norm(rt->ctx.grads, m->nweights, NORM_CHUNK,
                                                     rt->norm_partials);
  double scale = rt_clip_scale(info->grad_norm, rt->f.clip);
  info->lr = rt_lr_at(&rt->f, s);
  double t2 = rt_now();
  rt_prof_add("S grad_norm", t2 - t1);
  if (rt->f.optimizer == RT_OPT_ADAMW)
    rt_adamw_step(m, rt->ctx.weights, rt->ctx.grads, rt->adam_m, rt->adam_v, s + 1, info->lr, scale,
                  &rt->f);
  else
    rt_sgd_step(m, rt->ctx.weights, rt->ctx.grads, info->lr, scale, &rt->f);
  rt_prof_add("S optimizer", rt_now() - t2);
  rt->step = s + 1;
  double dt = rt_now() - t0 - skipped;
  info->step = s + 1;
  info->steps = rt->f.steps;
  info->tokens_per_s = dt > 0 ? (double)(rt->f.global_batch * m->seq) / dt : 0;
  info->elapsed = dt;
  rt_tp_step_end(rt, s + 1);
}

static void train(Rt *rt) {
  const RtFlags *f = &rt->f;
  RtLog log = {.tokens_per_step = f->global_batch * rt->model->seq};
  rt_log_open(&log, f->log_json, f->resume ? rt->step : -1);
  int64_t first = rt->step;
  RtStepInfo info = {0};
  if (f->resume && first >= f->steps)
    rt_say("nothing to train: the checkpoint is at step %lld of %lld\n", (long long)first,
           (long long)f->steps);
  for (int64_t s = first; s < f->steps; s++) {
    info = (RtStepInfo){0};
    train_step(rt, s, f->dump_grads && s == first, &info);
    rt_log_time(&log, info.elapsed);
    int last = s + 1 == f->steps;
    if (rt->val && ((f->eval_every && (s + 1) % f->eval_every == 0) || last)) {
      info.has_val = 1;
      info.val_loss = rt_eval(rt);
    }
    if (s == first || (s + 1) % f->log_every == 0 || last) rt_log_progress(&log, &info);
    if (info.has_val) rt_say("step %lld | val loss %.4f\n", (long long)(s + 1), info.val_loss);
    rt_log_json(&log, &info);
    if (f->save && f->save_every && (s + 1) % f->save_every == 0 && !last) save(rt);
  }
  rt_log_close(&log);
  rt_prof_report(rt->step - first);
  int trained = rt->step > first;
  if (f->save && (trained || !f->resume)) save(rt);
  if (rt->val && !info.has_val) info.has_val = 1, info.val_loss = rt_eval(rt);
  if (trained && info.has_val)
    rt_say("final: train loss %.4f | val loss %.4f\n", info.loss, info.val_loss);
  else if (trained)
    rt_say("final: train loss %.4f\n", info.loss);
  else if (info.has_val)
    rt_say("final: val loss %.4f\n", info.val_loss);
  fflush(stdout);
}

int rt_main(const RtModel *model, int argc, char **argv) {
  static Rt state;
  Rt *rt = &state;
  rt->model = model;
  check_model(model);
  rt_flags_parse(&rt->f, argc, argv, argc > 0 ? argv[0] : "rank0");
  rt_quiet = (int)rt->f.quiet;
  rt_tp_init(rt, &argc, &argv);
  if (rt->f.init_from && rt->f.resume)
    rt_fatal("--init-from", "cannot be combined with --resume (which loads weights too)");
  if (rt->f.resume)
    rt_ckpt_resume_open(rt);
  else
    rt_rng_seed(&rt->rng, rt_key2((uint64_t)rt->f.seed, 0x73616d706c65 /* "sample" */));
  check_flags(&rt->f);
  open_data(rt);
  allocate(rt);
  print_banner(rt);
  initial_weights(rt);
  if (rt->f.gradcheck) return rt_gradcheck(rt);
  train(rt);
  if (rt->f.sample_prompt) rt_sample(rt);
  rt_data_close(rt->train);
  rt_data_close(rt->val);
  free(rt->window);
  free(rt->norm_partials);
  free(rt->mem);
  rt_tp_finalize(rt);
  return 0;
}
