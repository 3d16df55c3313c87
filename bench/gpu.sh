#!/usr/bin/env bash
# Training speed on one GPU, to run once where there is one (an H200 or
# another Hopper: built for sm_90 unless CUDA_ARCH says otherwise): GPT-2
# small (12 x 768) and medium (24 x 1024) and a 1.3B shape (24 x 2048, 16
# heads), all at seq 1024 and vocabulary 50257, in bf16 (--precision
# bf16: bf16 step, fp32 masters and AdamW state), each measured in the
# same run as
#  - ours: the CUDA target's program on the bundled corpus, the median of
#    the per-step tokens/s of the --log-json lines after the warm-up;
#  - PyTorch eager and torch.compile (bench/torch_gpt2.py: the same shape,
#    batch, precision and step count), where python3 -c "import torch" works.
# MFU is REFERENCE.md's model FLOPs without recomputation,
# 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) per step, over the measured step
# time, against the planner's dense bf16 peak of `shardc hw h200` (989
# TFLOP/s). Memory: the largest GPU memory nvidia-smi shows for our process
# (CUDA context and cuBLASLt included) against the memory plan's total,
# and PyTorch's peak allocated memory. The table gives the ratios ours /
# eager and ours / compile, and beside them the prediction of the cost
# report (`shardc simulate --program DIR --hw NAME`, docs/targets.md: the
# program's every launch priced on the hardware description, no run), its
# tokens/s and MFU, and measured / predicted; BENCH_HW names the
# description (default h200, or h100 / a100 when nvidia-smi names one).
#
#   bench/gpu.sh [BUILD_DIR]        (default build-gpu; configured and built
#                                    here when it has no shardc)
#   BENCH_WARMUP=2 BENCH_STEPS=5    steps before timing, steps timed
#   BENCH_BUDGET_S=420              runs that would start after this many
#                                    seconds are skipped (the table says so)
#
# CUDA graphs: a small shape (6 x 256, seq 128, bf16) with --cuda-graphs on
# and off, its step times and their ratio off / on (the line after the
# first table).
#
# Then the many-rank table (the section "many ranks" below says what it
# measures). Without a GPU it builds what it can (shardc and every program
# with nvcc), checks that the PyTorch script compiles, prints the table with
# every run SKIPped and the reason, and exits 0.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
export LC_ALL=C
BUILD=${1:-build-gpu}
ARCH=${CUDA_ARCH:-90}
WARM=${BENCH_WARMUP:-2}
STEPS=${BENCH_STEPS:-5}
BUDGET=${BENCH_BUDGET_S:-420}
JOBS=$(nproc 2>/dev/null || echo 4)
BW=$BUILD/bench-gpu
mkdir -p "$BW"
SHARDC=$BUILD/shardc
DATA=$BUILD/data/austen_train.bin
# name layers hidden heads batch
SHAPES=("small 12 768 12 16" "medium 24 1024 16 16" "1.3B 24 2048 16 8")
SEQ=1024
VOCAB=50257

# shellcheck source=tests/features/gpu/ranks.sh
. "$ROOT/tests/features/gpu/ranks.sh"
REASON=
[ "$NGPUS" -gt 0 ] || REASON="no GPU (nvidia-smi sees none)"
if python3 -c "import torch" 2>/dev/null; then TORCH=1; else TORCH=0; fi

# ------------------------------------------------------------------ build
if [ ! -x "$SHARDC" ] || [ ! -f "$DATA" ]; then
  echo "== building shardc in $BUILD"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
    >"$BW/configure.log" 2>&1 &&
    cmake --build "$BUILD" -j"$JOBS" --target shardc demo_data shard_rt_cuda shard_kernels_cuda \
      >"$BW/build.log" 2>&1 ||
    { echo "FAIL: the build (see $BW/configure.log, $BW/build.log)"; exit 1; }
fi
python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$ROOT/bench/torch_gpt2.py" ||
  { echo "FAIL: bench/torch_gpt2.py does not compile"; exit 1; }

PEAK=$("$SHARDC" hw h200 2>/dev/null | sed -n 's/^peak_bf16_tflops = //p')
[ -n "$PEAK" ] || PEAK=989
# The cost report's description: the GPU's preset where nvidia-smi names one.
case $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1) in
*H100*) PRED_HW=h100 ;; *A100*) PRED_HW=a100 ;; *) PRED_HW=h200 ;;
esac
PRED_HW=${BENCH_HW:-$PRED_HW}

