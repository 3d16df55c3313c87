/* The emitter core: the printers of a laid-out program set (layout.h).
 * It writes the parts of a rank program every target shares (the memory
 * plan, the model tables, forward() and backward() node by node, the
 * collectives through collectives.c), and the files around it
 * (manifest.json, model.txt, the build file); it decides nothing the
 * layout has not. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "../abi/mesh.h"
#include "../abi/model.h"
#include "layout.h"
#include "listing.h"

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
  int64_t base = e->chunk ? e->chunk->weight_base : 0;
  bool ids = v->type.dtype == IR_I32;
  switch (b->region) {
  case PASS_REGION_WEIGHTS: return ir_fmt("WGT(%lld)", (long long)(base + b->offset / r));
  case PASS_REGION_GRADS: return ir_fmt("GRD(%lld)", (long long)(base + b->offset / r));
  case PASS_REGION_ACTIVATIONS: return ir_fmt("%s(%lld)", ids ? "I32" : "ACT", (long long)b->offset);
  case PASS_REGION_TEMPORARIES: return ir_fmt("%s(%lld)", ids ? "I32T" : "TMP", (long long)b->offset);
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

const char *cg_scratch(CgEmitter *e, int index) {
  return ir_fmt("TMP(%lld)", (long long)e->plan->scratch_offset[index]);
}

bool cg_need_i32(CgEmitter *e, const IrNode *n, const IrValue *v) {
  if (v->type.dtype == IR_I32) return true;
  cg_error(e, n, "token ids must be i32, not %s", ir_dtype_name(v->type.dtype));
  return false;
}

void cg_attention_dims(const IrNode *n, int64_t *H, int64_t *K, int64_t *d) {
  *H = ir_attr_int(n, "heads");
  *K = ir_attr_int(n, "kv_heads");
  if (*K == 0) *K = *H;
  const IrValue *q = n->in[0];
  *d = q->type.shape[q->type.rank - 1] / *H;
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

bool cg_core_writes_op(IrOp op) {
  unsigned f = ir_op_info(op)->flags;
  return (f & (IR_OPF_COLLECTIVE | IR_OPF_REGION)) || op == IR_OP_PP_BOUNDARY ||
         op == IR_OP_RESHAPE || op == IR_OP_TP_COPY || op == IR_OP_EP_PLAN || op == IR_OP_EP_SORT ||
         op == IR_OP_EP_UNSORT;
}

/* Whether the target writes nodes first..last; reports each it does not,
 * with the same message for every target and op. */
static bool target_writes(CgEmitter *e, int first, int last) {
  bool ok = true;
  for (int i = first; i <= last; i++) {
    const IrNode *n = e->g->nodes.items[i];
    if (e->target->writes_op(n->op)) continue;
    cg_error(e, n, "the target has no code for this op");
    ok = false;
  }
  return ok;
}

/* A node that runs alone: a collective the core writes for every target
 * (collectives.c), or the target's kernel calls. */
static void emit_node(CgEmitter *e, int index) {
  if (cg_comm_node(e, e->g->nodes.items[index])) return;
  if (target_writes(e, index, index)) e->target->node(e, index);
}

/* One fused loop over the elementwise nodes first..last, by the target. */
static void emit_fused(CgEmitter *e, int first, int last) {
  if (target_writes(e, first, last)) e->target->fused(e, first, last);
}

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
  char *s = ir_strdup(first >= e->plan->wboundary ? "W " : first >= e->plan->boundary ? "B " : "F ");
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
  char *s = ir_strdup(first >= e->plan->wboundary ? "W rows:"
                      : first >= e->plan->boundary ? "B rows:" : "F rows:");
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

void cg_chunk_body(CgEmitter *e, int first, int last) {
  const PassMemPlan *p = e->plan;
  for (int i = first; i <= last; i++) {
    if (p->sunk[i]) continue;
    if (p->view[i]) {
      emit_ir_comment(e, i, "  (a view: no code)");
      continue;
    }
    int end = p->fused[i] ? p->group_last[i] : i;
    for (int k = i; k <= end; k++) emit_ir_comment(e, k, "");
    if (p->fused[i]) emit_fused(e, i, end);
    else emit_node(e, i);
    i = end;
  }
}

int cg_next_sunk(CgEmitter *e, int after, int last) {
  for (int i = after + 1; i <= last; i++) {
    if (!e->plan->sunk[i]) continue;
    emit_ir_comment(e, i, "  (after the chunks, shared by the team)");
    if (target_writes(e, i, i)) return i;
  }
  return -1;
}

/* A run of row chunks: the target's loop over the chunks, each through
 * every row-local node, then the sunk reductions (CgTarget.row_chunks);
 * then, on one thread, the sunk gradients that go to their slots. */
