#!/usr/bin/env bash
# Every GPU check of the project in one call, for a machine with an NVIDIA
# GPU (Hopper: built for sm_90 unless CUDA_ARCH says otherwise). It builds
# (Release), runs each check with a time limit (all of them together stay
# under ten minutes), and ends with a table: one row per check, PASS /
# FAIL / SKIP, its time and where its log is. It exits 1 when a
# check failed, else 0.
#
#   tests/features/gpu/run.sh [BUILD_DIR]     (default build-gpu; logs in BUILD_DIR/gpu-logs,
#                                     copied to $OUT when that is set)
#   GPU_BUILD=direct tests/features/gpu/run.sh   skips the CMake build and builds directly
#
# The build is the project's CMake build when it configures (it needs
# flex, bison, cJSON and OpenBLAS besides CUDA). On a GPU image without
# them the script falls back to building just what the kernel tests need
# with nvcc and cc directly, with tests/features/gpu/noblas standing in for
# OpenBLAS if it is missing too; the table says which build ran.
#
# Checks, in order:
#   kernels            tests/features/gpu/test_kernels_cuda: every CUDA kernel against
#                      its CPU twin (fp32 1e-5, bf16 1e-2), all shapes
#   kernels memcheck   the same, --small shapes, under compute-sanitizer memcheck
#   kernels racecheck  the same, --small shapes, under compute-sanitizer racecheck
#   device             tests/features/gpu/test_device_cuda: runtime/device_cuda.c (copies,
#                      the optimizer, the norms, the bf16 working copy of the
#                      weights) against the CPU kernels
#                      (CMake build only: it needs the runtime's dependencies)
#   gpt2 fp32, llama   the tiny GPT-2 and LLaMA (odd vocabulary 257 and sequence 31,
#     fp32             GQA for LLaMA) compiled for --target cuda and --target cpu,
#                      10 steps each on the bundled corpus with the same seed: every
#                      step's loss within 1e-4 of the CPU target's
#   gpt2 bf16, llama   the same two compiled with --precision bf16 for the GPU: every
#     bf16             step's loss within 2e-2 (relative) of the CPU target's fp32 run
#   mixtral fp32,      the tiny Mixtral (top 2 of 8 SwiGLU experts) and DeepSeek-MoE (top 4
#     capacity, bf16,  of 16 fine-grained experts, 2 shared, the z-loss): the routed kernels
#     deepseek_moe     of kernels/cuda/moe.cu, every step's loss within 1e-4 of the CPU
#     fp32, bf16       target's (bf16: 2e-2 relative); capacity: -D capacity=0.5, copies
#                      dropped
#   vector loops       the tiny GPT-2 and LLaMA (and tests/features/gpu/vector.shard: a mixed
#                      bf16/fp32 run, a scalar tail) in bf16, the fused kernels' 16-byte
#                      loops on (the default) and off (SHARD_CUDA_VECTOR=0): every
#                      step's loss and gradient norm the same to the bit; a copy whose
#                      bf16 vector stores are perturbed must differ (the loops ran)
#   gpt2 epilogues     the tiny GPT-2 fp32 on the GPU with cuBLASLt's epilogues (bias+GELU,
#                      dgelu, bias gradients) against the same program compiled with
#                      --no-gemm-epilogue: every step's loss within 1e-4 (relative: the
#                      library's GELU may use an approximate tanh)
#   cuda graphs        the tiny GPT-2 in fp32, and again with dropout 0.1, on the GPU
#                      with --cuda-graphs on and off: the same losses to the bit over
#                      10 steps, within 1e-4 of the CPU target's; with graphs on the
#                      log says forward and backward are replayed and counts replays,
#                      with them off it says every function ran plainly; and gpt2 p=2
#                      (a graph per stash slot) on against off, and against one rank
#   gradients 1 step   --dump-grads after one step, GPU against CPU, within 1e-4 of
#                      each tensor's largest entry (needs tptool, an MPI build's)
#   checkpoint         5 steps on one target, --resume to 10 on the other, both ways:
#     crossing         the losses of the CPU-only run within 1e-4
#   model sanitizer    compute-sanitizer memcheck and racecheck on 2 steps of the
#                      tiny GPT-2's CUDA program
#   recompute,         --recompute selective and full (the tiny GPT-2 and LLaMA, and
#     recompute bf16   tests/features/recompute/unfused.shard, the attention written out)
#                      against the same program without recomputation:
#                      every step's loss and gradient norm to the bit with
#                      --no-gemm-epilogue, within 1e-4 relative with the epilogues,
#                      within 1e-4 of the CPU target's (bf16: 2e-2 relative)
#   dropout            the tiny GPT-2 at dropout_rate 0.1: every step's loss within
#                      1e-4 of the CPU target's, with --recompute full to the bit of
#                      the program without, bf16 within 2e-2 (relative)
#   accumulation       the tiny GPT-2 and LLaMA run with --global-batch 4 (2 microbatches
#                      a step, gradients accumulated) against the CPU target's same
#                      program: every step's loss within 1e-4 over 10 steps
#   nccl t2, nccl p2,  (issue 11) the tiny GPT-2 at t=2, p=2 and d=2 over the NCCL
#     nccl d2          backend against the CPU target's same layout over MPI: every
#                      step's loss within 1e-4 over 10 steps (fp32); d2 runs with
#                      --deterministic (NCCL pinned to Ring, Simple), t2 and p2 with
#                      NCCL's own choice of algorithm. Each layout is
#                      built first; it runs on its own GPUs where there are enough,
#                      else with its ranks sharing the GPUs (each rank its own
#                      NCCL_HOSTID, NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, sockets on
#                      loopback); the note says how it ran, or why it could not
#   nccl t2 bf16,      the same three layouts compiled with --precision bf16 (bf16
#     p2 bf16, d2 bf16 activations, collectives and pipeline messages; fp32 weight
#                      gradients and their reductions): every step's loss within 2e-2
#                      (relative) of the CPU target's fp32 run of the same layout
#   nccl t2 mixtral,   the tiny Mixtral at t=2, d=2 and p=2 over NCCL (the routed layer
#     d2, p2 mixtral   replicated) against the CPU target's same layout, within 1e-4 over
#                      10 steps (fp32); t2 bf16 within 2e-2 (relative) of its fp32 run
#   nccl d2 ep2, d4 ep2, the tiny Mixtral with expert parallelism (--ep 2: the tokens'
#     t2 d2 ep2,       all-to-alls as grouped NCCL sends and receives, the expert groups
#     p2 d2 ep2 mixtral split from the data axis) against the CPU target's same layout
#                      within 1e-4 over 10 steps, and that against one rank (fp32);
#                      d2 ep2 bf16 within 2e-2 (relative) of the CPU's fp32
#   nccl d4 ep2 zero1  d4 ep2 with ZeRO-1 (the expert buckets reduce-scattered over
#     mixtral          the 2 ranks holding the same experts), as above
#   nccl rank killed   t=2 on the GPU, rank 1 killed (SIGKILL) after its first
#                      steps: the job must end non-zero within --timeout + 30 s
#
#   tests/features/gpu/run.sh --model-check NAME BUILD_DIR   runs one model check alone
#   (the table's rows call it so, under a time limit)
set -u
cd "$(dirname "$0")/../../.."
ROOT=$PWD
if [ "${1:-}" = --model-check ]; then
  MODEL_CHECK=$2
  BUILD=$3
else
  MODEL_CHECK=