# predict DIR: the cost report's "step_s tokens_per_s" of the program in DIR.
predict() {
  "$SHARDC" simulate --program "$1" --hw "$PRED_HW" --json 2>/dev/null |
    sed -n 's/^[[:space:]]*"\(tokens_per_s\|step_time_s\)":[[:space:]]*\([0-9.e+-]*\).*/\2/p' |
    paste -sd' ' -
}

# The model FLOPs of one token (REFERENCE.md, without recomputation).
flops_per_token() { # layers hidden
  awk -v l="$1" -v h="$2" -v s=$SEQ -v V=$VOCAB \
    'BEGIN { printf "%.6e", 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)) }'
}

# build_ours NAME LAYERS HIDDEN HEADS BATCH: the bf16 program; prints its folder.
build_ours() {
  local dir=$BW/$1
  "$SHARDC" compile "$ROOT/models/gpt2.shard" -D layers="$2" -D hidden="$3" -D heads="$4" \
    -D batch="$5" -D seq=$SEQ -D vocab=$VOCAB --target cuda --precision bf16 \
    --cuda-arch "sm_$ARCH" -o "$dir" >"$dir.plan.txt" 2>&1 &&
    "$SHARDC" build "$dir" >"$dir.build.log" 2>&1 ||
    { echo "FAIL: $1 does not compile and build (see $dir.plan.txt, $dir.build.log)" >&2; return 1; }
  echo "$dir"
}

# run_ours DIR [FLAGS...]: trains (WARM + STEPS steps, or RUN_STEPS
# counting the warm-up), sampling the process's GPU memory; prints
# "tokens_per_s max_mem_MiB".
run_ours() {
  local dir=$1 pid mem
  shift
  rm -f "$dir.json"
  "$dir/rank0" --data "$DATA" --steps "${RUN_STEPS:-$((WARM + STEPS))}" --seed 1 --quiet \
    --log-json "$dir.json" "$@" >"$dir.run.log" 2>&1 &
  pid=$!
  mem=$(gpu_mem_peak "$pid")
  wait "$pid" || { echo "FAIL: $(tail -n 1 "$dir.run.log")" >&2; return 1; }
  sed 's/.*"step":\([0-9]*\).*"tokens_per_s":\([^,}]*\).*/\1 \2/' "$dir.json" |
    awk -v w="$WARM" '$1 > w { print $2 }' | sort -g |
    awk -v mem="$mem" '{ v[NR] = $1 } END { if (NR) printf "%.0f %d\n", v[int((NR + 1) / 2)], mem }'
}

# run_torch MODE LAYERS HIDDEN HEADS BATCH: prints "tokens_per_s peak_MiB".
run_torch() {
  python3 "$ROOT/bench/torch_gpt2.py" --mode "$1" --layers "$2" --hidden "$3" --heads "$4" \
    --batch "$5" --seq $SEQ --vocab $VOCAB --warmup "$WARM" --steps "$STEPS" 2>"$BW/torch.err" |
    tail -n 1 | sed 's/.*"tokens_per_s": \([^,]*\),.*"peak_mem_bytes": \([0-9]*\).*/\1 \2/' |
    awk 'NF == 2 { printf "%.0f %d\n", $1, $2 / 1048576 }'
}

# -------------------------------------------------------------- attention
# Attention's forward + backward at GPT-2 small's shape (b 8, s 1024, 12
# heads of 64, causal): the flash and the simple bf16 kernels and the plain
# fp32 path (scores through cuBLASLt), each the median of 10 runs, timed by
# test_kernels_cuda --bench-attention, with the ratios simple/flash and
# plain/flash. First, and printed at once: it takes seconds.
echo "== attention forward + backward (b 8, s 1024, 12 heads of 64, causal)"
if ! cmake --build "$BUILD" -j"$JOBS" --target test_kernels_cuda >"$BW/build-attention.log" 2>&1; then
  echo "FAIL: test_kernels_cuda does not build (see $BW/build-attention.log)"
elif [ -n "$REASON" ]; then
  echo "SKIP: $REASON"
elif "$BUILD/tests/test_kernels_cuda" --bench-attention >"$BW/attention.txt" 2>&1; then
  sed -n 's/^attention_bench //p' "$BW/attention.txt"
else
  echo "FAIL: $(tail -n 1 "$BW/attention.txt")"
fi

