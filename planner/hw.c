/* Hardware descriptions: the presets and the `key = value` file format.
 *
 * A description names one accelerator and the node around it. The
 * numbers are datasheet figures (REFERENCE.md's); the calibration fields
 * say how close real kernels and collectives come to them, and are set
 * once per preset with the reasoning in docs/planner.md. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"
#include "hw.h"

#define T 1e12
#define G 1e9
#define GIB 1073741824.0
#define US 1e-6
#define MIB 1048576.0

/* The calibration of the A100 preset (docs/planner.md): one set of
 * efficiencies fitted to the two calibration rows of REFERENCE.md (1.7B on
 * 32 GPUs, 18.4B on 256), whose attention was the unfused kind of 2021
 * (batched products and a softmax over [b, H, s, s]), hence its low share
 * of peak. File descriptions without calibration keys take these. */
#define CALIBRATION \
  .gemm_eff = 0.77, .gemm_half = 5 * G, .attn_eff = 0.14, .mem_eff = 0.80, .kernel_s = 4 * US, \
  .comm_eff = 0.80
/* What a GPU process holds besides its tensors (docs/planner.md, Memory):
 * the CUDA context with the libraries' kernels loaded, plus cuBLAS's
 * workspace (8 MiB on the A100, 32 MiB on Hopper, PyTorch's defaults);
 * NCCL's buffers per communicator, NCCL_BUFFSIZE's default 4 MiB for each
 * of 16 channels to each of a ring's two neighbours; and 15% of the
 * reserved memory lost to the caching allocator's fragmentation, the
 * average GMLake (Guo et al., ASPLOS 2024) measured over eight LLM
 * trainings on 80 GB A100s. The context: before CUDA 11.7 every kernel
 * of every library was loaded when the context was made, over 1000 MB
 * (pytorch/pytorch#107667); PyTorch 1.8 with CUDA 11.1, the paper's stack
 * (the NGC 20.12 container of Megatron-LM's examples/sc21), shows 1687 MB
 * on an Ampere GPU (pytorch/pytorch#55277). Hopper's presets describe
 * today's stacks, which load kernels lazily: about 0.5 GiB. */
#define GPU_MEMORY(context_mib, ws_mib) \
  .workspace_bytes = ((context_mib) + (ws_mib)) * MIB, .comm_buffer_bytes = 128 * MIB, \
  .fragmentation = 0.15
/* The Hopper presets have no published Megatron rows to fit; their
 * efficiencies are REFERENCE.md's kernel measurements on an H200: an 8192^3
 * bf16 GEMM at 770-800 of 989 TFLOP/s, fused attention (FlashAttention-2)
 * at 335-370, a device copy at 4.3 of 4.8 TB/s. A GEMM needs about three
 * times the work of the A100's to fill the faster chip, so gemm_half
 * scales with the peak. */
#define HOPPER_CALIBRATION \
  .gemm_eff = 0.80, .gemm_half = 15 * G, .attn_eff = 0.35, .mem_eff = 0.85, .kernel_s = 4 * US, \
  .comm_eff = 0.80

const PlHw pl_hw_presets[] = {
    {.name = "a100",
     .doc = "DGX A100 (the paper's cluster): 8 x A100 80GB SXM, NVSwitch, 8 x 200 Gb/s HDR IB",
     .peak_flops = {312 * T, 312 * T, 156 * T, 19.5 * T},
     .mem_bytes = 80 * GIB, .mem_bw = 2039 * G, .gpus_per_node = 8,
     .intra_bw = 300 * G, .intra_lat = 3 * US, .inter_bw = 200 * G, .inter_lat = 8 * US,
     CALIBRATION, GPU_MEMORY(1687, 8), .sms = 108},
    {.name = "h100",
     .doc = "DGX H100: 8 x H100 80GB SXM, NVSwitch, 8 x 400 Gb/s NDR IB",
     .peak_flops = {989 * T, 989 * T, 494 * T, 67 * T},
     .mem_bytes = 80 * GIB, .mem_bw = 3350 * G, .gpus_per_node = 8,
     .intra_bw = 450 * G, .intra_lat = 3 * US, .inter_bw = 400 * G, .inter_lat = 8 * US,
     HOPPER_CALIBRATION, GPU_MEMORY(512, 32), .sms = 132},
    {.name = "h200",
     .doc = "DGX H200: 8 x H200 141GB SXM, NVSwitch, 8 x 400 Gb/s NDR IB",
     .peak_flops = {989 * T, 989 * T, 494 * T, 67 * T},
     .mem_bytes = 141 * GIB, .mem_bw = 4800 * G, .gpus_per_node = 8,
     .intra_bw = 450 * G, .intra_lat = 3 * US, .inter_bw = 400 * G, .inter_lat = 8 * US,
     HOPPER_CALIBRATION, GPU_MEMORY(512, 32), .sms = 132},
    {.name = NULL},
};

