/* Unit tests of the runtime's parts, in f32 and f64: the learning-rate
 * schedule, AdamW and SGD against hand computations, the gradient norm and
 * clipping, safetensors round trips, the data windows (order, shift,
 * wrap-around over two shards, shuffling), the initialisation, the
 * sampler and the device layer (copies; the ranged optimizer and sums of
 * squares against the whole-model ones, to the bit). Every check prints the
 * numbers it compares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch.h"
#include "data.h"
#include "device.h"
#include "init.h"
#include "optim.h"
#include "rt.h"
#include "safetensors.h"
#include "sample.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    int ok_ = (cond);                                                                              \
    printf("%s: ", ok_ ? "ok  " : "FAIL");                                                         \
    printf(__VA_ARGS__);                                                                           \
    printf("\n");                                                                                  \
    failures += !ok_;                                                                              \
  } while (0)

/* Relative closeness for the real type at hand. */
#ifdef SHARD_REAL_F64
#define RTOL 1e-12
#else
#define RTOL 2e-6
#endif

static int close_to(double a, double b, double rtol) {
  return fabs(a - b) <= rtol * fmax(fabs(a), fabs(b)) + 1e-300;
}

static char tmpdir[64];

static void test_lr(void) {
  RtFlags f = {.lr = 6e-4, .lr_min = 6e-5, .warmup = 10, .steps = 100};
  struct {
    int64_t s;
    double want;
  } cases[] = {
      {0, 6e-5},                        /* warmup: lr * 1/10 */
      {4, 3e-4},                        /* lr * 5/10 */
      {9, 6e-4},                        /* the end of the warmup */
      {10, 6e-4},                       /* cosine starts at the peak */
      {55, 6e-5 + 0.5 * (6e-4 - 6e-5)}, /* half way: the mean of peak and floor */
      {99, 6e-5 + 0.5 * (1 + cos(M_PI * 89.0 / 90.0)) * (6e-4 - 6e-5)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double got = rt_lr_at(&f, cases[i].s);
    CHECK(close_to(got, cases[i].want, 1e-14), "lr cosine step %lld: %.10e (want %.10e)",
          (long long)cases[i].s, got, cases[i].want);
  }
  f.lr_schedule = RT_SCHED_CONSTANT;
  CHECK(rt_lr_at(&f, 50) == 6e-4, "lr constant step 50: %.3e", rt_lr_at(&f, 50));
  f.warmup = 0;
  f.lr_schedule = RT_SCHED_COSINE;
  CHECK(rt_lr_at(&f, 0) == 6e-4, "lr without warmup step 0: %.3e", rt_lr_at(&f, 0));
}

/* Two parameters, the first decayed, the second not. */
static const RtParam two_params[] = {
    {"w", 1, {3}, 3, 0, RT_INIT_NORMAL, 0, 1, 1, 0, 0, 1, {0}, 0, 0, 0, 0},
    {"b", 1, {2}, 2, 3, RT_INIT_ZEROS, 0, 0, 0, 0, 0, 1, {0}, 0, 0, 0, 0},
};
static const RtModel two_model = {.name = "two", .params = two_params, .nparams = 2, .nweights = 5};

static void test_adamw(void) {
  RtFlags f = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  real w[5] = {0.5, -1.0, 2.0, 0.25, -0.125}, m[5] = {0}, v[5] = {0};
  const real g1[5] = {0.1, -0.2, 0.003, 1.5, 0}, g2[5] = {-0.05, 0.4, 0.001, 0.5, 2};
  double ew[5], em[5] = {0}, ev[5] = {0}, lr = 1e-2, scale = 0.5;
  for (int i = 0; i < 5; i++)
    ew[i] = w[i];
  for (int t = 1; t <= 2; t++) {
    const real *g = t == 1 ? g1 : g2;
    rt_adamw_step(&two_model, w, g, m, v, t, lr, scale, &f);
    /* By hand: decoupled decay, moments, bias correction (torch.optim.AdamW). */
    for (int i = 0; i < 5; i++) {
      double gi = (double)g[i] * scale, wd = i < 3 ? 0.1 : 0;
      ew[i] *= 1 - lr * wd;
      em[i] = 0.9 * em[i] + 0.1 * gi;
      ev[i] = 0.95 * ev[i] + 0.05 * gi * gi;
      double mhat = em[i] / (1 - pow(0.9, t)), vhat = ev[i] / (1 - pow(0.95, t));
      ew[i] -= lr * mhat / (sqrt(vhat) + 1e-8);
    }
    for (int i = 0; i < 5; i++)
      CHECK(close_to(w[i], ew[i], 20 * RTOL), "adamw step %d w[%d] = %.12f (by hand %.12f)", t, i,
            (double)w[i], ew[i]);
  }
}

static void test_sgd(void) {
  RtFlags f = {.weight_decay = 0.1};
  real w[5] = {0.5, -1.0, 2.0, 0.25, -0.125};
  const real g[5] = {0.1, -0.2, 0.003, 1.5, 0};
  rt_sgd_step(&two_model, w, g, 0.1, 0.5, &f);
  double want0 = 0.5 * (1 - 0.01) - 0.1 * 0.1 * 0.5, want3 = 0.25 - 0.1 * 1.5 * 0.5;
  CHECK(close_to(w[0], want0, RTOL), "sgd w[0] = %.10f (want %.10f, decayed)", (double)w[0], want0);
  CHECK(close_to(w[3], want3, RTOL), "sgd w[3] = %.10f (want %.10f, no decay)", (double)w[3],
        want3);
}

static void test_norm(void) {
  enum { N = 1000 };
  static real g[N];
  double want = 0, partials[N];
  for (int i = 0; i < N; i++)
    g[i] = (real)(0.001 * (i % 17) - 0.007), want += (double)g[i] * g[i];
  want = sqrt(want);
  double a = rt_grad_norm(g, N, 7, partials), b = rt_grad_norm(g, N, 64, partials);
  CHECK(close_to(a, want, 1e-12) && close_to(b, want, 1e-12),
        "grad norm %.15f and %.15f (chunks 7, 64) vs %.15f", a, b, want);
  double s = rt_clip_scale(5.0, 1.0);
  CHECK(s == 1.0 / (5.0 + 1e-6), "clip scale of norm 5 to 1: %.12f", s);
  CHECK(rt_clip_scale(0.5, 1.0) == 1 && rt_clip_scale(50, 0) == 1,
        "no clipping below the limit or with --clip 0");
}

static void test_safetensors(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/t.safetensors", tmpdir);
  real a[6], b[1] = {-3.25}, c[4];
  for (int i = 0; i < 6; i++)
    a[i] = (real)(i * 0.1 - 1e-7);
  for (int i = 0; i < 4; i++)
    c[i] = (real)(1.0 / (i + 3));
  int64_t sa[2] = {2, 3}, sb[1] = {1}, sc[3] = {1, 2, 2};
  RtStOut out[3] = {{"a.weight", 2, sa, a, 6}, {"b", 1, sb, b, 1}, {"layers.0.c", 3, sc, c, 4}};
  const char *meta[4] = {"step", "12", "note", "x y"};
  rt_st_write(path, out, 3, meta, 2);
  RtStFile f;
  rt_st_open(&f, path);
  CHECK(f.n == 3 && f.data_start % 8 == 0, "round trip: %d tensors, data at byte %lld", f.n,
        (long long)f.data_start);
  CHECK(!strcmp(rt_st_meta(&f, "step"), "12") && !strcmp(rt_st_meta(&f, "note"), "x y") &&
            !rt_st_meta(&f, "none"),
        "round trip metadata: step=%s note=%s", rt_st_meta(&f, "step"), rt_st_meta(&f, "note"));
  for (int i = 0; i < 3; i++) {
    const RtStTensor *t = rt_st_find(&f, out[i].name);
    real back[6];
    rt_st_read(&f, t, back);
    int same =
        t->rank == out[i].rank && !memcmp(back, out[i].data, (size_t)out[i].numel * sizeof(real));
    for (int d = 0; d < t->rank; d++)
      same = same && t->shape[d] == out[i].shape[d];
    CHECK(same, "round trip %s: dtype %s, rank %d, %lld elements bit-identical", t->name, t->dtype,
          t->rank, (long long)t->numel);
  }
  rt_st_close(&f);
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(access(tmp, F_OK) != 0, "no temp file left behind (%s)", tmp);
}

static void test_data(void) {
  char a[128], b[128], pattern[128];
  snprintf(a, sizeof a, "%s/a.bin", tmpdir);
  snprintf(b, sizeof b, "%s/b.bin", tmpdir);
  snprintf(pattern, sizeof pattern, "%s/*.bin", tmpdir);
  uint16_t ta[100], tb[70];
  for (int i = 0; i < 100; i++)
    ta[i] = (uint16_t)i;
  for (int i = 0; i < 70; i++)
    tb[i] = (uint16_t)(1000 + i);
  rt_data_write_shard(a, ta, 100);
  rt_data_write_shard(b, tb, 70);
  /* batch 2 x seq 4: windows of 9 tokens every 8; a.bin has (100-1)/8 = 12,
   * b.bin (70-1)/8 = 8. */
  RtData *d = rt_data_open(pattern, 2, 4, 2000);
  CHECK(rt_data_windows(d) == 20 && rt_data_tokens(d) == 170,
        "two shards: %lld windows, %lld tokens", (long long)rt_data_windows(d),
        (long long)rt_data_tokens(d));
  int64_t steps[] = {0, 1, 11, 12, 19, 20, 33};
  int64_t want[] = {0, 8, 88, 1000, 1056, 0, 1008};
  int32_t win[9];
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    rt_data_read(d, rt_data_window_at(d, steps[i], 0, 0), win);
    int ok = 1;
    for (int k = 0; k < 9; k++)
      ok = ok && win[k] == want[i] + k;
    CHECK(ok, "no-shuffle step %lld reads tokens %d..%d (want %lld..%lld)", (long long)steps[i],
          win[0], win[8], (long long)want[i], (long long)want[i] + 8);
  }
  /* Shuffled: each epoch visits every window once, epochs differ, and the
   * order is a function of the seed. */
  int seen[20] = {0}, same_next = 1, same_seed = 1, diff_seed = 0;
  int64_t e0[20];
  for (int s = 0; s < 20; s++)
    seen[e0[s] = rt_data_window_at(d, s, 1, 7)]++;
  for (int s = 0; s < 20; s++)
    same_next = same_next && rt_data_window_at(d, 20 + s, 1, 7) == e0[s];
  for (int s = 0; s < 20; s++)
    same_seed = same_seed && rt_data_window_at(d, s, 1, 7) == e0[s];
  for (int s = 0; s < 20; s++)
    diff_seed += rt_data_window_at(d, s, 1, 8) != e0[s];
  int perm = 1;
  for (int k = 0; k < 20; k++)
    perm = perm && seen[k] == 1;
  CHECK(perm, "shuffled epoch 0 is a permutation: first windows %lld %lld %lld", (long long)e0[0],
        (long long)e0[1], (long long)e0[2]);
  CHECK(!same_next, "epoch 1 has another order");
  CHECK(same_seed, "the same seed gives the same order");
  CHECK(diff_seed > 0, "another seed changes %d of 20 positions", diff_seed);
  rt_data_close(d);
}

