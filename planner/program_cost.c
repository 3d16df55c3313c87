/* The cost report of a compiled program (program_cost.h).
 *
 * Pricing, per call (docs/targets.md, "The cost report"):
 * - a matrix product by the planner's GEMM curve (cost.c pl_gemm_s), at
 *   half its rate where a leading dimension is not 16-byte aligned (the
 *   tensor-core kernels of cuBLAS need 16-byte aligned operands; NVIDIA's
 *   "Matrix Multiplication Background User's Guide", section "Tensor Core
 *   Requirements", shows the unaligned products 2 to 4 times slower; we take
 *   the kind end), and never faster than its bytes move;
 * - attention by the published rates of its kind of kernel on the device
 *   (att_rate below), never faster than its bytes;
 * - everything else by the bytes its generated code reads and writes over
 *   the memory bandwidth (cost.c pl_memory_s), or, for a kernel of too few
 *   threads that loop over their elements in turn, one memory latency per
 *   SERIAL_LOADS_IN_FLIGHT steps of that loop;
 * - collectives by the planner's alpha-beta rings (cost.c), ordered on
 *   the device by events (runtime/comm/comm_nccl.c): no host wait;
 * - every call at least the description's kernel_s, the cost of a launch;
 *   every host wait SYNC_LAUNCHES launches more, the time the device idles
 *   while the host sees the result and queues the next work.
 * The step is the sum over the calls of the busiest program (one device
 * runs one kernel at a time on one stream); a pipeline's bubble and its
 * messages are `shardc simulate MODEL`'s. */
#include "program_cost.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

const char *const pl_kclass_names[PL_NKCLASS] = {
    "gemm", "attention", "elementwise", "norm", "reduction", "copy", "collective", "optimizer",
    "host"};

/* A host wait costs this many launches of idle device: the host returns
 * from the wait (a few microseconds) and queues the next kernel, whose
 * launch latency is then exposed instead of overlapping the work before. */
#define SYNC_LAUNCHES 2.5

/* --------------------------------------------------------- the devices */

/* Attention's published rates on an H100 SXM5 (bf16), TFLOP/s by sequence
 * length 512, 1k, 2k, 4k, 8k, 16k, batch x length 16k, hidden 2048: Shah
 * et al., "FlashAttention-3", arXiv 2407.08608 (2024), figures 5 and 6,
 * which count a causal forward as half the FLOPs of a full one and a
 * backward as 2.5 forwards. Kinds: FlashAttention-2, cuDNN's fused
 * attention (9.x), FlashAttention-3. The H200 has the H100's compute
 * (REFERENCE.md): the same rates. */
enum { ATT_FA2, ATT_CUDNN, ATT_FA3, ATT_NKINDS };
typedef struct AttRates {
  double fwd64[6], fwd128[6], causal128[6], bwd64[6], bwd128[6];
} AttRates;
static const double att_seq[6] = {512, 1024, 2048, 4096, 8192, 16384};
static const AttRates h100_att[ATT_NKINDS] = {
    [ATT_FA2] = {{282, 306, 318, 321, 322, 324}, {309, 350, 362, 368, 370, 370},
                 {191, 260, 298, 319, 333, 335}, {198, 238, 264, 279, 287, 291},
                 {214, 260, 291, 310, 318, 322}},
    [ATT_CUDNN] = {{335, 373, 395, 408, 412, 413}, {497, 574, 617, 609, 600, 595},
                   {315, 410, 484, 518, 529, 539}, {266, 348, 395, 417, 432, 433},
                   {305, 408, 465, 499, 518, 516}},
    [ATT_FA3] = {{333, 392, 460, 476, 496, 497}, {467, 565, 625, 638, 646, 648},
                 {292, 423, 521, 579, 602, 616}, {272, 363, 422, 453, 472, 474},
                 {316, 424, 501, 542, 559, 561}},
};

/* What the report knows of a preset's device beyond its description: the
 * latency of a dependent access to device memory
 * (about 500 ns on these parts, the order microbenchmarks of the A100 and
 * H100 report), and attention's rates as a fraction of the H100's: 1 on
 * Hopper; on the A100 FlashAttention-2 reaches 50-73% of its 312 TFLOP/s
 * (Dao, "FlashAttention-2", arXiv 2307.08691), about 0.62 of its H100
 * rates, and cuDNN about the same; FlashAttention-3 needs Hopper. */
typedef struct GpuFacts {
  const char *name;
  double latency;
  double att_scale;
  bool hopper;
} GpuFacts;
static const GpuFacts gpu_facts[] = {
    {"h100", 500e-9, 1.0, true},
    {"h200", 500e-9, 1.0, true},
    {"a100", 500e-9, 0.62, false},
    {NULL, 0, 0, false},
};

static const GpuFacts *facts_of(const PlHw *hw) {
  for (const GpuFacts *f = gpu_facts; f->name; f++)
    if (hw->name && strcmp(hw->name, f->name) == 0) return f;
  return NULL;
}

/* y at x on the table (x at att_seq), linear in log x, flat outside. */
static double on_seq(const double *y, double x) {
  if (x <= att_seq[0]) return y[0];
  for (int i = 1; i < 6; i++)
    if (x <= att_seq[i]) {
      double w = log(x / att_seq[i - 1]) / log(att_seq[i] / att_seq[i - 1]);
      return y[i - 1] + (y[i] - y[i - 1]) * w;
    }
  return y[5];
}

