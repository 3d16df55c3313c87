#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# Checkpoints do not depend on the layout (t, p, d, v, ZeRO): gpt2.shard,
# tiny (4 layers, a vocabulary of 97 padded at t = 2), dropout 0, global
# batch 8 of microbatches of 2, AdamW.
#
# - 3 steps at t=2,p=2 saved; the step-4 and step-5 losses of --resume
#   under t=2,p=2 (the reference; step 5 follows the first update from the
#   loaded Adam state) and under t=1,p=1, t=1,p=4, d=4 (ZeRO off and on) and
#   t=2,p=2,d=2 with ZeRO, v = 1 and 2, agree within 1e-5 relative;
# - every layout's step-5 checkpoint holds the same tensors (tptool cmp
#   against the reference's within 1e-3 of each tensor's largest entry,
#   Adam moments included: the key part of c_attn.bias has a gradient of
#   pure rounding noise, the softmax being blind to it, which AdamW scales
#   up to steps of lr, so layouts that round differently part there first);
# - the same weights saved under every layout give the same model file
#   byte for byte (--init-from, --steps 0, --save);
# - --dump-grads of the first step under every layout equals one rank's
#   within 1e-5 of each tensor's largest entry;
# - a save killed in the middle leaves the previous checkpoint, which
#   resumes under another layout with the same losses;
# - tensors missing on one stage only: every rank stops, exit 1, the error
#   names the tensor.
#
#   checkpoint.sh TPTOOL
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TOOL=$(cd "$OLDPWD" && realpath "$1")
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
MODEL="$ROOT/models/gpt2.shard -D vocab=97 -D hidden=16 -D heads=4 -D layers=4 -D seq=8 --microbatch 2 --vocab-multiple 8"
G=8
C="--lr 1e-2 --warmup 2 --lr-schedule constant --clip 0.5"
# name:compile flags (t, p, d, v, zero)
LAYOUTS="A:--tp,2,--pp,2
B:--tp,1
C:--pp,4
D:--dp,4,--zero,0
E:--dp,4,--zero,1
F:--tp,2,--pp,2,--dp,2,--zero,1
G:--tp,2,--pp,2,--vpp,2,--dp,2,--zero,1"
flags_of() { echo "$LAYOUTS" | sed -n "s/^$1://p" | tr , ' '; }
names=$(echo "$LAYOUTS" | sed 's/:.*//')
# run NAME OUT ARGS...: the layout's programs with the run's flags.
run() {
  n=$1 out=$2
  shift 2
  # The global batch shapes the pipeline programs (m = G / (batch * d)).
  "$SHARDC" run $MODEL $(flags_of "$n") --out "prog-$n" --global-batch $G "$@" >"$out" 2>&1 || {
    fail "$n: $* (exit $?)"
    tail -5 "$out" | sed 's/^/      /'
    return 1
  }
}
loss_at() { { grep "\"step\":$2," "$1" || true; } | sed 's/.*"loss":\([^,}]*\).*/\1/'; }
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; printf "%.1e", d / m }' 2>/dev/null || true; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

"$TOOL" data data.bin 40000 97 || exit 1

