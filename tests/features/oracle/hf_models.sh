#!/bin/bash
# A shipped model against Hugging Face transformers' own class for it:
#
#   tests/features/oracle/hf_models.sh neox|mixtral [WORKDIR]
#
# Our program draws the initial weights (--steps 0 --save; for Mixtral,
# HF draws them and save_pretrained writes a sharded set that our
# --init-from reads, its per-expert tensors stacked), trains 5 AdamW
# steps from them on a shard of random tokens (--no-shuffle, fp32, one
# thread, constant learning rate, no clipping) and saves the result;
# hf_models.py loads the same initial weights into GPTNeoXForCausalLM, takes
# the same 5 steps with torch.optim.AdamW and compares every step's loss,
# and HF's loss of our final weights with that of its own, within 1e-5;
# DTYPE=f64 runs both sides in double and holds 1e-10, where a difference
# of convention cannot hide in fp32's rounding. init_std is raised to 0.1 so that the
# attention is far from uniform and a wrong rotary or mask would show.
# Exit 0 pass, 1 fail, 77 without transformers (build/pyenv, from
# scripts/install-deps.sh) or torch.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL=${1:?usage: hf_models.sh neox [WORKDIR]}
# WORKDIR, relative to where the test started (checks.sh has moved into
# its own folder since).
W=${2:+$(cd "$OLDPWD" && realpath -m "$2")}
HERE=$ROOT/tests/features/oracle
PY=${PY:-${SHARDC_PYENV:-$ROOT/build/pyenv}/bin/python}
if [[ ! -x $PY ]]; then
  echo "hf_models: SKIP: no $PY (scripts/install-deps.sh makes it, with transformers)"
  exit 77
fi
if ! "$PY" -c 'import torch, transformers' 2>/dev/null; then
  echo "hf_models: SKIP: $PY cannot import torch and transformers"
  exit 77
fi
case $MODEL in
neox) CONFIG="vocab=97,hidden=64,heads=4,layers=2,init_std=0.1" ;;
mixtral) CONFIG="vocab=97,hidden=32,heads=4,kv_heads=2,layers=2,ffn=48,experts=8,top_k=2,router_aux_loss_coef=0.02,init_std=0.1" ;;
*) echo "hf_models: unknown model $MODEL (neox, mixtral)" >&2; exit 1 ;;
esac
DTYPE=${DTYPE:-f32}
case $DTYPE in
f32) TOL=1e-5 ;;
f64) TOL=1e-10 ;;
*) echo "hf_models: unknown DTYPE $DTYPE (f32, f64)" >&2; exit 1 ;;
esac
SEQ=16 BATCH=2 STEPS=5 LR=1e-2 WD=0.1
DEFS=(-D "seq=$SEQ" -D "batch=$BATCH" --dtype "$DTYPE")
IFS=, read -ra kv <<<"$CONFIG"
for x in "${kv[@]}"; do DEFS+=(-D "$x"); done
OPT=(--lr $LR --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay $WD --clip 0
     --warmup 0 --lr-schedule constant --optimizer adamw)
if [[ -n $W ]]; then mkdir -p "$W" && cd "$W"; fi
export OMP_NUM_THREADS=1
run() { echo "+ $*" >&2; "$@"; }
run "$PY" "$HERE/shard_data.py" random --vocab 97 --tokens 20000 --seed 1 -o data.bin
# Mixtral starts from HF's weights (save_pretrained's sharded set, one
# tensor per expert), which --init-from stacks; NeoX from ours.
if [[ $MODEL == mixtral ]]; then
  run "$PY" "$HERE/hf_models.py" --model "$MODEL" --config "$CONFIG" --seq $SEQ --make init
  INIT=init WEIGHTS=(--hf-init init)
  # One step at capacity 0.5: the slots it reports dropped against what
  # HF's router choices drop at that capacity.
  run "$SHARDC" run "$ROOT/models/$MODEL.shard" "${DEFS[@]}" -D capacity=0.5 --init-from init \
    --data data.bin --no-shuffle --global-batch $BATCH --steps 1 --log-json drops.jsonl --quiet >/dev/null
  WEIGHTS+=(--capacity 0.5 --ours-drops drops.jsonl)
else
  run "$SHARDC" run "$ROOT/models/$MODEL.shard" "${DEFS[@]}" --quiet --steps 0 --save init >/dev/null
  INIT=init/model.safetensors WEIGHTS=(--weights init/model.safetensors)
fi
run "$SHARDC" run "$ROOT/models/$MODEL.shard" "${DEFS[@]}" --init-from "$INIT" \
  --data data.bin --no-shuffle --global-batch $BATCH --steps $STEPS "${OPT[@]}" \
  --log-json ours.jsonl --save final --quiet >ours.txt || { cat ours.txt; exit 1; }
sed 's/^/  /' ours.txt
run "$PY" "$HERE/hf_models.py" --model "$MODEL" --config "$CONFIG" "${WEIGHTS[@]}" \
  --data data.bin --batch $BATCH --seq $SEQ --steps $STEPS --lr $LR --weight-decay $WD \
  --ours ours.jsonl --ours-final final/model.safetensors --tol $TOL --dtype "$DTYPE"
