/* The CUDA device layer (runtime/device_cuda.c) against the CPU kernels:
 * memory, copies and zeroing round trips, the optimizer over a model's
 * parameters and over ZeRO-style ranges (AdamW and SGD), and the sums of
 * squares, one line per check (normwise error, fp32 within 1e-5; copies
 * exact), and the bf16 working copy of the weights (rt_dev_weights_bf16)
 * against its CPU twin, the round to nearest even of the masters, exactly:
 * after its first cast, after an AdamW step (which writes it), after an
 * SGD step and after a copy into the masters (which leave it stale); the
 * staged token windows (test_stage); and CUDA graphs (rt_dev_graph_call):
 * a function run plainly, captured, then replayed at the same pointers,
 * reading the memory as it stands at each replay, and warmed up afresh at
 * new pointers.
 *
 * Without a CUDA device it prints why and exits 77 (skipped). With
 * --no-device it checks the other side instead: where there is no device,
 * the first device call must end the program with a "no CUDA device"
 * error and a non-zero exit (ctest matches the message); where there is
 * one, that check is skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "device.h"
#include "kernels.h"
#include "kernels_cuda.h"

#define SKIP 77

static int failures;

static void check(const char *what, const float *got, const float *want, int64_t n, double tol) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]);
    diff = d > diff || d != d ? d : diff;
    scale = fabs((double)want[i]) > scale ? fabs((double)want[i]) : scale;
  }
  double err = scale > 0 ? diff / scale : diff;
  int ok = err <= tol;
  printf("%-34s n%-8lld err %.2e  tol %.0e  %s\n", what, (long long)n, err, tol, ok ? "ok" : "FAIL");
  failures += !ok;
}

static uint64_t rng = 0x3c6ef372fe94f82bull;
static float urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}
static float *hrand(int64_t n, float scale) {
  float *x = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = urand() * scale;
  return x;
}
static float *on_device(const float *x, int64_t n) {
  float *d = rt_dev_alloc(n * 4, "a test tensor");
  rt_dev_from_host(d, x, n * 4);
  return d;
}
static float *to_host(const float *d, int64_t n) {
  float *x = malloc((size_t)n * sizeof(float));
  rt_dev_to_host(x, d, n * 4);
  return x;
}

static void test_memory(int64_t n) {
  float *x = hrand(n, 1), *zero = calloc((size_t)n, sizeof(float));
  float *a = on_device(x, n), *b = rt_dev_alloc(n * 4, "b");
  rt_dev_copy(b, a, n * 4);
  rt_dev_sync();
  float *back = to_host(b, n);
  check("from_host, copy, to_host", back, x, n, 0);
  rt_dev_zero(a, n * 4);
  free(back);
  back = to_host(a, n);
  check("zero", back, zero, n, 0);
  rt_dev_free(a);
  rt_dev_free(b);
  free(x), free(zero), free(back);
}

/* A model of three parameters, the middle one without weight decay. */
static void test_optimizer(int64_t n, int adamw) {
  int64_t n1 = n / 3, n2 = n / 2 - n1;
  RtParam prm[3];
  memset(prm, 0, sizeof prm);
  int64_t off[3] = {0, n1, n1 + n2}, len[3] = {n1, n2, n - n1 - n2};
  for (int p = 0; p < 3; p++) {
    prm[p].numel = len[p];
    prm[p].offset = off[p];
    prm[p].weight_decay = p != 1;
  }
  RtModel m;
  memset(&m, 0, sizeof m);
  m.params = prm;
  m.nparams = 3;
  m.nweights = n;
  RtDevOpt o = {adamw, 0.8f, 1 - 1e-4f, 1e-3f, 0.9f, 0.95f, 1e-8f, 1e-3f / 0.19f, sqrtf(1 - 0.9025f)};
  float *w = hrand(n, 1), *g = hrand(n, 1), *mo = hrand(n, 0.1f), *ve = hrand(n, 0.01f);
  for (int64_t i = 0; i < n; i++) ve[i] = fabsf(ve[i]);
  float *dw = on_device(w, n), *dg = on_device(g, n), *dm = on_device(mo, n), *dv = on_device(ve, n);
  /* Two steps: one over the parameters, one over ranges whose state sits
   * elsewhere than the weights (the state is the same arrays shifted). */
  rt_dev_update_params(&m, dw, dg, dm, dv, &o);
  for (int p = 0; p < 3; p++) {
    float d = prm[p].weight_decay ? o.decay : 1;
    float *wp = w + off[p];
    const float *gp = g + off[p];
    if (adamw) {
      KAdamW h = {o.grad_scale, d, o.beta1, o.beta2, o.eps, o.step_size, o.bc2_sqrt};
      k_adamw(wp, gp, mo + off[p], ve + off[p], len[p], &h);
    } else {
      for (int64_t i = 0; i < len[p]; i++) wp[i] = wp[i] * d - o.lr * gp[i] * o.grad_scale;
    }
  }
  float *got = to_host(dw, n);
  check(adamw ? "update_params adamw w" : "update_params sgd w", got, w, n, 1e-5);
  free(got);
  if (adamw) {
    RtDevRange r[2] = {{0, 0, n / 2, 1}, {n / 2, n / 2, n - n / 2, 0}};
    rt_dev_update_ranges(r, 2, dw, dg, dm, dv, &o);
    for (int i = 0; i < 2; i++) {
      KAdamW h = {o.grad_scale, r[i].decay ? o.decay : 1, o.beta1, o.beta2, o.eps, o.step_size, o.bc2_sqrt};
      k_adamw(w + r[i].w, g + r[i].w, mo + r[i].s, ve + r[i].s, r[i].n, &h);
    }
    got = to_host(dw, n);
    check("update_ranges adamw w", got, w, n, 1e-5);
    free(got);
    got = to_host(dv, n);
    check("update_ranges adamw v", got, ve, n, 1e-5);
    free(got);
  }
  rt_dev_free(dw), rt_dev_free(dg), rt_dev_free(dm), rt_dev_free(dv);
  free(w), free(g), free(mo), free(ve);
}

