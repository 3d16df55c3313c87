/* `shardc hw` and `shardc simulate`: the planner's hardware descriptions,
 * and the predicted step time, throughput and memory of a configuration
 * from the replay of its action tables (planner/). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../abi/chrome_trace.h"
#include "../codegen/codegen.h"
#include "../passes/schedule.h"
#include "../planner/planner.h"
#include "../planner/program_cost.h"
#include "driver.h"
#include "timeline.h"

static const DrvOption hw_options[] = {
    {"--measure", NULL, "time this machine (the CPU target's GEMM, a copy, MPI) and write a description"},
    {"-o", "FILE", "with --measure: the description file to write"},
    {"--max-size", "N", "with --measure: the largest N x N x N GEMM timed (default 1024)"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_hw_command = {
    "hw", "[NAME|FILE]", "list the hardware presets of the planner, or print one description",
    "Without an argument lists the presets; with a preset name or a description\n"
    "file prints it in the file format (docs/planner.md), which --hw reads.\n"
    "--measure -o FILE times this machine through a small program built as\n"
    "`shardc run` builds rank programs and writes its description.",
    hw_options, drv_cmd_hw};

int drv_cmd_hw(int nargs, DrvArg *args) {
  if (drv_flag(nargs, args, "--measure")) return drv_hw_measure(&drv_hw_command, nargs, args);
  if (drv_value(nargs, args, "-o") || drv_value(nargs, args, "--max-size"))
    return drv_usage_error(&drv_hw_command, "-o and --max-size go with --measure");
  if (nargs > 1) return drv_usage_error(&drv_hw_command, "expected at most one preset or file");
  if (nargs == 1) {
    PlHw hw;
    if (!pl_hw_load(args[0].value, &hw)) return 1;
    pl_hw_print(stdout, &hw);
    return 0;
  }
  printf("hardware presets (shardc hw NAME prints one):\n");
  for (const PlHw *h = pl_hw_presets; h->name; h++)
    printf("  %-6s %s\n", h->name, h->doc);
  return 0;
}

static const DrvOption simulate_options[] = {
    {"--program", "DIR", "instead of MODEL: the cost report of the program `shardc compile` wrote "
     "into DIR, every launch of a step priced on --hw (docs/targets.md); with --json, --csv FILE "
     "and --global-batch"},
    {"--csv", "FILE", "with --program: every launch group as CSV into FILE (- for stdout)"},
    DRV_DEFINE_OPTION,
    {"--tp", "T", "tensor-parallel size (default 1)"},
    {"--pp", "P", "pipeline stages (default 1)"},
    {"--dp", "D", "data-parallel replicas (default 1)"},
    {"--vpp", "V", "model chunks per stage (default 1)"},
    {"--ep", "E", "a routed model's experts placed on E of the data-parallel ranks, each expert "
     "replicated over d/E of them (default 1: every rank holds every expert)"},
    {"--moe-imbalance", "F", "with --ep: the busiest expert rank's tokens over the mean (default "
     "1.25; a routed layer's capacity factor caps it)"},
    {"--microbatch", "B", "sequences per microbatch (sets the model's `batch`; default: the model's)"},
    {"--global-batch", "N", "sequences per step (default: 8 microbatches per pipeline)"},
    {"--schedule", "NAME", "pipeline schedule (default 1f1b, interleaved when V > 1)"},
    {"--sequence-parallel", NULL, "with --tp: norms, dropout and residuals on sequence slices"},
    {"--no-scatter-gather", NULL, "with --tp and no --sequence-parallel: price pipeline messages "
     "sent whole, not as 1/t slices all-gathered on arrival"},
    {"--zero", "0|1", "1: shard the optimizer state over the data-parallel replicas (ZeRO-1)"},
    {"--recompute", "none|selective|full",
     "recompute activations in the backward: none (default), the attention core, every layer"},
    {"--recompute-layers", "N", "--recompute full: layers per checkpoint (default 1); memory keeps "
     "every N-th layer's input and one group's activations"},
    {"--hw", "NAME|FILE", "a hardware preset (shardc hw lists them) or description file"},
    {"--dp-overlap", "bucket|chunk|none", "when data-parallel reductions start: each bucket as its "
     "gradients complete (default, as the training program), each chunk after its last backward, "
     "or after the whole backward (the program's --no-overlap)"},
    {"--bucket-mb", "MB", "with --dp: the programs' gradient bucket in MiB (default 25), which "
     "--dp-overlap bucket starts one by one"},
    {"--tp-overlap", NULL, "with --tp: overlap each input gradient's all-reduce with the weight-"
     "gradient GEMM, as the later Megatron-LM does (the compiler's programs do not)"},
    {"--megatron", "2021|2022", "mixed precision: the Megatron-LM modelled: 2021 (default, the "
     "paper's: a pass per microbatch adds the weight gradients into a 16-bit buffer, outputs kept "
     "until their backward) or 2022 (Korthikanti et al.'s: accumulation fused into the GEMMs)"},
    {"--precision", "mixed|bf16|fp32",
     "mixed precision as the paper (default); bf16 as the CUDA target's --precision bf16 (fp32 "
     "weight-gradient reductions); or fp32 everything as the CPU target does"},
    {"--no-memory-plan", NULL, "with --precision fp32 or bf16: activations from the formula, not "
     "from the compiler's memory plan of the programs (which compiling a large model takes long)"},
    {"--json", NULL, "print one JSON object"},
    {"--trace", "FILE", "write the simulated timeline as a Chrome trace (chrome://tracing, Perfetto)"},
    {"--svg", "FILE", "draw the simulated timeline of every stage as SVG, communication included"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_simulate_command = {
    "simulate", "MODEL [options] --hw NAME|FILE",
    "predict step time, TFLOP/s per GPU, MFU, bubble and memory of a configuration",
    "Costs one layer of the tensor-partitioned, differentiated rank program on\n"
    "the hardware (a roofline with a GEMM efficiency curve, alpha-beta\n"
    "collectives over the node topology) and replays every stage's action\n"
    "table with those costs. TFLOP/s count model FLOPs (3x the forward's\n"
    "matrix FLOPs) plus the recomputed forwards, as the paper counts; MFU\n"
    "counts model FLOPs only. Memory follows REFERENCE.md's formulas times\n"
    "the schedule's peak stash (with --precision fp32 or bf16, the compiler's\n"
    "memory plan where the model compiles), plus the device context,\n"
    "workspaces, communicator and message buffers, the largest op's\n"
    "temporaries and the allocator's fragmentation; a configuration that\n"
    "does not fit is said so, with by how much. A model with routed layers\n"
    "prices its experts by their active rows, and with --ep the all-to-alls\n"
    "and the busiest expert rank's load. docs/planner.md describes the model.",
    simulate_options, drv_cmd_simulate};

/* A positive integer flag. */
static bool int_arg(int nargs, DrvArg *args, const char *name, int dflt, int *out) {
  const char *s = drv_value(nargs, args, name);
  *out = dflt;
  if (!s) return true;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end || end == s || v < (strcmp(name, "--zero") == 0 ? 0 : 1) || v > (1 << 30)) {
    drv_usage_error(&drv_simulate_command, "%s: expected a positive integer, got '%s'", name, s);
    return false;
  }
  *out = (int)v;
  return true;
}

