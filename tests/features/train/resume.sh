#!/bin/bash
# shellcheck disable=SC2086,SC1091 # flag lists are lists of words
# --resume with a real compiled program (gpt2.shard, tiny): 10 steps in one
# run and 5 + --resume + 5 log the same losses to the last bit, and a save
# interrupted in the middle (RT_FAULT_AFTER_BYTES) leaves the previous
# checkpoint loadable. Shuffled data, dropout, 2 microbatches, warmup,
# cosine decay, clipping, AdamW and validation all take part.
#
#   resume.sh RT_TESTTOOL
set -euo pipefail
. "$(dirname "$0")/lib.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D hidden=32 -D heads=2 -D layers=2 -D seq=16 -D dropout_rate=0.1 --microbatch 2"
gpt2() { "$SHARDC" run $MODEL "$@"; }
head -c 20000 "$ROOT/data/corpus.txt" >text.txt
check "shardc data makes the shards" "$SHARDC" data text.txt -o train.bin --val val.bin

# --- 10 steps against 5 + resume + 5 (constant lr after the warmup) --------
C="--data train.bin --global-batch 4 --warmup 2 --lr 1e-2 --clip 0.5 --lr-schedule constant"
gpt2 $C --steps 10 --log-json c.json --save dC >c.txt 2>&1 || { cat c.txt; exit 1; }
gpt2 $C --steps 5 --save dD --log-json d.json >d1.txt 2>&1 || { cat d1.txt; exit 1; }
gpt2 --resume dD --steps 10 --log-json d.json >d2.txt 2>&1 || { cat d2.txt; exit 1; }
grep -h "resumed" d2.txt | sed 's/^/      /'
echo "      losses, one run:    $(losses c.json | tr '\n' ' ')"
echo "      losses, 5 + resume: $(losses d.json | tr '\n' ' ')"
losses c.json >c.loss
losses d.json >d.loss
check "the 10 loss fields are equal as printed (17 digits: every bit)" \
  test "$(wc -l <c.loss)" -eq 10 -a "$(wc -l <d.loss)" -eq 10
check "  ... and equal" cmp c.loss d.loss
strip_timing c.json >c.clean
strip_timing d.json >d.clean
check "whole JSON logs identical (lr, grad_norm too; without tokens_per_s)" cmp c.clean d.clean
check "final weights identical byte for byte" cmp dC/model.safetensors dD/model.safetensors

# --- a save killed in the middle --------------------------------------------
# Cosine over 10 steps, a checkpoint every 5, validation every 5. Run A goes
# through; run B dies 100 bytes into its save at step 10 (the state file is
# written first), so its step-5 checkpoint must stay whole: resuming it must
# give A's log and A's final weights.
F="--data train.bin --val-data val.bin --eval-every 5 --eval-batches 2 --steps 10 --global-batch 4 --warmup 2 --lr 1e-2 --lr-min 1e-3 --clip 0.5 --save-every 5"
gpt2 $F --save dA --log-json a.json >a.txt 2>&1 || { cat a.txt; exit 1; }
ssize=$(wc -c <dA/state.safetensors)
msize=$(wc -c <dA/model.safetensors)
one=$((ssize + msize))
st=0
RT_FAULT_AFTER_BYTES=$((one + 100)) gpt2 $F --save dB --log-json b.json >b1.txt 2>&1 || st=$?
check "run B died 100 bytes into the step-10 save (exit $st, $(grep -c . b.json) steps logged, left: $(ls dB | tr '\n' ' '))" \
  test $st -eq 3
check "the step-5 state is loadable by itself (--init-from, weights only)" \
  gpt2 --init-from dB/state.safetensors --steps 0
st=0
gpt2 --resume dB --log-json b.json >b2.txt 2>&1 || st=$?
check "--resume from the step-5 checkpoint runs (exit $st)" grep -q "resumed from dB at step 5" b2.txt
echo "      losses, one run:         $(losses a.json | tr '\n' ' ')"
echo "      losses, killed + resume: $(losses b.json | tr '\n' ' ')"
strip_timing a.json >a.clean
strip_timing b.json >b.clean
check "identical logs, loss fields to the last bit ($(grep -c val_loss a.clean) validations included)" \
  cmp a.clean b.clean
check "identical final weights" cmp dA/model.safetensors dB/model.safetensors

# Killed while writing the weights file, after the new state file was
# renamed into place: the state is the step-10 one (self-contained, the same
# bytes as A's), the weights file the step-5 one, and both load. E saves
# under A's folder name, which the state's metadata records.
mv dA dA.done
st=0
RT_FAULT_AFTER_BYTES=$((one + ssize + 100)) gpt2 $F --save dA >e.txt 2>&1 || st=$?
check "run E died in the weights file of its step-10 save (exit $st)" test $st -eq 3
check "its state file is the complete step-10 one (as A's, byte for byte)" \
  cmp dA.done/state.safetensors dA/state.safetensors
check "its old weights file still loads" gpt2 --init-from dA/model.safetensors --steps 0
st=0
gpt2 --resume dA >e2.txt 2>&1 || st=$?
check "and --resume finds nothing left to do (exit $st)" grep -q "nothing to train" e2.txt
finish
