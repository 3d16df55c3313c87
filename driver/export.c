/* `shardc export --hf OUT CHECKPOINT_DIR`: a checkpoint's weights as a
 * Hugging Face model folder that transformers' from_pretrained loads:
 * OUT/config.json and OUT/model.safetensors (or, with --shard-bytes, the
 * numbered files and their model.safetensors.index.json).
 *
 * A model file names its parameters as Hugging Face does less the base
 * model's prefix; what else differs between models is data, one row of
 * `hf_models` each: the architecture, the prefix and the names outside it,
 * and which config value becomes which key of config.json. A model with
 * no row is refused with the list of those that have one. The tensors'
 * bytes are copied as they are (the checkpoint's F32 or F64). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"

/* One key of config.json: a config value of the model (an int or a
 * float), or a constant. */
typedef enum { K_INT, K_FLOAT, K_STR, K_BOOL } HfKind;
typedef struct HfKey {
  const char *key;
  HfKind kind;
  const char *value; /* the config name (K_INT, K_FLOAT), or the constant */
} HfKey;

typedef struct HfModel {
  const char *model;        /* the model file's `model NAME` */
  const char *architecture; /* config.json's "architectures" */
  const char *model_type;
  const char *prefix;       /* before every tensor name but those of `outside` */
  const char *outside[4];
  HfKey config[24];
  /* Names that start with groups[i][0] take the prefix groups[i][1]
   * instead (BERT keeps its layers under `bert.encoder.` and its head
   * outside the base model); a dot-separated word words[i][0] of a name is
   * spelled words[i][1] (a word the language keeps for itself). */
  const char *groups[4][2];
  const char *words[2][2];
  /* A word after which Hugging Face numbers its experts: a parameter of
   * ours with that word and a leading expert dimension
   * (`layers.0.block_sparse_moe.experts.w1.weight` [E, ffn, hidden])
   * goes out as E tensors (`...experts.0.w1.weight`, ...). */
  const char *stacked;
} HfModel;

/* GPT-2 (GPT2LMHeadModel): the output layer is the tied embedding, which
 * from_pretrained ties again. LLaMA (LlamaForCausalLM): an output layer
 * of its own, lm_head, outside the base model. GPT-NeoX
 * (GPTNeoXForCausalLM): its own output layer, embed_out, likewise. BERT
 * (BertForMaskedLM): embeddings under `bert.`, layers under
 * `bert.encoder.`, the masked-LM head `cls.` outside, and `out` spelled
 * `output`; the decoder is the tied word embedding, which from_pretrained
 * ties again, and its bias is cls.predictions.bias. */
