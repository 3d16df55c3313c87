/* The registry: every pass is one line here, so that `shardc passes` lists
 * it and `--passes=` can name it. */
#include <string.h>

#include "memplan.h"
#include "passes.h"
#include "program_passes.h"

const Pass pass_registry[] = {
    {"fold", "evaluate config values, dims and attributes to numbers", .run = pass_fold},
    {"shape", "infer the type of every node output from its op's shape rule", .run = pass_shape},
    {"verify", "check the IR invariants every pass must keep", .run = pass_verify},
    {"tp-annotate", "place the params over the tensor-parallel ranks (--tp-strategy megatron|none; "
     "model annotations win)", .run = pass_tp_annotate},
    {"vocab-pad", "pad vocabulary-split params to a multiple of --vocab-multiple * t; mask the "
     "padding in the loss", .run = pass_vocab_pad},
    {"tp-partition", "make the graph one tensor-parallel rank's: propagate specs, insert "
     "collectives, local shapes", .run = pass_tp_partition},
    {"tp-fuse", "turn tp_slice(all_reduce(x)) into reduce_scatter(x)", .run = pass_tp_fuse},
    {"unroll", "replace every repeat by count copies of its body (params named LABEL.i.NAME)",
     .run = pass_unroll},
    {"ep-partition", "--ep E: keep each expert rank's E/ep experts of every routed layer; send the "
     "tokens to them and back by all_to_all", .run = pass_ep_partition},
    {"pp-partition", "place layers on --pp stages x --vpp chunks (even, by cost, or --pp-layout); "
     "insert pp_boundary messages; copy tied params", .run = pass_pp_partition},
    {"autodiff", "append the backward nodes: the gradient of the scalar loss for every param",
     .run = pass_autodiff},
    {"recompute", "--recompute selective|full: copy forward nodes of each layer (group) into its "
     "backward and read the copies there, so their results are not kept", .run = pass_recompute},
    {"add-norm", "a residual add and the layernorm or rmsnorm of its sum as one op, and the norm "
     "gradient with the add of the residual's gradient", .run = pass_add_norm},
    /* The program passes: the last stages before codegen, whose results
     * hang on the program (PassProgram). */
    {"pp-split", "cut the graph into one chunk per virtual stage; pipeline messages become the "
     "chunks' inputs and outputs", .run_program = pass_pp_split},
    {"schedule", "the microbatches of a step (--global-batch); with --pp > 1 every stage's action "
     "table (--schedule), verified together", .run_program = pass_schedule,
     .print = pass_schedule_print, .verify = pass_schedule_verify},
    {"bw-split", "for a schedule with W actions: each chunk's backward as B (input gradient), "
     "then W (weight gradients)", .run_program = pass_bw_split, .verify = pass_bw_split_verify},
    {"memplan", "plan the offset of every buffer of each chunk's rank program by liveness",
     .run_program = pass_memplan, .print = pass_memplan_print_program, .verify = pass_memplan_verify},
    {"gemm-epilogue", "a GPU target's: the GELU, its gradient and bias gradients that run in a "
     "GEMM's epilogue, chosen on each chunk's memory plan (--no-gemm-epilogue: none)",
     .run_program = pass_gemm_epilogue, .print = pass_gemm_epilogue_print,
     .verify = pass_gemm_epilogue_verify},
    {NULL, NULL, NULL, NULL, NULL, NULL},
};

const char *const pass_default_pipeline = "fold,shape,verify";

int pass_name_width(void) {
  int width = 0;
  for (const Pass *p = pass_registry; p->name; p++)
    if ((int)strlen(p->name) > width) width = (int)strlen(p->name);
  return width;
}

const Pass *pass_find(const char *name) {
  for (const Pass *p = pass_registry; p->name; p++)
    if (strcmp(p->name, name) == 0) return p;
  return NULL;
}
