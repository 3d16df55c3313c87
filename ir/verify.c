/* The IR verifier: the invariants that every pass must keep, checked after
 * the frontend and (with --verify-each) after every pass, so that a broken
 * rewrite is reported by the pass that made it rather than by a crash three
 * passes later. Each violation is an error at the node it concerns, with
 * the message prefixed by the pass, e.g.
 *   after pass 'fold': value %3 used before it is defined
 * Values are named as ir_print numbers them, so the message can be read
 * against --print-after output. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* Repeat nesting beyond this is taken for a cycle in a corrupted graph. */
enum { MAX_NESTING = 10000 };

/* What the verifier knows of each value: its printed number (-1 for inputs
 * and params, which print by name) and whether its definition has been
 * seen yet while walking its graph in order. */
typedef struct Slot {
  const IrValue *v;
  int num;
  bool defined;
} Slot;

typedef struct Verifier {
  const char *who;
  IrPtrMap slots; /* IrValue* -> Slot* (arena) */
  int next;
  bool ok;
} Verifier;

/* The slot of v, created (numbered `num`) when absent and `num` is not -2. */
static Slot *slot(Verifier *vf, const IrValue *v, int num) {
  Slot *s = ir_ptrmap_get(&vf->slots, v);
  if (s || num == -2) return s;
  s = ir_alloc(sizeof *s);
  *s = (Slot){v, num, false};
  ir_ptrmap_put(&vf->slots, v, s);
  return s;
}

/* Numbers node results and body args in the printer's order. */
static void number_graph(Verifier *vf, const IrGraph *g, int depth) {
  if (depth > MAX_NESTING) return;
  for (int i = 0; i < g->args.len; i++)
    if (g->args.items[i]) slot(vf, g->args.items[i], vf->next++);
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (!n) continue;
    for (int j = 0; n->out && j < n->nout; j++)
      if (n->out[j] && !slot(vf, n->out[j], -2)) slot(vf, n->out[j], vf->next++);
    if (n->body) number_graph(vf, n->body, depth + 1);
  }
}

/* How messages name a value: %tokens, @wte.weight or %7. */
static const char *vname(Verifier *vf, const IrValue *v) {
  if ((v->kind == IR_VAL_INPUT || v->kind == IR_VAL_PARAM) && v->name)
    return ir_fmt("%s%s", v->kind == IR_VAL_INPUT ? "%" : "@", v->name);
  Slot *s = slot(vf, v, -2);
  if (s && s->num >= 0) return ir_fmt("%%%d", s->num);
  return "%?";
}

static const char *plural(int n) { return n == 1 ? "" : "s"; }

