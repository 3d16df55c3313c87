/* pp-split: the graph of each virtual stage, cut out of a pipeline-partitioned graph
 * after autodiff, so that the memory plan and codegen treat each model
 * chunk as a program of its own.
 *
 * The whole graph (pp-partition, then autodiff) holds every stage's nodes
 * with IrNode.stage set, and pp_boundary nodes where a value crosses from
 * one virtual stage to the next (forward) or its gradient back (backward).
 * The pass keeps the nodes of one virtual stage, in order (so its
 * forward nodes still come before its backward nodes), and turns the
 * messages into the chunk's interface:
 *  - a forward pp_boundary that ends here: its result becomes an input of
 *    the chunk (recv_act); the one that starts here: its operand becomes
 *    an output (send_act);
 *  - the backward pp_boundary that ends here (a gradient coming back): its
 *    result becomes an input (recv_grad); the gradient this chunk sends
 *    back, the operand of the backward pp_boundary paired with a forward
 *    one that ended here, becomes an output (send_grad).
 * Pairs are listed in the order of the forward pp_boundary nodes, which is
 * the same on both ends of a message, so the parts of a message line up.
 * Model inputs and parameters are kept when a node of the chunk reads
 * them; the whole graph's outputs (the loss) when the chunk computes them.
 *
 * Splitting reuses the whole graph's nodes and values and rewrites the
 * values that become chunk inputs, so the whole graph's nodes are not
 * usable afterwards: the program's chunks (PassProgram.chunks) replace
 * them. With p * v = 1 the one chunk is the whole graph. */
#include <string.h>

#include "passes.h"
#include "program_passes.h"


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

/* Cuts g into its nchunks virtual stages (after pp-partition and
 * autodiff); false after reporting a value read across stages without a
 * message. */
static bool split(IrGraph *g, PassChunk *chunks, int nchunks) {
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
    PassChunk *c = &chunks[k];
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
    PassChunk *from = &chunks[src], *to = &chunks[dst];
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

bool pass_pp_split(PassProgram *p, const PassOptions *opt) {
  (void)opt;
  IrGraph *g = p->g;
  if (p->chunks) {
    ir_error(ir_cmdline, "pp-split: the program is split already (pp-split ran before)");
    return false;
  }
  int nv = (g->mesh[IR_AXIS_PIPELINE] > 1 ? g->mesh[IR_AXIS_PIPELINE] : 1) * (g->vpp > 1 ? g->vpp : 1);
  PassChunk *chunks = ir_alloc(sizeof(PassChunk) * (size_t)nv);
  memset(chunks, 0, sizeof(PassChunk) * (size_t)nv);
  if (nv == 1) chunks[0].g = g; /* one virtual stage: the chunk is the whole graph */
  else if (!split(g, chunks, nv)) return false;
  p->chunks = chunks, p->nchunks = nv;
  return true;
}

/* Chunk k's own invariants: defs before uses inside the chunk, and
 * outputs it computes or receives. */
static bool verify_chunk(const PassChunk *c, const char *who) {
  IrGraph *g = c->g;
  IrPtrMap known = {0};
  bool ok = true;
  for (int i = 0; i < g->inputs.len; i++) ir_ptrmap_put(&known, g->inputs.items[i], g);
  for (int i = 0; i < g->params.len; i++) ir_ptrmap_put(&known, g->params.items[i], g);
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nin; j++)
      if (!ir_ptrmap_get(&known, n->in[j])) {
        ir_error(n->loc, "%s: node %d of virtual stage %d reads a value that is neither an input "
                 "or parameter of its chunk nor computed before it", who, i, c->vstage);
        ok = false;
      }
    for (int j = 0; j < n->nout; j++) ir_ptrmap_put(&known, n->out[j], g);
  }
  for (int i = 0; i < g->outputs.len; i++)
    if (!ir_ptrmap_get(&known, g->outputs.items[i])) {
      ir_error(ir_cmdline, "%s: output %s of virtual stage %d is not the chunk's own", who,
               (const char *)g->output_names.items[i], c->vstage);
      ok = false;
    }
  ir_ptrmap_free(&known);
  return ok;
}

/* The parts `from` sends and `to` receives of one message, which must
 * line up in count and type. */
static bool verify_message(const IrVec *sent, const IrVec *got, const char *what, int from, int to,
                           const char *who) {
  bool ok = sent->len == got->len;
  for (int i = 0; ok && i < sent->len; i++)
    ok = ir_type_same(&((const IrValue *)sent->items[i])->type, &((const IrValue *)got->items[i])->type);
  if (!ok)
    ir_error(ir_cmdline, "%s: the %s virtual stage %d sends (%d parts) is not what virtual stage %d "
             "receives (%d parts)", who, what, from, sent->len, to, got->len);
  return ok;
}

bool pass_verify_chunks(PassProgram *p, const char *who) {
  if (!p->chunks || p->chunks[0].g == p->g) return ir_verify(p->g, who);
  bool ok = true;
  for (int k = 0; k < p->nchunks; k++) ok &= verify_chunk(&p->chunks[k], who);
  for (int k = 0; k + 1 < p->nchunks; k++) {
    const PassChunk *a = &p->chunks[k], *b = &p->chunks[k + 1];
    ok &= verify_message(&a->send_act, &b->recv_act, "activation", k, k + 1, who);
    ok &= verify_message(&b->send_grad, &a->recv_grad, "gradient", k + 1, k, who);
  }
  return ok;
}
