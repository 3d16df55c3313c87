/* schedule: the pipeline schedule of the program. It fixes the
 * microbatches of a step, m = global batch / (microbatch x d), for every
 * layout (the one place --global-batch is checked against the microbatch),
 * and with p > 1 builds every stage's action table for p stages, v chunks
 * and m microbatches (schedule.c, or a --schedule-file) and verifies all
 * of them together; the tables hang on the program (PassProgram.schedule).
 * The messages' shape is the activation virtual stage 0 sends, so the pass
 * runs after pp-split. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "program_passes.h"
#include "schedule.h"

static int mesh(const IrGraph *g, IrMeshAxis a) { return g->mesh[a] > 1 ? g->mesh[a] : 1; }

/* The microbatch: the sequences of the model's token inputs (every input
 * of a trained model is i32[batch, seq], which codegen checks); 0 when the
 * graph has none. */
static int64_t microbatch(const IrGraph *g) {
  for (int i = 0; i < g->inputs.len; i++) {
    const IrValue *in = g->inputs.items[i];
    if (in->type.dtype == IR_I32 && in->type.rank == 2 && ir_type_known(&in->type))
      return in->type.shape[0];
  }
  return 0;
}

/* The shape of the messages for the verifier: the activation virtual
 * stage 0 sends ([b, s, h], or [b, s/t, h] with sequence parallelism); a
 * flat count when it has several parts. */
static RtSchedShape message_shape(const PassChunk *c) {
  RtSchedShape sh = {0};
  if (c->send_act.len == 1) {
    const IrType *t = &((const IrValue *)c->send_act.items[0])->type;
    if (t->rank <= RT_SCHED_MAX_RANK) {
      sh.rank = t->rank;
      for (int i = 0; i < t->rank; i++) sh.dims[i] = t->shape[i];
      return sh;
    }
  }
  int64_t n = 0;
  for (int i = 0; i < c->send_act.len; i++)
    n += ir_type_numel(&((const IrValue *)c->send_act.items[i])->type);
  sh.rank = 1, sh.dims[0] = n;
  return sh;
}

/* m from --global-batch, or PASS_DEFAULT_MICROBATCHES; false after
 * reporting a global batch that microbatch x d does not divide. */
static bool microbatches(const IrGraph *g, const PassOptions *opt, int *m) {
  int d = mesh(g, IR_AXIS_DATA);
  int64_t b = microbatch(g), per = b * d;
  *m = PASS_DEFAULT_MICROBATCHES;
  if (opt->global_batch <= 0) return true;
  if (b <= 0) {
    ir_error(ir_cmdline, "--global-batch %lld: the model has no i32[batch, seq] input to count "
             "microbatches by", (long long)opt->global_batch);
    return false;
  }
  if (opt->global_batch % per) {
    ir_error(ir_cmdline, "--global-batch %lld is not a multiple of microbatch %lld x dp %d",
             (long long)opt->global_batch, (long long)b, d);
    return false;
  }
  *m = (int)(opt->global_batch / per);
  return true;
}

/* The tables of the named schedule (or the file's) for p, v, m; NULL
 * after reporting why they cannot be built or do not verify. */
