#!/bin/bash
# How much of the data-parallel gradient reduction the backward hides, on
# the CPU target, from the runtime's own timers (--dp-stats).
#
# GPT-2 at a small shape trains on d = 2 replicas (one thread each) with
# gradient buckets of --bucket-mb, twice in the same run:
#   overlap     each bucket's all-reduce starts from the backward as soon
#               as its last gradient is final (the default);
#   no-overlap  every bucket starts after the whole backward (the peer: the
#               same reductions with nothing to hide behind).
# The runtime reports, per rank and averaged over the steps after the
# first, the time a step waited for the reductions after its backward
# ("exposed wait"). The no-overlap wait is what the reductions cost; the
# hidden fraction is 1 - wait(overlap) / wait(no-overlap), which must be at
# least 0.5. Step times of both runs are printed as their ratio too.
#
#   bench/dp_overlap.sh          BUILD=build-rel STEPS=30 bench/dp_overlap.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SHARDC=$BUILD/shardc
STEPS=${STEPS:-30}
BUCKET_MB=${BUCKET_MB:-1}
if [[ ! -x $SHARDC ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shape=(-D layers=4 -D hidden=256 -D heads=4 -D seq=128 -D vocab=256)
"$BUILD/tests/tptool" data "$work/data.bin" 400000 251 >/dev/null

# run NAME [FLAGS...]: prints rank 0's dp line and the mean step time.
run() {
  local name=$1
  shift
  OMP_NUM_THREADS=1 "$SHARDC" run models/gpt2.shard "${shape[@]}" --microbatch 4 --dp 2 \
    --bucket-mb "$BUCKET_MB" --out "$work/prog" --data "$work/data.bin" --global-batch 16 \
    --steps "$STEPS" --log-every 1 --log-json "$work/$name.jsonl" --dp-stats --quiet "$@" \
    </dev/null >"$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
}
wait_ms() { sed -n 's/^dp reduce: rank 0 .*exposed wait \([0-9.]*\) ms.*/\1/p' "$work/$1.out"; }
posted_ms() { sed -n 's/^dp reduce: rank 0 .*posted during backward \([0-9.]*\) ms.*/\1/p' "$work/$1.out"; }
buckets() { sed -n 's/^dp reduce: rank 0 | \([^|]*\)|.*/\1/p' "$work/$1.out"; }
# Mean seconds per step over the steps after the first, from the log.
step_s() {
  python3 -c "import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])][1:]
print('%.4f' % (sum(16 * 128 / r['tokens_per_s'] for r in rows) / len(rows)))" "$work/$1.jsonl"
}

run overlap
run nooverlap --no-overlap
w1=$(wait_ms overlap) w0=$(wait_ms nooverlap)
s1=$(step_s overlap) s0=$(step_s nooverlap)
echo "data-parallel reduction, d=2, GPT-2 ${shape[*]}, $STEPS steps, $(buckets overlap)"
printf '%-12s %18s %22s %12s\n' run "exposed wait (ms)" "posted in backward (ms)" "s/step"
printf '%-12s %18s %22s %12s\n' overlap "$w1" "$(posted_ms overlap)" "$s1"
printf '%-12s %18s %22s %12s\n' no-overlap "$w0" "-" "$s0"
hidden=$(awk -v a="$w1" -v b="$w0" 'BEGIN { printf "%.2f", (b > 0 ? 1 - a / b : 0) }')
ratio=$(awk -v a="$s1" -v b="$s0" 'BEGIN { printf "%.3f", a / b }')
echo "hidden fraction 1 - $w1 / $w0 = $hidden; step time overlap / no-overlap = $ratio"
if awk -v h="$hidden" 'BEGIN { exit !(h >= 0.5) }'; then
  echo "PASS: the backward hides $hidden of the reduction (>= 0.5)"
else
  echo "FAIL: the backward hides only $hidden of the reduction (< 0.5)"
  exit 1
fi
