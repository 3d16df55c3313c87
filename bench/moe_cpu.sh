#!/bin/bash
# Training speed of the tiny Mixtral (models/mixtral.shard's defaults:
# vocab 256, seq 64, hidden 64, 4 heads of which 2 key/value, 2 layers,
# 8 SwiGLU experts of 128, top 2) on the CPU target against Hugging Face
# transformers' MixtralForCausalLM in PyTorch (bench/hf_mixtral.py), on the
# same shape, batch (BATCH sequences a step, one microbatch) and threads,
# measured in the same run. Target of issue 24: shardc at least as fast
# (ratio >= 1).
#
# Both sides train in fp32 with AdamW, the gradient norm clipped to 1 and
# the load-balancing loss in the loss; shardc reads a byte-level shard of
# data/corpus.txt, the peer random tokens (the speed depends on neither).
# Both run with OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = torch threads =
# THREADS (default nproc) and OMP_WAIT_POLICY=passive (WAIT_POLICY; see
# bench/cpu_train.sh for why). shardc's tokens/s is over the steps after
# the first SKIP of its --log-json; the peer times STEPS steps after SKIP
# of warm-up. Each side runs TRIALS times, the two alternating, and keeps
# its best trial.
#
#   bench/moe_cpu.sh                    STEPS=40 SKIP=5 TRIALS=3 BATCH=8
#   THREADS=1 BATCH=16 bench/moe_cpu.sh
#   QUICK=1 bench/moe_cpu.sh            a smoke test (a few seconds): few
#                                       steps, one trial, every number
#                                       printed, no target enforced
#
# The peer's Python is build/pyenv's (SHARDC_PYENV to choose another), the
# one with transformers. Exit status 1 when the target is missed (not in
# QUICK mode), a number is missing or a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

BUILD=${BUILD:-build}
SHARDC=${SHARDC:-$BUILD/shardc}
THREADS=${THREADS:-$(nproc)}
QUICK=${QUICK:-}
STEPS=${STEPS:-40}
SKIP=${SKIP:-5}
TRIALS=${TRIALS:-3}
BATCH=${BATCH:-8}
WAIT_POLICY=${WAIT_POLICY-passive}
if [[ -n $QUICK ]]; then STEPS=6 SKIP=2 TRIALS=1; fi
PY=${PY:-${SHARDC_PYENV:-$BUILD/pyenv}/bin/python}

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
[[ -n $WAIT_POLICY ]] && export OMP_WAIT_POLICY=$WAIT_POLICY
. bench/common.sh
"$PY" -c 'import torch, transformers' 2>/dev/null ||
  die "$PY cannot import torch and transformers (scripts/install-deps.sh makes build/pyenv)"
[[ -x $SHARDC ]] || die "no compiler at $SHARDC (build first, or set SHARDC)"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
head -c 200000 data/corpus.txt >"$WORK/text.txt"
"$SHARDC" data "$WORK/text.txt" -o "$WORK/train.bin" >/dev/null

# The shape, as -D values for shardc and as flags for the peer.
SHAPE="vocab=256 seq=64 hidden=64 heads=4 kv_heads=2 layers=2 ffn=128 experts=8 top_k=2"
DEFS=() PEER=()
for kv in $SHAPE; do
  DEFS+=(-D "$kv")
  k=${kv%=*} v=${kv#*=}
  PEER+=("--${k//_/-}" "$v")
done
SEQ=64


ours="" theirs=""
for trial in $(seq "$TRIALS"); do
  "$SHARDC" run models/mixtral.shard "${DEFS[@]}" --out "$WORK/prog" --data "$WORK/train.bin" \
    --microbatch "$BATCH" --global-batch "$BATCH" --steps $((STEPS + SKIP)) --clip 1 --quiet \
    --log-json "$WORK/ours.jsonl" >"$WORK/ours.txt" 2>&1 || { cat "$WORK/ours.txt"; die "shardc failed"; }
  r=$(rate "$WORK/ours.jsonl" "$SKIP")
  [[ -n $r ]] || die "no tokens/s in shardc's log"
  "$PY" bench/hf_mixtral.py "${PEER[@]}" --batch "$BATCH" --threads "$THREADS" --warmup "$SKIP" \
    --steps "$STEPS" >"$WORK/hf.txt" 2>&1 || { cat "$WORK/hf.txt"; die "the PyTorch peer failed"; }
  h=$(sed -n 's/.*"tokens_per_s": \([0-9.e+-]*\).*/\1/p' "$WORK/hf.txt")
  [[ -n $h ]] || die "no tokens/s from the peer"
  printf '  trial %d: shardc %.0f tokens/s, HF %.0f tokens/s\n' "$trial" "$r" "$h"
  ours=$(best "$ours" "$r") theirs=$(best "$theirs" "$h")
done

versions=$("$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')
echo "tiny Mixtral ($SHAPE), batch $BATCH x $SEQ tokens, $THREADS thread(s), best of $TRIALS, $STEPS steps after $SKIP"
printf '  shardc                     %10.0f tokens/s\n' "$ours"
printf '  HF MixtralForCausalLM      %10.0f tokens/s (%s)\n' "$theirs" "$versions"
ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
echo "  ratio shardc / HF          $ratio x (target >= 1)"
if [[ -z $QUICK ]] && ! awk -v r="$ratio" 'BEGIN { exit !(r >= 1) }'; then
  echo "bench: target missed: shardc at $ratio x HF's speed"
  exit 1
fi