const PlHw *pl_hw_find(const char *name) {
  for (const PlHw *h = pl_hw_presets; h->name; h++)
    if (strcmp(h->name, name) == 0) return h;
  return NULL;
}

/* ---------------------------------------------------------- file format */

typedef enum KeyKind { KEY_TEXT, KEY_NUM, KEY_INT, KEY_FRACTION } KeyKind;

/* One key of the file: where it goes and the unit its value is in. */
typedef struct Key {
  const char *name;
  KeyKind kind;
  size_t offset;
  double unit;
  bool required;
} Key;

#define F(field) offsetof(PlHw, field)
static const Key keys[] = {
    {"name", KEY_TEXT, F(name), 0, false},
    {"doc", KEY_TEXT, F(doc), 0, false},
    {"peak_bf16_tflops", KEY_NUM, F(peak_flops[PL_BF16]), T, true},
    {"peak_fp16_tflops", KEY_NUM, F(peak_flops[PL_FP16]), T, false},
    {"peak_tf32_tflops", KEY_NUM, F(peak_flops[PL_TF32]), T, false},
    {"peak_fp32_tflops", KEY_NUM, F(peak_flops[PL_FP32]), T, false},
    {"memory_gib", KEY_NUM, F(mem_bytes), GIB, true},
    {"memory_bw_gbs", KEY_NUM, F(mem_bw), G, true},
    {"gpus_per_node", KEY_INT, F(gpus_per_node), 1, true},
    {"intra_bw_gbs", KEY_NUM, F(intra_bw), G, true},
    {"intra_latency_us", KEY_NUM, F(intra_lat), US, false},
    {"inter_bw_gbs", KEY_NUM, F(inter_bw), G, true},
    {"inter_latency_us", KEY_NUM, F(inter_lat), US, false},
    {"gemm_efficiency", KEY_FRACTION, F(gemm_eff), 1, false},
    {"gemm_half_gflop", KEY_NUM, F(gemm_half), G, false},
    {"attention_efficiency", KEY_FRACTION, F(attn_eff), 1, false},
    {"memory_efficiency", KEY_FRACTION, F(mem_eff), 1, false},
    {"kernel_us", KEY_NUM, F(kernel_s), US, false},
    {"comm_efficiency", KEY_FRACTION, F(comm_eff), 1, false},
    {"workspace_mib", KEY_NUM, F(workspace_bytes), MIB, false},
    {"comm_buffer_mib", KEY_NUM, F(comm_buffer_bytes), MIB, false},
    {"fragmentation", KEY_FRACTION, F(fragmentation), 1, false},
    {"sms", KEY_INT, F(sms), 1, false},
    {"op_us", KEY_NUM, F(op_s), US, false},
    {"update_bw_gbs", KEY_NUM, F(update_bw), G, false},
    /* A CPU description's shared cores (printed only when set). */
    {"cores", KEY_INT, F(cores), 1, false},
    {"core_peak_tflops", KEY_NUM, F(core_peak), T, false},
    {"core_gemm_half_gflop", KEY_NUM, F(core_gemm_half), G, false},
    {"core_attention_efficiency", KEY_FRACTION, F(core_attn_eff), 1, false},
    {"core_memory_bw_gbs", KEY_NUM, F(core_mem_bw), G, false},
    {"core_kernel_us", KEY_NUM, F(core_kernel_s), US, false},
    {"core_memory_efficiency", KEY_FRACTION, F(core_mem_eff), 1, false},
    {"core_op_us", KEY_NUM, F(core_op_s), US, false},
    {"core_update_bw_gbs", KEY_NUM, F(core_update_bw), G, false},
};
#undef F
enum { NKEYS = sizeof keys / sizeof keys[0] };

static const Key *find_key(const char *name) {
  for (int i = 0; i < NKEYS; i++)
    if (strcmp(keys[i].name, name) == 0) return &keys[i];
  return NULL;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
  return s;
}

/* Whether 0 is a value of the key: memory a description does not have
 * (workspaces, buffers, fragmentation); a fragmentation of 1 is not. */
static bool zero_ok(const Key *k) {
  return k->unit == MIB || k->offset == offsetof(PlHw, fragmentation);
}

