/* The IR printer. It writes the text form that ir_parse reads back, so that
 * printing, parsing and printing again gives identical text:
 *
 *   model gpt2 {
 *     config ffn = (4 * hidden)
 *     input %tokens: i32[batch, seq]
 *     param @wte.weight: f32[vocab, hidden] = normal(0, init_std)
 *     %0 = embedding(%tokens, @wte.weight)
 *     %1 = repeat h(%0) {count = layers, ncarried = 1} {
 *       ^(%2)
 *       param @ln_1.weight: f32[hidden] = ones
 *       ...
 *       yield %7
 *     }
 *     output loss = %9
 *   }
 *
 * After `autodiff` the nodes of a graph end with its backward nodes, which
 * a line `backward:` introduces, and each parameter's gradient follows the
 * nodes as `grad @wte.weight = %57`. A graph partitioned for tensor
 * parallelism says so after its configs (`mesh tensor = 2`); its values
 * carry their specs after their types (` split(tensor, 1, 3)`,
 * ` partial(tensor)`), and a padded parameter its real size
 * (` unpadded(0, 50257)`).
 *
 * A graph partitioned into pipeline stages says so too (`mesh pipeline =
 * 2`, `chunks = 2` with several chunks per stage); a line `stage K:` comes
 * before the first node of virtual stage K and wherever the stage changes
 * (in the forward nodes and again after `backward:`), and a stage's copy
 * of a shared parameter names the one it copies (` tied(@wte.weight)`).
 *
 * Node results are numbered here, in order of appearance over the whole
 * module, rather than from IrValue.id: ids depend on how a graph was built
 * and rewritten, and the text must not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* ------------------------------------------------------- value numbering */

/* Printed numbers live in a pointer map as num + 1, since the map's
 * values cannot be NULL. */
static void map_put(IrPtrMap *m, const IrValue *v, int num) {
  ir_ptrmap_put(m, v, (void *)(intptr_t)(num + 1));
}

/* The number of a node result or body arg, -1 when it is not in the module
 * (a dangling reference a broken pass left behind). */
static int map_get(const IrPtrMap *m, const IrValue *v) {
  return (int)(intptr_t)ir_ptrmap_get(m, v) - 1;
}

typedef struct Printer {
  FILE *out;
  IrPtrMap nums;
  int next;
} Printer;

/* Numbers values in the order the printer writes them: a node's results,
 * then (for a repeat) its body's args and the body's nodes, depth first.
 * Numbering everything up front lets a graph with a use before its def (a
 * bug the verifier reports) still print. */
static void number_graph(Printer *pr, const IrGraph *g) {
  for (int i = 0; i < g->args.len; i++) map_put(&pr->nums, g->args.items[i], pr->next++);
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nout; j++)
      if (n->out && n->out[j]) map_put(&pr->nums, n->out[j], pr->next++);
    if (n->body) number_graph(pr, n->body);
  }
}

/* ---------------------------------------------------------------- pieces */

static void indent(Printer *pr, int depth) {
  for (int i = 0; i < depth; i++) fputs("  ", pr->out);
}

/* A missing expression (a broken graph) prints as `?`, which the parser
 * rejects, rather than crashing the printer used to debug that graph. */
static void print_expr(Printer *pr, const IrExpr *e) {
  if (e)
    ir_expr_print(pr->out, e);
  else
    fputc('?', pr->out);
}

static void print_ref(Printer *pr, const IrValue *v) {
  if (!v) {
    fputs("%?", pr->out);
    return;
  }
  switch (v->kind) {
  case IR_VAL_INPUT: fprintf(pr->out, "%%%s", v->name); return;
  case IR_VAL_PARAM: fprintf(pr->out, "@%s", v->name); return;
  case IR_VAL_NODE:
  case IR_VAL_ARG: break;
  }
  int num = map_get(&pr->nums, v);
  if (num < 0)
    fputs("%?", pr->out);
  else
    fprintf(pr->out, "%%%d", num);
}

