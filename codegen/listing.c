/* The launch listing (listing.h): the records the code generators make as
 * they write each call, and kernels.json. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "layout.h"
#include "listing.h"

const char *const cg_kclass_names[CG_NKCLASS] = {
    "gemm", "attention", "elementwise", "norm", "reduction", "copy", "collective", "optimizer",
    "host"};

/* One launch or library call. */
typedef struct Rec {
  const char *kernel;
  CgKClass cls;
  double flops, read, written;
  int64_t calls;   /* per microbatch, or per step for the runtime's step records */
  bool per_step;   /* the runtime's work of a step, once per step */
  bool sync;       /* the host waits for it */
  bool unlisted;   /* no hook recorded it: priced from its node */
  bool in_chunks;  /* inside a loop over row chunks: one parallel region for all its calls */
  bool runtime;    /* the runtime's own, not the generated code's */
  int64_t threads, steps; /* 0: fills the device; else each thread loops over `steps` */
  int chunk, first, last;
  int fn;          /* 0 forward, 1 backward, 2 wgrad, -1 the runtime's step */
  const char *label, *ops;
  bool gemm;
  int64_t batch, m, n, k, lda, ldb, ldc;
  int ab, c;
  bool add;
  bool attention, backward;
  int64_t b, s, heads, kv_heads, d;
  int causal;
  /* A collective: its communicator (tp, dp), members and operation. */
  const char *axis, *op;
  int members;
} Rec;

/* A chunk function's CUDA graph, as the target decided. */
typedef struct Graph {
  const char *program;
  int chunk, fn;
  bool captured;
} Graph;

/* The records of the program set being written (one at a time). */
static struct {
  Rec *r;
  int n, cap;
  int pending; /* the first record not yet given a label */
  int filed;   /* the first record of the program being written */
  int64_t repeat;
  const CgEmitter *e;
  size_t mark; /* e's text up to here is accounted for */
  int fn;      /* the function of the last node seen */
  Graph *g;
  int ng, gcap;
  cJSON *programs;
} L;

void cg_listing_open(CgEmitter *e) {
  /* A new program's emitter: its text starts afresh, and what a program
   * that failed to compile left unfiled is dropped. */
  L.e = e;
  L.n = L.pending = L.filed;
  int keep = 0;
  for (int i = 0; i < L.ng; i++)
    if (L.g[i].program) L.g[keep++] = L.g[i];
  L.ng = keep;
  fflush(e->out);
  L.mark = e->len;
  L.repeat = 1;
  L.fn = 0;
}

static void begin(CgEmitter *e) {
  if (L.e != e) cg_listing_open(e);
}

static Rec *add(CgEmitter *e) {
  begin(e);
  if (L.n == L.cap) {
    L.cap = L.cap ? 2 * L.cap : 256;
    L.r = realloc(L.r, sizeof *L.r * (size_t)L.cap);
    if (!L.r) die("out of memory");
  }
  Rec *r = &L.r[L.n++];
  memset(r, 0, sizeof *r);
  r->calls = L.repeat > 1 ? L.repeat : 1;
  r->in_chunks = L.repeat > 1;
  r->chunk = e->chunk ? e->chunk->index : 0;
  r->first = r->last = -1;
  return r;
}

static Rec *last_rec(void) { return L.n > 0 ? &L.r[L.n - 1] : NULL; }

double cg_listing_bytes(CgEmitter *e, const IrValue *v) {
  double n = (double)ir_type_numel(&v->type);
  if (v->type.dtype == IR_I32) return 4 * n;
  if (pass_memplan_low(e->plan, v)) return 2 * n;
  return n * e->plan->real_bytes;
}

/* Whether the generated code adds into v (a gradient slot): it then reads
 * v as well as writing it. */
static bool into_grads(CgEmitter *e, const IrValue *v) {
  const PassBuf *b = pass_memplan_find(e->plan, v);
  return b && b->region == PASS_REGION_GRADS;
}

/* ------------------------------------------------------------- names */

/* The called function of the last line written: `k_cuda_x(...)` is
 * k_cuda_x, `CU_LAUNCH(grid, kernel)(...)` the kernel, `CU_CHECK(f(...))`
 * f. */
