/* shardc: compiles transformer models written in the .shard language into
 * one training program per rank. This file dispatches the subcommands. */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

#define SHARDC_VERSION "0.1.0"

static const DrvCommand *const commands[] = {
    &drv_compile_command, &drv_build_command, &drv_run_command, &drv_sample_command,
    &drv_info_command,    &drv_data_command,  &drv_passes_command, &drv_schedule_command,
    &drv_hw_command,      &drv_simulate_command, &drv_plan_command, &drv_compare_trace_command,
    &drv_export_command};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static void print_main_help(void) {
  printf("usage: shardc COMMAND [options]\n\n"
         "shardc compiles a transformer model written in the .shard language\n"
         "(see docs/language.md) for tensor, pipeline and data parallel training.\n\n"
         "commands:\n");
  int w = 10;
  for (int i = 0; i < NCOMMANDS; i++)
    if ((int)strlen(commands[i]->name) > w) w = (int)strlen(commands[i]->name);
  for (int i = 0; i < NCOMMANDS; i++)
    printf("  %-*s %s\n", w, commands[i]->name, commands[i]->summary);
  printf("  %-*s %s\n", w, "help", "help on a command: shardc help COMMAND");
  printf("\noptions:\n  --help      show this help\n  --version   print the version\n"
         "\n`shardc COMMAND --help` lists the options of each command.\n");
}

static const DrvCommand *find_command(const char *name) {
  for (int i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i]->name, name) == 0) return commands[i];
  return NULL;
}

int main(int argc, char **argv) {
  atexit(ir_arena_free_all);
  if (argc < 2) {
    print_main_help();
    return 1;
  }
  const char *name = argv[1];
  /* Not a command for people: what mpirun starts under `shardc run`. */
  if (strcmp(name, DRV_RANK_PARENT_COMMAND) == 0) return drv_rank_parent(argc - 2, argv + 2);
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
    print_main_help();
    return 0;
  }
  if (strcmp(name, "--version") == 0) {
    printf("shardc %s\n", SHARDC_VERSION);
    return 0;
  }
  if (strcmp(name, "help") == 0) {
    if (argc < 3) {
      print_main_help();
      return 0;
    }
    const DrvCommand *cmd = find_command(argv[2]);
    if (!cmd) {
      fprintf(stderr, "shardc: error: no command '%s' (see `shardc --help`)\n", argv[2]);
      return 1;
    }
    drv_print_help(cmd);
    return 0;
  }
  const DrvCommand *cmd = find_command(name);
  if (!cmd) {
    fprintf(stderr, "shardc: error: unknown command '%s' (see `shardc --help`)\n", name);
    return 1;
  }
  /* `run` passes the options it does not know to the training program. */
  if (cmd == &drv_run_command) return drv_cmd_run(argc - 2, argv + 2);
  DrvArg *args = NULL;
  int nargs = drv_parse_args(cmd, argc - 2, argv + 2, &args);
  if (nargs == -2) return 0;
  if (nargs < 0) return 1;
  return cmd->run(nargs, args);
}