# --- a checkpoint of t=2,p=2 resumed under every layout -------------------------
run A a3.txt --data data.bin $C --steps 3 --save ck3 --log-json a3.json || exit 1
grep -q '"layout"' ck3/state.safetensors && echo "      saved under: $(grep -ao '"layout":"[^"]*"' ck3/state.safetensors)"
printf '%-6s %-40s %-20s %-8s %-20s %s\n' layout "flags" "loss@4" "rel.err" "loss@5" "rel.err"
for n in $names; do
  rm -f "r$n.json"
  run $n "r$n.txt" --data data.bin --resume ck3 --steps 5 --save "ck5$n" --log-json "r$n.json" || continue
  grep -q "resumed from ck3 at step 3" "r$n.txt" || fail "$n: did not resume at step 3"
  l=$(loss_at "r$n.json" 4) l5=$(loss_at "r$n.json" 5)
  if [ $n = A ]; then
    ref=$l ref5=$l5
    printf '%-6s %-40s %-20s %-8s %-20s %s\n' $n "$(flags_of $n)" "$l" "(ref)" "$l5" "(ref)"
    continue
  fi
  e=$(relerr "$l" "$ref") e5=$(relerr "$l5" "$ref5")
  printf '%-6s %-40s %-20s %-8s %-20s %s\n' $n "$(flags_of $n)" "$l" "$e" "$l5" "$e5"
  le "$e" 1e-5 || fail "$n: loss at step 4 $l against $ref"
  le "$e5" 1e-5 || fail "$n: loss at step 5 $l5 against $ref5"
done

# --- the step-5 checkpoints hold the same tensors ---------------------------------
for n in $names; do
  [ $n = A ] && continue
  [ -f "ck5$n/state.safetensors" ] || continue
  st=0
  s=$("$TOOL" cmp ck5A/state.safetensors "ck5$n/state.safetensors" 1e-3) || st=$?
  echo "      step-5 state of $n against A's: $s"
  [ $st -eq 0 ] || fail "$n: step-5 state"
done

# --- the same weights give the same file under every layout ------------------------
for n in $names; do
  run $n "i$n.txt" --init-from ck5A/model.safetensors --steps 0 --save "i$n" || continue
  if cmp -s iA/model.safetensors "i$n/model.safetensors"; then
    echo "      $n: model.safetensors of the same weights identical to A's"
  else
    fail "$n: model.safetensors differs from A's: $("$TOOL" cmp iA/model.safetensors "i$n/model.safetensors" 0 || true)"
  fi
done

# --- the reduced gradients of the first step ----------------------------------------
for n in $names; do
  run $n "g$n.txt" --data data.bin $C --steps 1 --dump-grads "g$n.st" || continue
done
for n in $names; do
  [ $n = B ] && continue
  [ -f "g$n.st" ] || continue
  st=0
  g=$("$TOOL" cmp gB.st "g$n.st" 1e-5) || st=$?
  echo "      --dump-grads of $n against one rank: $g"
  [ $st -eq 0 ] || fail "$n: gradients of step 1"
done

# --- a save killed in the middle (world rank 0 writes) -----------------------------
# t=2,p=2 saves at steps 2 and 4; run B dies 100 bytes into the step-4 save:
# its step-2 checkpoint resumes under t=1,p=4 with A's losses of steps 3, 4.
F="--data data.bin --steps 4 --save-every 2 $C"
run A fa.txt $F --save fA --log-json fa.json || true
one=$(($(wc -c <fA/state.safetensors) + $(wc -c <fA/model.safetensors)))
st=0
RT_FAULT_AFTER_BYTES=$((one + 100)) timeout 120 "$SHARDC" run $MODEL $(flags_of A) --out prog-A \
  --global-batch $G $F --save fB >fb.txt 2>&1 || st=$?
echo "      run B died in its step-4 save (exit $st), left: $(ls fB | tr '\n' ' ')"
[ $st -ne 0 ] && grep -q "fault injected" fb.txt || fail "run B did not die in its save"
run C fc.txt --resume fB --save fC --log-json fc.json || true
grep -q "resumed from fB at step 2" fc.txt || fail "B's step-2 checkpoint did not resume"
for s in 3 4; do
  a=$(loss_at fa.json $s) c=$(loss_at fc.json $s)
  echo "      step $s: loss $a (t=2,p=2 throughout), $c (t=1,p=4 from the step-2 checkpoint): $(relerr "$c" "$a")"
  le "$(relerr "$c" "$a")" 1e-5 || fail "step $s after the killed save"
done

# --- a problem only one stage sees --------------------------------------------------
# Weights of a 2-layer model into 4 layers at t=2,p=2: the second stage's
# layers are missing; every rank stops (exit 1) and the error names them.
"$SHARDC" run $MODEL -D layers=2 --out prog-l2 --steps 0 --save l2 >/dev/null 2>&1 || true
st=0
timeout 120 "$SHARDC" run $MODEL $(flags_of A) --out prog-A --global-batch $G \
  --init-from l2/model.safetensors --steps 0 >l2.txt 2>&1 || st=$?
echo "      missing layers of stage 1 (exit $st): $(grep -m1 'rank [0-9]*: ' l2.txt)"
[ $st -eq 1 ] && grep -q 'shardc: error: rank [23]: l2/model.safetensors: missing tensor h.2.ln_1.weight (the model expects \[16\]).* the last: missing tensor h.3.mlp.c_proj.bias (the model expects \[16\])' l2.txt ||
  fail "missing tensors of stage 1: exit $st"

if [ $FAILS -eq 0 ]; then
  echo "checkpoints across layouts: passed"
  exit 0
fi
echo "checkpoints across layouts: FAILED: $FAILS check(s)"
exit 1
