#!/bin/bash
# How long shardc takes to read a model and get it ready for the later
# passes: parse, lower, fold and shape inference (`shardc compile` with the
# default pipeline), on the paper's 1T-parameter shape and on GPT-2 small;
# then the full compile of the paper's 1T configuration (all passes, the
# verified schedule, the stage programs written) under 2 s and 1 GiB.
#
# Each command runs REPS times on one core (taskset -c 0) and the median
# wall time is reported. The peer, measured in the same run the same way,
# is the same binary starting and exiting (`shardc --version`): the ratio
# says what compiling costs over merely starting the process, and the
# difference is the compile itself. The 1T compile must stay under 50 ms.
#
#   bench/compile.sh            REPS=200 bench/compile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C # EPOCHREALTIME with a decimal point

REPS=${REPS:-100}
BOUND_MS=50
BUILD=${BUILD:-build}
SHARDC=$BUILD/shardc

# Pin this script, and so every process it starts, to core 0, once.
if [[ -z "${SHARDC_BENCH_PINNED:-}" ]] && command -v taskset >/dev/null; then
  SHARDC_BENCH_PINNED=1 exec taskset -c 0 "$0" "$@"
fi

if [[ ! -x $SHARDC ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi

# median_ms NAME CMD...: runs CMD REPS times (after one warm-up run whose
# failure stops the benchmark) and prints the median in milliseconds.
median_ms() {
  if ! "$@" >/dev/null 2>&1; then
    echo "bench: failed: $*" >&2
    "$@" >/dev/null
    exit 1
  fi
  local i t0 t1 spans=()
  for ((i = 0; i < REPS; i++)); do
    t0=$EPOCHREALTIME
    "$@" >/dev/null 2>&1
    t1=$EPOCHREALTIME
    spans+=("$t0 $t1")
  done
  printf '%s\n' "${spans[@]}" | awk '{printf "%.3f\n", ($2 - $1) * 1000}' | sort -g |
    awk '{v[NR] = $1}
    END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

T1=(-D layers=128 -D hidden=25600 -D heads=160)
start=$(median_ms "$SHARDC" --version)
gpt2=$(median_ms "$SHARDC" compile models/gpt2.shard)
t1=$(median_ms "$SHARDC" compile models/gpt3.shard "${T1[@]}")
# The 1T pipeline schedule: every stage's table built and verified jointly.
sched=$(REPS=$(((REPS + 9) / 10)) median_ms "$SHARDC" schedule models/gpt3.shard "${T1[@]}" \
  --tp 8 --pp 64 --dp 6 --vpp 2 --microbatch 1 --global-batch 3072)

# The full compile of the 1T configuration for the CPU target: every pass
# (unroll, pipeline partition, autodiff, a memory plan per model chunk),
# the schedule built and all 64 stages' tables verified jointly, and the 64
# distinct stage programs (not one per rank of the 3,072) written.
FULL=(--tp 8 --pp 64 --dp 6 --vpp 2 --microbatch 1 --global-batch 3072)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
full=$(REPS=$(((REPS + 9) / 10)) median_ms "$SHARDC" compile models/gpt3.shard "${T1[@]}" \
  "${FULL[@]}" --target cpu -o "$out")
rss_kb=$(/usr/bin/time -f %M "$SHARDC" compile models/gpt3.shard "${T1[@]}" "${FULL[@]}" \
  --target cpu -o "$out" 2>&1 >/dev/null | tail -1)
programs=$(ls "$out"/stage*.c | wc -l)
bytes=$(cat "$out"/stage*.c | wc -c)

echo "shardc compile: parse, lower, fold, shape inference ($REPS runs each, median, core 0)"
printf '%-34s %10s %12s %12s\n' "what" "ms" "over start" "x start"
row() {
  awk -v n="$1" -v t="$2" -v s="$start" \
    'BEGIN {printf "%-34s %10.3f %12.3f %12.2f\n", n, t, t - s, t / s}'
}
row "process start (shardc --version)" "$start"
row "GPT-2 small (models/gpt2.shard)" "$gpt2"
row "GPT 1T (gpt3.shard, l=128 h=25600)" "$t1"
row "1T schedule p=64 v=2 m=512 +verify" "$sched"
row "1T full compile -o (t8 p64 d6 v2)" "$full"
echo "1T full compile: $programs stage programs ($((bytes / 1024)) KiB of C), peak RSS $((rss_kb / 1024)) MiB"
if awk -v t="$t1" -v b="$BOUND_MS" 'BEGIN {exit !(t < b)}'; then
  echo "PASS: 1T compile $t1 ms < $BOUND_MS ms"
else
  echo "FAIL: 1T compile $t1 ms >= $BOUND_MS ms"
  exit 1
fi
if awk -v t="$sched" 'BEGIN {exit !(t < 1000)}'; then
  echo "PASS: 1T schedule $sched ms < 1000 ms"
else
  echo "FAIL: 1T schedule $sched ms >= 1000 ms"
  exit 1
fi
if awk -v t="$full" 'BEGIN {exit !(t < 2000)}' && [ "$rss_kb" -lt $((1024 * 1024)) ] &&
  [ "$programs" -eq 64 ]; then
  echo "PASS: 1T full compile $full ms < 2000 ms, $((rss_kb / 1024)) MiB < 1024 MiB, 64 programs"
else
  echo "FAIL: 1T full compile $full ms, $((rss_kb / 1024)) MiB, $programs programs (bounds 2000 ms, 1024 MiB, 64)"
  exit 1
fi
