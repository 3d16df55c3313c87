/* The emitter core: the parts of a rank program every target shares (the
 * memory plan, the model tables, forward() and backward() node by node),
 * and the files around it (manifest.json, model.txt, the build file). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "../runtime/mesh.h"
#include "target.h"

/* --------------------------------------------------------------- emitter */

static void emitter_open(CgEmitter *e) {
  e->buf = NULL;
  e->len = 0;
  e->out = open_memstream(&e->buf, &e->len);
  if (!e->out) die("open_memstream: %s", strerror(errno));
}

void emit(CgEmitter *e, const char *fmt, ...) {
  for (int i = 0; i < e->depth; i++) fputs("  ", e->out);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(e->out, fmt, ap);
  va_end(ap);
  fputc('\n', e->out);
}

void emit_blank(CgEmitter *e) { fputc('\n', e->out); }

int cg_unique(CgEmitter *e) { return e->counter++; }

void cg_error(CgEmitter *e, const IrNode *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ir_error(n->loc, "%s target: %s: %s", e->target->name, ir_op_info(n->op)->name, msg);
  e->errors++;
}

const PassBuf *cg_buf(CgEmitter *e, const IrValue *v) {
  const PassBuf *b = pass_memplan_find(e->plan, v);
  if (!b) die("value without a place in the memory plan");
  return b;
}

const char *cg_ref(CgEmitter *e, const IrValue *v) {
  const PassBuf *b = cg_buf(e, v);
  int64_t r = e->plan->real_bytes;
  switch (b->region) {
  case PASS_REGION_WEIGHTS: return ir_fmt("WGT(%lld)", (long long)(b->offset / r));
  case PASS_REGION_GRADS: return ir_fmt("GRD(%lld)", (long long)(b->offset / r));
  case PASS_REGION_ACTIVATIONS:
  case PASS_REGION_TEMPORARIES:
    return ir_fmt("%s(%lld)", v->type.dtype == IR_I32 ? "I32" : "ACT",
                  (long long)pass_memplan_act_offset(e->plan, b));
  case PASS_REGION_NONE: break;
  }
  die("value %s lives in no memory", cg_name(e, v));
}

const char *cg_name(CgEmitter *e, const IrValue *v) {
  switch (v->kind) {
  case IR_VAL_INPUT: return ir_fmt("%%%s", v->name);
  case IR_VAL_PARAM: return ir_fmt("@%s", v->name);
  default: return ir_fmt("%%%d", cg_buf(e, v)->index - e->plan->nleaves);
  }
}

const char *cg_real(double x) {
  if (isnan(x)) return "NAN";
  if (isinf(x)) return x < 0 ? "-INFINITY" : "INFINITY";
  /* The shortest decimal that reads back as the same double. */
  for (int digits = 6; digits < 17; digits++) {
    char *s = ir_fmt("%.*g", digits, x);
    if (strtod(s, NULL) == x) return ir_fmt("(real)%s", s);
  }
  return ir_fmt("(real)%.17g", x);
}

/* -------------------------------------------------------- the IR as comments */

/* The node's line of the IR text, numbered as the printer numbers an
 * unrolled graph, so the generated code can be read next to --emit-ir. */
static char *ir_line(CgEmitter *e, const IrNode *n) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  if (!f) die("open_memstream: %s", strerror(errno));
  for (int i = 0; i < n->nout; i++) {
    fprintf(f, "%s%s: ", i ? ", " : "", cg_name(e, n->out[i]));
    ir_type_print(f, &n->out[i]->type);
  }
  fprintf(f, " = %s(", ir_op_info(n->op)->name);
  for (int i = 0; i < n->nin; i++) fprintf(f, "%s%s", i ? ", " : "", cg_name(e, n->in[i]));
  fputc(')', f);
  for (int i = 0; i < n->nattr; i++) {
    fprintf(f, "%s%s = ", i ? ", " : " {", n->attrs[i].name);
    ir_expr_print(f, n->attrs[i].expr);
  }
  if (n->nattr) fputc('}', f);
  fclose(f);
  char *line = ir_strdup(s);
  free(s);
  return line;
}