fi
[ -n "$MODEL_CHECK" ] || BUILD=${1:-build-gpu}
ARCH=${CUDA_ARCH:-90}
JOBS=$(nproc 2>/dev/null || echo 4)
LOGS=$BUILD/gpu-logs
mkdir -p "$LOGS"
ROWS=()
FAILED=0

# row NAME RESULT SECONDS NOTE
row() { ROWS+=("$(printf '%-22s %-5s %6s  %s' "$1" "$2" "$3" "$4")"); [ "$2" = FAIL ] && FAILED=1; }

# run_check NAME LIMIT_S LOG CMD...: runs CMD with a time limit, exit 77 = skip.
run_check() {
  local name=$1 limit=$2 log=$3; shift 3
  local t0=$SECONDS rc
  echo "== $name: $*" | tee "$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  rc=$?
  local dt=$((SECONDS - t0))
  tail -n 3 "$log"
  case $rc in
    0) row "$name" PASS "$dt" "$(grep -m1 -E 'checks, [0-9]+ failed|all checks passed|ERROR SUMMARY' "$log" || echo "$log")" ;;
    77) row "$name" SKIP "$dt" "$(grep -m1 SKIP "$log")" ;;
    124) row "$name" FAIL "$dt" "timed out after ${limit}s ($log)" ;;
    *) row "$name" FAIL "$dt" "exit $rc: $(grep -m1 -E 'checks, [0-9]+ failed|ERROR SUMMARY' "$log" ||
                                       echo "$(grep -c FAIL "$log") FAIL lines") ($log)" ;;
  esac
}

# ------------------------------------------- the model checks (issue 10)
# Each runs alone as `run.sh --model-check NAME BUILD` (so run_check can
# time-limit it), in $BUILD/gpu-models, with the shardc and the corpus
# shards of the CMake build. It prints what it compared and ends with
# "all checks passed: ..." or a FAIL line and a non-zero exit; 77 skips.
SHARDC_BIN=$BUILD/shardc
DATA=$BUILD/data/austen_train.bin
MW=$BUILD/gpu-models
STEPS=10
TINY_gpt2="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D layers=2 -D batch=2"
TINY_llama="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D kv_heads=2 -D layers=2 -D batch=2 -D ffn=96"
# The routed models (mixtures of experts): Mixtral's top 2 of 8 SwiGLU
# experts, and DeepSeek-MoE's top 4 of 16 fine-grained ones beside 2 shared
# ones, with its router z-loss; fp32-mixtral-cap adds a capacity factor
# that drops copies.
TINY_mixtral="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D kv_heads=2 -D layers=2 -D batch=2 -D ffn=96"
TINY_deepseek_moe="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D layers=2 -D batch=2"
# tests/features/gpu/vector.shard: the vector check's own shapes (no -D needed).
TINY_vector=""
TRAIN="--data $DATA --seed 1 --quiet"

# build_prog DIR TARGET: builds a compiled folder: with shardc, or for the
# CUDA target under GPU_EMU=1 with the C++ compiler against the CPU
# emulator of tests/features/emu (the make variables of BUILD/emu/program.mk).
build_prog() {
  if [ "$2" = cuda ] && [ -n "${GPU_EMU:-}" ]; then
    make -s -C "$1" -f Makefile -f "$(cd "$BUILD" && pwd)/emu/program.mk"
  else
    "$SHARDC_BIN" build "$1"
  fi
}

# prog MODEL TARGET [PRECISION [TAG OPTIONS...]]: compiles and builds the
# tiny MODEL (models/MODEL.shard, else tests/features/gpu/ or tests/features/recompute/MODEL.shard) for
# TARGET in PRECISION (default fp32), with more compile OPTIONS in the
# folder named with TAG (make leaves an up-to-date program alone); prints
# the program's path.
prog() {
  local prec=${3:-fp32} dir=$MW/$1-$2 defs file=$ROOT/models/$1.shard
  [ "$prec" = fp32 ] || dir=$dir-$prec
  [ -z "${4:-}" ] || dir=$dir-$4
  [ -f "$file" ] || file=$ROOT/tests/features/gpu/$1.shard
  [ -f "$file" ] || file=$ROOT/tests/features/recompute/$1.shard
  eval "defs=\$TINY_$1"
  # shellcheck disable=SC2086
  "$SHARDC_BIN" compile "$file" $defs "${@:5}" --target "$2" --precision "$prec" \
    --cuda-arch "sm_$ARCH" \
    -o "$dir" >"$dir.compile.log" 2>&1 && build_prog "$dir" $2 >>"$dir.compile.log" 2>&1 ||
    { echo "FAIL: $1 for --target $2 ($prec) does not compile and build:" >&2; cat "$dir.compile.log" >&2; return 1; }
  echo "$dir/rank0"
}

# The comparisons of --log-json files (steps_losses, cmp_losses,
# json_bits, same_bits), shared with the GPU kit's runner.
# shellcheck source=tests/features/gpu/compare.sh
. "$ROOT/tests/features/gpu/compare.sh"

check_fp32() { # MODEL [TAG OPTIONS...]: with a TAG, MODEL compiled with more OPTIONS
  local cpu gpu m=$1${2:+-$2}
  cpu=$(prog "$1" cpu fp32 "${@:2}") && gpu=$(prog "$1" cuda fp32 "${@:2}") || return 1
  rm -f "$MW/$m-cpu.json" "$MW/$m-cuda.json"
  # shellcheck disable=SC2086
  "$cpu" $TRAIN --steps $STEPS --log-json "$MW/$m-cpu.json" || { echo "FAIL: the CPU run"; return 1; }
  # shellcheck disable=SC2086
  "$gpu" $TRAIN --steps $STEPS --log-json "$MW/$m-cuda.json" || { echo "FAIL: the GPU run"; return 1; }
  cmp_losses "$m fp32, GPU against CPU" "$MW/$m-cpu.json" "$MW/$m-cuda.json" 1e-4 || return 1
  echo "all checks passed: $m fp32 losses as the CPU target's over $STEPS steps"
}

# bf16 on the GPU against the CPU target's fp32 run: the same data, seed
# and steps; bf16 rounding allows 2e-2 of each step's loss.
check_bf16() { # MODEL
  local cpu gpu
  cpu=$(prog "$1" cpu) && gpu=$(prog "$1" cuda bf16) || return 1
  rm -f "$MW/$1-cpu.json" "$MW/$1-cuda-bf16.json"
  # shellcheck disable=SC2086
  "$cpu" $TRAIN --steps $STEPS --log-json "$MW/$1-cpu.json" || { echo "FAIL: the CPU run"; return 1; }
  # shellcheck disable=SC2086
  "$gpu" $TRAIN --steps $STEPS --log-json "$MW/$1-cuda-bf16.json" || { echo "FAIL: the GPU run"; return 1; }
  cmp_losses "$1 bf16 GPU against fp32 CPU" "$MW/$1-cpu.json" "$MW/$1-cuda-bf16.json" 2e-2 rel ||
    return 1
  echo "all checks passed: $1 bf16 losses within 2e-2 of the CPU target's fp32 ones over $STEPS steps"
}

