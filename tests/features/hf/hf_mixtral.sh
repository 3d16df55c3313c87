#!/bin/bash
# shellcheck disable=SC2086 # the -D list is a list of words
# Mixtral's checkpoints both ways without transformers (the oracle's
# oracle.hf_mixtral checks them against MixtralForCausalLM itself):
# - `shardc export --hf` writes each layer's stacked experts as Hugging
#   Face's one tensor per expert (`model.layers.N.block_sparse_moe.
#   experts.E.w1.weight`), and config.json with MixtralConfig's keys;
# - --init-from of that folder, of a sharded set of it, and under --tp 2,
#   stacks them back: the same step-1 loss as the checkpoint it came from;
# - an expert missing, a shape the model does not expect and another
#   count of experts are each one error line naming the tensor.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"

MIX="-D vocab=256 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=2 -D experts=4 -D seq=16 --microbatch 2"
mix() { "$SHARDC" run "$ROOT/models/mixtral.shard" $MIX --out prog --data train.bin "$@"; }
loss1() { sed -n 's/^step 1\/[0-9]* | loss \([0-9.]*\) .*/\1/p' "$1"; }
header() { dd if="$1" bs=1 skip=8 count="$(od -An -t u8 -N 8 "$1" | tr -d ' ')" 2>/dev/null; }
has() { grep -qF -- "$2" "$1"; }

corpus_shards
check "mixtral: 2 steps, saved" mix --steps 2 --save ck
check "export mixtral" "$SHARDC" export ck --hf hf
header hf/model.safetensors >h.txt
for n in '"model.layers.1.block_sparse_moe.experts.3.w2.weight":{"dtype":"F32","shape":[32,48]' \
  '"model.layers.0.block_sparse_moe.experts.0.w1.weight":{"dtype":"F32","shape":[48,32]' \
  '"model.layers.0.block_sparse_moe.gate.weight":{"dtype":"F32","shape":[4,32]' '"lm_head.weight"'; do
  check "the export holds $n" has h.txt "$n"
done
check "  ... and no stacked tensor" sh -c '! grep -qF "experts.w1.weight" h.txt'
tr -d ' \t' <hf/config.json >cfg.txt
for kv in '"architectures":["MixtralForCausalLM"]' '"num_local_experts":4' '"num_experts_per_tok":2' \
  '"router_aux_loss_coef":0.02' '"output_router_logits":true' '"intermediate_size":48'; do
  check "config.json: $kv" has cfg.txt "$kv"
done

mix --steps 1 --init-from ck/model.safetensors >own.txt 2>&1 || true
mix --steps 1 --init-from hf >in.txt 2>&1 || true
a=$(loss1 own.txt) b=$(loss1 in.txt)
echo "      step-1 loss from the checkpoint $a, from the exported folder $b"
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "the per-expert tensors stack back, same loss"; else fail "losses $a, $b"; tail -3 in.txt; fi
check "  ... and says so" has in.txt "24 tensors (one per expert) stacked into 6 parameters"
check "export in parts of 20 kB" "$SHARDC" export ck --hf parts --shard-bytes 20000
mix --steps 1 --init-from parts >parts.txt 2>&1 || true
c=$(loss1 parts.txt)
echo "      step-1 loss from the sharded set $c"
if [ -n "$c" ] && [ "$c" = "$a" ]; then ok "the sharded set stacks, same loss"; else fail "sharded set: loss $c"; tail -3 parts.txt; fi

# Under --tp 2 each rank takes its part of the stacked tensors.
mix --steps 1 --init-from hf --tp 2 --out prog-t2 >t2.txt 2>&1 || true
t=$(loss1 t2.txt)
echo "      step-1 loss under --tp 2 $t"
if [ -n "$t" ] && [ "$t" = "$a" ]; then ok "--tp 2 loads the per-expert tensors, same loss"; else fail "--tp 2: loss $t"; tail -3 t2.txt; fi

expect_error "an expert missing (renamed away by a map)" \
  "missing tensor model.layers.1.block_sparse_moe.experts.2.w3.weight: expert 2 of the 4 the model stacks into layers.1.block_sparse_moe.experts.w3.weight [4, 48, 32]" \
  sh -c 'echo "elsewhere model.layers.1.block_sparse_moe.experts.2.w3.weight" >gone.map && "$0" run "$1" $2 --out prog --init-from hf --init-map gone.map --steps 0' \
  "$SHARDC" "$ROOT/models/mixtral.shard" "$MIX"
expect_error "an expert of another shape" \
  "tensor model.layers.0.block_sparse_moe.experts.0.w1.weight has shape [48, 32], the model expects [40, 32] (expert 0 of layers.0.block_sparse_moe.experts.w1.weight [4, 40, 32])" \
  "$SHARDC" run "$ROOT/models/mixtral.shard" $MIX -D ffn=40 --out prog40 --init-from hf --steps 0
expect_error "another count of experts" \
  "4 experts in the file (model.layers.0.block_sparse_moe.experts.0.w1.weight to model.layers.0.block_sparse_moe.experts.3.w1.weight), the model has 8" \
  "$SHARDC" run "$ROOT/models/mixtral.shard" $MIX -D experts=8 --out prog8 --init-from hf --steps 0
check "  ... on one error line" test "$(grep -c 'error' out.txt)" -eq 1
finish