static void emit_ir_comment(CgEmitter *e, int index, const char *note) {
  emit(e, "// %s%s", ir_line(e, e->g->nodes.items[index]), note);
}

/* ------------------------------------------------------ forward, backward */

static void emit_accumulate(CgEmitter *e, const IrValue *grad) {
  const PassBuf *b = cg_buf(e, grad);
  emit(e, "// grad %s = %s: added to its slot", cg_name(e, b->grad_of), cg_name(e, grad));
  e->target->accumulate(e, b->grad_of, grad);
}

/* Gradients computed into temporaries are added to their slot right after
 * their node; those that exist before the backward starts, at its start. */
static bool staged_grad(const PassBuf *b) { return b->grad_of && b->region != PASS_REGION_GRADS; }

/* The per-op timer's label of nodes first..last: the phase (F or B), the
 * ops, the shape of the first output: "B linear_dw [768, 3072]". */
static const char *prof_label(CgEmitter *e, int first, int last) {
  char *s = ir_strdup(first >= e->plan->boundary ? "B " : "F ");
  for (int k = first; k <= last; k++) {
    const IrNode *n = e->g->nodes.items[k];
    s = ir_fmt("%s%s%s", s, k > first ? "+" : "", ir_op_info(n->op)->name);
  }
  const IrType *t = &((const IrNode *)e->g->nodes.items[first])->out[0]->type;
  s = ir_fmt("%s [", s);
  for (int d = 0; d < t->rank; d++) s = ir_fmt("%s%s%lld", s, d ? ", " : "", (long long)t->shape[d]);
  return ir_fmt("%s]", s);
}

/* The label of a run of row chunks: the phase, its ops once each. */
static const char *prof_chunks_label(CgEmitter *e, int first, int last) {
  char *s = ir_strdup(first >= e->plan->boundary ? "B rows:" : "F rows:");
  int nodes = 0;
  for (int k = first; k <= last; k++) {
    if (e->plan->view[k]) continue;
    nodes++;
    const char *op = ir_op_info(((const IrNode *)e->g->nodes.items[k])->op)->name;
    bool seen = false;
    for (int j = first; j < k && !seen; j++)
      seen = !e->plan->view[j] &&
             strcmp(ir_op_info(((const IrNode *)e->g->nodes.items[j])->op)->name, op) == 0;
    if (!seen) s = ir_fmt("%s%s%s", s, s[strlen(s) - 1] == ':' ? "" : "+", op);
  }
  return ir_fmt("%s (%d nodes)", s, nodes);
}

/* A run of row chunks: one parallel loop, each chunk through every
 * row-local node; then the sunk reductions, shared by the same team; then,
 * on one thread, the sunk gradients that go to their slots. */
static void emit_chunks(CgEmitter *e, int first, int last) {
  const PassMemPlan *p = e->plan;
  bool sunk = false;
  for (int i = first; i <= last; i++) sunk |= p->sunk[i];
  emit(e, "// rows in %lld chunks of %lld: nodes below through the closing brace",
       (long long)p->nchunks, (long long)p->chunk_rows);
  e->target->chunks_begin(e, first, last);
  e->chunk_rows = p->chunk_rows;
  for (int i = first; i <= last; i++) {
    if (p->sunk[i]) continue;
    if (p->view[i]) {
      emit_ir_comment(e, i, "  (a view: no code)");
      continue;
    }
    int end = p->fused[i] ? p->group_last[i] : i;
    for (int k = i; k <= end; k++) emit_ir_comment(e, k, "");
    if (p->fused[i]) e->target->fused(e, i, end);
    else e->target->node(e, i);
    i = end;
  }
  e->chunk_rows = 0;
  if (sunk) {
    e->target->chunks_after(e);
    for (int i = first; i <= last; i++) {
      if (!p->sunk[i]) continue;
      emit_ir_comment(e, i, "  (after the chunks, shared by the team)");
      e->target->team_node(e, i);
    }
  }
  e->target->chunks_end(e);
  emit(e, "PROF(\"%s\");", prof_chunks_label(e, first, last));
  for (int i = first; i <= last; i++) {
    IrNode *n = e->g->nodes.items[i];
    for (int j = 0; j < n->nout && p->sunk[i]; j++)
      if (i >= p->boundary && staged_grad(cg_buf(e, n->out[j]))) {
        emit_accumulate(e, n->out[j]);
        emit(e, "PROF(\"B accumulate_grad\");");
      }
  }
}

