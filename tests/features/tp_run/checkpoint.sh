#!/bin/bash
# shellcheck disable=SC2086,SC1091 # flag lists are lists of words
# Checkpoints, sampling and failures of tensor-parallel programs (gpt2.shard,
# tiny, a vocabulary of 250 padded to 256, dropout 0.1 drawn per rank):
# - 10 steps at t = 2 with sequence parallelism in one run, and 5 + --resume
#   + 5, log the same losses to the last bit and save the same weights;
# - checkpoints hold whole unpadded tensors: the weights t = 2 saved load
#   unchanged into t = 1 and t = 4 (--init-from, then --save), and a
#   t = 2 state resumes at t = 4;
# - sampling at t = 2 writes what t = 1 writes from the same weights;
# - a rank program refuses a job of the wrong size, and a failure on the
#   ranks shows `shardc: error: rank R: ...` with a non-zero exit status.
#
#   checkpoint.sh RT_TESTTOOL TPTOOL MPIRUN_SH MPIEXEC
set -euo pipefail
. "$(dirname "$0")/../train/lib.sh"
TPTOOL=$2
MPIRUN_SH=$3
MPIEXEC=$4
MODEL="$ROOT/models/gpt2.shard -D vocab=250 -D hidden=16 -D heads=4 -D layers=2 -D seq=8 -D dropout_rate=0.1 --microbatch 2 --vocab-multiple 8"
gpt2() { t=$1; shift; "$SHARDC" run $MODEL --tp $t --sequence-parallel --out "p$t" "$@"; }
head -c 20000 "$ROOT/data/corpus.txt" >text.txt
check "shardc data makes the shards" "$SHARDC" data text.txt -o train.bin

# --- 10 steps against 5 + resume + 5 at t = 2 ----------------------------
C="--data train.bin --global-batch 4 --warmup 2 --lr 1e-2 --clip 0.5 --lr-schedule constant"
gpt2 2 $C --steps 10 --log-json c.json --save dC >c.txt 2>&1 || { cat c.txt; exit 1; }
gpt2 2 $C --steps 5 --save dD --log-json d.json >d1.txt 2>&1 || { cat d1.txt; exit 1; }
cp -r dD dE
gpt2 2 --resume dD --steps 10 --log-json d.json >d2.txt 2>&1 || { cat d2.txt; exit 1; }
echo "      losses, one run at t = 2:    $(losses c.json | tr '\n' ' ')"
echo "      losses, 5 + resume at t = 2: $(losses d.json | tr '\n' ' ')"
losses c.json >c.loss
losses d.json >d.loss
check "10 losses each, equal to the last bit" test "$(wc -l <c.loss)" -eq 10 -a "$(wc -l <d.loss)" -eq 10
check "  ... and equal" cmp c.loss d.loss
check "final weights identical byte for byte" cmp dC/model.safetensors dD/model.safetensors
check "only rank 0 printed progress ($(grep -c '^step' c.txt) lines for 10 steps)" \
  test "$(grep -c '^step' c.txt)" -eq 2

# --- whole tensors: the t = 2 weights in t = 1 and t = 4 -------------------
for t in 1 4; do
  gpt2 $t --init-from dC/model.safetensors --steps 0 --save "dI$t" >i$t.txt 2>&1 ||
    { cat i$t.txt; exit 1; }
  check "t = 2's weights load into t = $t and save back unchanged: $("$TPTOOL" cmp dC/model.safetensors dI$t/model.safetensors 0)" \
    "$TPTOOL" cmp dC/model.safetensors "dI$t/model.safetensors" 0
done
check "the padded vocabulary is saved unpadded (wte.weight [250, 16])" \
  grep -q '"wte.weight":{"dtype":"F32","shape":\[250,16\]' dC/model.safetensors
# (Dropout draws per-rank streams, so t = 4 continues differently.)
gpt2 4 --resume dE --steps 10 --log-json e.json >e.txt 2>&1 || { cat e.txt; exit 1; }
check "a t = 2 state resumes at t = 4 ($(grep -h 'resumed' e.txt))" grep -q "resumed from dE at step 5" e.txt
echo "      losses, 5 at t = 2 + 5 at t = 4: $(losses e.json | tr '\n' ' ')"

# --- sampling ----------------------------------------------------------------
S="--init-from dC/model.safetensors --steps 0 --quiet --sample-prompt Elizabeth --sample-tokens 24 --temperature 0.8 --seed 5"
gpt2 1 $S >s1.txt 2>&1 || { cat s1.txt; exit 1; }
gpt2 2 $S >s2.txt 2>&1 || { cat s2.txt; exit 1; }
check "sampling at t = 2 writes what t = 1 writes: '$(head -c 40 s2.txt | tr -c '[:print:]' '.')'" cmp s1.txt s2.txt

# --- failures ------------------------------------------------------------------
expect_error "the t = 2 program alone refuses to start" \
  "compiled for t=2 x p=1 x d=1 = 2 ranks, but the job has 1" p2/rank0 --data train.bin --steps 1
st=0
timeout -k 5 60 sh "$MPIRUN_SH" "$MPIEXEC" 3 p2/rank0 --data train.bin --steps 1 >w.txt 2>&1 || st=$?
check "on 3 ranks it fails (exit $st): $(grep -m1 'shardc: error' w.txt)" \
  sh -c "[ $st -ne 0 ] && grep -q 'shardc: error: rank [0-2]: this program was compiled for t=2 x p=1 x d=1 = 2 ranks, but the job has 3' w.txt"
st=0
gpt2 2 --data train.bin --steps 2 --init-from missing.safetensors >f.txt 2>&1 || st=$?
check "a failure on the ranks (exit $st): $(grep -m1 'shardc: error' f.txt)" \
  sh -c "[ $st -ne 0 ] && grep -q 'shardc: error: rank [01]: missing.safetensors: cannot open' f.txt"
finish