static const HfModel hf_models[] = {
    {"gpt2", "GPT2LMHeadModel", "gpt2", "transformer.", {NULL},
     {{"vocab_size", K_INT, "vocab"},
      {"n_positions", K_INT, "seq"},
      {"n_ctx", K_INT, "seq"},
      {"n_embd", K_INT, "hidden"},
      {"n_layer", K_INT, "layers"},
      {"n_head", K_INT, "heads"},
      {"n_inner", K_INT, "ffn"},
      {"layer_norm_epsilon", K_FLOAT, "eps"},
      {"resid_pdrop", K_FLOAT, "dropout_rate"},
      {"embd_pdrop", K_FLOAT, "dropout_rate"},
      {"attn_pdrop", K_FLOAT, "dropout_rate"},
      {"initializer_range", K_FLOAT, "init_std"},
      {"activation_function", K_STR, "gelu_new"},
      {"tie_word_embeddings", K_BOOL, "true"},
      {"torch_dtype", K_STR, "float32"}},
     {{NULL}},
     {{NULL}},
     NULL},
    {"llama", "LlamaForCausalLM", "llama", "model.", {"lm_head.weight"},
     {{"vocab_size", K_INT, "vocab"},
      {"hidden_size", K_INT, "hidden"},
      {"intermediate_size", K_INT, "ffn"},
      {"num_hidden_layers", K_INT, "layers"},
      {"num_attention_heads", K_INT, "heads"},
      {"num_key_value_heads", K_INT, "kv_heads"},
      {"max_position_embeddings", K_INT, "seq"},
      {"rms_norm_eps", K_FLOAT, "eps"},
      {"rope_theta", K_FLOAT, "theta"},
      {"initializer_range", K_FLOAT, "init_std"},
      {"hidden_act", K_STR, "silu"},
      {"attention_bias", K_BOOL, "false"},
      {"tie_word_embeddings", K_BOOL, "false"},
      {"torch_dtype", K_STR, "float32"}},
     {{NULL}},
     {{NULL}},
     NULL},
    {"neox", "GPTNeoXForCausalLM", "gpt_neox", "gpt_neox.", {"embed_out.weight"},
     {{"vocab_size", K_INT, "vocab"},
      {"hidden_size", K_INT, "hidden"},
      {"intermediate_size", K_INT, "ffn"},
      {"num_hidden_layers", K_INT, "layers"},
      {"num_attention_heads", K_INT, "heads"},
      {"max_position_embeddings", K_INT, "seq"},
      {"rotary_pct", K_FLOAT, "rotary_pct"},
      {"rotary_emb_base", K_FLOAT, "theta"},
      {"layer_norm_eps", K_FLOAT, "eps"},
      {"initializer_range", K_FLOAT, "init_std"},
      {"use_parallel_residual", K_BOOL, "true"},
      {"hidden_act", K_STR, "gelu"},
      {"tie_word_embeddings", K_BOOL, "false"},
      {"torch_dtype", K_STR, "float32"}},
     {{NULL}},
     {{NULL}},
     NULL},
    {"bert", "BertForMaskedLM", "bert", "bert.", {NULL},
     {{"vocab_size", K_INT, "vocab"},
      {"hidden_size", K_INT, "hidden"},
      {"intermediate_size", K_INT, "ffn"},
      {"num_hidden_layers", K_INT, "layers"},
      {"num_attention_heads", K_INT, "heads"},
      {"max_position_embeddings", K_INT, "seq"},
      {"layer_norm_eps", K_FLOAT, "eps"},
      {"initializer_range", K_FLOAT, "init_std"},
      {"hidden_act", K_STR, "gelu"},
      {"position_embedding_type", K_STR, "absolute"},
      {"tie_word_embeddings", K_BOOL, "true"},
      {"torch_dtype", K_STR, "float32"}},
     {{"layer.", "bert.encoder."}, {"cls.", ""}},
     {{"out", "output"}},
     NULL},
    /* Mixtral (MixtralForCausalLM): LLaMA's names and lm_head, each
     * expert a tensor of its own; output_router_logits so that HF's loss
     * adds the load-balancing loss as ours does. */
    {"mixtral", "MixtralForCausalLM", "mixtral", "model.", {"lm_head.weight"},
     {{"vocab_size", K_INT, "vocab"},
      {"hidden_size", K_INT, "hidden"},
      {"intermediate_size", K_INT, "ffn"},
      {"num_hidden_layers", K_INT, "layers"},
      {"num_attention_heads", K_INT, "heads"},
      {"num_key_value_heads", K_INT, "kv_heads"},
      {"max_position_embeddings", K_INT, "seq"},
      {"num_local_experts", K_INT, "experts"},
      {"num_experts_per_tok", K_INT, "top_k"},
      {"router_aux_loss_coef", K_FLOAT, "router_aux_loss_coef"},
      {"output_router_logits", K_BOOL, "true"},
      {"rms_norm_eps", K_FLOAT, "eps"},
      {"rope_theta", K_FLOAT, "theta"},
      {"initializer_range", K_FLOAT, "init_std"},
      {"hidden_act", K_STR, "silu"},
      {"tie_word_embeddings", K_BOOL, "false"},
      {"torch_dtype", K_STR, "float32"}},
     {{NULL}},
     {{NULL}},
     "experts"},
};
enum { NMODELS = sizeof hf_models / sizeof hf_models[0] };

static const DrvOption export_options[] = {
    {"--hf", "OUT", "the Hugging Face model folder to write (required)"},
    {"--shard-bytes", "N", "split the weights into files of at most about N bytes, with an index"},
    {NULL, NULL, NULL},
};

