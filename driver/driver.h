/* The shardc command: subcommands share option parsing and model loading. */
#ifndef SHARDC_DRIVER_H
#define SHARDC_DRIVER_H

#include <stdbool.h>

#include "../frontend/frontend.h"
#include "../ir/ir.h"
#include "../passes/passes.h"

struct CgPlans; /* codegen/codegen.h */

/* One flag of a subcommand, for parsing and for --help. */
typedef struct DrvOption {
  const char *name;  /* "--emit-ir", "-D" */
  const char *value; /* NULL for a switch, else the value's name in --help ("NAME=VALUE") */
  const char *help;  /* DRV_SCHEDULE_HELP stands for the --schedule line */
} DrvOption;

/* A parsed flag. */
typedef struct DrvArg {
  const DrvOption *opt; /* NULL for a positional argument */
  const char *value;
  int argi;             /* position in argv, for "<command line>" locations */
} DrvArg;

typedef struct DrvCommand {
  const char *name;
  const char *usage;   /* "MODEL [options]" */
  const char *summary; /* one line for `shardc --help` */
  const char *details; /* paragraphs after the usage line, or NULL */
  const DrvOption *options;
  int (*run)(int nargs, DrvArg *args);
} DrvCommand;

/* Parses argv against the command's options. --name=value and --name value
 * both work, and -Dname=value like -D name=value. Returns the number of
 * parsed arguments, or -1 after printing an error (unknown flag, missing
 * value). --help prints the command's help and returns -2. */
int drv_parse_args(const DrvCommand *cmd, int argc, char **argv, DrvArg **out);
void drv_print_help(const DrvCommand *cmd);
/* The command's long option nearest to name[0..len) (at most two edits
 * away), for "did you mean": NULL when none is that near. */
