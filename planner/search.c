/* Configuration search: every (t, p, v, b, recomputation, sequence
 * parallelism, ZeRO-1, and a routed model's ep) for a GPU count and a global batch, simulated and
 * ranked by step time, keeping what fits in the device's memory.
 *
 * The cost model depends on (t, sequence parallelism, b) only, so each of
 * those is costed once and every (p, v) replayed with it. Recomputation
 * and ZeRO-1 change no stash, so one replay gives the memory of all six
 * variants; the least recomputation that fits (without ZeRO-1, then with
 * it) is replayed again for its time. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

const char *const pl_recompute_names[] = {"none", "selective", "full"};
const char *const pl_reject_names[PL_NREJECTS] = {
    "the tensor group would span nodes", "divisibility", "too few layers",
    "the schedule refuses (p, v, m)", "memory"};

static const int microbatch_sizes[] = {1, 2, 4, 8};
static const int chunk_counts[] = {1, 2, 4, 8};

typedef struct Search {
  PlLoadFn load;
  void *ctx;
  const PlHw *hw;
  int gpus, batch;
  double limit; /* bytes per GPU */
  PlDpOverlap overlap;
  int ep;       /* the expert ranks asked for (0: every ep the model allows) */
  PlSearch *out;
  int cap, tried_cap;
} Search;

static void reject(Search *S, PlReject why, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reject(Search *S, PlReject why, const char *fmt, ...) {
  if (S->out->rejected[why]++ > 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(S->out->example[why], sizeof S->out->example[why], fmt, ap);
  va_end(ap);
}

static void push(PlCandidate **list, int *n, int *cap, PlCandidate c) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 256;
    *list = realloc(*list, sizeof(PlCandidate) * (size_t)*cap);
    if (!*list) die("out of memory in the configuration search");
  }
  (*list)[(*n)++] = c;
}

static PlCandidate candidate(const Search *S, const PlConfig *c, const PlResult *r) {
  return (PlCandidate){*c, r->step_time, r->tflops_per_gpu, r->mfu, r->memory_max,
                       r->memory_max <= S->limit};
}

static void keep(Search *S, const PlConfig *c, const PlResult *r) {
  push(&S->out->configs, &S->out->n, &S->cap, candidate(S, c, r));
}

/* The most memory any stage of r would need with c's recomputation and
 * ZeRO-1. */
static double memory_with(const PlModel *m, const PlConfig *c, const PlHw *hw,
                          const PlResult *r) {
  double most = 0;
  for (int i = 0; i < r->nstages; i++) {
    PlStage st = r->stages[i];
    pl_stage_memory(m, c, hw, &st);
    if (st.total > most) most = st.total;
  }
  return most;
}

static bool replay(Search *S, const PlModel *m, const PlConfig *c, PlResult *r) {
  char *error = NULL;
  S->out->simulated++;
  if (pl_simulate(m, c, S->hw, r, &error)) {
    push(&S->out->tried, &S->out->ntried, &S->tried_cap, candidate(S, c, r));
    return true;
  }
  free(error);
  return false;
}

/* One (t, SP, b, p, v): replays it once, then keeps the fastest-looking
 * variant that fits, for each ZeRO setting. */
static void try_layout(Search *S, const PlModel *m, PlConfig c) {
  PlResult first;
  if (!replay(S, m, &c, &first)) {
    reject(S, PL_REJ_SCHEDULE, "t=%d p=%d v=%d m=%d", c.tp, c.pp, c.vpp,
           c.global_batch / (c.microbatch * c.dp));
    return;
  }
  bool fits = false;
  for (int zero = 0; zero <= (c.dp > 1 ? 1 : 0); zero++)
    for (int rc = PL_RECOMPUTE_NONE; rc <= PL_RECOMPUTE_FULL; rc++) {
      PlConfig v = c;
      v.zero = zero, v.recompute = (PlRecompute)rc;
      if (memory_with(m, &v, S->hw, &first) > S->limit) continue;
      PlResult r;
      if (zero == 0 && rc == PL_RECOMPUTE_NONE) keep(S, &v, &first);
      else if (replay(S, m, &v, &r)) keep(S, &v, &r), pl_result_free(&r);
      fits = true;
      break;
    }
  if (!fits)
    reject(S, PL_REJ_MEMORY, "t=%d p=%d d=%d v=%d%s b=%d: %.1f GiB with full recomputation and "
           "ZeRO-1, limit %.1f GiB", c.tp, c.pp, c.dp, c.vpp,
           c.ep > 1 ? ir_fmt(" ep=%d", c.ep) : "", c.microbatch,
           memory_with(m, &(PlConfig){.tp = c.tp, .pp = c.pp, .dp = c.dp, .vpp = c.vpp, .ep = c.ep,
                                      .sequence_parallel = c.sequence_parallel, .zero = 1,
                                      .recompute = PL_RECOMPUTE_FULL}, S->hw, &first) / 1073741824.0,
           S->limit / 1073741824.0);
  pl_result_free(&first);
}