static const char *last_call(CgEmitter *e) {
  fflush(e->out);
  size_t end = e->len;
  while (end > 0 && (e->buf[end - 1] == '\n' || e->buf[end - 1] == ' ')) end--;
  size_t start = end;
  while (start > 0 && e->buf[start - 1] != '\n') start--;
  const char *s = e->buf + start, *stop = e->buf + end;
  while (s < stop && *s == ' ') s++;
  for (int wrap = 0; wrap < 2; wrap++) {
    if (strncmp(s, "CU_CHECK(", 9) == 0) s += 9;
    if (strncmp(s, "KC_CHECK(", 9) == 0) s += 9;
  }
  if (strncmp(s, "CU_LAUNCH(", 10) == 0) {
    const char *p = s + 10, *comma = NULL;
    int depth = 1;
    for (; p < stop && depth > 0; p++) {
      if (*p == '(') depth++;
      else if (*p == ')') depth--;
      else if (*p == ',' && depth == 1) comma = p;
    }
    if (comma && depth == 0) {
      const char *a = comma + 1, *b = p - 1;
      while (a < b && *a == ' ') a++;
      return ir_strndup(a, (size_t)(b - a));
    }
  }
  const char *p = s;
  while (p < stop && (isalnum((unsigned char)*p) || *p == '_')) p++;
  return p > s ? ir_strndup(s, (size_t)(p - s)) : "(code)";
}

/* ------------------------------------------------------------- records */

void cg_launch(CgEmitter *e, CgKClass cls, const char *kernel, double flops, double read,
               double written) {
  const char *name = kernel ? kernel : last_call(e);
  Rec *r = add(e);
  r->kernel = name, r->cls = cls, r->flops = flops, r->read = read, r->written = written;
}

void cg_launch_copy(CgEmitter *e, double bytes) { cg_launch(e, CG_K_COPY, NULL, 0, bytes, bytes); }

/* Matrix FLOPs of a node as its kernels run them: the forward ops' rule of
 * ops.def, dx = dy w^T and dw = x^T dy each the forward's, attention's
 * backward twice its forward (planner/cost.c counts the same). */
static double node_flops(const IrNode *n) {
  switch (n->op) {
  case IR_OP_LINEAR_DX: {
    const IrType *dy = &n->in[0]->type;
    return 2.0 * (double)ir_type_numel(&n->out[0]->type) * (double)dy->shape[dy->rank - 1];
  }
  case IR_OP_LINEAR_DW: {
    const IrType *x = &n->in[0]->type;
    return 2.0 * (double)ir_type_numel(&n->out[0]->type) * (double)ir_type_numel(x) /
           (double)x->shape[x->rank - 1];
  }
  case IR_OP_ATTENTION_GRAD: {
    const IrType *q = &n->in[0]->type;
    return 8.0 * (double)ir_type_numel(q) * (double)q->shape[q->rank - 2];
  }
  default: return ir_op_info(n->op)->flops(n);
  }
}

static void node_io(CgEmitter *e, const IrNode *n, double *read, double *written) {
  *read = *written = 0;
  for (int i = 0; i < n->nin; i++) *read += cg_listing_bytes(e, n->in[i]);
  for (int i = 0; i < n->nout; i++) {
    const PassBuf *b = pass_memplan_find(e->plan, n->out[i]);
    if (!b || b->region == PASS_REGION_NONE) continue;
    *written += cg_listing_bytes(e, n->out[i]);
    if (into_grads(e, n->out[i])) *read += cg_listing_bytes(e, n->out[i]);
  }
}

void cg_launch_node(CgEmitter *e, CgKClass cls, const char *kernel, const IrNode *n) {
  double read, written, k = (double)L.repeat;
  node_io(e, n, &read, &written);
  cg_launch(e, cls, kernel, node_flops(n) / k, read / k, written / k);
}

void cg_launch_gemm(CgEmitter *e, const char *kernel, int64_t batch, int64_t M, int64_t N,
                    int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int ab, int c, bool add_c) {
  double bt = (double)(batch > 0 ? batch : 1);
  double read = bt * ((double)M * (double)K + (double)K * (double)N) * ab;
  double written = bt * (double)M * (double)N * c;
  cg_launch(e, CG_K_GEMM, kernel, 2.0 * bt * (double)M * (double)N * (double)K,
            read + (add_c ? written : 0), written);
  Rec *r = last_rec();
  r->gemm = true, r->batch = batch > 0 ? batch : 1, r->m = M, r->n = N, r->k = K;
  r->lda = lda, r->ldb = ldb, r->ldc = ldc, r->ab = ab, r->c = c, r->add = add_c;
}