/* Inputs take window[m*rows + i], targets the token after it. */
static void test_shift(void) {
  static const RtInput in[2] = {{"tokens", 2, {2, 4}, 8, 0, 0, 0},
                                {"targets", 2, {2, 4}, 8, 64, 1, 0}};
  RtChunk c = {.activations = 128, .inputs = in, .ninputs = 2};
  RtModel m = {.name = "shift", .batch = 2, .seq = 4, .chunks = &c, .nchunks = 1};
  int32_t act[32], window[17];
  for (int i = 0; i < 17; i++)
    window[i] = 100 + i;
  Rt rt = {.model = &m, .rows = 8};
  rt.ctx.activations = (unsigned char *)act;
  rt_load_micro(&rt, window, 1);
  CHECK(act[0] == 108 && act[7] == 115 && act[16] == 109 && act[23] == 116,
        "microbatch 1: inputs %d..%d, targets %d..%d (want 108..115, 109..116)", act[0], act[7],
        act[16], act[23]);
}

static void test_init(void) {
  /* The same names at other offsets and in another order. */
  static const RtParam p1[] = {
      {"x", 1, {4000}, 4000, 0, RT_INIT_NORMAL, 0, 0.02, 1, 0, 0, 1, {0}, 0, 0, 0, 0},
      {"y", 1, {10}, 10, 4000, RT_INIT_ONES, 0, 0, 0, 0, 0, 1, {0}, 0, 0, 0, 0}};
  static const RtParam p2[] = {
      {"y", 1, {10}, 10, 0, RT_INIT_ONES, 0, 0, 0, 0, 0, 1, {0}, 0, 0, 0, 0},
      {"x", 1, {4000}, 4000, 64, RT_INIT_NORMAL, 0, 0.02, 1, 0, 0, 1, {0}, 0, 0, 0, 0}};
  RtModel m1 = {.params = p1, .nparams = 2, .nweights = 4010};
  RtModel m2 = {.params = p2, .nparams = 2, .nweights = 4064};
  static real w1[4010], w2[4064];
  rt_init_params(&m1, w1, 42);
  rt_init_params(&m2, w2, 42);
  CHECK(!memcmp(w1, w2 + 64, 4000 * sizeof(real)) && w1[4000] == 1 && w2[0] == 1,
        "init depends on the name, not the layout");
  double mean = 0, var = 0;
  for (int i = 0; i < 4000; i++)
    mean += w1[i] / 4000.0;
  for (int i = 0; i < 4000; i++)
    var += (w1[i] - mean) * (w1[i] - mean) / 4000.0;
  CHECK(fabs(mean) < 0.002 && fabs(sqrt(var) - 0.02) < 0.002, "normal(0, 0.02): mean %.5f std %.5f",
        mean, sqrt(var));
  rt_init_params(&m1, w2, 43);
  CHECK(memcmp(w1, w2, 4000 * sizeof(real)), "another seed, other weights");
}

