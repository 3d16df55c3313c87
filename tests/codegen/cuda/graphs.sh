#!/bin/bash
# CUDA graphs without a GPU: which chunk functions the CUDA target marks
# capturable (the table cu_graph_why_not of each program, abi/model.h
# RtGraphs), for the layouts where the answer differs, and how a
# capturable function's dropout gets its seed (through device memory,
# cu_step(), never by value). Compiles only; run.sh builds the one-rank
# programs with nvcc. Layouts of more than one rank need the NCCL backend
# (NCCL=1); without it they are skipped, saying so.
#
#   graphs.sh WORKDIR NCCL
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
shardc=$SHARDC models=$ROOT/models
# WORKDIR relative to where the test started.
work=$(cd "$OLDPWD" && realpath -m "$1") nccl=$2
tiny="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D layers=2 -D batch=2"
rm -rf "$work"
mkdir -p "$work"
fails=0 checked=0

# why NAME FILE FUNCTION: the table's entry for FUNCTION in FILE ("NULL"
# where it may be captured, else the reason in quotes).
why() { sed -n "s|^  \(.*\), /\* $3 \*/\$|\1|p" "$2"; }

# expect NAME FILE FUNCTION capturable|plain [PATTERN]: one check.
expect() {
  got=$(why "$1" "$2" "$3")
  checked=$((checked + 1))
  case $4 in
    capturable) [ "$got" = NULL ] && ok=1 || ok=0 ;;
    plain) case $got in NULL | "") ok=0 ;; *) ok=1; [ -z "${5:-}" ] || echo "$got" | grep -q "$5" || ok=0 ;; esac ;;
  esac
  if [ $ok = 1 ]; then
    echo "ok: $1: $3 ${4}${got:+ ($got)}"
  else
    echo "FAIL: $1: $3 should be $4${5:+ ($5)}, the table says: ${got:-nothing}"
    fails=$((fails + 1))
  fi
}

# text_safe NAME FILE: the code of every function FILE's table marks
# capturable holds none of the calls a graph cannot replay: a call that
# talks to the host, waits or allocates, or a per-step value passed by
# value. The compiler decides capturability from the graph; this checks
# that decision against the code it wrote.
unsafe='rt_comm_|BUCKET_READY\(|POLL\(\)|ctx->seed|ctx->training|tp_seed\(|Synchronize|cudaMalloc|cudaFree|rt_dev_alloc|DeviceToHost|HostToDevice'
body() { awk -v head="static void $2(RtCtx *ctx) {" '$0 == head { on = 1; next } on && /^}$/ { exit } on' "$1"; }
text_safe() {
  for fn in $(sed -n 's|^  NULL, /\* \(.*\) \*/$|\1|p' "$2"); do
    checked=$((checked + 1))
    lines=$(body "$2" "$fn" | wc -l)
    hits=$(body "$2" "$fn" | grep -E -c "$unsafe" || true)
    if [ "$lines" -gt 0 ] && [ "$hits" = 0 ]; then
      echo "ok: $1: $fn is capturable, and none of its $lines lines calls what a graph cannot replay"
    else
      echo "FAIL: $1: $fn is marked capturable; $lines lines, $hits that a graph cannot replay:"
      body "$2" "$fn" | grep -E "$unsafe" | head -3 || true
      fails=$((fails + 1))
    fi
  done
}

# compile NAME OPTIONS...: compiles the tiny GPT-2; 1 when refused for
# want of NCCL (then the layout is skipped).
compile() {
  name=$1
  shift
  # shellcheck disable=SC2086
  if ! "$shardc" compile "$models/gpt2.shard" $tiny --target cuda -o "$work/$name" "$@" \
    >"$work/$name.log" 2>&1; then
    if [ "$nccl" = 0 ] && grep -q 'need the NCCL backend' "$work/$name.log"; then
      echo "skip: $name: this shardc has no NCCL backend"
      return 1
    fi
    echo "FAIL: $name does not compile:"
    cat "$work/$name.log"
    exit 1
  fi
}

# dropout_form NAME FILE step|plain: every dropout call of FILE is of the
# graphs' step form (seed from cu_step()) or the plain one (seed by value).
dropout_form() {
  step=$(grep -c 'k_cuda_dropout_step_' "$2" || true)
  plain=$(grep -c 'k_cuda_dropout_\(fwd\|bwd\)\(_bf16\)\?(' "$2" || true)
  byval=$(grep -c 'ctx->seed' "$2" || true)
  checked=$((checked + 1))
  if [ "$3" = step ] && [ "$step" -gt 0 ] && [ "$plain" = 0 ] && [ "$byval" = 1 ]; then
    # the one ctx->seed is cu_step_values, which writes it into device memory
    echo "ok: $1: $step dropout calls of the step form, none with the seed by value"
  elif [ "$3" = plain ] && [ "$plain" -gt 0 ] && [ "$step" = 0 ]; then
    echo "ok: $1: $plain dropout calls with the seed by value (no function is captured)"
  else
    echo "FAIL: $1: dropout should be of the $3 form: $step step, $plain plain calls, ctx->seed $byval times"
    fails=$((fails + 1))
  fi
}

compile one
expect one "$work/one/rank0.cu" forward capturable
expect one "$work/one/rank0.cu" backward capturable
expect one "$work/one/rank0.cu" wgrad plain "no W"

compile drop -D dropout_rate=0.1
expect drop "$work/drop/rank0.cu" forward capturable
expect drop "$work/drop/rank0.cu" backward capturable
dropout_form drop "$work/drop/rank0.cu" step

compile drop_bf16 -D dropout_rate=0.1 --precision bf16
expect drop_bf16 "$work/drop_bf16/rank0.cu" forward capturable
dropout_form drop_bf16 "$work/drop_bf16/rank0.cu" step

if compile tp2 --tp 2 -D dropout_rate=0.1; then
  expect tp2 "$work/tp2/rank0.cu" forward plain "over rt_comm"
  expect tp2 "$work/tp2/rank0.cu" backward plain "over rt_comm"
  dropout_form tp2 "$work/tp2/rank0.cu" plain
fi
if compile dp2 --dp 2 --global-batch 4; then
  expect dp2 "$work/dp2/rank0.cu" forward capturable
  expect dp2 "$work/dp2/rank0.cu" backward plain "BUCKET_READY"
fi
if compile pp2 --pp 2 --global-batch 8; then
  for s in stage0 stage1; do
    expect "pp2 $s" "$work/pp2/$s.cu" forward capturable
    expect "pp2 $s" "$work/pp2/$s.cu" backward capturable
  done
fi
if compile vpp2 --pp 2 --vpp 2 --global-batch 8 --pp-layout 0,1,1,0; then
  expect vpp2 "$work/vpp2/stage1.cu" forward_c1 capturable
  expect vpp2 "$work/vpp2/stage1.cu" backward_c0 capturable
fi
if compile zb --pp 2 --global-batch 8 --schedule zb-h1; then
  expect zb "$work/zb/stage0.cu" forward capturable
  expect zb "$work/zb/stage0.cu" backward plain "POLL"
  expect zb "$work/zb/stage0.cu" wgrad plain "POLL"
fi

for f in "$work"/*/*.cu; do
  d=$(basename "$(dirname "$f")")
  text_safe "$d $(basename "$f" .cu)" "$f"
done

[ "$fails" = 0 ] || { echo "FAIL: $fails of $checked checks"; exit 1; }
echo "all $checked checks passed"
