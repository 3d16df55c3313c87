/* --gradcheck: the analytic gradient against central differences. */
#ifndef SHARD_RT_GRADCHECK_H
#define SHARD_RT_GRADCHECK_H

#include "rt.h"

/* Returns the exit status: 0 when every tensor's largest relative error is
 * within --gradcheck-tol, 1 otherwise. */
int rt_gradcheck(Rt *rt);

#endif