ROWS=()
t_start=$SECONDS
left_ok() { [ $((SECONDS - t_start)) -lt "$BUDGET" ]; }
for shape in "${SHAPES[@]}"; do
  # shellcheck disable=SC2086
  set -- $shape
  name=$1 l=$2 h=$3 heads=$4 b=$5
  fpt=$(flops_per_token "$l" "$h")
  ours="SKIP" mfu="-" mem="-" eager="-" comp="-" r_e="-" r_c="-" note=""
  dir=$(build_ours "$name" "$l" "$h" "$heads" "$b") || { ROWS+=("$name FAIL build"); continue; }
  # The prediction: tokens/s and MFU as the measured ones are computed.
  ptps="-" pmfu="-" r_p="-"
  pred=$(predict "$dir")
  if [ -n "$pred" ]; then
    # shellcheck disable=SC2086
    set -- $pred
    ptps=$(awk -v t="$2" 'BEGIN { printf "%.0f", t }')
    pmfu=$(awk -v t="$ptps" -v f="$fpt" -v p="$PEAK" 'BEGIN { printf "%.1f%%", 100 * t * f / (p * 1e12) }')
  fi
  plan=$(awk '/^  total/ { printf "%.0f", $(NF-3) / 1048576 }' "$dir.plan.txt")
  echo "== $name: l=$l h=$h heads=$heads batch=$b seq=$SEQ, built ($dir), plan $plan MiB"
  if [ -n "$REASON" ]; then
    note=$REASON
  elif ! left_ok; then
    note="skipped: past the ${BUDGET}s budget"
  else
    if got=$(run_ours "$dir") && [ -n "$got" ]; then
      set -- $got
      ours=$1 mem="$2/$plan"
      mfu=$(awk -v t="$1" -v f="$fpt" -v p="$PEAK" 'BEGIN { printf "%.1f%%", 100 * t * f / (p * 1e12) }')
    else
      ours=FAIL note="ours failed (see $dir.run.log)"
    fi
    if [ "$TORCH" = 1 ]; then
      for mode in eager compile; do
        left_ok || { note="$note torch $mode skipped (budget)"; continue; }
        tg=$(run_torch "$mode" "$l" "$h" "$heads" "$b")
        [ -n "$tg" ] || { note="$note torch $mode failed ($BW/torch.err)"; continue; }
        set -- $tg
        if [ "$mode" = eager ]; then eager="$1 ($2 MiB)"; else comp="$1 ($2 MiB)"; fi
        case $ours in SKIP | FAIL) ;; *)
          r=$(awk -v a="$ours" -v b="$1" 'BEGIN { printf "%.2f", a / b }')
          if [ "$mode" = eager ]; then r_e=$r; else r_c=$r; fi ;;
        esac
      done
    else
      note="$note no PyTorch (python3 -c 'import torch' fails)"
    fi
  fi
  case $ours/$ptps in SKIP/* | FAIL/* | */-) ;; *)
    r_p=$(awk -v a="$ours" -v b="$ptps" 'BEGIN { printf "%.2f", a / b }') ;;
  esac
  ROWS+=("$(printf '%-7s %10s %7s %13s %18s %18s %6s %6s %10s %7s %6s  %s' "$name" "$ours" "$mfu" \
    "$mem" "$eager" "$comp" "$r_e" "$r_c" "$ptps" "$pmfu" "$r_p" "$note")")
done

# CUDA graphs: the step time of a small shape, where launch overhead
# shows, with --cuda-graphs on and off (one program: a runtime flag). The
# graphs are captured on a function's second call, so the timed steps
# after the warm-up replay them.
G_SHAPE="6 256 4 4" G_SEQ=128 G_VOCAB=512 G_STEPS=${BENCH_GRAPH_STEPS:-40}
graph_row() {
  local l h heads b dir got ms on off
  # shellcheck disable=SC2086
  set -- $G_SHAPE
  l=$1 h=$2 heads=$3 b=$4
  dir=$BW/graphs
  "$SHARDC" compile "$ROOT/models/gpt2.shard" -D layers="$l" -D hidden="$h" -D heads="$heads" \
    -D batch="$b" -D seq=$G_SEQ -D vocab=$G_VOCAB --target cuda --precision bf16 \
    --cuda-arch "sm_$ARCH" -o "$dir" >"$dir.plan.txt" 2>&1 &&
    "$SHARDC" build "$dir" >"$dir.build.log" 2>&1 ||
    { echo "graphs: FAIL: the small shape does not build (see $dir.build.log)"; return; }
  local what="l=$l h=$h heads=$heads batch=$b seq=$G_SEQ vocab=$G_VOCAB, bf16, $G_STEPS steps"
  if [ -n "$REASON" ]; then echo "graphs ($what): SKIP: $REASON; built"; return; fi
  left_ok || { echo "graphs ($what): skipped: past the ${BUDGET}s budget"; return; }
  for mode in on off; do
    got=$(RUN_STEPS=$G_STEPS run_ours "$dir" --cuda-graphs $mode) && [ -n "$got" ] ||
      { echo "graphs ($what): FAIL: --cuda-graphs $mode (see $dir.run.log)"; return; }
    ms=$(echo "$got" | awk -v n=$((b * G_SEQ)) '{ printf "%.3f", 1e3 * n / $1 }')
    if [ $mode = on ]; then on=$ms; else off=$ms; fi
  done
  echo "graphs ($what): on $on ms/step, off $off ms/step, off/on $(awk -v a="$off" -v b="$on" \
    'BEGIN { printf "%.2f", a / b }')"
}
GRAPH_LINE=$(graph_row)

