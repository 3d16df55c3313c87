#!/bin/bash
# run.sh TPTOOL MODEL: tensor(+sequence)-parallel training
# over MPI against one rank, with real programs (`shardc run --tp N`).
#
# For each configuration of MODEL (t = 1, 2, 4, with and without
# --sequence-parallel, at a tiny odd shape whose vocabulary needs padding)
# it trains 10 steps (2 microbatches a step, --no-shuffle, dropout 0) and
# checks against the one-rank run:
# - the losses: within 1e-5 relative at step 1 and 1e-4 at step 10;
# - the gradients of step 1 (--dump-grads: whole, unpadded tensors gathered
#   from the ranks) within 1e-5 of the tensor's largest entry;
# - the bytes every rank sent on the tensor axis in every step
#   (--comm-stats): the program's collectives send exactly the compiler's
#   `--report comm` times the microbatches; the runtime's own reductions
#   (the gradient norm) are reported beside them.
# It prints the table of what it compared.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TOOL=$(cd "$OLDPWD" && realpath "$1")
MODEL=$2
FILE=$ROOT/models/$MODEL.shard
HERE=$ROOT/tests/features/tp_run
# One thread a rank: small shapes, and ranks that share two cores.
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
STEPS=10
MICRO=2

case $MODEL in
gpt2)
  # A vocabulary of 97 pads to 112 at t = 2 and 128 at t = 4.
  SHAPES="A:-D vocab=97 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 -D batch=2"
  CONFIGS="A:1: A:2: A:2:sp A:4: A:4:sp"
  ;;
llama)
  # Grouped-query attention: 2 kv heads over t = 2; at t = 4, 4 over 4.
  SHAPES="A:-D vocab=65 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=2 -D batch=2
B:-D vocab=65 -D seq=8 -D hidden=32 -D heads=8 -D kv_heads=4 -D ffn=48 -D layers=2 -D batch=2"
  CONFIGS="A:1: A:2: A:2:sp B:1: B:4: B:4:sp"
  ;;
parallel_residual)
  # tests/features/tp's own model: one all-reduce per layer for attention and MLP
  # together, q/k/v through head-preserving reshapes.
  FILE=$HERE/../tp/parallel_residual.shard
  SHAPES="A:-D vocab=61 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 -D batch=2"
  CONFIGS="A:1: A:2: A:2:sp A:4:"
  ;;
output_bias)
  # An output layer of its own with a bias (tests/features/gpu's vector
  # model): the bias splits over the vocabulary with the logits, and pads
  # with them (61 to 64 at t = 2).
  FILE=$HERE/../gpu/vector.shard
  SHAPES="A:-D vocab=61 -D seq=5 -D hidden=12 -D batch=2"
  CONFIGS="A:1: A:2:"
  ;;
*)
  echo "run.sh: unknown model $MODEL"
  exit 2
  ;;
esac

"$TOOL" data data.bin 40000 61 || exit 1
FAILS=0

shape_of() { echo "$SHAPES" | sed -n "s/^$1://p"; }

# run NAME SHAPE T SP: trains and leaves NAME.json, NAME.grads, NAME.out.
run() {
  name=$1 defs=$(shape_of "$2") t=$3 sp=${4:+--sequence-parallel}
  st=0
  # shellcheck disable=SC2086
  "$SHARDC" run "$FILE" $defs --vocab-multiple 8 --tp "$t" $sp --out "prog-$name" \
    --data data.bin --steps $STEPS --no-shuffle --global-batch $((2 * MICRO)) --lr 1e-2 --log-every $STEPS \
    --log-json "$name.json" --dump-grads "$name.grads" --comm-stats >"$name.out" 2>&1 || st=$?
  if [ $st -ne 0 ] || [ ! -s "$name.json" ]; then
    echo "FAIL: $name: exit $st"
    tail -5 "$name.out" | sed 's/^/      /'
    FAILS=$((FAILS + 1))
    return 1
  fi
}

