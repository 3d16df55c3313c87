#!/bin/bash
# Every flag combination the training program rejects or would ignore is
# refused by `shardc simulate` with exit status 1 and one error line
# (planner/sim.c, pl_config_refusal). Where `shardc compile` rejects the
# combination itself (ZeRO-1 without replicas, chunks without stages), the
# error names it in the same words. Prints each error.
#   flags.sh MODEL
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
model=$1
tmp=out
# refused WORDS FLAGS...: simulate exits 1 and its first line holds WORDS.
refused() {
  words=$1
  shift
  status=0
  "$SHARDC" simulate "$model" --hw a100 "$@" >"$tmp" 2>&1 || status=$?
  line=$(head -n 1 "$tmp")
  case $line in
    *"$words"*) words_ok=1 ;;
    *) words_ok=0 ;;
  esac
  if [ $status = 1 ] && [ $words_ok = 1 ]; then
    ok "simulate $*: exit $status: $line"
  else
    fail "simulate $*: exit $status (expected 1): '$line' (expected '$words')"
  fi
}
refused "--sequence-parallel needs --tp > 1" --sequence-parallel
refused "--no-scatter-gather with --sequence-parallel" --tp 2 --sequence-parallel --no-scatter-gather
refused "--no-scatter-gather needs --tp > 1" --pp 2 --no-scatter-gather
refused "--no-scatter-gather needs --pp > 1" --tp 2 --no-scatter-gather
refused "--tp-overlap needs --tp > 1" --tp-overlap
refused "--zero 1 shards the optimizer over data-parallel replicas" --zero 1
refused "--vpp 2 needs pipeline stages" --vpp 2
refused "--dp-overlap: expected bucket, chunk or none" --dp-overlap some
refused "--bucket-mb: expected a positive number of MiB, got '0'" --dp 2 --bucket-mb 0
refused "--megatron describes mixed precision's PyTorch runs" --precision fp32 --megatron 2022
refused "--megatron: expected 2021 or 2022" --megatron 2020
refused "--bucket-mb needs --dp > 1" --bucket-mb 50
refused "--dp-overlap needs --dp > 1" --dp-overlap none
refused "--no-memory-plan goes with --precision fp32 or bf16" --no-memory-plan
# The compiler's words for the two it rejects itself.
for flags in "--zero 1" "--vpp 2"; do
  # shellcheck disable=SC2086
  "$SHARDC" compile "$model" --target cpu -o "$tmp.dir" $flags >"$tmp.c" 2>&1 || true
  # shellcheck disable=SC2086
  "$SHARDC" simulate "$model" --hw a100 $flags >"$tmp.s" 2>&1 || true
  c=$({ grep -o 'error: .*' "$tmp.c" || true; } | head -n 1 | sed 's/^error: //')
  s=$(head -n 1 "$tmp.s" | sed 's/^shardc simulate: error: //')
  if [ -n "$c" ] && [ "$c" = "$s" ]; then
    ok "$flags: compile and simulate say '$c'"
  else
    fail "$flags: compile says '$c', simulate says '$s'"
  fi
done
# plan refuses what it shares with simulate in the same words.
status=0
"$SHARDC" plan "$model" --hw a100 --gpus 2 --global-batch 8 --dp-overlap some >"$tmp.c" 2>&1 || status=$?
"$SHARDC" simulate "$model" --hw a100 --dp-overlap some >"$tmp.s" 2>&1 || true
p=$(head -n 1 "$tmp.c" | sed 's/^shardc plan: error: //')
s=$(head -n 1 "$tmp.s" | sed 's/^shardc simulate: error: //')
if [ $status = 1 ] && [ "$p" = "$s" ]; then
  ok "plan --dp-overlap some: exit $status: $p"
else
  fail "plan --dp-overlap some: exit $status (expected 1): '$p'; simulate says '$s'"
fi
# The same configurations, given legally, simulate.
if "$SHARDC" simulate "$model" --hw a100 --tp 2 --sequence-parallel --dp 2 --zero 1 --pp 2 --vpp 2 \
  --global-batch 16 --dp-overlap none >/dev/null 2>"$tmp"; then
  ok "the same flags, given legally, simulate"
else
  cat "$tmp"
  fail "legal flags refused"
fi
finish
