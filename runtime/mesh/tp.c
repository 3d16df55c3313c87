/* Tensor parallelism in the runtime (see tp.h). */
#include "tp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "ep.h"
#include "optim.h"
#include "util.h"

/* Byte counts of the tensor axis (the one the program talks on). */
typedef struct Count {
  int64_t sent, calls;
} Count;

static struct {
  int active; /* the communication layer was started */
  int world_rank, world_size;
  RtMesh mesh;
  RtComms *comms;
  RtComm *tensor; /* NULL when t = 1 */
  int tp, t;
  int comm_stats;
  Count begin[RT_AXIS_COUNT + 2], mark[RT_AXIS_COUNT + 2]; /* axes, expert groups (axis_counts) */
  Count excluded, excluded_at_mark; /* checkpoint gathers inside a step */
} tp = {.t = 1, .mesh = {1, 1, 1}};

int rt_tp_world_rank(void) { return tp.world_rank; }
int rt_tp_rank(void) { return tp.tp; }
int rt_tp_world_size(void) { return tp.comms ? tp.world_size : 1; }

/* On the world communicator, which the mesh axes' counters (--comm-stats)
 * do not count. */
double rt_tp_world_min(double x) {
  if (tp.comms && tp.world_size > 1) {
    x = -x;
    rt_comm_allreduce(tp.comms->world, &x, &x, 1, RT_COMM_F64, RT_COMM_MAX);
    x = -x;
  }
  return x;
}

int rt_tp_world_any(int x) {
  int32_t v = x != 0;
  if (tp.comms && tp.world_size > 1)
    rt_comm_allreduce(tp.comms->world, &v, &v, 1, RT_COMM_I32, RT_COMM_MAX);
  return v;
}

void rt_tp_world_barrier(void) {
  if (tp.comms && tp.world_size > 1) rt_comm_barrier(tp.comms->world);
}
int rt_tp_size(void) { return tp.t; }
RtComms *rt_tp_comms(void) { return tp.comms; }

/* ------------------------------------------------------------- starting */

/* Whether a launcher started this process as a rank of a job (Open MPI's
 * mpirun, or a PMI launcher such as srun or MPICH's hydra). */
