/* The `unroll` pass: replaces every repeat node by `count` copies of its
 * body, in order, so that later passes (autodiff, the memory plan, codegen)
 * see one flat graph.
 *
 * Iteration i of `repeat h` reads the repeat's inputs where i = 0 and the
 * previous iteration's yields afterwards for the carried args, and the
 * repeat's inputs for the invariant ones; the repeat's results become the
 * last iteration's yields. The body's parameters move to the top level as
 * h.i.NAME, in layer order after the parameters already there, keeping
 * their type and init; a repeat nested in a body composes its prefix with
 * the enclosing one (h.0.g.1.NAME). Each copied node records its layer
 * (IrNode.layer): the iteration of its top-level repeat, numbered on over
 * all top-level repeats in order, so that pp-partition can place layers
 * on pipeline stages; a nested repeat's nodes belong to the enclosing
 * layer. Counts must be folded: the pass checks
 * every repeat before it changes anything, so a failure leaves the graph as
 * it was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* ------------------------------------------------------------ value map */

/* From the values of a body (args, params, node results) to their copies,
 * freed after each iteration; values with none (top-level inputs and
 * params) map to themselves. */
typedef IrPtrMap ValMap;

static void map_put(ValMap *m, const IrValue *k, IrValue *v) { ir_ptrmap_put(m, k, v); }

static IrValue *map_get(const ValMap *m, IrValue *v) {
  IrValue *copy = ir_ptrmap_get(m, v);
  return copy ? copy : v;
}

static void map_free(ValMap *m) { ir_ptrmap_free(m); }

/* ------------------------------------------------------------ name set */

/* The top-level parameter names are kept, so that a body parameter whose
 * new name is taken already is reported rather than silently duplicated.
 * Adds p; returns the parameter that holds its name already, or NULL. */
static const IrValue *names_add(IrStrMap *set, const IrValue *p) {
  return ir_strmap_add(set, p->name, (void *)p);
}

/* --------------------------------------------------------------- checks */

static const char *label(const IrNode *n) { return n->label ? n->label : "?"; }

/* Every repeat, nested ones included, has a folded count and the structure
 * ir_add_repeat gives it. Reports each one that does not. */
static bool check_repeats(const IrGraph *g) {
  bool ok = true;
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (n->op != IR_OP_REPEAT) continue;
    IrAttr *count = ir_node_attr(n, "count"), *nc = ir_node_attr(n, "ncarried");
    if (!count || count->expr->kind != IR_EX_INT || count->expr->i <= 0) {
      ir_error(n->loc, "unroll: repeat '%s' has count = %s, not a positive integer (run the fold "
               "pass first)", label(n), count ? ir_expr_str(count->expr) : "?");
      ok = false;
    }
    IrGraph *b = n->body;
    if (!nc || nc->expr->kind != IR_EX_INT || !b || nc->expr->i != n->nout ||
        n->nout > n->nin || b->args.len != n->nin || b->outputs.len != n->nout) {
      ir_error(n->loc, "unroll: repeat '%s' is malformed (run the verify pass)", label(n));
      ok = false;
      continue;
    }
    ok = check_repeats(b) && ok;
  }
  return ok;
}

/* ----------------------------------------------------------------- copy */

typedef struct Unroller {
  IrGraph *top;
  IrStrMap names; /* param name -> IrValue* */
  int layer;      /* of the nodes being copied; -1 outside every repeat */
  int next_layer; /* the next top-level iteration's */
  bool ok;
} Unroller;

static void copy_graph(Unroller *u, IrGraph *body, ValMap *m, const char *prefix, IrPhase phase);

/* The copy of n, reading the copies of its inputs, appended to the top
 * level. A node keeps its phase, or takes its repeat's when that is later. */
static void copy_node(Unroller *u, IrNode *n, ValMap *m, IrPhase phase) {
  IrValue **in = ir_alloc(sizeof(IrValue *) * (size_t)(n->nin ? n->nin : 1));
  for (int i = 0; i < n->nin; i++) in[i] = map_get(m, n->in[i]);
  IrNode *c = ir_add_node(u->top, n->op, in, n->nin, n->attrs, n->nattr, n->nout, n->loc);
  c->phase = n->phase > phase ? n->phase : phase;
  c->layer = u->layer;
  for (int i = 0; i < n->nout; i++) {
    IrValue *from = n->out[i], *to = c->out[i];
    to->type = from->type;
    to->shard = from->shard;
    to->name = from->name;
    to->loc = from->loc;
    map_put(m, from, to);
  }
}

