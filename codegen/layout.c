/* The layout of the program set (layout.h): built once, from the program
 * the passes produced (its chunks, their memory plans and the schedule),
 * before any file is printed. */
#include <stdint.h>
#include <string.h>

#include "../passes/gemm_epilogue.h"
#include "layout.h"

/* ------------------------------------------------------------ the model */

/* The real vocabulary of a loss over `cols` columns of logits: `valid`
 * when padding is masked, else the columns of every rank together. */
static int64_t real_vocab(const IrGraph *g, const IrNode *loss, int64_t cols) {
  int64_t valid = ir_attr_has(loss, "valid") ? ir_attr_int(loss, "valid") : 0;
  if (valid > 0) return valid;
  bool vp = ir_attr_has(loss, "vocab_parallel") && ir_attr_int(loss, "vocab_parallel");
  return vp ? cols * cg_mesh(g, IR_AXIS_TENSOR) : cols;
}

/* The cross_entropy of the loss: the loss itself, or a term of a sum (a
 * routed model adds its load-balancing loss). NULL when there is none. */
static const IrNode *loss_cross_entropy(const IrValue *v) {
  if (v->kind != IR_VAL_NODE) return NULL;
  const IrNode *n = v->def;
  if (n->op == IR_OP_CROSS_ENTROPY) return n;
  if (n->op != IR_OP_ADD) return NULL;
  const IrNode *a = loss_cross_entropy(n->in[0]);
  return a ? a : loss_cross_entropy(n->in[1]);
}

/* The loss, logits, targets and inputs the runtime drives, checked
 * against what the target can run. */
static bool model_info(IrGraph *g, const CgOptions *o, const CgTarget *t, CgModelInfo *mi) {
  const char *tn = t->name;
  bool ok = true;
  memset(mi, 0, sizeof *mi);
  for (int i = 0; i < g->outputs.len; i++)
    if (!mi->loss || strcmp(g->output_names.items[i], "loss") == 0) mi->loss = g->outputs.items[i];
  const IrNode *ce = mi->loss ? loss_cross_entropy(mi->loss) : NULL;
  if (!ce || mi->loss->type.rank != 0) {
    IrLoc loc = mi->loss && mi->loss->kind == IR_VAL_NODE ? mi->loss->def->loc
                                                          : (IrLoc){o->model_path, 0, 0};
    ir_error(loc, "%s target: the model's output `loss` must be a cross_entropy", tn);
    ok = false;
  } else {
    mi->logits = ce->in[0];
    mi->targets = ce->in[1];
    mi->logits_cols = mi->logits->type.shape[mi->logits->type.rank - 1];
    mi->vocab = real_vocab(g, ce, mi->logits_cols);
    if (mi->targets->kind != IR_VAL_INPUT || mi->targets->type.rank != 2) {
      ir_error(ce->loc, "%s target: the targets of the loss must be an input [batch, seq]",
               tn);
      ok = false;
    } else {
      mi->batch = mi->targets->type.shape[0];
      mi->seq = mi->targets->type.shape[1];
    }
  }
  for (int i = 0; i < g->inputs.len; i++) {
    IrValue *in = g->inputs.items[i];
    if (strcmp(in->name, "d_loss") == 0) {
      mi->dloss = in;
      continue;
    }
    if (in->type.dtype != IR_I32 || in->type.rank != 2 ||
        (mi->seq && (in->type.shape[0] != mi->batch || in->type.shape[1] != mi->seq))) {
      ir_error(in->loc, "%s target: input %s must be i32[batch, seq] like the targets of the loss",
               tn, in->name);
      ok = false;
    }
  }
  return ok;
}

/* ----------------------------------------------------------- placement */

static int64_t round_up(int64_t x, int64_t q) { return (x + q - 1) / q * q; }

/* The data-parallel buckets of chunk c (d > 1): its weights cut, from the
 * last parameter back (the order in which the backward completes them),
 * into runs of at least bucket_elems, each cut at a multiple of `quantum`
 * elements (so that with ZeRO-1 every bucket splits evenly over d); a
 * parameter cut in two belongs to both buckets. Each bucket is ready after
 * the node that finalises the last gradient of a parameter it overlaps. */
