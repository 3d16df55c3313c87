/* Sampling (see sample.h). The model sees the context in row 0 of its
 * batch, starting at position 0 and padded on the right: positions then
 * mean what they meant in training, and causal attention makes the padding
 * invisible to the position whose logits we read. */
#include "sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "device.h"
#include "graphs.h"
#include "tp.h"
#include "util.h"

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

int rt_sample_pick(const real *logits, int n, double temperature, int64_t top_k, RtRng *rng,
                   double *scratch) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (logits[i] > logits[best]) best = i;
  if (temperature <= 0) return best;
  /* Only logits at least as large as the k-th largest take part. */
  double cut = -INFINITY;
  if (top_k > 0 && top_k < n) {
    double *sorted = scratch + n;
    for (int i = 0; i < n; i++)
      sorted[i] = logits[i];
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_desc);
    cut = sorted[top_k - 1];
  }
  double sum = 0, max = logits[best];
  for (int i = 0; i < n; i++) {
    scratch[i] = logits[i] >= cut ? exp((logits[i] - max) / temperature) : 0;
    sum += scratch[i];
  }
  double u = rt_rng_uniform(rng) * sum;
  for (int i = 0; i < n; i++) {
    if (u < scratch[i]) return i;
    u -= scratch[i];
  }
  return best; /* rounding left u past the end */
}

/* The first n bf16 logits of a device row, as reals. */
static void bf16_to_host(real *out, const uint16_t *row, int n) {
  uint16_t *bits = rt_xmalloc((size_t)n * sizeof *bits);
  rt_dev_to_host(bits, row, n * (int64_t)sizeof *bits);
  for (int i = 0; i < n; i++) {
    uint32_t u = (uint32_t)bits[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    out[i] = f;
  }
  free(bits);
}

/* Runs the model on the last (at most seq) tokens of the context and
 * copies the first n logits of the last of them into `out` (host); a
 * tensor-parallel rank joins its columns with the others' on the device,
 * in `whole`, first. */
static void next_logits(Rt *rt, const int32_t *ctx, int64_t len, real *whole, real *out, int n) {
  const RtModel *m = rt->model;
  const RtChunk *c = &m->chunks[0]; /* one chunk: rt_main refuses pipelines */
  int64_t start = len > m->seq ? len - m->seq : 0, k = len - start;
  memset(rt->window, 0, (size_t)(rt->rows + 1) * sizeof *rt->window);
  memcpy(rt->window, ctx + start, (size_t)k * sizeof *ctx);
  rt->ctx.training = 0;
  rt_load_micro(rt, rt->window, 0);
  rt_chunk_call(rt, 0, RT_FN_FORWARD);
  rt->ctx.training = 1;
  int64_t cols = rt_logits_cols(m);
  if (m->logits_bf16) { /* a tensor-parallel rank gathers the row in bf16 */
    const uint16_t *half = (const uint16_t *)rt_loc(&rt->ctx, c, c->logits_offset);
    bf16_to_host(out, rt_tp_gather_row(half + (k - 1) * cols, cols, 1, whole), n);
    return;
  }
  const real *logits = (const real *)rt_loc(&rt->ctx, c, c->logits_offset);
  const real *row = rt_tp_gather_row(logits + (k - 1) * cols, cols, 0, whole);
  rt_dev_to_host(out, row, n * (int64_t)sizeof *out);
}

/* --sample-ids: the prompt is token ids separated by spaces, which the
 * caller (shardc sample, which holds the tokenizer) encoded. Returns the
 * count. */
static int64_t parse_ids(const char *s, int32_t *ctx, int64_t vocab) {
  int64_t len = 0;
  for (char *end;; s = end) {
    while (*s == ' ') s++;
    if (!*s) return len;
    long long v = strtoll(s, &end, 10);
    if (end == s || (*end && *end != ' ') || v < 0 || v >= vocab)
      rt_fatal("--sample-prompt", "with --sample-ids, expected token ids in 0..%lld separated by spaces",
               (long long)vocab - 1);
    ctx[len++] = (int32_t)v;
  }
}

void rt_sample(Rt *rt) {
  const RtModel *m = rt->model;
  const char *prompt = rt->f.sample_prompt;
  int64_t plen = (int64_t)strlen(prompt), ntok = rt->f.sample_tokens;
  bool ids = rt->f.sample_ids;
  /* Byte-level: ids 0..255 are bytes; larger vocabularies are sampled
   * among their first 256 ids only, unless ids come and go as numbers. */
  int nbytes = ids ? (int)m->vocab : m->vocab < 256 ? (int)m->vocab : 256;
  int32_t *ctx = rt_xmalloc((size_t)(plen + ntok + 1) * sizeof *ctx);
  double *scratch = rt_xmalloc(2 * (size_t)nbytes * sizeof *scratch);
  real *whole = rt_dev_alloc(rt_logits_cols(m) * rt_tp_size() * (int64_t)sizeof *whole,
                             "the logits of a row");
  real *logits = rt_xmalloc((size_t)nbytes * sizeof *logits);
  /* Every tensor-parallel rank runs the model and draws the same tokens
   * (the same logits and the same random stream); rank 0 prints them. */
  FILE *out = rt_tp_world_rank() == 0 ? stdout : NULL;
  int64_t len = ids ? parse_ids(prompt, ctx, m->vocab) : 0;
  if (ids && len == 0) rt_fatal("--sample-prompt", "with --sample-ids, the prompt needs a token id");
  if (plen == 0) ctx[len++] = '\n'; /* something to condition on */
  for (int64_t i = 0; i < plen && !ids; i++) {
    int b = (unsigned char)prompt[i];
    if (b >= nbytes)
      rt_fatal("--sample-prompt", "byte %d is outside the model's vocabulary of %lld", b,
               (long long)m->vocab);
    ctx[len++] = b;
  }
  if (out && !ids) fputs(prompt, out);
  for (int64_t i = 0; i < ntok; i++) {
    next_logits(rt, ctx, len, whole, logits, nbytes);
    int t = rt_sample_pick(logits, nbytes, rt->f.temperature, rt->f.top_k, &rt->rng, scratch);
    ctx[len++] = t;
    if (out && ids) fprintf(out, "%d\n", t), fflush(out);
    else if (out) putc(t, out), fflush(out);
  }
  if (out && !ids) putc('\n', out);
  rt_dev_free(whole);
  free(logits);
  free(ctx);
  free(scratch);
}
