/* The memory plan's runs of row chunks (memplan.h PassMemPlan.chunked,
 * .sunk): the CPU target's step, planned only when its policy asks
 * (PassMemPolicy.row_chunks). A run holds nodes that each compute rows of
 * their outputs from the same rows of their inputs, so that the target can
 * run every chunk of rows through the whole run in parallel. */
#include <stdlib.h>
#include <string.h>

#include "memplan_planner.h"

/* Chunks of whole sequences when the batch has at least this many: enough
 * for the threads of a small machine to share evenly. A smaller batch is
 * cut into this many chunks of rows, and attention stays out of them. */
#define CHUNKS_MIN 4
#define CHUNKS_ROWS 8

/* Rows of a value: its elements over its last dim. */
static int64_t value_rows(const IrValue *v) {
  const IrType *t = &v->type;
  if (t->rank < 1 || t->shape[t->rank - 1] <= 0) return -1;
  return ir_type_numel(t) / t->shape[t->rank - 1];
}

static bool last_axis(const IrNode *n, const IrValue *v) {
  int64_t axis = ir_attr_int(n, "axis");
  return axis == -1 || axis == v->type.rank - 1;
}

/* Whether every input and output of n has R rows. */
static bool all_rows(const IrNode *n, int64_t R) {
  for (int j = 0; j < n->nin; j++)
    if (value_rows(n->in[j]) != R) return false;
  for (int j = 0; j < n->nout; j++)
    if (value_rows(n->out[j]) != R) return false;
  return true;
}

/* Whether node n computes rows r0 .. r0 + C - 1 of every output from the
 * same rows of its row-shaped inputs (R rows in all), so that codegen can
 * run it on one chunk: the `rows` column of ops.def (IrRowRule), checked
 * against the node's shapes. The CPU target cuts each of these (codegen/
 * cpu.c, rref and chunk_rows). */
static bool row_local(const IrNode *n, int64_t R, int64_t C) {
  const IrValue *x = n->nin ? n->in[0] : NULL, *y = n->out[0];
  switch (ir_op_info(n->op)->rows) {
  case IR_ROWS_SAME: return value_rows(x) == R && value_rows(y) == R;
  case IR_ROWS_GEMM:
    /* One GEMM over the rows of a against a shared 2-D b. */
    return !ir_attr_int(n, "transpose_a") && n->in[1]->type.rank == 2 && x->type.rank >= 2 &&
           value_rows(x) == R && value_rows(y) == R;
  case IR_ROWS_PARTS: return last_axis(n, y) && all_rows(n, R);
  case IR_ROWS_SEQUENCES:
    /* Whole sequences: x is [b, s, width]. */
    return x->type.rank == 3 && value_rows(x) == R && C % x->type.shape[1] == 0;
  case IR_ROWS_IDS: return x->type.dtype == IR_I32 && ir_type_numel(&x->type) == R;
  case IR_ROWS_NONE:
  case IR_ROWS_SUM:
  case IR_ROWS_SUM_TO: return false;
  }
  return false;
}

/* A fused loop (or a node) that can run on a chunk: the right rows, and no
 * gradient that is added to its slot after the node (once per chunk would
 * add it many times). */
static bool unit_local(Planner *pl, int first, int last, int64_t R, int64_t C) {
  PassMemPlan *p = pl->p;
  for (int k = first; k <= last; k++) {
    IrNode *n = pl->g->nodes.items[k];
    for (int j = 0; j < n->nout; j++) {
      PassBuf *b = buf_of(pl, n->out[j]);
      if (b->grad_of && !pl->direct[b->index]) return false;
    }
    if (!p->fused[k] && !row_local(n, R, C)) return false;
  }
  return !p->fused[first] || value_rows(((IrNode *)pl->g->nodes.items[first])->out[0]) == R;
}

/* sum_to down to a suffix of the input's dims (a bias gradient): codegen
 * writes it as a sum of rows, which a team can share. */
bool pass_sum_of_rows(const IrNode *n) {
  const IrType *x = &n->in[0]->type, *y = &n->out[0]->type;
  int64_t nx = ir_type_numel(x), ny = ir_type_numel(y);
  if (ny >= nx || ny == 0) return false;
  int k = 0;
  while (k < y->rank && y->shape[k] == 1) k++;
  int tail = y->rank - k;
  if (tail > x->rank) return false;
  for (int j = 0; j < tail; j++)
    if (y->shape[k + j] != x->shape[x->rank - tail + j]) return false;
  return true;
}

/* A reduction over all rows that a run can carry to its end (see
 * PassMemPlan.sunk): the `rows` column says which ops sum over rows (a
 * weight gradient, a bias gradient). */
