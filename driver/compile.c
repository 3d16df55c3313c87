/* `shardc compile` and `shardc passes`: run the pass pipeline over a model
 * and, with a target, write its rank programs. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../codegen/codegen.h"
#include "../passes/schedule.h"
#include "driver.h"

static const DrvOption compile_options[] = {
    DRV_DEFINE_OPTION,
    {"--microbatch", "B", "sequences per microbatch (sets the model's `batch`)"},
    {"--target", "cpu", "write rank programs for this target (with -o)"},
    {"-o", "DIR", "the folder for the rank programs, manifest and Makefile"},
    {"--dtype", "f32|f64", "the programs' floating point type (default f32; f64 for gradient checks)"},
    DRV_TARGET_OPTIONS,
    {"--precision", "fp32|bf16", "the precision of the step (default fp32; bf16: --target cuda)"},
    {"--no-gemm-epilogue", NULL, "--target cuda: GELU, its gradient and bias gradients as kernels of "
     "their own after the GEMMs, not in cuBLASLt's epilogue (for comparison)"},
    {"--emit-ir", NULL, "print the IR after the pipeline"},
    {"--passes", "a,b,c", "run these passes instead of the default pipeline (empty: none)"},
    {"--print-after", "PASS", "print the IR after each run of PASS"},
    {"--print-after-all", NULL, "print the IR after every pass"},
    {"--verify-each", NULL, "run the verifier after every pass and name the pass that broke it"},
    DRV_TP_OPTIONS,
    DRV_PP_OPTIONS,
    DRV_RECOMPUTE_OPTIONS,
    {"--world-size", "N", "check that the job's N ranks are t * p * d"},
    {"--report", "comm|pp|tp", "comm: what each rank sends per microbatch, per collective and mesh "
     "axis; pp: the pipeline placement; tp: how each GEMM is split, and why one is not"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_compile_command = {
    "compile", "MODEL [options]", "compile a model (.shard, or printed IR .ir) through the passes",
    "Reads MODEL, applies -D overrides and runs the pass pipeline: without a\n"
    "target fold,shape,verify; with --target NAME -o DIR the target's pipeline\n"
    "(`shardc passes` lists each target's, without and with pp-partition; with\n"
    "--pp > 1 a memory plan per model chunk), then writes one source file per\n"
    "distinct rank program (rank0.c; with pipeline stages stage0.c, stage1.c,\n"
    "... with each stage's verified schedule table), manifest.json and a\n"
    "build file into DIR and prints the memory plan. `shardc build DIR` (or\n"
    "make -C DIR) builds them. Without a target, --tp N > 1 or --report comm\n"
    "run the graph passes of the first target's pipeline too (up to pp-split,\n"
    "writing nothing); --pp, --vpp, --pp-layout or --report pp run them with\n"
    "pp-partition: the IR is the whole graph the programs are cut from (the\n"
    "runtime sums the gradients of tied copies once per step). --emit-ir and\n"
    "--report always show that whole graph.\n"
    "Errors are reported as file:line:col with the source line; exit status 1.",
    compile_options, drv_cmd_compile};

bool drv_parse_dtype(const DrvCommand *cmd, int nargs, DrvArg *args, IrDType *out) {
  const char *s = drv_value(nargs, args, "--dtype");
  *out = IR_F32;
  if (!s || strcmp(s, "f32") == 0) return true;
  if (strcmp(s, "f64") == 0) {
    *out = IR_F64;
    return true;
  }
  drv_usage_error(cmd, "--dtype: expected f32 or f64, got '%s'", s);
  return false;
}

/* Data parallelism is an axis of the graph's mesh like the other two,
 * which their passes set: --dp sets it here, or a printed graph brings it. */
static bool set_data_axis(IrGraph *g, const PassOptions *opt) {
  int *d = &g->mesh[IR_AXIS_DATA];
  if (opt->dp > 1 && *d > 1 && *d != opt->dp) {
    ir_error(ir_cmdline, "--dp %d: the graph's mesh has %d data-parallel replicas", opt->dp, *d);
    return false;
  }
  if (opt->dp > 1) *d = opt->dp;
  return true;
}

