#!/bin/bash
# Our training program against the PyTorch oracle, end to end:
#
#   tests/features/oracle/e2e.sh gpt2|llama [WORKDIR]
#
# with the compiler in SHARDC and the source tree in SHARDC_SRC, as ctest
# sets them (tests/CMakeLists.txt).
#
# 1. a shard of random tokens with vocab 97 (odd: no power-of-two luck);
# 2. initial weights from our program (--steps 0 --save DIR), which the
#    oracle loads: both sides start from the same bits;
# 3. 10 AdamW steps of ours from them (--init-from), 2 microbatches a step,
#    clipping, warmup and cosine decay, with --log-json and --dump-grads;
# 4. the same 10 steps by tests/features/oracle/oracle.py on the same weights and
#    the same windows of the same data (--no-shuffle);
# 5. compare.py prints the table and checks it. f32: the first loss within
#    1e-5, every gradient of step 1 within 1e-4 (norm of the difference over
#    the norm), every loss and gradient norm within 1e-4. DTYPE=f64 builds
#    both sides in f64, where only rounding separates them, and tightens the
#    tolerances to 1e-10 so that a difference of convention the f32 noise
#    would hide (a clipping epsilon, a bias correction in float) shows.
#
# Shapes: gpt2.shard with head dim 16, 3 layers and vocab 97; llama.shard
# with GQA (2 kv heads for 4 heads), rotary and SwiGLU. Exit 0 pass, 1 fail,
# 77 when PyTorch is missing (a skip for ctest).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
HERE=$ROOT/tests/features/oracle
PY=${PY:-/usr/bin/python3}
MODEL=${1:?usage: e2e.sh gpt2|llama [WORKDIR]}
DTYPE=${DTYPE:-f32}

if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "e2e: SKIP: no PyTorch for $PY (Debian package python3-torch)"
  exit 77
fi

case $MODEL in
gpt2) CONFIG="vocab=97,hidden=48,heads=3,layers=3" ;;
llama) CONFIG="vocab=97,hidden=64,heads=4,kv_heads=2,layers=2,ffn=88" ;;
*) echo "e2e: unknown model $MODEL (gpt2, llama)" >&2; exit 1 ;;
esac
case $DTYPE in
f32) TOL=(--first-rtol 1e-5 --grad-rtol 1e-4 --loss-rtol 1e-4 --norm-rtol 1e-3) ;;
f64) TOL=(--first-rtol 1e-10 --grad-rtol 1e-10 --loss-rtol 1e-10 --norm-rtol 1e-10) ;;
*) echo "e2e: unknown DTYPE $DTYPE (f32, f64)" >&2; exit 1 ;;
esac
SEQ=16 MICRO=2 GLOBAL=4 STEPS=10
DEFS=(-D "seq=$SEQ" --microbatch "$MICRO" --dtype "$DTYPE")
IFS=, read -ra kv <<<"$CONFIG"
for x in "${kv[@]}"; do DEFS+=(-D "$x"); done
# A large learning rate, so that 10 steps move the weights far enough for
# the later losses to test the update; the gradient norm (about 2) is
# above --clip in the first steps, so clipping takes part.
OPT=(--lr 1e-2 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --clip 1.0
     --warmup 2 --lr-min 1e-3 --lr-schedule cosine --optimizer adamw)

# The compiled program's cache (.shardc/) goes into the work folder:
# WORKDIR, kept, else checks.sh's temporary one.
if [[ -n ${2:-} ]]; then
  mkdir -p "$2"
  cd "$2"
fi
# One thread on each side: the machine is shared with other tests, and
# sums in a fixed order make a failure reproducible.
export OMP_NUM_THREADS=1

run() { echo "+ $*" >&2; "$@"; }

echo "e2e: $MODEL $CONFIG seq=$SEQ, microbatch $MICRO, global batch $GLOBAL, $STEPS steps, $DTYPE"
run "$PY" "$HERE/shard_data.py" random --vocab 97 --tokens 50000 --seed 1 -o data.bin
run "$SHARDC" run "$ROOT/models/$MODEL.shard" "${DEFS[@]}" --quiet --steps 0 --save init
run "$SHARDC" run "$ROOT/models/$MODEL.shard" "${DEFS[@]}" \
  --init-from init/model.safetensors --data data.bin --no-shuffle \
  --global-batch "$GLOBAL" --steps "$STEPS" "${OPT[@]}" \
  --log-json ours.jsonl --dump-grads ours.grads.safetensors >ours.txt ||
  { cat ours.txt; exit 1; }
run "$PY" "$HERE/oracle.py" --model "$MODEL" --config "$CONFIG" --dtype "$DTYPE" --threads 1 \
  --weights init/model.safetensors --data data.bin --no-shuffle --quiet \
  --batch "$MICRO" --seq "$SEQ" --global-batch "$GLOBAL" --steps "$STEPS" "${OPT[@]}" \
  --out oracle.json --grads oracle.grads.safetensors
run "$PY" "$HERE/compare.py" --log-json ours.jsonl --dump-grads ours.grads.safetensors \
  --oracle oracle.json --oracle-grads oracle.grads.safetensors "${TOL[@]}"