void cg_launch_attention(CgEmitter *e, const char *kernel, const IrNode *n) {
  cg_launch_node(e, CG_K_ATTENTION, kernel, n);
  Rec *r = last_rec();
  const IrValue *q = n->in[0];
  int64_t H, K, d;
  cg_attention_dims(n, &H, &K, &d);
  r->attention = true, r->backward = n->op == IR_OP_ATTENTION_GRAD;
  r->b = cg_numel(q) / (cg_dim(q, -2) * cg_dim(q, -1)), r->s = cg_dim(q, -2);
  r->heads = H, r->kv_heads = K, r->d = d, r->causal = (int)ir_attr_int(n, "causal");
  /* Inside a chunk of rows its whole sequences (the CPU target's runs). */
  if (L.repeat > 1) r->b = r->b / L.repeat > 0 ? r->b / L.repeat : 1;
}

void cg_launch_values(CgEmitter *e, CgKClass cls, const char *kernel, const void *reads,
                      size_t stride, int nreads, const IrValue *const *writes, int nwrites) {
  double read = 0, written = 0;
  for (int i = 0; i < nreads; i++)
    read += cg_listing_bytes(e, *(const IrValue *const *)((const char *)reads + (size_t)i * stride));
  for (int i = 0; i < nwrites; i++) {
    written += cg_listing_bytes(e, writes[i]);
    if (into_grads(e, writes[i])) read += cg_listing_bytes(e, writes[i]);
  }
  cg_launch(e, cls, kernel, 0, read / (double)L.repeat, written / (double)L.repeat);
}

void cg_launch_comm(CgEmitter *e, const char *op, int64_t members, double bytes) {
  cg_launch(e, CG_K_COLLECTIVE, NULL, 0, bytes, bytes);
  Rec *r = last_rec();
  /* Ordered on the device by events (comm_nccl.c): no host wait. */
  r->axis = "tp", r->op = op, r->members = (int)members, r->sync = false;
}

void cg_launch_add_bytes(CgEmitter *e, double read, double written) {
  (void)e;
  if (!last_rec()) return;
  last_rec()->read += read;
  last_rec()->written += written;
}

void cg_launch_sync(CgEmitter *e) {
  (void)e;
  if (last_rec()) last_rec()->sync = true;
}

void cg_launch_serial(CgEmitter *e, int64_t threads, int64_t steps) {
  (void)e;
  if (last_rec()) last_rec()->threads = threads, last_rec()->steps = steps;
}

void cg_listing_repeat(CgEmitter *e, int64_t n) {
  begin(e);
  L.repeat = n > 1 ? n : 1;
}

/* ----------------------------------------------------- the core's marks */

/* Whether the text written since the last mark has a statement of code:
 * a line that is neither a comment, a brace nor one of the core's hooks. */
static bool wrote_code(CgEmitter *e) {
  fflush(e->out);
  const char *s = e->buf + L.mark, *end = e->buf + e->len;
  while (s < end) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *line_end = nl ? nl : end;
    while (s < line_end && *s == ' ') s++;
    size_t len = (size_t)(line_end - s);
    bool skip = len == 0 || *s == '/' || *s == '{' || *s == '}' || *s == '#' ||
                strncmp(s, "PROF", 4) == 0 || strncmp(s, "BUCKET_READY", 12) == 0 ||
                strncmp(s, "POLL", 4) == 0 || strncmp(s, "(void)", 6) == 0 ||
                strncmp(s, "static ", 7) == 0;
    if (!skip && memchr(s, ';', len)) return true;
    s = nl ? nl + 1 : end;
  }
  return false;
}