/* Loads the model and runs the pipeline with the flags' printing and
 * options; prints the IR (--emit-ir) and the comm report (--report comm,
 * reals of real_bytes bytes, activations of low_bytes in a bf16 program,
 * else 0) of the whole graph, after the graph passes and before the
 * program passes (pp-split on) cut it. NULL after errors. */
static PassProgram *compile_graph(const char *model, int nargs, DrvArg *args, const char *pipeline,
                                  const PassOptions *opt, int real_bytes, int low_bytes) {
  IrGraph *g = drv_load_model(model, nargs, args);
  if (!g || !set_data_axis(g, opt)) return NULL;
  PassManagerFlags flags = {
      .print_after = drv_value(nargs, args, "--print-after"),
      .print_after_all = drv_flag(nargs, args, "--print-after-all"),
      .verify_each = drv_flag(nargs, args, "--verify-each"),
      .print_stream = stdout,
  };
  PassProgram *p = ir_alloc(sizeof *p);
  *p = (PassProgram){.g = g};
  const char *rest;
  const char *graph_part = pass_graph_pipeline(pipeline ? pipeline : pass_default_pipeline, &rest);
  if (!pass_run_program(p, graph_part, opt, &flags) || ir_error_count() > 0) return NULL;
  if (drv_flag(nargs, args, "--emit-ir")) ir_print(stdout, p->g);
  const char *report = drv_value(nargs, args, "--report");
  if (report && strcmp(report, "pp") == 0 && !pass_pp_report(stdout, p->g, opt)) return NULL;
  if (report && strcmp(report, "comm") == 0 &&
      !pass_comm_report(stdout, p->g, opt, real_bytes, low_bytes))
    return NULL;
  fflush(stdout);
  bool ok = pass_run_program(p, rest, opt, &flags) && ir_error_count() == 0;
  fflush(stdout);
  if (!ok) pass_program_free(p);
  return ok ? p : NULL;
}

/* --zero and --bucket-mb into o, --schedule and --global-batch into opt
 * (for the schedule pass); false after a usage error of cmd. */
static bool cg_flags(const DrvCommand *cmd, int nargs, DrvArg *args, PassOptions *opt,
                     CgOptions *o) {
  opt->schedule = drv_value(nargs, args, "--schedule");
  if (!drv_schedule_options(cmd, nargs, args, &opt->vpp_group, &opt->schedule_file)) return false;
  const char *z = drv_value(nargs, args, "--zero"), *b = drv_value(nargs, args, "--bucket-mb"),
             *gb = drv_value(nargs, args, "--global-batch");
  if (z && strcmp(z, "0") != 0 && strcmp(z, "1") != 0) {
    drv_usage_error(cmd, "--zero: expected 0 or 1, got '%s'", z);
    return false;
  }
  o->zero = z && strcmp(z, "1") == 0;
  char *end;
  if (b) {
    o->bucket_mb = strtod(b, &end);
    if (*end || end == b || !(o->bucket_mb > 0) || o->bucket_mb > 1e6) {
      drv_usage_error(cmd, "--bucket-mb: expected a positive number of MiB, got '%s'", b);
      return false;
    }
  }
  if (gb) {
    long long n = strtoll(gb, &end, 10);
    if (*end || end == gb || n <= 0 || n > (1LL << 40)) {
      drv_usage_error(cmd, "--global-batch: expected a positive integer, got '%s'", gb);
      return false;
    }
    opt->global_batch = n;
  }
  return true;
}

/* The layout rules that the flags alone decide, checked before the model
 * is read, in the words of the target's own checks (codegen/layout.c). */
static bool check_layout(const PassOptions *opt, const CgOptions *o, bool target) {
  bool ok = true;
  /* Without a target, p = 1 with v > 1 is a partition of the IR to look at. */
  if (target && opt->vpp > 1 && opt->pp == 1) {
    ir_error(ir_cmdline, "--vpp %d needs pipeline stages (--pp > 1): chunks of one stage would run "
             "one after the other", opt->vpp);
    ok = false;
  }
  if (o->zero && opt->dp == 1) {
    ir_error(ir_cmdline, "--zero 1 shards the optimizer over data-parallel replicas: it needs --dp > 1");
    ok = false;
  }
  if (opt->schedule && !sched_find(opt->schedule)) {
    ir_error(ir_cmdline, "unknown schedule '%s' (known: %s)", opt->schedule, sched_names());
    ok = false;
  }
  return ok;
}

