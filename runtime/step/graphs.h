/* The calls of the chunk functions (graphs.c), as CUDA graphs where they
 * may be. */
#ifndef SHARD_RT_GRAPHS_H
#define SHARD_RT_GRAPHS_H

#include "rt.h"

typedef enum RtChunkFn { RT_FN_FORWARD, RT_FN_BACKWARD, RT_FN_WGRAD } RtChunkFn;
/* Runs function f of chunk c on rt->ctx: as a CUDA graph where the
 * program says it may be captured (RtModel.graphs) and --cuda-graphs is
 * on, else as a plain call; first the step's values the program's
 * captured kernels read (RtGraphs.step_values). */
void rt_chunk_call(Rt *rt, int c, RtChunkFn f);
/* For the banner of a CUDA program: which functions run as graphs, which
 * do not and why. */
void rt_graphs_describe(const Rt *rt, char *buf, int len);
/* Prints how many graphs were captured and replayed (when any function
 * ran through them) and frees them. */
void rt_graphs_finish(Rt *rt);

#endif