/* Every node's code is followed by PROF(label), a macro of the target's
 * prologue that in a profiling build (-DSHARD_PROFILE) charges the time
 * since the previous one (or since PROF_START() at the top of the
 * function) to the label, and is empty otherwise. */
static void emit_nodes(CgEmitter *e, int from, int to) {
  const PassMemPlan *p = e->plan;
  for (int i = from; i < to; i++) {
    if (p->view[i]) {
      emit_ir_comment(e, i, "  (a view: no code)");
      continue;
    }
    if (p->absorbed[i]) {
      emit_ir_comment(e, i, "  (no code: both parts were added into the gradient's slot)");
      continue;
    }
    if (p->chunked[i]) {
      emit_chunks(e, i, p->region_last[i]);
      i = p->region_last[i];
      continue;
    }
    int last = p->fused[i] ? p->group_last[i] : i;
    for (int k = i; k <= last; k++) emit_ir_comment(e, k, "");
    if (p->fused[i]) e->target->fused(e, i, last);
    else e->target->node(e, i);
    emit(e, "PROF(\"%s\");", prof_label(e, i, last));
    for (int k = i; k <= last; k++) {
      IrNode *n = e->g->nodes.items[k];
      for (int j = 0; j < n->nout; j++)
        if (k >= p->boundary && staged_grad(cg_buf(e, n->out[j]))) {
          emit_accumulate(e, n->out[j]);
          emit(e, "PROF(\"B accumulate_grad\");");
        }
    }
    i = last;
  }
}

static void emit_early_grads(CgEmitter *e) {
  for (int i = 0; i < e->g->params.len; i++) {
    IrValue *prm = e->g->params.items[i];
    if (!prm->grad) continue;
    bool early = prm->grad->kind != IR_VAL_NODE || prm->grad->def->phase != IR_PHASE_BACKWARD;
    if (early && staged_grad(cg_buf(e, prm->grad))) emit_accumulate(e, prm->grad);
  }
}

static bool has_code(CgEmitter *e, int from, int to) {
  for (int i = from; i < to; i++)
    if (!e->plan->view[i] && !e->plan->absorbed[i]) return true;
  return false;
}

static void emit_functions(CgEmitter *e) {
  int N = e->g->nodes.len, B = e->plan->boundary;
  emit(e, "/* The forward pass of one microbatch: the loss, the logits and");
  emit(e, " * everything backward() reads. */");
  emit(e, "static void forward(RtCtx *ctx) {");
  e->depth++;
  if (!has_code(e, 0, B)) emit(e, "(void)ctx;");
  emit(e, "PROF_START();");
  emit_nodes(e, 0, B);
  e->depth--;
  emit(e, "}");
  emit_blank(e);
  emit(e, "/* The backward pass: adds this microbatch's gradients into ctx->grads. */");
  emit(e, "static void backward(RtCtx *ctx) {");
  e->depth++;
  emit(e, "(void)ctx;");
  emit(e, "PROF_START();");
  emit_early_grads(e);
  emit_nodes(e, B, N);
  e->depth--;
  emit(e, "}");
  emit_blank(e);
}

/* --------------------------------------------------------------- tables */

/* What the runtime needs to know of the model's data flow. */
typedef struct ModelInfo {
  const IrValue *loss, *logits, *targets, *dloss;
  int64_t batch, seq, vocab;
  int64_t logits_cols; /* of this rank's logits: vocab, or its part of the padded vocabulary */
} ModelInfo;

