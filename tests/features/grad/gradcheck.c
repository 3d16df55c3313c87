/* Finite-difference check of the autodiff pass, independent of codegen.
 *
 * Reads an .ir file that went through fold,shape,unroll,autodiff (the
 * printed form), interprets it node by node in double precision with the
 * f64 CPU kernels, and compares every parameter's gradient (the value
 * `grad @NAME` names) with central differences of the loss on a few
 * coordinates: a handful of random ones and the one of largest gradient.
 * An adjoint with a wrong sign, a missing transpose or a missing broadcast
 * reduction fails here, whatever the target.
 *
 *   gradcheck FILE.ir [COORDS_PER_PARAM]
 *
 * The interpreter follows the op semantics of ir/ops.def; dropout draws its
 * mask from (seed, site, index) like the generated programs, so the loss is
 * a deterministic function of the parameters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"

/* Central differences in f64: truncation ~ STEP^2, rounding ~ 1e-16 / STEP. */
#define STEP 1e-5
#define REL_TOL 1e-6
#define ABS_TOL 1e-9

/* Short names for the shared interpreter's. */
#define T(v) ti_t(v)
#define R(v) ti_r(v)

/* ------------------------------------------------------------- driver */

/* One rank: every collective over an axis of size 1 is the identity, and
 * one process runs every pipeline stage (the message is the value itself). */
static void exec(IrNode *n) {
  if (ti_exec(n)) return;
  if (ir_attr_has(n, "size") && ir_attr_int(n, "size") != 1) /* pp_boundary has no size */
    die("gradcheck: %s over several ranks", ir_op_info(n->op)->name);
  memcpy(R(n->out[0]), R(n->in[0]), sizeof(real) * (size_t)ti_numel(n->out[0]));
}

/* Runs the forward nodes (and the backward ones too when asked); returns
 * the loss, the graph's one scalar output. */
static double run(const IrGraph *g, const IrValue *loss, bool backward) {
  for (int i = 0; i < g->nodes.len; i++) {
    IrNode *n = g->nodes.items[i];
    if (n->phase == IR_PHASE_BACKWARD && !backward) break;
    exec(n);
  }
  return R(loss)[0];
}

/* Checks one coordinate; returns whether it agrees. */
static bool check_coord(const IrGraph *g, const IrValue *loss, const IrValue *p, int64_t i,
                        double analytic, double *worst) {
  real *w = R(p), saved = w[i];
  w[i] = saved + STEP;
  double up = run(g, loss, false);
  w[i] = saved - STEP;
  double down = run(g, loss, false);
  w[i] = saved;
  double numeric = (up - down) / (2 * STEP);
  double err = fabs(numeric - analytic), scale = fmax(fabs(numeric), fabs(analytic));
  double rel = err / fmax(scale, 1e-300);
  if (scale > 1e-6 && rel > *worst) *worst = rel;
  if (err <= REL_TOL * scale + ABS_TOL) return true;
  printf("  @%s[%lld]: analytic %.12g, numeric %.12g (relative error %.2g)\n", p->name,
         (long long)i, analytic, numeric, rel);
  return false;
}

/* A loss with ignore=1 skips the targets of -100: a third of them are set
 * so, so that the check sees both the skipped rows (zero gradient) and the
 * mean over the others. */
static void ignore_some(const IrGraph *g) {
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (n->op != IR_OP_CROSS_ENTROPY || !ir_attr_has(n, "ignore") || !ir_attr_int(n, "ignore"))
      continue;
    const IrValue *t = n->in[1];
    if (t->kind != IR_VAL_INPUT) continue;
    for (int64_t k = 1; k < T(t)->n; k += 3) T(t)->i[k] = -100;
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gradcheck FILE.ir [COORDS_PER_PARAM]\n");
    return 2;
  }
  int coords = argc > 2 ? atoi(argv[2]) : 4;
  char *text = NULL;
  IrGraph *g = ti_load(argv[1], &text);
  ti_init("gradcheck");
  ti_tensors = ti_alloc_graph(g);
  for (int i = 0; i < g->inputs.len; i++) {
    IrValue *v = g->inputs.items[i];
    if (strcmp(v->name, "d_loss") == 0) {
      R(v)[0] = 1;
    } else if (T(v)->i) {
      int64_t bound = ti_id_bound(g, v);
      for (int64_t k = 0; k < T(v)->n; k++) T(v)->i[k] = (int32_t)(ti_rng_next() % (uint64_t)bound);
    } else {
      for (int64_t k = 0; k < T(v)->n; k++) R(v)[k] = ti_rng_normal();
    }
  }
  ignore_some(g);
  /* Parameters well away from their init, so that no gradient vanishes by
   * symmetry (zero biases, unit gains). */
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i];
    double base = p->init.kind == IR_INIT_ONES ? 1 : 0;
    for (int64_t k = 0; k < T(p)->n; k++) R(p)[k] = base + 0.5 * ti_rng_normal();
  }

  const IrValue *loss = ti_find_loss(g);
  double l = run(g, loss, true);
  printf("%s: loss %.10g\n", argv[1], l);
  int failures = 0, checked = 0;
  for (int i = 0; i < g->params.len; i++) {
    IrValue *p = g->params.items[i];
    if (!p->grad) die("gradcheck: @%s has no gradient", p->name);
    int64_t n = T(p)->n, best = 0;
    /* Copied: the finite differences rerun the forward, not the backward. */
    real *grad = malloc(sizeof(real) * (size_t)n);
    memcpy(grad, R(p->grad), sizeof(real) * (size_t)n);
    for (int64_t k = 1; k < n; k++)
      if (fabs(grad[k]) > fabs(grad[best])) best = k;
    double worst = 0;
    int bad = 0;
    for (int c = 0; c <= coords; c++) {
      int64_t k = c == 0 ? best : (int64_t)(ti_rng_next() % (uint64_t)n);
      bad += !check_coord(g, loss, p, k, grad[k], &worst);
      checked++;
    }
    printf("  @%-40s %s (largest |grad| %.3g, worst relative error %.2g)\n", p->name,
           bad ? "FAIL" : "ok", fabs(grad[best]), worst);
    failures += bad;
    free(grad);
  }
  printf("%s: %d coordinates checked, %d wrong\n", argv[1], checked, failures);
  for (int i = 0; i < g->next_id; i++) {
    free(ti_tensors[i].r);
    free(ti_tensors[i].i);
  }
  free(ti_tensors);
  free(ti_scratch);
  free(text);
  ir_arena_free_all();
  return failures ? 1 : 0;
}