static RtSchedule *build(const PassProgram *p, const PassOptions *opt, int m) {
  const IrGraph *g = p->g;
  int pp = mesh(g, IR_AXIS_PIPELINE), v = g->vpp > 1 ? g->vpp : 1;
  const char *name = opt->schedule ? opt->schedule : sched_default_name(v);
  const SchedDef *def = sched_find(name);
  SchedScript *script = NULL;
  if (opt->schedule_file) {
    char *error;
    if (!(script = sched_script_load(opt->schedule_file, &error))) {
      /* The errors end with a newline, which ir_error adds itself. */
      ir_error(ir_cmdline, "--schedule-file: %.*s", (int)strlen(error) - 1, error);
      free(error);
      return NULL;
    }
    name = opt->schedule_file, def = &sched_script_def;
  }
  if (!def) {
    ir_error(ir_cmdline, "unknown schedule '%s' (known: %s)", name, sched_names());
    return NULL;
  }
  SchedOptions so = {.pp = pp, .vpp = v, .microbatches = m, .dp = mesh(g, IR_AXIS_DATA),
                     .vpp_group = opt->vpp_group, .buckets_per_chunk = 1, .script = script,
                     .shape = message_shape(&p->chunks[0])};
  SchedReport rep;
  RtSchedule *s = script ? sched_build_script(script, &so, NULL, false, &rep)
                         : sched_build(def, &so, NULL, false, &rep);
  sched_script_free(script);
  if (!s)
    ir_error(ir_cmdline, "schedule %s for p = %d, v = %d, m = %d: %s", name, pp, v, m,
             rep.error ? rep.error : "failed");
  sched_report_free(&rep);
  if (s && (s->vshape != 0) != g->pp_vshape) {
    /* pp-partition placed the layers for another schedule's placement. */
    ir_error(ir_cmdline, "schedule %s places chunk 1 of stage r on virtual stage %s, but the "
             "layers were placed for %s", name, s->vshape ? "2p - 1 - r (the V)" : "p + r",
             g->pp_vshape ? "the V placement" : "Megatron-LM's placement");
    sched_free(s);
    s = NULL;
  }
  return s;
}

bool pass_schedule(PassProgram *p, const PassOptions *opt) {
  PassOptions none = {0};
  if (!opt) opt = &none;
  const IrGraph *g = p->g;
  int pp = mesh(g, IR_AXIS_PIPELINE), nv = pp * (g->vpp > 1 ? g->vpp : 1);
  if (!microbatches(g, opt, &p->microbatches)) return false;
  if (pp == 1) return true; /* one stage runs its microbatches in order: no tables */
  if (p->nchunks != nv) {
    ir_error(ir_cmdline, "schedule: the program has %d chunks for %d virtual stages (pp-split "
             "must run before schedule)", p->nchunks, nv);
    return false;
  }
  sched_free(p->schedule);
  p->schedule = build(p, opt, p->microbatches);
  return p->schedule != NULL;
}

void pass_schedule_print(FILE *out, PassProgram *p) {
  const RtSchedule *s = p->schedule;
  if (!s) {
    fprintf(out, "// one pipeline stage, m = %d microbatches a step: no action tables\n",
            p->microbatches);
    return;
  }
  fprintf(out, "// schedule %s: p = %d, v = %d, m = %d%s\n", s->name, s->pp, s->vpp, s->microbatches,
          s->vshape ? ", the V placement" : "");
  char buf[96];
  for (int r = 0; r < s->pp; r++) {
    fprintf(out, "stage %d:", r);
    for (int i = 0; i < s->stages[r].n; i++)
      fprintf(out, " %s", rt_sched_action_str(&s->stages[r].actions[i], buf, sizeof buf));
    fprintf(out, "\n");
  }
}

bool pass_schedule_verify(PassProgram *p, const char *who) {
  if (!pass_verify_chunks(p, who)) return false;
  const RtSchedule *s = p->schedule;
  int pp = mesh(p->g, IR_AXIS_PIPELINE);
  if (!s) {
    if (pp == 1) return true;
    ir_error(ir_cmdline, "%s: a program of %d pipeline stages without action tables", who, pp);
    return false;
  }
  if (s->pp != pp || s->microbatches != p->microbatches) {
    ir_error(ir_cmdline, "%s: tables for p = %d, m = %d in a program of p = %d, m = %d", who, s->pp,
             s->microbatches, pp, p->microbatches);
    return false;
  }
  SchedReport rep;
  bool ok = sched_verify(s, NULL, false, &rep);
  if (!ok) ir_error(ir_cmdline, "%s: the action tables do not verify: %s", who, rep.error);
  sched_report_free(&rep);
  return ok;
}