/* Stores one value; false after reporting why it does not fit the key. */
static bool set_value(PlHw *hw, const Key *k, const char *v, IrLoc at) {
  char *base = (char *)hw;
  if (k->kind == KEY_TEXT) {
    *(const char **)(base + k->offset) = ir_strdup(v);
    return true;
  }
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (end == v || *end || errno || !isfinite(x)) {
    ir_error(at, "%s: expected a number, got '%s'", k->name, v);
    return false;
  }
  bool latency = k->unit == US || zero_ok(k);
  if (x < 0 || (x == 0 && !latency) || (k->kind == KEY_FRACTION && (zero_ok(k) ? x >= 1 : x > 1)) ||
      (k->kind == KEY_INT && (x != floor(x) || x > 1 << 20))) {
    ir_error(at, "%s: %s, got '%s'", k->name,
             k->kind == KEY_FRACTION ? (zero_ok(k) ? "expected a fraction in [0, 1)"
                                                   : "expected a fraction in (0, 1]")
             : k->kind == KEY_INT    ? "expected a positive integer"
             : latency               ? "expected a non-negative number"
                                     : "expected a positive number",
             v);
    return false;
  }
  /* 1e300 GiB is a finite number of GiB but not of bytes. */
  if (k->kind != KEY_INT && !isfinite(x * k->unit)) {
    ir_error(at, "%s: '%s' is too large", k->name, v);
    return false;
  }
  if (k->kind == KEY_INT)
    *(int *)(base + k->offset) = (int)x;
  else
    *(double *)(base + k->offset) = x * k->unit;
  return true;
}

/* One `key = value` line (comments stripped). `base = PRESET`, allowed
 * only before any other key, starts from a preset. */
static bool parse_line(PlHw *hw, char *line, IrLoc at, bool *seen, bool first) {
  char *eq = strchr(line, '=');
  char *key = line;
  at.col = (int)(strspn(line, " \t") + 1);
  if (!eq) {
    ir_error(at, "expected KEY = VALUE");
    return false;
  }
  *eq = 0;
  key = trim(key);
  char *value = trim(eq + 1);
  if (!*value) {
    ir_error(at, "%s: no value after '='", key);
    return false;
  }
  if (strcmp(key, "base") == 0) {
    const PlHw *p = pl_hw_find(value);
    if (!p || !first) {
      ir_error(at, !p ? "base: no preset '%s' (presets: a100, h100, h200)"
                      : "base = %s must come before every other key", value);
      return false;
    }
    *hw = *p;
    for (int i = 0; i < NKEYS; i++) seen[i] = true;
    return true;
  }
  const Key *k = find_key(key);
  if (!k) {
    ir_error(at, "unknown key '%s' (see docs/planner.md for the keys)", key);
    return false;
  }
  seen[k - keys] = true;
  return set_value(hw, k, value, at);
}

/* The whole file, registered so that errors show the line and a caret. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    ir_error((IrLoc){path, 0, 0}, "not a hardware preset (a100, h100, h200) and cannot open: %s",
             strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *text = malloc(cap);
  for (size_t got; text && (got = fread(text + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) text = realloc(text, cap *= 2);
  }
  fclose(f);
  if (!text) die("out of memory reading %s", path);
  char *copy = ir_strndup(text, n);
  free(text);
  ir_diag_add_source(path, copy, n);
  return copy;
}

/* A CPU description without its one-core figures: each core a cores-th
 * of the machine (perfect scaling), the fixed costs unchanged. */
static void core_defaults(PlHw *hw) {
  if (!hw->core_peak) hw->core_peak = hw->peak_flops[PL_BF16] / hw->cores;
  if (!hw->core_gemm_half) hw->core_gemm_half = hw->gemm_half / hw->cores;
  if (!hw->core_attn_eff) hw->core_attn_eff = hw->attn_eff;
  if (!hw->core_mem_bw) hw->core_mem_bw = hw->mem_bw / hw->cores;
  if (!hw->core_kernel_s) hw->core_kernel_s = hw->kernel_s;
  if (!hw->core_mem_eff) hw->core_mem_eff = hw->mem_eff;
  if (!hw->core_update_bw) hw->core_update_bw = hw->update_bw / hw->cores;
  /* One thread has no team to wake: core_op_us stays as given (0: none). */
}

