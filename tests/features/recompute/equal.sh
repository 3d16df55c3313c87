#!/bin/bash
# equal.sh TPTOOL: training with activation recomputation gives
# the losses, gradient norms and step-1 gradients of the same layout
# without it, to the bit, with dropout on (rate 0.1 everywhere), so that a
# recomputed mask that differed from the forward's would show.
#  - GPT-2 (fused attention) and a model with the attention written out
#    (tests/features/recompute/unfused.shard), one rank: selective, full, full in
#    groups of 2 layers;
#  - the same on two pipeline stages (the recomputed nodes run in the
#    chunk's backward, between other microbatches' forwards), and on two
#    tensor ranks with sequence parallelism (the recomputed forward runs
#    its all-gathers again);
#  - two pipeline stages without recomputation against one rank, within
#    the grid's tolerance: the pipeline's backward draws its microbatch's
#    own dropout masks (not those of the forward that ran last).
# Prints one line per run.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TOOL=$(cd "$OLDPWD" && realpath "$1")
"$TOOL" data data.bin 40000 61 >/dev/null || exit 1

# train NAME MODEL FLAGS...: 3 steps of 4 microbatches; NAME.json, NAME.grads.
train() {
  name=$1 file=$2
  shift 2
  "$SHARDC" run "$file" -D vocab=97 -D seq=16 -D hidden=32 -D heads=4 -D layers=4 -D batch=2 \
    -D dropout_rate=0.1 --vocab-multiple 8 "$@" --out "prog-$name" --data data.bin --steps 3 \
    --no-shuffle --global-batch 8 --lr 1e-2 --log-every 1 --log-json "$name.json" \
    --dump-grads "$name.grads" >"$name.out" 2>&1 </dev/null
}
losses() { sed 's/,"tokens_per_s":[^}]*//; s/"lr":[^,]*,//' "$1.json" | tr -d '\n'; }

# same REF NAME MODEL FLAGS...: NAME must equal REF to the bit.
same() {
  ref=$1 name=$2
  shift 2
  if ! train "$name" "$@"; then
    fail "$name: exit"; tail -5 "$name.out"; return
  fi
  kept=$(awk '/activations kept/ && !k { k = $5 } /without recomputation/ && !w { w = $3 }
    END { print k " of " w }' "$name.out")
  if [ "$(losses "$ref")" = "$(losses "$name")" ] && cmp -s "$ref.grads" "$name.grads"; then
    ok "$name: losses, gradient norms and gradients equal $ref's to the bit (kept $kept bytes)"
  else
    fail "$name: differs from $ref"
    echo "      $ref:  $(losses "$ref")"
    echo "      $name: $(losses "$name")"
  fi
}

for model in gpt2 unfused; do
  m="$ROOT/models/$model.shard"
  [ -f "$m" ] || m="$ROOT/tests/features/recompute/$model.shard"
  for layout in p1 p2 t2; do
    case $layout in
    p1) flags="--pp 1" ;;
    p2) flags="--pp 2" ;;
    t2) flags="--tp 2 --sequence-parallel" ;;
    esac
    ref="$model-$layout"
    # shellcheck disable=SC2086 # a list of flags
    if ! train "$ref" "$m" $flags; then
      fail "$ref: exit"; tail -5 "$ref.out"; continue
    fi
    ok "$ref ($flags): losses $(losses "$ref" | cut -c1-120)"
    # shellcheck disable=SC2086
    same "$ref" "$ref-selective" "$m" $flags --recompute selective
    # shellcheck disable=SC2086
    same "$ref" "$ref-full" "$m" $flags --recompute full
    # shellcheck disable=SC2086
    same "$ref" "$ref-full2" "$m" $flags --recompute full --recompute-layers 2
  done
done

# Two stages against one rank (dropout on): the loss at step 3 within
# 1e-6, the step-1 gradients within 1e-5 of each tensor's largest entry.
for model in gpt2 unfused; do
  a=$(sed -n 3p "$model-p1.json" | sed 's/.*"loss":\([^,}]*\).*/\1/')
  b=$(sed -n 3p "$model-p2.json" | sed 's/.*"loss":\([^,}]*\).*/\1/')
  e=$(awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.1e", d / a }' 2>/dev/null || true)
  g=$("$TOOL" cmp "$model-p1.grads" "$model-p2.grads" 1e-5 || true)
  if awk -v e="$e" 'BEGIN { exit !(e <= 1e-6) }' && "$TOOL" cmp "$model-p1.grads" "$model-p2.grads" 1e-5 >/dev/null; then
    ok "$model, dropout 0.1: two stages against one rank: loss@3 rel $e; $g"
  else
    fail "$model, dropout 0.1: two stages against one rank: loss@3 rel $e; $g"
  fi
done
finish