/* The CPU twin of the bf16 copy: the masters rounded to nearest even (NaN
 * kept a quiet NaN), back in fp32 to compare. */
static float bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
  else u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* The copy on the device against the rounding of the masters there. */
static void check_copy(const char *what, const float *dw, int64_t n) {
  uint16_t *bits = malloc((size_t)n * 2);
  rt_dev_to_host(bits, rt_dev_weights_bf16(dw, n), n * 2);
  float *w = to_host(dw, n), *got = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)bits[i] << 16;
    memcpy(&got[i], &u, 4);
    w[i] = bf16_round(w[i]);
  }
  check(what, got, w, n, 0);
  free(bits), free(w), free(got);
}

static void test_weights_bf16(int64_t n) {
  RtParam prm = {0};
  prm.numel = n;
  prm.weight_decay = 1;
  RtModel m;
  memset(&m, 0, sizeof m);
  m.params = &prm;
  m.nparams = 1;
  m.nweights = n;
  float *w = hrand(n, 1), *g = hrand(n, 1), *mo = hrand(n, 0.1f), *ve = hrand(n, 0.01f);
  for (int64_t i = 0; i < n; i++) ve[i] = fabsf(ve[i]);
  float *dw = on_device(w, n), *dg = on_device(g, n), *dm = on_device(mo, n), *dv = on_device(ve, n);
  check_copy("weights_bf16 first cast", dw, n);
  RtDevOpt o = {1, 0.8f, 1 - 1e-4f, 1e-3f, 0.9f, 0.95f, 1e-8f, 1e-3f / 0.19f, sqrtf(1 - 0.9025f)};
  rt_dev_update_params(&m, dw, dg, dm, dv, &o);
  KAdamW h = {o.grad_scale, o.decay, o.beta1, o.beta2, o.eps, o.step_size, o.bc2_sqrt};
  k_adamw(w, g, mo, ve, n, &h);
  float *got = to_host(dw, n);
  check("weights_bf16 adamw masters", got, w, n, 1e-5);
  free(got);
  check_copy("weights_bf16 after adamw", dw, n);
  o.adamw = 0;
  rt_dev_update_params(&m, dw, dg, dm, dv, &o);
  check_copy("weights_bf16 after sgd", dw, n);
  float *w2 = hrand(n, 2);
  rt_dev_from_host(dw, w2, n * 4);
  check_copy("weights_bf16 after a copy in", dw, n);
  rt_dev_free(dw), rt_dev_free(dg), rt_dev_free(dm), rt_dev_free(dv);
  free(w), free(w2), free(g), free(mo), free(ve);
}

static void test_norms(int64_t n, int64_t chunk) {
  float *x = hrand(n, 1), *dx = on_device(x, n);
  RtDevRange r[3] = {{0, 0, n / 4, 0}, {n / 4, 0, n / 2 - n / 4, 0}, {n / 2, 0, n - n / 2, 0}};
  double out[3];
  float got[3], want[3];
  rt_dev_sum_squares(dx, r, 3, out);
  for (int i = 0; i < 3; i++) {
    got[i] = (float)out[i];
    want[i] = (float)k_sum_squares(x + r[i].w, r[i].n);
  }
  check("sum_squares", got, want, 3, 1e-5);
  int64_t nc = (n + chunk - 1) / chunk;
  double *oc = malloc((size_t)nc * sizeof(double));
  float *gc = malloc((size_t)nc * 4), *wc = malloc((size_t)nc * 4);
  rt_dev_sum_squares_chunked(dx, n, chunk, oc);
  for (int64_t c = 0; c < nc; c++) {
    int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    gc[c] = (float)oc[c];
    wc[c] = (float)k_sum_squares(x + c * chunk, end - c * chunk);
  }
  check("sum_squares_chunked", gc, wc, nc, 1e-5);
  rt_dev_free(dx);
  free(x), free(oc), free(gc), free(wc);
}

/* The staged token windows (rt_dev_stage_*), as the training loop uses
 * them: at each step the current slot's copy is taken, the next step's
 * window is written into the other slot's host buffer and put before the
 * current one has been read (a copy into other model memory, as the
 * inputs' loads do); every read must see exactly its own step's tokens.
 * The host buffers must be pinned. */