/* The ranks along each mesh axis (1 when not partitioned). */
static int mesh_size(const IrGraph *g, IrMeshAxis a) { return g->mesh[a] > 1 ? g->mesh[a] : 1; }

/* The real vocabulary of a loss over `cols` columns of logits: `valid`
 * when padding is masked, else the columns of every rank together. */
static int64_t real_vocab(const IrGraph *g, const IrNode *loss, int64_t cols) {
  int64_t valid = ir_attr_has(loss, "valid") ? ir_attr_int(loss, "valid") : 0;
  if (valid > 0) return valid;
  bool vp = ir_attr_has(loss, "vocab_parallel") && ir_attr_int(loss, "vocab_parallel");
  return vp ? cols * mesh_size(g, IR_AXIS_TENSOR) : cols;
}

static bool model_info(CgEmitter *e, ModelInfo *mi) {
  IrGraph *g = e->g;
  const char *tn = e->target->name;
  bool ok = true;
  memset(mi, 0, sizeof *mi);
  for (int i = 0; i < g->outputs.len; i++)
    if (!mi->loss || strcmp(g->output_names.items[i], "loss") == 0) mi->loss = g->outputs.items[i];
  if (!mi->loss || mi->loss->kind != IR_VAL_NODE || mi->loss->def->op != IR_OP_CROSS_ENTROPY) {
    IrLoc loc = mi->loss && mi->loss->kind == IR_VAL_NODE ? mi->loss->def->loc
                                                          : (IrLoc){e->opt->model_path, 0, 0};
    ir_error(loc, "%s target: the model's output `loss` must be a cross_entropy", tn);
    ok = false;
  } else {
    mi->logits = mi->loss->def->in[0];
    mi->targets = mi->loss->def->in[1];
    mi->logits_cols = mi->logits->type.shape[mi->logits->type.rank - 1];
    mi->vocab = real_vocab(g, mi->loss->def, mi->logits_cols);
    if (mi->targets->kind != IR_VAL_INPUT || mi->targets->type.rank != 2) {
      ir_error(mi->loss->def->loc, "%s target: the targets of the loss must be an input [batch, seq]",
               tn);
      ok = false;
    } else {
      mi->batch = mi->targets->type.shape[0];
      mi->seq = mi->targets->type.shape[1];
    }
  }
  for (int i = 0; i < g->inputs.len; i++) {
    IrValue *in = g->inputs.items[i];
    if (strcmp(in->name, "d_loss") == 0) {
      mi->dloss = in;
      continue;
    }
    if (in->type.dtype != IR_I32 || in->type.rank != 2 ||
        (mi->seq && (in->type.shape[0] != mi->batch || in->type.shape[1] != mi->seq))) {
      ir_error(in->loc, "%s target: input %s must be i32[batch, seq] like the targets of the loss",
               tn, in->name);
      ok = false;
    }
  }
  return ok;
}

static double literal(const IrExpr *x) {
  if (!x) return 0;
  switch (x->kind) {
  case IR_EX_INT: return (double)x->i;
  case IR_EX_FLOAT: return x->f;
  case IR_EX_NEG: return -literal(x->a);
  default: die("init value not folded to a number");
  }
}

/* A C string literal. */
static const char *cstr(const char *s) {
  char *out = ir_alloc(4 * strlen(s) + 3), *o = out;
  *o++ = '"';
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') *o++ = '\\';
    if (*p < 0x20 || *p >= 0x7f) o += sprintf(o, "\\%03o", *p);
    else *o++ = (char)*p;
  }
  *o++ = '"';
  *o = 0;
  return out;
}

static const char *defines_str(const CgOptions *o) {
  char *s = ir_strdup("");
  for (int i = 0; i < o->ndefines; i++) s = ir_fmt("%s%s%s", s, i ? " " : "", o->defines[i]);
  return s;
}

/* "-D a=1 -D b=2" for the header comment. */
static const char *defines_flags(const CgOptions *o) {
  char *s = ir_strdup("");
  for (int i = 0; i < o->ndefines; i++) s = ir_fmt("%s -D %s", s, o->defines[i]);
  return s;
}

