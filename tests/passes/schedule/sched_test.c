/* Tests of the pipeline schedules and their verifier (passes/schedule.c,
 * passes/schedule_verify.c). One program, one mode per ctest entry:
 *
 *   sched_test props      every schedule over p in 1..16 and 64, v in 1..8,
 *                         m in p..8p (and m not a multiple of p where the
 *                         schedule allows): the tables verify, the step in
 *                         unit time is (v m + p - 1)(F + B), so the bubble
 *                         fraction (bubble / ideal) is (p - 1)/(v m), for
 *                         B = F and B = 2F; stashes and message counts
 *   sched_test example    the interleaved order for p=2, v=2, m=4 equals
 *                         the worked example of docs/schedules.md
 *   sched_test broken     two swapped receives, and two sends to one peer
 *                         swapped in a batch: rejected, naming the stages
 *                         and actions (the output is checked as a golden)
 *   sched_test unbatched  1F1B with every batch split into lone messages
 *                         hangs under rendezvous, as Megatron's would
 *                         (golden: the deadlock report)
 *   sched_test custom     the schedule docs/schedules.md adds as its worked
 *                         example builds and verifies
 *   sched_test groups     interleaving in microbatch groups of N (--vpp-group)
 *                         over p <= 8, v <= 4, m <= 3p + 3 and every N:
 *                         accepted exactly where Megatron-LM accepts, the
 *                         compute order equal to an independent
 *                         transcription of Megatron-LM's, the stash its
 *                         warm-up plus one, the bubble p - 1
 *   sched_test file       1F1B written as a schedule file gives the built-in
 *                         tables for p <= 8 and p <= m <= 3p + 1; bad
 *                         files (a hang, an action missing or twice, a
 *                         backward first, syntax) are explained (golden)
 *   sched_test zb         the zero-bubble schedules over p <= 16, m <= 4p + 3:
 *                         the tables verify, the bubble with F = B = W = 1
 *                         equals the formula where there is one ((p - 1)/(3m)
 *                         for zb-h1, m >= p), the stash before B stays within
 *                         1F1B's (zb-h1) and the slots held until W within
 *                         1F1B's most; zb-v's bubble at most zb-h1's
 *   sched_test scale      the paper's 1T shape, p=64, v=2, m=512: build and
 *                         verify well under a second, timed and printed
 *
 * Exit status 0 when every check holds; each failure is printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "passes/schedule.h"

static int failures;

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      if (failures++ < 20) {                                                                   \
        printf("FAIL %s:%d: ", __FILE__, __LINE__);                                           \
        printf(__VA_ARGS__);                                                                   \
        printf("\n");                                                                          \
      }                                                                                        \
    }                                                                                          \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* ----------------------------------------------------------- properties */

/* Whether the builder itself turns the configuration down (rather than
 * the verifier its tables). */
static bool refuses(const SchedDef *def, const SchedOptions *o) {
  char *error = NULL;
  RtSchedule *s = sched_build_unverified(def, o, &error);
  free(error);
  sched_free(s);
  return !s;
}

/* One configuration: build, verify and check the figures against what the
 * schedule's entry promises. Returns false when the builder refuses it. */
static bool check_one(const SchedDef *def, int p, int v, int m, int dp, long *cases) {
  const char *name = def->name;
  SchedOptions o = {.pp = p, .vpp = v, .microbatches = m, .dp = dp, .buckets_per_chunk = 2,
                    .shape = {3, {1, 16, 8}}};
  /* B = 2F as well where it is cheap: p = 64 alone holds most of the work. */
  for (int ratio = 1; ratio <= (p <= 16 ? 2 : 1); ratio++) {
    SchedTimes t = {1, ratio, 1};
    SchedReport rep;
    RtSchedule *s = sched_build(def, &o, &t, false, &rep);
    if (!s && ratio == 1 && refuses(def, &o)) {
      sched_report_free(&rep);
      return false;
    }
    ++*cases;
    CHECK(s, "%s p=%d v=%d m=%d: %s", name, p, v, m, rep.error);
    if (!s) continue;
    /* The identity: every stage computes for m v (F + B) and idles for its
     * bubble (p - 1 units of F + B for the schedules registered so far). */
    int bubble = def->bubble(p, v, m);
    double step = (double)(m * v + bubble) * (1 + ratio), ideal = (double)m * v * (1 + ratio);
    double want = (double)bubble / ((double)v * m);
    CHECK(rep.makespan == step && rep.ideal == ideal, "%s p=%d v=%d m=%d B=%dF: step %g ideal %g, "
          "want %g and %g", name, p, v, m, ratio, rep.makespan, rep.ideal, step, ideal);
    CHECK(fabs(rep.bubble_fraction - want) < 1e-12, "%s p=%d v=%d m=%d: bubble %.17g, want %.17g",
          name, p, v, m, rep.bubble_fraction, want);
    CHECK(fabs(rep.idle_fraction - (double)bubble / (m * v + bubble)) < 1e-12,
          "%s p=%d v=%d m=%d: idle fraction %g", name, p, v, m, rep.idle_fraction);
    /* Every stage holds its warm-up plus the one forward before the first
     * backward (so 1F1B's first stage at most p microbatches, GPipe's m). */
    for (int r = 0; r < p; r++) {
      int w = def->warmup(p, v, m, r), peak = w + 1 < m * v ? w + 1 : m * v;
      CHECK(rep.peak_stash[r] == peak, "%s p=%d v=%d m=%d stage %d: stash %d, want %d", name, p, v,
            m, r, rep.peak_stash[r], peak);
    }
    int64_t messages = p > 1 ? 2LL * m * (p * v - 1) : 0;
    CHECK(rep.messages == messages, "%s p=%d v=%d m=%d: %lld messages, want %lld", name, p, v, m,
          (long long)rep.messages, (long long)messages);
    sched_report_free(&rep);
    sched_free(s);
  }
  return true;
}