static bool parse_config(int nargs, DrvArg *args, PlConfig *c) {
  *c = (PlConfig){0};
  bool ok = int_arg(nargs, args, "--tp", 1, &c->tp);
  ok = int_arg(nargs, args, "--pp", 1, &c->pp) && ok;
  ok = int_arg(nargs, args, "--dp", 1, &c->dp) && ok;
  ok = int_arg(nargs, args, "--vpp", 1, &c->vpp) && ok;
  ok = int_arg(nargs, args, "--ep", 1, &c->ep) && ok;
  const char *imb = drv_value(nargs, args, "--moe-imbalance");
  if (imb) {
    char *end;
    c->moe_imbalance = strtod(imb, &end);
    if (*end || end == imb || !(c->moe_imbalance >= 1) || c->moe_imbalance > 1e6) {
      drv_usage_error(&drv_simulate_command, "--moe-imbalance: expected a factor of at least 1, "
                      "got '%s'", imb);
      return false;
    }
  }
  ok = int_arg(nargs, args, "--microbatch", 0, &c->microbatch) && ok;
  ok = int_arg(nargs, args, "--zero", 0, &c->zero) && ok;
  ok = int_arg(nargs, args, "--global-batch", 0, &c->global_batch) && ok;
  if (c->zero > 1) {
    drv_usage_error(&drv_simulate_command, "--zero: expected 0 or 1");
    return false;
  }
  c->schedule = drv_value(nargs, args, "--schedule");
  const char *rc = drv_value(nargs, args, "--recompute");
  if (rc && strcmp(rc, "full") == 0) c->recompute = PL_RECOMPUTE_FULL;
  else if (rc && strcmp(rc, "selective") == 0) c->recompute = PL_RECOMPUTE_SELECTIVE;
  else if (rc && strcmp(rc, "none") != 0) {
    drv_usage_error(&drv_simulate_command, "--recompute: expected none, selective or full, got '%s'", rc);
    return false;
  }
  ok = int_arg(nargs, args, "--recompute-layers", 1, &c->recompute_layers) && ok;
  if (c->recompute_layers > 1 && c->recompute != PL_RECOMPUTE_FULL) {
    drv_usage_error(&drv_simulate_command, "--recompute-layers %d: groups of layers need "
                    "--recompute full", c->recompute_layers);
    return false;
  }
  c->sequence_parallel = drv_flag(nargs, args, "--sequence-parallel");
  c->no_scatter_gather = drv_flag(nargs, args, "--no-scatter-gather");
  c->tp_overlap = drv_flag(nargs, args, "--tp-overlap");
  const char *bucket = drv_value(nargs, args, "--bucket-mb");
  if (bucket) {
    char *end;
    c->bucket_mb = strtod(bucket, &end);
    if (*end || end == bucket || !(c->bucket_mb > 0) || c->bucket_mb > 1e6) {
      drv_usage_error(&drv_simulate_command, "--bucket-mb: expected a positive number of MiB, "
                      "got '%s'", bucket);
      return false;
    }
  }
  const char *overlap = drv_value(nargs, args, "--dp-overlap");
  if (!pl_dp_overlap_parse(overlap, &c->dp_overlap)) {
    drv_usage_error(&drv_simulate_command, "--dp-overlap: expected bucket, chunk or none, got '%s'",
                    overlap);
    return false;
  }
  const char *prec = drv_value(nargs, args, "--precision");
  if (prec && strcmp(prec, "fp32") == 0) c->fp32 = true;
  else if (prec && strcmp(prec, "bf16") == 0) c->bf16 = true;
  else if (prec && strcmp(prec, "mixed") != 0) {
    drv_usage_error(&drv_simulate_command, "--precision: expected mixed, bf16 or fp32, got '%s'",
                    prec);
    return false;
  }
  const char *meg = drv_value(nargs, args, "--megatron");
  if (meg && strcmp(meg, "2021") == 0) c->megatron = 2021;
  else if (meg && strcmp(meg, "2022") == 0) c->megatron = 2022;
  else if (meg) {
    drv_usage_error(&drv_simulate_command, "--megatron: expected 2021 or 2022, got '%s'", meg);
    return false;
  }
  /* Flags of the driver alone that a configuration would ignore. */
  if (overlap && c->dp <= 1) {
    drv_usage_error(&drv_simulate_command, "--dp-overlap needs --dp > 1: it says when the "
                    "data-parallel reductions start, and with one replica there are none");
    return false;
  }
  if (drv_flag(nargs, args, "--no-memory-plan") && !c->fp32 && !c->bf16) {
    drv_usage_error(&drv_simulate_command, "--no-memory-plan goes with --precision fp32 or bf16: "
                    "mixed precision's activations are the formula's already");
    return false;
  }
  char *refusal = pl_config_refusal(c);
  if (refusal) {
    drv_usage_error(&drv_simulate_command, "%s", refusal);
    free(refusal);
    return false;
  }
  return ok;
}

