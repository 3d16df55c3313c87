#!/bin/sh
# Every flag combination the training program rejects or would ignore is
# refused by `shardc simulate` with exit status 1 and one error line
# (planner/sim.c, pl_config_refusal). Where `shardc compile` rejects the
# combination itself (ZeRO-1 without replicas, chunks without stages), the
# error names it in the same words. Prints each error.
#   flags.sh SHARDC MODEL
set -u
shardc=$1
model=$2
fail=0
tmp=${TMPDIR:-/tmp}/planner_flags.$$
# refused WORDS FLAGS...: simulate exits 1 and its first line holds WORDS.
refused() {
  words=$1
  shift
  "$shardc" simulate "$model" --hw a100 "$@" >"$tmp" 2>&1
  status=$?
  line=$(head -n 1 "$tmp")
  echo "simulate $*: exit $status: $line"
  if [ $status != 1 ]; then echo "FAIL: exit $status, expected 1"; fail=1; fi
  case $line in
    *"$words"*) ;;
    *) echo "FAIL: expected '$words'"; fail=1 ;;
  esac
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
# The compiler's words for the two it rejects itself.
for flags in "--zero 1" "--vpp 2"; do
  # shellcheck disable=SC2086
  "$shardc" compile "$model" --target cpu -o "$tmp.dir" $flags >"$tmp.c" 2>&1
  # shellcheck disable=SC2086
  "$shardc" simulate "$model" --hw a100 $flags >"$tmp.s" 2>&1
  c=$(grep -o 'error: .*' "$tmp.c" | head -n 1 | sed 's/^error: //')
  s=$(head -n 1 "$tmp.s" | sed 's/^shardc simulate: error: //')
  echo "$flags: compile says '$c'"
  if [ -z "$c" ] || [ "$c" != "$s" ]; then echo "FAIL: simulate says '$s'"; fail=1; fi
done
# plan refuses what it shares with simulate in the same words.
"$shardc" plan "$model" --hw a100 --gpus 2 --global-batch 8 --dp-overlap some >"$tmp.c" 2>&1
status=$?
"$shardc" simulate "$model" --hw a100 --dp-overlap some >"$tmp.s" 2>&1
p=$(head -n 1 "$tmp.c" | sed 's/^shardc plan: error: //')
s=$(head -n 1 "$tmp.s" | sed 's/^shardc simulate: error: //')
echo "plan --dp-overlap some: exit $status: $p"
if [ $status != 1 ] || [ "$p" != "$s" ]; then echo "FAIL: simulate says '$s'"; fail=1; fi
# The same configurations, given legally, simulate.
"$shardc" simulate "$model" --hw a100 --tp 2 --sequence-parallel --dp 2 --zero 1 --pp 2 --vpp 2 \
  --global-batch 16 --dp-overlap none >/dev/null 2>"$tmp" || { cat "$tmp"; echo "FAIL: legal flags refused"; fail=1; }
rm -rf "$tmp" "$tmp.c" "$tmp.s" "$tmp.dir"
[ $fail = 0 ] && echo ok
exit $fail