/* ` split(tensor, 1)`, ` split(tensor, 1, 3)` (3 blocks), ` partial(tensor)`,
 * and ` replicated(tensor)` for a replicated spec the model fixed; nothing
 * for the ordinary replicated one. */
static void print_shard(Printer *pr, const IrShard *s) {
  const char *axis = ir_axis_name(s->axis);
  if (s->kind == IR_SPLIT && ir_shard_blocks(s) > 1)
    fprintf(pr->out, " split(%s, %d, %d)", axis, s->dim, s->blocks);
  else if (s->kind == IR_SPLIT)
    fprintf(pr->out, " split(%s, %d)", axis, s->dim);
  else if (s->kind == IR_PARTIAL)
    fprintf(pr->out, " partial(%s)", axis);
  else if (s->fixed)
    fprintf(pr->out, " replicated(%s)", axis);
}

/* `NAME: TYPE SHARD`, the type only when known, the sharding only when it
 * is not replicated, and a padded parameter's real size. */
static void print_def(Printer *pr, const IrValue *v) {
  print_ref(pr, v);
  if (!v) return;
  if (v->type.rank >= 0) {
    fputs(": ", pr->out);
    ir_type_print(pr->out, &v->type);
  }
  print_shard(pr, &v->shard);
  if (v->unpadded > 0) fprintf(pr->out, " unpadded(%d, %lld)", v->pad_dim, (long long)v->unpadded);
  if (v->tied && v->tied->name) fprintf(pr->out, " tied(@%s)", v->tied->name);
}

/* A quiet attribute (ops.def `?name=default`) at its default is left out. */
static bool attr_hidden(const IrNode *n, const IrAttr *a) {
  const IrOpInfo *info = ir_op_info(n->op);
  for (int k = 0; k < info->nattr; k++) {
    const IrAttrSpec *spec = &info->attr[k];
    if (!spec->quiet || !a->name || strcmp(spec->name, a->name) != 0) continue;
    const IrExpr *e = a->expr, *d = ir_attr_default(spec, (IrLoc){0});
    if (!e || !d || e->kind != d->kind) return false;
    return e->kind == IR_EX_INT ? e->i == d->i : e->kind == IR_EX_FLOAT && e->f == d->f;
  }
  return false;
}

static void print_refs(Printer *pr, IrValue **vals, int n) {
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", pr->out);
    print_ref(pr, vals ? vals[i] : NULL);
  }
}

static void print_param(Printer *pr, const IrValue *v, int depth) {
  indent(pr, depth);
  fputs("param ", pr->out);
  print_def(pr, v);
  switch (v->init.kind) {
  case IR_INIT_NONE: break;
  case IR_INIT_ZEROS: fputs(" = zeros", pr->out); break;
  case IR_INIT_ONES: fputs(" = ones", pr->out); break;
  case IR_INIT_NORMAL:
    fputs(" = normal(", pr->out);
    print_expr(pr, v->init.mean);
    fputs(", ", pr->out);
    print_expr(pr, v->init.std);
    fputc(')', pr->out);
    break;
  }
  fputc('\n', pr->out);
}

static void print_graph_items(Printer *pr, const IrGraph *g, int depth);

/* `%3, %4 = split(%2) {n = 2, axis = -1}`, or for a repeat
 * `%5 = repeat h(%0, %1) {count = layers, ncarried = 1} {` and its body. */