static int props(void) {
  static const int ps[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 64};
  double t0 = now_ms();
  long cases = 0;
  /* Every registered schedule over the whole grid; each must accept some
   * of it (gpipe and 1f1b take v = 1, interleaved v > 1 and m a multiple
   * of p), and the sweep checks every configuration it accepts. */
  for (const SchedDef *def = sched_registry; def->name; def++) {
    long accepted = 0;
    if (!def->bubble) continue; /* zero-bubble: sched_test zb */
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
      int p = ps[i];
      /* m in p..8p, then below p and between multiples of p. */
      int ms[13], nm = 0;
      for (int k = 1; k <= 8; k++) ms[nm++] = k * p;
      int odd[] = {1, p - 1, p + 1, 2 * p + 1, 3 * p - 1};
      for (int j = 0; j < 5; j++)
        if (odd[j] >= 1 && odd[j] % p != 0) ms[nm++] = odd[j];
      for (int v = 1; v <= 8; v++)
        for (int j = 0; j < nm; j++) {
          int dp = j % 3 == 1 ? 4 : j % 3 == 2 ? 2 : 1;
          accepted += check_one(def, p, v, ms[j], dp, &cases);
        }
    }
    CHECK(accepted > 0, "%s accepts none of the sweep's configurations", def->name);
  }
  /* What each schedule refuses, and why. */
  SchedOptions bad_m = {.pp = 4, .vpp = 2, .microbatches = 6};
  SchedOptions bad_v = {.pp = 4, .vpp = 1, .microbatches = 8};
  SchedOptions two_v = {.pp = 4, .vpp = 2, .microbatches = 8};
  SchedReport rep;
  CHECK(!sched_build(sched_find("interleaved"), &bad_m, NULL, false, &rep) &&
        strstr(rep.error, "multiple of the pipeline stages p = 4"), "m = 6, p = 4: %s", rep.error);
  sched_report_free(&rep);
  CHECK(!sched_build(sched_find("interleaved"), &bad_v, NULL, false, &rep) &&
        strstr(rep.error, "needs v > 1"), "v = 1: %s", rep.error);
  sched_report_free(&rep);
  CHECK(!sched_build(sched_find("1f1b"), &two_v, NULL, false, &rep) &&
        strstr(rep.error, "one chunk per stage"), "1f1b v = 2: %s", rep.error);
  sched_report_free(&rep);
  printf("%ld configurations and timings in %.0f ms: %d failures\n", cases,
         now_ms() - t0, failures);
  return failures > 0;
}

/* ------------------------------------------------------- zero bubble */

/* One zero-bubble configuration with F, B and W of one unit: the tables
 * verify; the bubble equals the schedule's formula where it has one; no
 * stage holds more than 1F1B's stash before its B (p - r, at most m) and
 * more slots until its W than 1F1B's first stage (p, at most m; in chunks
 * of 1/v of the layers, v times as many). Returns whether the builder
 * took the configuration. */