/* Appends `count` copies of repeat r's body to the top level. `outer` maps
 * the values r reads (those of the graph that holds r); on return it maps
 * r's results to the last iteration's yields. */
static void expand_repeat(Unroller *u, IrNode *r, ValMap *outer, const char *prefix,
                          IrPhase phase) {
  IrGraph *body = r->body;
  int64_t count = ir_attr_int(r, "count");
  int ncarried = r->nout;
  IrPhase inner = r->phase > phase ? r->phase : phase;
  IrValue **cur = ir_alloc(sizeof(IrValue *) * (size_t)(r->nin ? r->nin : 1));
  for (int i = 0; i < r->nin; i++) cur[i] = map_get(outer, r->in[i]);
  bool outermost = u->layer < 0;
  for (int64_t it = 0; it < count; it++) {
    if (outermost) u->layer = u->next_layer++;
    ValMap m = {0};
    for (int i = 0; i < r->nin; i++) map_put(&m, body->args.items[i], cur[i]);
    copy_graph(u, body, &m, ir_fmt("%s%s.%lld.", prefix, r->label, (long long)it), inner);
    for (int i = 0; i < ncarried; i++) cur[i] = map_get(&m, body->outputs.items[i]);
    map_free(&m);
  }
  if (outermost) u->layer = -1;
  for (int i = 0; i < ncarried; i++) map_put(outer, r->out[i], cur[i]);
}

/* Copies one iteration of body: its parameters become top-level ones named
 * PREFIX NAME, its nodes (and nested repeats, expanded) follow in order. */
static void copy_graph(Unroller *u, IrGraph *body, ValMap *m, const char *prefix, IrPhase phase) {
  for (int i = 0; i < body->params.len; i++) {
    IrValue *p = body->params.items[i];
    IrValue *c = ir_add_param(u->top, ir_fmt("%s%s", prefix, p->name), p->type, p->init, p->loc);
    c->shard = p->shard;
    c->pad_dim = p->pad_dim;
    c->unpadded = p->unpadded;
    const IrValue *clash = names_add(&u->names, c);
    if (clash) {
      ir_error(p->loc, "unroll: parameter @%s of the unrolled layer has the name of another "
               "parameter", c->name);
      ir_note(clash->loc, "@%s is declared here", clash->name);
      u->ok = false;
    }
    map_put(m, p, c);
  }
  for (int i = 0; i < body->nodes.len; i++) {
    IrNode *n = body->nodes.items[i];
    if (n->op == IR_OP_REPEAT)
      expand_repeat(u, n, m, prefix, phase);
    else
      copy_node(u, n, m, phase);
  }
  /* Gradients of body parameters (a hand-written module may have them). */
  for (int i = 0; i < body->params.len; i++) {
    IrValue *p = body->params.items[i];
    if (p->grad) map_get(m, p)->grad = map_get(m, p->grad);
  }
}

bool pass_unroll(IrGraph **gp, const PassOptions *opt) {
  (void)opt;
  IrGraph *g = ir_top(*gp);
  if (!check_repeats(g)) return false;
  Unroller u = {.top = g, .layer = -1, .ok = true};
  for (int i = 0; i < g->params.len; i++) names_add(&u.names, g->params.items[i]);
  /* The top-level nodes are re-appended in order: the kept ones as they
   * are (with their inputs renamed), each repeat as its copies. */
  IrVec old = g->nodes;
  g->nodes = (IrVec){0};
  ValMap top = {0};
  for (int i = 0; i < old.len; i++) {
    IrNode *n = old.items[i];
    if (n->op == IR_OP_REPEAT) {
      expand_repeat(&u, n, &top, "", IR_PHASE_FORWARD);
      continue;
    }
    for (int j = 0; j < n->nin; j++) n->in[j] = map_get(&top, n->in[j]);
    ir_vec_push(&g->nodes, n);
  }
  for (int i = 0; i < g->outputs.len; i++) g->outputs.items[i] = map_get(&top, g->outputs.items[i]);
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i];
    if (p->grad) p->grad = map_get(&top, p->grad);
  }
  map_free(&top);
  ir_strmap_free(&u.names);
  return u.ok;
}