static int make_buckets(CgChunk *c, int64_t quantum, int64_t bucket_elems, IrPtrMap *tied,
                        CgBucket *out) {
  IrGraph *g = c->g;
  int np = g->params.len, rb = c->plan->real_bytes;
  if (np == 0 || c->nweights == 0) return 0;
  IrPtrMap index = {0};
  for (int i = 0; i < g->nodes.len; i++) ir_ptrmap_put(&index, g->nodes.items[i], (void *)(intptr_t)(i + 1));
  int n = 0;
  int64_t hi = c->nweights, acc = 0;
  /* Expert parameters (--ep) are reduced over another group than the
   * rest: a bucket holds either kind alone, cut where the kind changes
   * (at the start of the later parameter, which the memory plan aligns
   * to d lines, so that with ZeRO-1 both split evenly). */
  bool expert = np > 0 && cg_expert_param(g->params.items[np - 1]);
  for (int i = np - 1; i >= 0; i--) {
    const IrValue *v = g->params.items[i];
    if (cg_expert_param(v) != expert) {
      const IrValue *next = g->params.items[i + 1];
      int64_t at = pass_memplan_find(c->plan, next)->offset / rb;
      if (at % quantum) die("expert parameter %s at %lld, not a multiple of %lld", next->name,
                            (long long)at, (long long)quantum);
      if (at < hi) out[n++] = (CgBucket){.chunk = c->index, .offset = at, .numel = hi - at,
                                         .expert = expert};
      hi = at, acc = 0, expert = !expert;
    }
    acc += ir_type_numel(&v->type);
    int64_t cut = pass_memplan_find(c->plan, v)->offset / rb / quantum * quantum;
    if (acc >= bucket_elems && i > 0 && cut > 0 && cut < hi &&
        cg_expert_param(g->params.items[i - 1]) == expert) {
      out[n++] = (CgBucket){.chunk = c->index, .offset = cut, .numel = hi - cut, .expert = expert};
      hi = cut, acc = 0;
    }
  }
  out[n++] = (CgBucket){.chunk = c->index, .offset = 0, .numel = hi, .expert = expert};
  for (int i = 0; i < n / 2; i++) {
    CgBucket t = out[i];
    out[i] = out[n - 1 - i], out[n - 1 - i] = t;
  }
  for (int b = 0; b < n; b++) {
    CgBucket *k = &out[b];
    k->ready = -1;
    for (int i = 0; i < np; i++) {
      const IrValue *v = g->params.items[i];
      int64_t lo = pass_memplan_find(c->plan, v)->offset / rb, end = lo + ir_type_numel(&v->type);
      if (end <= k->offset || lo >= k->offset + k->numel) continue;
      k->tied |= v->tied || ir_ptrmap_get(tied, v);
      const IrValue *gr = v->grad;
      if (gr && gr->kind == IR_VAL_NODE && gr->def->phase == IR_PHASE_BACKWARD) {
        int at = (int)(intptr_t)ir_ptrmap_get(&index, gr->def) - 1;
        if (at > k->ready) k->ready = at;
      }
    }
    k->offset += c->weight_base;
  }
  ir_ptrmap_free(&index);
  return n;
}

/* Places stage r's chunks in its weights, makes its buckets and sums its
 * memory plan. */
static void lay_out(CgProgram *pr, CgChunk *ch, int nch, const CgOptions *o, int d,
                    IrPtrMap *tied) {
  int rb = ch[0].plan->real_bytes;
  int64_t quantum = (64 / rb) * (o->zero ? d : 1), base = 0;
  double mb = o->bucket_mb > 0 ? o->bucket_mb : 25;
  int64_t bucket_elems = (int64_t)(mb * 1024 * 1024 / rb);
  if (bucket_elems < 1) bucket_elems = 1;
  int max_buckets = 0;
  for (int c = 0; c < nch; c++) max_buckets += ch[c].g->params.len + 1;
  pr->buckets = ir_alloc(sizeof(CgBucket) * (size_t)(max_buckets + 1));
  memset(pr->regions, 0, sizeof pr->regions);
  for (int c = 0; c < nch; c++) {
    ch[c].weight_base = base;
    ch[c].nweights = d > 1 ? round_up(ch[c].plan->nweights, quantum) : ch[c].plan->nweights;
    base += ch[c].nweights;
    if (d > 1) {
      ch[c].buckets = pr->buckets + pr->nbuckets;
      ch[c].first_bucket = pr->nbuckets;
      ch[c].nbuckets = make_buckets(&ch[c], quantum, bucket_elems, tied, pr->buckets + pr->nbuckets);
      pr->nbuckets += ch[c].nbuckets;
    }
    pr->regions[3] += ch[c].plan->activations;
    if (ch[c].plan->temporaries > pr->regions[4]) pr->regions[4] = ch[c].plan->temporaries;
  }
  int64_t state = base;
  if (o->zero && d > 1) {
    /* An expert bucket splits over the d / E ranks holding the same experts. */
    int E = cg_chunks_expert_ranks(ch, nch);
    state = 0;
    for (int b = 0; b < pr->nbuckets; b++)
      state += pr->buckets[b].numel / (pr->buckets[b].expert ? d / E : d);
  }
  pr->nweights = base;
  pr->regions[0] = pr->regions[1] = base * rb;
  pr->regions[2] = 2 * state * rb;
}