static bool check_zb(const SchedDef *def, int p, int v, int m, int dp, long *cases, double *worst) {
  SchedOptions o = {.pp = p, .vpp = v, .microbatches = m, .dp = dp, .buckets_per_chunk = 2,
                    .shape = {3, {1, 16, 8}}};
  if (refuses(def, &o)) return false;
  SchedReport rep;
  RtSchedule *s = sched_build(def, &o, NULL, false, &rep);
  ++*cases;
  CHECK(s, "%s p=%d v=%d m=%d: %s", def->name, p, v, m, rep.error);
  if (!s) return true;
  double want = def->bubble_w(p, v, m);
  CHECK(rep.ideal == 3.0 * v * m, "%s p=%d v=%d m=%d: ideal %g", def->name, p, v, m, rep.ideal);
  if (want >= 0)
    CHECK(fabs(rep.bubble_fraction - want) < 1e-12, "%s p=%d v=%d m=%d: bubble %.17g, want %.17g",
          def->name, p, v, m, rep.bubble_fraction, want);
  /* Two chunks per stage do no worse than one: zb-v's bubble (which has
   * no formula) stays within zb-h1's. */
  if (def->vshape && m >= p)
    CHECK(rep.bubble_fraction <= sched_bubble_zb_h1(p, 1, m) + 1e-12, "%s p=%d m=%d: bubble %g "
          "above zb-h1's %g", def->name, p, m, rep.bubble_fraction, sched_bubble_zb_h1(p, 1, m));
  if (rep.bubble_fraction > *worst) *worst = rep.bubble_fraction;
  int w = 0;
  for (int r = 0; r < p; r++)
    for (int i = 0; i < s->stages[r].n; i++) w += s->stages[r].actions[i].kind == RT_SCHED_W;
  CHECK(w == p * v * m, "%s p=%d v=%d m=%d: %d W actions", def->name, p, v, m, w);
  for (int r = 0; r < p; r++) {
    /* The V turns around on the last stage, where 1F1B's bound no longer
     * falls with r: zb-v keeps to 1F1B's most on every stage. */
    int stash = def->vshape ? 2 * (p < m ? p : m) : (p - r < m ? p - r : m) * v;
    int held = (p < m ? p : m) * v;
    CHECK(rep.peak_stash[r] <= stash && rep.peak_held[r] <= held, "%s p=%d v=%d m=%d stage %d: "
          "stash %d (1F1B's %d), held %d (1F1B's most %d)", def->name, p, v, m, r,
          rep.peak_stash[r], stash, rep.peak_held[r], held);
  }
  sched_report_free(&rep);
  sched_free(s);
  return true;
}

static int zb(void) {
  static const int ps[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16};
  double t0 = now_ms();
  long cases = 0;
  for (const SchedDef *def = sched_registry; def->name; def++) {
    if (!def->bubble_w) continue;
    long accepted = 0;
    double worst = 0;
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
      for (int v = 1; v <= 2; v++)
        for (int m = 1; m <= 4 * ps[i] + 3; m++)
          accepted += check_zb(def, ps[i], v, m, m % 3 == 1 ? 2 : 1, &cases, &worst);
    CHECK(accepted > 0, "%s accepts none of the sweep's configurations", def->name);
    SchedReport rep;
    SchedOptions o = {.pp = 4, .vpp = def->vshape ? 2 : 1, .microbatches = 8};
    RtSchedule *s = sched_build(def, &o, NULL, false, &rep);
    printf("%s: %ld configurations; p=4 m=8: bubble %.4f of the ideal step (formula %.4f), "
           "stash by stage", def->name, accepted, s ? rep.bubble_fraction : -1,
           def->bubble_w(4, o.vpp, 8));
    for (int r = 0; s && r < 4; r++) printf(" %d/%d", rep.peak_stash[r], rep.peak_held[r]);
    printf(" (before B / until W); worst bubble %.4f\n", worst);
    sched_report_free(&rep);
    sched_free(s);
  }
  printf("%ld zero-bubble configurations in %.0f ms: %d failures\n", cases, now_ms() - t0, failures);
  return failures > 0;
}

/* ------------------------------------------------- the worked example */

/* Stage r's forwards and backwards, as docs/schedules.md writes them. */
static void compute_order(const RtSchedule *s, int r, char *out, size_t size) {
  out[0] = 0;
  for (int i = 0; i < s->stages[r].n; i++) {
    const RtSchedAction *a = &s->stages[r].actions[i];
    if (a->kind != RT_SCHED_F && a->kind != RT_SCHED_B) continue;
    char buf[64];
    snprintf(out + strlen(out), size - strlen(out), "%s%s", out[0] ? " " : "",
             rt_sched_action_str(a, buf, sizeof buf));
  }
}