static const char *const recompute_names[] = {"none", "selective", "full"};

static void print_text(const PlResult *r, const PlModel *m, const PlConfig *c, const PlHw *hw) {
  printf("%s, t=%d p=%d d=%d v=%d%s, b=%d, B=%d (m=%d), %d GPUs, recompute %s%s\n", hw->name, c->tp,
         c->pp, c->dp, c->vpp, pl_ep(c) > 1 ? ir_fmt(" ep=%d", pl_ep(c)) : "", c->microbatch,
         c->global_batch, r->microbatches,
         c->tp * c->pp * c->dp, recompute_names[c->recompute],
         c->recompute_layers > 1 ? ir_fmt(" (%d layers per checkpoint)", c->recompute_layers) : "");
  printf("step time        %10.4f s\n", r->step_time);
  /* A measured CPU's peak is a fraction of a TFLOP/s: digits, not 0. */
  double peak = hw->peak_flops[PL_BF16] / 1e12;
  printf("TFLOP/s per GPU  %10.*f  (MFU %.1f%% of %.*f)\n", peak < 10 ? 4 : 1, r->tflops_per_gpu,
         100 * r->mfu, peak < 10 ? 3 : 0, peak);
  printf("bubble fraction  %10.4f\n", r->bubble_fraction);
  printf("per microbatch   F %.3f ms, B %.3f ms (busiest chunk); message %.3f ms\n",
         1e3 * r->f_chunk, 1e3 * r->b_chunk, 1e3 * r->p2p_s);
  if (r->w_chunk > 0)
    printf("  split          B %.3f ms (input gradients), W %.3f ms (weight gradients) of the "
           "backward\n", 1e3 * (r->b_chunk - r->w_chunk), 1e3 * r->w_chunk);
  printf("per step         gradient reduction %.3f ms per chunk, optimizer %.3f ms\n",
         1e3 * r->dp_s, 1e3 * r->opt_s);
  if (m->moe.experts)
    printf("routed layers    %d per layer, top-%d of %d experts of ffn %lld%s, ep %d (each "
           "expert on %d ranks), load %.2f of the mean; all-to-all %.3f ms, %lld bytes sent per "
           "rank, 4 per routed layer and microbatch\n", m->moe.routed, m->moe.top_k,
           m->moe.experts, (long long)m->moe.expert_ffn,
           m->moe.shared_ffn ? ir_fmt(" and shared experts of ffn %lld",
                                      (long long)m->moe.shared_ffn) : "",
           pl_ep(c), pl_edp(c), m->moe.load, 1e3 * m->moe.a2a_s, (long long)m->moe.a2a_bytes);
  printf("memory per GPU   %10.2f GiB (max over stages; %.0f GiB on the device)\n",
         r->memory_max / 1073741824.0, hw->mem_bytes / 1073741824.0);
  if (r->memory_over > 0)
    printf("does not fit     %10.2f GiB over the device's memory on the fullest stage\n",
           r->memory_over / 1073741824.0);
  printf("stage  layers  params/rank  weights  grads  optim  activ  other  total GiB  stash\n");
  for (int i = 0; i < r->nstages; i++) {
    const PlStage *s = &r->stages[i];
    const double G = 1073741824.0;
    double other = s->total - s->weights - s->grads - s->optimizer - s->activations;
    printf("%5d  %6d  %11lld  %7.2f  %5.2f  %5.2f  %5.2f  %5.2f  %9.2f  %5d\n", i, s->layers,
           (long long)s->params, s->weights / G, s->grads / G, s->optimizer / G,
           s->activations / G, other / G, s->total / G, s->peak_stash);
  }
  const PlStage *s0 = &r->stages[0];
  const double G = 1073741824.0;
  printf("other: workspaces %.2f, communicator buffers %.2f, messages %.2f, temporaries %.2f, ",
         s0->workspace / G, s0->comm_buffers / G, s0->messages / G, s0->temporaries / G);
  /* Megatron-LM of 2021's own (mixed precision, PlConfig.megatron). */
  if (s0->grad_buffer > 0 || s0->outputs > 0)
    printf("gradient buffer %.2f, outputs kept %.2f, ", s0->grad_buffer / G, s0->outputs / G);
  printf("fragmentation %.2f GiB (stage 0)\n", s0->fragmentation / G);
}