# The fused GEMM epilogues against the same program without them
# (--no-gemm-epilogue), both on the GPU in fp32: the same sums in another
# order, so within fp32 rounding. A fallback to the unfused path shows in
# the log (gemm.cu reports it once per epilogue).
# The losses of a program with cuBLASLt's GELU epilogues against the same
# program without them: the library's GELU may evaluate tanh with the
# hardware's approximate instruction (test_kernels_cuda.c's TOL_GELU32),
# which moves fp32 losses by more than the reordered sums alone would.
EPI_TOL=1e-4
check_epilogues() {
  local gpu noepi
  gpu=$(prog gpt2 cuda) && noepi=$(prog gpt2 cuda fp32 noepi --no-gemm-epilogue) || return 1
  grep -c 'k_cuda_gemm_fused' "$(dirname "$gpu")/rank0.cu" | sed 's/^/fused GEMMs: /'
  rm -f "$MW/gpt2-epi.json" "$MW/gpt2-noepi.json"
  # shellcheck disable=SC2086
  "$gpu" $TRAIN --steps $STEPS --log-json "$MW/gpt2-epi.json" || { echo "FAIL: the fused run"; return 1; }
  # shellcheck disable=SC2086
  "$noepi" $TRAIN --steps $STEPS --log-json "$MW/gpt2-noepi.json" ||
    { echo "FAIL: the unfused run"; return 1; }
  cmp_losses "gpt2 fp32 epilogues against none" "$MW/gpt2-noepi.json" "$MW/gpt2-epi.json" $EPI_TOL rel ||
    return 1
  echo "all checks passed: the fused epilogues give the unfused program's losses"
}

# The fused kernels' 16-byte loops (8 bf16 a uint4, 4 fp32 a float4,
# mixed runs 8 of each) against their element-at-a-time loops, which
# SHARD_CUDA_VECTOR=0 takes instead: the same arithmetic on the same
# widened values, so the same bits. To show that the vector loops ran, a
# copy of the program whose bf16 vector stores add 1/128 to every other
# element must train differently. tests/features/gpu/vector.shard adds a mixed run
# (bf16 and fp32 outputs) and runs with a scalar tail.
check_vector() {
  local m gpu dir out=""
  for m in gpt2 llama vector; do
    gpu=$(prog $m cuda bf16) || return 1
    local n
    n=$(grep -c 'cu_b2(y' "$gpu.cu")
    [ "$n" -gt 0 ] || { echo "FAIL: $m: no bf16 vector loop in $gpu.cu"; return 1; }
    rm -f "$MW/$m-vec-on.json" "$MW/$m-vec-off.json" "$MW/$m-vec-mut.json"
    # shellcheck disable=SC2086
    "$gpu" $TRAIN --steps $STEPS --log-json "$MW/$m-vec-on.json" || { echo "FAIL: $m vector on"; return 1; }
    # shellcheck disable=SC2086
    SHARD_CUDA_VECTOR=0 "$gpu" $TRAIN --steps $STEPS --log-json "$MW/$m-vec-off.json" ||
      { echo "FAIL: $m vector off"; return 1; }
    same_bits "$m bf16 vector loops on against off" "$MW/$m-vec-off.json" "$MW/$m-vec-on.json" ||
      return 1
    json_bits "$MW/$m-vec-on.json" >"$MW/$m-vec-on.bits"
    dir=$MW/$m-cuda-bf16-vecmut
    rm -rf "$dir" && cp -r "$(dirname "$gpu")" "$dir" &&
      sed -i 's/cu_b2(y\([0-9]*\)l\[0\]/cu_b2(1.0078125f * y\1l[0]/' "$dir/rank0.cu" &&
      build_prog "$dir" cuda >"$dir.build.log" 2>&1 || { echo "FAIL: $m: the perturbed copy"; return 1; }
    # shellcheck disable=SC2086
    "$dir/rank0" $TRAIN --steps $STEPS --log-json "$MW/$m-vec-mut.json" || { echo "FAIL: $m perturbed"; return 1; }
    json_bits "$MW/$m-vec-mut.json" | cmp -s - "$MW/$m-vec-on.bits" &&
      { echo "FAIL: $m: perturbing the bf16 vector stores changed nothing: the vector loops never ran"
        return 1; }
    echo "$m bf16: $n bf16 vector stores (last loss $(tail -n 1 "$MW/$m-vec-on.bits" | cut -d' ' -f2))"
    out="$out $m"
  done
  echo "all checks passed: vector loops on and off give the same bits:$out"
}

# graphs_run PROG JSON LOG on|off: 10 steps with the banner and the closing
# graph counts (not --quiet).
graphs_run() {
  rm -f "$2"
  "$1" --data "$DATA" --seed 1 --steps $STEPS --log-json "$2" --cuda-graphs "$4" >"$3" 2>&1 ||
    { echo "FAIL: the GPU run with --cuda-graphs $4:"; tail -n 5 "$3"; return 1; }
}

# CUDA graphs against plain launches: the same kernels with the same
# arguments, so the same bits; dropout 0.1 checks the seed's way through
# device memory (its mask is the CPU's bit for bit).
check_graphs() {
  local cpu gpu tag dir t logs replays
  for tag in plain drop; do
    if [ $tag = plain ]; then
      cpu=$(prog gpt2 cpu) && gpu=$(prog gpt2 cuda) || return 1
    else
      for t in cpu cuda; do
        dir=$MW/gpt2-$t-drop
        # shellcheck disable=SC2086
        "$SHARDC_BIN" compile "$ROOT/models/gpt2.shard" $TINY_gpt2 -D dropout_rate=0.1 --target $t \
          --precision fp32 --cuda-arch "sm_$ARCH" -o "$dir" >"$dir.compile.log" 2>&1 &&
          build_prog "$dir" $t >>"$dir.compile.log" 2>&1 ||
          { echo "FAIL: gpt2 with dropout for --target $t:"; cat "$dir.compile.log"; return 1; }
      done
      cpu=$MW/gpt2-cpu-drop/rank0 gpu=$MW/gpt2-cuda-drop/rank0
    fi
    logs=$MW/graphs-$tag
    rm -f "$logs-cpu.json"
    # shellcheck disable=SC2086
    "$cpu" $TRAIN --steps $STEPS --log-json "$logs-cpu.json" || { echo "FAIL: the CPU run"; return 1; }
    graphs_run "$gpu" "$logs-on.json" "$logs-on.log" on || return 1
    graphs_run "$gpu" "$logs-off.json" "$logs-off.log" off || return 1
    grep -q '^cuda graphs: replayed as graphs: forward, backward' "$logs-on.log" ||
      { echo "FAIL: $tag: the log does not say forward and backward are replayed:"; grep 'cuda graphs' "$logs-on.log"; return 1; }
    replays=$(sed -n 's/^cuda graphs: \([0-9]*\) captured, \([0-9]*\) replays.*/\2/p' "$logs-on.log")
    [ "${replays:-0}" -gt 0 ] || { echo "FAIL: $tag: no graph was replayed"; grep 'cuda graphs' "$logs-on.log"; return 1; }
    grep -q 'plain launches (--cuda-graphs off): forward, backward' "$logs-off.log" &&
      ! grep -q 'replays' "$logs-off.log" ||
      { echo "FAIL: $tag: --cuda-graphs off still ran graphs:"; grep 'cuda graphs' "$logs-off.log"; return 1; }
    echo "$tag: $(grep '^cuda graphs: [0-9]' "$logs-on.log")"
    cmp_losses "$tag graphs on against off" "$logs-off.json" "$logs-on.json" 0 || return 1
    cmp_losses "$tag graphs on against the CPU target" "$logs-cpu.json" "$logs-on.json" 1e-4 || return 1
  done
  check_graphs_p2 || return $?
  echo "all checks passed: graphs on and off give the same losses, with and without dropout," \
    "and on a pipeline stage's stash slots"
}