static const char *shape_init(const IrType *t) {
  if (t->rank == 0) return "{0}";
  char *s = ir_strdup("{");
  for (int d = 0; d < t->rank; d++) s = ir_fmt("%s%s%lld", s, d ? ", " : "", (long long)t->shape[d]);
  return ir_fmt("%s}", s);
}

static void emit_params(CgEmitter *e) {
  static const char *init[] = {[IR_INIT_NONE] = "RT_INIT_ZEROS", [IR_INIT_NORMAL] = "RT_INIT_NORMAL",
                               [IR_INIT_ZEROS] = "RT_INIT_ZEROS", [IR_INIT_ONES] = "RT_INIT_ONES"};
  emit(e, "/* name, rank, shape, numel, offset (elements), init, mean, std, weight decay;");
  emit(e, " * split over the tensor axis, its dim and blocks, the whole (padded) shape;");
  emit(e, " * the padded dim and its real size (0: not padded) */");
  emit(e, "static const RtParam params[] = {");
  e->depth++;
  for (int i = 0; i < e->g->params.len; i++) {
    IrValue *v = e->g->params.items[i];
    if (v->type.rank > 8) die("param of rank %d", v->type.rank);
    const PassBuf *b = cg_buf(e, v);
    bool normal = v->init.kind == IR_INIT_NORMAL;
    bool split = v->shard.kind == IR_SPLIT;
    IrType whole = v->type;
    if (split) whole.shape[v->shard.dim] *= mesh_size(e->g, IR_AXIS_TENSOR);
    emit(e, "{%s, %d, %s, %lld, %lld, %s, %.17g, %.17g, %d, %d, %d, %d, %s, %d, %lld},",
         cstr(v->name), v->type.rank, shape_init(&v->type), (long long)ir_type_numel(&v->type),
         (long long)(b->offset / e->plan->real_bytes), init[v->init.kind],
         normal ? literal(v->init.mean) : 0.0, normal ? literal(v->init.std) : 0.0,
         v->type.rank >= 2, split, split ? v->shard.dim : 0,
         split ? ir_shard_blocks(&v->shard) : 1, shape_init(&whole),
         v->unpadded > 0 ? v->pad_dim : 0, (long long)(v->unpadded > 0 ? v->unpadded : 0));
  }
  if (e->g->params.len == 0) emit(e, "{0},");
  e->depth--;
  emit(e, "};");
  emit_blank(e);
}

static void emit_inputs(CgEmitter *e, const ModelInfo *mi) {
  emit(e, "/* name, rank, shape, numel, offset (bytes into the activations), is the target */");
  emit(e, "static const RtInput inputs[] = {");
  e->depth++;
  for (int i = 0; i < e->g->inputs.len; i++) {
    IrValue *v = e->g->inputs.items[i];
    if (v == mi->dloss) continue;
    emit(e, "{%s, %d, %s, %lld, %lld, %d},", cstr(v->name), v->type.rank, shape_init(&v->type),
         (long long)ir_type_numel(&v->type),
         (long long)pass_memplan_act_offset(e->plan, cg_buf(e, v)), v == mi->targets);
  }
  e->depth--;
  emit(e, "};");
  emit_blank(e);
}

static int ninputs(CgEmitter *e, const ModelInfo *mi) {
  return e->g->inputs.len - (mi->dloss ? 1 : 0);
}

