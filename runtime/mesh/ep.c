/* The expert groups of --ep (ep.h). */
#include "ep.h"

#include "comm.h"

static struct {
  int rank, size;
  RtComm *group, *replicas;
} ep = {0, 1, NULL, NULL};

int rt_ep_rank(void) { return ep.rank; }
int rt_ep_size(void) { return ep.size; }
RtComm *rt_ep_comm(void) { return ep.group; }
RtComm *rt_ep_replicas(void) { return ep.replicas; }

void rt_ep_init(Rt *rt, RtComm *data) {
  int E = rt->model->mesh_ep;
  rt->ctx.ep = 0, rt->ctx.ep_size = 1, rt->ctx.ep_comm = NULL;
  if (E <= 1) return;
  if (rt->mesh.dp % E)
    rt_fatal(NULL, "internal error: --ep %d does not divide the %d data-parallel ranks", E,
             rt->mesh.dp);
  int dp = rt->coord.dp;
  ep.size = E;
  ep.rank = dp % E;
  ep.group = rt_comm_split(data, dp / E, dp % E, "expert");
  ep.replicas = rt_comm_split(data, dp % E, dp / E, "expert replicas");
  rt->ctx.ep = ep.rank;
  rt->ctx.ep_size = E;
  rt->ctx.ep_comm = ep.group;
}

void rt_ep_finalize(void) {
  rt_comm_free(ep.group);
  rt_comm_free(ep.replicas);
  ep.group = ep.replicas = NULL;
  ep.rank = 0, ep.size = 1;
}