static void test_sample(void) {
  real logits[5] = {0.1, 2.0, -1.0, 1.9, 0.0};
  double scratch[10];
  RtRng rng;
  rt_rng_seed(&rng, 1);
  CHECK(rt_sample_pick(logits, 5, 0, 0, &rng, scratch) == 1, "temperature 0 picks the largest");
  int counts[5] = {0};
  for (int i = 0; i < 20000; i++)
    counts[rt_sample_pick(logits, 5, 1.0, 2, &rng, scratch)]++;
  double want = exp(2.0) / (exp(2.0) + exp(1.9)), got = counts[1] / 20000.0;
  CHECK(counts[0] + counts[2] + counts[4] == 0 && fabs(got - want) < 0.02,
        "top-k 2: only ids 1 and 3 (%d, %d), p(1) %.3f (want %.3f)", counts[1], counts[3], got,
        want);
}

/* The device layer: copies round trip, and ZeRO-1's ranged update and sums
 * of squares give the bits of the whole-model ones, whatever the cuts. */
enum { DEV_A = 1000, DEV_B = 300, DEV_N = DEV_A + DEV_B };
static const RtParam dev_params[] = {
    {"a", 1, {DEV_A}, DEV_A, 0, RT_INIT_NORMAL, 0, 1, 1, 0, 0, 1, {0}, 0, 0, 0, 0},
    {"b", 1, {DEV_B}, DEV_B, DEV_A, RT_INIT_ZEROS, 0, 0, 0, 0, 0, 1, {0}, 0, 0, 0, 0},
};
static const RtModel dev_model = {.name = "dev", .params = dev_params, .nparams = 2,
                                  .nweights = DEV_N};