static void print_json(const PlResult *r, const PlModel *m, const PlConfig *c, const PlHw *hw) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "hw", hw->name);
  cJSON_AddNumberToObject(o, "gpus", (double)c->tp * c->pp * c->dp);
  cJSON_AddNumberToObject(o, "microbatches", r->microbatches);
  cJSON_AddNumberToObject(o, "step_time_s", r->step_time);
  cJSON_AddNumberToObject(o, "tflops_per_gpu", r->tflops_per_gpu);
  cJSON_AddNumberToObject(o, "mfu", r->mfu);
  cJSON_AddNumberToObject(o, "bubble_fraction", r->bubble_fraction);
  cJSON_AddNumberToObject(o, "memory_bytes_per_gpu", r->memory_max);
  cJSON_AddNumberToObject(o, "device_memory_bytes", hw->mem_bytes);
  cJSON_AddBoolToObject(o, "fits", r->memory_over <= 0);
  cJSON_AddNumberToObject(o, "memory_over_bytes", r->memory_over);
  cJSON_AddStringToObject(o, "dp_overlap", pl_dp_overlap_names[c->dp_overlap]);
  cJSON_AddStringToObject(o, "recompute", recompute_names[c->recompute]);
  if (c->recompute_layers > 1) cJSON_AddNumberToObject(o, "recompute_layers", c->recompute_layers);
  cJSON_AddNumberToObject(o, "model_flops_per_step", r->model_flops);
  cJSON_AddNumberToObject(o, "counted_flops_per_step", r->counted_flops);
  if (m->moe.experts) {
    cJSON *e = cJSON_AddObjectToObject(o, "routed");
    cJSON_AddNumberToObject(e, "per_layer", m->moe.routed);
    cJSON_AddNumberToObject(e, "experts", m->moe.experts);
    cJSON_AddNumberToObject(e, "top_k", m->moe.top_k);
    cJSON_AddNumberToObject(e, "expert_ffn", (double)m->moe.expert_ffn);
    cJSON_AddNumberToObject(e, "shared_ffn", (double)m->moe.shared_ffn);
    cJSON_AddNumberToObject(e, "capacity", m->moe.capacity);
    cJSON_AddNumberToObject(e, "ep", pl_ep(c));
    cJSON_AddNumberToObject(e, "load", m->moe.load);
    cJSON_AddNumberToObject(e, "all_to_all_s", m->moe.a2a_s);
    cJSON_AddNumberToObject(e, "all_to_all_bytes", (double)m->moe.a2a_bytes);
  }
  cJSON *st = cJSON_AddArrayToObject(o, "stages");
  for (int i = 0; i < r->nstages; i++) {
    const PlStage *s = &r->stages[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "stage", i);
    cJSON_AddNumberToObject(e, "layers", s->layers);
    cJSON_AddNumberToObject(e, "params_per_rank", (double)s->params);
    cJSON_AddNumberToObject(e, "weights_bytes", s->weights);
    cJSON_AddNumberToObject(e, "gradients_bytes", s->grads);
    cJSON_AddNumberToObject(e, "gradient_buffer_bytes", s->grad_buffer);
    cJSON_AddNumberToObject(e, "optimizer_bytes", s->optimizer);
    cJSON_AddNumberToObject(e, "activations_bytes", s->activations);
    cJSON_AddNumberToObject(e, "outputs_bytes", s->outputs);
    cJSON_AddNumberToObject(e, "workspace_bytes", s->workspace);
    cJSON_AddNumberToObject(e, "comm_buffer_bytes", s->comm_buffers);
    cJSON_AddNumberToObject(e, "message_bytes", s->messages);
    cJSON_AddNumberToObject(e, "temporary_bytes", s->temporaries);
    cJSON_AddNumberToObject(e, "fragmentation_bytes", s->fragmentation);
    cJSON_AddNumberToObject(e, "memory_bytes", s->total);
    cJSON_AddNumberToObject(e, "peak_stash", s->peak_stash);
    cJSON_AddNumberToObject(e, "compute_s", s->compute);
    cJSON_AddNumberToObject(e, "finish_s", s->finish);
    cJSON_AddItemToArray(st, e);
  }
  char *text = cJSON_Print(o);
  printf("%s\n", text);
  free(text);
  cJSON_Delete(o);
}

