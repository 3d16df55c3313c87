/* `shardc info`: exact parameter counts (by kind and per layer) and model
 * FLOPs per token, computed from the folded and shape-inferred graph, so
 * they hold for any model written in the language, not only the bundled
 * ones. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

static const DrvOption info_options[] = {
    DRV_DEFINE_OPTION,
    {"--json", NULL, "print one JSON object instead of text"},
    {"--ep", "E", "also the parameters one rank holds with expert parallelism over E ranks "
                  "(each routed layer's experts / E, the rest whole)"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_info_command = {
    "info", "MODEL [-D NAME=VALUE]... [--json]",
    "parameter counts, parameters per kind and per layer, and model FLOPs per token",
    "FLOPs count every matrix multiply (2 per multiply-add) and the two\n"
    "attention products (4*b*s*s*h per layer, without the causal halving, as\n"
    "Narayanan et al. count them); a training step is 3x the forward. A routed\n"
    "layer counts its experts' products over the rows it routes (k per token),\n"
    "and `active per token` its k of E experts' weights.",
    info_options, drv_cmd_info};

/* What a parameter is for, judged from the ops that read it. */
typedef enum Kind {
  K_EMBEDDING, K_ATTENTION, K_MLP, K_NORM, K_OUTPUT, K_ROUTER, K_EXPERTS, K_OTHER, K_COUNT
} Kind;
static const char *const kind_names[K_COUNT] = {"embedding", "attention", "mlp",     "norm",
                                                "output",    "router",    "experts", "other"};

/* Ops that move or rescale values without mixing positions: attention
 * projections reach the attention op through them. This and
 * is_attention_op are shardc info's pattern for telling attention
 * parameters from MLP ones, not properties of the ops (gelu is as
 * elementwise as scale but marks an MLP), so they stay here rather than in
 * ops.def. */
static bool transparent(IrOp op) {
  switch (op) {
  case IR_OP_SPLIT: case IR_OP_ROPE: case IR_OP_RESHAPE: case IR_OP_SPLIT_HEADS:
  case IR_OP_MERGE_HEADS: case IR_OP_TRANSPOSE: case IR_OP_SCALE: case IR_OP_DROPOUT:
    return true;
  default:
    return false;
  }
}

static bool is_attention_op(const IrNode *n) {
  return n->op == IR_OP_ATTENTION || n->op == IR_OP_SOFTMAX || n->op == IR_OP_CAUSAL_MASK;
}

/* Does value v reach an attention op (or a hand-written softmax) through
 * transparent ops or a single matmul (q k^T)? `depth` bounds the walk. */
static bool reaches_attention(const IrGraph *g, const IrValue *v, int depth) {
  if (depth > 8) return false;
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) {
      if (n->in[j] != v) continue;
      if (is_attention_op(n)) return true;
      if (transparent(n->op) || (n->op == IR_OP_MATMUL && depth < 8))
        for (int k = 0; k < n->nout; k++)
          if (reaches_attention(g, n->out[k], depth + 1)) return true;
    }
  }
  return false;
}

/* Does value v come out of an attention op through transparent ops? */
static bool comes_from_attention(const IrValue *v, int depth) {
  for (; v && v->kind == IR_VAL_NODE && depth < 8; depth++) {
    const IrNode *n = v->def;
    if (n->op == IR_OP_ATTENTION) return true;
    if (n->op == IR_OP_MATMUL && n->nin == 2 && n->in[0]->kind == IR_VAL_NODE &&
        is_attention_op(n->in[0]->def))
      return true;
    if (!transparent(n->op)) return false;
    v = n->in[0];
  }
  return false;
}

static bool reaches_loss(const IrGraph *g, const IrValue *v) {
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (n->op == IR_OP_CROSS_ENTROPY && n->in[0] == v) return true;
  }
  return false;
}

static bool reaches_router(const IrGraph *g, const IrValue *v) {
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if ((n->op == IR_OP_ROUTER || n->op == IR_OP_ROUTER_LOAD) && n->in[0] == v) return true;
  }
  return false;
}

/* The share of a routed layer's expert weights p that each token uses:
 * k / E, with k the choices per token (the dispatch's experts [..., k])
 * and E the experts; 1 for any other parameter. */
static double active_share(const IrGraph *g, const IrValue *p) {
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (n->op != IR_OP_GROUPED_LINEAR || n->in[1] != p) continue;
    const IrValue *counts = n->in[2];
    if (counts->kind != IR_VAL_NODE || counts->def->op != IR_OP_MOE_DISPATCH) return 1;
    const IrType *ex = &counts->def->in[1]->type;
    return (double)ex->shape[ex->rank - 1] / (double)ir_type_numel(&counts->type);
  }
  return 1;
}

