#!/bin/bash
# shellcheck disable=SC2086 # the -D lists are lists of words
# Hugging Face checkpoints both ways, against transformers itself, for
# GPT-2, LLaMA, GPT-NeoX and Mixtral (its experts one tensor each there,
# stacked here), with no hand-written mapping:
# - transformers makes a random model (its matrices scaled so that
#   attention is far from uniform) and save_pretrained writes it;
# - shardc reads that folder (--init-from DIR; LLaMA's a sharded set with
#   its model.safetensors.index.json): its step-1 loss equals transformers'
#   loss on the same window;
# - 5 steps of training, `shardc export --hf`, and from_pretrained's loss
#   on the result equals the loss shardc computes with the same weights;
# - greedy samples (temperature 0) are the same ids.
# The Python is build/pyenv's (SHARDC_PYENV to choose another), else
# python3; without transformers the test skips (exit 77), saying why.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
HF="$ROOT/tests/features/hf/hf_transformers.py"
PY=
for py in "${SHARDC_PYENV:-$ROOT/build/pyenv}/bin/python" python3; do
  if why=$("$py" -c 'import torch, transformers' 2>&1); then PY=$py; break; fi
done
if [ -z "$PY" ]; then
  echo "SKIP: no python that imports torch and transformers ($(echo "$why" | tail -1)); pip install 'transformers==4.40.2' into build/pyenv"
  exit 77
fi

corpus_shards
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; printf "%.1e", d / m }' 2>/dev/null || true; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
loss_of() { sed -n '1s/.*"loss":\([^,}]*\).*/\1/p' "$1"; }

for model in gpt2 llama neox mixtral; do
  case $model in
  gpt2) DEFS="-D vocab=256 -D hidden=32 -D heads=4 -D layers=2 -D seq=16 -D batch=2" ;;
  llama) DEFS="-D vocab=256 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=2 -D seq=16 -D batch=2" ;;
  neox) DEFS="-D vocab=256 -D hidden=32 -D heads=4 -D layers=2 -D seq=16 -D batch=2" ;;
  mixtral) DEFS="-D vocab=256 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=2 -D experts=4 -D top_k=2 -D seq=16 -D batch=2" ;;
  esac
  run() { "$SHARDC" run "$ROOT/models/$model.shard" $DEFS --out "prog-$model" --data train.bin --no-shuffle "$@"; }
  echo "--- $model"
  if ! "$PY" "$HF" make $model "in-$model" >make.txt 2>&1; then
    fail "$model: transformers could not make the model"
    tail -5 make.txt
    continue
  fi
  sed 's/^/      /' make.txt
  echo "      save_pretrained wrote: $(cd "in-$model" && ls | tr '\n' ' ')"
  peak=$(sed -n 's/.*, \([0-9.]*\) scaled.*/\1/p' make.txt) flat=$(sed -n 's/.*uniform attention gives \([0-9.]*\).*/\1/p' make.txt)
  if le "$(awk -v f="$flat" 'BEGIN { print 3 * f }')" "$peak"; then ok "$model: attention far from uniform ($peak >= 3 x $flat)"; else fail "$model: attention nearly uniform"; fi
  # In: shardc's loss of HF's weights against transformers'.
  run --steps 1 --init-from "in-$model" --log-json in.json >in.txt 2>&1 || true
  ours=$(loss_of in.json) theirs=$("$PY" "$HF" loss "in-$model" train.bin 2 16 || true)
  e=$(relerr "$ours" "$theirs")
  echo "      HF's weights: loss $ours here, $theirs in transformers (rel. err. $e)"
  if [ -n "$ours" ] && le "$e" 1e-5; then ok "$model: HF's weights in, the same loss"; else fail "$model: loss of HF's weights"; tail -3 in.txt; fi
  # 5 steps, out, and transformers' loss on the result.
  run --steps 5 --init-from "in-$model" --lr 3e-3 --save "ck-$model" >train.txt 2>&1 ||
    { fail "$model: training"; tail -3 train.txt; continue; }
  check "$model: export --hf" "$SHARDC" export "ck-$model" --hf "out-$model"
  run --steps 1 --init-from "out-$model" --log-json out.json >out.txt 2>&1 || true
  ours=$(loss_of out.json) theirs=$("$PY" "$HF" loss "out-$model" train.bin 2 16 || true)
  e=$(relerr "$ours" "$theirs")
  echo "      after 5 steps: loss $ours here, $theirs in transformers from the export (rel. err. $e)"
  if [ -n "$ours" ] && le "$e" 1e-5; then ok "$model: 5 steps out, from_pretrained's loss the same"; else fail "$model: loss after export"; tail -3 out.txt; fi
  # Greedy samples of the trained weights: prompt 5 ids, 10 new (16 positions in all).
  prompt="84 104 101 32 115"
  "prog-$model/rank0" --init-from "out-$model" --steps 0 --quiet --sample-prompt "$prompt" --sample-ids \
    --sample-tokens 10 --temperature 0 >ids.txt 2>&1 || true
  ours=$({ grep -E '^[0-9]+$' ids.txt || true; } | tr '\n' ' ' | sed 's/ $//')
  theirs=$("$PY" "$HF" greedy "out-$model" 10 $prompt || true)
  echo "      greedy after [$prompt]: [$ours] here, [$theirs] in transformers"
  if [ -n "$ours" ] && [ "$ours" = "$theirs" ]; then ok "$model: greedy samples equal"; else fail "$model: greedy samples differ"; tail -3 ids.txt; fi
done

if [ $FAILS -eq 0 ]; then
  echo "Hugging Face round trip against transformers: passed"
  exit 0
fi
echo "Hugging Face round trip against transformers: FAILED: $FAILS check(s)"
exit 1