static bool sinkable(Planner *pl, int i) {
  PassMemPlan *p = pl->p;
  IrNode *n = pl->g->nodes.items[i];
  if (p->fused[i] || p->view[i] || p->absorbed[i]) return false;
  IrRowRule rule = ir_op_info(n->op)->rows;
  return rule == IR_ROWS_SUM || (rule == IR_ROWS_SUM_TO && pass_sum_of_rows(n));
}

/* Whether node i adds into the gradient slot of a param that a node sunk
 * into the run so far adds into too (a weight used by two layers): sunk
 * nodes run side by side, so the two must not be in one run. */
static bool sunk_slot_clash(Planner *pl, int i, int start) {
  IrNode *n = pl->g->nodes.items[i];
  for (int j = 0; j < n->nout; j++) {
    PassBuf *b = buf_of(pl, n->out[j]);
    if (!pl->direct[b->index]) continue;
    for (int k = start; k < i; k++) {
      IrNode *m = pl->g->nodes.items[k];
      for (int l = 0; l < m->nout && pl->p->sunk[k]; l++) {
        PassBuf *c = buf_of(pl, m->out[l]);
        if (pl->direct[c->index] && c->grad_of == b->grad_of) return true;
      }
    }
  }
  return false;
}

/* Whether node k reads an output of a node sunk into the run so far. */
static bool reads_sunk(Planner *pl, int k, int start) {
  IrNode *n = pl->g->nodes.items[k];
  for (int j = 0; j < n->nin; j++) {
    int d = pl->def[buf_of(pl, n->in[j])->index];
    if (d >= start && pl->p->sunk[d]) return true;
  }
  return false;
}

/* The token rows and the chunk size from the model's inputs ([batch, seq]
 * each); false when they do not say. */
static bool chunk_size(Planner *pl, int64_t *R, int64_t *C) {
  const IrValue *tok = NULL;
  for (int i = 0; i < pl->g->inputs.len && !tok; i++) {
    const IrValue *v = pl->g->inputs.items[i];
    if (v->type.rank == 2 && v->type.dtype == IR_I32) tok = v;
  }
  if (!tok) return false;
  int64_t b = tok->type.shape[0], s = tok->type.shape[1];
  *R = b * s;
  if (b >= CHUNKS_MIN) *C = s;
  else if (*R % CHUNKS_ROWS == 0 && *R / CHUNKS_ROWS >= 16) *C = *R / CHUNKS_ROWS;
  else return false;
  return true;
}

/* Maximal runs of row-local units (views, which run no code, and sunk
 * reductions may sit inside), within one phase, with at least two units
 * that run code, one of them row-local. */
/* Whether a run that started at node `start` must end before node i: in
 * a graph that recomputes (recompute.c), at the edge of a layer. A run
 * keeps every buffer it touches for its whole length, and the forward of
 * the whole layer stack is one run otherwise: what recomputation frees
 * would come back as temporaries. */
static bool layer_edge(Planner *pl, bool recomputes, int start, int i) {
  const IrNode *a = pl->g->nodes.items[start], *b = pl->g->nodes.items[i];
  return recomputes && i != start && a->layer != b->layer;
}

void pass_memplan_rows(Planner *pl) {
  PassMemPlan *p = pl->p;
  int N = pl->g->nodes.len;
  int64_t R, C;
  bool recomputes = false;
  for (int i = 0; i < N; i++) recomputes |= ((IrNode *)pl->g->nodes.items[i])->recomputed;
  /* SHARDC_CHUNKS=0 in the compiler's environment plans without runs: for
   * comparing the two, and per-op profiles of every node. */
  const char *env = getenv("SHARDC_CHUNKS");
  if ((env && strcmp(env, "0") == 0) || !chunk_size(pl, &R, &C)) return;
  for (int i = 0; i < N;) {
    int start = i, end = i - 1, local = 0, sunk = 0;
    while (i < N && ((i != p->boundary && i != p->wboundary) || i == start) &&
           !layer_edge(pl, recomputes, start, i)) {
      int last = p->group_last[i];
      if (p->absorbed[i]) break;
      bool blocked = false;
      for (int k = i; k <= last && !blocked; k++) blocked = reads_sunk(pl, k, start);
      if (blocked) break;
      if (!p->view[i]) {
        if (unit_local(pl, i, last, R, C)) local++;
        else if (sinkable(pl, i) && !sunk_slot_clash(pl, i, start)) p->sunk[i] = true, sunk++;
        else break;
        end = last;
      }
      i = last + 1;
    }
    if (i == start) i = p->group_last[i] + 1;
    while (end >= start && p->view[end]) end--;
    if (local < 1 || local + sunk < 2) {
      for (int k = start; k < i; k++) p->sunk[k] = false;
      continue;
    }
    i = end + 1;
    while (p->view[start]) start++;
    for (int k = start; k <= end; k++) {
      p->region_first[k] = start;
      p->region_last[k] = end;
      p->chunked[k] = !p->sunk[k];
    }
    p->chunk_rows = C;
    p->nchunks = R / C;
  }
}