/* Every p and v for one costed (t, SP, b, ep): the d that ep divides. */
static void try_pipelines(Search *S, const PlModel *m, int t, bool sp, int b, int ep) {
  for (int p = 1; p <= S->gpus / t; p++) {
    if ((S->gpus / t) % p) continue;
    int d = S->gpus / (t * p);
    if (d % ep) continue;
    if (S->batch % (b * d)) {
      reject(S, PL_REJ_DIVISIBLE, "B=%d is not a multiple of b x d = %d x %d", S->batch, b, d);
      continue;
    }
    for (size_t vi = 0; vi < sizeof chunk_counts / sizeof chunk_counts[0]; vi++) {
      int v = chunk_counts[vi];
      if (v > 1 && p == 1) break; /* chunks of one stage are one chunk */
      if (p * v > m->layers) {
        reject(S, PL_REJ_LAYERS, "p x v = %d x %d virtual stages for %d layers", p, v, m->layers);
        break;
      }
      PlConfig c = {.tp = t, .pp = p, .dp = d, .vpp = v, .microbatch = b, .global_batch = S->batch,
                    .sequence_parallel = sp, .dp_overlap = S->overlap, .ep = ep};
      try_layout(S, m, c);
    }
  }
}

static int faster(const void *a, const void *b) {
  double x = ((const PlCandidate *)a)->step_time, y = ((const PlCandidate *)b)->step_time;
  return x < y ? -1 : x > y;
}

/* Costs one (t, SP, b) and replays its pipelines; for a routed model
 * also every ep that divides its experts and the GPUs (powers of two;
 * try_pipelines keeps the d that ep divides), each costed apart since
 * its products and all-to-alls differ. 1: a load error, 2: t does not
 * divide the model, 0 otherwise. */
static int try_costed(Search *S, int t, bool sp, int b) {
  for (int ep = S->ep ? S->ep : 1, most = ep; ep <= most; ep *= 2) {
    IrGraph *g = S->load(S->ctx, b);
    if (!g) return 1;
    /* A head count or width that t does not divide is a user error of
     * tp-partition; the search checks first and skips it quietly. */
    if (!pl_tp_divides(g, t)) {
      reject(S, PL_REJ_DIVISIBLE, "t=%d does not divide the heads or the hidden size", t);
      return 2;
    }
    PlModel m;
    PlConfig c = {.tp = t, .sequence_parallel = sp, .ep = ep};
    if (!pl_model_build(g, &c, S->hw, &m)) return 1;
    S->out->routed |= m.moe.experts > 0;
    /* An ep asked for is the user's: refused where the model cannot
     * take it, as simulate refuses it. */
    if (S->ep > 1 && (!m.moe.experts || m.moe.experts % S->ep)) {
      if (!m.moe.experts)
        ir_error(ir_cmdline, "plan: --ep %d places experts, and the model has no routed layer "
                 "(moe_dispatch)", S->ep);
      else
        ir_error(ir_cmdline, "plan: --ep %d must divide the %d experts of each routed layer",
                 S->ep, m.moe.experts);
      return 1;
    }
    if (!S->ep) most = m.moe.experts < S->gpus / t ? m.moe.experts : S->gpus / t;
    if (ep == 1 || m.moe.experts % ep == 0) try_pipelines(S, &m, t, sp, b, ep);
  }
  return 0;
}

bool pl_search(PlLoadFn load, void *ctx, int gpus, int global_batch, const PlHw *hw,
               double mem_limit, PlDpOverlap overlap, int ep, PlSearch *out) {
  *out = (PlSearch){0};
  Search S = {load, ctx, hw, gpus, global_batch, mem_limit, overlap, ep, out, 0, 0};
  for (int t = 1; t <= gpus; t++) {
    if (gpus % t) continue;
    if (t > hw->gpus_per_node) {
      reject(&S, PL_REJ_NODE, "t=%d on nodes of %d GPUs", t, hw->gpus_per_node);
      continue;
    }
    for (int sp = 0; sp <= (t > 1); sp++)
      for (size_t bi = 0; bi < sizeof microbatch_sizes / sizeof microbatch_sizes[0]; bi++) {
        int b = microbatch_sizes[bi];
        if (global_batch % b) continue;
        int r = try_costed(&S, t, sp, b);
        if (r == 1) return false;
        if (r == 2) break;
      }
  }
  if (out->n) qsort(out->configs, (size_t)out->n, sizeof(PlCandidate), faster);
  return true;
}

void pl_search_free(PlSearch *s) {
  free(s->configs), free(s->tried);
  s->configs = s->tried = NULL;
}