static void print_node(Printer *pr, const IrNode *n, int depth) {
  indent(pr, depth);
  for (int i = 0; i < n->nout; i++) {
    if (i) fputs(", ", pr->out);
    print_def(pr, n->out ? n->out[i] : NULL);
  }
  if (n->nout > 0) fputs(" = ", pr->out);
  fputs(ir_op_info(n->op)->name, pr->out);
  if (n->label) fprintf(pr->out, " %s", n->label);
  fputc('(', pr->out);
  print_refs(pr, n->in, n->nin);
  fputc(')', pr->out);
  int shown = 0;
  for (int i = 0; i < n->nattr; i++) {
    if ((unsigned)n->op < IR_OP_COUNT && attr_hidden(n, &n->attrs[i])) continue;
    fprintf(pr->out, "%s%s = ", shown++ ? ", " : " {", n->attrs[i].name);
    print_expr(pr, n->attrs[i].expr);
  }
  if (shown) fputc('}', pr->out);
  if (n->body) {
    fputs(" {\n", pr->out);
    print_graph_items(pr, n->body, depth + 1);
    indent(pr, depth);
    fputc('}', pr->out);
  }
  fputc('\n', pr->out);
}

/* The lines of one graph: a body starts with its args line `^(...)` and
 * ends with `yield`; the top level has inputs and named outputs. */
static void print_graph_items(Printer *pr, const IrGraph *g, int depth) {
  if (g->parent) {
    indent(pr, depth);
    fputs("^(", pr->out);
    for (int i = 0; i < g->args.len; i++) {
      if (i) fputs(", ", pr->out);
      print_def(pr, g->args.items[i]);
    }
    fputs(")\n", pr->out);
  }
  for (int i = 0; i < g->inputs.len; i++) {
    indent(pr, depth);
    fputs("input ", pr->out);
    print_def(pr, g->inputs.items[i]);
    fputc('\n', pr->out);
  }
  for (int i = 0; i < g->params.len; i++) print_param(pr, g->params.items[i], depth);
  bool backward = false;
  bool staged = !g->parent && (g->mesh[IR_AXIS_PIPELINE] > 1 || g->vpp > 1);
  int stage = -1;
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (!backward && n && n->phase == IR_PHASE_BACKWARD) {
      indent(pr, depth);
      fputs("backward:\n", pr->out);
      backward = true;
      stage = -1;
    }
    if (staged && n && n->stage != stage) {
      indent(pr, depth);
      fprintf(pr->out, "stage %d:\n", n->stage);
      stage = n->stage;
    }
    print_node(pr, n, depth);
  }
  for (int i = 0; i < g->params.len; i++) {
    const IrValue *v = g->params.items[i];
    if (!v->grad) continue;
    indent(pr, depth);
    fprintf(pr->out, "grad @%s = ", v->name);
    print_ref(pr, v->grad);
    fputc('\n', pr->out);
  }
  if (g->parent) {
    indent(pr, depth);
    fputs("yield", pr->out);
    for (int i = 0; i < g->outputs.len; i++) {
      fputs(i ? ", " : " ", pr->out);
      print_ref(pr, g->outputs.items[i]);
    }
    fputc('\n', pr->out);
    return;
  }
  for (int i = 0; i < g->outputs.len; i++) {
    const char *name = i < g->output_names.len ? g->output_names.items[i] : NULL;
    indent(pr, depth);
    fprintf(pr->out, "output %s = ", name ? name : "?");
    print_ref(pr, g->outputs.items[i]);
    fputc('\n', pr->out);
  }
}

/* Prints the whole module that g belongs to. */
void ir_print(FILE *out, const IrGraph *g) {
  while (g->parent) g = g->parent;
  Printer pr = {.out = out};
  number_graph(&pr, g);
  fprintf(out, "model %s {\n", g->name);
  for (int i = 0; i < g->configs.len; i++) {
    const IrConfig *c = g->configs.items[i];
    fprintf(out, "  config %s = ", c->name);
    print_expr(&pr, c->expr);
    fputc('\n', out);
  }
  for (int a = 0; a < IR_MESH_AXES; a++)
    if (g->mesh[a] > 1) fprintf(out, "  mesh %s = %d\n", ir_axis_name((IrMeshAxis)a), g->mesh[a]);
  if (g->vpp > 1) fprintf(out, "  chunks = %d\n", g->vpp);
  print_graph_items(&pr, g, 1);
  fputs("}\n", out);
  ir_ptrmap_free(&pr.nums);
}
