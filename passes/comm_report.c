/* The communication report (`shardc compile --report comm`): what each
 * rank sends in one microbatch, forward and backward, collective by
 * collective, per mesh axis.
 *
 * Bytes follow the counting rules of abi/comm.h, which the runtime's
 * counters follow too, so the two agree to the byte (bench/tp_overhead.sh
 * checks it): with n ranks and S = count * element size, an all-reduce
 * sends 2 * (n - 1) * S / n, an all-gather or a reduce-scatter (n - 1) * S
 * (S: one rank's part), a send S.
 *
 * Besides the collective nodes of the graph, a vocab-parallel cross_entropy
 * all-reduces three [positions] vectors (the row max, the sum of
 * exponentials, the target logit) and its gradient two (the row max and
 * the sum of exponentials again). Nodes inside a repeat count once per
 * iteration. All ranks of the tensor axis run the same program, so each
 * sends the same bytes: the report gives one set of numbers for all.
 *
 * With p > 1 the pipeline axis lists the messages between stages
 * (pp_boundary), each sent once by every tensor rank of its stage: S bytes,
 * the tensor as one rank holds it (1/t of the activation with
 * scatter/gather or sequence parallelism). Stages send different
 * messages, so the per-rank pipeline figure is the largest over stages.
 *
 * A bf16 program (low_bytes 2: `--precision bf16`) moves its activations
 * and their gradients at 2 bytes an element, as the memory plan keeps them
 * (passes/memplan.c is_low) and codegen/collectives.c sends them
 * (RT_COMM_BF16): every pipeline message, and every collective except
 * those whose values are a param's gradient or reduced into one
 * (memplan's mark_wide), a graph output, or the vocab-parallel loss's
 * statistics, which stay at the real's size. */
#include <string.h>

#include "../abi/comm.h"
#include "passes.h"

static const char *kind_name(RtCommKind k) {
  switch (k) {
  case RT_COMM_ALLREDUCE: return "all_reduce";
  case RT_COMM_ALLGATHER: return "all_gather";
  case RT_COMM_REDUCE_SCATTER: return "reduce_scatter";
  case RT_COMM_ALLTOALL: return "all_to_all";
  default: return "send";
  }
}

/* One line of the report: calls of one collective made at one place. */
typedef struct Row {
  IrPhase phase;
  RtCommKind kind;
  IrMeshAxis axis;
  const char *what;  /* the tensor, or the purpose of an internal all-reduce */
  const char *where; /* file:line:col */
  int64_t count;     /* elements per call, as rt_comm_* receives them */
  int64_t calls;
  int64_t bytes;     /* sent by one rank over all calls */
  int elem;          /* bytes of one element */
  int stage;         /* RT_COMM_SEND: the pipeline stage that sends it; else -1 */
} Row;

typedef struct Report {
  IrVec rows;
  int elem;          /* the real's bytes */
  int low;           /* a bf16 program's activation bytes; 0: the real's */
  IrPtrMap wide;     /* values kept at the real's size in such a program */
  int sizes[IR_MESH_AXES];
} Report;

static const char *where(IrLoc loc) {
  if (!loc.file) return "-";
  return ir_fmt("%s:%d:%d", loc.file, loc.line, loc.col);
}

static Row *add(Report *r, IrPhase phase, RtCommKind kind, IrMeshAxis axis, const char *what,
                IrLoc loc, int64_t count, int64_t calls, int n, int elem) {
  const char *at = where(loc);
  int64_t bytes = rt_comm_ring_bytes(kind, n, count * elem) * calls;
  for (int i = 0; i < r->rows.len; i++) {
    Row *row = r->rows.items[i];
    if (row->phase == phase && row->kind == kind && row->axis == axis && row->count == count &&
        row->elem == elem && strcmp(row->what, what) == 0 && strcmp(row->where, at) == 0) {
      row->calls += calls;
      row->bytes += bytes;
      return row;
    }
  }
  Row *row = ir_alloc(sizeof *row);
  *row = (Row){phase, kind, axis, what, at, count, calls, bytes, elem, -1};
  ir_vec_push(&r->rows, row);
  return row;
}