const char *drv_nearest_option(const DrvCommand *cmd, const char *name, size_t len);
/* Reports a usage error for the command and returns 1 (the exit status). */
int drv_usage_error(const DrvCommand *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
bool drv_flag(int nargs, DrvArg *args, const char *name);
const char *drv_value(int nargs, DrvArg *args, const char *name);

/* Options every model-reading command takes. */
#define DRV_DEFINE_OPTION {"-D", "NAME=VALUE", "override a config value of the model (repeatable)"}

/* Stands, in a command's table, for the options of every codegen target
 * (CgTarget.options, codegen/targets.c) with their help: a new target
 * brings its own without an edit of the driver. drv_parse_args and
 * drv_print_help know the entry by its name's address. */
extern const char DRV_TARGET_OPTIONS_NAME[];
#define DRV_TARGET_OPTIONS {DRV_TARGET_OPTIONS_NAME, NULL, NULL}

/* Loads a model (.shard through the frontend, .ir through the IR parser)
 * and applies every -D override. Returns NULL after reporting errors. */
IrGraph *drv_load_model(const char *path, int nargs, DrvArg *args);
/* Loads, overrides and runs the default pipeline (fold, shape, verify). */
IrGraph *drv_load_and_check(const char *path, int nargs, DrvArg *args);
/* The whole file, NUL-terminated, from the arena (its length in *len), or
 * NULL after reporting that it cannot be read. */
char *drv_read_file(const char *path, size_t *len);
/* The one positional argument (the model file), or NULL after an error. */
const char *drv_model_arg(const DrvCommand *cmd, int nargs, DrvArg *args);

/* The tensor-parallel flags every compiling command shares. */
#define DRV_TP_OPTIONS                                                                         \
  {"--tp", "N", "tensor-parallel size: split each layer over N ranks (default 1)"},            \
      {"--sequence-parallel", NULL, "with --tp: run norms, dropout and residuals on sequence slices"}, \
      {"--tp-strategy", "megatron|none",                                                       \
       "how params are split: Megatron-LM's placement (default), or only the model's annotations"}, \
      {"--vocab-multiple", "M", "pad the vocabulary to a multiple of M * t (default 128; 0: no padding)"}

/* The help of --schedule is built when printed, from the schedule
 * registry (its names and defaults), so that a new schedule is listed
 * without an edit here; drv_print_help knows this string by its address. */
extern const char DRV_SCHEDULE_HELP[];

/* The flags that shape a schedule beyond its name, shared by `shardc
 * schedule`, `compile` and `run`: Megatron-LM's microbatch group of the
 * interleaved schedule, and a schedule read from a file. */
#define DRV_SCHEDULE_OPTIONS                                                                   \
  {"--vpp-group", "N", "interleaved: run microbatches in groups of N, p <= N <= m (default p); " \
   "m need not be a multiple of p"},                                                           \
      {"--schedule-file", "FILE", "read the schedule from FILE: each stage's compute order, one " \
       "line per stage (docs/schedules.md); not with --schedule"}

/* The pipeline and data-parallel flags of `shardc compile` and `shardc run`. */
#define DRV_PP_OPTIONS                                                                         \
  {"--pp", "P", "pipeline stages (default 1)"},                                                \
      {"--vpp", "V", "model chunks per pipeline stage, interleaving (default 1)"},             \
      {"--pp-layout", "N0,N1,...", "layers per virtual stage, one count each in order (default: " \
       "even, else balanced by cost)"},                                                        \
      {"--no-scatter-gather", NULL, "with --tp and no --sequence-parallel: send each pipeline " \
       "message whole, not as each tensor rank's 1/t slice all-gathered on arrival"},         \
      {"--schedule", "NAME", DRV_SCHEDULE_HELP},                                               \
      DRV_SCHEDULE_OPTIONS,                                                                    \
      {"--global-batch", "N", "sequences per step; the schedule runs m = N / (microbatch x dp) " \
       "microbatches (default m = 8)"},                                                        \
      {"--dp", "D", "data-parallel replicas (default 1)"},                                     \
      {"--ep", "E", "expert ranks out of the data-parallel ones: each holds 1/E of every routed " \
       "layer's experts (E divides --dp and the experts; default 1)"},                        \
      {"--zero", "0|1", "1: shard the optimizer state over the data-parallel replicas (ZeRO-1)"}, \
      {"--bucket-mb", "MB", "size of a data-parallel gradient bucket in MiB (default 25)"}

/* Activation recomputation, shared by `shardc compile` and `shardc run`. */
#define DRV_RECOMPUTE_OPTIONS                                                                  \
  {"--recompute", "none|selective|full", "run forward ops again in the backward instead of "   \
   "keeping their results: none (default), the attention core, every layer"},                  \
      {"--recompute-layers", "N", "--recompute full: layers per checkpoint, each keeping only " \
       "its input (default 1)"}

/* --tp, --sequence-parallel, --tp-strategy, --vocab-multiple, --pp,
 * --vpp, --pp-layout, --no-scatter-gather, --dp, --world-size, --recompute and
 * --recompute-layers into pass options; false after
 * a usage error of cmd. */
bool drv_pass_options(const DrvCommand *cmd, int nargs, DrvArg *args, PassOptions *out);

/* --vpp-group N (0 when not given) and --schedule-file FILE (NULL when not
 * given; never with --schedule); false after a usage error of cmd. */
bool drv_schedule_options(const DrvCommand *cmd, int nargs, DrvArg *args, int *vpp_group,
                          const char **schedule_file);

/* --dtype f32|f64 (default f32); false after a usage error. */
bool drv_parse_dtype(const DrvCommand *cmd, int nargs, DrvArg *args, IrDType *out);
/* --microbatch B becomes -D batch=B, appended to the args (so it wins over
 * an earlier -D batch); false after a usage error. */
bool drv_apply_microbatch(const DrvCommand *cmd, int *nargs, DrvArg **args);
/* Loads MODEL, runs the target's pipeline (or --passes) and writes the rank
 * programs into out_dir, printing the memory plan to plan_out and, when
 * plans is not NULL, handing every program's plan there. Returns the exit
 * status. */
int drv_compile_to_dir(const char *model, int nargs, DrvArg *args, const char *target,
                       const char *out_dir, IrDType dtype, FILE *plan_out, struct CgPlans *plans);

int drv_cmd_compile(int nargs, DrvArg *args);
int drv_cmd_build(int nargs, DrvArg *args);
int drv_cmd_run(int argc, char **argv);
/* The most ranks `shardc run` starts on one machine. */
#define DRV_RUN_MAX_RANKS 1024

/* How `shardc run` starts its ranks (launch.c): --launcher mpirun|srun
 * (default srun inside a Slurm allocation, else mpirun) and mpirun's
 * --hostfile FILE. */
#define DRV_LAUNCH_OPTIONS                                                                     \
  {"--launcher", "mpirun|srun", "start the ranks with mpirun or Slurm's srun (default: srun "  \
   "inside a Slurm allocation, else mpirun)"},                                                 \
      {"--hostfile", "FILE", "mpirun: start the ranks on the machines of this host file"}
typedef enum DrvLauncher { DRV_LAUNCH_MPIRUN, DRV_LAUNCH_SRUN } DrvLauncher;
typedef struct DrvLaunch {
  DrvLauncher kind;
  const char *hostfile; /* mpirun --hostfile, or NULL */
  bool named;           /* --launcher or --hostfile given: even one rank is launched */
  int nodes;            /* the machines the ranks spread over */
} DrvLaunch;
/* Whether o is one of DRV_LAUNCH_OPTIONS (they do not shape the programs). */
bool drv_launch_option(const DrvOption *o);
/* The launcher of a run, checked (a bad name, a host file that cannot be
 * read, srun not on PATH); false after a usage error of cmd. */
bool drv_launch_choose(const DrvCommand *cmd, int nargs, DrvArg *args, DrvLaunch *out);
/* The most ranks one machine runs: ranks over the launch's machines. */
int drv_launch_ranks_per_node(const DrvLaunch *l, int ranks);
/* srun's command line for nprograms programs of per ranks each (in rank
 * order), each with argv[1..], writing its --multi-prog file into dir and
 * the recipe's environment (OMP_NUM_THREADS = threads) into ours; NULL
 * after an error it printed. */
char **drv_srun_argv(const char *const *programs, int nprograms, int per, char **argv,
                     const char *threads, const char *dir);
/* DIR/launch.sh from DIR/manifest.json: a POSIX sh script that starts every
 * rank with its program under mpirun or srun; false after an error. */
bool drv_write_launch_script(const char *dir);
/* launch_script.c: launch.sh's text from manifest.json's (*out malloc'd,
 * for the caller to free); false with the reason in err when the text is
 * not a manifest whose every rank names a program by a plain file name. */
bool drv_launch_script_text(const char *manifest, char **out, size_t *len, const char **err);
/* The most ranks a launch script starts. */
#define DRV_LAUNCH_MAX_RANKS 1048576
/* memcheck.c: the programs' memory plans (each program run by
 * ranks_per_program ranks of this machine) against the memory available:
 * SHARDC_MEMORY_LIMIT, else MemAvailable when the plan is in host memory.
 * False after one error line giving both. */
bool drv_check_memory(const struct CgPlans *plans, int ranks_per_program, bool host_memory);
/* rankwrap.c: `shardc __rank PROGRAM ARGS...`, the parent of each rank
 * under shardc run, which records how the rank ended. */
int drv_rank_parent(int argc, char **argv);
#define DRV_RANK_PARENT_COMMAND "__rank"
int drv_cmd_sample(int nargs, DrvArg *args);
int drv_cmd_info(int nargs, DrvArg *args);
int drv_cmd_passes(int nargs, DrvArg *args);
int drv_cmd_data(int nargs, DrvArg *args);
int drv_cmd_schedule(int nargs, DrvArg *args);
int drv_cmd_hw(int nargs, DrvArg *args);
int drv_cmd_compare_trace(int nargs, DrvArg *args);
/* `shardc hw --measure -o FILE` (measure.c). */
int drv_hw_measure(const DrvCommand *cmd, int nargs, DrvArg *args);
int drv_cmd_simulate(int nargs, DrvArg *args);
int drv_cmd_plan(int nargs, DrvArg *args);
int drv_cmd_export(int nargs, DrvArg *args);

extern const DrvCommand drv_compile_command, drv_info_command, drv_passes_command,
    drv_data_command, drv_build_command, drv_run_command, drv_sample_command,
    drv_schedule_command, drv_hw_command, drv_simulate_command,
    drv_plan_command, drv_compare_trace_command, drv_export_command;

#endif
