#!/bin/bash
# What tensor parallelism costs on the CPU target: training steps per second
# at t = 1, 2 and 4 on this machine, for the demo shape
#
#   gpt2.shard -D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256,
#   microbatch 8, one microbatch a step, --vocab-multiple 64 (so that the
#   vocabulary of 256 needs no padding at t = 4)
#
# and the bytes each rank sent per step. The t ranks share the machine's
# cores (OMP_NUM_THREADS = max(1, cores / t) each, the launch recipe of
# runtime/comm/comm.h), so the ratio to t = 1 says what the collectives and the
# smaller GEMMs cost when the same cores do the same work: on one machine
# tensor parallelism cannot be faster, it exists to split a model over
# devices. The bytes are counted by the runtime (--comm-stats, every rank,
# every step) and must equal the compiler's `--report comm` exactly; the
# runtime's own reduction of the step (the gradient norm) is listed apart.
# Steps per second are taken over the steps after the first SKIP.
#
#   bench/tp_overhead.sh                 STEPS=40 SKIP=5 BUILD=build bench/tp_overhead.sh
#
# Exit status 1 when the bytes differ from the report or a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

BUILD=${BUILD:-build}
SHARDC=${SHARDC:-$BUILD/shardc}
STEPS=${STEPS:-20}
SKIP=${SKIP:-3}
CORES=$(nproc)
MPIEXEC=${MPIEXEC:-$(command -v mpiexec || command -v mpirun || true)}
SHAPE=(-D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256 -D batch=8
       --vocab-multiple 64)
TOKENS_PER_STEP=$((8 * 128))

die() { echo "bench: $*" >&2; exit 1; }

[[ -n $MPIEXEC ]] || die "no mpiexec (apt-get install openmpi-bin)"
if [[ ! -x $SHARDC ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$CORES" >/dev/null
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DATA=$WORK/corpus.bin
"$SHARDC" data data/corpus.txt -o "$DATA" >/dev/null

# steps_per_s LOG: over the records after the first SKIP of a --log-json
# file; every step has the same tokens, so the rate over them is the
# harmonic mean of the steps' rates.
steps_per_s() {
  sed -n 's/.*"step":\([0-9]*\).*"tokens_per_s":\([0-9.e+-]*\).*/\1 \2/p' "$1" |
    awk -v skip="$SKIP" -v tps="$TOKENS_PER_STEP" '
      $1 > skip && $2 > 0 { n++; inv += 1 / $2 }
      END { if (!n) exit 1; printf "%.3f", n / inv / tps }'
}

printf 'tensor parallelism on the CPU target: gpt2.shard %s, %d steps (%d skipped), %d cores\n' \
  "${SHAPE[*]}" "$STEPS" "$SKIP" "$CORES"
printf '%-3s %-14s %9s %7s %14s %14s %-6s %s\n' t "ranks x thr" "steps/s" "vs t=1" \
  "bytes/step" "report" match "runtime bytes/step"
fail=0
base=
for t in 1 2 4; do
  dir=$WORK/t$t
  "$SHARDC" compile models/gpt2.shard "${SHAPE[@]}" --tp "$t" --target cpu -o "$dir" \
    >"$WORK/t$t.compile" 2>&1 || { cat "$WORK/t$t.compile" >&2; die "t=$t: compile failed"; }
  "$SHARDC" build "$dir" >"$WORK/t$t.build" 2>&1 ||
    { tail -20 "$WORK/t$t.build" >&2; die "t=$t: build failed"; }
  report=$("$SHARDC" compile models/gpt2.shard "${SHAPE[@]}" --tp "$t" --report comm |
    sed -n 's/^per rank: \([0-9]*\) bytes sent.*/\1/p')
  threads=$((CORES / t))
  ((threads >= 1)) || threads=1
  args=(--data "$DATA" --steps "$STEPS" --no-shuffle --log-every "$STEPS"
        --log-json "$WORK/t$t.jsonl" --comm-stats)
  if ((t == 1)); then
    OMP_NUM_THREADS=$threads "$dir/rank0" "${args[@]}" >"$WORK/t$t.out" 2>&1 ||
      { tail -20 "$WORK/t$t.out" >&2; die "t=1: training failed"; }
  else
    OMP_NUM_THREADS=$threads sh tests/runtime/comm/mpirun.sh "$MPIEXEC" "$t" "$dir/rank0" "${args[@]}" \
      >"$WORK/t$t.out" 2>&1 || { tail -20 "$WORK/t$t.out" >&2; die "t=$t: training failed"; }
  fi
  rate=$(steps_per_s "$WORK/t$t.jsonl") || die "t=$t: no step rates in the log"
  [[ -n $base ]] || base=$rate
  # Every rank and every step must have sent exactly the report's bytes.
  lines=$(grep -c '^comm: rank' "$WORK/t$t.out" || true)
  sent=$(sed -n 's/^comm: rank [0-9]* step [0-9]* | tensor: program \([0-9]*\) bytes.*/\1/p' \
    "$WORK/t$t.out" | sort -u | tr '\n' ' ')
  runtime=$(sed -n 's/.*, runtime \([0-9]*\) bytes.*/\1/p' "$WORK/t$t.out" | sort -u | tr '\n' ' ')
  match=yes
  if [[ $lines -ne $((t * STEPS)) || "$sent" != "$report " ]]; then
    match=NO
    fail=1
  fi
  printf '%-3s %-14s %9s %6.2fx %14s %14s %-6s %s\n' "$t" "$t x $threads" "$rate" \
    "$(awk -v a="$rate" -v b="$base" 'BEGIN {print a / b}')" "$sent" "$report" "$match" "$runtime"
done
if ((fail)); then
  echo "bench: the bytes sent differ from the compiler's report" >&2
  exit 1
fi