/* The published rate (FLOP/s, counted as the tables count them) of
 * attention of kind k at head size d and length s, forward or backward,
 * causal or not: linear in d between the tables of 64 and 128 (flat
 * outside), a causal pass at the causal/full ratio of the forward at 128. */
static double att_table_rate(const AttRates *t, bool bwd, double d, double s, bool causal) {
  double w = d <= 64 ? 0 : d >= 128 ? 1 : (d - 64) / 64;
  double full = bwd ? on_seq(t->bwd64, s) * (1 - w) + on_seq(t->bwd128, s) * w
                    : on_seq(t->fwd64, s) * (1 - w) + on_seq(t->fwd128, s) * w;
  if (causal) full *= on_seq(t->causal128, s) / on_seq(t->fwd128, s);
  return full * 1e12;
}

/* ------------------------------------------------------ the kernels */

/* What the report knows of a kernel of kernels/cuda or kernels/cpu: the
 * device kernels one call runs, and for attention the kind it is priced
 * as. Matched on the name's prefix, first match wins. */
typedef enum AttKind {
  AK_NONE,
  AK_OURS_FLASH, /* kernels/cuda/attention.cu's bf16 flash kernels */
  AK_SIMPLE,     /* its fp32 (simple) kernels: a warp per row, no tensor cores */
  AK_FA2, AK_CUDNN, AK_FA3,
  AK_CPU,        /* kernels/cpu/attention.c: blocked products */
} AttKind;
typedef struct KernelFacts {
  const char *prefix;
  int launches;
  AttKind att;
} KernelFacts;
static const KernelFacts kernel_facts[] = {
    /* A new kind of attention kernel says so in its name. */
    {"k_cuda_attention_fwd_cudnn", 1, AK_CUDNN},
    {"k_cuda_attention_bwd_cudnn", 1, AK_CUDNN},
    {"k_cuda_attention_fwd_fa3", 1, AK_FA3},
    {"k_cuda_attention_bwd_fa3", 1, AK_FA3},
    {"k_cuda_attention_fwd_fa2", 1, AK_FA2},
    {"k_cuda_attention_bwd_fa2", 2, AK_FA2},
    /* The forward keeps each row's log-sum-exp; the backward forms
     * sum(dy y), runs its one pass over the tiles, then adds dq's partial
     * sums into dq. */
    {"k_cuda_attention_fwd_bf16", 1, AK_OURS_FLASH},
    {"k_cuda_attention_bwd_bf16", 3, AK_OURS_FLASH},
    {"k_cuda_attention_fwd", 1, AK_SIMPLE},
    {"k_cuda_attention_bwd", 3, AK_SIMPLE},
    {"k_attention_fwd", 1, AK_CPU},
    {"k_attention_bwd", 1, AK_CPU},
    /* Rows, then partial sums of the weight gradients, then their total. */
    {"k_cuda_layernorm_bwd", 3, AK_NONE},
    {"k_cuda_rmsnorm_bwd", 3, AK_NONE},
    /* Per-row sums, then their mean. */
    {"k_cuda_cross_entropy_fwd", 2, AK_NONE},
    /* The routed layer (kernels/cuda/moe.cu): the dispatch's rows are
     * zeroed, then the kept copies scattered; the combine's backward
     * zeroes, writes the rows and the weights' dot products; a grouped
     * product's packing finds the experts' offsets first. */
    {"k_cuda_moe_scatter", 2, AK_NONE},
    {"k_cuda_moe_combine_bwd", 3, AK_NONE},
    {"k_cuda_grouped_pack", 2, AK_NONE},
    {NULL, 1, AK_NONE},
};

static const KernelFacts *kernel_of(const char *name) {
  const KernelFacts *k = kernel_facts;
  for (; k->prefix; k++)
    if (strncmp(name, k->prefix, strlen(k->prefix)) == 0) break;
  return k;
}

/* Our flash kernels, small tiles on wmma (the forward: 4 warps, 64 query
 * rows, 32-key tiles, double-buffered through cp.async; the backward: 2
 * warps, 32 x 32 tiles, double-buffered too): FlashAttention-2 is
 * about twice as fast as the first FlashAttention (Dao 2023, abstract),
 * whose tile sizes these are, so half its rates. The double
 * buffering is not priced: what it gains on a GPU is for the kit's
 * attention bench to measure, not for the report to assume. The backward runs FlashAttention-2's 5
 * tile products, and moves what FlashAttention-2's atomics do not: dq's
 * OURS_FLASH_SPLITS fp32 partial sums (kernels/cuda/attention.cu's
 * FB_SPLITS), read and written once per pair of 32-row tiles and summed
 * into dq. The simple fp32 kernels: 15% of the fp32 peak, dot
 * products over a warp's lanes (an estimate, no published figure). */
#define OURS_FLASH_SCALE 0.5
#define OURS_FLASH_SPLITS 4
#define OURS_FLASH_TILE 32
#define SIMPLE_FP32_EFF 0.15

/* The loads a thread of a serial loop has in flight at once. The loops of
 * the column and row sums (kernels/cuda/prelude.cuh's cu_sum_rows,
 * elementwise.cu's sum_rows_kernel) add x[r * n + j] over r into one
 * register: the loads do not depend on the sums, and nvcc (-O3, sm_90)
 * unrolls the loop by 4, four independent loads an iteration in its PTX,
 * so one memory latency covers four steps. */