static int example(void) {
  static const char *const want[2] = {
      "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0",
      "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0",
  };
  SchedOptions o = {.pp = 2, .vpp = 2, .microbatches = 4};
  SchedReport rep;
  RtSchedule *s = sched_build(sched_find("interleaved"), &o, NULL, false, &rep);
  CHECK(s, "%s", rep.error);
  if (!s) return 1;
  for (int r = 0; r < 2; r++) {
    char got[512];
    compute_order(s, r, got, sizeof got);
    printf("rank %d: %s\n", r, got);
    CHECK(!strcmp(got, want[r]), "rank %d: want %s", r, want[r]);
  }
  /* "The bubble is 1/8 of the step instead of 1/4 without interleaving." */
  CHECK(rep.bubble_fraction == 0.125, "bubble %g", rep.bubble_fraction);
  SchedOptions flat = {.pp = 2, .vpp = 1, .microbatches = 4};
  SchedReport rep1;
  RtSchedule *s1 = sched_build(sched_find("1f1b"), &flat, NULL, false, &rep1);
  CHECK(s1 && rep1.bubble_fraction == 0.25, "1f1b bubble %g", rep1.bubble_fraction);
  printf("bubble %g (1f1b: %g)\n", rep.bubble_fraction, rep1.bubble_fraction);
  sched_report_free(&rep), sched_report_free(&rep1);
  sched_free(s), sched_free(s1);
  return failures > 0;
}

/* ------------------------------------------------------- broken tables */

/* Swaps the n-th and (n+1)-th `kind` (SEND or RECV) of stage r, keeping
 * each position's batch flag, as a careless edit of a table would. */
static void swap_ops(RtSchedule *s, int r, RtSchedKind kind, int n) {
  RtSchedAction *a = (RtSchedAction *)s->stages[r].actions;
  int at[2], found = 0, seen = 0;
  for (int i = 0; i < s->stages[r].n && found < 2; i++)
    if (a[i].kind == kind && seen++ >= n) at[found++] = i;
  if (found < 2) abort();
  RtSchedAction x = a[at[0]];
  uint8_t f0 = a[at[0]].flags, f1 = a[at[1]].flags;
  a[at[0]] = a[at[1]], a[at[1]] = x;
  a[at[0]].flags = f0, a[at[1]].flags = f1;
}

static bool verify_and_print(const char *what, RtSchedule *s) {
  SchedReport rep;
  bool ok = sched_verify(s, NULL, false, &rep);
  printf("%s: %s\n%s", what, ok ? "verifies" : "rejected", rep.error ? rep.error : "");
  sched_report_free(&rep);
  return ok;
}

static int broken(void) {
  char *error;
  SchedOptions o = {.pp = 4, .vpp = 1, .microbatches = 8};
  RtSchedule *s = sched_build_unverified(sched_find("1f1b"), &o, &error);
  CHECK(verify_and_print("1f1b p=4 m=8", s), "the intact table must verify");
  swap_ops(s, 2, RT_SCHED_RECV, 0);
  CHECK(!verify_and_print("1f1b p=4 m=8, stage 2's first two receives swapped", s), "accepted");
  sched_free(s);
  SchedOptions oi = {.pp = 2, .vpp = 2, .microbatches = 4};
  s = sched_build_unverified(sched_find("interleaved"), &oi, &error);
  swap_ops(s, 0, RT_SCHED_RECV, 1);
  CHECK(!verify_and_print("interleaved p=2 v=2 m=4, stage 0's 2nd and 3rd receives swapped", s),
        "accepted");
  sched_free(s);
  /* With p = 2 the messages each way between the two stages are
   * activations and gradients mixed, matched by position. Stage 0's 5th and 6th sends (actions 13 and 15) share a batch and
   * both go to stage 1: swapped, every message is still sent and received
   * once, after what it sends is computed, and the batch still completes,
   * so only the posting order tells that stage 1's 5th receive (a
   * gradient) would get the activation. Swapping stage 1's matching
   * receives (actions 14 and 15, one batch) as well restores agreement:
   * the table then verifies with the intact one's step, which shows the
   * keys all pair and nothing hangs. */
  s = sched_build_unverified(sched_find("interleaved"), &oi, &error);
  SchedReport rep;
  bool ok = sched_verify(s, NULL, false, &rep);
  double intact = rep.makespan;
  CHECK(ok, "the intact table must verify: %s", rep.error);
  sched_report_free(&rep);
  swap_ops(s, 0, RT_SCHED_SEND, 4);
  ok = sched_verify(s, NULL, false, &rep);
  int lines = 0;
  for (const char *c = rep.error; c && *c; c++) lines += *c == '\n';
  printf("interleaved p=2 v=2 m=4, stage 0's 5th and 6th sends (one batch, both to stage 1) "
         "swapped: %s, %d error line\n%s", ok ? "verifies" : "rejected", lines,
         rep.error ? rep.error : "");
  CHECK(!ok && lines == 1 && strstr(rep.error, "its 5th message to stage 1") &&
        strstr(rep.error, "RECV(grad, from 0, c0, mb0) receives its 5th from stage 0"),
        "want one posting-order error at the 5th message");
  sched_report_free(&rep);
  swap_ops(s, 1, RT_SCHED_RECV, 4);
  ok = sched_verify(s, NULL, false, &rep);
  printf("and stage 1's 5th and 6th receives swapped to match: %s, step %g (intact: %g)\n%s",
         ok ? "verifies" : "rejected", rep.makespan, intact, rep.error ? rep.error : "");
  CHECK(ok && rep.makespan == intact && intact == (4 * 2 + 2 - 1) * 2, "step %g, intact %g",
        rep.makespan, intact);
  sched_report_free(&rep);
  sched_free(s);
  return failures > 0;
}