static Kind classify(const IrGraph *g, const IrValue *p) {
  Kind k = K_OTHER;
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    for (int j = 0; j < n->nin; j++) {
      if (n->in[j] != p) continue;
      if (n->op == IR_OP_EMBEDDING) return K_EMBEDDING; /* tied tables count here */
      if (n->op == IR_OP_LAYERNORM || n->op == IR_OP_RMSNORM) return K_NORM;
      if (n->op == IR_OP_GROUPED_LINEAR) return K_EXPERTS;
      if (n->op == IR_OP_LINEAR || n->op == IR_OP_MATMUL) {
        if (reaches_router(g, n->out[0]))
          k = K_ROUTER;
        else if (reaches_attention(g, n->out[0], 0) || comes_from_attention(n->in[0], 0))
          k = K_ATTENTION;
        else if (reaches_loss(g, n->out[0]))
          k = K_OUTPUT;
        else
          k = K_MLP;
      }
    }
  }
  return k;
}

/* With --ep E: the first expert weight (at any depth) whose experts E
 * does not divide, else NULL. Its leading dim is the experts
 * ([experts, ...], docs/language.md). */
static const IrValue *ep_misfit(const IrGraph *g, int64_t E) {
  for (int i = 0; i < g->params.len; i++) {
    const IrValue *p = g->params.items[i];
    if (classify(g, p) == K_EXPERTS && p->type.shape[0] % E) return p;
  }
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    const IrValue *p = n->op == IR_OP_REPEAT ? ep_misfit(n->body, E) : NULL;
    if (p) return p;
  }
  return NULL;
}

typedef struct Counts {
  int64_t total;
  double active;        /* the parameters one token uses: a routed layer's k of E experts */
  int64_t by_kind[K_COUNT];
  double forward_flops; /* per forward pass of one microbatch */
  int64_t tokens;       /* positions per forward pass */
  cJSON *layers;        /* one object per repeat region */
} Counts;

static void count_graph(const IrGraph *g, int64_t mult, Counts *c, int64_t *own) {
  for (int i = 0; i < g->params.len; i++) {
    const IrValue *p = g->params.items[i];
    int64_t n = ir_type_numel(&p->type);
    c->total += n * mult;
    c->active += (double)(n * mult) * active_share(g, p);
    c->by_kind[classify(g, p)] += n * mult;
    if (own) *own += n;
  }
  for (int i = 0; i < g->nodes.len; i++) {
    const IrNode *n = g->nodes.items[i];
    if (n->op == IR_OP_CROSS_ENTROPY && c->tokens == 0)
      c->tokens = ir_type_numel(&n->in[1]->type);
    if (n->op != IR_OP_REPEAT) {
      /* Only the forward counts: model FLOPs are 3x the forward by definition. */
      if (n->phase == IR_PHASE_FORWARD) c->forward_flops += ir_op_info(n->op)->flops(n) * (double)mult;
      continue;
    }
    int64_t count = ir_attr_int(n, "count"), per = 0;
    Counts inner = {0};
    count_graph(n->body, 1, &inner, &per);
    count_graph(n->body, mult * count, c, NULL);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", n->label);
    cJSON_AddNumberToObject(o, "count", (double)count);
    cJSON_AddNumberToObject(o, "parameters_per_layer", (double)per);
    cJSON *kinds = cJSON_AddObjectToObject(o, "by_kind");
    for (int k = 0; k < K_COUNT; k++)
      if (inner.by_kind[k]) cJSON_AddNumberToObject(kinds, kind_names[k], (double)inner.by_kind[k]);
    cJSON_AddItemToArray(c->layers, o);
  }
}

/* 1234567 -> "1,234,567" */
static const char *commas(int64_t v) {
  char digits[32], *out = ir_alloc(48);
  snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
  int len = (int)strlen(digits), o = 0;
  if (v < 0) out[o++] = '-';
  for (int i = 0; i < len; i++) {
    if (i && (len - i) % 3 == 0) out[o++] = ',';
    out[o++] = digits[i];
  }
  return out;
}

static bool config_int(IrGraph *g, const char *name, int64_t *v) {
  IrConfig *c = ir_find_config(g, name);
  if (!c || c->expr->kind != IR_EX_INT) return false;
  *v = c->expr->i;
  return true;
}

/* "12 layers, hidden 768, 12 heads, ..." from whichever of the standard
 * names the model defines. */
static const char *shape_summary(IrGraph *g) {
  static const char *const names[] = {"layers", "hidden", "heads", "kv_heads",
                                      "ffn",    "vocab",  "seq"};
  char *s = "";
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int64_t v;
    if (!config_int(g, names[i], &v)) continue;
    s = ir_fmt("%s%s%s %lld", s, *s ? ", " : "", names[i], (long long)v);
  }
  return s;
}

/* The parameters one expert rank holds under --ep E. */
static int64_t per_expert_rank(const Counts *c, int64_t E) {
  return c->total - c->by_kind[K_EXPERTS] + c->by_kind[K_EXPERTS] / E;
}