#define SERIAL_LOADS_IN_FLIGHT 4

/* --------------------------------------------------------- the program */

/* One launch of the listing, read. */
typedef struct Launch {
  const char *program, *kernel, *function, *label;
  int cls;
  double flops, read, written, calls;
  bool per_step, sync, unlisted, in_chunks;
  double threads, steps;
  bool gemm;
  double m, n, k, batch, lda, ldb, ldc, ab, c;
  bool attention, backward, causal;
  double ab_b, s, heads, d;
  const char *op;
  double members;
  const char *axis;
} Launch;

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static bool flag(const cJSON *o, const char *key) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static int class_of(const char *name) {
  for (int c = 0; c < PL_NKCLASS; c++)
    if (strcmp(name, pl_kclass_names[c]) == 0) return c;
  return PL_KELEMENTWISE;
}

static Launch read_launch(const cJSON *j, const char *program) {
  Launch l = {.program = program, .kernel = str(j, "kernel"), .function = str(j, "function"),
              .label = str(j, "label"), .cls = class_of(str(j, "class")),
              .flops = num(j, "flops"), .read = num(j, "bytes_read"),
              .written = num(j, "bytes_written"), .calls = num(j, "calls"),
              .per_step = strcmp(str(j, "per"), "step") == 0, .sync = flag(j, "sync"),
              .unlisted = flag(j, "unlisted"), .in_chunks = flag(j, "in_chunks"),
              .threads = num(j, "threads"),
              .steps = num(j, "steps")};
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "gemm");
  if (cJSON_IsObject(g)) {
    l.gemm = true, l.m = num(g, "m"), l.n = num(g, "n"), l.k = num(g, "k");
    l.batch = num(g, "batch"), l.lda = num(g, "lda"), l.ldb = num(g, "ldb"), l.ldc = num(g, "ldc");
    l.ab = num(g, "ab_bytes"), l.c = num(g, "c_bytes");
  }
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "attention");
  if (cJSON_IsObject(a)) {
    l.attention = true, l.ab_b = num(a, "b"), l.s = num(a, "s"), l.heads = num(a, "heads");
    l.d = num(a, "d"), l.causal = flag(a, "causal"), l.backward = flag(a, "backward");
  }
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "collective");
  if (cJSON_IsObject(c)) {
    l.op = str(c, "op"), l.members = num(c, "members"), l.axis = str(c, "axis");
  }
  return l;
}

/* ------------------------------------------------------------- pricing */

typedef struct Pricing {
  PlHw hw;             /* one rank's share (a CPU description's cores shared) */
  const GpuFacts *gpu; /* NULL for a CPU or unknown device */
  bool cpu;
  PlConfig cfg;        /* the mesh, for the collectives' links */
  double real_bytes;   /* of the program's reals */
} Pricing;

/* Seconds of attention launch l's FLOPs at its kind's rate. */
static double attention_s(const Pricing *p, const Launch *l, AttKind kind) {
  double fwd = 4 * l->ab_b * l->s * l->s * l->heads * l->d; /* q k^T and p v, full */
  if (kind == AK_CPU) /* the FLOPs the CPU kernels run, as hw --measure counts them */
    return pl_cpu_attention_flops(fwd, l->s, l->causal, l->backward) /
           (p->hw.attn_eff * p->hw.peak_flops[PL_BF16]);
  if (kind == AK_SIMPLE) {
    double flops = fwd * (l->causal ? 0.5 : 1) * (l->backward ? 2.5 : 1);
    double peak = p->hw.peak_flops[PL_FP32] ? p->hw.peak_flops[PL_FP32] : p->hw.peak_flops[PL_BF16];
    return flops / (SIMPLE_FP32_EFF * peak);
  }
  /* The tables' count: a causal pass half the full FLOPs, the backward 2.5
   * forwards. */
  double counted = fwd * (l->causal ? 0.5 : 1) * (l->backward ? 2.5 : 1), rate;
  int table = kind == AK_CUDNN ? ATT_CUDNN : kind == AK_FA3 ? ATT_FA3 : ATT_FA2;
  if (p->gpu && (table != ATT_FA3 || p->gpu->hopper)) {
    rate = att_table_rate(&h100_att[table], l->backward, l->d, l->s, l->causal) * p->gpu->att_scale;
  } else {
    /* A device the report has no rates for: the description's own share
     * of peak (attention_efficiency). */
    rate = p->hw.attn_eff * p->hw.peak_flops[PL_BF16];
  }
  if (kind != AK_OURS_FLASH) return counted / rate;
  double compute = counted / (rate * OURS_FLASH_SCALE);
  if (!l->backward) return compute;
  /* The backward's partial sums of dq: the pass reads and writes a tile's
   * fp32 rows per visited pair of tiles, beside its products (the longer
   * of the two); the final sum (read every split, write dq) and sum(dy y)
   * (read y and dy) run before and after it. */
  double n = l->ab_b * l->heads * l->s * l->d, tiles = ceil(l->s / OURS_FLASH_TILE);
  double pairs = l->causal ? tiles * (tiles + 1) / 2 : tiles * tiles;
  double pass = l->ab_b * l->heads * pairs * OURS_FLASH_TILE * l->d * 4 * 2;
  double around = OURS_FLASH_SPLITS * n * 4 + n * 2 + 2 * n * 2;
  double bw = p->hw.mem_bw * p->hw.mem_eff;
  return fmax(compute, pass / bw) + around / bw;
}

