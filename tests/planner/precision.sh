#!/bin/bash
# simulate --precision bf16 prices what the CUDA target's bf16 programs
# move (docs/planner.md): activations, pipeline messages and the
# tensor-parallel collectives at 2 bytes, as mixed precision does, but the
# weight gradients' data-parallel reduction and ZeRO-1's all-gather of the
# fp32 weights at 4. So a layout without data parallelism or a tied
# embedding across stages takes mixed precision's time to the last digit,
# one with replicas takes longer, and fp32 (4 bytes everywhere) longest.
# Mixed precision is compared as Megatron-LM of 2022 runs it (--megatron
# 2022), whose weight-gradient GEMMs accumulate in place as the compiler's
# programs do: the paper's 2021 code adds a pass per microbatch.
#
#   precision.sh MODEL
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL=$1
step() { # PRECISION LAYOUT...
  p=$1
  shift
  # shellcheck disable=SC2068
  extra=
  [ "$p" = mixed ] && extra="--megatron 2022"
  # shellcheck disable=SC2068,SC2086
  "$SHARDC" simulate "$MODEL" $@ $extra --hw a100 --precision "$p" --json |
    sed -n "s/.*\"step_time_s\":[[:space:]]*\([0-9.e+-]*\).*/\1/p"
}
for layout in "--tp 2 --global-batch 16" "--dp 2 --global-batch 16" "--dp 2 --zero 1 --global-batch 16"; do
  # shellcheck disable=SC2086
  m=$(step mixed $layout) b=$(step bf16 $layout) f=$(step fp32 $layout)
  echo "$layout: step time mixed $m s, bf16 $b s, fp32 $f s"
  case $layout in
  "--tp 2"*) want='m == b && b < f' ;;
  *) want='m < b && b < f' ;;
  esac
  if awk -v m="$m" -v b="$b" -v f="$f" "BEGIN { exit !($want) }"; then
    ok "$layout: $want"
  else
    fail "$layout: not $want"
  fi
done
finish