static void verr(Verifier *vf, IrLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void verr(Verifier *vf, IrLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = ir_vfmt(fmt, ap);
  va_end(ap);
  if (vf->who)
    ir_error(loc, "after pass '%s': %s", vf->who, msg);
  else
    ir_error(loc, "%s", msg);
  vf->ok = false;
}

static bool is_ancestor(const IrGraph *a, const IrGraph *g) {
  int steps = 0;
  for (g = g->parent; g && steps < MAX_NESTING; g = g->parent, steps++)
    if (g == a) return true;
  return false;
}

/* A use of v in graph g (by a node, or as an output or yield). */
static void check_use(Verifier *vf, const IrGraph *g, const IrValue *v, IrLoc loc,
                      const char *what) {
  if (v->graph != g) {
    if (v->graph && is_ancestor(v->graph, g))
      verr(vf, loc, "%s is %s of an enclosing graph; a repeat body sees outer values only "
           "through its args", what, vname(vf, v));
    else
      verr(vf, loc, "%s is %s of another graph", what, vname(vf, v));
    return;
  }
  Slot *s = slot(vf, v, -2);
  if (s && s->defined) return;
  if (v->kind == IR_VAL_NODE && s && s->num >= 0)
    verr(vf, loc, "value %s used before it is defined", vname(vf, v));
  else if (v->kind == IR_VAL_NODE)
    verr(vf, loc, "%s is the result of a node that is not in the graph", what);
  else
    verr(vf, loc, "%s is %s, which is not declared in this graph", what, vname(vf, v));
}

/* ------------------------------------------------------- unique names */

/* Adds name; false when it was there already. */
static bool name_add(IrStrMap *set, const char *name) {
  return !ir_strmap_add(set, name, (void *)name);
}

/* -------------------------------------------------------- declarations */

/* Inputs, params and args: the right kind, owned by g, named uniquely. */
static void check_decls(Verifier *vf, const IrGraph *g, const IrVec *vals, IrValueKind kind,
                        const char *what) {
  IrStrMap names = {0};
  for (int i = 0; i < vals->len; i++) {
    const IrValue *v = vals->items[i];
    IrLoc loc = g->owner ? g->owner->loc : (IrLoc){0};
    if (!v) {
      verr(vf, loc, "%s %d is missing", what, i);
      continue;
    }
    if (v->kind != kind || v->graph != g)
      verr(vf, v->loc, "%s %s is not a %s of this graph", what, vname(vf, v), what);
    if (kind != IR_VAL_ARG && !v->name)
      verr(vf, v->loc, "%s %d has no name", what, i);
    else if (kind != IR_VAL_ARG && !name_add(&names, v->name))
      verr(vf, v->loc, "%s name '%s' is declared twice", what, v->name);
    if (v->unpadded > 0 && v->type.rank >= 0 && (v->pad_dim < 0 || v->pad_dim >= v->type.rank))
      verr(vf, v->loc, "%s %s is padded on dim %d, which it does not have", what, vname(vf, v),
           v->pad_dim);
    Slot *s = slot(vf, v, -1);
    s->defined = true;
  }
  ir_strmap_free(&names);
}

/* ---------------------------------------------------------------- nodes */

static void check_attrs(Verifier *vf, const IrNode *n, const IrOpInfo *info) {
  for (int k = 0; k < info->nattr; k++)
    if (!ir_node_attr(n, info->attr[k].name))
      verr(vf, n->loc, "op '%s' lacks attribute '%s'", info->name, info->attr[k].name);
  for (int i = 0; i < n->nattr; i++) {
    const IrAttr *a = &n->attrs[i];
    int k = 0;
    while (k < info->nattr && (!a->name || strcmp(info->attr[k].name, a->name) != 0)) k++;
    if (k == info->nattr)
      verr(vf, n->loc, "op '%s' has no attribute '%s'", info->name, a->name ? a->name : "?");
    else if (!a->expr)
      verr(vf, n->loc, "attribute '%s' of '%s' has no value", a->name, info->name);
    else if (ir_node_attr(n, a->name) != a)
      verr(vf, n->loc, "attribute '%s' of '%s' is set twice", a->name, info->name);
  }
}

/* Input and result counts against ops.def (a repeat's results are checked
 * against ncarried instead). */
static void check_counts(Verifier *vf, const IrNode *n, const IrOpInfo *info) {
  if (n->nin < info->min_in || (info->max_in >= 0 && n->nin > info->max_in)) {
    if (info->max_in < 0)
      verr(vf, n->loc, "op '%s' takes at least %d inputs, found %d", info->name, info->min_in,
           n->nin);
    else if (info->min_in == info->max_in)
      verr(vf, n->loc, "op '%s' takes %d input%s, found %d", info->name, info->min_in,
           plural(info->min_in), n->nin);
    else
      verr(vf, n->loc, "op '%s' takes %d to %d inputs, found %d", info->name, info->min_in,
           info->max_in, n->nin);
  }
  if (info->flags & IR_OPF_REGION) return;
  if ((info->flags & IR_OPF_MULTI_OUT) && n->nout < 1)
    verr(vf, n->loc, "op '%s' has no results", info->name);
  else if (!(info->flags & IR_OPF_MULTI_OUT) && n->nout != info->nout)
    verr(vf, n->loc, "op '%s' has %d result%s, found %d", info->name, info->nout,
         plural(info->nout), n->nout);
}

static const char *label(const IrNode *n) { return n->label ? n->label : "?"; }

/* Once types are inferred, a carried value keeps its type from one
 * iteration to the next: yield i and result i match arg i. */
static void check_carried_types(Verifier *vf, const IrNode *n, int ncarried) {
  const IrGraph *b = n->body;
  for (int i = 0; i < ncarried; i++) {
    const IrValue *arg = b->args.items[i], *y = b->outputs.items[i], *out = n->out[i];
    if (!arg || !ir_type_known(&arg->type)) continue;
    if (y && ir_type_known(&y->type) && !ir_type_same(&y->type, &arg->type))
      verr(vf, n->loc, "repeat '%s': yield %d has type %s but carried arg %d has type %s",
           label(n), i, ir_type_str(&y->type), i, ir_type_str(&arg->type));
    if (out && ir_type_known(&out->type) && !ir_type_same(&out->type, &arg->type))
      verr(vf, n->loc, "repeat '%s': result %d has type %s but carried arg %d has type %s",
           label(n), i, ir_type_str(&out->type), i, ir_type_str(&arg->type));
  }
}

static void check_graph(Verifier *vf, const IrGraph *g, int depth);

/* A repeat: a body owned by it, ncarried results, one body arg per input
 * and one yield per carried value. */
static void check_repeat(Verifier *vf, const IrGraph *g, const IrNode *n, int depth) {
  const IrGraph *b = n->body;
  if (!b) {
    verr(vf, n->loc, "repeat has no body");
    return;
  }
  if (b->parent != g || b->owner != n) {
    verr(vf, n->loc, "the body of repeat '%s' is not linked to it (parent/owner)",
         label(n));
    return;
  }
  IrAttr *nc = ir_node_attr(n, "ncarried");
  if (!nc || !nc->expr || nc->expr->kind != IR_EX_INT || nc->expr->i < 0 ||
      nc->expr->i > n->nin) {
    verr(vf, n->loc, "repeat '%s': ncarried is not an integer from 0 to %d",
         label(n), n->nin);
  } else {
    int ncarried = (int)nc->expr->i;
    bool ok = true;
    if (n->nout != ncarried) {
      verr(vf, n->loc, "repeat '%s' has %d result%s but carries %d value%s", label(n), n->nout,
           plural(n->nout), ncarried, plural(ncarried));
      ok = false;
    }
    if (b->args.len != n->nin) {
      verr(vf, n->loc, "repeat '%s' has %d input%s but its body %d arg%s", label(n), n->nin,
           plural(n->nin), b->args.len, plural(b->args.len));
      ok = false;
    }
    if (b->outputs.len != ncarried) {
      verr(vf, n->loc, "repeat '%s' carries %d value%s but its body yields %d", label(n),
           ncarried, plural(ncarried), b->outputs.len);
      ok = false;
    }
    if (ok) check_carried_types(vf, n, ncarried);
  }
  check_graph(vf, b, depth + 1);
}

static void check_node(Verifier *vf, const IrGraph *g, const IrNode *n, int depth) {
  if ((unsigned)n->op >= IR_OP_COUNT) {
    verr(vf, n->loc, "node with invalid op %d", (int)n->op);
    return;
  }
  const IrOpInfo *info = ir_op_info(n->op);
  for (int i = 0; i < n->nin; i++) {
    const IrValue *v = n->in ? n->in[i] : NULL;
    if (!v) {
      verr(vf, n->loc, "input %d of '%s' is missing", i, info->name);
      continue;
    }
    check_use(vf, g, v, n->loc, ir_fmt("input %d of '%s'", i, info->name));
    if (n->phase == IR_PHASE_FORWARD && v->kind == IR_VAL_NODE && v->def &&
        v->def->phase == IR_PHASE_BACKWARD)
      verr(vf, n->loc, "forward node '%s' reads %s, a result of the backward pass", info->name,
           vname(vf, v));
  }
  check_counts(vf, n, info);
  check_attrs(vf, n, info);
  for (int i = 0; i < n->nout; i++) {
    IrValue *v = n->out ? n->out[i] : NULL;
    if (!v) {
      verr(vf, n->loc, "result %d of '%s' is missing", i, info->name);
      continue;
    }
    if (v->kind != IR_VAL_NODE || v->def != n || v->def_index != i || v->graph != g)
      verr(vf, n->loc, "result %d of '%s' (%s) does not point back to its node", i, info->name,
           vname(vf, v));
    Slot *s = slot(vf, v, -2);
    if (s && s->defined)
      verr(vf, n->loc, "%s is defined twice", vname(vf, v));
    else if (s)
      s->defined = true;
  }
  if (info->flags & IR_OPF_REGION)
    check_repeat(vf, g, n, depth);
  else if (n->body)
    verr(vf, n->loc, "op '%s' cannot have a body", info->name);
}

/* Each node in order, forward ones first: the backward pass runs after
 * the forward one, so no forward node may follow a backward one. */
static void check_nodes(Verifier *vf, const IrGraph *g, int depth) {
  IrLoc where = g->owner ? g->owner->loc : (IrLoc){0};
  const IrNode *first_backward = NULL;
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (!n) {
      verr(vf, where, "node %d of the graph is missing", i);
      continue;
    }
    if (n->phase != IR_PHASE_FORWARD && n->phase != IR_PHASE_BACKWARD)
      verr(vf, n->loc, "node with invalid phase %d", (int)n->phase);
    else if (n->phase == IR_PHASE_BACKWARD && !first_backward)
      first_backward = n;
    else if (n->phase == IR_PHASE_FORWARD && first_backward)
      verr(vf, n->loc, "forward node '%s' comes after the first backward node",
           (unsigned)n->op < IR_OP_COUNT ? ir_op_info(n->op)->name : "?");
    check_node(vf, g, n, depth);
  }
}

