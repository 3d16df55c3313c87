/* Cutting a pipeline-partitioned graph into its chunks (see pp_split.h). */
#include <string.h>

#include "pp_split.h"


static bool is_boundary(const IrNode *n) { return n->op == IR_OP_PP_BOUNDARY; }

/* A value of the whole graph that becomes an input of its chunk. */
static void make_input(IrGraph *c, IrValue *v, const char *name) {
  v->kind = IR_VAL_INPUT;
  v->def = NULL;
  v->def_index = 0;
  v->name = ir_strdup(name);
  ir_vec_push(&c->inputs, v);
}

static void add_output(IrGraph *c, IrValue *v, const char *name) {
  for (int i = 0; i < c->outputs.len; i++)
    if (c->outputs.items[i] == v) return; /* a relayed value sent on unchanged */
  ir_add_output(c, ir_strdup(name), v);
}

/* Marks every value a chunk node reads, in the map of its chunk; checks
 * that each is the chunk's own (a model input, a parameter, one of its
 * nodes' results or a received message). One pass over all nodes. */
static bool collect_reads(IrGraph *g, IrPtrMap *local, IrPtrMap *read) {
  bool ok = true;
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (is_boundary(n)) continue;
    int k = n->stage;
    for (int j = 0; j < n->nin; j++) {
      IrValue *v = n->in[j];
      ir_ptrmap_put(&read[k], v, v);
      if (v->kind == IR_VAL_NODE && !ir_ptrmap_get(&local[k], v)) {
        ir_error(n->loc, "pp-split: a value computed on virtual stage %d is read on virtual "
                 "stage %d without a pp_boundary message", v->def ? v->def->stage : -1, k);
        ok = false;
      }
    }
  }
  return ok;
}

bool pass_pp_split(IrGraph *g, PassPpChunk *chunks, int nchunks) {
  int pv = (g->mesh[IR_AXIS_PIPELINE] > 1 ? g->mesh[IR_AXIS_PIPELINE] : 1) * (g->vpp > 1 ? g->vpp : 1);
  if (pv != nchunks) {
    ir_error(ir_cmdline, "pp-split: the graph has %d virtual stages, asked for %d", pv, nchunks);
    return false;
  }
  /* The forward messages in node order, and each one's gradient message. */
  IrVec fwd = {0};
  IrPtrMap back = {0};
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (!is_boundary(n)) continue;
    if (n->phase != IR_PHASE_BACKWARD) ir_vec_push(&fwd, n);
    else if (n->adjoint_of) ir_ptrmap_put(&back, n->adjoint_of, n);
    else {
      ir_error(n->loc, "pp-split: a backward pp_boundary without its forward message");
      return false;
    }
  }
  bool ok = true;
  /* Read everything before any value is rewritten into an input. */
  IrPtrMap *local = ir_alloc(sizeof(IrPtrMap) * (size_t)nchunks);
  IrPtrMap *read = ir_alloc(sizeof(IrPtrMap) * (size_t)nchunks);
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->stage < 0 || n->stage >= nchunks) {
      ir_error(n->loc, "pp-split: node on virtual stage %d of %d", n->stage, nchunks);
      return false;
    }
    for (int j = 0; j < n->nout; j++) ir_ptrmap_put(&local[n->stage], n->out[j], n);
  }
  /* A message's result belongs to the stage it arrives on. */
  for (int f = 0; f < fwd.len; f++) {
    IrNode *n = fwd.items[f], *b = ir_ptrmap_get(&back, n);
    ir_ptrmap_put(&local[ir_attr_int(n, "dst")], n->out[0], n);
    if (b) ir_ptrmap_put(&local[ir_attr_int(n, "src")], b->out[0], b);
  }
  ok &= collect_reads(g, local, read);
  for (int k = 0; ok && k < nchunks; k++) {
    PassPpChunk *c = &chunks[k];
    memset(c, 0, sizeof *c);
    c->vstage = k;
    IrGraph *s = c->g = ir_graph_new(g->name);
    s->configs = g->configs;
    memcpy(s->mesh, g->mesh, sizeof s->mesh);
    s->vpp = g->vpp;
    s->next_id = g->next_id;
    for (int i = 0; i < g->inputs.len; i++)
      if (ir_ptrmap_get(&read[k], g->inputs.items[i])) ir_vec_push(&s->inputs, g->inputs.items[i]);
    for (int i = 0; i < g->params.len; i++)
      if (ir_ptrmap_get(&read[k], g->params.items[i])) ir_vec_push(&s->params, g->params.items[i]);
  }
  /* Each node to its chunk, in order: one pass over the whole graph. */
  for (int i = 0; ok && i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (!is_boundary(n)) ir_vec_push(&chunks[n->stage].g->nodes, n);
  }
  for (int i = 0; ok && i < g->outputs.len; i++) {
    IrValue *v = g->outputs.items[i];
    if (v->kind == IR_VAL_NODE && !is_boundary(v->def))
      ir_add_output(chunks[v->def->stage].g, g->output_names.items[i], v);
  }
  /* Now the messages: results that arrive become inputs, operands that
   * leave become outputs, in the order of the forward messages. */
  for (int f = 0; ok && f < fwd.len; f++) {
    IrNode *n = fwd.items[f], *b = ir_ptrmap_get(&back, n);
    int src = (int)ir_attr_int(n, "src"), dst = (int)ir_attr_int(n, "dst");
    PassPpChunk *from = &chunks[src], *to = &chunks[dst];
    ir_vec_push(&from->send_act, n->in[0]);
    add_output(from->g, n->in[0], ir_fmt("send_act.%d", from->send_act.len - 1));
    ir_vec_push(&to->recv_act, n->out[0]);
    make_input(to->g, n->out[0], ir_fmt("recv_act.%d", to->recv_act.len - 1));
    if (!b) continue; /* nothing depends on it: no gradient goes back */
    ir_vec_push(&to->send_grad, b->in[0]);
    add_output(to->g, b->in[0], ir_fmt("send_grad.%d", to->send_grad.len - 1));
    ir_vec_push(&from->recv_grad, b->out[0]);
    make_input(from->g, b->out[0], ir_fmt("recv_grad.%d", from->recv_grad.len - 1));
  }
  for (int k = 0; k < nchunks; k++) {
    ir_ptrmap_free(&local[k]);
    ir_ptrmap_free(&read[k]);
  }
  ir_ptrmap_free(&back);
  return ok;
}