/* A param's gradient, and what a collective reduces into one, through
 * collectives (memplan's mark_wide): the real's size in a bf16 program. */
static void mark_wide(Report *r, const IrValue *v) {
  ir_ptrmap_put(&r->wide, v, &r->wide);
  if (v->kind != IR_VAL_NODE) return;
  IrOp op = v->def->op;
  if (op == IR_OP_ALL_REDUCE || op == IR_OP_REDUCE_SCATTER || op == IR_OP_ALL_GATHER)
    mark_wide(r, v->def->in[0]);
}

static void mark_wide_values(Report *r, const IrGraph *g) {
  for (int i = 0; i < g->params.len; i++) {
    const IrValue *prm = g->params.items[i];
    if (prm->grad) mark_wide(r, prm->grad);
  }
  for (int i = 0; i < g->outputs.len; i++) ir_ptrmap_put(&r->wide, g->outputs.items[i], &r->wide);
}

static bool is_real(IrDType t) { return t == IR_F32 || t == IR_F64; }

/* Bytes of an element of v as it travels: 2 for a bf16 program's
 * activation (a pipeline message always, a collective's value unless it
 * is wide), else the real's. */
static int elem_of(const Report *r, const IrValue *v, bool message) {
  if (!r->low || !is_real(v->type.dtype)) return r->elem;
  if (!message && ir_ptrmap_get(&r->wide, v)) return r->elem;
  return r->low;
}

/* The tensor's type as it travels: bf16 for a 2-byte element. */
static const char *type_str(const IrType *t, int elem) {
  return ir_fmt("%s%s", elem == 2 ? "bf16" : ir_dtype_name(t->dtype), ir_shape_str(t));
}

/* The all-reduces inside a vocab-parallel cross_entropy (3) or its
 * gradient (2), each of one real per position. */
static void loss_collectives(Report *r, const IrNode *n, int64_t mult) {
  if (!ir_attr_has(n, "vocab_parallel") || ir_attr_int(n, "vocab_parallel") == 0) return;
  static const char *const parts[] = {"row max", "sum of exp", "target logit"};
  bool fwd = n->op == IR_OP_CROSS_ENTROPY;
  int64_t positions = ir_type_numel(&n->in[1]->type);
  const char *op = ir_op_info(n->op)->name;
  for (int i = 0; i < (fwd ? 3 : 2); i++)
    add(r, n->phase, RT_COMM_ALLREDUCE, IR_AXIS_TENSOR, ir_fmt("%s: %s", op, parts[i]), n->loc,
        positions, mult, r->sizes[IR_AXIS_TENSOR], r->elem);
}