loss_at() { sed -n "$2p" "$1.json" | sed 's/.*"loss":\([^,}]*\).*/\1/'; }
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; printf "%.1e", d / m }' 2>/dev/null || true; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# The bytes each rank sends per microbatch by the compiler's report.
report_bytes() {
  defs=$(shape_of "$1") t=$2 sp=${3:+--sequence-parallel}
  # shellcheck disable=SC2086
  "$SHARDC" compile "$FILE" $defs --vocab-multiple 8 --tp "$t" $sp --report comm |
    sed -n 's/^per rank: \([0-9]*\) bytes sent.*/\1/p'
}

printf '%s: %d steps of %d microbatches, losses and step-1 gradients against t = 1\n' "$MODEL" \
  $STEPS $MICRO
printf '%-10s %-20s %-9s %-20s %-9s %-9s %-34s %s\n' config "loss@1" "rel.err" "loss@$STEPS" \
  "rel.err" "grads@1" "tensor bytes/step/rank (= report x $MICRO)" "+ runtime"
for c in $CONFIGS; do
  shape=${c%%:*} rest=${c#*:} t=${rest%%:*} sp=${rest#*:}
  name="$shape-t$t${sp:+-sp}"
  label="$shape t=$t${sp:+ sp}"
  run "$name" "$shape" "$t" "$sp" || continue
  l1=$(loss_at "$name" 1) l10=$(loss_at "$name" $STEPS)
  want=$(report_bytes "$shape" "$t" "$sp" || true)
  # Every rank, every step: the program's bytes and the runtime's.
  lines=$(grep -c '^comm: rank' "$name.out" || true)
  prog=$(sed -n 's/^comm: rank [0-9]* step [0-9]* | tensor: program \([0-9]*\) bytes.*/\1/p' "$name.out" | sort -u)
  rtb=$(sed -n 's/.*, runtime \([0-9]*\) bytes.*/\1/p' "$name.out" | sort -u | tr '\n' ' ')
  bytes_ok=1
  if [ "$lines" -ne $((t * STEPS)) ] || [ "$(echo "$prog" | wc -l)" -ne 1 ] ||
    [ "$prog" != $((want * MICRO)) ]; then
    bytes_ok=0
  fi
  bytes="$prog = $want x $MICRO"
  [ $bytes_ok -eq 1 ] || bytes="$(echo "$prog" | tr '\n' ' ')!= $want x $MICRO ($lines lines)"
  if [ "$t" = 1 ] && [ -z "$sp" ]; then
    eval "ref_$shape=$name"
    printf '%-10s %-20s %-9s %-20s %-9s %-9s %-34s %s\n' "$label" "$l1" "(ref)" "$l10" "(ref)" \
      "(ref)" "$bytes" "$rtb"
    [ $bytes_ok -eq 1 ] || { echo "FAIL: $label: bytes sent"; FAILS=$((FAILS + 1)); }
    continue
  fi
  ref=
  eval "ref=\$ref_$shape"
  e1=$(relerr "$l1" "$(loss_at "$ref" 1)") e10=$(relerr "$l10" "$(loss_at "$ref" $STEPS)")
  gst=0
  g=$("$TOOL" cmp "$ref.grads" "$name.grads" 1e-5) || gst=$?
  ge=$(echo "$g" | sed -n 's/.*largest entry \([^ ]*\) .*/\1/p')
  printf '%-10s %-20s %-9s %-20s %-9s %-9s %-34s %s\n' "$label" "$l1" "$e1" "$l10" "$e10" "$ge" \
    "$bytes" "$rtb"
  le "$e1" 1e-5 || { echo "FAIL: $label: loss at step 1"; FAILS=$((FAILS + 1)); }
  le "$e10" 1e-4 || { echo "FAIL: $label: loss at step $STEPS"; FAILS=$((FAILS + 1)); }
  [ $gst -eq 0 ] || { echo "FAIL: $label: gradients: $g"; FAILS=$((FAILS + 1)); }
  [ $bytes_ok -eq 1 ] || { echo "FAIL: $label: bytes sent"; FAILS=$((FAILS + 1)); }
done
if [ $FAILS -eq 0 ]; then
  echo "$MODEL: passed"
  exit 0
fi
echo "$MODEL: FAILED: $FAILS check(s)"
exit 1