static bool aligned16(double ld, double bytes) { return fmod(ld * bytes, 16) == 0; }

/* The price of one call of l: its seconds, the bound, and the device
 * kernels it runs. */
static double price(const Pricing *p, const Launch *l, const char **bound, int *launches) {
  const PlHw *hw = &p->hw;
  const KernelFacts *kf = kernel_of(l->kernel);
  *launches = kf->launches;
  double bytes = l->read + l->written, mem = bytes / (hw->mem_bw * hw->mem_eff);
  double t = 0;
  *bound = "memory";
  if (l->gemm) {
    /* The curve (cost.c) at the FLOPs of whole waves of output tiles: a
     * product whose last wave fills only part of the SMs does the work of
     * a full one (cost.c's wave efficiency); a batch of products as that
     * many times the rows. */
    double waves = pl_gemm_wave_efficiency(hw, l->m * (l->batch > 1 ? l->batch : 1), l->n);
    double g = pl_gemm_s(hw, l->flops / waves);
    /* fp32 operands on a GPU: cuBLASLt's CUBLAS_COMPUTE_32F without TF32
     * (kernels/cuda/gemm.cu) runs them at the fp32 peak. */
    if (!p->cpu && l->ab == 4 && hw->peak_flops[PL_FP32] > 0)
      g *= hw->peak_flops[PL_BF16] / hw->peak_flops[PL_FP32];
    if (!p->cpu && !(aligned16(l->lda, l->ab) && aligned16(l->ldb, l->ab) && aligned16(l->ldc, l->c)))
      g *= 2;
    t = g > mem ? g : mem;
    *bound = g > mem ? "compute" : "memory";
  } else if (l->attention) {
    AttKind kind = kf->att != AK_NONE ? kf->att : p->cpu ? AK_CPU : AK_FA2;
    double a = attention_s(p, l, kind);
    t = a > mem ? a : mem;
    *bound = a > mem ? "compute" : "memory";
  } else if (l->cls == PL_KCOLLECTIVE) {
    PlLink link = strcmp(l->axis ? l->axis : "", "dp") == 0 ? pl_dp_link(hw, &p->cfg)
                                                             : pl_tp_link(hw, &p->cfg);
    int n = (int)l->members;
    /* The payload: what one member holds (the listing's bytes read). */
    t = strcmp(l->op, "allgather") == 0     ? pl_all_gather_s(link, n, l->read)
        : strcmp(l->op, "reduce_scatter") == 0 ? pl_reduce_scatter_s(link, n, l->read)
                                              : pl_all_reduce_s(link, n, l->read);
    *bound = "link";
  } else if (l->cls == PL_KHOST) {
    t = mem;
    *bound = "launch";
  } else {
    /* The optimizer step's passes at the description's update bandwidth
     * (cost.c), the rest at the memory's. */
    bool update = l->per_step && (l->cls == PL_KOPTIMIZER || l->cls == PL_KREDUCTION);
    t = update ? pl_update_s(hw, bytes) : mem;
    /* Too few threads, each looping over its elements in turn: a memory
     * latency per SERIAL_LOADS_IN_FLIGHT steps of the loop. */
    if (p->gpu && l->threads > 0 && l->threads < hw->sms * 2048.0 && l->steps > 0) {
      double lat = ceil(l->steps / SERIAL_LOADS_IN_FLIGHT) * p->gpu->latency;
      if (lat > t) t = lat, *bound = "latency";
    }
  }
  if (t < hw->kernel_s) t = hw->kernel_s, *bound = "launch";
  /* On a CPU the start and end of a parallel region with the rank's team
   * (the description's op_us): every kernel over K_PAR_MIN (32768)
   * elements and attention open one; a GEMM's is in its measured curve;
   * the calls inside a loop over row chunks share the loop's. */
  double elems = (l->read > l->written ? l->read : l->written) / p->real_bytes;
  if (p->cpu && !l->gemm && !l->in_chunks && (l->attention || elems >= 32768)) t += hw->op_s;
  return t;
}

/* The roofline of one call: every FLOP at the bf16 peak, every byte at the
 * memory bandwidth; a collective at the link's full bandwidth. */
static double ideal(const Pricing *p, const Launch *l) {
  const PlHw *hw = &p->hw;
  double f = l->flops / hw->peak_flops[PL_BF16], m = (l->read + l->written) / hw->mem_bw;
  if (l->cls == PL_KCOLLECTIVE) {
    double n = l->members > 1 ? l->members : 1;
    m = (strcmp(l->op, "allreduce") == 0 ? 2 : 1) * (n - 1) / n * l->read / hw->intra_bw;
  }
  if (l->cls == PL_KHOST) return 0;
  return f > m ? f : m;
}

