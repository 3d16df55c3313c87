#!/bin/bash
# The demo: trains a tiny GPT-2 (4 layers, hidden 128, 4 heads, seq 128,
# byte-level vocabulary) on the bundled Jane Austen corpus on 4 ranks of
# this machine: tensor parallelism t=2 times pipeline parallelism p=2 with
# v=2 chunks per stage (Megatron's interleaved schedule). It draws the
# schedule, checks on a short run that the 4 ranks compute the losses of a
# single rank, trains, checks that the validation loss ends clearly below
# the corpus's unigram entropy, draws the loss curve and prints a sample.
#
#   scripts/demo.sh BUILD_DIR      (make demo calls it with build/)
#
# DEMO_TOKENIZER=bpe (make demo DEMO_TOKENIZER=bpe) trains on byte-level BPE
# tokens instead: `shardc data --bpe 1024` learns a vocabulary of 1,024
# tokens on the training text and writes the shards, the model's vocabulary
# is 1,024, the entropy to beat is that of the BPE tokens, and the sample
# is decoded with the tokenizer recorded beside the shards.
set -euo pipefail
build=${1:-build}
shardc=$build/shardc
out=$build/demo
steps=${DEMO_STEPS:-600}
tokenizer=${DEMO_TOKENIZER:-bytes}
mkdir -p "$out"
rm -rf "$out/checkpoint"
vocab=256 unit=byte
train_bin=$build/data/austen_train.bin val_bin=$build/data/austen_val.bin
case $tokenizer in
bytes) ;;
bpe)
  vocab=1024 unit=token
  train_bin=$out/bpe/austen_train.bin val_bin=$out/bpe/austen_val.bin
  mkdir -p "$out/bpe"
  echo "== byte-level BPE: a vocabulary of $vocab tokens learnt on the training text"
  "$shardc" data data/corpus.txt -o "$train_bin" --val "$val_bin" --bpe "$vocab"
  echo
  ;;
*)
  echo "demo: DEMO_TOKENIZER must be bytes or bpe, not '$tokenizer'" >&2
  exit 2
  ;;
esac

echo "== the model: models/gpt2.shard at the demo shape"
shape=(-D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=$vocab)
"$shardc" info models/gpt2.shard "${shape[@]}"

# The unigram entropy of the text (nats per byte, or per BPE token): a model
# that only knew token frequencies would reach this loss; a real one must go
# clearly below.
if [[ $tokenizer == bytes ]]; then
  entropy=$(python3 data/entropy.py --json data/corpus.txt |
    python3 -c "import json, sys; print('%.4f' % json.load(sys.stdin)['nats_per_byte'])")
else
  entropy=$(python3 - "$train_bin" <<'PY'
import collections, math, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<3i", raw[:12])[2]
counts = collections.Counter(struct.unpack(f"<{n}H", raw[1024:]))
print("%.4f" % -sum(c / n * math.log(c / n) for c in counts.values()))
PY
)
fi
# The cluster shape: 4 ranks, microbatches of 4 sequences, 4 a step.
mesh=(--tp 2 --pp 2 --vpp 2 --microbatch 4)
train=(--data "$train_bin" --global-batch 16 --lr 2e-3 --warmup 20
  --lr-min 2e-4 --weight-decay 0.1)

echo
echo "== the schedule of one step: $out/schedule.svg (Chrome trace: $out/schedule.json)"
"$shardc" schedule models/gpt2.shard "${shape[@]}" "${mesh[@]}" --global-batch 16 \
  --svg "$out/schedule.svg" --trace "$out/schedule.json"

# The same short run on one rank and on the 4: every step's loss must agree.
check=20
echo
echo "== $check steps on 1 rank and on t=2 x p=2 (v=2): the losses must agree"
"$shardc" run models/gpt2.shard "${shape[@]}" --microbatch 4 --out "$out/program-1" "${train[@]}" \
  --steps "$check" --log-every "$check" --log-json "$out/check-1.jsonl" --quiet
"$shardc" run models/gpt2.shard "${shape[@]}" "${mesh[@]}" --out "$out/program" "${train[@]}" \
  --steps "$check" --log-every "$check" --log-json "$out/check-4.jsonl" --quiet
python3 - "$out/check-1.jsonl" "$out/check-4.jsonl" <<'PY'
import json, sys
one, four = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
worst = max(abs(a - b) / abs(a) for a, b in zip(one, four))
print("step  1 rank              4 ranks             rel. diff")
for s in (0, len(one) // 2, len(one) - 1):
    print("%4d  %.15f  %.15f  %.1e" % (s + 1, one[s], four[s], abs(one[s] - four[s]) / abs(one[s])))
if len(one) != len(four) or worst > 1e-4:
    sys.exit("demo: FAILED: the 4 ranks' losses differ from one rank's by %.1e" % worst)
print("the 4 ranks match one rank over %d steps: largest relative difference %.1e" % (len(one), worst))
PY

echo
echo "== training $steps steps on t=2 x p=2 (v=2) (the unigram entropy of the corpus is $entropy nats/$unit)"
"$shardc" run models/gpt2.shard "${shape[@]}" "${mesh[@]}" --out "$out/program" "${train[@]}" \
  --val-data "$val_bin" --steps "$steps" --log-every 25 --eval-every 100 \
  --eval-batches 20 --log-json "$out/log.jsonl" --save "$out/checkpoint" --save-every "$steps"

python3 scripts/loss_curve.py "$out/log.jsonl" --svg "$out/loss.svg" --csv "$out/loss.csv" \
  --entropy "$entropy"
val=$(python3 -c "import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])]
print([r['val_loss'] for r in rows if 'val_loss' in r][-1])" "$out/log.jsonl")
echo
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) - 0.5 else 1)" \
     "$val" "$entropy"; then
  echo "validation loss $val nats/$unit is clearly below the unigram entropy $entropy"
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
