#!/bin/bash
# shellcheck disable=SC2086 # the -D lists are lists of words
# Hugging Face checkpoints both ways without transformers (hf_transformers.sh
# checks them against transformers itself):
# - `shardc export --hf` writes config.json and model.safetensors under
#   Hugging Face's names (GPT-2's `transformer.`, LLaMA's `model.` and its
#   lm_head outside it) with the metadata from_pretrained requires;
# - --init-from reads that folder back with no map (the prefix is found),
#   and a sharded set through its index, with the same loss as the
#   checkpoint it came from;
# - --init-map renames what no prefix explains;
# - a missing tensor is one error line with the nearest names.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"

LLAMA="-D vocab=256 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=2 -D seq=16 --microbatch 2"
GPT2="-D vocab=256 -D hidden=32 -D heads=2 -D layers=2 -D seq=16 --microbatch 2"
llama() { "$SHARDC" run "$ROOT/models/llama.shard" $LLAMA --out prog-llama --data train.bin "$@"; }
gpt2() { "$SHARDC" run "$ROOT/models/gpt2.shard" $GPT2 --out prog-gpt2 --data train.bin "$@"; }
loss1() { sed -n 's/^step 1\/[0-9]* | loss \([0-9.]*\) .*/\1/p' "$1"; }
# header FILE: the safetensors header's JSON text.
header() { dd if="$1" bs=1 skip=8 count=$(od -An -t u8 -N 8 "$1" | tr -d ' ') 2>/dev/null; }
has() { grep -qF -- "$2" "$1"; }

corpus_shards
check "llama: 2 steps, saved" llama --steps 2 --save ck-llama
check "gpt2: 2 steps, saved" gpt2 --steps 2 --save ck-gpt2

# --- out ---------------------------------------------------------------------
check "export llama" "$SHARDC" export ck-llama --hf hf-llama
check "export gpt2" "$SHARDC" export ck-gpt2 --hf hf-gpt2
header hf-llama/model.safetensors >llama.h
header hf-gpt2/model.safetensors >gpt2.h
for n in '"model.embed_tokens.weight"' '"model.layers.1.self_attn.q_proj.weight"' '"model.norm.weight"' \
  '"lm_head.weight"' '"format":"pt"'; do
  check "llama's safetensors hold $n" has llama.h "$n"
done
check "  ... and no lm_head under the prefix" sh -c '! grep -qF "model.lm_head" llama.h'
for n in '"transformer.wte.weight"' '"transformer.h.1.attn.c_attn.weight"' '"transformer.ln_f.bias"' \
  '"format":"pt"'; do
  check "gpt2's safetensors hold $n" has gpt2.h "$n"
done
tr -d ' \t' <hf-llama/config.json >llama.cfg
tr -d ' \t' <hf-gpt2/config.json >gpt2.cfg
for kv in '"architectures":["LlamaForCausalLM"]' '"hidden_size":32' '"num_key_value_heads":2' \
  '"intermediate_size":48' '"max_position_embeddings":16' '"tie_word_embeddings":false'; do
  check "llama's config.json: $kv" has llama.cfg "$kv"
done
for kv in '"architectures":["GPT2LMHeadModel"]' '"n_embd":32' '"n_head":2' '"n_layer":2' \
  '"n_positions":16' '"activation_function":"gelu_new"'; do
  check "gpt2's config.json: $kv" has gpt2.cfg "$kv"
done
echo "llama's config.json:"
sed 's/^/    /' hf-llama/config.json

# --- in ------------------------------------------------------------------------
llama --steps 1 --init-from ck-llama/model.safetensors >own.txt 2>&1 || true
llama --steps 1 --init-from hf-llama >hf.txt 2>&1 || true
la=$(loss1 own.txt) b=$(loss1 hf.txt)
echo "      step-1 loss from the checkpoint $la, from the exported folder $b"
if [ -n "$la" ] && [ "$la" = "$b" ]; then ok "llama: the exported folder loads back, same loss"; else fail "llama: losses $la, $b"; fi
check "  ... its names read without the prefix 'model.', said once" has hf.txt "20 tensors read without the prefix 'model.'"
gpt2 --steps 1 --init-from ck-gpt2/model.safetensors >own.txt 2>&1 || true
gpt2 --steps 1 --init-from hf-gpt2 >hf.txt 2>&1 || true
a=$(loss1 own.txt) b=$(loss1 hf.txt)
echo "      step-1 loss from the checkpoint $a, from the exported folder $b"
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "gpt2: the exported folder loads back, same loss"; else fail "gpt2: losses $a, $b"; fi

