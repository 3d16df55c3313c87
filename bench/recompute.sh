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
#  - step time: the median over the steps after the first SKIP of ROUNDS
#    runs, the three modes taking turns;
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
#   bench/recompute.sh                 STEPS=20 SKIP=3 ROUNDS=5 BUILD=build bench/recompute.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

BUILD=${BUILD:-build}
SHARDC=${SHARDC:-$BUILD/shardc}
STEPS=${STEPS:-12}
SKIP=${SKIP:-2}
ROUNDS=${ROUNDS:-3}
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

# step_s TOKENS LOG...: the median step time over the records after the
# first SKIP of every log (the median, since other work on a shared
# machine lands on a few steps).
step_s() {
  local tok=$1
  shift
  cat "$@" | sed -n 's/.*"step":\([0-9]*\).*"tokens_per_s":\([0-9.e+-]*\).*/\1 \2/p' |
    awk -v skip="$SKIP" -v tok="$tok" '$1 > skip && $2 > 0 { printf "%.6f\n", tok / $2 }' | sort -g |
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

layout_flags() {
  case $1 in
  p1) FLAGS=(-D batch=8) TOKENS=$((8 * 128)) NP=1 ;;
  p2) FLAGS=(-D batch=4 --pp 2 --global-batch 32) TOKENS=$((32 * 128)) NP=2 ;;
  esac
}

# prepare LAYOUT MODE: compile and build into $WORK/LAYOUT-MODE.
prepare() {
  local dir=$WORK/$1-$2
  layout_flags "$1"
  "$SHARDC" compile models/gpt2.shard "${SHAPE[@]}" "${FLAGS[@]}" --recompute "$2" \
    --target cpu -o "$dir" >"$dir.compile" 2>&1 || { cat "$dir.compile" >&2; die "$1 $2: compile"; }
  "$SHARDC" build "$dir" >"$dir.build" 2>&1 || { tail -20 "$dir.build" >&2; die "$1 $2: build"; }
}

# train LAYOUT MODE ROUND: STEPS steps, each rank under /usr/bin/time;
# leaves LAYOUT-MODE.ROUND.jsonl and .out.
train() {
  local dir=$WORK/$1-$2 out=$WORK/$1-$2.$3
  layout_flags "$1"
  local args=(--data "$DATA" --steps "$STEPS" --no-shuffle --log-every 1 --log-json "$out.jsonl")
  local threads=$((CORES / NP))
  ((threads >= 1)) || threads=1
  local tm=(/usr/bin/time -f "peak-rss-kb %M")
  if ((NP == 1)); then
    OMP_NUM_THREADS=$threads "${tm[@]}" "$dir/rank0" "${args[@]}" >"$out.out" 2>&1 ||
      { tail -20 "$out.out" >&2; die "$1 $2: training failed"; }
  else
    OMP_NUM_THREADS=$threads "$MPIEXEC" --oversubscribe --bind-to none -x OMP_NUM_THREADS \
      -np 1 "${tm[@]}" "$dir/stage0" "${args[@]}" : -np 1 "${tm[@]}" "$dir/stage1" \
      --data "$DATA" --steps "$STEPS" --no-shuffle >"$out.out" 2>&1 ||
      { tail -20 "$out.out" >&2; die "$1 $2: training failed"; }
  fi
  sed 's/,"tokens_per_s":[^}]*//' "$out.jsonl" >"$out.losses"
}

# measure LAYOUT MODE: "step_s kept planned rss" over the rounds.
measure() {
  local dir=$WORK/$1-$2 stash planned logs=()
  layout_flags "$1"
  for ((r = 1; r <= ROUNDS; r++)); do logs+=("$dir.$r.jsonl"); done
  stash=$(sed -n 's/.*peak stash \([0-9]*\).*/\1/p' "$dir.1.out" | head -1)
  planned=$(plan_bytes "$dir.compile" 0 "${stash:-1}")
  echo "$(step_s "$TOKENS" "${logs[@]}") $(awk '/activations kept/ { print $5; exit }' "$dir.compile") \
    $planned $(sed -n 's/^peak-rss-kb \([0-9]*\)/\1/p' "$dir".*.out | sort -n | tail -1)"
}

printf 'activation recomputation on the CPU target: gpt2.shard %s, %d rounds of %d steps (%d skipped), %d cores\n' \
  "${SHAPE[*]}" "$ROUNDS" "$STEPS" "$SKIP" "$CORES"
printf '%-22s %-10s %9s %7s %11s %7s %11s %7s %9s %7s %s\n' layout recompute "step s" "x none" \
  "kept B" "x none" "planned B" "x none" "RSS KiB" "x none" losses
fail=0
for layout in p1 p2; do
  for mode in none selective full; do prepare $layout $mode; done
  # The modes take turns, ROUNDS times, so that a slow spell of the
  # machine falls on all three.
  for ((round = 1; round <= ROUNDS; round++)); do
    for mode in none selective full; do train $layout $mode $round; done
  done
  base=()
  for mode in none selective full; do
    read -r t kept planned rss <<<"$(measure $layout $mode)"
    ((${#base[@]})) || base=("$t" "$kept" "$planned" "$rss")
    same="= none"
    for ((round = 1; round <= ROUNDS; round++)); do
      if ! cmp -s "$WORK/$layout-none.1.losses" "$WORK/$layout-$mode.$round.losses"; then
        same=DIFFER
        fail=1
      fi
    done
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