static bool load_file(const char *path, PlHw *out) {
  char *text = slurp(path);
  if (!text) return false;
  /* Unset calibration fields take the presets' values. */
  PlHw hw = {.name = ir_strdup(path), .doc = "from a description file", CALIBRATION,
             GPU_MEMORY(1687, 8), .sms = 108, .intra_lat = 3 * US, .inter_lat = 8 * US};
  bool seen[NKEYS] = {false}, ok = true, first = true;
  int line = 1;
  for (char *s = ir_strdup(text), *next; s && *s; s = next, line++) {
    next = strchr(s, '\n');
    if (next) *next++ = 0;
    char *hash = strchr(s, '#');
    if (hash) *hash = 0;
    if (!*trim(s)) continue;
    ok = parse_line(&hw, s, (IrLoc){path, line, 1}, seen, first) && ok;
    first = false;
  }
  /* A missing key is reported where it could have been written: at the end. */
  for (int i = 0; i < NKEYS; i++)
    if (keys[i].required && !seen[i]) {
      ir_error((IrLoc){path, line > 1 ? line - 1 : 1, 1}, "missing key '%s'", keys[i].name);
      ok = false;
    }
  if (ok && !hw.peak_flops[PL_FP16]) hw.peak_flops[PL_FP16] = hw.peak_flops[PL_BF16];
  if (ok && hw.cores > 0) core_defaults(&hw);
  /* A CPU description's ranks are processes that allocate once from the
   * memory plan: no device context, workspace or allocator to lose to,
   * unless the file says otherwise. */
  static const char *const gpu_only[] = {"workspace_mib", "comm_buffer_mib", "fragmentation"};
  for (size_t i = 0; ok && hw.cores > 0 && i < sizeof gpu_only / sizeof gpu_only[0]; i++) {
    const Key *k = find_key(gpu_only[i]);
    if (!seen[k - keys]) *(double *)((char *)&hw + k->offset) = 0;
  }
  /* Nor streaming multiprocessors. */
  if (ok && hw.cores > 0 && !seen[find_key("sms") - keys]) hw.sms = 0;
  *out = hw;
  return ok;
}

bool pl_hw_load(const char *name_or_file, PlHw *out) {
  const PlHw *p = pl_hw_find(name_or_file);
  if (p) {
    *out = *p;
    return true;
  }
  return load_file(name_or_file, out);
}

void pl_hw_print(FILE *out, const PlHw *hw) {
  fprintf(out, "# %s\n", hw->doc ? hw->doc : "");
  for (int i = 0; i < NKEYS; i++) {
    const Key *k = &keys[i];
    const char *base = (const char *)hw;
    if (hw->cores <= 0 && strcmp(k->name, "cores") == 0) break;
    if (k->kind == KEY_TEXT) {
      const char *s = *(const char *const *)(base + k->offset);
      if (s && strcmp(k->name, "doc") != 0) fprintf(out, "%s = %s\n", k->name, s);
    } else if (k->kind == KEY_INT) {
      int v = *(const int *)(base + k->offset);
      /* No streaming multiprocessors (a CPU): the key is left out, since
       * 0 does not read back. */
      if (v == 0 && !k->required) continue;
      fprintf(out, "%s = %d\n", k->name, v);
    } else {
      double v = *(const double *)(base + k->offset);
      /* A peak rate of 0 means the precision is not supported, an update
       * bandwidth of 0 the memory's: the key is left out, as the file
       * that said so did (0 does not read back). */
      if (v == 0 && !k->required && !(k->unit == US || zero_ok(k))) continue;
      fprintf(out, "%s = %g\n", k->name, v / k->unit);
    }
  }
}

/* x at w between a (w = 0) and b (w = 1). */
static double lerp(double a, double b, double w) { return a + (b - a) * w; }

PlHw pl_hw_rank_share(const PlHw *hw, int ranks) {
  PlHw h = *hw;
  int n = ranks > 1 ? ranks : 1, c = hw->cores;
  if (c <= 0 || n == 1) return h;
  /* `shardc run` gives each rank max(1, cores / ranks) threads; more ranks
   * than cores take turns, each a cores / ranks share of one core. */
  double threads = n <= c ? (double)(c / n) : 1, turn = n <= c ? 1 : (double)c / n;
  double w = c > 1 ? (threads - 1) / (c - 1) : 1;
  /* The rates between the two measured ends; the GEMM's fixed cost as
   * seconds (half / peak), which is what a thread count changes. */
  double half_s = lerp(hw->core_gemm_half / hw->core_peak, hw->gemm_half / hw->peak_flops[PL_BF16], w);
  double peak = lerp(hw->core_peak, hw->peak_flops[PL_BF16], w) * turn;
  for (int k = 0; k < PL_NPREC; k++)
    if (h.peak_flops[k]) h.peak_flops[k] = peak;
  h.gemm_half = half_s / turn * peak;
  h.attn_eff = lerp(hw->core_attn_eff, hw->attn_eff, w);
  h.mem_bw = lerp(hw->core_mem_bw, hw->mem_bw, w) * turn;
  h.kernel_s = lerp(hw->core_kernel_s, hw->kernel_s, w) / turn;
  h.mem_eff = lerp(hw->core_mem_eff, hw->mem_eff, w);
  h.op_s = lerp(hw->core_op_s, hw->op_s, w) / turn;
  h.update_bw = lerp(hw->core_update_bw, hw->update_bw, w) * turn;
  return h;
}