static void test_device(void) {
  real host[DEV_N], back[DEV_N];
  for (int i = 0; i < DEV_N; i++)
    host[i] = (real)(0.001 * (i % 29) - 0.01);
  real *w[2], *g = rt_dev_alloc(DEV_N * (int64_t)sizeof(real), "gradients");
  real *m[2], *v[2];
  rt_dev_from_host(g, host, sizeof host);
  rt_dev_to_host(back, g, sizeof back);
  CHECK(!memcmp(host, back, sizeof host), "device copies round trip %d reals", DEV_N);
  /* Runs cut at odd places, never across the parameters' boundary. */
  const RtDevRange r[] = {{0, 0, 333, 1}, {333, 333, 667, 1}, {DEV_A, DEV_A, 1, 0},
                          {DEV_A + 1, DEV_A + 1, DEV_B - 1, 0}};
  RtFlags f = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  for (int adamw = 0; adamw <= 1; adamw++) {
    for (int k = 0; k < 2; k++) {
      w[k] = rt_dev_alloc(DEV_N * (int64_t)sizeof(real), "weights");
      m[k] = rt_dev_alloc(DEV_N * (int64_t)sizeof(real), "m");
      v[k] = rt_dev_alloc(DEV_N * (int64_t)sizeof(real), "v");
      rt_dev_from_host(w[k], back, sizeof back);
      rt_dev_zero(m[k], DEV_N * (int64_t)sizeof(real));
      rt_dev_zero(v[k], DEV_N * (int64_t)sizeof(real));
    }
    RtDevOpt o = rt_opt_consts(&f, adamw, 3, 1e-2, 0.5);
    rt_dev_update_params(&dev_model, w[0], g, m[0], v[0], &o);
    rt_dev_update_ranges(r, 4, w[1], g, m[1], v[1], &o);
    rt_dev_to_host(host, w[0], sizeof host);
    rt_dev_to_host(back, w[1], sizeof back);
    CHECK(!memcmp(host, back, sizeof host), "%s over 4 ranges = over the parameters, to the bit",
          adamw ? "adamw" : "sgd");
    for (int k = 0; k < 2; k++)
      rt_dev_free(w[k]), rt_dev_free(m[k]), rt_dev_free(v[k]);
  }
  const RtDevRange chunks[] = {{0, 0, 512, 0}, {512, 0, 512, 0}, {1024, 0, DEV_N - 1024, 0}};
  double a[3], b[3];
  rt_dev_sum_squares(g, chunks, 3, a);
  rt_dev_sum_squares_chunked(g, DEV_N, 512, b);
  CHECK(!memcmp(a, b, sizeof a), "sums of squares over ranges = over chunks: %.15f %.15f %.15f",
        a[0], a[1], a[2]);
  rt_dev_free(g);
  /* Staged windows as the training loop uses them: the next slot written
   * and put before the current one is read. */
  RtDevStage *st = rt_dev_stage_new(DEV_N * 4);
  int32_t got[DEV_N], bad = 0;
  for (int i = 0; i < DEV_N; i++) ((int32_t *)rt_dev_stage_host(st, 0))[i] = i;
  rt_dev_stage_put(st, 0);
  for (int step = 0; step < 4; step++) {
    const int32_t *d = rt_dev_stage_get(st, step % 2);
    int32_t *next = rt_dev_stage_host(st, 1 - step % 2);
    for (int i = 0; i < DEV_N; i++) next[i] = (step + 1) * 7919 + i;
    rt_dev_stage_put(st, 1 - step % 2);
    rt_dev_to_host(got, d, sizeof got);
    for (int i = 0; i < DEV_N; i++) bad += got[i] != step * 7919 + i;
  }
  CHECK(bad == 0, "staged windows: 4 steps, %d tokens wrong", bad);
  rt_dev_stage_free(st);
}