static void emit_chunks(CgEmitter *e, int first, int last) {
  const PassMemPlan *p = e->plan;
  emit(e, "// rows in %lld chunks of %lld: nodes below through the closing brace",
       (long long)p->nchunks, (long long)p->chunk_rows);
  if (!e->target->row_chunks) die("%s target: a plan of row chunks", e->target->name);
  e->target->row_chunks(e, first, last);
  emit(e, "PROF(\"%s\");", cg_listing_prof(e, first, last, prof_chunks_label(e, first, last)));
  for (int i = first; i <= last; i++) {
    IrNode *n = e->g->nodes.items[i];
    for (int j = 0; j < n->nout && p->sunk[i]; j++)
      if (i >= p->boundary && staged_grad(cg_buf(e, n->out[j]))) {
        emit_accumulate(e, n->out[j]);
        emit(e, "PROF(\"%s\");", cg_listing_prof(e, -1, -1, "B accumulate_grad"));
      }
  }
}

/* Every node's code is followed by PROF(label), a macro of the target's
 * prologue that in a profiling build (-DSHARD_PROFILE) charges the time
 * since the previous one (or since PROF_START() at the top of the
 * function) to the label, and is empty otherwise. */
/* After nodes first..last of the backward: the data-parallel buckets whose
 * last gradient they completed, and a chance for reductions in flight to
 * progress. */
static void emit_after_backward(CgEmitter *e, int first, int last) {
  const CgChunk *c = e->chunk;
  /* Split, the sends of a stage post B's gradient and go on computing (a
   * W): the message moves only while the sender is inside MPI. */
  if (!c || (!c->nbuckets && !e->g->wsplit) || first < e->plan->boundary) return;
  /* Split, a bucket is final only in W (B of the last microbatch runs
   * before some W): those B completes are ready when W starts. */
  for (int b = 0; b < c->nbuckets && !(e->g->wsplit && first < e->plan->wboundary); b++)
    if (c->buckets[b].ready >= first && c->buckets[b].ready <= last)
      emit(e, "BUCKET_READY(%d);", c->first_bucket + b);
  emit(e, "POLL();");
}