const DrvCommand drv_export_command = {
    "export", "CHECKPOINT_DIR --hf OUT [--shard-bytes N]",
    "write a checkpoint as a Hugging Face model folder (config.json, safetensors)",
    "Reads CHECKPOINT_DIR/model.safetensors (a folder of --keep-last: the one\n"
    "its `latest` names) and writes OUT/config.json and OUT/model.safetensors\n"
    "under Hugging Face's names, so that transformers' from_pretrained(OUT)\n"
    "loads them. The model's config values (with the checkpoint's -D values)\n"
    "give config.json. Known models: gpt2, llama, neox, bert, mixtral (whose\n"
    "stacked experts go out one tensor each, as Hugging Face keeps them). With --shard-bytes N the\n"
    "weights go into model-00001-of-0000K.safetensors, ... of about N bytes\n"
    "each and model.safetensors.index.json. Files are written to a temporary\n"
    "name and renamed. `--init-from OUT` reads such a folder back.",
    export_options, drv_cmd_export};

static int fail(const char *path, const char *fmt, const char *arg) {
  fprintf(stderr, "shardc export: error: %s: ", path);
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  return 1;
}

/* ------------------------------------------------------------ reading */

typedef struct Tensor {
  const char *name, *dtype; /* the checkpoint's name */
  cJSON *shape;
  int64_t begin, end;
} Tensor;

typedef struct Ckpt {
  const char *path;
  FILE *f;
  int64_t data_start;
  cJSON *header, *meta;
  Tensor *t;
  int n;
} Ckpt;