/* With --recompute: the activation bytes each rank program would keep
 * without it, from a second compile of the model that writes nothing, so
 * that the memory plan shows both; NULL when that fails. */
static const int64_t *kept_without_recompute(const char *model, int nargs, DrvArg *args,
                                             const char *pipeline, PassOptions opt,
                                             const CgOptions *o) {
  opt.recompute = PASS_RECOMPUTE_NONE;
  opt.recompute_layers = 1;
  IrGraph *g = drv_load_model(model, nargs, args);
  PassManagerFlags flags = {.print_stream = stdout};
  PassProgram p = {.g = g};
  if (!g || !set_data_axis(g, &opt)) return NULL;
  CgOptions plain = *o;
  plain.plan_out = NULL;
  int64_t *bytes = ir_alloc(sizeof(int64_t) * (size_t)opt.pp);
  bool ok = pass_run_program(&p, pipeline, &opt, &flags) &&
            cg_kept_activations(&p, &plain, bytes, opt.pp);
  pass_program_free(&p);
  return ok ? bytes : NULL;
}

/* --precision: fp32 (the default) or bf16; false after a usage error. */
static bool parse_precision(const DrvCommand *cmd, int nargs, DrvArg *args, bool *bf16) {
  const char *precision = drv_value(nargs, args, "--precision");
  *bf16 = precision && strcmp(precision, "bf16") == 0;
  if (!precision || *bf16 || strcmp(precision, "fp32") == 0) return true;
  drv_usage_error(cmd, "--precision: expected fp32 or bf16, got '%s'", precision);
  return false;
}

int drv_compile_to_dir(const char *model, int nargs, DrvArg *args, const char *target,
                       const char *out_dir, IrDType dtype, FILE *plan_out, CgPlans *plans) {
  PassOptions opt;
  if (!drv_pass_options(&drv_compile_command, nargs, args, &opt)) return 1;
  CgOptions o = {.target = target, .out_dir = out_dir, .dtype = dtype, .plan_out = plan_out,
                 .plans_out = plans};
  if (!cg_flags(&drv_compile_command, nargs, args, &opt, &o)) return 1;
  /* The targets' own options go to codegen, which knows whose they are. */
  CgTargetArg *targs = ir_alloc(sizeof *targs * (size_t)(nargs + 1));
  for (int i = 0; i < nargs; i++)
    if (args[i].opt && cg_target_option(args[i].opt->name))
      targs[o.ntarget_args++] = (CgTargetArg){args[i].opt->name, args[i].value};
  o.target_args = targs;
  const char *bad_arg = cg_target_args_error(&o);
  if (bad_arg) return drv_usage_error(&drv_compile_command, "%s", bad_arg);
  if (!parse_precision(&drv_compile_command, nargs, args, &o.bf16)) return 1;
  if (o.bf16 && !cg_target_precision(target, CG_PRECISION_BF16))
    return drv_usage_error(&drv_compile_command,
                           "--precision: bf16 is for --target %s; the %s target runs fp32",
                           cg_precision_targets(CG_PRECISION_BF16), target ? target : cg_host_target());
  if (!check_layout(&opt, &o, true)) return 1;
  if (!cg_target_known(target)) return 1;
  opt.memplan = cg_memplan_policy(target);
  opt.vocab_pad_always = cg_target_pads_vocab(target);
  opt.real_bytes = dtype == IR_F64 ? 8 : 4;
  opt.low_bytes = o.bf16 ? 2 : 0;
  const char *pipeline = drv_value(nargs, args, "--passes");
  if (!pipeline) pipeline = cg_pipeline(target, opt.pp > 1 || opt.vpp > 1 || opt.pp_layout);
  PassProgram *p = compile_graph(model, nargs, args, pipeline, &opt, opt.real_bytes, opt.low_bytes);
  if (!p) return 1;
  const char **defines = ir_alloc(sizeof(char *) * (size_t)(nargs + 1));
  int ndefines = 0;
  for (int i = 0; i < nargs; i++)
    if (args[i].opt && strcmp(args[i].opt->name, "-D") == 0) defines[ndefines++] = args[i].value;
  /* The program records its model file for `shardc sample` and resumes,
   * which may run from another folder: record it absolute. */
  char real[PATH_MAX];
  const char *model_abs = realpath(model, real) ? ir_strdup(real) : model;
  o.model_path = model_abs;
  o.defines = defines;
  o.ndefines = ndefines;
  if (opt.recompute != PASS_RECOMPUTE_NONE && plan_out)
    o.act_without = kept_without_recompute(model, nargs, args, pipeline, opt, &o);
  /* Beside the manifest, the script that launches its ranks by hand. */
  int status = cg_compile(p, &o);
  pass_program_free(p);
  return status == 0 && !drv_write_launch_script(out_dir) ? 1 : status;
}