/* XXH64 against the reference implementation's published values, the
 * streaming form against the one-shot one at every split, and rt_st_verify
 * on a written file, a copy with one byte flipped and one with two tensor
 * names swapped in the header. */
static void test_checksums(void) {
  static const struct {
    const char *text;
    unsigned long long want;
  } known[] = {{"", 0xef46db3751d8e999ull}, {"a", 0xd24ec4f1a98c6e5bull},
               {"abc", 0x44bc2cf5ad770999ull}};
  for (int i = 0; i < 3; i++) {
    unsigned long long got = rt_xxh64(known[i].text, strlen(known[i].text));
    CHECK(got == known[i].want, "xxh64(\"%s\") = %016llx (reference %016llx)", known[i].text, got,
          known[i].want);
  }
  unsigned char buf[300];
  for (int i = 0; i < 300; i++) buf[i] = (unsigned char)(i * 37 + 11);
  uint64_t whole = rt_xxh64(buf, sizeof buf);
  int differ = 0;
  for (size_t cut = 0; cut <= sizeof buf; cut++) {
    RtXxh64 h;
    rt_xxh64_init(&h);
    rt_xxh64_update(&h, buf, cut / 3);
    rt_xxh64_update(&h, buf + cut / 3, cut - cut / 3);
    rt_xxh64_update(&h, buf + cut, sizeof buf - cut);
    differ += rt_xxh64_digest(&h) != whole;
  }
  CHECK(differ == 0, "xxh64 of 300 bytes in three pieces at 301 cuts: %d differ from %016llx",
        differ, (unsigned long long)whole);
  char path[160], bad[160], cmd[1200];
  snprintf(path, sizeof path, "%s/sums.safetensors", tmpdir);
  real a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  int64_t shape[1] = {4};
  RtStOut out[2] = {{"alpha", 1, shape, a, 4}, {"beta", 1, shape, b, 4}};
  rt_st_write(path, out, 2, NULL, 0);
  RtStFile f;
  RtErr e;
  rt_st_open(&f, path);
  int rc = rt_st_verify(&f, &e);
  rt_st_close(&f);
  CHECK(rc == 1, "verify of a file as written: %d (want 1)", rc);
  /* One byte of the last tensor's data flipped (the file's last byte). */
  snprintf(bad, sizeof bad, "%s/flipped.safetensors", tmpdir);
  snprintf(cmd, sizeof cmd, "cp %s %s && printf '\\377' | dd of=%s bs=1 seek=$(($(stat -c %%s %s) - 1)) "
           "conv=notrunc 2>/dev/null", path, bad, bad, bad);
  CHECK(system(cmd) == 0, "a copy with its last byte flipped: %s", bad);
  rt_st_open(&f, bad);
  rc = rt_st_verify(&f, &e);
  rt_st_close(&f);
  CHECK(rc == -1 && strstr(e.msg, "tensor beta does not match its checksum"),
        "verify of the flipped copy: %d, %s", rc, e.msg);
  /* The names swapped in the header (same length, so offsets stay). */
  RtStOut swapped[2] = {{"gamma", 1, shape, a, 4}, {"delta", 1, shape, b, 4}};
  rt_st_write(bad, swapped, 2, NULL, 0);
  snprintf(cmd, sizeof cmd, "sed -i '1s/\"gamma\"/\"XXXXX\"/; 1s/\"delta\"/\"gamma\"/; 1s/\"XXXXX\"/\"delta\"/' %s",
           bad);
  CHECK(system(cmd) == 0, "names swapped by sed in %s", bad);
  rt_st_open(&f, bad);
  rc = rt_st_verify(&f, &e);
  rt_st_close(&f);
  CHECK(rc == -1 && strstr(e.msg, "does not match its checksum"),
        "verify with two names swapped: %d, %s", rc, e.msg);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/rt_unit_XXXXXX");
  if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
  printf("runtime unit tests (%s)\n", RT_REAL_NAME);
  test_lr();
  test_adamw();
  test_sgd();
  test_norm();
  test_safetensors();
  test_data();
  test_shift();
  test_init();
  test_sample();
  test_device();
  test_checksums();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
  printf("%s: %d failure%s\n", failures ? "FAILED" : "passed", failures, failures == 1 ? "" : "s");
  return failures != 0;
}