static int by_offset(const void *a, const void *b) {
  const Tensor *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Reads and checks the header of a checkpoint's model.safetensors. */
static bool ckpt_open(Ckpt *c, const char *path) {
  *c = (Ckpt){.path = path};
  c->f = fopen(path, "rb");
  if (!c->f) return fail(path, "%s", strerror(errno)) == 0;
  unsigned char len8[8];
  uint64_t len = 0;
  if (fread(len8, 1, 8, c->f) != 8) return fail(path, "%s", "too short for a safetensors file") == 0;
  for (int i = 7; i >= 0; i--) len = len << 8 | len8[i];
  struct stat st;
  if (fstat(fileno(c->f), &st) != 0 || len > (100u << 20) || len > (uint64_t)st.st_size - 8)
    return fail(path, "%s", "not a safetensors file (bad header length)") == 0;
  char *text = ir_alloc(len + 1);
  if (fread(text, 1, len, c->f) != len) return fail(path, "%s", "truncated header") == 0;
  text[len] = 0;
  c->data_start = 8 + (int64_t)len;
  c->header = cJSON_ParseWithLength(text, len);
  if (!cJSON_IsObject(c->header)) return fail(path, "%s", "the header is not a JSON object") == 0;
  c->meta = cJSON_GetObjectItemCaseSensitive(c->header, "__metadata__");
  c->t = ir_alloc(sizeof(Tensor) * (size_t)(cJSON_GetArraySize(c->header) + 1));
  int64_t data = (int64_t)st.st_size - c->data_start;
  for (cJSON *j = c->header->child; j; j = j->next) {
    if (j == c->meta) continue;
    cJSON *dtype = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    Tensor *t = &c->t[c->n++];
    *t = (Tensor){j->string, cJSON_IsString(dtype) ? dtype->valuestring : NULL,
                  cJSON_GetObjectItemCaseSensitive(j, "shape"), -1, -1};
    if (cJSON_GetArraySize(off) == 2 && cJSON_IsNumber(off->child) && cJSON_IsNumber(off->child->next))
      t->begin = (int64_t)off->child->valuedouble, t->end = (int64_t)off->child->next->valuedouble;
    if (!t->dtype || !cJSON_IsArray(t->shape) || t->begin < 0 || t->end < t->begin || t->end > data)
      return fail(path, "tensor %s: a bad entry in the header", t->name) == 0;
  }
  qsort(c->t, (size_t)c->n, sizeof *c->t, by_offset);
  return true;
}

/* The stacked experts of c as Hugging Face's one tensor per expert: a
 * tensor whose name holds the row's word `stacked` between two others
 * and whose shape has 2 dims or more becomes shape[0] tensors of
 * shape[1:], its bytes cut in as many equal runs, the index after the
 * word. Their order (by offset) is kept. */
static void split_stacked(Ckpt *c, const HfModel *hm) {
  if (!hm->stacked) return;
  const char *word = ir_fmt(".%s.", hm->stacked);
  int n = 0;
  for (int i = 0; i < c->n; i++) {
    cJSON *sh = c->t[i].shape;
    n += strstr(c->t[i].name, word) && cJSON_GetArraySize(sh) >= 2 ? (int)sh->child->valuedouble : 1;
  }
  Tensor *out = ir_alloc(sizeof(Tensor) * (size_t)(n + 1));
  int k = 0;
  for (int i = 0; i < c->n; i++) {
    const Tensor *t = &c->t[i];
    const char *at = strstr(t->name, word);
    if (!at || cJSON_GetArraySize(t->shape) < 2) {
      out[k++] = *t;
      continue;
    }
    int E = (int)t->shape->child->valuedouble;
    cJSON *piece = cJSON_Duplicate(t->shape, 1);
    cJSON_DeleteItemFromArray(piece, 0);
    cJSON_AddItemToObject(c->header, ir_fmt("%s (a piece)", t->name), piece); /* freed with it */
    int64_t bytes = E > 0 ? (t->end - t->begin) / E : 0;
    size_t head = (size_t)(at - t->name) + strlen(word) - 1;
    for (int e = 0; e < E; e++)
      out[k++] = (Tensor){ir_fmt("%.*s.%d%s", (int)head, t->name, e, t->name + head), t->dtype, piece,
                          t->begin + e * bytes, t->begin + (e + 1) * bytes};
  }
  c->t = out;
  c->n = k;
}

static const char *meta_of(const Ckpt *c, const char *key) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(c->meta, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ------------------------------------------------------------ config.json */

static bool config_value(IrGraph *g, const HfKey *k, cJSON *out, const char *source) {
  if (k->kind == K_STR) return cJSON_AddStringToObject(out, k->key, k->value), true;
  if (k->kind == K_BOOL) return cJSON_AddBoolToObject(out, k->key, !strcmp(k->value, "true")), true;
  IrConfig *c = ir_find_config(g, k->value);
  if (!c || !ir_expr_is_literal(c->expr)) {
    fprintf(stderr, "shardc export: error: %s: the model has no config value '%s' for config.json's "
            "\"%s\"\n", source, k->value, k->key);
    return false;
  }
  double v = c->expr->kind == IR_EX_INT ? (double)c->expr->i : c->expr->f;
  if (k->kind == K_INT) cJSON_AddNumberToObject(out, k->key, (double)(int64_t)v);
  else cJSON_AddNumberToObject(out, k->key, v);
  return true;
}

static char *config_json(IrGraph *g, const HfModel *hm, const char *source) {
  cJSON *root = cJSON_CreateObject();
  cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString(hm->architecture));
  cJSON_AddStringToObject(root, "model_type", hm->model_type);
  bool ok = true;
  for (int i = 0; i < 24 && hm->config[i].key; i++) ok = config_value(g, &hm->config[i], root, source) && ok;
  char *text = ok ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return NULL;
  char *copy = ir_fmt("%s\n", text);
  free(text);
  return copy;
}

/* ------------------------------------------------------------ writing */

/* `name` with the row's word spellings: each dot-separated word that is
 * words[i][0] becomes words[i][1]. */
static const char *hf_words(const HfModel *hm, const char *name) {
  if (!hm->words[0][0]) return name;
  const char *out = "";
  for (const char *p = name; *p;) {
    size_t n = strcspn(p, ".");
    const char *w = ir_fmt("%.*s", (int)n, p);
    for (int i = 0; i < 2 && hm->words[i][0]; i++)
      if (!strcmp(w, hm->words[i][0])) w = hm->words[i][1];
    out = ir_fmt("%s%s%s", out, *out ? "." : "", w);
    p += n + (p[n] == '.');
  }
  return out;
}

static const char *hf_name(const HfModel *hm, const char *name) {
  for (int i = 0; i < 4 && hm->outside[i]; i++)
    if (!strcmp(hm->outside[i], name)) return name;
  const char *prefix = hm->prefix;
  for (int i = 0; i < 4 && hm->groups[i][0]; i++)
    if (!strncmp(name, hm->groups[i][0], strlen(hm->groups[i][0]))) {
      prefix = hm->groups[i][1];
      break;
    }
  return ir_fmt("%s%s", prefix, hf_words(hm, name));
}

/* The temporary a file is written to before its rename, and the end of
 * writing: flushed, synced, closed and renamed, or removed. */
static FILE *open_tmp(const char *path, const char **tmp) {
  *tmp = ir_fmt("%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(*tmp, "wb");
  if (!f) fail(*tmp, "%s", strerror(errno));
  return f;
}

static bool close_tmp(FILE *f, const char *tmp, const char *path, bool ok) {
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return fail(path, "%s", strerror(err)) == 0;
  }
  return true;
}

/* Writes text (len bytes) to path through a temporary and a rename. */
static bool write_file(const char *path, const void *text, size_t len) {
  const char *tmp;
  FILE *f = open_tmp(path, &tmp);
  return f && close_tmp(f, tmp, path, fwrite(text, 1, len, f) == len);
}

/* One safetensors file of tensors c->t[from, to), under their HF names,
 * with the metadata "format": "pt" that from_pretrained requires. The
 * tensors' bytes are copied a chunk at a time: a model need not fit in
 * memory. */
static bool write_part(const Ckpt *c, const HfModel *hm, int from, int to, const char *path) {
  cJSON *h = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "pt");
  int64_t at = 0;
  for (int i = from; i < to; i++) {
    const Tensor *t = &c->t[i];
    cJSON *e = cJSON_AddObjectToObject(h, hf_name(hm, t->name));
    cJSON_AddStringToObject(e, "dtype", t->dtype);
    cJSON_AddItemToObject(e, "shape", cJSON_Duplicate(t->shape, 1));
    cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(at += t->end - t->begin)));
  }
  char *json = cJSON_PrintUnformatted(h);
  cJSON_Delete(h);
  /* The header is padded with spaces to 8 bytes, as safetensors writes it. */
  size_t hl = strlen(json), padded = (hl + 7) / 8 * 8;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  const char *tmp;
  FILE *f = open_tmp(path, &tmp);
  if (!f) return free(json), false;
  bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, hl, f) == hl;
  for (size_t k = hl; ok && k < padded; k++) ok = fputc(' ', f) != EOF;
  free(json);
  enum { CHUNK = 1 << 20 };
  unsigned char *buf = malloc(CHUNK);
  if (!buf) die("out of memory exporting %s", path);
  bool read_ok = true;
  for (int i = from; i < to && ok && read_ok; i++) {
    const Tensor *t = &c->t[i];
    read_ok = fseeko(c->f, (off_t)(c->data_start + t->begin), SEEK_SET) == 0;
    for (int64_t left = t->end - t->begin; left > 0 && ok && read_ok;) {
      size_t n = (size_t)(left < CHUNK ? left : CHUNK);
      read_ok = fread(buf, 1, n, c->f) == n;
      ok = read_ok && fwrite(buf, 1, n, f) == n;
      left -= (int64_t)n;
    }
  }
  free(buf);
  if (!read_ok) {
    fclose(f);
    unlink(tmp);
    return fail(c->path, "%s", "truncated tensor data") == 0;
  }
  return close_tmp(f, tmp, path, ok);
}

