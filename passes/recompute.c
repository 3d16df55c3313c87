/* The `recompute` pass: activation recomputation (--recompute).
 *
 * After autodiff every forward value that a backward node reads stays
 * alive from the forward to the backward: the memory plan keeps it among
 * the activations, and a pipeline stage holds one set of them per
 * microbatch in flight. This pass trades some of that memory for compute.
 * For each checkpoint group of the layer stack it copies forward nodes of
 * the group into the backward, just before the first of the group's
 * backward nodes that reads one of them, and makes the group's backward nodes read the copies instead of
 * the forward results, which then die in the forward.
 *
 *  - full: a group is N consecutive layers of one virtual stage
 *    (--recompute-layers N, default 1); what is copied is every node of
 *    the group that the group's backward needs, so the group keeps only
 *    what it reads from outside: its input (the residual stream), plus
 *    parameters and values made before the layer stack. Megatron-LM's
 *    "uniform" method.
 *  - selective: in each layer, the attention core of Korthikanti et al.:
 *    the nodes whose result has the shape of a softmax of the layer (the
 *    scores matmul, its scale and mask, the softmax, its dropout). The
 *    fused `attention` op keeps none of these in the first place (its
 *    backward recomputes the scores from q, k and v), so a model written
 *    with it is already at selective's memory and is left unchanged.
 *
 * The layers are the iterations of the top-level repeats (IrNode.layer,
 * recorded by unroll and copied onto the backward nodes by autodiff); no
 * op or model is named. Only the group's own backward nodes are rewired:
 * a value another group's backward reads (the group's output, read by the
 * next layer's norm gradient) stays kept, so no group's copies run before
 * its own backward starts.
 *
 * Equality to the bit: a copy is the same op with the same attributes
 * (a dropout's site, so its counter-based mask is the same) on the same
 * inputs, in the forward order, so it computes the same bits as its
 * forward node; the copies are marked (IrNode.recomputed) so that the
 * memory plan fuses no loop across their edges. */
#include <stdint.h>
#include <string.h>

#include "passes.h"

const char *const pass_recompute_names[] = {"none", "selective", "full"};

typedef struct Rc {
  IrGraph *g;
  const PassOptions *opt;
  int nnodes;        /* nodes before the pass; the forward ones first */
  int nforward;
  int *first_layer;  /* by virtual stage: its first layer, -1 if none */
  int *group;        /* by node index: its checkpoint group, -1 outside every group */
  int ngroups;
  int nlayers;       /* layers of the whole model */
} Rc;

static int layers_per_group(const Rc *rc) {
  if (rc->opt->recompute != PASS_RECOMPUTE_FULL) return 1;
  return rc->opt->recompute_layers > 1 ? rc->opt->recompute_layers : 1;
}

/* The checkpoint group of a node of a layer: its virtual stage's layers
 * counted from the stage's first, N to a group, so no group spans two
 * stages. -1 for nodes outside the layers and for pipeline messages. */
static int group_of(const Rc *rc, const IrNode *n) {
  if (n->layer < 0 || n->op == IR_OP_PP_BOUNDARY) return -1;
  int lo = rc->first_layer[n->stage];
  if (lo < 0 || n->layer < lo) die("recompute: layer %d before its stage's first", n->layer);
  return n->stage * rc->nlayers + (n->layer - lo) / layers_per_group(rc);
}

/* Numbers the groups; false when the graph has no backward or no layers. */
static bool find_groups(Rc *rc) {
  IrGraph *g = rc->g;
  int nstages = 1, nlayers = 0;
  rc->nforward = rc->nnodes;
  for (int i = rc->nnodes - 1; i >= 0; i--) {
    IrNode *n = g->nodes.items[i];
    if (n->phase == IR_PHASE_BACKWARD) rc->nforward = i;
    if (n->stage + 1 > nstages) nstages = n->stage + 1;
    if (n->layer + 1 > nlayers) nlayers = n->layer + 1;
  }
  const char *what = pass_recompute_names[rc->opt->recompute];
  if (rc->nforward == rc->nnodes) {
    ir_error(ir_cmdline, "--recompute %s: the graph has no backward (run autodiff first)", what);
    return false;
  }
  if (nlayers == 0) {
    ir_error(ir_cmdline, "--recompute %s: the model has no layer stack (a repeat, unrolled in the "
             "same pipeline) to recompute", what);
    return false;
  }
  rc->first_layer = ir_alloc(sizeof(int) * (size_t)nstages);
  for (int s = 0; s < nstages; s++) rc->first_layer[s] = -1;
  for (int i = 0; i < rc->nforward; i++) {
    IrNode *n = g->nodes.items[i];
    int *lo = &rc->first_layer[n->stage];
    if (n->layer >= 0 && n->op != IR_OP_PP_BOUNDARY && (*lo < 0 || n->layer < *lo)) *lo = n->layer;
  }
  rc->group = ir_alloc(sizeof(int) * (size_t)rc->nnodes);
  rc->nlayers = nlayers;
  rc->ngroups = nstages * nlayers;
  for (int i = 0; i < rc->nnodes; i++) rc->group[i] = group_of(rc, g->nodes.items[i]);
  return true;
}

/* Selective: the forward nodes of a layer whose result has the shape of
 * one of the layer's softmax results. */
static void mark_attention_core(const Rc *rc, bool *cand) {
  IrGraph *g = rc->g;
  for (int i = 0; i < rc->nforward; i++) {
    IrNode *s = g->nodes.items[i];
    if (s->op != IR_OP_SOFTMAX || rc->group[i] < 0) continue;
    for (int j = 0; j < rc->nforward; j++) {
      IrNode *n = g->nodes.items[j];
      if (rc->group[j] == rc->group[i] && n->nout == 1 && n->layer == s->layer &&
          ir_type_same(&n->out[0]->type, &s->out[0]->type))
        cand[j] = true;
    }
  }
}

