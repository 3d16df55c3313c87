#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# Checkpoints: safetensors round trips through --save and --init-from,
# every malformed file gives a clear error, and a save interrupted at any
# byte leaves the previous checkpoint loadable.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
make_corpus

# --- round trips ----------------------------------------------------------
"$TOY" --steps 0 --save d0 >/dev/null
"$TOY" --steps 0 --init-from d0/model.safetensors --seed 99 --save d1 >/dev/null
# The files differ in their run id (a run of another seed), not in a tensor:
# equal checksum manifests are equal tensors.
meta() { python3 "$(dirname "$0")/../features/reliability/st_meta.py" "$@"; }
echo "      run ids: $(meta d0/model.safetensors run_id) (seed 1337), $(meta d1/model.safetensors run_id) (seed 99)"
check "initial weights: save, init-from (other seed), save: identical tensors" \
  test "$(meta d0/model.safetensors checksums.xxh64)" = "$(meta d1/model.safetensors checksums.xxh64)"
check "  and the run ids differ" \
  test "$(meta d0/model.safetensors run_id)" != "$(meta d1/model.safetensors run_id)"

"$TOY" --data train.bin --val-data val.bin --steps 30 --lr 1e-2 --save dA >a.txt
"$TOY" --init-from dA/model.safetensors --val-data val.bin --steps 0 >b.txt
va=$(sed -n 's/^final: .*val loss //p' a.txt)
vb=$(sed -n 's/^final: val loss //p' b.txt)
echo "      val loss after training $va, after --init-from of its weights $vb"
check "trained weights load back (same val loss)" test -n "$va" -a "$va" = "$vb"
"$TOY" --init-from dA/state.safetensors --val-data val.bin --steps 0 >c.txt
vc=$(sed -n 's/^final: val loss //p' c.txt)
check "state.safetensors loads as weights too (val loss $vc)" test "$va" = "$vc"
"$TOY64" --init-from dA/model.safetensors --val-data val.bin --steps 0 >d.txt
vd=$(sed -n 's/^final: val loss //p' d.txt)
echo "      the f32 checkpoint in the f64 build: val loss $vd"
check "F32 weights convert into an f64 build" test -n "$vd"

# --- malformed files --------------------------------------------------------
M=dA/model.safetensors
size=$(wc -c <$M)
head -c 4 $M >tiny.st
expect_error "4 bytes" "tiny.st: truncated: 4 bytes, too short for a safetensors header" \
  "$TOY" --init-from tiny.st --steps 0
head -c 100 $M >head.st
expect_error "truncated in the header" "head.st: truncated or not safetensors: header length" \
  "$TOY" --init-from head.st --steps 0
head -c $((size - 100)) $M >data.st
expect_error "truncated in the data" "outside the" "$TOY" --init-from data.st --steps 0
"$TOOL" st json.st '{"wte.weight": {"dtype": "F32", ' 0
expect_error "bad JSON" "json.st: bad JSON header" "$TOY" --init-from json.st --steps 0
"$TOOL" st array.st '[1, 2]' 0
expect_error "header not an object" "array.st: the JSON header is not an object" \
  "$TOY" --init-from array.st --steps 0
"$TOOL" st range.st '{"wte.weight":{"dtype":"F32","shape":[256,16],"data_offsets":[0,16384]}}' 100
expect_error "offsets out of range" "range.st: tensor wte.weight: data_offsets [0, 16384] outside the 100 bytes of data" \
  "$TOY" --init-from range.st --steps 0
"$TOOL" st dtype.st '{"wte.weight":{"dtype":"F33","shape":[256,16],"data_offsets":[0,16384]}}' 16384
expect_error "unknown dtype" "dtype.st: tensor wte.weight: unknown dtype 'F33'" \
  "$TOY" --init-from dtype.st --steps 0
"$TOOL" st count.st '{"head.bias":{"dtype":"F32","shape":[256],"data_offsets":[0,1000]}}' 1000
expect_error "bytes do not match the shape" "count.st: tensor head.bias: 1000 bytes of data for shape [256] of F32 (1024 expected)" \
  "$TOY" --init-from count.st --steps 0