/* The parts of about `limit` bytes each (a tensor larger than the limit
 * has a file of its own), their index, or one file. */
static bool write_weights(const Ckpt *c, const HfModel *hm, const char *out, int64_t limit) {
  if (limit <= 0) return write_part(c, hm, 0, c->n, ir_fmt("%s/model.safetensors", out));
  int *start = ir_alloc(sizeof(int) * (size_t)(c->n + 2));
  int parts = 0;
  int64_t size = 0;
  for (int i = 0; i < c->n; i++) {
    int64_t b = c->t[i].end - c->t[i].begin;
    if (i == 0 || size + b > limit) start[parts++] = i, size = 0;
    size += b;
  }
  start[parts] = c->n;
  cJSON *index = cJSON_CreateObject(), *map = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
  int64_t total = 0;
  bool ok = true;
  for (int k = 0; k < parts && ok; k++) {
    const char *file = ir_fmt("model-%05d-of-%05d.safetensors", k + 1, parts);
    for (int i = start[k]; i < start[k + 1]; i++) {
      cJSON_AddStringToObject(map, hf_name(hm, c->t[i].name), file);
      total += c->t[i].end - c->t[i].begin;
    }
    ok = write_part(c, hm, start[k], start[k + 1], ir_fmt("%s/%s", out, file));
  }
  cJSON_AddNumberToObject(meta, "total_size", (double)total);
  cJSON_AddItemToObject(index, "weight_map", map);
  char *text = cJSON_Print(index);
  cJSON_Delete(index);
  ok = ok && write_file(ir_fmt("%s/model.safetensors.index.json", out), text, strlen(text));
  free(text);
  if (ok) printf("wrote %d parts of at most about %lld bytes\n", parts, (long long)limit);
  return ok;
}