/* A parameter's gradient is a value of the same graph, of its type. */
static void check_grads(Verifier *vf, const IrGraph *g) {
  for (int i = 0; i < g->params.len; i++) {
    const IrValue *p = g->params.items[i];
    if (!p || !p->grad) continue;
    const char *what = ir_fmt("the gradient of %s", vname(vf, p));
    check_use(vf, g, p->grad, p->loc, what);
    const IrType *t = &p->grad->type;
    if (ir_type_known(t) && ir_type_known(&p->type) && !ir_type_same(t, &p->type))
      verr(vf, p->loc, "%s (%s) has type %s, not the parameter's %s", what, vname(vf, p->grad),
           ir_type_str(t), ir_type_str(&p->type));
  }
  for (int i = 0; i < g->inputs.len; i++) {
    const IrValue *v = g->inputs.items[i];
    if (v && v->grad) verr(vf, v->loc, "input %s has a gradient; only parameters do", vname(vf, v));
  }
}

/* ------------------------------------------------------ pipeline stages */

static const char *op_name(const IrNode *n) {
  return (unsigned)n->op < IR_OP_COUNT ? ir_op_info(n->op)->name : "?";
}

/* An input of n on a pipeline of p > 1 stages: a node result of n's own
 * stage (a pp_boundary's of its src stage), a parameter that this stage
 * alone holds, or a model input, which every stage reads. */
