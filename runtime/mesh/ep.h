/* Expert parallelism in the runtime (--ep E): the communicators of the
 * expert groups, cut out of the data-parallel group. Megatron's layout:
 * data-parallel ranks dp = g * E + r form expert group g, in which rank r
 * holds the r-th E-th of every routed layer's experts; the ranks with the
 * same r in the d / E groups hold the same experts and sum their
 * gradients. A program without expert parallelism (RtModel.mesh_ep 0 or
 * 1) has neither communicator, and expert rank 0 of 1. */
#ifndef SHARD_RT_EP_H
#define SHARD_RT_EP_H

#include "rt.h"

/* Builds both communicators out of `data`, this rank's data-parallel group
 * (collective over it), and fills ctx.ep, ep_size and ep_comm; rt_tp_init
 * calls it once the mesh's communicators exist. */
void rt_ep_init(Rt *rt, struct RtComm *data);
void rt_ep_finalize(void);
/* This rank's index in its expert group, and E (1 without --ep). */
int rt_ep_rank(void);
int rt_ep_size(void);
/* The expert group (where tokens travel) and the group of ranks holding
 * the same experts (where their gradients are summed); NULL without --ep. */
struct RtComm *rt_ep_comm(void);
struct RtComm *rt_ep_replicas(void);

#endif