/* Megatron batches a send with the receive that follows it: split, the
 * steady state of 1F1B has neighbours each sending to the other first. */
static int unbatched(void) {
  char *error;
  SchedOptions o = {.pp = 4, .vpp = 1, .microbatches = 8};
  RtSchedule *s = sched_build_unverified(sched_find("1f1b"), &o, &error);
  for (int r = 0; r < s->pp; r++)
    for (int i = 0; i < s->stages[r].n; i++) ((RtSchedAction *)s->stages[r].actions)[i].flags = 0;
  CHECK(!verify_and_print("1f1b p=4 m=8 without batches", s), "accepted");
  sched_free(s);
  return failures > 0;
}

/* --------------------------------------- the example of docs/schedules.md */

/* GPipe with the backwards in reverse order (last microbatch first), the
 * order autograd would run them in one graph. */
static bool build_gpipe_lifo(SchedBuilder *b, const SchedOptions *o) {
  if (o->vpp != 1) return sched_fail(b, "gpipe-lifo runs one chunk per stage (v = %d)", o->vpp);
  for (int r = 0; r < o->pp; r++) {
    for (int i = 0; i < o->microbatches; i++) {
      sched_recv(b, r, RT_SCHED_ACT, 0, i); /* skipped on the first stage */
      sched_f(b, r, 0, i);
      sched_send(b, r, RT_SCHED_ACT, 0, i); /* skipped on the last stage */
    }
    for (int i = o->microbatches - 1; i >= 0; i--) {
      sched_recv(b, r, RT_SCHED_GRAD, 0, i);
      sched_b(b, r, 0, i);
      sched_send(b, r, RT_SCHED_GRAD, 0, i);
    }
  }
  return true;
}

static int custom(void) {
  /* Its promises are GPipe's: the same bubble, every forward first. */
  const SchedDef *gpipe = sched_find("gpipe");
  const SchedDef lifo = {"gpipe-lifo", "GPipe, backwards last microbatch first",
                         build_gpipe_lifo, gpipe->bubble, gpipe->warmup, NULL, false};
  long cases = 0;
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 16; m++)
      CHECK(check_one(&lifo, p, 1, m, 2, &cases), "gpipe-lifo p=%d m=%d: refused", p, m);
  printf("gpipe-lifo: %ld configurations, %d failures\n", cases, failures);
  return failures > 0;
}

/* ------------------------------------------- interleaving in groups of N */

/* Megatron-LM's interleaved order written out directly from its
 * description (REFERENCE.md, "Pipeline schedules"), independently of the
 * builder: the forward list takes the microbatches in groups of n, chunk 0
 * of the whole group, then chunk 1, ..., the last group what remains; the
 * k-th backward takes the k-th position with the chunk reversed; stage r
 * runs min(2(p - r - 1) + (v - 1) n, m v) forwards, then a forward and a
 * backward at a time, then the remaining backwards. */