static void pattern(int32_t *x, int64_t n, int64_t step) {
  for (int64_t i = 0; i < n; i++) x[i] = (int32_t)(step * 1000003 + i);
}

static void test_stage(int64_t n) {
  RtDevStage *s = rt_dev_stage_new(n * 4);
  int32_t *dst = rt_dev_alloc(n * 4, "the inputs");
  int32_t *back = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
  int bad = 0, steps = 6;
  struct cudaPointerAttributes at;
  int pinned = cudaPointerGetAttributes(&at, rt_dev_stage_host(s, 0)) == cudaSuccess &&
               at.type == cudaMemoryTypeHost;
  pattern(rt_dev_stage_host(s, 0), n, 0);
  rt_dev_stage_put(s, 0);
  for (int step = 0; step < steps; step++) {
    int slot = step % 2;
    const int32_t *d = rt_dev_stage_get(s, slot);
    pattern(rt_dev_stage_host(s, 1 - slot), n, step + 1);
    rt_dev_stage_put(s, 1 - slot);
    rt_dev_copy(dst, d, n * 4);
    rt_dev_to_host(back, dst, n * 4);
    pattern(want, n, step);
    bad += memcmp(back, want, (size_t)n * 4) != 0;
  }
  int ok = bad == 0 && pinned;
  printf("%-34s n%-8lld %d of %d steps wrong, host buffers %s  %s\n", "stage (windows)",
         (long long)n, bad, steps, pinned ? "pinned" : "NOT pinned", ok ? "ok" : "FAIL");
  failures += !ok;
  rt_dev_stage_free(s);
  rt_dev_free(dst);
  free(back), free(want);
}

/* The chunk function of the graph test: temporaries += activations. */
static int64_t graph_n;
static void graph_fn(RtCtx *ctx) {
  k_cuda_accumulate((float *)ctx->temporaries, (const float *)ctx->activations, graph_n);
}

static void test_graphs(int64_t n) {
  static const char *const kinds[] = {"plain", "captured", "replayed"};
  float *x = hrand(n, 1), *x2 = hrand(n, 1), *y = hrand(n, 1);
  float *dx = on_device(x, n), *dx2 = on_device(x2, n), *dy = on_device(y, n);
  RtCtx ctx = {0};
  ctx.activations = (unsigned char *)dx;
  ctx.temporaries = (unsigned char *)dy;
  graph_n = n;
  RtDevGraphs *g = NULL;
  RtDevGraphRun want[5] = {RT_DEV_GRAPH_PLAIN, RT_DEV_GRAPH_CAPTURED, RT_DEV_GRAPH_REPLAYED,
                           RT_DEV_GRAPH_REPLAYED, RT_DEV_GRAPH_PLAIN};
  char line[128] = "";
  int bad = 0;
  for (int k = 0; k < 5; k++) {
    if (k == 3) rt_dev_from_host(dx, x2, n * 4); /* a replay reads x as it is now */
    if (k == 4) ctx.activations = (unsigned char *)dx2; /* new pointers: a new warm-up */
    RtDevGraphRun got = rt_dev_graph_call(&g, graph_fn, &ctx);
    bad |= got != want[k];
    snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", k ? " " : "", kinds[got]);
  }
  for (int64_t i = 0; i < n; i++) y[i] = (((y[i] + x[i]) + x[i]) + x[i]) + x2[i] + x2[i];
  float *back = to_host(dy, n);
  printf("graph calls: %s%s\n", line, bad ? "  FAIL (want plain captured replayed replayed plain)" : "");
  failures += bad;
  check("graph replays", back, y, n, 0);
  rt_dev_graph_free(g);
  rt_dev_free(dx), rt_dev_free(dx2), rt_dev_free(dy);
  free(x), free(x2), free(y), free(back);
}

int main(int argc, char **argv) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  int have = err == cudaSuccess && count > 0;
  if (argc > 1 && strcmp(argv[1], "--no-device") == 0) {
    if (have) {
      printf("SKIP: a CUDA device is present, so the no-device error cannot be seen\n");
      return SKIP;
    }
    rt_dev_alloc(64, "a probe"); /* must exit 1 with "no CUDA device" */
    printf("rt_dev_alloc returned without a device\n");
    return 0;
  }
  if (!have) {
    printf("SKIP: no CUDA device (cudaGetDeviceCount: %s)\n",
           err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return SKIP;
  }
  static const int64_t sizes[] = {3, 1000, 1 << 20};
  for (int i = 0; i < 3; i++) {
    test_memory(sizes[i]);
    test_optimizer(sizes[i], 1);
    test_optimizer(sizes[i], 0);
    test_norms(sizes[i], sizes[i] > 100 ? 97 : 2);
    test_weights_bf16(sizes[i]);
    test_stage(sizes[i]);
    test_graphs(sizes[i]);
  }
  printf("%s\n", failures ? "some checks failed" : "all checks passed");
  return failures ? 1 : 0;
}