/* ------------------------------------------------------------- options */

/* The options that no pass has checked: an output folder, a real type the
 * target builds, a pipeline for --vpp, replicas for ZeRO-1. */
static bool check_options(const CgLayout *l) {
  const CgOptions *o = l->opt;
  const char *tn = l->target->name;
  if (!o->out_dir || !*o->out_dir) {
    ir_error(ir_cmdline, "no output directory for the %s target (-o DIR)", tn);
    return false;
  }
  if (o->dtype != IR_F32 && o->dtype != IR_F64) {
    ir_error(ir_cmdline, "the %s target builds f32 or f64 programs, not %s", tn,
             ir_dtype_name(o->dtype));
    return false;
  }
  if (l->pp == 1 && l->vpp > 1) {
    ir_error(ir_cmdline, "--vpp %d needs pipeline stages (--pp > 1): chunks of one stage would run one "
             "after the other", l->vpp);
    return false;
  }
  if (o->zero && l->dp == 1) {
    ir_error(ir_cmdline, "--zero 1 shards the optimizer over data-parallel replicas: it needs --dp > 1");
    return false;
  }
  return true;
}

/* ------------------------------------------------------- chunks, schedule */

/* Why a program lacks what a pass makes: the target's pipeline (or a
 * --passes without the pass) did not run it. */
static void missing(const char *what, const char *pass) {
  ir_error(ir_cmdline, "the rank programs need %s: the pipeline must run the %s pass (`shardc "
           "passes` lists each target's pipeline)", what, pass);
}

/* One chunk per virtual stage, the program's, each with the memory plan
 * the memplan pass made for the program's real type and the target's
 * policy. */
static bool make_chunks(CgLayout *l) {
  int nv = l->pp * l->vpp, n;
  const PassChunk *pc = pass_program_chunks(l->prog, &n);
  if (n != nv) {
    missing(ir_fmt("one model chunk for each of the %d virtual stages", nv), "pp-split");
    return false;
  }
  CgChunk *all = l->chunks = ir_alloc(sizeof(CgChunk) * (size_t)nv);
  memset(all, 0, sizeof(CgChunk) * (size_t)nv);
  l->nchunks = nv;
  for (int k = 0; k < nv; k++) {
    all[k].g = pc[k].g;
    all[k].recv_act = pc[k].recv_act, all[k].send_act = pc[k].send_act;
    all[k].recv_grad = pc[k].recv_grad, all[k].send_grad = pc[k].send_grad;
    all[k].plan = pc[k].g->memplan;
    if (!pass_memplan_made_for(all[k].plan, l->real_bytes, &l->policy) ||
        all[k].plan->nnodes != pc[k].g->nodes.len) {
      missing(ir_fmt("a memory plan of every chunk for %s reals with %d threads%s",
                     l->real_bytes == 8 ? "f64" : "f32", l->policy.threads,
                     l->policy.low_bytes ? " and bf16 values" : ""), "memplan");
      return false;
    }
    if (!l->target->gemm_epilogues) continue;
    const PassEpilogues *ep = k < l->prog->nepilogues ? &l->prog->epilogues[k] : NULL;
    if (!ep || ep->g != all[k].g || ep->plan != all[k].plan) {
      missing("the GEMM epilogues of every chunk, chosen on its memory plan", "gemm-epilogue");
      return false;
    }
    all[k].epilogues = ep;
  }
  return true;
}

