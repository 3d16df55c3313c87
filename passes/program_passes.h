/* What the program passes show and check besides their run functions
 * (passes.h): the printers for --print-after and the verifiers for
 * --verify-each that registry.c names. Private to passes/. */
#ifndef SHARDC_PASSES_PROGRAM_PASSES_H
#define SHARDC_PASSES_PROGRAM_PASSES_H

#include <stdio.h>

#include "passes.h"

/* The verifier on the program's graphs: ir_verify on the whole graph, or
 * once pp-split has cut it, each chunk's own invariants (every value a
 * node reads is the chunk's input or parameter or computed before it; its
 * outputs are its own) and the messages between neighbouring virtual
 * stages (what k sends, k + 1 receives, part by part, in the same types).
 * Reports through ir_error naming `who` (pp_split.c). */
bool pass_verify_chunks(PassProgram *p, const char *who);

/* schedule: every stage's action table (schedule_pass.c); the tables
 * verified again, all stages together, for m microbatches. */
void pass_schedule_print(FILE *out, PassProgram *p);
bool pass_schedule_verify(PassProgram *p, const char *who);

/* bw-split: the chunks verified, and in each split chunk no B node after
 * the first W node (wsplit.c). */
bool pass_bw_split_verify(PassProgram *p, const char *who);

/* memplan: the program's graphs and each one's plan, region by region
 * (memplan.c); every graph has a plan for its current nodes, and every
 * buffer lies inside its region. */
void pass_memplan_print_program(FILE *out, PassProgram *p);
bool pass_memplan_verify(PassProgram *p, const char *who);

/* gemm-epilogue: the program's graphs and each chunk's epilogues, one
 * line per GEMM that has one (gemm_epilogue.c); the choice made on every
 * chunk's current plan, and each absorbed node owned by one GEMM before
 * it of the op its part needs. */
void pass_gemm_epilogue_print(FILE *out, PassProgram *p);
bool pass_gemm_epilogue_verify(PassProgram *p, const char *who);

#endif