# A pipeline (p=2, 1f1b): a stage captures its functions once per stash
# slot, each with its own activations; on against off to the bit, and
# against the CPU target's one rank at the same global batch.
check_graphs_p2() {
  local dir one m n logs=$MW/graphs-p2 captured
  command -v mpirun >/dev/null || { echo "p2: no mpirun: the pipeline part is left out"; return 0; }
  dir=$(multi_prog p2 cuda) && one=$(multi_prog one cpu) || return 1
  rm -f "$logs"-*.json
  # shellcheck disable=SC2086
  # (a program of one rank takes its global batch at run time)
  "$one/rank0" $TRAIN $MULTI_one --steps $STEPS --log-json "$logs-one.json" ||
    { echo "FAIL: one rank"; return 1; }
  n=$(ranks_of "$dir")
  for m in on off; do
    mpirun_job "$dir" "$(share_of "$n")" - --data "$DATA" --seed 1 --steps $STEPS \
      --log-json "$logs-$m.json" --cuda-graphs $m >"$logs-$m.log" 2>&1 ||
      { echo "FAIL: p2 with --cuda-graphs $m:"; tail -n 5 "$logs-$m.log"; return 1; }
  done
  captured=$(sed -n 's/^cuda graphs: \([0-9]*\) captured, \([0-9]*\) replays.*/\1 \2/p' "$logs-on.log")
  echo "p2 stage 0: peak stash $(sed -n 's/^pipeline:.*peak stash \([0-9]*\).*/\1/p' "$logs-on.log"), graphs" \
    "captured and replayed: ${captured:-none}"
  # shellcheck disable=SC2086
  set -- $captured
  [ "${1:-0}" -ge 4 ] && [ "${2:-0}" -gt 0 ] ||
    { echo "FAIL: p2: want a forward and a backward graph per stash slot, and replays"; return 1; }
  cmp_losses "p2 graphs on against off" "$logs-off.json" "$logs-on.json" 0 || return 1
  cmp_losses "p2 graphs on against the CPU target's one rank" "$logs-one.json" "$logs-on.json" 1e-4
}

check_grads() {
  local tool=$BUILD/tests/tptool m out=""
  [ -x "$tool" ] || { echo "SKIP: no tptool (it is built with MPI) to compare safetensors"; return 77; }
  for m in gpt2 llama mixtral; do
    local cpu gpu
    cpu=$(prog $m cpu) && gpu=$(prog $m cuda) || return 1
    # shellcheck disable=SC2086
    "$cpu" $TRAIN --steps 1 --dump-grads "$MW/$m-cpu.grads" || { echo "FAIL: $m CPU run"; return 1; }
    # shellcheck disable=SC2086
    "$gpu" $TRAIN --steps 1 --dump-grads "$MW/$m-cuda.grads" || { echo "FAIL: $m GPU run"; return 1; }
    out="$out $m: $("$tool" cmp "$MW/$m-cpu.grads" "$MW/$m-cuda.grads" 1e-4)" ||
      { echo "FAIL: $m gradients:$out"; return 1; }
  done
  echo "all checks passed:$out"
}

check_ckpt() { # 5 steps on one target, resumed to 10 on the other
  # A constant learning rate: a cosine over 5 steps is not the first half of one over 10.
  local m=gpt2 cpu cuda from to TRAIN="$TRAIN --lr-schedule constant"
  cpu=$(prog $m cpu) && cuda=$(prog $m cuda) || return 1
  rm -f "$MW"/ckpt-*.json
  # shellcheck disable=SC2086
  "$cpu" $TRAIN --steps $STEPS --log-json "$MW/ckpt-ref.json" || { echo "FAIL: the CPU run"; return 1; }
  for from in cuda cpu; do
    to=$([ $from = cuda ] && echo cpu || echo cuda)
    local a b
    eval "a=\$$from; b=\$$to"
    rm -rf "$MW/ckpt-$from"
    # shellcheck disable=SC2086
    "$a" $TRAIN --steps 5 --save "$MW/ckpt-$from" --log-json "$MW/ckpt-$from.json" ||
      { echo "FAIL: 5 steps on $from"; return 1; }
    "$b" --resume "$MW/ckpt-$from" --steps $STEPS --quiet --log-json "$MW/ckpt-$from.json" ||
      { echo "FAIL: --resume on $to from $from's checkpoint"; return 1; }
    cmp_losses "$from 5 steps, $to 5 more" "$MW/ckpt-ref.json" "$MW/ckpt-$from.json" 1e-4 || return 1
  done
  echo "all checks passed: checkpoints cross GPU->CPU and CPU->GPU"
}

# ------------------------------- recomputation and dropout (issue 10)
# tests/features/recompute/unfused.shard: a GPT-2 with its attention written out
# (scores, scale, causal mask, softmax, dropout 0.1 of the probabilities).
TINY_unfused=$TINY_gpt2

# train PROGRAM JSON: STEPS steps of TRAIN, logged to JSON. A program whose
# source is that of one this check ran already with the same TRAIN
# (--no-gemm-epilogue where there is no epilogue to leave out) is not run
# again: its log is copied.
declare -A TRAINED
train() {
  local key
  key=$({ cat "$1".c*; echo "$TRAIN"; } | cksum)
  rm -f "$2"
  if [ -n "${TRAINED[$key]:-}" ]; then
    cp "${TRAINED[$key]}" "$2"
    echo "$1: the program of ${TRAINED[$key]%.json}, not run again"
    return 0
  fi
  # shellcheck disable=SC2086
  "$1" $TRAIN --steps $STEPS --log-json "$2" || { echo "FAIL: the run of $1"; return 1; }
  TRAINED[$key]=$2
}



# Activation recomputation: recomputed nodes are ordinary nodes, the same
# ops on the same inputs (recompute.c), so with the same kernels each mode
# trains the losses and gradient norms of the program without it to the
# bit: checked with --no-gemm-epilogue. With the epilogues a mode may run
# a gelu gradient outside its GEMM's epilogue where the program without
# it fuses it (recomputed nodes sit between the linear_dx and the
# gelu_grad, holding the buffer the epilogue would write): cuBLASLt's
# dgelu rounds differently, so those programs are compared as the
# epilogues check does (EPI_TOL relative; bf16 2e-2), and both fp32 forms with
# the CPU target within 1e-4 (bf16: 2e-2 relative of its fp32 run). The
# tiny GPT-2 and LLaMA have the fused attention, which keeps no scores:
# selective leaves GPT-2's program as it is (checked, not run);
# unfused.shard is the model that selective changes.
RC_MODES_gpt2="selective full"
RC_MODES_llama="full"
RC_MODES_unfused="selective full"
check_recompute() { # PRECISION
  local prec=$1 m mode opts cpu none plain rc rcp tol=1e-4 epi=$EPI_TOL rel="" models="gpt2 llama unfused"
  local modes
  [ "$prec" = bf16 ] && tol=2e-2 epi=2e-2 rel=rel
  for m in $models; do
    local j=$MW/rc-$m-$prec
    cpu=$(prog $m cpu) && none=$(prog $m cuda "$prec") &&
      plain=$(prog $m cuda "$prec" noepi --no-gemm-epilogue) || return 1
    train "$cpu" "$MW/rc-$m-cpu.json" && train "$none" "$j.json" && train "$plain" "$j-noepi.json" ||
      return 1
    cmp_losses "$m $prec, GPU against CPU" "$MW/rc-$m-cpu.json" "$j.json" $tol $rel || return 1
    eval "modes=\$RC_MODES_$m"
    for mode in $modes; do
      opts="--recompute $mode"
      # shellcheck disable=SC2086
      rc=$(prog $m cuda "$prec" rc-$mode $opts) || return 1
      if cmp -s "$rc.cu" "$none.cu"; then
        [ $mode = selective ] && [ $m != unfused ] ||
          { echo "FAIL: $m $opts: the program is the one without recomputation"; return 1; }
        echo "$m $prec $opts: the program is the one without (nothing to recompute)"
        continue
      fi
      # shellcheck disable=SC2086
      rcp=$(prog $m cuda "$prec" rc-$mode-noepi $opts --no-gemm-epilogue) || return 1
      train "$rc" "$j-$mode.json" && train "$rcp" "$j-$mode-noepi.json" || return 1
      same_bits "$m $prec $opts --no-gemm-epilogue against none" "$j-noepi.json" \
        "$j-$mode-noepi.json" &&
        cmp_losses "$m $prec $opts against none" "$j.json" "$j-$mode.json" $epi rel &&
        cmp_losses "$m $prec $opts, GPU against CPU" "$MW/rc-$m-cpu.json" "$j-$mode.json" $tol $rel ||
        return 1
    done
  done
  echo "all checks passed: --recompute selective and full ($prec) train the losses without it"
}