int drv_cmd_compile(int nargs, DrvArg *args) {
  const DrvCommand *cmd = &drv_compile_command;
  const char *model = drv_model_arg(cmd, nargs, args);
  if (!model) return 1;
  const char *print_after = drv_value(nargs, args, "--print-after");
  if (print_after && !pass_find(print_after))
    return drv_usage_error(cmd, "--print-after: no pass named '%s'", print_after);
  const char *target = drv_value(nargs, args, "--target"), *out = drv_value(nargs, args, "-o");
  IrDType dtype;
  if (!drv_parse_dtype(cmd, nargs, args, &dtype)) return 1;
  if (!drv_apply_microbatch(cmd, &nargs, &args)) return 1;
  PassOptions opt;
  if (!drv_pass_options(cmd, nargs, args, &opt)) return 1;
  const char *report = drv_value(nargs, args, "--report");
  if (report && strcmp(report, "comm") != 0 && strcmp(report, "pp") != 0 && strcmp(report, "tp") != 0)
    return drv_usage_error(cmd, "--report: expected comm, pp or tp, got '%s'", report);
  if (report && strcmp(report, "tp") == 0) opt.tp_report = stdout;
  bool pipelined = opt.pp > 1 || opt.vpp > 1 || opt.pp_layout || (report && strcmp(report, "pp") == 0);
  if (target || out) {
    if (!out) return drv_usage_error(cmd, "--target %s needs an output folder (-o DIR)", target);
    return drv_compile_to_dir(model, nargs, args, target, out, dtype, stdout, NULL);
  }
  if (drv_value(nargs, args, "--dtype"))
    return drv_usage_error(cmd, "--dtype applies to a target (--target cpu -o DIR)");
  CgOptions flags = {0};
  if (!cg_flags(cmd, nargs, args, &opt, &flags) || !check_layout(&opt, &flags, false)) return 1;
  /* Partitioning or a report only mean something with the passes that
   * partition: the first target's pipeline, without writing programs. */
  const char *pipeline = drv_value(nargs, args, "--passes");
  /* Without a target there is no program to cut: the IR printed is the
   * whole graph the target's program passes start from. */
  if (!pipeline && (pipelined || report || opt.tp > 1))
    pipeline = pass_graph_pipeline(cg_pipeline(NULL, pipelined), NULL);
  if (!pipeline) pipeline = pass_default_pipeline;
  /* --precision bf16 prices the report for a bf16 program (--target cuda). */
  bool bf16;
  if (!parse_precision(cmd, nargs, args, &bf16)) return 1;
  PassProgram *p = compile_graph(model, nargs, args, pipeline, &opt, 4, bf16 ? 2 : 0);
  if (p) pass_program_free(p);
  return p ? 0 : 1;
}

static const DrvOption no_options[] = {{NULL, NULL, NULL}};

const DrvCommand drv_passes_command = {"passes", "", "list the registered passes", NULL,
                                       no_options, drv_cmd_passes};

int drv_cmd_passes(int nargs, DrvArg *args) {
  if (nargs > 0)
    return drv_usage_error(&drv_passes_command, "unexpected argument '%s'", args[0].value);
  printf("registered passes (default pipeline: %s):\n", pass_default_pipeline);
  for (const Pass *p = pass_registry; p->name; p++)
    printf("  %-*s %s\n", pass_name_width(), p->name, p->doc);
  printf("targets (--target NAME) and their pipelines:\n");
  cg_print_targets(stdout);
  return 0;
}