static void emit_model(CgEmitter *e, const ModelInfo *mi) {
  const PassMemPlan *p = e->plan;
  int64_t loss = pass_memplan_act_offset(p, cg_buf(e, mi->loss));
  /* Without a backward there is no seed to read; any real of the plan does. */
  int64_t dloss = mi->dloss ? pass_memplan_act_offset(p, cg_buf(e, mi->dloss)) : loss;
  emit(e, "const RtModel rt_model = {");
  e->depth++;
  emit(e, ".name = %s,", cstr(e->g->name ? e->g->name : "model"));
  emit(e, ".source = %s,", cstr(e->opt->model_path ? e->opt->model_path : ""));
  emit(e, ".defines = %s,", cstr(defines_str(e->opt)));
  emit(e, ".batch = %lld,", (long long)mi->batch);
  emit(e, ".seq = %lld,", (long long)mi->seq);
  emit(e, ".vocab = %lld,", (long long)mi->vocab);
  emit(e, ".params = params,");
  emit(e, ".nparams = %d,", e->g->params.len);
  emit(e, ".nweights = %lld,", (long long)p->nweights);
  emit(e, ".inputs = inputs,");
  emit(e, ".ninputs = %d,", ninputs(e, mi));
  emit(e, ".plan = {PLAN_WEIGHTS, PLAN_GRADS, PLAN_OPTIMIZER, PLAN_ACTIVATIONS, PLAN_TEMPORARIES},");
  emit(e, ".loss_offset = %lld,", (long long)loss);
  emit(e, ".logits_offset = %lld,", (long long)pass_memplan_act_offset(p, cg_buf(e, mi->logits)));
  emit(e, ".dloss_offset = %lld,", (long long)dloss);
  emit(e, ".forward = forward,");
  emit(e, ".backward = backward,");
  emit(e, ".mesh_tp = %d,", mesh_size(e->g, IR_AXIS_TENSOR));
  emit(e, ".mesh_pp = %d,", mesh_size(e->g, IR_AXIS_PIPELINE));
  emit(e, ".mesh_dp = %d,", mesh_size(e->g, IR_AXIS_DATA));
  emit(e, ".logits_cols = %lld,", (long long)mi->logits_cols);
  e->depth--;
  emit(e, "};");
  emit_blank(e);
}

/* ------------------------------------------------------------ the program */

static void emit_plan(CgEmitter *e) {
  const PassMemPlan *p = e->plan;
  emit(e, "/* The memory plan, in bytes per region. The runtime allocates it once;");
  emit(e, " * activations (kept for backward) and temporaries form one buffer. */");
  emit(e, "#define PLAN_WEIGHTS %lldLL", (long long)p->weights);
  emit(e, "#define PLAN_GRADS %lldLL", (long long)p->grads);
  emit(e, "#define PLAN_OPTIMIZER %lldLL", (long long)p->optimizer);
  emit(e, "#define PLAN_ACTIVATIONS %lldLL", (long long)p->activations);
  emit(e, "#define PLAN_TEMPORARIES %lldLL", (long long)p->temporaries);
  emit(e, "/* Kernel scratch is planned for this many threads, of this many reals each. */");
  emit(e, "#define PLAN_THREADS %d", p->threads);
  emit(e, "#define PLAN_ATTENTION_SCRATCH %lldLL", (long long)p->scratch_per_thread);
  emit_blank(e);
  emit(e, "/* Storage: WGT and GRD take elements of real into the weights and the");
  emit(e, " * gradients, ACT and I32 bytes into the activation buffer. */");
  emit(e, "#define WGT(elems) (ctx->weights + (elems))");
  emit(e, "#define GRD(elems) (ctx->grads + (elems))");
  emit(e, "#define ACT(bytes) ((real *)(ctx->activations + (bytes)))");
  emit(e, "#define I32(bytes) ((int32_t *)(ctx->activations + (bytes)))");
  emit_blank(e);
}

static void emit_program(CgEmitter *e, const ModelInfo *mi) {
  bool f64 = e->plan->real_bytes == 8;
  const char *defs = defines_flags(e->opt);
  int t = mesh_size(e->g, IR_AXIS_TENSOR);
  if (t > 1)
    emit(e, "/* %s: the rank program of all %d tensor-parallel ranks (each learns its rank from "
            "the runtime), %s, for the %s target.",
         e->g->name ? e->g->name : "model", t, f64 ? "f64" : "f32", e->target->name);
  else
    emit(e, "/* %s: the rank program of rank 0 (of 1), %s, for the %s target.",
         e->g->name ? e->g->name : "model", f64 ? "f64" : "f32", e->target->name);
  emit(e, " * Generated by shardc from %s%s; edits are lost when it is compiled again. */",
       e->opt->model_path ? e->opt->model_path : "an IR graph", defs);
  e->target->prologue(e);
  emit(e, "#%s SHARD_REAL_F64", f64 ? "ifndef" : "ifdef");
  emit(e, "#error \"generated for %s: build with%s -DSHARD_REAL_F64\"", f64 ? "f64" : "f32",
       f64 ? "" : "out");
  emit(e, "#endif");
  emit_blank(e);
  emit_plan(e);
  emit_functions(e);
  emit_params(e);
  emit_inputs(e, mi);
  emit_model(e, mi);
  e->target->entry(e);
}