/* ---------------------------------------------------------------- trace */

/* One process per pipeline stage (it stands for the stage's t x d ranks),
 * with three rows: compute, pipeline messages (a batch from its posting
 * to its completion, where that takes time) and the data-parallel stream. */
static cJSON *trace_json(const PlResult *r) {
  cJSON *o = cJSON_CreateObject(), *ev = cJSON_AddArrayToObject(o, "traceEvents");
  for (int st = 0; st < r->nstages; st++) {
    const RtSchedTable *t = &r->tables->stages[st];
    chrome_trace_process(ev, st, ir_fmt("stage %d", st));
    for (int i = 0; i < t->n; i++) {
      const RtSchedAction *a = &t->actions[i];
      double from = r->start[st][i], to = r->end[st][i];
      char buf[96];
      int message = a->kind == RT_SCHED_SEND || a->kind == RT_SCHED_RECV;
      if (!message || (!(a->flags & RT_SCHED_JOIN) && to > from))
        chrome_trace_event(ev, rt_sched_action_str(a, buf, sizeof buf), a, st, from, to - from);
    }
  }
  return o;
}

static bool write_trace(const char *path, const PlResult *r) {
  bool ok = chrome_trace_write(trace_json(r), path);
  if (!ok) fprintf(stderr, "shardc simulate: error: cannot write %s\n", path);
  return ok;
}