static void megatron_order(int p, int v, int m, int n, int r, char *out, size_t size) {
  int total = m * v, k = 0;
  int *mb = malloc(sizeof(int) * (size_t)total), *ch = malloc(sizeof(int) * (size_t)total);
  for (int g = 0; g < m; g += n) {
    int end = g + n >= m ? m : g + n;
    for (int c = 0; c < v; c++)
      for (int i = g; i < end; i++) mb[k] = i, ch[k++] = c;
  }
  int warm = 2 * (p - r - 1) + (v - 1) * n;
  if (warm > total) warm = total;
  out[0] = 0;
#define ADD(kind, j, c) snprintf(out + strlen(out), size - strlen(out), "%s%s%dc%d", out[0] ? " " : "", kind, mb[j], c)
  for (int j = 0; j < warm; j++) ADD("F", j, ch[j]);
  for (int j = 0; j < total - warm; j++) {
    ADD("F", warm + j, ch[warm + j]);
    ADD("B", j, v - 1 - ch[j]);
  }
  for (int j = total - warm; j < total; j++) ADD("B", j, v - 1 - ch[j]);
#undef ADD
  free(mb), free(ch);
}

/* Megatron-LM's conditions: m >= p, p <= n <= m, and no last group
 * shorter than p (0 < m mod n < p). */
static bool megatron_accepts(int p, int m, int n) {
  return m >= p && n >= p && n <= m && !(m % n > 0 && m % n < p);
}

static void compute_order(const RtSchedule *s, int r, char *out, size_t size);

static int groups(void) {
  double t0 = now_ms();
  long cases = 0, accepted = 0;
  size_t size = 1 << 16;
  char *got = malloc(size), *want = malloc(size);
  for (int p = 1; p <= 8; p++)
    for (int v = 2; v <= 4; v++)
      for (int m = 1; m <= 3 * p + 3; m++)
        for (int n = 0; n <= m + 1; n++) {
          if (n > 0 && n < p - 1) continue;
          int eff = n > 0 ? n : p;
          SchedOptions o = {.pp = p, .vpp = v, .microbatches = m, .vpp_group = n,
                            .dp = m % 2 ? 1 : 2, .shape = {3, {1, 16, 8}}};
          SchedReport rep;
          RtSchedule *s = sched_build(sched_find("interleaved"), &o, NULL, false, &rep);
          bool ok = megatron_accepts(p, m, eff);
          cases++;
          CHECK(!s == !ok, "p=%d v=%d m=%d N=%d: %s, Megatron %s it: %s", p, v, m, n,
                s ? "built" : "refused", ok ? "accepts" : "refuses", rep.error ? rep.error : "");
          /* A refusal names a group size that works when there is one. */
          if (!s && m >= p && rep.error)
            CHECK(strstr(rep.error, "--vpp-group "), "p=%d m=%d N=%d: %s", p, m, n, rep.error);
          if (s) {
            accepted++;
            for (int r = 0; r < p; r++) {
              compute_order(s, r, got, size);
              megatron_order(p, v, m, eff, r, want, size);
              CHECK(!strcmp(got, want), "p=%d v=%d m=%d N=%d stage %d:\n  got  %s\n  want %s", p,
                    v, m, n, r, got, want);
              int w = 2 * (p - r - 1) + (v - 1) * eff, peak = w + 1 < m * v ? w + 1 : m * v;
              CHECK(rep.peak_stash[r] == peak, "p=%d v=%d m=%d N=%d stage %d: stash %d, want %d",
                    p, v, m, n, r, rep.peak_stash[r], peak);
            }
            /* The bubble of the registry's promise, p - 1 forward-backward
             * pairs, holds for every group size. */
            CHECK(rep.makespan == 2.0 * (m * v + p - 1), "p=%d v=%d m=%d N=%d: step %g, want %d",
                  p, v, m, n, rep.makespan, 2 * (m * v + p - 1));
            CHECK(rep.messages == (p > 1 ? 2LL * m * (p * v - 1) : 0), "p=%d v=%d m=%d N=%d: "
                  "%lld messages", p, v, m, n, (long long)rep.messages);
          }
          sched_report_free(&rep);
          sched_free(s);
        }
  /* The default group of p leaves the tables of m a multiple of p as they
   * were: N = p given explicitly builds the same tables. */
  for (int p = 2; p <= 6; p++)
    for (int m = p; m <= 4 * p; m += p) {
      SchedOptions a = {.pp = p, .vpp = 3, .microbatches = m, .dp = 2};
      SchedOptions b = a;
      b.vpp_group = p;
      char *e1, *e2;
      RtSchedule *x = sched_build_unverified(sched_find("interleaved"), &a, &e1);
      RtSchedule *y = sched_build_unverified(sched_find("interleaved"), &b, &e2);
      bool same = x && y;
      for (int r = 0; same && r < p; r++)
        same = x->stages[r].n == y->stages[r].n &&
               !memcmp(x->stages[r].actions, y->stages[r].actions,
                       sizeof(RtSchedAction) * (size_t)x->stages[r].n);
      CHECK(same, "p=%d m=%d: --vpp-group p changes the tables", p, m);
      sched_free(x), sched_free(y);
    }
  free(got), free(want);
  printf("%ld (p, v, m, N) configurations, %ld accepted, in %.0f ms: %d failures\n", cases,
         accepted, now_ms() - t0, failures);
  return failures > 0;
}