/* The folder a checkpoint directory's `latest` names, or the folder. */
static const char *resolve(const char *dir) {
  size_t len;
  const char *latest = ir_fmt("%s/latest", dir);
  if (access(latest, R_OK) != 0) return dir;
  char *text = drv_read_file(latest, &len);
  if (!text) return NULL;
  text[strcspn(text, "\r\n")] = 0;
  return ir_fmt("%s/%s", dir, text);
}

int drv_cmd_export(int nargs, DrvArg *args) {
  const DrvCommand *cmd = &drv_export_command;
  const char *dir = drv_model_arg(cmd, nargs, args);
  const char *out = drv_value(nargs, args, "--hf");
  const char *shard_s = drv_value(nargs, args, "--shard-bytes");
  if (!dir) return 1;
  if (!out) return drv_usage_error(cmd, "no output folder given (--hf OUT)");
  long long limit = 0;
  char *end;
  if (shard_s && ((limit = strtoll(shard_s, &end, 10)), *end || end == shard_s || limit < 1))
    return drv_usage_error(cmd, "--shard-bytes: expected a byte count >= 1, got '%s'", shard_s);
  if (!(dir = resolve(dir))) return 1;
  Ckpt c;
  const char *weights = ir_fmt("%s/model.safetensors", dir);
  bool ok = ckpt_open(&c, weights);
  const char *model = ok ? meta_of(&c, "model") : NULL, *source = ok ? meta_of(&c, "source") : NULL;
  if (ok && (!model || !source)) ok = fail(weights, "%s", "not a checkpoint written by --save (no model name or source in its metadata)") == 0;
  const HfModel *hm = NULL;
  for (int i = 0; ok && i < NMODELS; i++)
    if (!strcmp(hf_models[i].model, model)) hm = &hf_models[i];
  if (ok && !hm) {
    const char *known = "";
    for (int i = 0; i < NMODELS; i++) known = ir_fmt("%s%s%s", known, i ? ", " : "", hf_models[i].model);
    fprintf(stderr, "shardc export: error: %s: model '%s' has no Hugging Face description (known: %s; "
            "driver/export.c's hf_models says how one is added)\n", weights, model, known);
    ok = false;
  }
  /* The model as the checkpoint's run compiled it: its -D values. */
  IrGraph *g = NULL;
  if (ok) {
    static const DrvOption define = DRV_DEFINE_OPTION;
    const char *defines = meta_of(&c, "defines");
    DrvArg *margs = ir_alloc(sizeof(DrvArg) * 256);
    int nm = 0;
    for (char *d = ir_strdup(defines ? defines : ""), *tok; (tok = strtok(d, " ")); d = NULL)
      if (nm < 256) margs[nm++] = (DrvArg){&define, tok, -1};
    ok = (g = drv_load_and_check(source, nm, margs)) != NULL;
  }
  if (ok) split_stacked(&c, hm);
  char *config = ok ? config_json(g, hm, source) : NULL;
  ok = ok && config;
  if (ok && mkdir(out, 0777) != 0 && errno != EEXIST) ok = fail(out, "%s", strerror(errno)) == 0;
  ok = ok && write_file(ir_fmt("%s/config.json", out), config, strlen(config));
  ok = ok && write_weights(&c, hm, out, limit);
  if (ok) printf("wrote %s: %s (%s), %d tensors\n", out, hm->architecture, model, c.n);
  if (c.f) fclose(c.f);
  cJSON_Delete(c.header);
  return ok ? 0 : 1;
}
