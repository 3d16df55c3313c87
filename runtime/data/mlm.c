/* Masked-LM examples from token windows; see mlm.h for the rule. */
#include "mlm.h"

#include "rng.h"

#define MLM_IGNORE (-100) /* PyTorch's ignore_index, cross_entropy's ignore=1 */

uint64_t rt_mlm_key(uint64_t seed, int64_t step, int eval) {
  return rt_key3(seed, eval ? 0x6d6c6d2d76616cULL /* "mlm-val" */ : 0x6d6c6dULL /* "mlm" */,
                 (uint64_t)step);
}

void rt_mlm_fill(const RtMlmRule *r, uint64_t key, int role, const int32_t *tokens,
                 int64_t first, int64_t n, int32_t *out) {
  uint64_t rkey = rt_mix64(key);
  for (int64_t i = 0; i < n; i++) {
    uint64_t p = (uint64_t)(first + i);
    int32_t x = tokens[p];
    int pad = r->pad_id >= 0 && x == r->pad_id;
    int chosen = !pad && rt_hash_unit(key, 2 * p) < r->prob;
    int32_t v;
    if (role == RT_MLM_MASK) {
      v = !pad;
    } else if (role == RT_MLM_LABELS) {
      v = chosen ? x : MLM_IGNORE;
    } else if (!chosen) {
      v = x;
    } else {
      double u = rt_hash_unit(key, 2 * p + 1);
      if (u < 0.8) v = (int32_t)r->mask_id;
      else if (u < 0.9) v = (int32_t)(rt_hash_unit(rkey, p) * (double)r->vocab);
      else v = x;
    }
    out[i] = v;
  }
}
