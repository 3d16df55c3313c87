#!/bin/bash
# A published mixture-of-experts training result against the simulator
# (docs/planner.md, Mixtures of experts, where the source is cited):
# Megatron-Core's MoE README (NVIDIA/Megatron-LM,
# megatron/core/transformer/moe/README.md) gives 468 TFLOPS per GPU for
# Mixtral 8x7B bf16 training with MCore v0.9, and as the reference mapping
# of Mixtral 8x7B (dropless, all-to-all dispatcher, BF16): 64 H100 GPUs,
# sequence 4096, TP 1, EP 8, PP 4, VP 8, MBS 1, GBS 256, on DGX H100
# (NVLink 4, 8 x 400 Gbit/s InfiniBand), with the distributed optimizer
# and the gradient reduction overlapped. Replayed here as
# models/mixtral.shard at that shape on the h100 preset, bf16 (Megatron's
# --bf16 reduces gradients in fp32), ZeRO-1 for the distributed
# optimizer, the reduction bucket by bucket, the default imbalance.
# Prints ours, the README's and the ratio; holds the ratio within 25%.
#   moe_paper.sh MODELS_DIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
models=$1
# Files of its own, apart from the other tests that run beside it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
published=468
"$SHARDC" simulate "$models/mixtral.shard" -D hidden=4096 -D ffn=14336 -D layers=32 -D heads=32 \
  -D kv_heads=8 -D vocab=32000 -D seq=4096 --pp 4 --vpp 8 --dp 16 --ep 8 --microbatch 1 \
  --global-batch 256 --zero 1 --precision bf16 --no-memory-plan --hw h100 >mixtral.txt
cat mixtral.txt
ours=$(sed -n 's/^TFLOP\/s per GPU *\([0-9.]*\).*/\1/p' mixtral.txt)
ratio=$(awk -v a="$ours" -v b="$published" 'BEGIN { printf "%.3f", a / b }')
printf '| %s | %s | %s | %s | %s |\n' "Megatron-Core MoE README" \
  "Mixtral 8x7B, 64 H100, t=1 ep=8 p=4 v=8 d=16, b=1, B=256, s=4096, bf16" \
  "$published TFLOP/s per GPU" "$ours TFLOP/s per GPU" "ratio $ratio"
check "Mixtral 8x7B: ours / published = $ratio, within 25%" \
  awk -v r="$ratio" 'BEGIN { exit !(r >= 0.75 && r <= 1.25) }'
check "Mixtral 8x7B: the reference mapping fits in 80 GiB" bash -c "! grep -q 'does not fit' mixtral.txt"
finish