/* ----------------------------------------------------------------- files */

static bool make_dirs(const char *path) {
  char *p = ir_strdup(path);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char c = *s;
    *s = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      ir_error((IrLoc){path, 0, 0}, "cannot create the directory: %s", strerror(errno));
      return false;
    }
    *s = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
    ir_error((IrLoc){path, 0, 0}, "not a directory");
    return false;
  }
  return true;
}

/* True when the file at path already holds exactly data. */
static bool same_contents(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  bool same = true;
  char chunk[65536];
  size_t off = 0, got;
  while (same && (got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    same = off + got <= len && memcmp(chunk, data + off, got) == 0;
    off += got;
  }
  fclose(f);
  return same && off == len;
}

/* An unchanged file is left alone, so that compiling the same model again
 * does not make the generated Makefile rebuild the program. */
static bool write_file(const char *dir, const char *name, const char *data, size_t len) {
  const char *path = ir_fmt("%s/%s", dir, name);
  if (same_contents(path, data, len)) return true;
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(data, 1, len, f) == len;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) ir_error((IrLoc){path, 0, 0}, "cannot write: %s", strerror(errno));
  return ok;
}

static bool write_emitter(CgEmitter *e, const char *name) {
  fclose(e->out);
  bool ok = write_file(e->opt->out_dir, name, e->buf, e->len);
  free(e->buf);
  e->buf = NULL;
  return ok;
}

/* Every rank of the mesh, with its coordinates by the layout of
 * runtime/mesh.h (which the runtime builds its communicators from), runs
 * the one program: ranks that differ only in their tensor-parallel index
 * share it. */
static bool write_manifest(CgEmitter *e, const char *program) {
  RtMesh mesh = {mesh_size(e->g, IR_AXIS_TENSOR), mesh_size(e->g, IR_AXIS_PIPELINE),
                 mesh_size(e->g, IR_AXIS_DATA)};
  int world = rt_mesh_size(mesh);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "model", e->g->name ? e->g->name : "model");
  cJSON_AddStringToObject(m, "target", e->target->name);
  cJSON_AddStringToObject(m, "dtype", e->plan->real_bytes == 8 ? "f64" : "f32");
  cJSON_AddNumberToObject(m, "world_size", world);
  cJSON *mj = cJSON_AddObjectToObject(m, "mesh");
  cJSON_AddNumberToObject(mj, "tp", mesh.tp);
  cJSON_AddNumberToObject(mj, "pp", mesh.pp);
  cJSON_AddNumberToObject(mj, "dp", mesh.dp);
  cJSON *progs = cJSON_AddArrayToObject(m, "programs");
  cJSON *pr = cJSON_CreateObject();
  cJSON_AddStringToObject(pr, "name", program);
  cJSON_AddStringToObject(pr, "source", ir_fmt("%s%s", program, e->target->source_ext));
  cJSON_AddItemToArray(progs, pr);
  cJSON *ranks = cJSON_AddArrayToObject(m, "ranks");
  for (int rank = 0; rank < world; rank++) {
    RtCoord c = rt_mesh_coord(mesh, rank);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "rank", rank);
    cJSON_AddStringToObject(r, "program", program);
    cJSON_AddNumberToObject(r, "tp", c.tp);
    cJSON_AddNumberToObject(r, "pp", c.pp);
    cJSON_AddNumberToObject(r, "dp", c.dp);
    cJSON_AddItemToArray(ranks, r);
  }
  char *text = cJSON_Print(m);
  cJSON_Delete(m);
  if (!text) die("out of memory");
  char *withnl = ir_fmt("%s\n", text);
  cJSON_free(text);
  return write_file(e->opt->out_dir, "manifest.json", withnl, strlen(withnl));
}