# ------------------------------------------------------ many ranks (issue 11)
# GPT-2 small at seq 1024 over NCCL, global batch MULTI_GB sequences of
# microbatch MULTI_B, for each layout this machine can start: its step time
# against the same model on one rank (same global batch, so the same
# tokens per step), and for d = 2 how much of the gradient reduction the
# backward hides (the runtime's --dp-stats: 1 - exposed wait with overlap
# / exposed wait with --no-overlap). With fewer GPUs than ranks the ranks
# share them over sockets (tests/features/gpu/ranks.sh), which the row says: a
# sharing row measures the code path, not the speed of a real cluster.
# t = 4 and 8 run only where there are that many GPUs: their per-GPU
# efficiency is one rank's step time / (t x the layout's).
MULTI_B=${BENCH_MULTI_BATCH:-4}
MULTI_GB=${BENCH_MULTI_GLOBAL:-16}
MULTI_PREC=${BENCH_MULTI_PRECISION:-bf16}
MLAYOUTS=("t2 --tp 2" "p2 --pp 2" "d2 --dp 2")
[ "$NGPUS" -ge 4 ] && MLAYOUTS+=("t4 --tp 4")
[ "$NGPUS" -ge 8 ] && MLAYOUTS+=("t8 --tp 8")

# build_multi NAME FLAGS...: the program folder of a layout (falls back to
# fp32 where MULTI_PREC does not compile for it); prints "DIR PRECISION".
build_multi() {
  local name=$1 dir=$BW/multi-$1 prec
  shift
  for prec in $MULTI_PREC fp32; do
    "$SHARDC" compile "$ROOT/models/gpt2.shard" -D layers=12 -D hidden=768 -D heads=12 \
      -D batch="$MULTI_B" -D seq=$SEQ -D vocab=$VOCAB --global-batch "$MULTI_GB" "$@" \
      --target cuda --precision "$prec" --cuda-arch "sm_$ARCH" -o "$dir" >"$dir.plan.txt" 2>&1 &&
      "$SHARDC" build "$dir" >"$dir.build.log" 2>&1 && { echo "$dir $prec"; return 0; }
  done
  echo "FAIL: multi-rank $name does not compile and build (see $dir.plan.txt, $dir.build.log)" >&2
  return 1
}

# run_multi DIR TAG FLAGS...: trains; prints "s_per_step exposed_wait_ms"
# (the wait is "-" without data parallelism).
run_multi() {
  local dir=$1 n log
  log=$BW/$(basename "$1")-$2
  shift 2
  rm -f "$log.json"
  n=$(ranks_of "$dir")
  if [ "$n" = 1 ]; then
    "$dir/rank0" --data "$DATA" --steps $((WARM + STEPS)) --seed 1 --quiet --log-json "$log.json" \
      "$@" >"$log.log" 2>&1 || return 1
  else
    mpirun_job "$dir" "$(share_of "$n")" - --data "$DATA" --steps $((WARM + STEPS)) --seed 1 \
      --quiet --log-json "$log.json" "$@" >"$log.log" 2>&1 || return 1
  fi
  local wait
  wait=$(sed -n 's/^dp reduce: rank 0 .*exposed wait \([0-9.]*\) ms.*/\1/p' "$log.log" | tail -n 1)
  sed 's/.*"step":\([0-9]*\).*"tokens_per_s":\([^,}]*\).*/\1 \2/' "$log.json" |
    awk -v w="$WARM" '$1 > w { print $2 }' | sort -g |
    awk -v tok=$((MULTI_GB * SEQ)) -v wt="${wait:--}" \
      '{ v[NR] = $1 } END { if (NR) printf "%.4f %s\n", tok / v[int((NR + 1) / 2)], wt }'
}