/* The class of a node's kernels, for a node no hook recorded. */
static CgKClass op_class(const IrNode *n) {
  unsigned f = ir_op_info(n->op)->flags;
  if (f & IR_OPF_COLLECTIVE) return CG_K_COLLECTIVE;
  if (f & IR_OPF_GEMM) return CG_K_GEMM;
  switch (n->op) {
  case IR_OP_ATTENTION: case IR_OP_ATTENTION_GRAD: return CG_K_ATTENTION;
  case IR_OP_LAYERNORM: case IR_OP_LAYERNORM_GRAD: case IR_OP_RMSNORM: case IR_OP_RMSNORM_GRAD:
  case IR_OP_SOFTMAX: case IR_OP_SOFTMAX_GRAD: return CG_K_NORM;
  case IR_OP_SUM_TO: case IR_OP_CROSS_ENTROPY: case IR_OP_CROSS_ENTROPY_GRAD:
  case IR_OP_EMBEDDING_GRAD: return CG_K_REDUCTION;
  case IR_OP_SPLIT: case IR_OP_CONCAT: case IR_OP_TRANSPOSE: case IR_OP_SPLIT_HEADS:
  case IR_OP_MERGE_HEADS: case IR_OP_RESHAPE: case IR_OP_ZEROS: case IR_OP_TP_SLICE:
  case IR_OP_TP_COPY: case IR_OP_EMBEDDING: case IR_OP_ARANGE: return CG_K_COPY;
  default: return CG_K_ELEMENTWISE;
  }
}

static int fn_of(CgEmitter *e, int i) {
  return i < e->plan->boundary ? 0 : i < e->plan->wboundary ? 1 : 2;
}

const char *cg_listing_ops(CgEmitter *e, int first, int last) {
  char *ops = ir_strdup("");
  for (int i = first; i >= 0 && i <= last; i++) {
    const char *op = ir_op_info(cg_node(e, i)->op)->name;
    bool seen = false;
    for (int j = first; j < i && !seen; j++)
      seen = !e->plan->view[j] && strcmp(ir_op_info(cg_node(e, j)->op)->name, op) == 0;
    if (!e->plan->view[i] && !seen) ops = ir_fmt("%s%s%s", ops, *ops ? "+" : "", op);
  }
  return ops;
}

const char *cg_listing_prof(CgEmitter *e, int first, int last, const char *label) {
  begin(e);
  if (first >= 0) L.fn = fn_of(e, first);
  /* Code no hook recorded: each node of the range priced as a whole. */
  if (L.pending == L.n && first >= 0 && wrote_code(e))
    for (int i = first; i <= last; i++) {
      if (e->plan->view[i] || e->plan->absorbed[i]) continue;
      const IrNode *n = cg_node(e, i);
      cg_launch_node(e, op_class(n), ir_fmt("(%s)", ir_op_info(n->op)->name), n);
      last_rec()->unlisted = true;
    }
  const char *ops = first >= 0 ? cg_listing_ops(e, first, last) : "";
  for (int k = L.pending; k < L.n; k++) {
    Rec *r = &L.r[k];
    r->label = label, r->first = first, r->last = last, r->fn = L.fn;
    r->ops = *ops ? ops : label;
  }
  L.pending = L.n;
  fflush(e->out);
  L.mark = e->len;
  return label;
}

void cg_listing_graph(CgEmitter *e, int chunk, int f, bool captured) {
  (void)e;
  if (L.ng == L.gcap) {
    L.gcap = L.gcap ? 2 * L.gcap : 16;
    L.g = realloc(L.g, sizeof *L.g * (size_t)L.gcap);
    if (!L.g) die("out of memory");
  }
  L.g[L.ng++] = (Graph){NULL, chunk, f, captured};
}

/* ------------------------------------------------ the runtime's own work */

/* A record of the runtime's, per microbatch (step false) or per step,
 * under the label its per-op timer charges (runtime/main.c, batch.c). */
static Rec *runtime_rec(CgEmitter *e, const char *kernel, CgKClass cls, bool step,
                        const char *label, double read, double written, bool sync) {
  Rec *r = add(e);
  r->kernel = kernel, r->cls = cls, r->per_step = step, r->label = label, r->ops = label;
  r->read = read, r->written = written, r->sync = sync, r->fn = step ? -1 : 0, r->calls = 1;
  r->runtime = true;
  return r;
}