static void check_stage_use(Verifier *vf, const IrNode *n, const IrValue *v, IrPtrMap *holder) {
  if (v->kind == IR_VAL_PARAM) {
    const IrNode *first = ir_ptrmap_get(holder, v);
    if (!first)
      ir_ptrmap_put(holder, v, (void *)n);
    else if (first->stage != n->stage)
      verr(vf, n->loc, "%s is used on virtual stages %d and %d; each stage needs its own copy "
           "(a tied parameter)", vname(vf, v), first->stage, n->stage);
    return;
  }
  if (v->kind != IR_VAL_NODE || !v->def) return;
  int from = v->def->stage;
  if (n->op == IR_OP_PP_BOUNDARY) {
    IrAttr *src = ir_node_attr(n, "src");
    if (src && src->expr->kind == IR_EX_INT && src->expr->i != from)
      verr(vf, n->loc, "pp_boundary from virtual stage %lld reads %s of virtual stage %d",
           (long long)src->expr->i, vname(vf, v), from);
  } else if (from != n->stage) {
    verr(vf, n->loc, "'%s' on virtual stage %d reads %s of virtual stage %d; values cross "
         "stages only through pp_boundary", op_name(n), n->stage, vname(vf, v), from);
  }
}

/* The invariants of a graph partitioned into pipeline stages: every node
 * on a virtual stage of the mesh, the forward nodes in stage order (a
 * stage's forward never waits for a later one), and across physical stages
 * data moves only through pp_boundary nodes whose dst is their stage. */