MROWS=()
declare -A ONE_S=()
# one_rank PREC: one rank's s/step at that precision (built and run once).
one_rank() {
  if [ -z "${ONE_S[$1]:-}" ]; then
    local got r
    ONE_S[$1]=-
    if got=$(MULTI_PREC=$1 build_multi "one-$1") && [ "${got#* }" = "$1" ] &&
      r=$(run_multi "${got% *}" overlap) && [ -n "$r" ]; then
      ONE_S[$1]=${r% *}
      MROWS+=("$(printf '%-5s %5s %5s %-34s %9s %9s %7s %6s' one 1 "$1" "one GPU" "${ONE_S[$1]}" \
        1.00 - -)")
    fi
  fi
}
for layout in "${MLAYOUTS[@]}"; do
  # shellcheck disable=SC2086
  set -- $layout
  name=$1
  shift
  got=$(build_multi "$name" "$@") || { MROWS+=("$name FAIL build"); continue; }
  set -- $got
  dir=$1 prec=$2
  n=$(ranks_of "$dir")
  how=$([ "$(share_of "$n")" = 1 ] && echo "sharing $NGPUS GPU(s) over sockets" || echo "own GPUs")
  s="SKIP" ratio="-" hidden="-" eff="-" note=""
  if [ -n "$REASON" ]; then
    note=$REASON
  elif ! left_ok; then
    note="skipped: past the ${BUDGET}s budget"
  elif one_rank "$prec" && r=$(run_multi "$dir" overlap --dp-stats) && [ -n "$r" ]; then
    set -- $r
    s=$1 one_s=${ONE_S[$prec]}
    [ "$one_s" != - ] && ratio=$(awk -v a="$s" -v b="$one_s" 'BEGIN { printf "%.2f", a / b }')
    case $name in t[0-9]*)
      [ "$how" = "own GPUs" ] && [ "$one_s" != - ] && eff=$(awk -v a="$s" -v b="$one_s" \
        -v t="${name#t}" 'BEGIN { printf "%.0f%%", 100 * b / (t * a) }') ;;
    esac
    if [ "$2" != - ] && left_ok && r0=$(run_multi "$dir" serial --dp-stats --no-overlap) &&
      [ -n "$r0" ]; then
      set -- $2 $r0
      hidden=$(awk -v a="$1" -v b="$3" 'BEGIN { printf "%.2f", (b > 0 ? 1 - a / b : 0) }')
      note="exposed wait $1 ms, --no-overlap $3 ms ($4 s/step)"
    fi
  else
    s=FAIL note="see $BW/multi-$name-overlap.log"
  fi
  MROWS+=("$(printf '%-5s %5s %5s %-34s %9s %9s %7s %6s  %s' "$name" "$n" "$prec" "$how" "$s" \
    "$ratio" "$hidden" "$eff" "$note")")
done

echo
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "== bf16 training speed on ${GPU_NAME:-no GPU}, seq $SEQ, $WARM warm-up + $STEPS timed steps," \
  "peak $PEAK TFLOP/s, $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-7s %10s %7s %13s %18s %18s %6s %6s %10s %7s %6s  %s\n' shape "ours tok/s" MFU \
  "MiB used/plan" "eager tok/s (MiB)" "compile tok/s (MiB)" "/eager" "/comp" "pred tok/s" \
  "pred MFU" "/pred" note
echo "(pred: the cost report on $PRED_HW, shardc simulate --program DIR; /pred: measured / predicted)"
for r in "${ROWS[@]}"; do echo "$r"; done
echo "$GRAPH_LINE"
echo
echo "== many ranks: GPT-2 small, seq $SEQ, global batch $MULTI_GB of $MULTI_B, $WARM warm-up + $STEPS timed steps"
printf '%-5s %5s %5s %-34s %9s %9s %7s %6s  %s\n' layout ranks prec "how it ran" "s/step" "/one" \
  hidden "eff/GPU" note
for r in "${MROWS[@]}"; do echo "$r"; done
[ -n "$REASON" ] && echo "SKIP: $REASON; built shardc and the programs of both tables, nothing ran"
exit 0
