/* The rank layout of a t x p x d cluster (tensor, pipeline, data parallel),
 * as Megatron-LM lays it out.
 *
 * Tensor-parallel ranks are consecutive, so that the group that talks most
 * (two all-reduces per layer, forward and backward) shares a node; then come
 * the data-parallel replicas, then the pipeline stages:
 *
 *     rank = tp + t * (dp + d * pp)
 *
 * With t=2, p=2, d=2: ranks 0,1 are the tensor group of (dp 0, pp 0), ranks
 * 0,2 a data group, ranks 0,4 a pipeline. The embedding group joins the
 * first and the last pipeline stage of the same (tp, dp): it all-reduces the
 * two copies of a tied embedding's gradient.
 *
 * Everything here is arithmetic without state or dependencies, so that the
 * compiler (which writes every rank's coordinates into the manifest) and the
 * runtime (which builds its communicators from them) agree by construction. */
#ifndef SHARD_RT_MESH_H
#define SHARD_RT_MESH_H

/* The mesh axes. RT_AXIS_EMBED is not an axis of the mesh but a group built
 * like one: the first and last stage of one pipeline. */
typedef enum RtAxis {
  RT_AXIS_TENSOR,
  RT_AXIS_PIPELINE,
  RT_AXIS_DATA,
  RT_AXIS_EMBED,
  RT_AXIS_COUNT
} RtAxis;

/* The sizes of the mesh: t, p, d. */
typedef struct RtMesh {
  int tp, pp, dp;
} RtMesh;

/* One rank's place in the mesh, each coordinate from 0 to its size - 1. */
typedef struct RtCoord {
  int tp, dp, pp;
} RtCoord;

static inline const char *rt_axis_name(RtAxis a) {
  static const char *const names[RT_AXIS_COUNT] = {"tensor", "pipeline", "data", "embed"};
  return (unsigned)a < RT_AXIS_COUNT ? names[a] : "?";
}

static inline int rt_mesh_valid(RtMesh m) {
  return m.tp >= 1 && m.pp >= 1 && m.dp >= 1 && (long long)m.tp * m.pp * m.dp <= 1 << 30;
}

/* The world size the mesh needs: t * p * d. */
static inline int rt_mesh_size(RtMesh m) {
  return m.tp * m.pp * m.dp;
}

static inline int rt_mesh_rank(RtMesh m, RtCoord c) {
  return c.tp + m.tp * (c.dp + m.dp * c.pp);
}

static inline RtCoord rt_mesh_coord(RtMesh m, int rank) {
  RtCoord c;
  c.tp = rank % m.tp;
  c.dp = rank / m.tp % m.dp;
  c.pp = rank / (m.tp * m.dp);
  return c;
}

/* Whether `rank` belongs to an embedding group: only the first and the last
 * pipeline stage do (with p = 1 that stage is both, and the group is the
 * rank alone). */
static inline int rt_mesh_in_embed(RtMesh m, int rank) {
  int pp = rt_mesh_coord(m, rank).pp;
  return pp == 0 || pp == m.pp - 1;
}

/* The world ranks of `rank`'s group along `axis`, in the order of their rank
 * inside the group (which is their coordinate on that axis; for the
 * embedding group, the first stage before the last). Writes at most
 * max(t, p, d) entries to `members` and returns their count; 0 when the
 * rank has no such group (the embedding group of a middle stage). */
static inline int rt_mesh_group(RtMesh m, RtAxis axis, int rank, int *members) {
  RtCoord c = rt_mesh_coord(m, rank);
  int n = 0;
  switch (axis) {
  case RT_AXIS_TENSOR:
    for (c.tp = 0; c.tp < m.tp; c.tp++) members[n++] = rt_mesh_rank(m, c);
    break;
  case RT_AXIS_DATA:
    for (c.dp = 0; c.dp < m.dp; c.dp++) members[n++] = rt_mesh_rank(m, c);
    break;
  case RT_AXIS_PIPELINE:
    for (c.pp = 0; c.pp < m.pp; c.pp++) members[n++] = rt_mesh_rank(m, c);
    break;
  case RT_AXIS_EMBED:
    if (!rt_mesh_in_embed(m, rank)) break;
    c.pp = 0;
    members[n++] = rt_mesh_rank(m, c);
    c.pp = m.pp - 1;
    if (m.pp > 1) members[n++] = rt_mesh_rank(m, c);
    break;
  default:
    break;
  }
  return n;
}

/* The coordinate of `rank` along `axis`: its rank inside that group (-1
 * for the embedding group of a middle stage). */
static inline int rt_mesh_axis_index(RtMesh m, RtAxis axis, int rank) {
  RtCoord c = rt_mesh_coord(m, rank);
  switch (axis) {
  case RT_AXIS_TENSOR: return c.tp;
  case RT_AXIS_DATA: return c.dp;
  case RT_AXIS_PIPELINE: return c.pp;
  case RT_AXIS_EMBED: return !rt_mesh_in_embed(m, rank) ? -1 : c.pp == 0 ? 0 : 1;
  default: return -1;
  }
}

#endif
