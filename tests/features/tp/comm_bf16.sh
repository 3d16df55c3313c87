#!/bin/bash
# The comm report of bf16 programs (`--report comm --precision bf16`).
#
#   comm_bf16.sh report
#     For gpt2 at t=2, t=2 with sequence parallelism, p=2 and t=2 p=2, and
#     llama at t=2 with sequence parallelism: every row of the bf16 report
#     against the same row of the fp32 one. Activations (every collective
#     of a tensor of two or more dims, every pipeline message) travel in
#     bf16, so their rows say bf16 and show half the bytes; the gradient
#     reductions of norm weights and biases (one-dim tensors) and the
#     vocab-parallel loss's statistics show the same bytes, in f32.
#   comm_bf16.sh runtime
#     gpt2 bf16 at t=2 with sequence parallelism and at p=2, compiled for
#     --target cuda and built for the CPU emulator ($SHARDC_BUILD/emu/program.mk),
#     trained 2 steps of 2 microbatches over MPI with --comm-stats: every
#     rank's tensor bytes are the bf16 report's times 2, to the byte, and
#     its pipeline bytes the bf16 report's stage figure times 2 plus what
#     the runtime itself sends between stages, which the CPU target's fp32
#     run of the same layout measures (its own bytes: its report's times 2
#     plus the same remainder). Exit 77 (skip) without nvcc, the emulator's
#     make file or mpirun.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
mode=$1 shardc=$SHARDC models=$ROOT/models
tmp=$WORK
fail=0
SHAPE=(-D vocab=257 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 -D batch=2)
LLAMA=(-D vocab=257 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=2 -D batch=2)

# rows FILE: "phase kind tensor bytes" of every row of a report.
rows() {
  awk '$1 == "forward" || $1 == "backward" {
         t = ""; for (i = 3; i <= NF - 5; i++) t = t (t == "" ? "" : " ") $i
         print $1 "|" $2 "|" t "|" $(NF - 1) }' "$1"
}

# check_report NAME MODEL ARGS...: the bf16 report's rows against the fp32 one's.
check_report() {
  local name=$1 model=$2
  shift 2
  if ! "$shardc" compile "$model" "$@" --report comm >"$tmp/$name.f32" ||
    ! "$shardc" compile "$model" "$@" --precision bf16 --report comm >"$tmp/$name.bf16"; then
    echo "FAIL: $name: no report"; fail=1; return
  fi
  rows "$tmp/$name.f32" >"$tmp/$name.f32.rows"
  rows "$tmp/$name.bf16" >"$tmp/$name.bf16.rows"
  paste -d '#' "$tmp/$name.f32.rows" "$tmp/$name.bf16.rows" | awk -F'#' -v name="$name" '
    {
      split($1, a, "|"); split($2, b, "|")
      half = (a[2] == "send" || a[3] ~ /^f32\[[0-9]+, /)
      want_t = a[3]; if (half) sub(/^f32/, "bf16", want_t)
      want_b = half ? a[4] / 2 : a[4]
      if (b[1] != a[1] || b[2] != a[2] || b[3] != want_t || b[4] != want_b) {
        printf "FAIL: %s: row %d: %s %s %s %s bytes in bf16, want %s %s bytes (fp32: %s)\n",
               name, NR, b[1], b[2], b[3], b[4], want_t, want_b, a[4]
        bad = 1
      }
      if (half) { nh++; h32 += a[4]; h16 += b[4] } else { ns++; s32 += a[4]; s16 += b[4] }
    }
    END {
      if (NR == 0) { printf "FAIL: %s: no rows\n", name; exit 1 }
      printf "%-12s %3d rows: activations %2d rows %6d -> %6d bytes, f32 %2d rows %5d -> %5d bytes\n",
             name, NR, nh, h32, h16, ns, s32, s16
      exit bad || nh == 0
    }' || fail=1
  [ "$(wc -l <"$tmp/$name.f32.rows")" = "$(wc -l <"$tmp/$name.bf16.rows")" ] ||
    { echo "FAIL: $name: the reports have different rows"; fail=1; }
}

# tensor_of REPORT: the per-rank tensor bytes; stage_of REPORT S: stage S's pipeline bytes.
tensor_of() { sed -n 's/^per rank: .*(tensor \([0-9]*\),.*/\1/p' "$1"; }
stage_of() { sed -n "s/^  stage $2: each of its ranks sends \([0-9]*\) bytes/\1/p" "$1"; }

if [ "$mode" = report ]; then
  check_report gpt2-t2 "$models/gpt2.shard" "${SHAPE[@]}" --tp 2
  check_report gpt2-t2-sp "$models/gpt2.shard" "${SHAPE[@]}" --tp 2 --sequence-parallel
  check_report gpt2-p2 "$models/gpt2.shard" "${SHAPE[@]}" --pp 2
  check_report gpt2-t2p2 "$models/gpt2.shard" "${SHAPE[@]}" --tp 2 --pp 2 --sequence-parallel
  check_report llama-t2-sp "$models/llama.shard" "${LLAMA[@]}" --tp 2 --sequence-parallel
  # The gradient reductions stay f32: sequence parallelism has some.
  grep -q '^  backward  all_reduce      f32\[' "$tmp/gpt2-t2-sp.bf16" ||
    { echo "FAIL: gpt2-t2-sp: no f32 gradient reduction in the bf16 report"; fail=1; }
  [ $fail = 0 ] && echo "all checks passed: bf16 reports halve the activations' bytes only"
  exit $fail
fi

[ "$mode" = runtime ] || { echo "comm_bf16.sh: unknown mode $mode"; exit 2; }
build=$SHARDC_BUILD
data=$build/data/austen_train.bin
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
[ -f "$build/emu/program.mk" ] && [ -f "$data" ] || { echo "SKIP: no emulator make file or corpus"; exit 77; }
"$shardc" compile "$models/gpt2.shard" "${SHAPE[@]}" --target cuda -o "$tmp/probe" >"$tmp/probe.log" 2>&1 ||
  { echo "SKIP: this shardc cannot compile for --target cuda: $(grep -m1 error "$tmp/probe.log")"; exit 77; }
# shellcheck source=tests/features/gpu/ranks.sh
. "$ROOT/tests/features/gpu/ranks.sh"
MICRO=2
TRAIN="--data $data --seed 1 --quiet --steps 2 --global-batch $((2 * MICRO)) --comm-stats"

# job NAME TARGET PREC LAYOUT...: compiles, builds and runs the layout;
# leaves NAME.out (the run's comm lines) and NAME.report.
job() {
  local name=$1 target=$2 prec=$3 dir=$tmp/$1
  shift 3
  "$shardc" compile "$models/gpt2.shard" "${SHAPE[@]}" "$@" --precision "$prec" --report comm \
    >"$tmp/$name.report" || return 1
  "$shardc" compile "$models/gpt2.shard" "${SHAPE[@]}" "$@" --target "$target" --precision "$prec" \
    --global-batch $((2 * MICRO)) -o "$dir" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; return 1; }
  if [ "$target" = cuda ]; then
    make -s -C "$dir" -f Makefile -f "$(cd "$build" && pwd)/emu/program.mk" >>"$tmp/$name.log" 2>&1
  else
    "$shardc" build "$dir" >>"$tmp/$name.log" 2>&1
  fi || return 1
  # shellcheck disable=SC2086
  mpirun_job "$dir" 0 - $TRAIN >"$tmp/$name.out" 2>&1 || { tail -n 20 "$tmp/$name.out"; return 1; }
}