static void emit_nodes(CgEmitter *e, int from, int to) {
  const PassMemPlan *p = e->plan;
  for (int i = from; i < to; i++) {
    if (p->view[i]) {
      emit_ir_comment(e, i, "  (a view: no code)");
      emit_after_backward(e, i, i);
      continue;
    }
    if (p->absorbed[i]) {
      emit_ir_comment(e, i, "  (no code: both parts were added into the gradient's slot)");
      emit_after_backward(e, i, i);
      continue;
    }
    if (p->chunked[i]) {
      emit_chunks(e, i, p->region_last[i]);
      emit_after_backward(e, i, p->region_last[i]);
      i = p->region_last[i];
      continue;
    }
    int last = p->fused[i] ? p->group_last[i] : i;
    for (int k = i; k <= last; k++) emit_ir_comment(e, k, "");
    if (p->fused[i]) emit_fused(e, i, last);
    else emit_node(e, i);
    emit(e, "PROF(\"%s\");", cg_listing_prof(e, i, last, prof_label(e, i, last)));
    for (int k = i; k <= last; k++) {
      IrNode *n = e->g->nodes.items[k];
      for (int j = 0; j < n->nout; j++)
        if (k >= p->boundary && staged_grad(cg_buf(e, n->out[j]))) {
          emit_accumulate(e, n->out[j]);
          emit(e, "PROF(\"%s\");", cg_listing_prof(e, -1, -1, "B accumulate_grad"));
        }
    }
    emit_after_backward(e, i, last);
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

/* The names of a chunk's functions: forward and backward in a program of
 * one chunk, forward_c1 and backward_c1 for chunk 1 of a pipeline stage. */
static const char *fn_name(const CgEmitter *e, const char *what, const CgChunk *c) {
  return e->nchunks > 1 ? ir_fmt("%s_c%d", what, c->index) : what;
}

/* W: the rest of the parameter gradients, from what F and B kept. */
static void emit_wgrad(CgEmitter *e, int W, int N) {
  const CgChunk *c = e->chunk;
  emit(e, "/* W: adds the rest of this microbatch's parameter gradients into ctx->grads. */");
  emit(e, "static void %s(RtCtx *ctx) {", fn_name(e, "wgrad", c));
  e->depth++;
  emit(e, "(void)ctx;");
  emit(e, "PROF_START();");
  for (int b = 0; b < c->nbuckets; b++)
    if (c->buckets[b].ready < W) emit(e, "BUCKET_READY(%d);", c->first_bucket + b);
  emit_nodes(e, W, N);
  e->depth--;
  emit(e, "}");
  emit_blank(e);
}

static void emit_functions(CgEmitter *e) {
  int N = e->g->nodes.len, B = e->plan->boundary;
  const CgChunk *c = e->chunk;
  if (e->nchunks > 1)
    emit(e, "/* Chunk %d: virtual stage %d. */", c->index, c->vstage);
  emit(e, "/* The forward pass of one microbatch: the loss, the logits and");
  emit(e, " * everything backward() reads. */");
  emit(e, "static void %s(RtCtx *ctx) {", fn_name(e, "forward", c));
  e->depth++;
  if (!has_code(e, 0, B)) emit(e, "(void)ctx;");
  emit(e, "PROF_START();");
  emit_nodes(e, 0, B);
  e->depth--;
  emit(e, "}");
  emit_blank(e);
  bool split = e->g->wsplit;
  int W = split ? e->plan->wboundary : N;
  if (split)
    emit(e, "/* B: the input gradient of this microbatch (and the parameter gradients on its path). */");
  else
    emit(e, "/* The backward pass: adds this microbatch's gradients into ctx->grads. */");
  emit(e, "static void %s(RtCtx *ctx) {", fn_name(e, "backward", c));
  e->depth++;
  emit(e, "(void)ctx;");
  emit(e, "PROF_START();");
  emit_early_grads(e);
  for (int b = 0; b < c->nbuckets && !split; b++)
    if (c->buckets[b].ready < 0) emit(e, "BUCKET_READY(%d);", c->first_bucket + b);
  emit_nodes(e, B, W);
  e->depth--;
  emit(e, "}");
  emit_blank(e);
  if (split) emit_wgrad(e, W, N);
}

/* --------------------------------------------------------------- tables */

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

/* The name a parameter is initialised and checkpointed under: a stage's
 * copy of a tied parameter carries the original's. */
static const char *param_name(const IrValue *v) { return v->tied ? v->tied->name : v->name; }

/* RtParam.tied: 1 for both copies of a parameter tied across stages, 2
 * for a copy whose original this program holds too (zb-v's V puts the
 * first and the last virtual stage on one stage). */
static int tied_kind(const CgProgram *pr, const IrValue *v) {
  for (int c = 0; v->tied && c < pr->nchunks; c++)
    for (int i = 0; i < pr->chunks[c].g->params.len; i++)
      if (pr->chunks[c].g->params.items[i] == v->tied) return 2;
  return v->tied || ir_ptrmap_get(pr->tied, v) ? 1 : 0;
}

static void emit_params(CgEmitter *e, const CgProgram *pr) {
  static const char *init[] = {[IR_INIT_NONE] = "RT_INIT_ZEROS", [IR_INIT_NORMAL] = "RT_INIT_NORMAL",
                               [IR_INIT_ZEROS] = "RT_INIT_ZEROS", [IR_INIT_ONES] = "RT_INIT_ONES"};
  emit(e, "/* name, rank, shape, numel, offset (elements), init, mean, std, weight decay;");
  emit(e, " * split over the tensor axis, its dim and blocks, the whole (padded) shape;");
  emit(e, " * the padded dim and its real size (0: not padded); tied across stages;");
  emit(e, " * dim 0 one expert rank's part (--ep) */");
  emit(e, "static const RtParam params[] = {");
  e->depth++;
  int total = 0;
  for (int c = 0; c < e->nchunks; c++) {
    const CgChunk *ch = &e->chunks[c];
    e->chunk = ch, e->g = ch->g, e->plan = ch->plan;
    for (int i = 0; i < ch->g->params.len; i++, total++) {
      IrValue *v = ch->g->params.items[i];
      if (v->type.rank > 8) die("param of rank %d", v->type.rank);
      const PassBuf *b = cg_buf(e, v);
      bool normal = v->init.kind == IR_INIT_NORMAL;
      bool expert = cg_expert_param(v), split = v->shard.kind == IR_SPLIT && !expert;
      IrType whole = v->type;
      if (split) whole.shape[v->shard.dim] *= cg_mesh(e->g, IR_AXIS_TENSOR);
      if (expert) whole.shape[0] *= cg_expert_ranks(e);
      emit(e, "{%s, %d, %s, %lld, %lld, %s, %.17g, %.17g, %d, %d, %d, %d, %s, %d, %lld, %d, %d},",
           cstr(param_name(v)), v->type.rank, shape_init(&v->type),
           (long long)ir_type_numel(&v->type),
           (long long)(ch->weight_base + b->offset / e->plan->real_bytes), init[v->init.kind],
           normal ? literal(v->init.mean) : 0.0, normal ? literal(v->init.std) : 0.0,
           v->type.rank >= 2, split, split ? v->shard.dim : 0,
           split ? ir_shard_blocks(&v->shard) : 1, shape_init(&whole),
           v->unpadded > 0 ? v->pad_dim : 0, (long long)(v->unpadded > 0 ? v->unpadded : 0),
           tied_kind(pr, v), expert);
    }
  }
  if (total == 0) emit(e, "{0},");
  e->depth--;
  emit(e, "};");
  emit_blank(e);
}

static int64_t location(CgEmitter *e, const IrValue *v) {
  return pass_memplan_act_offset(e->plan, cg_buf(e, v));
}

static bool in_vec(const IrVec *vec, const void *x) {
  for (int i = 0; i < vec->len; i++)
    if (vec->items[i] == x) return true;
  return false;
}

/* Whether input v of chunk c is a received message rather than a model input. */
static bool is_message(const CgChunk *c, const IrValue *v) {
  return in_vec(&c->recv_act, v) || in_vec(&c->recv_grad, v);
}

/* The RT_MLM_* role (runtime/mlm.h) of input v: in a masked-LM model (its
 * loss ignores targets of -100) the loss's targets are the labels, an input
 * that an embedding reads holds the masked ids, and any other is the
 * key-padding mask; in any other model every input is the window itself,
 * so an input used as attention's mask there is an error: the runtime has
 * nothing to fill it with but tokens. */
static int mlm_role(CgEmitter *e, const CgModelInfo *mi, const IrValue *v) {
  const IrNode *loss = mi->loss->def;
  bool mlm = ir_attr_has(loss, "ignore") && ir_attr_int(loss, "ignore");
  if (mlm && v == mi->targets) return 2;
  for (int i = 0; i < e->g->nodes.len; i++) {
    const IrNode *n = e->g->nodes.items[i];
    if (mlm && n->op == IR_OP_EMBEDDING && n->in[0] == v) return 1;
    if (!mlm && n->op == IR_OP_ATTENTION && n->nin > 3 && n->in[3] == v) {
      cg_error(e, n, "the mask %s is a model input, which the runtime fills only in a masked-LM "
               "model (a loss with ignore=1)", v->name);
      return 0;
    }
  }
  return mlm ? 3 : 0;
}

/* The model inputs chunk c reads; returns how many. */
static int emit_inputs(CgEmitter *e, const CgModelInfo *mi) {
  const CgChunk *c = e->chunk;
  int n = 0;
  for (int i = 0; i < e->g->inputs.len; i++) {
    IrValue *v = e->g->inputs.items[i];
    if (v == mi->dloss || is_message(c, v)) continue;
    if (!n++) {
      emit(e, "/* name, rank, shape, numel, location (bytes), is the target, masked-LM role */");
      emit(e, "static const RtInput inputs_c%d[] = {", c->index);
      e->depth++;
    }
    int role = mlm_role(e, mi, v);
    emit(e, "{%s, %d, %s, %lld, %lld, %d, %d},", cstr(v->name), v->type.rank, shape_init(&v->type),
         (long long)ir_type_numel(&v->type), (long long)location(e, v), v == mi->targets && !role,
         role);
  }
  if (n) {
    e->depth--;
    emit(e, "};");
    emit_blank(e);
  }
  return n;
}

/* One message's part list: returns whether it has parts. */
static bool emit_parts(CgEmitter *e, const char *what, const IrVec *parts) {
  if (!parts->len) return false;
  emit(e, "static const RtMsgPart %s_c%d[] = {", what, e->chunk->index);
  e->depth++;
  for (int i = 0; i < parts->len; i++) {
    const IrValue *v = parts->items[i];
    emit(e, "{%lld, %lld}, /* %s */", (long long)location(e, v),
         (long long)ir_type_numel(&v->type), cg_name(e, v));
  }
  e->depth--;
  emit(e, "};");
  return true;
}

static const char *table_ref(bool have, const char *what, int c) {
  return have ? ir_fmt("%s_c%d", what, c) : "NULL";
}

/* The chunk's inputs and messages, then its entry of the chunk table
 * (written into `entry`). */
static const char *emit_chunk_tables(CgEmitter *e, const CgModelInfo *mi) {
  const CgChunk *c = e->chunk;
  int nin = emit_inputs(e, mi);
  bool ra = emit_parts(e, "recv_act", &c->recv_act), sa = emit_parts(e, "send_act", &c->send_act);
  bool rg = emit_parts(e, "recv_grad", &c->recv_grad), sg = emit_parts(e, "send_grad", &c->send_grad);
  if (ra || sa || rg || sg) emit_blank(e);
  bool loss = false;
  for (int i = 0; i < e->g->outputs.len; i++) loss |= e->g->outputs.items[i] == mi->loss;
  const PassMemPlan *p = e->plan;
  int64_t lo = loss ? location(e, mi->loss) : 0, lg = loss ? location(e, mi->logits) : 0;
  /* Without a backward there is no seed to read; any real of the plan does. */
  int64_t dl = loss && mi->dloss && pass_memplan_find(p, mi->dloss) ? location(e, mi->dloss) : lo;
  return ir_fmt("{%d, %s, %s, %lldLL, %lldLL, %s, %d, %d, %lldLL, %lldLL, %lldLL, %s, %s, %s, %s, "
                "%d, %d, %d, %d, %lldLL, %lldLL},",
                c->vstage, fn_name(e, "forward", c), fn_name(e, "backward", c),
                (long long)p->activations, (long long)p->temporaries,
                table_ref(nin, "inputs", c->index), nin, loss, (long long)lo, (long long)lg,
                (long long)dl, table_ref(ra, "recv_act", c->index),
                table_ref(sa, "send_act", c->index), table_ref(rg, "recv_grad", c->index),
                table_ref(sg, "send_grad", c->index), c->recv_act.len, c->send_act.len,
                c->recv_grad.len, c->send_grad.len, (long long)c->weight_base,
                (long long)(c->weight_base + c->nweights));
}

static void emit_buckets(CgEmitter *e, const CgProgram *pr) {
  if (!pr->nbuckets) return;
  emit(e, "/* Data-parallel gradient buckets: chunk, tied, offset and numel (elements), expert. */");
  emit(e, "static const RtBucket buckets[] = {");
  e->depth++;
  for (int b = 0; b < pr->nbuckets; b++)
    emit(e, "{%d, %d, %lldLL, %lldLL, %d},", pr->buckets[b].chunk, pr->buckets[b].tied,
         (long long)pr->buckets[b].offset, (long long)pr->buckets[b].numel,
         pr->buckets[b].expert ? cg_expert_ranks(e) : 0);
  e->depth--;
  emit(e, "};");
  emit_blank(e);
}

/* The chunks' W functions, when their backward is split. */
static void emit_wgrads(CgEmitter *e) {
  if (!e->chunks[0].g->wsplit) return;
  emit(e, "/* The W of each chunk (zero-bubble schedules): backward() is its B. */");
  emit(e, "static void (*const wgrads[])(RtCtx *) = {");
  e->depth++;
  for (int c = 0; c < e->nchunks; c++) emit(e, "%s,", fn_name(e, "wgrad", &e->chunks[c]));
  e->depth--;
  emit(e, "};");
  emit_blank(e);
}

static void emit_actions(CgEmitter *e, const CgProgram *pr) {
  if (!pr->table) return;
  emit(e, "/* This stage's action table of the %s schedule (abi/schedule.h):", pr->schedule);
  emit(e, " * kind, msg, flags, shape, chunk, peer, microbatch. */");
  emit(e, "static const RtSchedAction actions[] = {");
  e->depth++;
  for (int i = 0; i < pr->table->n; i++) {
    const RtSchedAction *a = &pr->table->actions[i];
    emit(e, "{%d, %d, %d, %d, %d, %d, %d},", a->kind, a->msg, a->flags, a->shape, a->chunk,
         a->peer, a->mb);
  }
  e->depth--;
  emit(e, "};");
  emit_blank(e);
}

/* Whether the plans keep the pipeline messages at 2 bytes an element
 * (PassMemPolicy.low_values): then every part of every message is, and
 * the runtime sends them as bf16. */
static bool messages_low(CgEmitter *e) {
  int low = 0, parts = 0;
  for (int c = 0; c < e->nchunks; c++) {
    const CgChunk *ch = &e->chunks[c];
    const IrVec *vecs[] = {&ch->recv_act, &ch->send_act, &ch->recv_grad, &ch->send_grad};
    for (int k = 0; k < 4; k++)
      for (int i = 0; i < vecs[k]->len; i++) {
        const IrValue *v = vecs[k]->items[i];
        parts++;
        low += pass_memplan_find(ch->plan, v)->bytes < ir_type_numel(&v->type) * ch->plan->real_bytes;
      }
  }
  if (low && low != parts) die("%d of %d message parts are bf16", low, parts);
  return low > 0;
}

static void emit_model(CgEmitter *e, const CgModelInfo *mi, const CgProgram *pr) {
  int nparams = 0;
  for (int c = 0; c < e->nchunks; c++) nparams += e->chunks[c].g->params.len;
  emit(e, "const RtModel rt_model = {");
  e->depth++;
  emit(e, ".name = %s,", cstr(e->g->name ? e->g->name : "model"));
  emit(e, ".source = %s,", cstr(e->opt->model_path ? e->opt->model_path : ""));
  emit(e, ".defines = %s,", cstr(defines_str(e->opt)));
  emit(e, ".batch = %lld,", (long long)mi->batch);
  emit(e, ".seq = %lld,", (long long)mi->seq);
  emit(e, ".vocab = %lld,", (long long)mi->vocab);
  emit(e, ".params = params,");
  emit(e, ".nparams = %d,", nparams);
  emit(e, ".nweights = %lld,", (long long)pr->nweights);
  emit(e, ".plan = {PLAN_WEIGHTS, PLAN_GRADS, PLAN_OPTIMIZER, PLAN_ACTIVATIONS, PLAN_TEMPORARIES},");
  emit(e, ".chunks = chunks,");
  emit(e, ".nchunks = %d,", e->nchunks);
  emit(e, ".mesh_tp = %d,", cg_mesh(e->g, IR_AXIS_TENSOR));
  emit(e, ".mesh_pp = %d,", cg_mesh(e->g, IR_AXIS_PIPELINE));
  emit(e, ".mesh_dp = %d,", cg_mesh(e->g, IR_AXIS_DATA));
  emit(e, ".stage = %d,", pr->stage);
  emit(e, ".logits_cols = %lld,", (long long)mi->logits_cols);
  /* A plan that keeps the logits in 2-byte reals (PassMemPolicy.low_bytes)
   * says so, for the runtime's sampling. */
  const PassMemPlan *lp = e->chunks[e->nchunks - 1].plan;
  const PassBuf *lb = mi->logits ? pass_memplan_find(lp, mi->logits) : NULL;
  if (lb && lp->policy.low_bytes && lb->bytes < ir_type_numel(&mi->logits->type) * lp->real_bytes)
    emit(e, ".logits_bf16 = 1,");
  if (messages_low(e)) emit(e, ".messages_bf16 = 1,");
  if (pr->table) {
    emit(e, ".schedule = %s,", cstr(pr->schedule));
    emit(e, ".actions = actions,");
    emit(e, ".nactions = %d,", pr->table->n);
    emit(e, ".microbatches = %d,", pr->microbatches);
  }
  if (pr->nbuckets) {
    emit(e, ".buckets = buckets,");
    emit(e, ".nbuckets = %d,", pr->nbuckets);
    emit(e, ".zero = %d,", e->opt->zero ? 1 : 0);
  }
  if (e->chunks[0].g->wsplit) emit(e, ".wgrad = wgrads,");
  if (e->vshape) emit(e, ".vshape = 1,");
  /* Last, as RtModel declares it (C++, the CUDA programs, wants the
   * designators in that order). */
  if (cg_expert_ranks(e) > 1) emit(e, ".mesh_ep = %d,", cg_expert_ranks(e));
  e->depth--;
  emit(e, "};");
  emit_blank(e);
}

/* ------------------------------------------------------------ the program */

static void emit_plan(CgEmitter *e, const CgProgram *pr) {
  emit(e, "/* The memory plan, in bytes per region. The runtime allocates it once;");
  emit(e, " * activations (kept for backward) and temporaries form one buffer. */");
  emit(e, "#define PLAN_WEIGHTS %lldLL", (long long)pr->regions[0]);
  emit(e, "#define PLAN_GRADS %lldLL", (long long)pr->regions[1]);
  emit(e, "#define PLAN_OPTIMIZER %lldLL", (long long)pr->regions[2]);
  emit(e, "#define PLAN_ACTIVATIONS %lldLL", (long long)pr->regions[3]);
  emit(e, "#define PLAN_TEMPORARIES %lldLL", (long long)pr->regions[4]);
  if (e->target->plan_defines) e->target->plan_defines(e);
  emit_blank(e);
  emit(e, "/* Storage: WGT and GRD take elements of real into the weights and the");
  emit(e, " * gradients; ACT and I32 bytes into the running microbatch's kept");
  emit(e, " * activations, TMP and I32T bytes into the temporaries. */");
  emit(e, "#define WGT(elems) (ctx->weights + (elems))");
  emit(e, "#define GRD(elems) (ctx->grads + (elems))");
  emit(e, "#define ACT(bytes) ((real *)(ctx->activations + (bytes)))");
  emit(e, "#define I32(bytes) ((int32_t *)(ctx->activations + (bytes)))");
  emit(e, "#define TMP(bytes) ((real *)(ctx->temporaries + (bytes)))");
  emit(e, "#define I32T(bytes) ((int32_t *)(ctx->temporaries + (bytes)))");
  if (pr->nbuckets) {
    emit(e, "/* Data parallelism: the runtime starts a bucket's reduction once its");
    emit(e, " * gradients are complete, and progresses reductions between nodes. */");
    emit(e, "#define BUCKET_READY(b) (ctx->bucket_ready ? ctx->bucket_ready(ctx, (b)) : (void)0)");
    emit(e, "#define POLL() (ctx->poll ? ctx->poll(ctx) : (void)0)");
  } else if (pr->chunks[0].g->wsplit) {
    emit(e, "/* The runtime progresses the stage's sends between nodes. */");
    emit(e, "#define POLL() (ctx->poll ? ctx->poll(ctx) : (void)0)");
  }
  emit_blank(e);
}

static void emit_program(CgEmitter *e, const CgModelInfo *mi, const CgProgram *pr) {
  bool f64 = e->plan->real_bytes == 8;
  const char *defs = defines_flags(e->opt);
  int t = cg_mesh(e->g, IR_AXIS_TENSOR), p = cg_mesh(e->g, IR_AXIS_PIPELINE);
  int d = cg_mesh(e->g, IR_AXIS_DATA);
  const char *name = e->g->name ? e->g->name : "model", *ty = f64 ? "f64" : "f32";
  if (p > 1)
    emit(e, "/* %s: the rank program of pipeline stage %d of %d (its %d chunk%s), run by its %d "
            "tensor- and data-parallel rank%s, %s, for the %s target.",
         name, pr->stage, p, e->nchunks, e->nchunks == 1 ? "" : "s", t * d, t * d == 1 ? "" : "s",
         ty, e->target->name);
  else if (t * d > 1)
    emit(e, "/* %s: the rank program of all %d ranks (t=%d, d=%d; each learns its place from "
            "the runtime), %s, for the %s target.",
         name, t * d, t, d, ty, e->target->name);
  else
    emit(e, "/* %s: the rank program of rank 0 (of 1), %s, for the %s target.", name, ty,
         e->target->name);
  emit(e, " * Generated by shardc from %s%s; edits are lost when it is compiled again. */",
       e->opt->model_path ? e->opt->model_path : "an IR graph", defs);
  e->target->prologue(e);
  emit(e, "#%s SHARD_REAL_F64", f64 ? "ifndef" : "ifdef");
  emit(e, "#error \"generated for %s: build with%s -DSHARD_REAL_F64\"", f64 ? "f64" : "f32",
       f64 ? "" : "out");
  emit(e, "#endif");
  emit_blank(e);
  emit_plan(e, pr);
  for (int c = 0; c < e->nchunks; c++) {
    e->chunk = &e->chunks[c], e->g = e->chunk->g, e->plan = e->chunk->plan;
    emit_functions(e);
  }
  emit_params(e, pr);
  const char **entries = ir_alloc(sizeof(char *) * (size_t)e->nchunks);
  for (int c = 0; c < e->nchunks; c++) {
    e->chunk = &e->chunks[c], e->g = e->chunk->g, e->plan = e->chunk->plan;
    entries[c] = emit_chunk_tables(e, mi);
  }
  emit(e, "/* vstage, forward, backward, activations and temporaries (bytes), inputs,");
  emit(e, " * has_loss and the loss, logits and d_loss locations, the message parts");
  emit(e, " * and their counts, weights_begin, weights_end (abi/model.h) */");
  emit(e, "static const RtChunk chunks[] = {");
  e->depth++;
  for (int c = 0; c < e->nchunks; c++) emit(e, "%s", entries[c]);
  e->depth--;
  emit(e, "};");
  emit_blank(e);
  emit_buckets(e, pr);
  emit_wgrads(e);
  emit_actions(e, pr);
  emit_model(e, mi, pr);
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
 * abi/mesh.h (which the runtime builds its communicators from), runs
 * the one program: ranks that differ only in their tensor-parallel index
 * share it. */
static bool write_manifest(CgEmitter *e, const CgProgram *progs, int nprogs) {
  RtMesh mesh = {cg_mesh(e->g, IR_AXIS_TENSOR), cg_mesh(e->g, IR_AXIS_PIPELINE),
                 cg_mesh(e->g, IR_AXIS_DATA)};
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
  cJSON_AddNumberToObject(mj, "vpp", e->g->vpp > 1 ? e->g->vpp : 1);
  if (progs[0].table) {
    cJSON_AddStringToObject(m, "schedule", progs[0].schedule);
    cJSON_AddNumberToObject(m, "microbatches", progs[0].microbatches);
  }
  cJSON_AddNumberToObject(m, "zero", e->opt->zero ? 1 : 0);
  cJSON *pj = cJSON_AddArrayToObject(m, "programs");
  for (int i = 0; i < nprogs; i++) {
    cJSON *pr = cJSON_CreateObject();
    cJSON_AddStringToObject(pr, "name", progs[i].name);
    cJSON_AddStringToObject(pr, "source", ir_fmt("%s%s", progs[i].name, e->target->source_ext));
    cJSON_AddNumberToObject(pr, "stage", progs[i].stage);
    cJSON_AddItemToArray(pj, pr);
  }
  cJSON *ranks = cJSON_AddArrayToObject(m, "ranks");
  for (int rank = 0; rank < world; rank++) {
    RtCoord c = rt_mesh_coord(mesh, rank);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "rank", rank);
    cJSON_AddStringToObject(r, "program", progs[c.pp].name);
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

static void print_plan(FILE *out, const CgProgram *pr, int rb, int threads, bool several,
                       const int64_t *without) {
  if (several) fprintf(out, "%s: ", pr->name);
  pass_memplan_print_regions(out, rb, threads, pr->regions, without ? without[pr->stage] : -1);
}

static void emitter_begin(CgEmitter *e, const CgLayout *l, CgChunk *chunks, int nchunks) {
  *e = (CgEmitter){.g = chunks[0].g, .plan = chunks[0].plan, .chunk = &chunks[0],
                   .chunks = chunks, .nchunks = nchunks, .opt = l->opt, .target = l->target,
                   .vshape = l->g->pp_vshape};
  emitter_open(e);
  cg_listing_open(e);
  if (l->target->state_new) e->state = l->target->state_new(e);
}

/* The programs, one per pipeline stage (each after its memory plan when
 * asked), then the build file, the manifest and the model files. */
bool cg_emit(const CgLayout *l) {
  const CgOptions *o = l->opt;
  const CgTarget *t = l->target;
  if (!make_dirs(o->out_dir)) return false;
  const char **names = ir_alloc(sizeof(char *) * (size_t)l->nprograms);
  if (o->plans_out) {
    o->plans_out->n = l->nprograms;
    o->plans_out->plan = ir_alloc(sizeof(RtPlan) * (size_t)l->nprograms);
    for (int r = 0; r < l->nprograms; r++) {
      const int64_t *g = l->programs[r].regions;
      o->plans_out->plan[r] = (RtPlan){g[0], g[1], g[2], g[3], g[4]};
    }
  }
  for (int r = 0; r < l->nprograms; r++) {
    const CgProgram *pr = &l->programs[r];
    names[r] = pr->name;
    if (o->plan_out)
      print_plan(o->plan_out, pr, l->real_bytes, l->policy.threads, l->pp > 1, o->act_without);
    if (o->plan_out && l->policy.low_bytes)
      fprintf(o->plan_out, "  (activations and temporaries in %d-byte reals: --precision bf16)\n",
              l->policy.low_bytes);
    CgEmitter pe;
    emitter_begin(&pe, l, pr->chunks, pr->nchunks);
    emit_program(&pe, &l->model, pr);
    cg_listing_program(&pe, pr);
    if (pe.errors) {
      fclose(pe.out);
      free(pe.buf);
      return false;
    }
    if (!write_emitter(&pe, ir_fmt("%s%s", pr->name, t->source_ext))) return false;
  }
  CgEmitter b;
  emitter_begin(&b, l, l->chunks, 1);
  b.chunk = NULL;
  t->buildfile(&b, names, l->nprograms);
  if (!write_emitter(&b, t->buildfile_name)) return false;
  return write_manifest(&b, l->programs, l->nprograms) && write_model_files(o) &&
         cg_listing_write(l);
}

/* The last stage of the compiler: the layout of the program set, built
 * and verified once, then every file printed from it. */
bool cg_kept_activations(PassProgram *p, const CgOptions *o, int64_t *bytes, int nprograms) {
  if (!cg_target_known(o->target)) return false;
  CgLayout *l = cg_layout_build(p, o, cg_find_target(o->target));
  if (!l) return false;
  bool ok = l->nprograms == nprograms;
  for (int r = 0; ok && r < nprograms; r++) bytes[r] = l->programs[r].regions[3];
  cg_layout_free(l);
  return ok;
}

int cg_compile(PassProgram *p, const CgOptions *o) {
  if (!cg_target_known(o->target)) return 1;
  CgLayout *l = cg_layout_build(p, o, cg_find_target(o->target));
  if (!l) return 1;
  bool ok = cg_emit(l);
  cg_layout_free(l);
  return ok ? 0 : 1;
}

void cg_buildfile_rules(CgEmitter *e, const char *const *programs, int nprograms,
                        const char *compile) {
  char *all = ir_strdup("");
  for (int i = 0; i < nprograms; i++) all = ir_fmt("%s %s", all, programs[i]);
  emit(e, "all:%s", all);
  emit_blank(e);
  for (int i = 0; i < nprograms; i++) {
    emit(e, "%s: %s%s $(RTLIBS)", programs[i], programs[i], e->target->source_ext);
    emit(e, "\t%s $(EXTRA_CFLAGS) $(CPPFLAGS) -o $@ %s%s $(RTLIBS) $(LDLIBS)", compile,
         programs[i], e->target->source_ext);
    emit_blank(e);
  }
  emit(e, "clean:");
  emit(e, "\trm -f%s", all);
  emit_blank(e);
  emit(e, ".PHONY: all clean");
}
