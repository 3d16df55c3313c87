/* Unit test of ir_verify: graphs broken the way a faulty pass could break
 * them must be rejected, with an error that names the pass and the value,
 * and a sound graph must pass silently. The broken graphs must also still
 * print (--print-after-all shows them before the verifier runs). */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static int failures;

static IrLoc at(int line) { return (IrLoc){"test.shard", line, 1}; }

static IrType type2(IrDType dt, int64_t a, int64_t b) {
  IrType t;
  int64_t shape[2] = {a, b};
  ir_type_set_shape(&t, dt, 2, shape);
  return t;
}

/* Runs the verifier with diagnostics captured; checks its verdict and that
 * every expected fragment appears in what it reported. */
static void expect_verify(const char *test, IrGraph *g, const char *who, bool valid,
                          const char *const *fragments) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  ir_diag_set_stream(f);
  bool ok = ir_verify(g, who);
  ir_print(f, g);
  ir_diag_set_stream(NULL);
  fclose(f);
  bool pass = ok == valid;
  for (int i = 0; fragments && fragments[i]; i++)
    if (!strstr(out, fragments[i])) {
      printf("%s: FAIL: expected the message to contain \"%s\"\n", test, fragments[i]);
      pass = false;
    }
  if (ok != valid) printf("%s: FAIL: ir_verify returned %s\n", test, ok ? "true" : "false");
  if (!pass || getenv("VERBOSE")) {
    printf("--- what was reported and printed:\n%s---\n", out);
  }
  if (!pass)
    failures++;
  else
    printf("%s: ok\n", test);
  free(out);
}

/* input x: f32[2, 3]; param w: f32[3]; %0 = gelu(x); %1 = add(%0, w) */
static IrGraph *sound_graph(IrValue **x, IrValue **w) {
  IrGraph *g = ir_graph_new("t");
  *x = ir_add_input(g, "x", type2(IR_F32, 2, 3), at(1));
  *w = ir_add_param(g, "w", type2(IR_F32, 1, 3), (IrInit){IR_INIT_ZEROS, NULL, NULL}, at(2));
  IrNode *a = ir_add_node(g, IR_OP_GELU, x, 1, NULL, 0, 1, at(3));
  IrValue *in[2] = {a->out[0], *w};
  IrNode *b = ir_add_node(g, IR_OP_ADD, in, 2, NULL, 0, 1, at(4));
  ir_add_output(g, "y", b->out[0]);
  return g;
}

static void test_sound(void) {
  IrValue *x, *w;
  expect_verify("sound graph", sound_graph(&x, &w), "fold", true, NULL);
}

/* A pass that moved a node above the node whose result it reads. */
static void test_use_before_def(void) {
  IrValue *x, *w;
  IrGraph *g = sound_graph(&x, &w);
  void *first = g->nodes.items[0];
  g->nodes.items[0] = g->nodes.items[1];
  g->nodes.items[1] = first;
  const char *want[] = {
      "test.shard:4:1: error: after pass 'fold': value %1 used before it is defined", NULL};
  expect_verify("use before def", g, "fold", false, want);
}

/* Without a pass name there is no prefix. */
static void test_no_pass_name(void) {
  IrValue *x, *w;
  IrGraph *g = sound_graph(&x, &w);
  void *first = g->nodes.items[0];
  g->nodes.items[0] = g->nodes.items[1];
  g->nodes.items[1] = first;
  const char *want[] = {"test.shard:4:1: error: value %1 used before it is defined", NULL};
  expect_verify("no pass name", g, NULL, false, want);
}

/* A repeat over x: body arg %a, %b = gelu(%a), yielding `nyield` values. */
static IrGraph *repeat_graph(int nyield, IrType yield_type, IrNode **rep) {
  IrGraph *g = ir_graph_new("t");
  IrValue *x = ir_add_input(g, "x", type2(IR_F32, 2, 3), at(1));
  IrGraph *body = ir_body_new(g);
  IrValue *a = ir_add_arg(body, type2(IR_F32, 2, 3), at(2));
  IrNode *n = ir_add_node(body, IR_OP_GELU, &a, 1, NULL, 0, 1, at(3));
  n->out[0]->type = yield_type;
  for (int i = 0; i < nyield; i++) ir_add_output(body, NULL, n->out[0]);
  *rep = ir_add_repeat(g, "h", ir_expr_int(2, at(4)), &x, 1, 1, body, at(4));
  ir_add_output(g, "y", (*rep)->out[0]);
  return g;
}