/* The schedule's action tables (p > 1), from the schedule pass. */
static bool take_schedule(CgLayout *l) {
  const RtSchedule *s = l->prog->schedule;
  if (!s || s->pp != l->pp) {
    missing(ir_fmt("the action tables of the %d pipeline stages", l->pp), "schedule");
    return false;
  }
  for (int r = 0; r < l->pp; r++) {
    l->programs[r].table = &s->stages[r];
    l->programs[r].schedule = s->name;
    l->programs[r].microbatches = l->prog->microbatches;
  }
  return true;
}

/* Stage r's program: its chunks, placed in its weights, with its buckets. */
static void make_program(CgLayout *l, int r) {
  int p = l->pp, v = l->vpp;
  CgProgram *pr = &l->programs[r];
  pr->chunks = ir_alloc(sizeof(CgChunk) * (size_t)v);
  pr->nchunks = v;
  for (int c = 0; c < v; c++) {
    int vs = rt_vstage(p, l->g->pp_vshape, r, c);
    pr->chunks[c] = l->chunks[vs];
    pr->chunks[c].vstage = vs, pr->chunks[c].index = c;
  }
  pr->stage = r;
  pr->name = p > 1 ? ir_fmt("stage%d", r) : "rank0";
  pr->tied = &l->tied;
  lay_out(pr, pr->chunks, v, l->opt, l->dp, &l->tied);
}

/* The layout's invariants: each program's chunks tile its weights in
 * order, and its buckets tile each chunk's weights in order. */
static void verify(const CgLayout *l) {
  for (int r = 0; r < l->nprograms; r++) {
    const CgProgram *pr = &l->programs[r];
    int64_t base = 0;
    int b = 0;
    for (int c = 0; c < pr->nchunks; c++) {
      const CgChunk *ch = &pr->chunks[c];
      if (ch->weight_base != base || ch->nweights < ch->plan->nweights)
        die("layout: chunk %d of %s is not where its weights are", c, pr->name);
      int64_t at = base;
      for (int k = 0; k < ch->nbuckets; k++, b++)
        if (&ch->buckets[k] != &pr->buckets[b] || ch->buckets[k].offset != at ||
            (at += ch->buckets[k].numel) > base + ch->nweights)
          die("layout: bucket %d of %s does not follow the one before it", b, pr->name);
      if (ch->nbuckets && at != base + ch->nweights)
        die("layout: the buckets of chunk %d of %s do not cover its weights", c, pr->name);
      base += ch->nweights;
    }
    if (base != pr->nweights || b != pr->nbuckets) die("layout: %s's weights do not add up", pr->name);
  }
}

CgLayout *cg_layout_build(PassProgram *prog, const CgOptions *o, const CgTarget *t) {
  CgLayout *l = ir_alloc(sizeof *l);
  memset(l, 0, sizeof *l);
  IrGraph *g = prog->g;
  l->prog = prog, l->g = g, l->opt = o, l->target = t;
  l->real_bytes = o->dtype == IR_F64 ? 8 : 4;
  l->policy = pass_memplan_policy(t->memplan, o->threads, o->bf16 ? 2 : 0);
  l->tp = cg_mesh(g, IR_AXIS_TENSOR), l->pp = cg_mesh(g, IR_AXIS_PIPELINE);
  l->dp = cg_mesh(g, IR_AXIS_DATA), l->vpp = g->vpp > 1 ? g->vpp : 1;
  if (!check_options(l) || !model_info(g, o, t, &l->model)) return NULL;
  for (int i = 0; i < g->params.len; i++) {
    IrValue *prm = g->params.items[i];
    if (prm->tied) ir_ptrmap_put(&l->tied, prm->tied, prm);
  }
  l->nprograms = l->pp;
  l->programs = ir_alloc(sizeof(CgProgram) * (size_t)l->pp);
  memset(l->programs, 0, sizeof(CgProgram) * (size_t)l->pp);
  if (!make_chunks(l) || (l->pp > 1 && !take_schedule(l))) {
    cg_layout_free(l);
    return NULL;
  }
  for (int r = 0; r < l->pp; r++) make_program(l, r);
  verify(l);
  return l;
}

void cg_layout_free(CgLayout *l) {
  if (!l) return;
  ir_ptrmap_free(&l->tied);
}
