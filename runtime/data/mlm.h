/* Masked-LM examples (BERT's pre-training inputs) made from token windows.
 *
 * A model whose loss is `cross_entropy(..., ignore=1)` reads its inputs in
 * three roles (abi/model.h, RtInput.mlm): the masked token ids, the labels
 * (the original token where a position was chosen for prediction, -100
 * elsewhere) and the key-padding mask (0 at padding, 1 elsewhere). All
 * three are functions of the window's tokens and a key of (--seed, step)
 * only, position by position: every rank of every layout (tp, pp, dp,
 * microbatch size) sees the same examples for the same global batch.
 *
 * Position p of the window (0 .. global_batch*seq - 1) with token x:
 *   x == --mlm-pad            padding: mask 0, label -100, id x
 *   u(2p) < --mlm-prob        chosen: label x, and by u(2p+1):
 *                               < 0.8  id = --mlm-mask-id
 *                               < 0.9  id = floor(u'(p) * vocab), a random token
 *                               else   id = x
 *   otherwise                 label -100, id x
 * u is rt_hash_unit of the step's key, u' that of the key mixed once more
 * (tests/features/oracle/hf_bert.py has the same rule in Python). */
#ifndef SHARD_RT_MLM_H
#define SHARD_RT_MLM_H

#include <stdint.h>

enum { RT_MLM_NONE, RT_MLM_IDS, RT_MLM_LABELS, RT_MLM_MASK };

typedef struct RtMlmRule {
  double prob;     /* chance that a position is chosen (BERT: 0.15) */
  int64_t mask_id; /* the [MASK] token */
  int64_t pad_id;  /* the padding token; -1: none */
  int64_t vocab;   /* random replacements are drawn from [0, vocab) */
} RtMlmRule;

/* The key of the examples of training step `step`, or of validation
 * window k (eval != 0). */
uint64_t rt_mlm_key(uint64_t seed, int64_t step, int eval);
/* out[i] for positions first .. first + n - 1 of the window `tokens`, in
 * role RT_MLM_IDS, _LABELS or _MASK. */
void rt_mlm_fill(const RtMlmRule *r, uint64_t key, int role, const int32_t *tokens,
                 int64_t first, int64_t n, int32_t *out);

#endif
