#!/bin/bash
# Step time and peak memory of one configuration under four pipeline
# schedules, on the CPU target, as ratios to the plain 1F1B run of the same
# script run.
#
# A LLaMA-style model at the demo shape (4 layers, hidden 128, 4 heads,
# seq 128, vocabulary 256) trains on p = 2 stages, one thread each, with
# m = 8 microbatches of 2 sequences (global batch 16) under
#   1f1b         the baseline;
#   interleaved  v = 2 chunks per stage (Megatron-LM's);
#   zb-h1        the backward split into B and W, W put off into the bubble;
#   zb-v         two chunks per stage in a V, B and W split.
# Step time: the mean over the steps after the first, from the runtime's
# log. Peak memory: the largest resident set of any rank (/usr/bin/time's
# maximum RSS), which holds the runtime and MPI as well as the model's
# memory; and the largest stash of the tables (stash slots held at once on
# a stage, `shardc schedule --json`: peak_held where the tables have W).
# The machine may be shared: step times vary between runs (REPEAT=N runs
# the four N times, round by round, and keeps each one's fastest).
#
# Each rank is bound to a core (BIND=core; BIND=none lets them move). On a
# 2-core machine shared with other jobs, unbound ranks made every schedule
# 2-10x slower and swamped the differences between them: the same 1f1b
# program took 0.29-2.2 s a step unbound against 0.13-0.23 s bound, in
# alternating runs, and a trace of an unbound run showed one microbatch's
# forward on stage 1 taking 7.5 to 284 ms (the same work) while stage 0
# waited. Unbound, the ratios of zb-h1 and zb-v to 1f1b came out anywhere
# from 0.45 to 1.9 (the 1.33 and 1.45 once reported among them); bound,
# REPEAT=3 gave interleaved 0.80, zb-h1 0.91 and zb-v 0.87 in the same
# session, against the unit-time prediction of 25.5/27 = 0.94, 25/27 =
# 0.93 and 24.5/27 = 0.91 (F = B = W; measured, a W costs about 0.6 of an
# F, so the W's fill less of the bubble than the tables assume).
#
#   bench/schedules.sh          BUILD=build-rel STEPS=20 REPEAT=2 BIND=none bench/schedules.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SHARDC=$BUILD/shardc
STEPS=${STEPS:-12}
REPEAT=${REPEAT:-1}
BIND=${BIND:-core}
if [[ ! -x $SHARDC ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=models/llama.shard
shape=(-D layers=4 -D hidden=128 -D heads=4 -D kv_heads=4 -D ffn=344 -D seq=128 -D vocab=256)
common=(--pp 2 --microbatch 2 --global-batch 16)
"$BUILD/tests/tptool" data "$work/data.bin" 400000 251 >/dev/null
if [[ $(id -u) = 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# build NAME FLAGS...: compiles and builds the two stages, and the tables' figures.
build() {
  local name=$1
  shift
  "$SHARDC" compile "$model" "${shape[@]}" "${common[@]}" "$@" -o "$work/$name" >/dev/null
  make -s -C "$work/$name" >/dev/null
  "$SHARDC" schedule "$model" "${shape[@]}" "${common[@]}" "$@" --json >"$work/$name.json"
}
# train NAME: trains under mpirun, each rank under /usr/bin/time, and keeps
# the step time and the largest RSS of the fastest run so far.
train() {
  local name=$1
  local args=(--data "$work/data.bin" --steps "$STEPS" --global-batch 16 --log-every 1 --quiet
              --log-json "$work/$name.jsonl")
  rm -f "$work/$name.jsonl" "$work/$name".rss.*
  mpirun --oversubscribe --bind-to "$BIND" --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS=1 \
    -np 1 /usr/bin/time -f "%M" -o "$work/$name.rss.0" "$work/$name/stage0" "${args[@]}" : \
    -np 1 /usr/bin/time -f "%M" -o "$work/$name.rss.1" "$work/$name/stage1" "${args[@]}" \
    </dev/null >"$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
  local s
  s=$(step_s "$name")
  if [[ ! -f $work/$name.step ]] || awk -v a="$s" -v b="$(cat "$work/$name.step")" 'BEGIN { exit !(a < b) }'; then
    echo "$s" >"$work/$name.step"
    cat "$work/$name".rss.* | sort -n | tail -1 >"$work/$name.rss"
  fi
}
# Mean seconds per step over the steps after the first, from the log.
step_s() {
  python3 -c "import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])][1:]
print('%.4f' % (sum(16 * 128 / r['tokens_per_s'] for r in rows) / len(rows)))" "$work/$1.jsonl"
}
# The most stash slots a stage holds at once, and the unit-time bubble.
stash() {
  python3 -c "import json,sys
j=json.load(open(sys.argv[1]))
print(max(j.get('peak_held', j['peak_stash'])), '%.4f' % j['bubble_fraction'])" "$work/$1.json"
}

build 1f1b --schedule 1f1b
build interleaved --vpp 2 --schedule interleaved
build zb-h1 --schedule zb-h1
build zb-v --vpp 2 --schedule zb-v
# Round by round, so that a change in the machine's load falls on all four.
for ((k = 0; k < REPEAT; k++)); do
  for s in 1f1b interleaved zb-h1 zb-v; do train "$s"; done
done

echo "pipeline schedules, p=2, m=8, LLaMA ${shape[*]}, $STEPS steps, one thread per rank (bound: $BIND), best of $REPEAT"
printf '%-12s %9s %8s %13s %8s %11s %13s\n' schedule s/step ratio "peak RSS (MB)" ratio "stash slots" "unit bubble"
b_step=$(cat "$work/1f1b.step") b_rss=$(cat "$work/1f1b.rss")
for s in 1f1b interleaved zb-h1 zb-v; do
  step=$(cat "$work/$s.step") rss=$(cat "$work/$s.rss")
  read -r slots bubble < <(stash "$s")
  printf '%-12s %9s %8s %13s %8s %11s %13s\n' "$s" "$step" \
    "$(awk -v a="$step" -v b="$b_step" 'BEGIN { printf "%.3f", a / b }')" \
    "$(awk -v a="$rss" 'BEGIN { printf "%.1f", a / 1024 }')" \
    "$(awk -v a="$rss" -v b="$b_rss" 'BEGIN { printf "%.3f", a / b }')" "$slots" "$bubble"
done
echo "ratios are to 1f1b in this run; stash slots of interleaved and zb-v hold half a stage's layers;"
echo "the unit bubble is shardc schedule's (F 1, B 1, W 1): 1f1b and interleaved count B as the whole backward"