# comm VALUE FILE RANK: one field of a rank's comm lines (all steps alike).
comm() {
  sed -n "s/^comm: rank $3 step [0-9]* | tensor: program \([0-9]*\) bytes.*pipeline: \([0-9]*\) bytes.*/\1 \2/p" \
    "$2" | sort -u | awk -v f="$1" '{ print $f } END { if (NR != 1) print "uneven" }'
}

job t2-bf16 cuda bf16 --tp 2 --sequence-parallel || { echo "FAIL: gpt2 t2 sp bf16 did not run"; exit 1; }
for r in 0 1; do
  got=$(comm 1 "$tmp/t2-bf16.out" $r) want=$(($(tensor_of "$tmp/t2-bf16.report") * MICRO))
  echo "t2 sp bf16 rank $r: tensor bytes a step $got, report $want (fp32 report: $(($(
    "$shardc" compile "$models/gpt2.shard" "${SHAPE[@]}" --tp 2 --sequence-parallel --report comm |
    sed -n 's/^per rank: .*(tensor \([0-9]*\),.*/\1/p') * MICRO)))"
  [ "$got" = "$want" ] || { echo "FAIL: t2 sp bf16 rank $r: $got bytes, not $want"; fail=1; }
done
job p2-f32 cpu fp32 --pp 2 && job p2-bf16 cuda bf16 --pp 2 || { echo "FAIL: gpt2 p2 did not run"; exit 1; }
for r in 0 1; do
  f32=$(comm 2 "$tmp/p2-f32.out" $r) bf16=$(comm 2 "$tmp/p2-bf16.out" $r)
  own=$((f32 - $(stage_of "$tmp/p2-f32.report" $r) * MICRO))
  want=$(($(stage_of "$tmp/p2-bf16.report" $r) * MICRO + own))
  echo "p2 rank $r: pipeline bytes a step: fp32 $f32 = report x $MICRO + $own (the runtime's)," \
    "bf16 $bf16, report x $MICRO + $own = $want"
  [ "$bf16" = "$want" ] && [ "$own" -ge 0 ] && [ "$own" -lt 64 ] ||
    { echo "FAIL: p2 bf16 rank $r: $bf16 pipeline bytes, not $want"; fail=1; }
done
[ $fail = 0 ] && echo "all checks passed: the runtime's bytes are the bf16 report's"
exit $fail