# Dropout (the tiny GPT-2 at rate 0.1: the embedding's and the two
# projections'): the counter-based masks are the CPU's bit for bit, so the
# losses are the CPU target's within 1e-4 (bf16: 2e-2 relative); with
# --recompute full the backward draws the recomputed dropouts' masks
# again, which must be the forward's (the losses of the program without
# recomputation, to the bit: with dropout on neither program fuses a gelu
# gradient into its GEMM, so the two run the same kernels).
# The rate must matter: the CPU's losses move by more than 1e-3 from those
# at rate 0.
check_dropout() {
  local cpu gpu full bf zero moved D="-D dropout_rate=0.1"
  # shellcheck disable=SC2086
  cpu=$(prog gpt2 cpu fp32 drop $D) && gpu=$(prog gpt2 cuda fp32 drop $D) &&
    full=$(prog gpt2 cuda fp32 drop-full $D --recompute full) &&
    bf=$(prog gpt2 cuda bf16 drop $D) && zero=$(prog gpt2 cpu) || return 1
  train "$zero" "$MW/drop-0.json" && train "$cpu" "$MW/drop-cpu.json" &&
    train "$gpu" "$MW/drop-cuda.json" && train "$full" "$MW/drop-full.json" &&
    train "$bf" "$MW/drop-bf16.json" || return 1
  moved=$(cmp_losses "gpt2 dropout 0.1 against 0, CPU" "$MW/drop-0.json" "$MW/drop-cpu.json" 1e-3)
  local rc=$?
  moved=${moved%%$'\n'*}
  case $rc in
    0) echo "FAIL: the rate does not matter: $moved"; return 1 ;;
    *) case $moved in FAIL*) echo "$moved"; return 1 ;; esac ;;
  esac
  echo "${moved% (limit*}"
  cmp_losses "gpt2 dropout 0.1, GPU against CPU" "$MW/drop-cpu.json" "$MW/drop-cuda.json" 1e-4 &&
    same_bits "gpt2 dropout 0.1 --recompute full against none" "$MW/drop-cuda.json" \
      "$MW/drop-full.json" &&
    cmp_losses "gpt2 dropout 0.1 bf16 GPU against fp32 CPU" "$MW/drop-cpu.json" "$MW/drop-bf16.json" \
      2e-2 rel || return 1
  echo "all checks passed: dropout 0.1 on the GPU has the CPU target's masks, recomputed too"
}

# Gradient accumulation on one rank: training with --global-batch 4 and
# microbatches of 2 sequences, so each step runs two forwards and
# backwards whose gradients add in their slots before one optimizer step;
# the CUDA target against the CPU target, every step's loss within 1e-4.
check_accum() {
  local m cpu gpu TRAIN="$TRAIN --global-batch 4"
  for m in gpt2 llama; do
    cpu=$(prog $m cpu) && gpu=$(prog $m cuda) || return 1
    train "$cpu" "$MW/gb4-$m-cpu.json" && train "$gpu" "$MW/gb4-$m-cuda.json" || return 1
    cmp_losses "$m --global-batch 4 (2 microbatches), GPU against CPU" "$MW/gb4-$m-cpu.json" \
      "$MW/gb4-$m-cuda.json" 1e-4 || return 1
  done
  # No host wait inside a step: the loss stays on the device until the
  # step's end, the dloss seed is a fill. On the emulator, which counts
  # the host waits, 4 microbatches a step wait as often as 1 does.
  if [ -n "${GPU_EMU:-}" ]; then
    local w1 w3 w4 gb
    for gb in 2 8; do
      # shellcheck disable=SC2086
      SHARD_EMU_WAIT_STATS=1 "$gpu" ${TRAIN% --global-batch 4} --global-batch $gb --steps 2 \
        >"$MW/waits-$gb.log" 2>&1 ||
        { cat "$MW/waits-$gb.log"; echo "FAIL: the run with --global-batch $gb"; return 1; }
    done
    w1=$(sed -n 's/^cuda emulation: \([0-9]*\) host waits$/\1/p' "$MW/waits-2.log")
    w4=$(sed -n 's/^cuda emulation: \([0-9]*\) host waits$/\1/p' "$MW/waits-8.log")
    echo "host waits over 2 steps: $w1 with 1 microbatch a step, $w4 with 4"
    [ -n "$w1" ] && [ "$w1" = "$w4" ] ||
      { echo "FAIL: the host waits grow with the microbatches (a wait inside the step)"; return 1; }
    # A step's own waits, a third step's against two: the loss, the
    # gradient norm and the finiteness check of the update (its three sums
    # read together), each read once, and, outside rt_update, the staged
    # window's copy (batch.c) and the step's end for its time (main.c).
    # shellcheck disable=SC2086
    SHARD_EMU_WAIT_STATS=1 "$gpu" ${TRAIN% --global-batch 4} --global-batch 2 --steps 3 \
      >"$MW/waits-3.log" 2>&1 || { cat "$MW/waits-3.log"; echo "FAIL: the run of 3 steps"; return 1; }
    w3=$(sed -n 's/^cuda emulation: \([0-9]*\) host waits$/\1/p' "$MW/waits-3.log")
    echo "host waits a step: $((w3 - w1)) (at most 5)"
    [ "$((w3 - w1))" -le 5 ] || { echo "FAIL: a step waits on the host more than 5 times"; return 1; }
  fi
  echo "all checks passed: gradient accumulation over 2 microbatches has the CPU target's losses"
}

# ------------------------------------------- multi-rank checks (issue 11)
# The layouts the NCCL checks run, as compile options; each gets its
# global batch so that every layout trains the same sequences per step.
MULTI_t2="--tp 2 --global-batch 4"
MULTI_p2="--pp 2 --global-batch 4"
MULTI_d2="--dp 2 --global-batch 4"
MULTI_d2ep2="--dp 2 --ep 2 --global-batch 4"
MULTI_d4ep2="--dp 4 --ep 2 --microbatch 1 --global-batch 4"
MULTI_d4ep2z="--dp 4 --ep 2 --microbatch 1 --global-batch 4 --zero 1"
MULTI_t2d2ep2="--tp 2 --dp 2 --ep 2 --global-batch 4"
MULTI_p2d2ep2="--pp 2 --dp 2 --ep 2 --global-batch 4"
MULTI_one="--global-batch 4"
# The one-rank reference of a layout whose microbatch is not the model's
# (the router's load-balancing loss is a microbatch's statistic).
MULTI_one_d4ep2="--microbatch 1 --global-batch 4"
MULTI_one_d4ep2z=$MULTI_one_d4ep2
# The runs' options: 4 sequences a step at run time too (a program's own
# default is batch x d sequences, 2 for one rank and for t = 2, whatever
# the compile's --global-batch said), in file order (shuffled orders are
# not the same sequences per step across layouts), as the CPU target's
# equivalence grid runs.
MTRAIN="$TRAIN --global-batch 4 --no-shuffle"
# shellcheck source=tests/features/gpu/ranks.sh
. "$ROOT/tests/features/gpu/ranks.sh"