static const char *shape_of(const Launch *l, const Pricing *p) {
  if (l->gemm) {
    bool al = p->cpu || (aligned16(l->lda, l->ab) && aligned16(l->ldb, l->ab) &&
                         aligned16(l->ldc, l->c));
    return ir_fmt("%.0fx%.0fx%.0f%s%s", l->m, l->n, l->k,
               l->batch > 1 ? ir_fmt(" x%.0f", l->batch) : "", al ? "" : " unaligned");
  }
  if (l->attention)
    return ir_fmt("b%.0f s%.0f h%.0f d%.0f%s", l->ab_b, l->s, l->heads, l->d,
               l->causal ? " causal" : "");
  if (l->cls == PL_KCOLLECTIVE) return ir_fmt("%s over %.0f", l->op, l->members);
  if (l->threads > 0) return ir_fmt("%.0f threads x %.0f steps", l->threads, l->steps);
  return "";
}

/* ----------------------------------------------------------- the report */

static bool fail(char **error, const char *f, ...) __attribute__((format(printf, 2, 3)));
static bool fail(char **error, const char *f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  *error = malloc(strlen(buf) + 1);
  if (*error) memcpy(*error, buf, strlen(buf) + 1);
  return false;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *s = malloc(cap);
  for (size_t got; s && (got = fread(s + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (n + 1 == cap) s = realloc(s, cap *= 2);
  }
  fclose(f);
  if (s) s[n] = 0;
  return s;
}

/* The kernels the code generators write one of per node (fused_c0_n17)
 * by their family: fused_c0_n*, so that a layer's runs group together. */
static const char *family(const char *kernel) {
  const char *u = strrchr(kernel, '_');
  if (!u || u[1] != 'n' || !isdigit((unsigned char)u[2])) return kernel;
  for (const char *c = u + 2; *c; c++)
    if (!isdigit((unsigned char)*c)) return kernel;
  return ir_fmt("%.*s_n*", (int)(u - kernel), kernel);
}

/* Adds l (calls per step given) to the report, into the group of its
 * identical launches. */
static void add_group(PlProgramReport *r, int *cap, const Launch *l, double calls,
                      const Pricing *p) {
  const char *bound;
  int launches;
  double t = price(p, l, &bound, &launches);
  const char *shape = shape_of(l, p), *kernel = family(l->kernel);
  for (int i = r->n - 1; i >= 0; i--) {
    PlLaunchCost *g = &r->l[i];
    if (strcmp(g->kernel, kernel) == 0 && strcmp(g->label, l->label) == 0 &&
        strcmp(g->program, l->program) == 0 && strcmp(g->function, l->function) == 0 &&
        g->flops == l->flops && g->bytes_read == l->read && g->bytes_written == l->written &&
        g->sync == l->sync && strcmp(g->shape, shape) == 0) {
      g->calls += calls;
      return;
    }
  }
  if (r->n == *cap) {
    *cap = *cap ? 2 * *cap : 256;
    r->l = realloc(r->l, sizeof *r->l * (size_t)*cap);
    if (!r->l) abort();
  }
  r->l[r->n++] = (PlLaunchCost){
      .program = l->program, .kernel = kernel, .function = l->function, .label = l->label,
      .shape = shape, .cls = l->cls, .flops = l->flops, .bytes_read = l->read,
      .bytes_written = l->written, .calls = calls, .launches = launches, .sync = l->sync,
      .unlisted = l->unlisted, .time = t, .ideal = ideal(p, l),
      .model_time = l->flops / p->hw.peak_flops[PL_BF16], .bound = bound};
}

bool pl_program_report(const char *dir, const PlHw *hw, int global_batch, PlProgramReport *out,
                       char **error) {
  *out = (PlProgramReport){.dir = dir, .hw = hw->name};
  const char *path = ir_fmt("%s/kernels.json", dir);
  char *text = slurp(path);
  if (!text)
    return fail(error, "%s: %s (compile the program with this shardc: `shardc compile MODEL "
                "--target NAME -o %s` writes it)", path, strerror(errno), dir);
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *programs = cJSON_GetObjectItemCaseSensitive(root, "programs");
  if (!root || strcmp(str(root, "format"), "shardc launch listing 1") != 0 ||
      !cJSON_IsArray(programs)) {
    cJSON_Delete(root);
    return fail(error, "%s: not a launch listing of this shardc", path);
  }
  const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  out->model = ir_strdup(str(root, "model"));
  out->target = ir_strdup(str(root, "target"));
  out->precision = ir_strdup(str(root, "precision"));
  out->tp = (int)num(mesh, "tp"), out->pp = (int)num(mesh, "pp"), out->dp = (int)num(mesh, "dp");
  if (out->tp < 1) out->tp = 1;
  if (out->pp < 1) out->pp = 1;
  if (out->dp < 1) out->dp = 1;
  out->ranks = out->tp * out->pp * out->dp;
  double batch = num(root, "batch"), seq = num(root, "seq");
  int m = (int)num(root, "microbatches");
  if (m < 1) m = 1;
  if (global_batch > 0) {
    double per = batch * out->dp;
    if (out->pp > 1 || fmod(global_batch, per) != 0) {
      cJSON_Delete(root);
      return fail(error, out->pp > 1 ? "--global-batch: a pipeline's schedule fixes its "
                                       "microbatches; compile with --global-batch instead"
                                     : "--global-batch %d: not a multiple of batch x d = %.0f",
                  global_batch, per);
    }
    m = (int)(global_batch / per);
  }
  out->microbatches = m;
  out->tokens_per_step = batch * seq * m * out->dp;
  Pricing p = {.hw = pl_hw_rank_share(hw, out->ranks), .cpu = hw->cores > 0};
  p.gpu = p.cpu ? NULL : facts_of(hw);
  p.cfg = (PlConfig){.tp = out->tp, .pp = out->pp, .dp = out->dp};
  p.real_bytes = num(root, "real_bytes") > 0 ? num(root, "real_bytes") : 4;
  out->peak = p.hw.peak_flops[PL_BF16], out->bandwidth = p.hw.mem_bw;
  double sync_s = p.cpu ? 0 : SYNC_LAUNCHES * p.hw.kernel_s;
  int cap = 0;
  const cJSON *pj;
  double busiest = -1;
  cJSON_ArrayForEach(pj, programs) {
    const char *name = ir_strdup(str(pj, "name"));
    /* Each program is run by the t x d ranks of its stage. */
    out->model_flops += num(pj, "model_flops_per_microbatch") * m * out->tp * out->dp;
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(pj, "graphs"), *g;
    cJSON_ArrayForEach(g, gr) out->graphs |= flag(g, "captured");
    int first = out->n;
    const cJSON *lj;
    cJSON_ArrayForEach(lj, cJSON_GetObjectItemCaseSensitive(pj, "launches")) {
      Launch l = read_launch(lj, name);
      l.kernel = ir_strdup(l.kernel), l.function = ir_strdup(l.function), l.label = ir_strdup(l.label);
      double calls = l.calls * (l.per_step ? 1 : m);
      add_group(out, &cap, &l, calls, &p);
    }
    double t = 0, syncs = 0, calls = 0, device = 0;
    for (int i = first; i < out->n; i++) {
      const PlLaunchCost *c = &out->l[i];
      t += c->calls * c->time;
      syncs += c->sync ? c->calls : 0;
      calls += c->calls;
      device += c->calls * c->launches;
    }
    t += syncs * sync_s;
    if (t > busiest) {
      busiest = t;
      out->step_time = t, out->sync_time = syncs * sync_s, out->syncs = syncs;
      out->launches = calls, out->device_launches = device;
      memset(out->class_time, 0, sizeof out->class_time);
      memset(out->class_ideal, 0, sizeof out->class_ideal);
      memset(out->class_calls, 0, sizeof out->class_calls);
      out->ideal_time = 0;
      for (int i = first; i < out->n; i++) {
        const PlLaunchCost *c = &out->l[i];
        out->class_time[c->cls] += c->calls * c->time;
        out->class_ideal[c->cls] += c->calls * c->ideal;
        out->class_calls[c->cls] += c->calls;
        out->ideal_time += c->calls * c->ideal;
      }
    }
    for (int i = first; i < out->n; i++) out->unlisted += out->l[i].unlisted;
  }
  cJSON_Delete(root);
  if (out->n == 0) return fail(error, "%s: the listing has no launches", path);
  out->tokens_per_s = out->step_time > 0 ? out->tokens_per_step / out->step_time : 0;
  out->mfu = out->step_time > 0 ? out->model_flops / (out->step_time * out->ranks * out->peak) : 0;
  if (out->pp > 1)
    out->note = "the busiest stage's launches only: the pipeline's bubble and messages are "
                "`shardc simulate MODEL`'s";
  return true;
}

/* ------------------------------------------------------------ printing */

/* A sink: the time a group of launches (or the host waits) spends above
 * its ideal, per step. */
typedef struct Sink {
  const char *what, *shape;
  int cls;
  double seconds, calls;
  const char *bound;
} Sink;

static int by_seconds(const void *a, const void *b) {
  double x = ((const Sink *)a)->seconds, y = ((const Sink *)b)->seconds;
  return (x < y) - (x > y);
}

/* The sinks of the report, biggest first: launches grouped by their label
 * and class (the same op at the same shape in every layer), then the host
 * waits. *n is set. */
static Sink *sinks(const PlProgramReport *r, int *n) {
  Sink *s = calloc((size_t)r->n + 2, sizeof *s);
  int k = 0;
  for (int i = 0; i < r->n; i++) {
    const PlLaunchCost *c = &r->l[i];
    double over = c->calls * (c->time - c->ideal);
    int j = 0;
    while (j < k && !(s[j].cls == c->cls && strcmp(s[j].what, c->label) == 0)) j++;
    if (j == k) s[k++] = (Sink){c->label, c->shape, c->cls, 0, 0, c->bound};
    else if (strcmp(s[j].shape, c->shape) != 0) s[j].shape = "shapes differ";
    s[j].seconds += over, s[j].calls += c->calls;
  }
  if (r->sync_time > 0)
    s[k++] = (Sink){ir_fmt("host waits (%.0f per step)", r->syncs), "", PL_KHOST, r->sync_time,
                    r->syncs, "launch"};
  qsort(s, (size_t)k, sizeof *s, by_seconds);
  *n = k;
  return s;
}

static const char *mb(double bytes) { return ir_fmt("%.1f", bytes / 1e6); }

void pl_program_report_print(FILE *f, const PlProgramReport *r) {
  fprintf(f, "cost report of %s: %s, %s %s, t=%d p=%d d=%d, on %s\n", r->dir, r->model, r->target,
          r->precision, r->tp, r->pp, r->dp, r->hw);
  fprintf(f, "one step: %d microbatch%s, %.0f tokens; CUDA graphs %s\n", r->microbatches,
          r->microbatches == 1 ? "" : "es", r->tokens_per_step,
          r->graphs ? "replay the chunk functions" : "not used");
  fprintf(f, "\n%8s  %-8s  %-34s  %-11s  %9s  %9s  %10s  %10s  %-7s  %s\n", "calls", "function",
          "kernel", "class", "GFLOP", "MB moved", "us each", "ideal us", "bound", "label / shape");
  for (int i = 0; i < r->n; i++) {
    const PlLaunchCost *c = &r->l[i];
    fprintf(f, "%8.0f  %-8s  %-34s  %-11s  %9.3f  %9s  %10.2f  %10.2f  %-7s  %s%s%s%s%s\n",
            c->calls, c->function, c->kernel, pl_kclass_names[c->cls], c->flops / 1e9,
            mb(c->bytes_read + c->bytes_written), 1e6 * c->time, 1e6 * c->ideal, c->bound,
            c->label, *c->shape ? " | " : "", c->shape, c->sync ? " | host waits" : "",
            c->unlisted ? " | UNLISTED: priced from its node" : "");
  }
  double model_s = r->model_flops / (r->ranks * r->peak);
  fprintf(f, "\nlaunches per step       %.0f kernel launches and library calls (%.0f device "
          "kernels)\n", r->launches, r->device_launches);
  fprintf(f, "host synchronisations   %.0f per step (%.3f ms)\n", r->syncs, 1e3 * r->sync_time);
  fprintf(f, "predicted step time     %.3f ms\n", 1e3 * r->step_time);
  fprintf(f, "ideal step time         %.3f ms (every FLOP at %.4g TFLOP/s, every byte at %.4g "
          "GB/s)\n", 1e3 * r->ideal_time, r->peak / 1e12, r->bandwidth / 1e9);
  fprintf(f, "tokens/s                %.0f\n", r->tokens_per_s);
  fprintf(f, "MFU                     %.1f%% (model FLOPs %.4g TFLOP per step, %.3f ms at peak)\n",
          100 * r->mfu, r->model_flops / 1e12, 1e3 * model_s);
  if (r->note) fprintf(f, "note                    %s\n", r->note);
  if (r->unlisted)
    fprintf(f, "unlisted                %d launch groups no hook recorded (priced from their "
            "nodes)\n", r->unlisted);
  fprintf(f, "\n%-12s %10s %7s %10s %10s\n", "class", "ms", "% step", "ideal ms", "calls");
  for (int c = 0; c < PL_NKCLASS; c++)
    if (r->class_calls[c] > 0)
      fprintf(f, "%-12s %10.3f %7.1f %10.3f %10.0f\n", pl_kclass_names[c], 1e3 * r->class_time[c],
              100 * r->class_time[c] / r->step_time, 1e3 * r->class_ideal[c], r->class_calls[c]);
  if (r->sync_time > 0)
    fprintf(f, "%-12s %10.3f %7.1f %10.3f %10.0f\n", "host waits", 1e3 * r->sync_time,
            100 * r->sync_time / r->step_time, 0.0, r->syncs);
  int n;
  Sink *s = sinks(r, &n);
  fprintf(f, "\nthe ten biggest sinks against the ideal (predicted - ideal, per step):\n");
  fprintf(f, "%10s %7s %8s  %-11s %-7s  %s\n", "ms", "% step", "calls", "class", "bound", "what");
  for (int i = 0; i < n && i < 10; i++)
    fprintf(f, "%10.3f %7.1f %8.0f  %-11s %-7s  %s%s%s\n", 1e3 * s[i].seconds,
            100 * s[i].seconds / r->step_time, s[i].calls, pl_kclass_names[s[i].cls], s[i].bound,
            s[i].what, *s[i].shape ? " | " : "", s[i].shape);
  free(s);
}

void pl_program_report_json(FILE *f, const PlProgramReport *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "program", r->dir);
  cJSON_AddStringToObject(o, "model", r->model);
  cJSON_AddStringToObject(o, "target", r->target);
  cJSON_AddStringToObject(o, "precision", r->precision);
  cJSON_AddStringToObject(o, "hw", r->hw);
  cJSON_AddNumberToObject(o, "ranks", r->ranks);
  cJSON_AddNumberToObject(o, "microbatches", r->microbatches);
  cJSON_AddNumberToObject(o, "tokens_per_step", r->tokens_per_step);
  cJSON_AddNumberToObject(o, "launches_per_step", r->launches);
  cJSON_AddNumberToObject(o, "device_kernels_per_step", r->device_launches);
  cJSON_AddNumberToObject(o, "host_syncs_per_step", r->syncs);
  cJSON_AddNumberToObject(o, "step_time_s", r->step_time);
  cJSON_AddNumberToObject(o, "sync_time_s", r->sync_time);
  cJSON_AddNumberToObject(o, "ideal_step_time_s", r->ideal_time);
  cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_s);
  cJSON_AddNumberToObject(o, "mfu", r->mfu);
  cJSON_AddNumberToObject(o, "model_flops_per_step", r->model_flops);
  cJSON_AddNumberToObject(o, "peak_flops", r->peak);
  cJSON_AddNumberToObject(o, "memory_bw", r->bandwidth);
  cJSON_AddBoolToObject(o, "cuda_graphs", r->graphs);
  cJSON_AddNumberToObject(o, "unlisted", r->unlisted);
  if (r->note) cJSON_AddStringToObject(o, "note", r->note);
  cJSON *cl = cJSON_AddObjectToObject(o, "classes");
  for (int c = 0; c < PL_NKCLASS; c++) {
    if (r->class_calls[c] <= 0) continue;
    cJSON *e = cJSON_AddObjectToObject(cl, pl_kclass_names[c]);
    cJSON_AddNumberToObject(e, "time_s", r->class_time[c]);
    cJSON_AddNumberToObject(e, "ideal_s", r->class_ideal[c]);
    cJSON_AddNumberToObject(e, "calls", r->class_calls[c]);
  }
  int n;
  Sink *s = sinks(r, &n);
  cJSON *sk = cJSON_AddArrayToObject(o, "sinks");
  for (int i = 0; i < n && i < 10; i++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "what", s[i].what);
    cJSON_AddStringToObject(e, "shape", s[i].shape);
    cJSON_AddStringToObject(e, "class", pl_kclass_names[s[i].cls]);
    cJSON_AddStringToObject(e, "bound", s[i].bound);
    cJSON_AddNumberToObject(e, "seconds", s[i].seconds);
    cJSON_AddNumberToObject(e, "calls", s[i].calls);
    cJSON_AddItemToArray(sk, e);
  }
  free(s);
  cJSON *ls = cJSON_AddArrayToObject(o, "launches");
  for (int i = 0; i < r->n; i++) {
    const PlLaunchCost *c = &r->l[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "program", c->program);
    cJSON_AddStringToObject(e, "function", c->function);
    cJSON_AddStringToObject(e, "kernel", c->kernel);
    cJSON_AddStringToObject(e, "class", pl_kclass_names[c->cls]);
    cJSON_AddStringToObject(e, "label", c->label);
    cJSON_AddStringToObject(e, "shape", c->shape);
    cJSON_AddNumberToObject(e, "calls_per_step", c->calls);
    cJSON_AddNumberToObject(e, "device_kernels", c->launches);
    cJSON_AddNumberToObject(e, "flops", c->flops);
    cJSON_AddNumberToObject(e, "bytes_read", c->bytes_read);
    cJSON_AddNumberToObject(e, "bytes_written", c->bytes_written);
    cJSON_AddNumberToObject(e, "time_s", c->time);
    cJSON_AddNumberToObject(e, "ideal_s", c->ideal);
    cJSON_AddStringToObject(e, "bound", c->bound);
    cJSON_AddBoolToObject(e, "sync", c->sync);
    if (c->unlisted) cJSON_AddBoolToObject(e, "unlisted", true);
    cJSON_AddItemToArray(ls, e);
  }
  char *text = cJSON_Print(o);
  fprintf(f, "%s\n", text);
  free(text);
  cJSON_Delete(o);
}