/* What the runtime does around the chunk functions (runtime/batch.c,
 * main.c, device_cpu.c, device_cuda.c): per microbatch, the inputs copied
 * into place (rt_load_inputs), and on the chunk with the loss the loss added
 * to the step's sum on the device and its seed filled in; per step, the
 * sum read back (a host wait on a GPU), the
 * gradients zeroed, the gradient norm (partial sums read back), AdamW over
 * every parameter and the finiteness check of the weights and both
 * moments (rt_update's check_update), the three sums of squares read
 * back together; the tables of runs they use are uploaded in the first step
 * and kept (device_cuda.c), so a step uploads none; the data
 * window's copy runs on a stream of its own. Pipeline messages and the
 * data-parallel reductions are the schedule's (shardc simulate MODEL
 * prices them with the tables). */
static void runtime_work(CgEmitter *e, const CgProgram *pr) {
  double rb = e->plan->real_bytes, n = (double)pr->nweights;
  bool gpu = e->target->memory == CG_MEMORY_GPU;
  int64_t tokens = 0;
  for (int c = 0; c < pr->nchunks; c++) {
    const IrGraph *g = pr->chunks[c].g;
    e->chunk = &pr->chunks[c], e->g = pr->chunks[c].g, e->plan = pr->chunks[c].plan;
    for (int i = 0; i < g->inputs.len; i++) {
      const IrValue *in = g->inputs.items[i];
      if (in->type.dtype != IR_I32) continue;
      double bytes = 4.0 * (double)ir_type_numel(&in->type);
      tokens = ir_type_numel(&in->type);
      runtime_rec(e, gpu ? "rt_dev_copy" : "rt_load_inputs", CG_K_COPY, false, "F inputs", bytes,
                  bytes, false)->chunk = c;
    }
    /* The chunk with the loss: its value added to the step's sum on the
     * device after each forward and the backward's seed filled in before
     * each backward (runtime/step/batch.c), neither a host wait; the sum
     * is read back once a step (rt_dev_loss_take). */
    bool loss = false;
    for (int i = 0; i < g->nodes.len; i++)
      loss |= ((const IrNode *)g->nodes.items[i])->op == IR_OP_CROSS_ENTROPY;
    if (!loss) continue;
    runtime_rec(e, "rt_chunk_loss_add", CG_K_ELEMENTWISE, false, "F loss sum", 4, 8, false)->chunk = c;
    runtime_rec(e, "rt_seed_dloss", CG_K_ELEMENTWISE, false, "B loss seed", 0, 4, false)->chunk = c;
    runtime_rec(e, "rt_dev_loss_take", CG_K_HOST, true, "S loss readback", 8, 0, gpu)->chunk = c;
  }
  e->chunk = &pr->chunks[0], e->g = pr->chunks[0].g, e->plan = pr->chunks[0].plan;
  runtime_rec(e, "rt_dev_zero", CG_K_COPY, true, "S zero_grads", 0, n * rb, false);
  /* The gradient norm: one sum of squares per chunk of 65536 (main.c
   * NORM_CHUNK), its sums read back. */
  runtime_rec(e, "rt_grad_norm", CG_K_REDUCTION, true, "S grad_norm", n * rb,
              8.0 * (n / 65536 + 1), false)->sync = gpu;
  /* AdamW reads w, g, m, v and writes w, m, v (and the bf16 working copy
   * of a bf16 program as it goes). */
  bool low = e->plan->policy.low_bytes == 2;
  runtime_rec(e, gpu ? "k_cuda_adamw_runs" : "rt_adamw_step", CG_K_OPTIMIZER, true,
              "S optimizer", 4 * n * rb, 3 * n * rb + (low ? 2 * n : 0), false);
  /* The three arrays' sums are read back together: one host wait. */
  static const char *const checked[] = {"weights", "adam_m", "adam_v"};
  for (int k = 0; k < 3; k++) {
    runtime_rec(e, ir_fmt("check_update (%s)", checked[k]), CG_K_REDUCTION, true, "S optimizer",
                n * rb, 8.0 * (n / 65536 + 1), gpu && k == 2);
  }
  /* The next window, staged (runtime/data.c): B s + 1 tokens, its copy
   * overlapping the step. */
  if (tokens) runtime_rec(e, "rt_dev_stage_put", CG_K_HOST, true, "S data", 4.0 * (double)tokens,
                          4.0 * (double)tokens, false);
  /* The data-parallel buckets, each reduced once per step (fp32). */
  for (int b = 0; b < pr->nbuckets; b++) {
    Rec *r = runtime_rec(e, "rt_comm_allreduce (bucket)", CG_K_COLLECTIVE, true, "S dp reduce",
                         (double)pr->buckets[b].numel * rb, (double)pr->buckets[b].numel * rb,
                         false);
    r->axis = "dp", r->op = "allreduce", r->members = cg_mesh(e->g, IR_AXIS_DATA);
  }
}

