/* The f64 graph interpreter the numeric test programs share (gradcheck,
 * tpsim): a tensor per value id, a deterministic random stream, and an
 * executor for every op of ir/ops.def that runs on one rank, over the CPU
 * kernels. What depends on the program (collectives, several ranks) stays
 * with the program: ti_exec reports the nodes it leaves to the caller. */
#ifndef SHARD_TESTS_INTERP_H
#define SHARD_TESTS_INTERP_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"
#include "kernels.h"

/* Dropout draws its mask from (TI_SEED, site, index) like the generated
 * programs, so a loss is a deterministic function of the parameters. */
#define TI_SEED 1234

typedef struct TiTensor {
  real *r;      /* float tensors */
  int32_t *i;   /* integer tensors */
  int64_t n;
} TiTensor;

/* The table ti_exec reads and writes, by value id, and the attention
 * kernels' scratch (ti_init allocates it). */
extern TiTensor *ti_tensors;
extern real *ti_scratch;
/* The program's name, in the messages of die(). */
extern const char *ti_prog;

void ti_init(const char *prog);
TiTensor *ti_t(const IrValue *v);
real *ti_r(const IrValue *v);
int64_t ti_numel(const IrValue *v);
int64_t ti_last(const IrValue *v);
int64_t ti_dim(const IrValue *v, int d);

uint64_t ti_rng_next(void);
double ti_rng_normal(void);

/* Runs one node on ti_tensors; false for a node that spans ranks
 * (collectives, pp_boundary), which the caller runs. */
bool ti_exec(IrNode *n);

/* A table for every value of g: inputs, parameters, node outputs. */
TiTensor *ti_alloc_graph(const IrGraph *g);
/* Integer inputs are ids: below every table and vocabulary they index. */
int64_t ti_id_bound(const IrGraph *g, const IrValue *v);
/* The graph's one scalar output. */
const IrValue *ti_find_loss(const IrGraph *g);
/* Parses and verifies an .ir file (exit 2 when unreadable, 1 when wrong);
 * *text holds the source the graph points into. */
IrGraph *ti_load(const char *path, char **text);

#endif