# multi_prog LAYOUT TARGET [PRECISION [MODEL]]: compiles and builds the tiny
# MODEL (default GPT-2) for the layout (fp32 unless PRECISION says bf16);
# prints its folder.
multi_prog() {
  local prec=${3:-fp32} model=${4:-gpt2} dir=$MW/nccl-$1-$2 opts defs
  [ "$prec" = fp32 ] || dir=$dir-$prec
  [ "$model" = gpt2 ] || dir=$dir-$model
  eval "opts=\$MULTI_$1 defs=\$TINY_$model"
  # shellcheck disable=SC2086
  "$SHARDC_BIN" compile "$ROOT/models/$model.shard" $defs $opts --target "$2" \
    --precision "$prec" --cuda-arch "sm_$ARCH" -o "$dir" >"$dir.compile.log" 2>&1 &&
    build_prog "$dir" "$2" >>"$dir.compile.log" 2>&1 ||
    { echo "FAIL: $model $1 for --target $2 does not compile and build:" >&2
      cat "$dir.compile.log" >&2; return 1; }
  echo "$dir"
}


# check_nccl LAYOUT [bf16 [MODEL]]: MODEL (default gpt2) in fp32 against the CPU target's same layout
# within 1e-4 (and that against one rank); bf16 within 2e-2 relative. The
# d2 layouts run with --deterministic (NCCL pinned to Ring and Simple),
# the others with NCCL's own choice: on the emulator the NCCL stand-in
# says what it was told, and both are checked.
check_nccl() { # LAYOUT [PRECISION [MODEL]]
  local cpu gpu one n share how prec=${2:-fp32} model=${3:-gpt2} stem=nccl-$1 tag=cuda det="" algo="NCCL_ALGO=(unset) NCCL_PROTO=(unset)"
  if [ "$1" = d2 ]; then det=--deterministic algo="NCCL_ALGO=Ring NCCL_PROTO=Simple"; fi
  [ "$prec" = fp32 ] || tag=cuda-$prec
  [ "$model" = gpt2 ] || stem=$stem-$model
  command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; return 77; }
  local ref=one
  eval "[ -z \"\${MULTI_one_$1:-}\" ]" || ref=one_$1
  cpu=$(multi_prog "$1" cpu fp32 "$model") && gpu=$(multi_prog "$1" cuda "$prec" "$model") &&
    one=$(multi_prog "$ref" cpu fp32 "$model") ||
    return 1
  echo "built $model $1 for both targets ($prec on the GPU)"
  [ -n "${GPU_EMU:-}" ] || [ "$NGPUS" -gt 0 ] ||
    { echo "SKIP: no GPU (nvidia-smi sees none); the programs built"; return 77; }
  n=$(ranks_of "$gpu")
  share=$(share_of "$n")
  how=$([ "$share" = 1 ] && echo "$n ranks sharing $NGPUS GPU(s) over sockets" || echo "$n ranks, one GPU each")
  [ -n "${GPU_EMU:-}" ] && how="$n ranks on the CPU emulator, NCCL over MPI"
  rm -f "$MW/$stem"-one.json "$MW/$stem"-cpu.json "$MW/$stem-$tag.json"
  # shellcheck disable=SC2086
  "$one/rank0" $MTRAIN --steps $STEPS --log-json "$MW/$stem-one.json" || { echo "FAIL: one rank"; return 1; }
  # shellcheck disable=SC2086
  mpirun_job "$cpu" 0 - $MTRAIN --steps $STEPS --log-json "$MW/$stem-cpu.json" ||
    { echo "FAIL: the CPU target's $1 run"; return 1; }
  # shellcheck disable=SC2086
  SHARD_NCCL_EMU_STATS=1 mpirun_job "$gpu" "$share" - $MTRAIN --steps $STEPS $det \
    --log-json "$MW/$stem-$tag.json" \
    >"$MW/$stem-$tag.log" 2>&1 || {
    tail -n 20 "$MW/$stem-$tag.log"
    if grep -q -i 'duplicate GPU' "$MW/$stem-$tag.log"; then
      echo "SKIP: $1 could not run: NCCL refused $how"; return 77
    fi
    echo "FAIL: the CUDA target's $1 run ($how)"; return 1; }
  if [ -n "${GPU_EMU:-}" ]; then
    # Every rank's NCCL stand-in says how many operations it ran: none
    # would mean the layout never reached comm_nccl.c's NCCL path.
    local used
    used=$(grep -c 'nccl emulation: world rank [0-9]*: [1-9][0-9]* operations' "$MW/$stem-$tag.log")
    [ "$used" = "$n" ] || { echo "FAIL: $1: $used of $n ranks ran operations on (emulated) NCCL"; return 1; }
    echo "$1: every rank ran operations on (emulated) NCCL"
    # What NCCL was told to choose: nothing by default, Ring and Simple
    # under --deterministic (unless this environment sets them itself).
    if [ -z "${NCCL_ALGO:-}${NCCL_PROTO:-}" ]; then
      used=$(grep -c "nccl emulation: world rank .*$algo\$" "$MW/$stem-$tag.log")
      [ "$used" = "$n" ] ||
        { echo "FAIL: $1${det:+ $det}: $used of $n ranks saw $algo"; grep 'nccl emulation' "$MW/$stem-$tag.log"; return 1; }
      echo "$1${det:+ $det}: every rank's NCCL saw $algo"
    fi
  fi
  cmp_losses "$1 CPU target against one rank" "$MW/$stem-one.json" "$MW/$stem-cpu.json" 1e-4 || return 1
  if [ "$prec" = bf16 ]; then
    cmp_losses "$1 bf16 on NCCL against the CPU target's fp32" "$MW/$stem-cpu.json" \
      "$MW/$stem-$tag.json" 2e-2 rel || return 1
    echo "all checks passed: $model $1 bf16 on NCCL ($how) within 2e-2 of the CPU target's fp32 losses"
    return 0
  fi
  cmp_losses "$1 on NCCL against the CPU target" "$MW/$stem-cpu.json" "$MW/$stem-cuda.json" 1e-4 ||
    return 1
  echo "all checks passed: $model $1 on NCCL ($how) has the CPU target's losses"
}