/* ------------------------------------------------- schedules from files */

/* 1F1B's compute order written as a schedule file, straight from its
 * definition: stage r warms up with min(p - r - 1, m) forwards, then a
 * forward and a backward at a time, then the remaining backwards. */
static void write_1f1b(int p, int m, char *out, size_t size) {
  snprintf(out, size, "# 1F1B, p = %d, m = %d\n", p, m);
  for (int r = 0; r < p; r++) {
    int warm = p - r - 1 < m ? p - r - 1 : m;
    for (int i = 0; i < warm; i++) snprintf(out + strlen(out), size - strlen(out), "F%d.0 ", i);
    for (int i = 0; i < m - warm; i++)
      snprintf(out + strlen(out), size - strlen(out), "F%d.0 B%d.0 ", warm + i, i);
    for (int i = m - warm; i < m; i++) snprintf(out + strlen(out), size - strlen(out), "B%d.0 ", i);
    snprintf(out + strlen(out), size - strlen(out), "  # stage %d\n", r);
  }
}

static bool same_tables(const RtSchedule *x, const RtSchedule *y) {
  if (x->pp != y->pp || x->nbuckets != y->nbuckets) return false;
  for (int r = 0; r < x->pp; r++)
    if (x->stages[r].n != y->stages[r].n ||
        memcmp(x->stages[r].actions, y->stages[r].actions,
               sizeof(RtSchedAction) * (size_t)x->stages[r].n))
      return false;
  return true;
}

/* Parses text and builds it for its own p, v, m; prints the verdict and
 * every error. Returns the tables (NULL when refused). */
static RtSchedule *build_text(const char *what, const char *text, int dp, bool print) {
  char *error = NULL;
  SchedScript *sc = sched_script_parse("test.sched", text, &error);
  RtSchedule *s = NULL;
  if (sc) {
    SchedOptions o = {.dp = dp, .script = sc, .shape = {3, {1, 16, 8}}};
    sched_script_shape(sc, &o.pp, &o.vpp, &o.microbatches);
    SchedReport rep;
    s = sched_build_script(sc, &o, NULL, false, &rep);
    error = rep.error, rep.error = NULL;
    sched_report_free(&rep);
    sched_script_free(sc);
  }
  if (print) printf("%s: %s\n%s", what, s ? "verifies" : "rejected", error ? error : "");
  free(error);
  return s;
}

