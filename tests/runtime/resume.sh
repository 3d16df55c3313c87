#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# --resume continues bit-identically: 10 steps in one run and a run killed
# while saving at step 10, resumed from its step-5 checkpoint, log the same
# losses, learning rates and gradient norms to the last bit and end with the
# same weights. Shuffled data, 2 microbatches, warmup, cosine decay,
# clipping and AdamW all take part.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
make_corpus
FLAGS="--data train.bin --val-data val.bin --eval-every 4 --steps 10 --global-batch 8 --warmup 3 --lr 3e-2 --lr-min 1e-3 --clip 0.5"

"$TOY" $FLAGS --save dA --save-every 5 --log-json a.json >a.txt
# Kill the second run 100 bytes into its second save (the one at step 10):
# the step-5 checkpoint stays, the log already holds steps 6..10.
total=$(($(wc -c <dA/state.safetensors) + $(wc -c <dA/model.safetensors)))
st=0
RT_FAULT_AFTER_BYTES=$((total + 100)) "$TOY" $FLAGS --save dB --save-every 5 --log-json b.json >b1.txt 2>&1 ||
  st=$?
check "the second run died saving step 10 (exit $st, log holds $(wc -l <b.json) steps)" test $st -eq 3
# Only --resume and the log: every other flag comes from the checkpoint.
"$TOY" --resume dB --log-json b.json >b2.txt 2>&1 || true
{ grep -h "resumed\|^step 10/" b2.txt || true; } | sed 's/^/      /'
echo "      losses, one run:     $(sed 's/.*"loss":\([^,]*\).*/\1/' a.json | tr '\n' ' ')"
echo "      losses, 5 + resume:  $(sed 's/.*"loss":\([^,]*\).*/\1/' b.json | tr '\n' ' ')"
strip_timing a.json >a.clean
strip_timing b.json >b.clean
check "JSON logs identical byte for byte (without tokens_per_s), $(wc -l <a.clean) steps" cmp a.clean b.clean
check "val losses included ($(grep -c val_loss a.clean) evaluations)" test "$(grep -c val_loss a.clean)" -eq 3
check "final weights identical (model.safetensors byte for byte)" cmp dA/model.safetensors dB/model.safetensors
check "final progress lines agree" test "$(grep '^final' a.txt)" = "$(grep '^final' b2.txt)"

# The plain way: 5 steps, then --resume --steps 10, with a constant schedule
# (a cosine over 5 steps would differ from one over 10 by design).
C="--data train.bin --global-batch 8 --lr-schedule constant --optimizer adamw"
"$TOY" $C --steps 10 --log-json c.json >/dev/null
"$TOY" $C --steps 5 --save dD --log-json d.json >/dev/null
"$TOY" --resume dD --steps 10 --log-json d.json >/dev/null
strip_timing c.json >c.clean
strip_timing d.json >d.clean
check "5 + resume to 10 (constant lr) equals 10: identical logs" cmp c.clean d.clean

# SGD resumes too (no AdamW state in its checkpoint).
S="--data train.bin --optimizer sgd --lr 0.5 --no-shuffle --lr-schedule constant"
"$TOY" $S --steps 6 --log-json e.json >/dev/null
"$TOY" $S --steps 3 --save dE --log-json f.json >/dev/null
"$TOY" --resume dE --steps 6 --log-json f.json >/dev/null
strip_timing e.json >e.clean
strip_timing f.json >f.clean
check "sgd, --no-shuffle: 3 + resume to 6 equals 6" cmp e.clean f.clean
expect_error "an sgd checkpoint has no AdamW state" "no AdamW state in this checkpoint" \
  "$TOY" --resume dE --steps 8 --optimizer adamw
"$TOY" --resume dE --steps 6 --lr 0.1 >note.txt 2>&1 || true
sed "s/^/      /" note.txt | grep note || true
check "a flag that differs from the checkpoint is noted" grep -q "note: --lr 0.1 differs" note.txt
finish
