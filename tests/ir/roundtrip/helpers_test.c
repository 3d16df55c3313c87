/* Unit test of the helpers ir/ gives passes: the string map (growing past
 * its first table, keys given by length, the first value kept by add) and
 * ir_count_uses / ir_replace_uses on a small graph. */
#include <stdio.h>
#include <string.h>

#include "ir.h"

static int failures;

static void check(bool ok, const char *what) {
  if (!ok) {
    printf("FAIL: %s\n", what);
    failures++;
  }
}

static void test_strmap(void) {
  for (int arena = 0; arena < 2; arena++) {
    IrStrMap m = {.arena = arena};
    char *keys[1000];
    for (int i = 0; i < 1000; i++) {
      keys[i] = ir_fmt("name%d", i);
      ir_strmap_put(&m, keys[i], keys[i]);
    }
    bool all = m.len == 1000;
    for (int i = 0; i < 1000; i++) all = all && ir_strmap_get(&m, ir_fmt("name%d", i)) == keys[i];
    check(all, "every key is found after growing");
    check(!ir_strmap_get(&m, "name1000"), "an absent key is not found");
    check(ir_strmap_getn(&m, "name12xyz", 6) == keys[12], "a key given by length");
    check(ir_strmap_getn(&m, "name12", 5) == keys[1], "a prefix is its own key");
    check(ir_strmap_add(&m, "name7", "other") == keys[7], "add keeps the first value");
    check(ir_strmap_put(&m, "name7", "other") == keys[7] && ir_strmap_get(&m, "name7") &&
              strcmp(ir_strmap_get(&m, "name7"), "other") == 0,
          "put replaces and returns the old value");
    ir_strmap_free(&m);
  }
}

static void test_replace_uses(void) {
  IrGraph *g = ir_graph_new("t");
  IrType t;
  int64_t shape[1] = {4};
  ir_type_set_shape(&t, IR_F32, 1, shape);
  IrLoc loc = {"test", 1, 1};
  IrValue *x = ir_add_input(g, "x", t, loc);
  IrNode *a = ir_add_node(g, IR_OP_GELU, &x, 1, NULL, 0, 1, loc);
  IrValue *in[2] = {a->out[0], a->out[0]};
  IrNode *b = ir_add_node(g, IR_OP_ADD, in, 2, NULL, 0, 1, loc);
  ir_add_output(g, "y", a->out[0]);
  ir_add_output(g, "z", b->out[0]);
  int *uses = ir_count_uses(g);
  check(uses[a->out[0]->id] == 3 && uses[b->out[0]->id] == 1 && uses[x->id] == 1,
        "ir_count_uses counts node inputs and outputs");
  check(ir_replace_uses(g, a->out[0], x) == 3, "ir_replace_uses replaces every read");
  check(b->in[0] == x && b->in[1] == x && g->outputs.items[0] == x && a->in[0] == x,
        "the reads now name the new value");
  check(ir_count_uses(g)[a->out[0]->id] == 0, "the old value is read no more");
}

int main(void) {
  test_strmap();
  test_replace_uses();
  ir_arena_free_all();
  if (!failures) printf("ok\n");
  return failures ? 1 : 0;
}