static void print_text(IrGraph *g, const Counts *c, int64_t E) {
  printf("%s: %s\n", g->name, shape_summary(g));
  printf("parameters            %15s\n", commas(c->total));
  if ((int64_t)c->active != c->total)
    printf("active per token      %15s  (a routed layer's top-k of its experts)\n",
           commas((int64_t)c->active));
  if (E > 1)
    printf("per rank at --ep %-4lld %15s  (each routed layer's experts / %lld, the rest whole)\n",
           (long long)E, commas(per_expert_rank(c, E)), (long long)E);
  for (int k = 0; k < K_COUNT; k++)
    if (c->by_kind[k])
      printf("  %-19s %15s  %5.1f%%\n", kind_names[k], commas(c->by_kind[k]),
             100.0 * (double)c->by_kind[k] / (double)c->total);
  for (int i = 0; i < cJSON_GetArraySize(c->layers); i++) {
    cJSON *o = cJSON_GetArrayItem(c->layers, i);
    printf("per layer (%s.*, %d layers) %9s\n", cJSON_GetObjectItem(o, "name")->valuestring,
           cJSON_GetObjectItem(o, "count")->valueint,
           commas((int64_t)cJSON_GetObjectItem(o, "parameters_per_layer")->valuedouble));
    cJSON *kind;
    cJSON_ArrayForEach(kind, cJSON_GetObjectItem(o, "by_kind"))
      printf("  %-19s %15s\n", kind->string, commas((int64_t)kind->valuedouble));
  }
  double per_token = c->tokens ? 3.0 * c->forward_flops / (double)c->tokens : 0;
  printf("model FLOPs per token %15.6g  (forward %.6g, backward 2x forward)\n", per_token,
         per_token / 3.0);
}

int drv_cmd_info(int nargs, DrvArg *args) {
  const char *model = drv_model_arg(&drv_info_command, nargs, args);
  if (!model) return 1;
  IrGraph *g = drv_load_and_check(model, nargs, args);
  if (!g) return 1;
  const char *ep_s = drv_value(nargs, args, "--ep");
  char *end = NULL;
  long long E = ep_s ? strtoll(ep_s, &end, 10) : 1;
  if (ep_s && (!*ep_s || *end || E < 1 || E > (1 << 20)))
    return drv_usage_error(&drv_info_command, "--ep: expected a positive integer, got '%s'", ep_s);
  Counts c = {.layers = cJSON_CreateArray()};
  count_graph(g, 1, &c, NULL);
  const IrValue *misfit = E > 1 ? ep_misfit(g, E) : NULL;
  if (E > 1 && !c.by_kind[K_EXPERTS])
    return drv_usage_error(&drv_info_command, "--ep %lld: the model has no routed layer whose "
                           "experts it could place", E);
  if (misfit) {
    ir_error(misfit->loc, "--ep %lld must divide the %lld experts of %s", E,
             (long long)misfit->type.shape[0], misfit->name);
    cJSON_Delete(c.layers);
    return 1;
  }
  if (!drv_flag(nargs, args, "--json")) {
    print_text(g, &c, E);
    cJSON_Delete(c.layers);
    return 0;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", g->name);
  cJSON_AddNumberToObject(o, "parameters", (double)c.total);
  cJSON_AddNumberToObject(o, "active_parameters", (double)(int64_t)c.active);
  if (E > 1) {
    cJSON_AddNumberToObject(o, "ep", (double)E);
    cJSON_AddNumberToObject(o, "parameters_per_expert_rank", (double)per_expert_rank(&c, E));
  }
  cJSON *kinds = cJSON_AddObjectToObject(o, "parameters_by_kind");
  for (int k = 0; k < K_COUNT; k++)
    if (c.by_kind[k]) cJSON_AddNumberToObject(kinds, kind_names[k], (double)c.by_kind[k]);
  cJSON_AddItemToObject(o, "layers", c.layers);
  double per_token = c.tokens ? 3.0 * c.forward_flops / (double)c.tokens : 0;
  cJSON_AddNumberToObject(o, "flops_per_token", per_token);
  cJSON_AddNumberToObject(o, "forward_flops_per_token", per_token / 3.0);
  cJSON_AddNumberToObject(o, "tokens_per_forward", (double)c.tokens);
  cJSON *config = cJSON_AddObjectToObject(o, "config");
  for (int i = 0; i < g->configs.len; i++) {
    IrConfig *cf = g->configs.items[i];
    cJSON_AddNumberToObject(config, cf->name,
                            cf->expr->kind == IR_EX_INT ? (double)cf->expr->i : cf->expr->f);
  }
  char *text = cJSON_Print(o);
  printf("%s\n", text);
  free(text);
  cJSON_Delete(o);
  return 0;
}