check_nccl_kill() {
  local gpu n share t0 dt rc limit=20
  command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; return 77; }
  gpu=$(multi_prog t2 cuda) || return 1
  [ -n "${GPU_EMU:-}" ] || [ "$NGPUS" -gt 0 ] ||
    { echo "SKIP: no GPU (nvidia-smi sees none); the programs built"; return 77; }
  kill_script "$MW/kill-rank.sh" "$MW/nccl-kill.json"
  n=$(ranks_of "$gpu")
  share=$(share_of "$n")
  rm -f "$MW/nccl-kill.json"
  t0=$SECONDS
  # shellcheck disable=SC2086
  timeout $((limit + 60)) bash -c "$(declare -f mpirun_job); mpirun_job $gpu $share $MW/kill-rank.sh \
    $MTRAIN --steps 100000 --log-every 1 --timeout $limit --log-json $MW/nccl-kill.json" \
    >"$MW/nccl-kill.log" 2>&1
  rc=$?
  dt=$((SECONDS - t0))
  tail -n 8 "$MW/nccl-kill.log"
  [ "$rc" = 124 ] && { echo "FAIL: the job was still running $((limit + 60)) s after its start"; return 1; }
  [ "$rc" != 0 ] || { echo "FAIL: the job exited 0 with a rank killed"; return 1; }
  [ "$dt" -le $((limit + 30 + 15)) ] ||
    { echo "FAIL: the job took $dt s to end (--timeout $limit)"; return 1; }
  echo "all checks passed: rank 1 killed, the job ended with status $rc after $dt s (--timeout $limit)"
}

check_sanitizer() {
  command -v compute-sanitizer >/dev/null || { echo "SKIP: compute-sanitizer not on PATH"; return 77; }
  local gpu tool
  gpu=$(prog gpt2 cuda) || return 1
  for tool in memcheck racecheck; do
    # shellcheck disable=SC2086
    compute-sanitizer --tool $tool --error-exitcode 1 "$gpu" $TRAIN --steps 2 ||
      { echo "FAIL: $tool"; return 1; }
  done
  echo "all checks passed: memcheck and racecheck on 2 steps of the tiny GPT-2"
}

if [ -n "$MODEL_CHECK" ]; then
  [ -x "$SHARDC_BIN" ] && [ -f "$DATA" ] ||
    { echo "SKIP: no $SHARDC_BIN or $DATA (the model checks need the CMake build)"; exit 77; }
  mkdir -p "$MW"
  # The one-GPU checks need a GPU to mean anything; the nccl ones build
  # their programs first and say so themselves.
  if [ -n "${GPU_EMU:-}" ]; then
    [ -f "$BUILD/emu/program.mk" ] || { echo "SKIP: GPU_EMU=1 but no $BUILD/emu/program.mk"; exit 77; }
    "$SHARDC_BIN" compile "$ROOT/models/gpt2.shard" $TINY_gpt2 --target cuda -o "$MW/probe" \
      >"$MW/probe.log" 2>&1 ||
      { echo "SKIP: this shardc cannot compile for --target cuda: $(grep -m1 error "$MW/probe.log")"
        exit 77; }
    echo "GPU_EMU=1: the CUDA programs run on the CPU emulator of tests/features/emu, not on a GPU"
  fi
  case $MODEL_CHECK in
    nccl-*) ;;
    *) [ -n "${GPU_EMU:-}" ] || [ "$NGPUS" -gt 0 ] || { echo "SKIP: no GPU (nvidia-smi sees none)"; exit 77; } ;;
  esac
  case $MODEL_CHECK in
    fp32-gpt2) check_fp32 gpt2 ;;
    fp32-llama) check_fp32 llama ;;
    bf16-gpt2) check_bf16 gpt2 ;;
    bf16-llama) check_bf16 llama ;;
    fp32-mixtral) check_fp32 mixtral ;;
    fp32-mixtral-cap) check_fp32 mixtral cap -D capacity=0.5 ;;
    fp32-deepseek_moe) check_fp32 deepseek_moe ;;
    bf16-mixtral) check_bf16 mixtral ;;
    bf16-deepseek_moe) check_bf16 deepseek_moe ;;
    epilogues) check_epilogues ;;
    vector) check_vector ;;
    graphs) check_graphs ;;
    grads) check_grads ;;
    ckpt) check_ckpt ;;
    recompute) check_recompute fp32 ;;
    recompute-bf16) check_recompute bf16 ;;
    dropout) check_dropout ;;
    accum) check_accum ;;
    sanitizer) check_sanitizer ;;
    nccl-t2) check_nccl t2 ;;
    nccl-p2) check_nccl p2 ;;
    nccl-d2) check_nccl d2 ;;
    nccl-t2-bf16) check_nccl t2 bf16 ;;
    nccl-p2-bf16) check_nccl p2 bf16 ;;
    nccl-d2-bf16) check_nccl d2 bf16 ;;
    nccl-d2-mixtral) check_nccl d2 fp32 mixtral ;;
    nccl-p2-mixtral) check_nccl p2 fp32 mixtral ;;
    nccl-d2ep2-mixtral) check_nccl d2ep2 fp32 mixtral ;;
    nccl-d2ep2-bf16-mixtral) check_nccl d2ep2 bf16 mixtral ;;
    nccl-d4ep2-mixtral) check_nccl d4ep2 fp32 mixtral ;;
    nccl-d4ep2z-mixtral) check_nccl d4ep2z fp32 mixtral ;;
    nccl-t2d2ep2-mixtral) check_nccl t2d2ep2 fp32 mixtral ;;
    nccl-p2d2ep2-mixtral) check_nccl p2d2ep2 fp32 mixtral ;;
    nccl-t2-mixtral) check_nccl t2 fp32 mixtral ;;
    nccl-t2-bf16-mixtral) check_nccl t2 bf16 mixtral ;;
    nccl-kill) check_nccl_kill ;;
    *) echo "unknown model check $MODEL_CHECK"; exit 2 ;;
  esac
  exit $?
fi

echo "== machine"
nvidia-smi -L 2>&1 | head -n 8
nvcc --version 2>&1 | tail -n 2

# ------------------------------------------------------------------ build
BUILD_KIND=none
TEST_BIN=
DEVICE_BIN=
t0=$SECONDS
if [ "${GPU_BUILD:-cmake}" = cmake ] &&
   cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
     >"$LOGS/configure.log" 2>&1 &&
   cmake --build "$BUILD" -j"$JOBS" --target test_kernels_cuda test_device_cuda \
    >"$LOGS/build.log" 2>&1; then
  BUILD_KIND=cmake
  TEST_BIN=$BUILD/tests/test_kernels_cuda
  DEVICE_BIN=$BUILD/tests/test_device_cuda
  # The model checks' compiler and corpus shards (they compile and build
  # their rank programs themselves), and tptool where MPI was found.
  cmake --build "$BUILD" -j"$JOBS" --target shardc demo_data >>"$LOGS/build.log" 2>&1 ||
    echo "the model checks' shardc did not build (see $LOGS/build.log)"
  cmake --build "$BUILD" -j"$JOBS" --target tptool >>"$LOGS/build.log" 2>&1 ||
    echo "no tptool (no MPI): the gradient check is skipped"