static void test_repeat(void) {
  IrNode *rep;
  expect_verify("sound repeat", repeat_graph(1, type2(IR_F32, 2, 3), &rep), "shape", true, NULL);
  const char *yields[] = {"after pass 'unroll': repeat 'h' carries 1 value but its body yields 2",
                          NULL};
  expect_verify("repeat yields two", repeat_graph(2, type2(IR_F32, 2, 3), &rep), "unroll", false,
                yields);
  const char *none[] = {"carries 1 value but its body yields 0", NULL};
  expect_verify("repeat yields none", repeat_graph(0, type2(IR_F32, 2, 3), &rep), "unroll", false,
                none);
  const char *types[] = {
      "after pass 'shape': repeat 'h': yield 0 has type f32[2, 4] but carried arg 0 has type "
      "f32[2, 3]",
      NULL};
  expect_verify("yield type", repeat_graph(1, type2(IR_F32, 2, 4), &rep), "shape", false, types);
  const char *dtypes[] = {"yield 0 has type bf16[2, 3]", NULL};
  expect_verify("yield dtype", repeat_graph(1, type2(IR_BF16, 2, 3), &rep), "shape", false,
                dtypes);
  IrGraph *g = repeat_graph(1, type2(IR_F32, 2, 3), &rep);
  ir_node_attr(rep, "ncarried")->expr = ir_expr_int(0, at(4));
  const char *nc[] = {"repeat 'h' has 1 result but carries 0 values", NULL};
  expect_verify("ncarried", g, "tp", false, nc);
  g = repeat_graph(1, type2(IR_F32, 2, 3), &rep);
  rep->body = NULL;
  const char *nobody[] = {"after pass 'tp': repeat has no body", NULL};
  expect_verify("no body", g, "tp", false, nobody);
}

/* A body that reads an outer value directly instead of through an arg. */
static void test_outer_reference(void) {
  IrNode *rep;
  IrGraph *g = repeat_graph(1, type2(IR_F32, 2, 3), &rep);
  IrNode *gelu = rep->body->nodes.items[0];
  gelu->in[0] = g->inputs.items[0];
  const char *want[] = {"after pass 'cse': input 0 of 'gelu' is %x of an enclosing graph",
                        NULL};
  expect_verify("outer reference", g, "cse", false, want);
}

/* Wrong arities, attributes, duplicate params and dangling results. */
static void test_node_shape(void) {
  IrValue *x, *w;
  IrGraph *g = sound_graph(&x, &w);
  ir_add_node(g, IR_OP_ADD, &x, 1, NULL, 0, 1, at(5));
  ir_add_node(g, IR_OP_SPLIT_HEADS, &x, 1, NULL, 0, 1, at(6));
  ir_add_param(g, "w", type2(IR_F32, 1, 3), (IrInit){IR_INIT_ONES, NULL, NULL}, at(7));
  IrNode *n = g->nodes.items[1];
  n->out[0]->def_index = 3;
  const char *want[] = {
      "test.shard:5:1: error: after pass 'p': op 'add' takes 2 inputs, found 1",
      "test.shard:6:1: error: after pass 'p': op 'split_heads' lacks attribute 'heads'",
      "test.shard:7:1: error: after pass 'p': param name 'w' is declared twice",
      "result 0 of 'add' (%1) does not point back to its node", NULL};
  expect_verify("node shape", g, "p", false, want);
}

/* A node removed while its result is still used. */
static void test_dangling(void) {
  IrValue *x, *w;
  IrGraph *g = sound_graph(&x, &w);
  g->nodes.items[0] = g->nodes.items[1];
  g->nodes.len = 1;
  const char *want[] = {"after pass 'dce': input 0 of 'add' is the result of a node that is "
                        "not in the graph",
                        "%0 = add(%?, @w)", NULL};
  expect_verify("dangling", g, "dce", false, want);
}

/* Backward nodes follow the forward ones, which never read their results;
 * a parameter's gradient has its type. The sound version prints the
 * `backward:` line and the `grad` line. */
static void test_phases(void) {
  IrValue *x, *w;
  IrGraph *g = sound_graph(&x, &w);
  IrNode *gelu = g->nodes.items[0], *add = g->nodes.items[1];
  IrNode *bwd = ir_add_node(g, IR_OP_SCALE, &add->out[0], 1,
                            (IrAttr[]){{"s", ir_expr_float(2, at(5))}}, 1, 1, at(5));
  bwd->phase = IR_PHASE_BACKWARD;
  bwd->out[0]->type = type2(IR_F32, 1, 3);
  w->grad = bwd->out[0];
  const char *sound[] = {"  backward:\n  %2: f32[1, 3] = scale(%1) {s = 2.0}\n"
                         "  grad @w = %2\n",
                         NULL};
  expect_verify("backward section", g, "autodiff", true, sound);

  bwd->out[0]->type = type2(IR_F32, 2, 3);
  const char *mistyped[] = {"test.shard:2:1: error: after pass 'autodiff': the gradient of @w "
                            "(%2) has type f32[2, 3], not the parameter's f32[1, 3]",
                            NULL};
  expect_verify("gradient type", g, "autodiff", false, mistyped);

  bwd->out[0]->type = type2(IR_F32, 1, 3);
  ir_add_node(g, IR_OP_GELU, &bwd->out[0], 1, NULL, 0, 1, at(6));
  gelu->phase = IR_PHASE_BACKWARD;
  const char *order[] = {
      "test.shard:4:1: error: after pass 'autodiff': forward node 'add' comes after the first "
      "backward node",
      "test.shard:6:1: error: after pass 'autodiff': forward node 'gelu' reads %2, a result of "
      "the backward pass",
      NULL};
  expect_verify("phase order", g, "autodiff", false, order);
}

int main(void) {
  test_sound();
  test_use_before_def();
  test_no_pass_name();
  test_repeat();
  test_outer_reference();
  test_node_shape();
  test_dangling();
  test_phases();
  if (failures) printf("%d verifier test(s) failed\n", failures);
  return failures ? 1 : 0;
}
