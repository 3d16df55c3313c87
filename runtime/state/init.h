/* The initial weights (init.c). */
#ifndef SHARD_RT_INIT_H
#define SHARD_RT_INIT_H

#include <stdint.h>

#include "rt.h"

/* The initial weights, a function of --seed and each name, into a
 * host array laid out like the weights region (main.c copies it to the
 * device). */
void rt_init_params(const RtModel *m, real *weights, uint64_t seed);

#endif