/* ------------------------------------------------------------------ SVG */

/* The simulated step drawn by timeline.c, in milliseconds, with the
 * communication lanes and the pipeline messages. */
static bool write_svg(const char *path, const PlResult *r, const PlConfig *c, const PlHw *hw,
                      const char *model) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "shardc simulate: error: cannot write %s\n", path);
    return false;
  }
  DrvTimeline t = {
      .s = r->tables, .start = r->start, .end = r->end, .makespan = r->step_time, .scale = 1e3,
      .min_unit = 0, .max_unit = 1e30, .comm = true,
      .time_caption = "time in ms as simulated (block widths are the predicted durations)",
      .title = ir_fmt("simulated %s step on %s: t = %d, p = %d, d = %d, v = %d, m = %d; "
                      "step %.4g s, bubble %.2f%%", r->tables->name, hw->name, c->tp, c->pp,
                      c->dp, c->vpp, r->microbatches, r->step_time,
                      100 * r->bubble_fraction),
      .subtitle = ir_fmt("per microbatch F %.4g ms, B %.4g ms (busiest chunk), message %.4g ms; "
                         "%.1f TFLOP/s per GPU, recompute %s; %s", 1e3 * r->f_chunk,
                         1e3 * r->b_chunk, 1e3 * r->p2p_s, r->tflops_per_gpu,
                         recompute_names[c->recompute], model)};
  drv_timeline_svg(f, &t);
  if (fclose(f) != 0) {
    fprintf(stderr, "shardc simulate: error: cannot write %s\n", path);
    return false;
  }
  return true;
}

/* The activations region of each stage's program in the compiler's own
 * memory plan for the target c runs as (fp32: the host's, bf16: the first
 * target that runs bf16), laid out
 * as `shardc compile` lays it out and written nowhere; NULL after the
 * compiler reported why the model does not compile so. */
static const int64_t *compiled_activations(const char *model, int nargs, DrvArg *args,
                                           const PlConfig *c) {
  const char *target = c->bf16 ? cg_precision_target(CG_PRECISION_BF16) : cg_host_target();
  PassOptions opt;
  if (!drv_pass_options(&drv_simulate_command, nargs, args, &opt)) return NULL;
  /* The schedule and memory plan passes as `shardc compile` runs them. */
  opt.memplan = cg_memplan_policy(target);
  opt.vocab_pad_always = cg_target_pads_vocab(target);
  opt.real_bytes = 4;
  opt.low_bytes = c->bf16 ? 2 : 0;
  opt.schedule = c->schedule;
  opt.global_batch = c->global_batch;
  IrGraph *g = drv_load_model(model, nargs, args);
  if (!g) return NULL;
  if (opt.dp > 1) g->mesh[IR_AXIS_DATA] = opt.dp;
  PassManagerFlags flags = {.print_stream = stdout};
  const char *pipeline = cg_pipeline(target, opt.pp > 1 || opt.vpp > 1 || opt.pp_layout);
  PassProgram p = {.g = g};
  int64_t *bytes = ir_alloc(sizeof(int64_t) * (size_t)opt.pp);
  /* The layout asks for a folder, which cg_kept_activations never writes. */
  CgOptions o = {.target = target, .out_dir = ".", .dtype = IR_F32, .zero = c->zero, .bf16 = c->bf16};
  bool ok = pass_run_program(&p, pipeline, &opt, &flags) && ir_error_count() == 0 &&
            cg_kept_activations(&p, &o, bytes, opt.pp);
  pass_program_free(&p);
  return ok ? bytes : NULL;
}

