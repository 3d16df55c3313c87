/* `shardc compile` and `shardc passes`: run the pass pipeline over a model. */
#include <string.h>

#include "driver.h"

static const DrvOption compile_options[] = {
    DRV_DEFINE_OPTION,
    {"--emit-ir", NULL, "print the IR after the pipeline"},
    {"--passes", "a,b,c", "run these passes instead of the default pipeline (empty: none)"},
    {"--print-after", "PASS", "print the IR after each run of PASS"},
    {"--print-after-all", NULL, "print the IR after every pass"},
    {"--verify-each", NULL, "run the verifier after every pass and name the pass that broke it"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_compile_command = {
    "compile", "MODEL [options]", "compile a model (.shard, or printed IR .ir) through the passes",
    "Reads MODEL, applies -D overrides and runs the pass pipeline (by default\n"
    "fold,shape,verify; `shardc passes` lists them). Errors are reported as\n"
    "file:line:col with the source line, and the exit status is 1.",
    compile_options, drv_cmd_compile};

int drv_cmd_compile(int nargs, DrvArg *args) {
  const char *model = drv_model_arg(&drv_compile_command, nargs, args);
  if (!model) return 1;
  const char *pipeline = drv_value(nargs, args, "--passes");
  const char *print_after = drv_value(nargs, args, "--print-after");
  if (print_after && !pass_find(print_after))
    return drv_usage_error(&drv_compile_command, "--print-after: no pass named '%s'", print_after);
  IrGraph *g = drv_load_model(model, nargs, args);
  if (!g) return 1;
  PassOptions opt = {0};
  PassManagerFlags flags = {
      .print_after = print_after,
      .print_after_all = drv_flag(nargs, args, "--print-after-all"),
      .verify_each = drv_flag(nargs, args, "--verify-each"),
      .print_stream = stdout,
  };
  if (!pass_run_pipeline(&g, pipeline ? pipeline : pass_default_pipeline, &opt, &flags))
    return 1;
  if (ir_error_count() > 0) return 1;
  if (drv_flag(nargs, args, "--emit-ir")) ir_print(stdout, g);
  return 0;
}

static const DrvOption no_options[] = {{NULL, NULL, NULL}};

const DrvCommand drv_passes_command = {"passes", "", "list the registered passes", NULL,
                                       no_options, drv_cmd_passes};

int drv_cmd_passes(int nargs, DrvArg *args) {
  if (nargs > 0)
    return drv_usage_error(&drv_passes_command, "unexpected argument '%s'", args[0].value);
  printf("registered passes (default pipeline: %s):\n", pass_default_pipeline);
  for (const Pass *p = pass_registry; p->name; p++) printf("  %-12s %s\n", p->name, p->doc);
  return 0;
}
