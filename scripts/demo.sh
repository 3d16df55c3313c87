#!/bin/bash
# The demo: trains a tiny GPT-2 (4 layers, hidden 128, 4 heads, seq 128,
# byte-level vocabulary) on the bundled Jane Austen corpus, shows the
# progress lines, checks that the validation loss ends clearly below the
# corpus's unigram entropy, draws the loss curve and prints a sample.
#
#   scripts/demo.sh BUILD_DIR      (make demo calls it with build/)
set -euo pipefail
build=${1:-build}
shardc=$build/shardc
out=$build/demo
steps=${DEMO_STEPS:-600}
mkdir -p "$out"
rm -rf "$out/checkpoint"

echo "== the model: models/gpt2.shard at the demo shape"
shape=(-D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256)
"$shardc" info models/gpt2.shard "${shape[@]}"

# The unigram entropy of the text (nats per byte): a model that only knew
# byte frequencies would reach this loss; a real one must go clearly below.
entropy=$(python3 data/entropy.py --json data/corpus.txt |
  python3 -c "import json, sys; print('%.4f' % json.load(sys.stdin)['nats_per_byte'])")
echo
echo "== training $steps steps (the unigram entropy of the corpus is $entropy nats/byte)"
"$shardc" run models/gpt2.shard "${shape[@]}" --microbatch 8 --out "$out/program" \
  --data "$build/data/austen_train.bin" --val-data "$build/data/austen_val.bin" \
  --global-batch 16 --steps "$steps" --lr 2e-3 --warmup 20 --lr-min 2e-4 \
  --weight-decay 0.1 --log-every 25 --eval-every 100 --eval-batches 20 \
  --log-json "$out/log.jsonl" --save "$out/checkpoint" --save-every "$steps"

python3 scripts/loss_curve.py "$out/log.jsonl" --svg "$out/loss.svg" --csv "$out/loss.csv" \
  --entropy "$entropy"
val=$(python3 -c "import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])]
print([r['val_loss'] for r in rows if 'val_loss' in r][-1])" "$out/log.jsonl")
echo
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) - 0.5 else 1)" \
     "$val" "$entropy"; then
  echo "validation loss $val nats/byte is clearly below the unigram entropy $entropy"
else
  echo "demo: FAILED: validation loss $val is not clearly below the unigram entropy $entropy"
  exit 1
fi
echo "loss curve: $out/loss.svg (and $out/loss.csv)"

echo
echo "== a sample from the checkpoint (shardc sample $out/checkpoint)"
"$shardc" sample "$out/checkpoint" --prompt "It is a truth universally acknowledged" \
  --tokens 300 --temperature 0.8 --top-k 40
echo
