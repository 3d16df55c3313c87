#!/bin/bash
# What activation recomputation costs and saves on the CPU target: the step
# time and the memory of the demo shape
#
#   gpt2.shard -D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256
#
# under --recompute none, selective and full, on one rank (microbatch 8,
# one microbatch a step) and on two pipeline stages (microbatch 4, eight
# microbatches a step under 1F1B, so that stage 0 stashes two microbatches'
# activations), all in the same run, each printed as ratios to none:
#  - step time: the median over the steps after the first SKIP;
#  - kept: the activations one microbatch keeps for the backward (the
#    memory plan's region; stage 0's with two stages);
#  - planned: the rank's whole memory as its program allocates it
#    (weights, gradients, AdamW state, temporaries, and the kept
#    activations times the schedule's peak stash), the largest rank's;
#  - RSS: the largest rank's peak resident set (/usr/bin/time), which adds
#    the runtime, OpenBLAS's buffers and the data to the plan.
# selective changes nothing on GPT-2: its fused attention op keeps no score
# matrix in the first place (docs/training.md, "Activation recomputation").
# The losses of the three runs of a layout must be equal to the bit (exit
# status 1 otherwise).
#
#   bench/recompute.sh                 STEPS=20 SKIP=3 BUILD=build bench/recompute.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

BUILD=${BUILD:-build}
SHARDC=${SHARDC:-$BUILD/shardc}
STEPS=${STEPS:-16}
SKIP=${SKIP:-2}
CORES=$(nproc)
MPIEXEC=${MPIEXEC:-$(command -v mpiexec || command -v mpirun || true)}
SHAPE=(-D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256 --vocab-multiple 64)

die() { echo "bench: $*" >&2; exit 1; }

[[ -n $MPIEXEC ]] || die "no mpiexec (apt-get install openmpi-bin)"
[[ -x /usr/bin/time ]] || die "no /usr/bin/time (apt-get install time)"
if [[ ! -x $SHARDC ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$CORES" >/dev/null
fi
if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DATA=$WORK/corpus.bin
"$SHARDC" data data/corpus.txt -o "$DATA" >/dev/null

# step_s LOG TOKENS: the median step time over the records after the first
# SKIP (the median, since other work on a shared machine lands on a few
# steps).
step_s() {
  sed -n 's/.*"step":\([0-9]*\).*"tokens_per_s":\([0-9.e+-]*\).*/\1 \2/p' "$1" |
    awk -v skip="$SKIP" -v tok="$2" '$1 > skip && $2 > 0 { printf "%.6f\n", tok / $2 }' | sort -g |
    awk '{ v[NR] = $1 } END { if (!NR) exit 1
      printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# plan_bytes COMPILE_OUT STAGE STASH: the stage's allocation (its regions
# with the activations times the peak stash).
plan_bytes() {
  awk -v want="$2" -v stash="$3" '
    /memory plan/ { stage = ($1 ~ /^stage/) ? substr($1, 6) + 0 : 0 }
    stage != want { next }
    /activations kept/ { act = $5 } /^  weights|^  gradients|^  optimizer|^  temporaries/ { rest += $(NF - 3) }
    END { printf "%d", rest + act * stash }' "$1"
}

# run LAYOUT MODE: compile, build and train; prints "step_s kept planned rss".
run() {
  local layout=$1 mode=$2 dir=$WORK/$1-$2 flags=() tokens np
  case $layout in
  p1) flags=(-D batch=8); tokens=$((8 * 128)); np=1 ;;
  p2) flags=(-D batch=4 --pp 2 --global-batch 32); tokens=$((32 * 128)); np=2 ;;
  esac
  "$SHARDC" compile models/gpt2.shard "${SHAPE[@]}" "${flags[@]}" --recompute "$mode" \
    --target cpu -o "$dir" >"$dir.compile" 2>&1 || { cat "$dir.compile" >&2; die "$layout $mode: compile"; }
  "$SHARDC" build "$dir" >"$dir.build" 2>&1 || { tail -20 "$dir.build" >&2; die "$layout $mode: build"; }
  local args=(--data "$DATA" --steps "$STEPS" --no-shuffle --log-every 1 --log-json "$dir.jsonl")
  local threads=$((CORES / np))
  ((threads >= 1)) || threads=1
  local tm=(/usr/bin/time -f "peak-rss-kb %M")
  if ((np == 1)); then
    OMP_NUM_THREADS=$threads "${tm[@]}" "$dir/rank0" "${args[@]}" >"$dir.out" 2>&1 ||
      { tail -20 "$dir.out" >&2; die "$layout $mode: training failed"; }
  else
    OMP_NUM_THREADS=$threads "$MPIEXEC" --oversubscribe --bind-to none -x OMP_NUM_THREADS \
      -np 1 "${tm[@]}" "$dir/stage0" "${args[@]}" : -np 1 "${tm[@]}" "$dir/stage1" \
      --data "$DATA" --steps "$STEPS" --no-shuffle >"$dir.out" 2>&1 ||
      { tail -20 "$dir.out" >&2; die "$layout $mode: training failed"; }
  fi
  local stash planned
  stash=$(sed -n 's/.*peak stash \([0-9]*\).*/\1/p' "$dir.out" | head -1)
  planned=$(plan_bytes "$dir.compile" 0 "${stash:-1}")
  sed 's/,"tokens_per_s":[^}]*//' "$dir.jsonl" >"$dir.losses"
  echo "$(step_s "$dir.jsonl" "$tokens") $(awk '/activations kept/ { print $5; exit }' "$dir.compile") $planned \
    $(sed -n 's/^peak-rss-kb \([0-9]*\)/\1/p' "$dir.out" | sort -n | tail -1)"
}

printf 'activation recomputation on the CPU target: gpt2.shard %s, %d steps (%d skipped), %d cores\n' \
  "${SHAPE[*]}" "$STEPS" "$SKIP" "$CORES"
printf '%-22s %-10s %9s %7s %11s %7s %11s %7s %9s %7s %s\n' layout recompute "step s" "x none" \
  "kept B" "x none" "planned B" "x none" "RSS KiB" "x none" losses
fail=0
for layout in p1 p2; do
  base=()
  for mode in none selective full; do
    read -r t kept planned rss <<<"$(run $layout $mode)"
    ((${#base[@]})) || base=("$t" "$kept" "$planned" "$rss")
    same="= none"
    if ! cmp -s "$WORK/$layout-none.losses" "$WORK/$layout-$mode.losses"; then
      same=DIFFER
      fail=1
    fi
    case $layout in
    p1) what="1 rank, b=8, m=1" ;;
    p2) what="p=2 1f1b, b=4, m=8" ;;
    esac
    awk -v w="$what" -v m="$mode" -v t="$t" -v k="$kept" -v p="$planned" -v r="$rss" -v s="$same" \
      -v t0="${base[0]}" -v k0="${base[1]}" -v p0="${base[2]}" -v r0="${base[3]}" 'BEGIN {
      printf "%-22s %-10s %9.4f %6.2fx %11d %6.2fx %11d %6.2fx %9d %6.2fx %s\n", w, m, t, t / t0,
        k, k / k0, p, p / p0, r, r / r0, s }'
  done
done
if ((fail)); then
  echo "bench: the losses under recomputation differ from none's" >&2
  exit 1
fi