/* ---------------------------------------------------------- the file */

/* m: the program's microbatches per step. */
static cJSON *rec_json(const Rec *r, int m) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "kernel", r->kernel);
  cJSON_AddStringToObject(o, "class", cg_kclass_names[r->cls]);
  static const char *const fns[] = {"forward", "backward", "wgrad"};
  cJSON_AddStringToObject(o, "function", r->fn < 0 ? "step" : fns[r->fn]);
  cJSON_AddNumberToObject(o, "chunk", r->chunk);
  if (r->first >= 0) cJSON_AddNumberToObject(o, "node", r->first);
  cJSON_AddStringToObject(o, "label", r->label ? r->label : "");
  cJSON_AddStringToObject(o, "ops", r->ops ? r->ops : "");
  cJSON_AddNumberToObject(o, "flops", r->flops);
  cJSON_AddNumberToObject(o, "bytes_read", r->read);
  cJSON_AddNumberToObject(o, "bytes_written", r->written);
  cJSON_AddNumberToObject(o, "calls", (double)r->calls);
  cJSON_AddStringToObject(o, "per", r->per_step ? "step" : "microbatch");
  cJSON_AddNumberToObject(o, "calls_per_step", (double)r->calls * (r->per_step ? 1 : m));
  cJSON_AddBoolToObject(o, "sync", r->sync);
  if (r->unlisted) cJSON_AddBoolToObject(o, "unlisted", true);
  if (r->in_chunks) cJSON_AddBoolToObject(o, "in_chunks", true);
  if (r->runtime) cJSON_AddBoolToObject(o, "runtime", true);
  if (r->threads) cJSON_AddNumberToObject(o, "threads", (double)r->threads);
  if (r->threads) cJSON_AddNumberToObject(o, "steps", (double)r->steps);
  if (r->gemm) {
    cJSON *g = cJSON_AddObjectToObject(o, "gemm");
    cJSON_AddNumberToObject(g, "batch", (double)r->batch);
    cJSON_AddNumberToObject(g, "m", (double)r->m);
    cJSON_AddNumberToObject(g, "n", (double)r->n);
    cJSON_AddNumberToObject(g, "k", (double)r->k);
    cJSON_AddNumberToObject(g, "lda", (double)r->lda);
    cJSON_AddNumberToObject(g, "ldb", (double)r->ldb);
    cJSON_AddNumberToObject(g, "ldc", (double)r->ldc);
    cJSON_AddNumberToObject(g, "ab_bytes", r->ab);
    cJSON_AddNumberToObject(g, "c_bytes", r->c);
    cJSON_AddBoolToObject(g, "add", r->add);
  }
  if (r->attention) {
    cJSON *a = cJSON_AddObjectToObject(o, "attention");
    cJSON_AddNumberToObject(a, "b", (double)r->b);
    cJSON_AddNumberToObject(a, "s", (double)r->s);
    cJSON_AddNumberToObject(a, "heads", (double)r->heads);
    cJSON_AddNumberToObject(a, "kv_heads", (double)r->kv_heads);
    cJSON_AddNumberToObject(a, "d", (double)r->d);
    cJSON_AddBoolToObject(a, "causal", r->causal);
    cJSON_AddBoolToObject(a, "backward", r->backward);
  }
  if (r->axis) {
    cJSON *c = cJSON_AddObjectToObject(o, "collective");
    cJSON_AddStringToObject(c, "axis", r->axis);
    cJSON_AddStringToObject(c, "op", r->op ? r->op : "");
    cJSON_AddNumberToObject(c, "members", r->members);
  }
  return o;
}

/* The model FLOPs of one microbatch on this rank: 3x the forward's matrix
 * FLOPs (REFERENCE.md), recomputed forwards not counted. */