static int under_launcher(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

/* A fatal error under MPI. When every rank fails the same way (a bad flag,
 * a missing file) one message is enough: the others give rank 0 a moment
 * to say it and take the job down before they speak. A rank that fails
 * alone is heard a moment later. */
static _Noreturn void fatal_hook(const char *message) {
  if (tp.world_rank != 0) {
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  rt_comm_fatal("%s", message);
}

static int axis_size(int n) { return n > 0 ? n : 1; }

int rt_tp_uses_mpi(const Rt *rt) {
  const RtModel *m = rt->model;
  RtMesh mesh = {axis_size(m->mesh_tp), axis_size(m->mesh_pp), axis_size(m->mesh_dp)};
  return rt_mesh_size(mesh) > 1 || under_launcher();
}

void rt_tp_init(Rt *rt, int *argc, char ***argv) {
  const RtModel *m = rt->model;
  tp.mesh = (RtMesh){axis_size(m->mesh_tp), axis_size(m->mesh_pp), axis_size(m->mesh_dp)};
  tp.comm_stats = (int)rt->f.comm_stats;
  rt->ctx.tp = 0;
  rt->ctx.tp_size = 1;
  rt->ctx.tp_comm = NULL;
  rt->mesh = tp.mesh;
  rt->coord = (RtCoord){0, 0, 0};
  if (!rt_mesh_valid(tp.mesh))
    rt_fatal(m->name, "internal error: the program's mesh t=%d p=%d d=%d is invalid", tp.mesh.tp,
             tp.mesh.pp, tp.mesh.dp);
  int need = rt_mesh_size(tp.mesh);
  if (!rt_tp_uses_mpi(rt)) return; /* one rank: no MPI at all */
  rt_comm_init(argc, argv);
  tp.active = 1;
  tp.world_rank = rt_comm_world_rank();
  tp.world_size = rt_comm_world_size();
  if (tp.world_size > 1) rt_fatal_hook = fatal_hook;
  if (tp.world_size != need && tp.mesh.pp == 1)
    rt_fatal(NULL,
             "this program was compiled for t=%d x p=%d x d=%d = %d rank%s, but the job has %d "
             "(start it with `shardc run MODEL --tp %d --dp %d ...` or mpirun -np %d)",
             tp.mesh.tp, tp.mesh.pp, tp.mesh.dp, need, need == 1 ? "" : "s", tp.world_size,
             tp.mesh.tp, tp.mesh.dp, need);
  /* A pipeline runs one program per stage, each on t*d ranks. */
  if (tp.world_size != need)
    rt_fatal(NULL,
             "this program was compiled for t=%d x p=%d x d=%d = %d ranks, but the job has %d "
             "(start it with `shardc run`, or mpirun -np %d DIR/stage0 ARGS : -np %d DIR/stage1 "
             "ARGS ... with all %d stages)",
             tp.mesh.tp, tp.mesh.pp, tp.mesh.dp, need, tp.world_size, tp.mesh.tp * tp.mesh.dp,
             tp.mesh.tp * tp.mesh.dp, tp.mesh.pp);
  if (rt->f.gradcheck && tp.world_size > 1)
    rt_fatal("--gradcheck", "runs on one rank: compile the model without --tp, --pp and --dp");
  tp.comms = rt_comms_new(tp.mesh);
  tp.tp = tp.comms->coord.tp;
  rt->coord = tp.comms->coord;
  tp.t = tp.mesh.tp;
  tp.tensor = tp.t > 1 ? tp.comms->axis[RT_AXIS_TENSOR] : NULL;
  rt->ctx.tp = tp.tp;
  rt->ctx.tp_size = tp.t;
  rt->ctx.tp_comm = tp.tensor;
  /* Stage programs launched out of order would talk to the wrong peers. */
  if (rt->coord.pp != m->stage)
    rt_fatal(NULL,
             "this rank is pipeline stage %d but runs the program of stage %d: launch the "
             "stage programs in order (mpirun -np %d DIR/stage0 ARGS : -np %d DIR/stage1 ARGS ...)",
             rt->coord.pp, m->stage, tp.mesh.tp * tp.mesh.dp,
             tp.mesh.tp * tp.mesh.dp);
  /* Every rank computes the same losses: one of them reports. */
  if (tp.world_rank != 0) {
    rt_quiet = 1;
    rt->f.log_json = NULL;
  }
  rt_ep_init(rt, tp.comms->axis[RT_AXIS_DATA]);
  if (tp.world_size > 1)
    rt_say("mesh t=%d x p=%d x d=%d: %d ranks under MPI (rank 0 reports; parameter counts "
           "below are one rank's)\n",
           tp.mesh.tp, tp.mesh.pp, tp.mesh.dp, tp.world_size);
}

void rt_tp_finalize(Rt *rt) {
  (void)rt;
  if (!tp.active) return;
  fflush(stdout);
  rt_ep_finalize();
  rt_comms_free(tp.comms);
  tp.comms = NULL;
  tp.tensor = NULL;
  rt_fatal_hook = NULL;
  rt_comm_finalize();
  tp.active = 0;
}

/* ------------------------------------------------------ whole tensors */

static int has_global(const RtParam *p) { return p->split || p->unpadded > 0 || p->expert; }

void rt_tp_full_shape(const RtParam *p, int64_t *shape) {
  for (int d = 0; d < p->rank; d++)
    shape[d] = has_global(p) && p->global_shape[d] > 0 ? p->global_shape[d] : p->shape[d];
  if (p->unpadded > 0) shape[p->pad_dim] = p->unpadded;
}

int64_t rt_tp_full_numel(const RtParam *p) {
  int64_t shape[RT_MAX_RANK], n = 1;
  rt_tp_full_shape(p, shape);
  for (int d = 0; d < p->rank; d++) n *= shape[d];
  return n;
}

/* rt_tp_full_index for tensor rank r and expert rank x. */
static int64_t full_index(const RtParam *p, int r, int x, int64_t i) {
  if (!has_global(p)) return i;
  int64_t idx[RT_MAX_RANK] = {0}, full[RT_MAX_RANK], rem = i;
  for (int d = p->rank - 1; d >= 0; d--) {
    idx[d] = rem % p->shape[d];
    rem /= p->shape[d];
  }
  if (p->split) {
    /* Block b of the whole holds this rank's pn entries at offset r * pn. */
    int sd = p->split_dim, k = p->split_blocks > 1 ? p->split_blocks : 1;
    int64_t pn = p->shape[sd] / k, b = idx[sd] / pn, w = idx[sd] % pn;
    idx[sd] = b * (p->global_shape[sd] / k) + (int64_t)r * pn + w;
  }
  /* An expert parameter holds expert rank x's experts. */
  if (p->expert) idx[0] += (int64_t)x * p->shape[0];
  rt_tp_full_shape(p, full);
  if (p->unpadded > 0 && idx[p->pad_dim] >= p->unpadded) return -1;
  int64_t flat = 0;
  for (int d = 0; d < p->rank; d++) flat = flat * full[d] + idx[d];
  return flat;
}

int64_t rt_tp_full_index(const RtParam *p, int r, int64_t i) {
  return full_index(p, r, rt_ep_rank(), i);
}

/* Counts what a checkpoint gather sends, to leave it out of --comm-stats. */
static Count tensor_count(void) {
  if (!tp.tensor) return (Count){0, 0};
  RtCommStats s = rt_comm_stats(tp.tensor);
  int64_t calls = 0;
  for (int k = 0; k < RT_COMM_NKINDS; k++)
    if (k != RT_COMM_RECV) calls += s.calls[k];
  return (Count){s.sent, calls};
}

/* full[index of element i of rank r's part] = part[i] for r's part, of
 * expert rank x. */
static void place(const RtParam *p, int r, int x, const real *part, real *full) {
  if (!has_global(p)) {
    memcpy(full, part, (size_t)p->numel * sizeof *full);
    return;
  }
#pragma omp parallel for schedule(static) if (p->numel >= 65536)
  for (int64_t i = 0; i < p->numel; i++) {
    int64_t g = full_index(p, r, x, i);
    if (g >= 0) full[g] = part[i];
  }
}

void rt_tp_gather(const RtParam *p, const real *part, real *full) {
  if (p->expert && rt_ep_comm()) {
    /* The experts of a layer are E parts over the expert group (not
     * split over the tensor axis): gathered on expert rank 0. */
    int E = rt_ep_size();
    real *all = rt_xmalloc((size_t)(p->numel * E) * sizeof *all);
    rt_comm_allgather(rt_ep_comm(), part, all, p->numel, RT_COMM_REAL);
    if (tp.tp == 0 && rt_ep_rank() == 0)
      for (int x = 0; x < E; x++) place(p, 0, x, all + (int64_t)x * p->numel, full);
    free(all);
    return;
  }
  if (!tp.tensor || !p->split) {
    /* Replicated: tensor-parallel rank 0 holds the whole already. */
    if (tp.tp == 0) place(p, 0, 0, part, full);
    return;
  }
  real *all = rt_xmalloc((size_t)(p->numel * tp.t) * sizeof *all);
  Count before = tensor_count();
  rt_comm_allgather(tp.tensor, part, all, p->numel, RT_COMM_REAL);
  Count after = tensor_count();
  tp.excluded.sent += after.sent - before.sent;
  tp.excluded.calls += after.calls - before.calls;
  if (tp.tp == 0)
    for (int q = 0; q < tp.t; q++) place(p, q, 0, all + (int64_t)q * p->numel, full);
  free(all);
}

void rt_tp_take(const RtParam *p, const real *full, real *part) {
  if (!has_global(p)) {
    memcpy(part, full, (size_t)p->numel * sizeof *part);
    return;
  }
#pragma omp parallel for schedule(static) if (p->numel >= 65536)
  for (int64_t i = 0; i < p->numel; i++) {
    int64_t g = rt_tp_full_index(p, tp.tp, i);
    part[i] = g >= 0 ? full[g] : 0;
  }
}

/* ------------------------------------------------------------- a step */

double rt_tp_grad_norm(Rt *rt) {
  const RtModel *m = rt->model;
  double *sq = rt_xmalloc((size_t)(m->nparams > 0 ? m->nparams : 1) * sizeof *sq);
  rt_param_sum_squares(m, rt->ctx.grads, sq);
  /* In parameter order, so that every run adds the same way. */
  double split = 0, replicated = 0;
  for (int p = 0; p < m->nparams; p++) {
    if (m->params[p].split) split += sq[p];
    else replicated += sq[p];
  }
  free(sq);
  if (tp.tensor) rt_comm_allreduce(tp.tensor, &split, &split, 1, RT_COMM_F64, RT_COMM_SUM);
  return sqrt(split + replicated);
}

/* What c sent so far (nothing for NULL). */
static Count comm_count(RtComm *c) {
  Count n = {0, 0};
  if (!c) return n;
  RtCommStats s = rt_comm_stats(c);
  n.sent = s.sent;
  for (int k = 0; k < RT_COMM_NKINDS; k++)
    if (k != RT_COMM_RECV) n.calls += s.calls[k];
  return n;
}

/* The mesh's axes, then (--ep) the expert group and the same-expert ranks. */
static void axis_counts(Count *out) {
  for (int a = 0; a < RT_AXIS_COUNT; a++) out[a] = comm_count(tp.comms ? tp.comms->axis[a] : NULL);
  out[RT_AXIS_COUNT] = comm_count(rt_ep_comm());
  out[RT_AXIS_COUNT + 1] = comm_count(rt_ep_replicas());
}

void rt_tp_step_begin(Rt *rt) {
  (void)rt;
  if (!tp.comm_stats) return;
  axis_counts(tp.begin);
  tp.excluded = (Count){0, 0};
}

void rt_tp_step_mark(Rt *rt) {
  (void)rt;
  if (!tp.comm_stats) return;
  axis_counts(tp.mark);
  tp.excluded_at_mark = tp.excluded;
}

/* One line per rank and step; printed whatever --quiet says, since it was
 * asked for, and by every rank, since each sends its own bytes. */
void rt_tp_step_end(Rt *rt, int64_t step) {
  (void)rt;
  if (!tp.comm_stats) return;
  Count end[RT_AXIS_COUNT + 2];
  axis_counts(end);
  Count *b = tp.begin, *m = tp.mark;
  int64_t prog = m[RT_AXIS_TENSOR].sent - b[RT_AXIS_TENSOR].sent - tp.excluded_at_mark.sent;
  int64_t prog_calls =
      m[RT_AXIS_TENSOR].calls - b[RT_AXIS_TENSOR].calls - tp.excluded_at_mark.calls;
  int64_t run = end[RT_AXIS_TENSOR].sent - m[RT_AXIS_TENSOR].sent -
                (tp.excluded.sent - tp.excluded_at_mark.sent);
  int64_t run_calls = end[RT_AXIS_TENSOR].calls - m[RT_AXIS_TENSOR].calls -
                      (tp.excluded.calls - tp.excluded_at_mark.calls);
  printf("comm: rank %d step %lld | tensor: program %lld bytes (%lld calls), runtime %lld bytes "
         "(%lld calls) | pipeline: %lld bytes | data: %lld bytes\n",
         tp.world_rank, (long long)step, (long long)prog, (long long)prog_calls, (long long)run,
         (long long)run_calls, (long long)(end[RT_AXIS_PIPELINE].sent - b[RT_AXIS_PIPELINE].sent),
         (long long)(end[RT_AXIS_DATA].sent - b[RT_AXIS_DATA].sent));
  /* --ep: the tokens' all_to_alls (as many as the router sends, which the
   * comm report's balanced figure only estimates) and the experts' sums. */
  if (rt_ep_comm())
    printf("comm: rank %d step %lld | expert: %lld bytes (%lld calls) | same experts: %lld bytes\n",
           tp.world_rank, (long long)step,
           (long long)(end[RT_AXIS_COUNT].sent - b[RT_AXIS_COUNT].sent),
           (long long)(end[RT_AXIS_COUNT].calls - b[RT_AXIS_COUNT].calls),
           (long long)(end[RT_AXIS_COUNT + 1].sent - b[RT_AXIS_COUNT + 1].sent));
  fflush(stdout);
}

const void *rt_tp_gather_row(const void *part, int64_t cols, int bf16, void *whole) {
  if (!tp.tensor) return part;
  rt_comm_allgather(tp.tensor, part, whole, cols, bf16 ? RT_COMM_BF16 : RT_COMM_REAL);
  return whole;
}
