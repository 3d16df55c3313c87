#!/bin/bash
# The routed models on the CPU target: models/mixtral.shard trains the same
# losses on one rank, under --dp 2, --tp 2 and --pp 2 (the routed layer
# replicated), 3 steps within 1e-5, and with a capacity factor that drops
# copies; models/deepseek_moe.shard trains; the
# CUDA target writes the routed kernels; `shardc info` counts the active
# parameters.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
corpus_shards
M=("$ROOT/models/mixtral.shard" -D seq=16 -D hidden=32 -D ffn=48)
RUN=(--data train.bin --no-shuffle --global-batch 2 --steps 3 --quiet)
check "mixtral, one rank" "$SHARDC" run "${M[@]}" "${RUN[@]}" --log-json one.jsonl
for par in dp tp pp; do
  check "mixtral, --$par 2" "$SHARDC" run "${M[@]}" "--$par" 2 "${RUN[@]}" --log-json $par.jsonl
  if [[ -s one.jsonl && -s $par.jsonl ]] && paste <(losses one.jsonl) <(losses $par.jsonl) |
      awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / $1; printf "  %s %s rel %.2e\n", $1, $2, r;
             if (r > 1e-5) bad = 1 } END { exit bad }'; then
    ok "--$par 2 losses within 1e-5 of one rank's"
  else
    fail "--$par 2 losses differ from one rank's"
  fi
done
# A capacity factor of 0.5 drops copies: one rank and --dp 2 agree, and the
# losses differ from the dropless ones.
check "mixtral, capacity 0.5" "$SHARDC" run "${M[@]}" -D capacity=0.5 "${RUN[@]}" --log-json cap.jsonl
check "mixtral, capacity 0.5, --dp 2" "$SHARDC" run "${M[@]}" -D capacity=0.5 --dp 2 "${RUN[@]}" \
  --log-json capdp.jsonl
echo "  capacity 0.5: $(losses cap.jsonl | tr '\n' ' ')"
if [[ -s cap.jsonl ]] && cmp -s <(losses cap.jsonl) <(losses capdp.jsonl) &&
    ! cmp -s <(losses cap.jsonl) <(losses one.jsonl); then
  ok "capacity drops: the same losses on one rank and --dp 2, not the dropless ones"
else
  fail "capacity losses"
fi
check "deepseek_moe trains" "$SHARDC" run "$ROOT/models/deepseek_moe.shard" -D seq=16 -D hidden=32 \
  "${RUN[@]}" --log-json ds.jsonl
[[ -s ds.jsonl ]] && echo "  deepseek_moe losses: $(losses ds.jsonl | tr '\n' ' ')"
# info: 8 experts, 2 active: 451,904 weights in all, of which 393,216 in
# experts, so 451,904 - 393,216 * 6/8 = 156,992 per token.
"$SHARDC" info "$ROOT/models/mixtral.shard" >info.txt
sed 's/^/  /' info.txt | head -3
if grep -q '^parameters  *451,904$' info.txt && grep -q '^active per token  *156,992 ' info.txt; then
  ok "info counts total and active parameters"
else
  fail "info's counts"
fi
# info --ep 2: each rank holds 4 of the 8 experts, 451,904 - 393,216 / 2
# = 255,296 parameters; --ep 3 divides no layer's 8 experts.
"$SHARDC" info "$ROOT/models/mixtral.shard" --ep 2 >info_ep.txt
grep '^per rank' info_ep.txt | sed 's/^/  /'
if grep -q '^per rank at --ep 2  *255,296 ' info_ep.txt; then
  ok "info --ep 2 counts one expert rank's parameters"
else
  fail "info --ep 2's count"
fi
expect_error "info --ep 3" "must divide the 8 experts" "$SHARDC" info "$ROOT/models/mixtral.shard" --ep 3
# The CUDA target writes the routed ops' kernels (kernels/cuda/moe.cu; the
# emu/model/*-mixtral checks train the program on the emulator), where this
# shardc has the CUDA libraries.
if "$SHARDC" compile "${M[@]}" --target cuda -o cuda_out >cuda.log 2>&1; then
  n=$(grep -c 'k_cuda_router_fwd\|k_cuda_moe_dispatch\|k_cuda_grouped_linear' cuda_out/rank0.cu || true)
  echo "  cuda rank0.cu: $n calls of the routed kernels"
  if [[ $n -gt 0 ]]; then ok "cuda target writes the routed kernels"; else fail "no routed kernels in rank0.cu"; fi
elif grep -q 'built without the CUDA libraries' cuda.log; then
  echo "  (cuda target not built here: $(grep -m1 error cuda.log))"
else
  fail "cuda target: $(grep -m1 error cuda.log)"
fi
finish