/* Which forward nodes are copied: a candidate whose result the backward
 * of its own group reads, and every candidate of the group that such a
 * copy needs, found in one sweep from the last forward node back. */
static void mark_copies(const Rc *rc, const bool *cand, bool *copy, IrPtrMap *def_index) {
  IrGraph *g = rc->g;
  bool *need = ir_alloc(sizeof(bool) * (size_t)(g->next_id + 1));
  for (int i = rc->nforward; i < rc->nnodes; i++) {
    IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) {
      IrValue *v = n->in[j];
      if (v->kind != IR_VAL_NODE || v->def->phase != IR_PHASE_FORWARD) continue;
      int d = (int)(intptr_t)ir_ptrmap_get(def_index, v->def) - 1;
      if (d >= 0 && cand[d] && rc->group[d] == rc->group[i]) need[v->id] = true;
    }
  }
  for (int i = rc->nforward - 1; i >= 0; i--) {
    IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nout && cand[i]; j++) copy[i] = copy[i] || need[n->out[j]->id];
    for (int j = 0; j < n->nin && copy[i]; j++) {
      IrValue *v = n->in[j];
      int d = v->kind == IR_VAL_NODE ? (int)(intptr_t)ir_ptrmap_get(def_index, v->def) - 1 : -1;
      if (d >= 0 && rc->group[d] == rc->group[i]) need[v->id] = true;
    }
  }
}

/* The copy of forward node n, appended to g, its inputs read through map
 * where its group copied them already, and its results entered there. */
static IrNode *copy_node(const Rc *rc, IrNode *n, IrPtrMap *map) {
  IrValue **in = ir_alloc(sizeof(IrValue *) * (size_t)(n->nin ? n->nin : 1));
  for (int j = 0; j < n->nin; j++) {
    IrValue *c = ir_ptrmap_get(map, n->in[j]);
    in[j] = c && group_of(rc, c->def) == group_of(rc, n) ? c : n->in[j];
  }
  IrGraph *g = rc->g;
  IrNode *c = ir_add_node(g, n->op, in, n->nin, n->attrs, n->nattr, n->nout, n->loc);
  c->phase = IR_PHASE_BACKWARD;
  c->stage = n->stage;
  c->layer = n->layer;
  c->label = n->label;
  c->recomputed = true;
  for (int j = 0; j < n->nout; j++) {
    c->out[j]->type = n->out[j]->type;
    c->out[j]->shard = n->out[j]->shard;
    ir_ptrmap_put(map, n->out[j], c->out[j]);
  }
  return c;
}

/* Points the group's backward nodes at its copies, and writes the copies
 * just before the first of them that reads one (the copies read only
 * forward values, so any place in the backward would do; the last one
 * keeps them alive the shortest). Returns how many nodes it copied. */
static int rewrite(Rc *rc, const bool *copy) {
  IrGraph *g = rc->g;
  IrPtrMap map = {0};
  IrVec *copies = ir_alloc(sizeof(IrVec) * (size_t)(rc->ngroups + 1));
  int ncopies = 0;
  for (int i = 0; i < rc->nforward; i++)
    if (copy[i]) ir_vec_push(&copies[rc->group[i]], copy_node(rc, g->nodes.items[i], &map)), ncopies++;
  IrVec nodes = {0};
  bool *placed = ir_alloc(sizeof(bool) * (size_t)(rc->ngroups + 1));
  for (int i = 0; i < rc->nnodes; i++) {
    IrNode *n = g->nodes.items[i];
    int k = rc->group[i];
    bool reads = false;
    /* Only the copies of the node's own group: another group's backward
     * keeps reading the forward result. */
    for (int j = 0; j < n->nin && i >= rc->nforward && k >= 0; j++) {
      IrValue *c = ir_ptrmap_get(&map, n->in[j]);
      if (c && group_of(rc, c->def) == k) n->in[j] = c, reads = true;
    }
    if (reads && !placed[k])
      for (int c = 0; c < copies[k].len; c++) ir_vec_push(&nodes, copies[k].items[c]);
    placed[k] = placed[k] || reads;
    ir_vec_push(&nodes, n);
  }
  g->nodes = nodes;
  ir_ptrmap_free(&map);
  return ncopies;
}

bool pass_recompute(IrGraph **gp, const PassOptions *opt) {
  if (!opt || opt->recompute == PASS_RECOMPUTE_NONE) return true;
  Rc rc = {.g = ir_top(*gp), .opt = opt};
  rc.nnodes = rc.g->nodes.len;
  if (!find_groups(&rc)) return false;
  bool *cand = ir_alloc(sizeof(bool) * (size_t)rc.nnodes);
  bool *copy = ir_alloc(sizeof(bool) * (size_t)rc.nnodes);
  if (opt->recompute == PASS_RECOMPUTE_FULL)
    for (int i = 0; i < rc.nforward; i++) cand[i] = rc.group[i] >= 0;
  else
    mark_attention_core(&rc, cand);
  IrPtrMap def_index = {0};
  for (int i = 0; i < rc.nforward; i++)
    ir_ptrmap_put(&def_index, rc.g->nodes.items[i], (void *)(intptr_t)(i + 1));
  mark_copies(&rc, cand, copy, &def_index);
  ir_ptrmap_free(&def_index);
  rewrite(&rc, copy);
  return true;
}