static int file_mode(void) {
  /* 1F1B from a file gives the built-in tables, messages, batches and
   * reductions included, wherever every stage reaches the steady state
   * (m >= p). */
  size_t size = 1 << 16;
  char *text = malloc(size);
  int same = 0;
  for (int p = 1; p <= 8; p++)
    for (int m = p; m <= 3 * p + 1; m++) {
      write_1f1b(p, m, text, size);
      RtSchedule *f = build_text("1f1b", text, 2, false);
      SchedOptions o = {.pp = p, .vpp = 1, .microbatches = m, .dp = 2, .shape = {3, {1, 16, 8}}};
      SchedReport rep;
      RtSchedule *b = sched_build(sched_find("1f1b"), &o, NULL, false, &rep);
      CHECK(f && b && same_tables(f, b), "1f1b from a file, p=%d m=%d: %s", p, m,
            f ? "tables differ" : "refused");
      same += f && b && same_tables(f, b);
      sched_report_free(&rep);
      sched_free(f), sched_free(b);
    }
  printf("1f1b from a file equals the built-in tables for %d (p, m), p <= 8, p <= m <= 3p + 1\n",
         same);
  /* Below that the stages that never reach it batch their last send with
   * the first receive of the cool-down, where 1F1B posts them one at a
   * time; the tables verify all the same. */
  for (int p = 2; p <= 8; p++)
    for (int m = 1; m < p; m++) {
      write_1f1b(p, m, text, size);
      RtSchedule *f = build_text("1f1b", text, 1, false);
      CHECK(f, "1f1b from a file, p=%d m=%d: refused", p, m);
      sched_free(f);
    }
  /* Megatron-LM's interleaved order written as a file: the messages the
   * builder derives (in steps, the second form) verify with the built-in
   * step wherever the warm-up leaves a steady state on every stage. */
  int il_ok = 0, il_all = 0;
  for (int p = 2; p <= 8; p++)
    for (int v = 2; v <= 3; v++)
      for (int m = 2 * p; m <= 4 * p; m += p) {
        SchedOptions o = {.pp = p, .vpp = v, .microbatches = m, .dp = 2, .shape = {3, {1, 16, 8}}};
        SchedReport rep;
        RtSchedule *b = sched_build(sched_find("interleaved"), &o, NULL, false, &rep);
        double step = rep.makespan;
        sched_report_free(&rep);
        text[0] = 0;
        for (int r = 0; b && r < p; r++) {
          for (int i = 0; i < b->stages[r].n; i++) {
            const RtSchedAction *a = &b->stages[r].actions[i];
            if (a->kind == RT_SCHED_F || a->kind == RT_SCHED_B)
              snprintf(text + strlen(text), size - strlen(text), "%s%d.%d ",
                       a->kind == RT_SCHED_F ? "F" : "B", a->mb, a->chunk);
          }
          snprintf(text + strlen(text), size - strlen(text), "\n");
        }
        RtSchedule *f = build_text("interleaved", text, 2, false);
        SchedReport frep;
        bool ok = f && sched_verify(f, NULL, false, &frep) && frep.makespan == step;
        if (f) sched_report_free(&frep);
        CHECK(ok, "interleaved from a file, p=%d v=%d m=%d: %s", p, v, m, f ? "another step" : "refused");
        il_ok += ok, il_all++;
        sched_free(f), sched_free(b);
      }
  printf("interleaved from a file verifies with the built-in step for %d of %d (p, v, m), "
         "p <= 8, v <= 3, m in 2p, 3p, 4p\n", il_ok, il_all);
  free(text);
  /* Bad files, each explained (the output is a golden). */
  static const char *const bad[][2] = {
      {"deadlock: stage 0 wants gradient 0 before it sends activation 1",
       "F0.0 B0.0 F1.0 B1.0\nF0.0 F1.0 B0.0 B1.0\n"},
      {"missing action", "F0.0 F1.0 B0.0 B1.0\nF0.0 B0.0 F1.0\n"},
      {"duplicate action", "# two stages\nF0.0 F1.0 B0.0 F0.0 B1.0\nF0.0 B0.0 F1.0 B1.0\n"},
      {"backward before forward", "F0.0 B1.0 F1.0 B0.0\nF0.0 B0.0 F1.0 B1.0\n"},
      {"syntax errors", "F0.0 F1 B0.0 b1.0\nF0.0 B0.0 F1.0 B1.0 F1.x  # comment F9.9\n"},
      {"empty", "# nothing but a comment\n\n"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    RtSchedule *s = build_text(bad[i][0], bad[i][1], 1, true);
    CHECK(!s, "%s: accepted", bad[i][0]);
    sched_free(s);
  }
  return failures > 0;
}

/* ------------------------------------------------------------------ scale */

static int scale(void) {
  /* gpt3 1T: t=8, p=64, d=6, v=2, microbatch 1, global batch 3072. */
  SchedOptions o = {.pp = 64, .vpp = 2, .microbatches = 3072 / (1 * 6), .dp = 6,
                    .shape = {3, {1, 2048, 25600}}};
  double best = 1e9;
  int64_t actions = 0;
  for (int rep_i = 0; rep_i < 3; rep_i++) {
    double t0 = now_ms();
    SchedReport rep;
    RtSchedule *s = sched_build(sched_find("interleaved"), &o, NULL, false, &rep);
    double dt = now_ms() - t0;
    CHECK(s, "%s", rep.error);
    if (!s) return 1;
    actions = 0;
    for (int r = 0; r < s->pp; r++) actions += s->stages[r].n;
    if (dt < best) best = dt;
    sched_report_free(&rep);
    sched_free(s);
  }
  printf("interleaved p=64 v=2 m=512: %lld actions built and verified in %.1f ms (bound 1000 ms)\n",
         (long long)actions, best);
  CHECK(best < 1000, "%.1f ms", best);
  return failures > 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "props")) return props();
  if (!strcmp(mode, "example")) return example();
  if (!strcmp(mode, "broken")) return broken();
  if (!strcmp(mode, "unbatched")) return unbatched();
  if (!strcmp(mode, "custom")) return custom();
  if (!strcmp(mode, "scale")) return scale();
  if (!strcmp(mode, "groups")) return groups();
  if (!strcmp(mode, "file")) return file_mode();
  if (!strcmp(mode, "zb")) return zb();
  fprintf(stderr, "usage: sched_test props|example|broken|unbatched|custom|scale|groups|file|zb\n");
  return 2;
}