static void collect(Report *r, IrGraph *g) {
  int64_t mult = ir_graph_multiplicity(g);
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->body) {
      collect(r, n->body);
      continue;
    }
    if (n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) loss_collectives(r, n, mult);
    if (n->op == IR_OP_PP_BOUNDARY) {
      int src = (int)ir_attr_int(n, "src"), dst = (int)ir_attr_int(n, "dst");
      const IrValue *v = n->in[0];
      int elem = elem_of(r, v, true);
      add(r, n->phase, RT_COMM_SEND, IR_AXIS_PIPELINE,
          ir_fmt("%s %d->%d", type_str(&v->type, elem), src, dst), n->loc,
          ir_type_numel(&v->type), mult, r->sizes[IR_AXIS_PIPELINE], elem)->stage =
          src % r->sizes[IR_AXIS_PIPELINE];
    }
    if (!(ir_op_info(n->op)->flags & IR_OPF_COLLECTIVE)) continue;
    IrMeshAxis axis = (IrMeshAxis)ir_attr_int(n, "axis");
    int size = (int)ir_attr_int(n, "size");
    if ((unsigned)axis < IR_MESH_AXES && r->sizes[axis] < size) r->sizes[axis] = size;
    RtCommKind kind = n->op == IR_OP_ALL_REDUCE    ? RT_COMM_ALLREDUCE
                      : n->op == IR_OP_ALL_GATHER  ? RT_COMM_ALLGATHER
                      : n->op == IR_OP_ALL_TO_ALL ? RT_COMM_ALLTOALL
                                                   : RT_COMM_REDUCE_SCATTER;
    /* rt_comm_* counts what each rank contributes: the input of an
     * all-reduce or all-gather, the (received) result of a reduce-scatter. */
    const IrValue *v = kind == RT_COMM_REDUCE_SCATTER ? n->out[0] : n->in[0];
    int64_t count = ir_type_numel(&v->type);
    /* An all-to-all's counts are known only when it runs: the report
     * prices the balanced case, x split evenly over the ranks, one part
     * per peer as abi/comm.h's alltoall counts it. Of a buffer planned
     * for the worst case (the expert outputs on their way home, x holds
     * every rank's rows), only as many rows as y holds travel. */
    if (kind == RT_COMM_ALLTOALL) {
      int64_t rows = v->type.shape[0], out = n->out[0]->type.shape[0];
      if (out < rows) count = count / rows * out;
      count /= size;
    }
    /* In and out travel in one precision (collectives.c refuses two). */
    int a = elem_of(r, n->in[0], false), b = elem_of(r, n->out[0], false), elem = a > b ? a : b;
    add(r, n->phase, kind, axis, type_str(&v->type, elem), n->loc, count, mult, size, elem);
  }
}

/* count * 2(n-1)/n or count * (n-1), printed exactly when whole. */
static const char *sent_elems(const Row *row, int n) {
  if (n <= 1) return "0";
  int64_t num = row->count * row->calls * rt_comm_ring_num(row->kind, n);
  int64_t den = rt_comm_ring_den(row->kind, n);
  if (num % den == 0) return ir_fmt("%lld", (long long)(num / den));
  return ir_fmt("%.2f", (double)num / (double)den);
}

/* The bytes one rank of pipeline stage `stage` sends (-1: the most any
 * stage's rank sends). */
static int64_t stage_bytes(const Report *r, int stage) {
  int64_t most = 0;
  for (int s = stage < 0 ? 0 : stage; s < (stage < 0 ? r->sizes[IR_AXIS_PIPELINE] : stage + 1); s++) {
    int64_t sum = 0;
    for (int i = 0; i < r->rows.len; i++) {
      const Row *row = r->rows.items[i];
      if (row->kind == RT_COMM_SEND && row->stage == s) sum += row->bytes;
    }
    if (sum > most) most = sum;
  }
  return most;
}

static void print_stages(FILE *out, const Report *r) {
  for (int s = 0; s < r->sizes[IR_AXIS_PIPELINE]; s++)
    fprintf(out, "  stage %d: each of its ranks sends %lld bytes\n", s, (long long)stage_bytes(r, s));
}