"$TOOL" st meta.st '{"__metadata__":{"step":5}}' 0
expect_error "metadata not a string" "meta.st: __metadata__ value of 'step' is not a string" \
  "$TOY" --init-from meta.st --steps 0
"$TOOL" st neg.st '{"head.bias":{"dtype":"F32","shape":[-256],"data_offsets":[0,1024]}}' 1024
expect_error "negative dimension" "neg.st: tensor head.bias: shape entry 0 is not a non-negative integer" \
  "$TOY" --init-from neg.st --steps 0
"$TOOL" st int.st '{"wte.weight":{"dtype":"I32","shape":[256,16],"data_offsets":[0,16384]},"head.weight":{"dtype":"F32","shape":[256,16],"data_offsets":[16384,32768]},"head.bias":{"dtype":"F32","shape":[256],"data_offsets":[32768,33792]}}' 33792
expect_error "integer weights" "int.st: tensor wte.weight: dtype I32 cannot be loaded as weights" \
  "$TOY" --init-from int.st --steps 0
"$TOOL" st shape.st '{"wte.weight":{"dtype":"F32","shape":[256,8],"data_offsets":[0,8192]},"head.weight":{"dtype":"F32","shape":[256,16],"data_offsets":[8192,24576]}}' 24576
expect_error "wrong shape (names tensor and both shapes)" "shape.st: tensor wte.weight has shape [256, 8], the model expects [256, 16]" \
  "$TOY" --init-from shape.st --steps 0
expect_error "missing tensor, reported on the same line" "; and 1 more problem, the last: missing tensor head.bias (the model expects [256])" \
  "$TOY" --init-from shape.st --steps 0
expect_error "resume from a folder without a checkpoint" "nodir/state.safetensors: cannot open" \
  "$TOY" --resume nodir
mkdir wonly && cp d0/model.safetensors wonly/state.safetensors
expect_error "resume from weights only" "wonly/state.safetensors: not a training state written by --save" \
  "$TOY" --resume wonly

# --- interrupted saves ------------------------------------------------------
"$TOY" --data train.bin --steps 5 --save dC >/dev/null
cp dC/state.safetensors state5.st && cp dC/model.safetensors model5.st
ssize=$(wc -c <dC/state.safetensors)
for cut in 0 7 600 $((ssize / 2)) $((ssize - 1)) $((ssize + 300)); do
  st=0
  RT_FAULT_AFTER_BYTES=$cut "$TOY" --resume dC --steps 10 >fault.txt 2>&1 || st=$?
  left=$(ls dC | tr '\n' ' ')
  if [ $st -eq 3 ] && cmp -s model5.st dC/model.safetensors &&
     { cmp -s state5.st dC/state.safetensors || [ $cut -gt $ssize ]; } &&
     "$TOY" --resume dC --steps 5 >r.txt 2>&1 && "$TOY" --init-from dC/model.safetensors --steps 0 >i.txt 2>&1; then
    ok "killed after $cut bytes of the save: exit $st, left $left; $(grep -h 'resumed\|nothing' r.txt | tr '\n' ' ' || true)"
  else
    fail "killed after $cut bytes: exit $st, files $left"
    { cat fault.txt r.txt i.txt 2>/dev/null || true; } | tail -5
  fi
done
"$TOY" --resume dC --steps 15 >after.txt 2>&1 || true
check "a later save replaces the leftover temp files" test ! -e dC/state.safetensors.tmp -a ! -e dC/model.safetensors.tmp
check "and the checkpoint is at step 15" grep -q "saved dC (step 15)" after.txt

# --- gradients for the oracle tests ----------------------------------------
"$TOY" --data train.bin --steps 1 --dump-grads grads.st --global-batch 8 >/dev/null
check "--dump-grads writes every parameter's gradient (loadable by name)" \
  "$TOY" --init-from grads.st --steps 0
finish