/* A CSV field: quoted when it holds a comma or a quote. */
static void csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

void pl_program_report_csv(FILE *f, const PlProgramReport *r) {
  fprintf(f, "program,function,kernel,class,label,shape,calls_per_step,device_kernels,flops,"
          "bytes_read,bytes_written,time_s,ideal_s,bound,sync,unlisted\n");
  for (int i = 0; i < r->n; i++) {
    const PlLaunchCost *c = &r->l[i];
    const char *fields[] = {c->program, c->function, c->kernel, pl_kclass_names[c->cls], c->label,
                            c->shape};
    for (int k = 0; k < 6; k++) csv_field(f, fields[k]), fputc(',', f);
    fprintf(f, "%.0f,%.0f,%.17g,%.17g,%.17g,%.9g,%.9g,%s,%d,%d\n", c->calls, c->launches, c->flops,
            c->bytes_read, c->bytes_written, c->time, c->ideal, c->bound, c->sync, c->unlisted);
  }
}

int pl_program_report_main(const char *dir, const char *hw_name, bool json, const char *csv,
                           int global_batch) {
  PlHw hw;
  if (!pl_hw_load(hw_name, &hw)) return 1;
  PlProgramReport r;
  char *error = NULL;
  if (!pl_program_report(dir, &hw, global_batch, &r, &error)) {
    fprintf(stderr, "shardc simulate: error: %s\n", error ? error : "out of memory");
    free(error);
    return 1;
  }
  if (csv) {
    FILE *f = strcmp(csv, "-") == 0 ? stdout : fopen(csv, "w");
    if (!f) {
      fprintf(stderr, "shardc simulate: error: cannot write %s: %s\n", csv, strerror(errno));
      pl_program_report_free(&r);
      return 1;
    }
    pl_program_report_csv(f, &r);
    if (f != stdout && fclose(f) != 0) {
      fprintf(stderr, "shardc simulate: error: cannot write %s\n", csv);
      pl_program_report_free(&r);
      return 1;
    }
    if (f == stdout) return pl_program_report_free(&r), 0;
  }
  if (json) pl_program_report_json(stdout, &r);
  else pl_program_report_print(stdout, &r);
  pl_program_report_free(&r);
  return 0;
}

void pl_program_report_free(PlProgramReport *r) {
  free(r->l);
  r->l = NULL, r->n = 0;
}