static void print_axis(FILE *out, Report *r, IrMeshAxis axis) {
  int n = r->sizes[axis];
  fprintf(out, "\naxis %s (%d rank%s):", ir_axis_name(axis), n, n == 1 ? "" : "s");
  int64_t calls[2] = {0, 0}, bytes[2] = {0, 0};
  double elems[2] = {0, 0};
  bool any = false;
  for (int i = 0; i < r->rows.len; i++) any |= ((Row *)r->rows.items[i])->axis == axis;
  if (!any || n <= 1) {
    fprintf(out, " no collectives\n");
    return;
  }
  fprintf(out, "\n  %-8s  %-14s  %-32s  %6s  %10s  %14s  %12s  %s\n", "phase", "collective",
          "tensor (one rank's part)", "calls", "elements", "sent elements", "sent bytes", "source");
  for (int i = 0; i < r->rows.len; i++) {
    Row *row = r->rows.items[i];
    if (row->axis != axis) continue;
    fprintf(out, "  %-8s  %-14s  %-32s  %6lld  %10lld  %14s  %12lld  %s\n",
            row->phase == IR_PHASE_BACKWARD ? "backward" : "forward", kind_name(row->kind),
            row->what, (long long)row->calls, (long long)row->count, sent_elems(row, n),
            (long long)row->bytes, row->where);
    calls[row->phase] += row->calls;
    bytes[row->phase] += row->bytes;
    elems[row->phase] += (double)row->bytes / row->elem;
  }
  static const char *const phases[] = {"forward", "backward"};
  for (int p = 0; p < 2; p++)
    fprintf(out, "  %s: %lld calls, %lld bytes sent (%.6g elements)\n", phases[p],
            (long long)calls[p], (long long)bytes[p], elems[p]);
  fprintf(out, "  total: %lld calls, %lld bytes sent (%.6g elements)\n",
          (long long)(calls[0] + calls[1]), (long long)(bytes[0] + bytes[1]),
          elems[0] + elems[1]);
  if (axis == IR_AXIS_PIPELINE) print_stages(out, r);
}

bool pass_comm_report(FILE *out, IrGraph *g, const PassOptions *opt, int real_bytes,
                      int low_bytes) {
  Report r = {.elem = real_bytes == 8 ? 8 : 4, .low = low_bytes == 2 ? 2 : 0};
  g = ir_top(g);
  if (!pass_check_typed(g, "--report comm")) return false;
  r.wide.arena = true;
  mark_wide_values(&r, g);
  r.sizes[IR_AXIS_TENSOR] = g->mesh[IR_AXIS_TENSOR] > 1 ? g->mesh[IR_AXIS_TENSOR] : pass_tp(opt);
  r.sizes[IR_AXIS_PIPELINE] = opt && opt->pp > 1 ? opt->pp : 1;
  r.sizes[IR_AXIS_DATA] = opt && opt->dp > 1 ? opt->dp : 1;
  collect(&r, g);
  int t = r.sizes[IR_AXIS_TENSOR], p = r.sizes[IR_AXIS_PIPELINE], d = r.sizes[IR_AXIS_DATA];
  fprintf(out, "communication of one microbatch (forward and backward), model %s\n", g->name);
  fprintf(out, "mesh: t = %d, p = %d, d = %d (%d rank%s); reals of %d bytes%s; bytes as "
          "rt_comm counts them\n", t, p, d, t * p * d, t * p * d == 1 ? "" : "s", r.elem,
          r.low ? ", activations and pipeline messages in bf16 (2 bytes)" : "");
  fprintf(out, "every rank runs the same program and sends the same bytes:\n");
  for (int pp = 0; pp < p; pp++)
    for (int dp = 0; dp < d; dp++)
      for (int tp = 0; tp < t; tp++)
        fprintf(out, "  rank %d: tp %d, pp %d, dp %d\n", tp + t * (dp + d * pp), tp, pp, dp);
  int64_t total = 0, per_axis[IR_MESH_AXES] = {0};
  for (int i = 0; i < r.rows.len; i++) {
    Row *row = r.rows.items[i];
    if (row->kind == RT_COMM_SEND) continue;
    if ((unsigned)row->axis < IR_MESH_AXES) per_axis[row->axis] += row->bytes;
    total += row->bytes;
  }
  per_axis[IR_AXIS_PIPELINE] = stage_bytes(&r, -1);
  total += per_axis[IR_AXIS_PIPELINE];
  for (int a = 0; a < IR_MESH_AXES; a++) print_axis(out, &r, (IrMeshAxis)a);
  fprintf(out, "\nper rank: %lld bytes sent (tensor %lld, pipeline %lld, data %lld)\n",
          (long long)total, (long long)per_axis[0], (long long)per_axis[1],
          (long long)per_axis[2]);
  return true;
}