static double model_flops(const CgProgram *pr) {
  double f = 0;
  for (int c = 0; c < pr->nchunks; c++) {
    const IrGraph *g = pr->chunks[c].g;
    for (int i = 0; i < g->nodes.len; i++) {
      const IrNode *n = g->nodes.items[i];
      if (n->phase == IR_PHASE_FORWARD && !n->recomputed) f += ir_op_info(n->op)->flops(n);
    }
  }
  return 3 * f;
}

void cg_listing_program(CgEmitter *e, const CgProgram *pr) {
  begin(e);
  runtime_work(e, pr);
  L.pending = L.n;
  /* The first program of a set: what an earlier set that failed left. */
  if (pr->stage == 0 && L.programs) cJSON_Delete(L.programs), L.programs = NULL;
  if (!L.programs) L.programs = cJSON_CreateArray();
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "name", pr->name);
  cJSON_AddNumberToObject(p, "stage", pr->stage);
  cJSON_AddNumberToObject(p, "chunks", pr->nchunks);
  cJSON_AddNumberToObject(p, "weights", (double)pr->nweights);
  cJSON_AddNumberToObject(p, "model_flops_per_microbatch", model_flops(pr));
  cJSON *gr = cJSON_AddArrayToObject(p, "graphs");
  static const char *const fns[] = {"forward", "backward", "wgrad"};
  for (int i = 0; i < L.ng; i++) {
    if (L.g[i].program) continue;
    L.g[i].program = pr->name;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "chunk", L.g[i].chunk);
    cJSON_AddStringToObject(o, "function", fns[L.g[i].fn]);
    cJSON_AddBoolToObject(o, "captured", L.g[i].captured);
    cJSON_AddItemToArray(gr, o);
  }
  cJSON *ls = cJSON_AddArrayToObject(p, "launches");
  int m = pr->table ? pr->microbatches : 1;
  for (int k = L.filed; k < L.n; k++) cJSON_AddItemToArray(ls, rec_json(&L.r[k], m));
  cJSON_AddItemToArray(L.programs, p);
  L.filed = L.pending = L.n;
  L.e = NULL;
}

static void reset(void) {
  free(L.r);
  free(L.g);
  if (L.programs) cJSON_Delete(L.programs);
  memset(&L, 0, sizeof L);
}

bool cg_listing_write(const CgLayout *l) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "format", "shardc launch listing 1");
  cJSON_AddStringToObject(o, "model", l->g->name ? l->g->name : "model");
  cJSON_AddStringToObject(o, "target", l->target->name);
  cJSON_AddStringToObject(o, "precision", l->policy.low_bytes == 2 ? "bf16" : "fp32");
  cJSON_AddNumberToObject(o, "real_bytes", l->real_bytes);
  cJSON *mesh = cJSON_AddObjectToObject(o, "mesh");
  cJSON_AddNumberToObject(mesh, "tp", l->tp);
  cJSON_AddNumberToObject(mesh, "pp", l->pp);
  cJSON_AddNumberToObject(mesh, "dp", l->dp);
  cJSON_AddNumberToObject(mesh, "vpp", l->vpp);
  cJSON_AddNumberToObject(o, "batch", (double)l->model.batch);
  cJSON_AddNumberToObject(o, "seq", (double)l->model.seq);
  cJSON_AddNumberToObject(o, "vocab", (double)l->model.vocab);
  /* Microbatches per step: the schedule's with pipeline stages; else the
   * runtime's default --global-batch (batch x d: one). */
  cJSON_AddNumberToObject(o, "microbatches", l->programs[0].table ? l->programs[0].microbatches : 1);
  cJSON_AddItemToObject(o, "programs", L.programs ? L.programs : cJSON_CreateArray());
  L.programs = NULL;
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  reset();
  if (!text) die("out of memory");
  const char *path = ir_fmt("%s/kernels.json", l->opt->out_dir);
  FILE *f = fopen(path, "w");
  bool ok = f && fprintf(f, "%s\n", text) >= 0;
  if (f && fclose(f) != 0) ok = false;
  cJSON_free(text);
  if (!ok) ir_error((IrLoc){path, 0, 0}, "cannot write: %s", strerror(errno));
  return ok;
}