check "export llama in parts of 40 kB" "$SHARDC" export ck-llama --hf hf-parts --shard-bytes 40000
parts=$({ ls hf-parts/model-*-of-*.safetensors 2>/dev/null || true; } | wc -l)
check "  ... $parts parts and their index" test "$parts" -ge 3 -a -s hf-parts/model.safetensors.index.json
llama --steps 1 --init-from hf-parts >parts.txt 2>&1 || true
c=$(loss1 parts.txt)
echo "      step-1 loss from the sharded set $c"
if [ -n "$c" ] && [ "$c" = "$la" ]; then ok "the sharded set loads, same loss"; else fail "sharded set: loss $c"; fi

# A map swaps the two vocabulary matrices: the loss changes, and the same
# map twice restores them.
printf '# swapped\nembed_tokens.weight lm_head.weight\nlm_head.weight model.embed_tokens.weight\n' >swap.map
llama --steps 1 --init-from hf-llama --init-map swap.map >swap.txt 2>&1 || true
s=$(loss1 swap.txt)
echo "      step-1 loss with the two vocabulary matrices swapped by --init-map: $s"
if [ -n "$s" ] && [ "$s" != "$la" ]; then ok "--init-map renames (2 tensors)"; else fail "--init-map: loss $s"; fi
check "  ... and says so" has swap.txt "2 tensors renamed by swap.map"

# --- errors ----------------------------------------------------------------------
expect_error "a map naming a tensor the file lacks: its line and the nearest names" \
  "bad.map: line 2: hf-llama/model.safetensors holds no tensor model.embed_token.weight; nearest names in it: model.embed_tokens.weight" \
  sh -c 'printf "\nlm_head.weight model.embed_token.weight\n" >bad.map && "$0" run "$1" $2 --out prog-llama --init-from hf-llama --init-map bad.map --steps 0' \
  "$SHARDC" "$ROOT/models/llama.shard" "$LLAMA"
expect_error "weights of a shallower model: one line, the nearest names" \
  "hf-llama/model.safetensors: missing tensor layers.2.input_layernorm.weight (the model expects [32]); nearest names in the file: layers.0.input_layernorm.weight, layers.1.input_layernorm.weight" \
  "$SHARDC" run "$ROOT/models/llama.shard" $LLAMA -D layers=3 --out prog-llama3 --init-from hf-llama --steps 0
check "  ... on one error line" test "$(grep -c 'error' out.txt)" -eq 1
expect_error "an index naming a file that lacks the tensor" \
  "weight_map places tensor lm_head.weight in model-00001-of-00004.safetensors, which does not hold it" \
  sh -c 'sed "s/\"lm_head.weight\":[[:space:]]*\"[^\"]*\"/\"lm_head.weight\": \"model-00001-of-00004.safetensors\"/" hf-parts/model.safetensors.index.json >idx && mv idx hf-parts/model.safetensors.index.json && "$0" run "$1" $2 --out prog-llama --init-from hf-parts --steps 0' \
  "$SHARDC" "$ROOT/models/llama.shard" "$LLAMA"
expect_error "export of a folder without a checkpoint" "nock/model.safetensors: No such file or directory" \
  "$SHARDC" export nock --hf out
expect_error "export without --hf" "no output folder given (--hf OUT)" "$SHARDC" export ck-llama

if [ $FAILS -eq 0 ]; then
  echo "Hugging Face names and export: passed"
  exit 0
fi
echo "Hugging Face names and export: FAILED: $FAILS check(s)"
exit 1