int drv_cmd_simulate(int nargs, DrvArg *args) {
  /* --program DIR: the cost report of a compiled program (planner/program_cost.c). */
  const char *program = drv_value(nargs, args, "--program"), *csv = drv_value(nargs, args, "--csv");
  int gb = 0;
  for (int i = 0; program && i < nargs; i++)
    if (!args[i].opt) return drv_usage_error(&drv_simulate_command, "--program DIR takes no MODEL");
  if (csv && !program) return drv_usage_error(&drv_simulate_command, "--csv goes with --program DIR");
  if (program && !drv_value(nargs, args, "--hw"))
    return drv_usage_error(&drv_simulate_command, "--hw NAME|FILE is required");
  if (program)
    return int_arg(nargs, args, "--global-batch", 0, &gb)
               ? pl_program_report_main(program, drv_value(nargs, args, "--hw"),
                                        drv_flag(nargs, args, "--json"), csv, gb)
               : 1;
  const char *model = drv_model_arg(&drv_simulate_command, nargs, args);
  const char *hw_name = drv_value(nargs, args, "--hw");
  PlConfig c;
  if (!model || !parse_config(nargs, args, &c)) return 1;
  if (!hw_name) return drv_usage_error(&drv_simulate_command, "--hw NAME|FILE is required");
  PlHw hw;
  if (!pl_hw_load(hw_name, &hw)) return 1;
  if (!drv_apply_microbatch(&drv_simulate_command, &nargs, &args)) return 1;
  IrGraph *g = drv_load_and_check(model, nargs, args);
  PlModel m;
  if (!g || !pl_model_build(g, &c, &hw, &m)) return 1;
  /* Without --microbatch the model's own batch (or -D batch) is the
   * microbatch; without --global-batch each pipeline runs 8 of them. */
  if (!c.microbatch) c.microbatch = (int)m.b;
  if (!c.global_batch) c.global_batch = 8 * c.microbatch * c.dp;
  /* The compiler's programs allocate what their memory plan says: where
   * the model compiles for the target, its activations are the plan's. */
  if ((c.fp32 || c.bf16) && !drv_flag(nargs, args, "--no-memory-plan")) {
    c.plan_activations = compiled_activations(model, nargs, args, &c);
    if (!c.plan_activations) return 1;
  }
  PlResult r;
  char *error = NULL;
  const char *trace = drv_value(nargs, args, "--trace"), *svg = drv_value(nargs, args, "--svg");
  if (!(trace || svg ? pl_simulate_timeline : pl_simulate)(&m, &c, &hw, &r, &error)) {
    fprintf(stderr, "shardc simulate: error: %s\n", error);
    free(error);
    return 1;
  }
  /* A prediction for a run that would not start: said on stderr as well,
   * where a script reading --json still sees it. */
  if (r.memory_over > 0)
    fprintf(stderr, "shardc simulate: warning: does not fit: %.2f GiB per GPU on the fullest "
            "stage, %.2f GiB more than the %.0f GiB of %s\n", r.memory_max / 1073741824.0,
            r.memory_over / 1073741824.0, hw.mem_bytes / 1073741824.0, hw.name);
  bool ok = !trace || write_trace(trace, &r);
  ok = ok && (!svg || write_svg(svg, &r, &c, &hw, model));
  if (!ok) {
    /* write_trace said why. */
  } else if (drv_flag(nargs, args, "--json")) {
    print_json(&r, &m, &c, &hw);
  } else {
    print_text(&r, &m, &c, &hw);
  }
  pl_result_free(&r);
  return ok ? 0 : 1;
}