static void check_stages(Verifier *vf, const IrGraph *g) {
  int p = g->mesh[IR_AXIS_PIPELINE] > 1 ? g->mesh[IR_AXIS_PIPELINE] : 1;
  int nv = p * (g->vpp > 1 ? g->vpp : 1), last_forward = 0;
  IrPtrMap holder = {0};
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (!n || (unsigned)n->op >= IR_OP_COUNT) continue;
    if (n->stage < 0 || n->stage >= nv) {
      verr(vf, n->loc, "'%s' is on virtual stage %d; the graph has %d", op_name(n), n->stage, nv);
      continue;
    }
    if (n->op == IR_OP_REPEAT && nv > 1)
      verr(vf, n->loc, "repeat '%s' in a graph partitioned into pipeline stages", label(n));
    if (n->phase == IR_PHASE_FORWARD) {
      if (n->stage < last_forward)
        verr(vf, n->loc, "forward node '%s' of virtual stage %d comes after one of stage %d",
             op_name(n), n->stage, last_forward);
      else
        last_forward = n->stage;
    }
    if (n->op == IR_OP_PP_BOUNDARY) {
      IrAttr *dst = ir_node_attr(n, "dst");
      if (p == 1)
        verr(vf, n->loc, "pp_boundary in a graph without pipeline stages to cross");
      else if (dst && dst->expr->kind == IR_EX_INT && dst->expr->i != n->stage)
        verr(vf, n->loc, "pp_boundary to virtual stage %lld is on virtual stage %d",
             (long long)dst->expr->i, n->stage);
    }
    if (p > 1)
      for (int j = 0; n->in && j < n->nin; j++)
        if (n->in[j]) check_stage_use(vf, n, n->in[j], &holder);
  }
  for (int i = 0; i < g->params.len; i++) {
    const IrValue *v = g->params.items[i];
    if (v && v->tied && (v->tied->kind != IR_VAL_PARAM || v->tied->graph != g || v->tied->tied))
      verr(vf, v->loc, "%s is tied to %s, which is not an untied parameter of its graph",
           vname(vf, v), vname(vf, v->tied));
  }
  ir_ptrmap_free(&holder);
}

/* Declarations first, then each node in order (so a use must follow its
 * def), then what the graph hands back. */
static void check_graph(Verifier *vf, const IrGraph *g, int depth) {
  IrLoc where = g->owner ? g->owner->loc : (IrLoc){0};
  if (depth > MAX_NESTING) {
    verr(vf, where, "repeat bodies nested too deeply (a cycle?)");
    return;
  }
  if (!g->parent && g->args.len) verr(vf, where, "the top-level graph has body args");
  if (g->parent && g->inputs.len) verr(vf, where, "a repeat body has model inputs");
  check_decls(vf, g, &g->inputs, IR_VAL_INPUT, "input");
  check_decls(vf, g, &g->params, IR_VAL_PARAM, "param");
  check_decls(vf, g, &g->args, IR_VAL_ARG, "arg");
  check_nodes(vf, g, depth);
  if (!g->parent) check_stages(vf, g);
  check_grads(vf, g);
  if (!g->parent && g->output_names.len != g->outputs.len)
    verr(vf, where, "%d outputs but %d output names", g->outputs.len, g->output_names.len);
  for (int i = 0; i < g->outputs.len; i++) {
    const IrValue *v = g->outputs.items[i];
    const char *name = i < g->output_names.len ? g->output_names.items[i] : NULL;
    const char *what = g->parent ? ir_fmt("yield %d", i)
                                 : ir_fmt("output '%s'", name ? name : "?");
    if (!v)
      verr(vf, where, "%s is missing", what);
    else
      check_use(vf, g, v, g->parent ? where : v->loc, what);
  }
}

bool ir_verify(IrGraph *g, const char *who) {
  Verifier vf = {.who = who, .ok = true};
  number_graph(&vf, ir_top(g), 0);
  check_graph(&vf, g, 0);
  ir_ptrmap_free(&vf.slots);
  return vf.ok;
}