/* model.txt names the model file (absolute when it resolves) and a copy of
 * it kept next to the program, then one `define NAME=VALUE` per override. */
static bool write_model_files(const CgOptions *o) {
  char *text = ir_strdup("");
  if (o->model_path) {
    char real[PATH_MAX];
    const char *abs = realpath(o->model_path, real) ? real : o->model_path;
    const char *dot = strrchr(o->model_path, '.'), *slash = strrchr(o->model_path, '/');
    const char *ext = dot && (!slash || dot > slash) ? dot : "";
    const char *copy = ir_fmt("model%s", ext);
    text = ir_fmt("model %s\ncopy %s\n", abs, copy);
    FILE *f = fopen(o->model_path, "rb");
    if (f) {
      char *data = NULL;
      size_t len = 0;
      FILE *m = open_memstream(&data, &len);
      char chunk[65536];
      size_t got;
      while (m && (got = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, got, m);
      fclose(f);
      if (!m) die("open_memstream: %s", strerror(errno));
      fclose(m);
      bool ok = write_file(o->out_dir, copy, data, len);
      free(data);
      if (!ok) return false;
    }
  }
  for (int i = 0; i < o->ndefines; i++) text = ir_fmt("%sdefine %s\n", text, o->defines[i]);
  return write_file(o->out_dir, "model.txt", text, strlen(text));
}

/* ----------------------------------------------------------------- entry */

const char *cg_pipeline(const char *target) {
  if (!target || strcmp(target, "cpu") == 0)
    return "fold,shape,tp-annotate,vocab-pad,tp-partition,tp-fuse,unroll,autodiff,tp-fuse,verify,"
           "memplan";
  return NULL;
}

static const CgTarget *find_target(const char *name) {
  if (!name || strcmp(name, cg_target_cpu.name) == 0) return &cg_target_cpu;
  return NULL;
}

int cg_compile(IrGraph *g, const CgOptions *o) {
  const CgTarget *t = find_target(o->target);
  IrLoc cmd = {"<command line>", 0, 0};
  if (!t) {
    ir_error(cmd, "unknown target '%s' (known: cpu)", o->target);
    return 1;
  }
  if (!o->out_dir || !*o->out_dir) {
    ir_error(cmd, "no output directory for the %s target (-o DIR)", t->name);
    return 1;
  }
  if (o->dtype != IR_F32 && o->dtype != IR_F64) {
    ir_error(cmd, "the %s target builds f32 or f64 programs, not %s", t->name,
             ir_dtype_name(o->dtype));
    return 1;
  }
  int rb = o->dtype == IR_F64 ? 8 : 4, threads = o->threads > 0 ? o->threads : PASS_MEMPLAN_THREADS;
  PassMemPlan *p = g->memplan;
  if (!p || p->real_bytes != rb || p->threads != threads) p = pass_memplan_build(g, rb, threads);
  if (!p) return 1;
  CgEmitter e = {.g = g, .plan = p, .opt = o, .target = t};
  ModelInfo mi;
  if (!model_info(&e, &mi)) return 1;
  if (o->plan_out) pass_memplan_print(o->plan_out, p);
  emitter_open(&e);
  emit_program(&e, &mi);
  if (e.errors) {
    fclose(e.out);
    free(e.buf);
    return 1;
  }
  if (!make_dirs(o->out_dir)) return 1;
  const char *program = "rank0";
  if (!write_emitter(&e, ir_fmt("%s%s", program, t->source_ext))) return 1;
  CgEmitter b = {.g = g, .plan = p, .opt = o, .target = t};
  emitter_open(&b);
  t->buildfile(&b, &program, 1);
  if (!write_emitter(&b, t->buildfile_name)) return 1;
  if (!write_manifest(&e, program) || !write_model_files(o)) return 1;
  return 0;
}