else
  # The kernels and their test only, straight through the compilers.
  echo "CMake build failed (see $LOGS/configure.log, $LOGS/build.log): building the kernel tests directly"
  D=$BUILD/direct
  mkdir -p "$D/obj"
  BLAS_INC=() BLAS_SRC=() BLAS_LIB=()
  if echo 'int main(void){return 0;}' | cc -x c - -lopenblas -o "$D/blas-probe" 2>/dev/null &&
     echo '#include <cblas.h>' | cc -E -x c - >/dev/null 2>&1; then
    BLAS_LIB=(-lopenblas) BLAS_KIND=openblas
  else
    BLAS_INC=(-I"$ROOT/tests/features/gpu/noblas") BLAS_SRC=("$ROOT/tests/features/gpu/noblas/cblas.c") BLAS_KIND=noblas
  fi
  (
    set -e
    for f in kernels/cuda/*.cu; do
      nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_"$ARCH" --Werror=all-warnings -Ikernels/cuda \
        -c "$f" -o "$D/obj/$(basename "$f").o" &
    done
    wait
    ar rcs "$D/libshard_kernels_cuda.a" "$D"/obj/*.cu.o
    CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
    cc -O2 -std=gnu11 -fopenmp -fno-trapping-math "${BLAS_INC[@]}" -Ikernels/cpu -Ikernels/cuda \
      -I"$CUDA_HOME/include" tests/features/gpu/test_kernels_cuda.c kernels/cpu/*.c "${BLAS_SRC[@]}" \
      "$D/libshard_kernels_cuda.a" -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib" -lcublasLt -lcudart \
      -Wl,-rpath,"$CUDA_HOME/lib64" "${BLAS_LIB[@]}" -lstdc++ -lm -o "$D/test_kernels_cuda"
  ) >"$LOGS/build-direct.log" 2>&1 && BUILD_KIND="direct ($BLAS_KIND)" && TEST_BIN=$D/test_kernels_cuda
fi
if [ -n "$TEST_BIN" ]; then
  row build PASS $((SECONDS - t0)) "$BUILD_KIND, sm_$ARCH"
else
  row build FAIL $((SECONDS - t0)) "see $LOGS/"
fi

# ----------------------------------------------------------- kernel tests
if [ -n "$TEST_BIN" ]; then
  run_check kernels 180 "$LOGS/kernels.log" "$TEST_BIN"
  if grep -q '^SKIP' "$LOGS/kernels.log"; then
    row "kernels memcheck" SKIP 0 "as kernels"
    row "kernels racecheck" SKIP 0 "as kernels"
  elif command -v compute-sanitizer >/dev/null; then
    run_check "kernels memcheck" 150 "$LOGS/memcheck.log" \
      compute-sanitizer --tool memcheck --error-exitcode 1 "$TEST_BIN" --small
    run_check "kernels racecheck" 150 "$LOGS/racecheck.log" \
      compute-sanitizer --tool racecheck --error-exitcode 1 "$TEST_BIN" --small
  else
    row "kernels memcheck" SKIP 0 "compute-sanitizer not on PATH"
    row "kernels racecheck" SKIP 0 "compute-sanitizer not on PATH"
  fi
fi

if [ -n "$DEVICE_BIN" ]; then
  run_check device 60 "$LOGS/device.log" "$DEVICE_BIN"
elif [ -n "$TEST_BIN" ]; then
  row device SKIP 0 "not built by the direct build"
fi

# ------------------------------------------------- model checks (issue 10)
# Each check runs as `run.sh --model-check NAME BUILD` (above) under a
# time limit.
# Each gets at most what is left of the run's ten minutes (which the
# kernel checks' limits alone nearly fill, though they take far less); on
# one H200 the five together should take a minute or two, most of it the
# sanitizer.
model_check() { # NAME LIMIT_S CHECK
  local left=$((570 - SECONDS)) limit=$2
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    row "$1" SKIP 0 "no time left of the ten minutes"
    return
  fi
  run_check "$1" "$limit" "$LOGS/model-$3.log" "$ROOT/tests/features/gpu/run.sh" --model-check "$3" "$BUILD"
}
if [ "$BUILD_KIND" = cmake ]; then
  model_check "gpt2 fp32" 90 fp32-gpt2
  model_check "llama fp32" 90 fp32-llama
  model_check "gpt2 bf16" 90 bf16-gpt2
  model_check "llama bf16" 90 bf16-llama
  model_check "mixtral fp32" 60 fp32-mixtral
  model_check "mixtral capacity" 60 fp32-mixtral-cap
  model_check "mixtral bf16" 60 bf16-mixtral
  model_check "deepseek_moe fp32" 60 fp32-deepseek_moe
  model_check "deepseek_moe bf16" 60 bf16-deepseek_moe
  model_check "vector loops" 120 vector
  model_check "gpt2 epilogues" 60 epilogues
  model_check "cuda graphs" 120 graphs
  model_check "gradients 1 step" 60 grads
  model_check "checkpoint crossing" 60 ckpt
  model_check "model sanitizer" 180 sanitizer
  # 18, 18, 5 and 4 builds of a tiny rank program, most of them run 10 steps.
  model_check "recompute" 150 recompute
  model_check "recompute bf16" 90 recompute-bf16
  model_check "dropout" 60 dropout
  model_check "accumulation" 60 accum
  cmake --build "$BUILD" -j"$JOBS" --target shard_comm_nccl >>"$LOGS/build.log" 2>&1 || true
  if [ -f "$BUILD/runtime/libshard_comm_nccl.a" ]; then
    model_check "nccl t2" 90 nccl-t2
    model_check "nccl p2" 90 nccl-p2
    model_check "nccl d2" 90 nccl-d2
    model_check "nccl t2 bf16" 90 nccl-t2-bf16
    model_check "nccl p2 bf16" 90 nccl-p2-bf16
    model_check "nccl d2 bf16" 90 nccl-d2-bf16
    model_check "nccl t2 mixtral" 90 nccl-t2-mixtral
    model_check "nccl t2 bf16 mixtral" 90 nccl-t2-bf16-mixtral
    model_check "nccl d2 mixtral" 90 nccl-d2-mixtral
    model_check "nccl p2 mixtral" 90 nccl-p2-mixtral
    model_check "nccl d2 ep2 mixtral" 90 nccl-d2ep2-mixtral
    model_check "nccl d2 ep2 bf16 mixtral" 90 nccl-d2ep2-bf16-mixtral
    model_check "nccl d4 ep2 mixtral" 90 nccl-d4ep2-mixtral
    model_check "nccl d4 ep2 zero1 mixtral" 90 nccl-d4ep2z-mixtral
    model_check "nccl t2 d2 ep2 mixtral" 90 nccl-t2d2ep2-mixtral
    model_check "nccl p2 d2 ep2 mixtral" 90 nccl-p2d2ep2-mixtral
    model_check "nccl rank killed" 120 nccl-kill
  else
    for r in "nccl t2" "nccl p2" "nccl d2" "nccl t2 bf16" "nccl p2 bf16" "nccl d2 bf16" \
             "nccl t2 mixtral" "nccl t2 bf16 mixtral" "nccl d2 mixtral" "nccl p2 mixtral" \
             "nccl d2 ep2 mixtral" "nccl d2 ep2 bf16 mixtral" "nccl d4 ep2 mixtral" \
             "nccl d4 ep2 zero1 mixtral" "nccl t2 d2 ep2 mixtral" \
             "nccl p2 d2 ep2 mixtral" "nccl rank killed"; do
      row "$r" SKIP 0 "no shard_comm_nccl (this build found no NCCL or MPI)"
    done
  fi
else
  for r in "gpt2 fp32" "llama fp32" "gpt2 bf16" "llama bf16" "gpt2 epilogues" "vector loops" "cuda graphs" "gradients 1 step" \
           "checkpoint crossing" "model sanitizer" "recompute" "recompute bf16" "dropout" \
           "accumulation" \
           "nccl t2" "nccl p2" "nccl d2" "nccl t2 bf16" "nccl p2 bf16" "nccl d2 bf16" \
           "nccl rank killed"; do
    row "$r" SKIP 0 "needs the CMake build (shardc, the corpus shards)"
  done
fi

# ------------------------------------------------------------------ table
echo
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "== GPU checks on ${GPU_NAME:-no GPU seen by nvidia-smi}, $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-22s %-5s %6s  %s\n' check result sec note
for r in "${ROWS[@]}"; do echo "$r"; done
if [ -n "${OUT:-}" ]; then cp -r "$LOGS" "$OUT/" 2>/dev/null; fi
exit $FAILED
