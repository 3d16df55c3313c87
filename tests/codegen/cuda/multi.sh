#!/bin/bash
# The CUDA target's programs of more than one rank, in CI (nvcc and NCCL,
# no GPU): for a representative part of the equivalence grid
# (tests/features/pp_run/grid.sh, its tiny quick shape) each layout compiles with
# --target cuda, in fp32 and in bf16, builds with nvcc against the NCCL
# backend warning-free, and its action tables, parameter and bucket
# tables, the collectives it calls (in order, buffers aside; in bf16 with
# the bf16 type where they move activations, fp32 for weight gradients
# and the loss's statistics) and the manifest's rank map are those the CPU
# target writes for the same layout. The host code of the t=2 program
# then runs: --help, and a start on two ranks under mpirun that ends with
# the "no CUDA device" error. What the programs compute is
# tests/features/gpu/run.sh's.
#
#   multi.sh SHARDC MODELS_DIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODELS=$ROOT/models
# Vocabularies of 128: the CUDA target pads the vocabulary to a multiple
# of 128 at t = 1 too, the CPU target only when t > 1, so with an odd one
# the t = 1 layouts' parameter tables would differ by the padding alone.
# At t = 2 both pad 128 to 256.
GPT2="-D vocab=128 -D seq=8 -D hidden=16 -D heads=4 -D layers=9 -D batch=2"
LLAMA="-D vocab=128 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=9 -D batch=2"
T0=$(date +%s)

# The tables of one program source: every `static const Rt... name[] =`
# array the runtime reads whose contents do not depend on the target's
# memory plan (the schedule's actions, the parameters, the buckets).
tables() {
  awk '/^static const (RtSchedAction|RtParam|RtBucket) [a-z_0-9]+\[\] = \{/,/^};/' "$1"
}

# The collectives a program source calls, in order, with its buffers'
# places in the memory plan (which is the target's) left out: what is
# reduced or gathered, how much, of which type, on which communicator.
comms() {
  { grep -o 'rt_comm_[a-z_]*([^;]*' "$1" || true; } |
    sed -E 's/cu_tp_scratch\(\)|tp_scratch/SCRATCH/g; s/(TMP|ACT|WGT|GRD|I32)\([0-9]+\)/BUF/g'
}

# The manifest without the fields that name the target and its sources.
manifest() {
  grep -v -e '"target":' -e '"source":' "$1" || true
}

# The precision of each collective of a bf16 program: `KIND RANK TYPE` per
# call, KIND the IR op in the comment the emitter writes above it (or
# "vocab-loss" for the vocabulary-parallel loss's row statistics mx, se
# and tg), RANK the rank of its value's type.
precisions() {
  awk '/^ *\/\/ %[0-9]+: .*= (all_reduce|all_gather|reduce_scatter)\(/ {
         op = $0; sub(/\(.*/, "", op); sub(/.*= /, "", op)
         shape = $0; sub(/^[^[]*\[/, "", shape); sub(/\].*/, "", shape)
         rank = split(shape, d, ",")
         next }
       /rt_comm_[a-z_]*\(/ {
         match($0, /RT_COMM_(REAL|BF16)/); t = substr($0, RSTART, RLENGTH)
         if ($0 ~ /\((ctx->tp_comm, )(mx|se|tg),/) print "vocab-loss 1", t
         else if (op != "") print op, rank, t
         op = "" }' "$1"
}

# Builds the programs of DIR with nvcc, silently (one nvcc call per
# distinct program: ranks that share a program share its build).
build() {
  t=$(date +%s)
  "$SHARDC" build "$1" >"$1.make.txt" 2>&1 && [ ! -s "$1.make.txt" ] || return 1
  echo "in $(($(date +%s) - t)) s"
}

# compare NAME CUDA_DIR: the CUDA programs of CUDA_DIR against cpu_NAME.
# With bf16 the collectives must be the CPU's with RT_COMM_BF16 for
# RT_COMM_REAL where they move activations, and every message of a
# pipeline bf16 (RtModel.messages_bf16).
compare() {
  name=$1 dir=$2 bf16=$3
  n=0 same=0 rows=0 calls=0 csame=0
  for src in cpu_$name/*.c; do
    prog=$(basename "$src" .c)
    n=$((n + 1))
    tables "$src" >a.txt
    tables "$dir/$prog.cu" >b.txt
    rows=$((rows + $(grep -c '^  {' a.txt || true)))
    if [ -s a.txt ] && cmp -s a.txt b.txt; then same=$((same + 1)); else diff a.txt b.txt | head -5 || true; fi
    comms "$src" >a.txt
    comms "$dir/$prog.cu" | sed 's/RT_COMM_BF16/RT_COMM_REAL/' >b.txt
    calls=$((calls + $(wc -l <a.txt)))
    if cmp -s a.txt b.txt; then csame=$((csame + 1)); else diff a.txt b.txt | head -5 || true; fi
  done
  if [ "$same" = "$n" ]; then
    ok "$dir: the tables of $n program(s) ($rows rows) are the CPU target's"
  else
    fail "$dir: the tables of $((n - same)) of $n program(s) differ from the CPU target's"
  fi
  if [ "$csame" = "$n" ]; then
    ok "$dir: the $calls collective calls of the programs are the CPU target's${bf16:+ (types aside)}"
  else
    fail "$dir: the collective calls of $((n - csame)) of $n program(s) differ from the CPU's"
  fi
  manifest "cpu_$name/manifest.json" >a.txt
  manifest "$dir/manifest.json" >b.txt
  if cmp -s a.txt b.txt && grep -q '"ranks"' a.txt; then
    ok "$dir: the manifest's rank map ($(grep -c '"rank":' a.txt) ranks) is the CPU target's"
  else
    fail "$dir: the manifests differ"; diff a.txt b.txt | head -5 || true
  fi
  if [ -n "$bf16" ]; then precision_rules "$dir" "$n"; fi
}

# The rules of bf16 (docs/targets.md): activations and their gradients
# travel in bf16, weight gradients (rank 1 here: the norms' weights and
# the biases that sequence parallelism sums) and the loss's statistics in
# fp32; pipeline messages are bf16 (the data-parallel buckets and ZeRO-1
# are the runtime's, fp32, and the tables above are the CPU's).
precision_rules() {
  dir=$1 n=$2
  cat "$dir"/*.cu >all.cu
  precisions all.cu >p.txt
  act=$(awk '$2 >= 2 && $3 == "RT_COMM_BF16"' p.txt | wc -l)
  bad=$(awk '($2 >= 2) != ($3 == "RT_COMM_BF16")' p.txt | wc -l)
  wg=$(awk '$1 != "vocab-loss" && $2 == 1' p.txt | wc -l)
  vl=$(awk '$1 == "vocab-loss"' p.txt | wc -l)
  if [ "$bad" = 0 ]; then
    ok "$dir: $act collectives of activations in bf16; $wg of weight-gradient parts and $vl of the loss's statistics in fp32"
  else
    fail "$dir: $bad collective(s) of the wrong precision"; awk '($2 >= 2) != ($3 == "RT_COMM_BF16")' p.txt | sort | uniq -c | head -5 || true
  fi
  if [ "$n" -gt 1 ]; then
    m=$({ grep -l '^  \.messages_bf16 = 1,' "$dir"/*.cu || true; } | wc -l)
    if [ "$m" = "$n" ]; then ok "$dir: the pipeline messages of all $n programs are bf16"
    else fail "$dir: $m of $n programs send bf16 messages"; fi
  fi
}

# layout NAME MODEL DEFS OPTIONS...: the CPU programs, then the CUDA ones in
# each precision of PRECS (fp32 and bf16 unless set), each compared with
# the CPU's and built.
layout() {
  name=$1 model=$2 defs=$3
  shift 3
  # shellcheck disable=SC2086
  if ! "$SHARDC" compile "$MODELS/$model.shard" $defs "$@" -o "cpu_$name" >cpu_$name.txt 2>&1; then
    fail "$name: the CPU target does not compile ($*)"; tail -3 cpu_$name.txt; return
  fi
  for prec in ${PRECS:-fp32 bf16}; do
    dir=cuda_$name
    [ $prec = bf16 ] && dir=cuda_${name}_bf16
    # shellcheck disable=SC2086
    if ! "$SHARDC" compile "$MODELS/$model.shard" $defs "$@" --target cuda --precision $prec \
      -o "$dir" >$dir.txt 2>&1; then
      fail "$dir: --target cuda --precision $prec does not compile ($*)"; tail -3 $dir.txt; continue
    fi
    compare "$name" "$dir" "$([ $prec = bf16 ] && echo 1)"
    grep -q -- '-lnccl' "$dir/Makefile" || fail "$dir: the Makefile does not link NCCL"
    if how=$(build "$dir"); then
      ok "$dir: $(ls "$dir"/*.cu | wc -l) program(s) built and linked with nvcc $how, silently"
    else
      fail "$dir: the programs do not build silently"; head -20 "$dir.make.txt"
    fi
  done
}

layout t2 gpt2 "$GPT2" --tp 2
layout p2 gpt2 "$GPT2" --pp 2 --global-batch 16
layout p2v2 gpt2 "$GPT2" --pp 2 --vpp 2 --schedule interleaved --global-batch 16
layout d2z1 gpt2 "$GPT2" --dp 2 --zero 1 --global-batch 16
layout t2sp gpt2 "$GPT2" --tp 2 --sequence-parallel
layout t2p2d2 gpt2 "$GPT2" --tp 2 --pp 2 --dp 2 --global-batch 16
layout llama_t2sp llama "$LLAMA" --tp 2 --sequence-parallel
# In bf16 only (nvcc's time in CI): the zero-bubble schedules (W split
# from B), and pipeline messages as 1/t slices all-gathered on arrival
# (scatter/gather: t > 1 without sequence parallelism) with ZeRO-1 on two
# chunks.
PRECS=bf16
layout zbh1_d2z1 gpt2 "$GPT2" --pp 2 --dp 2 --zero 1 --schedule zb-h1 --global-batch 16
layout zbv_t2sp gpt2 "$GPT2" --tp 2 --pp 2 --vpp 2 --sequence-parallel --schedule zb-v --global-batch 16
layout t2p2v2_sg gpt2 "$GPT2" --tp 2 --pp 2 --vpp 2 --dp 2 --zero 1 --global-batch 16
PRECS=

# The host code of a multi-rank program: --help, then a start on its two
# ranks under mpirun, which gets through the runtime's checks of the
# program's tables (the bf16 pipeline's messages of 2-byte elements
# included) and the NCCL backend's start (MPI, the communicators; without
# a GPU no NCCL) to the device layer, which needs the GPU.
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start() { # NAME MPIRUN_ARGS...
  what=$1
  shift
  if ! command -v mpirun >/dev/null; then
    echo "no mpirun: the two-rank start of $what is not tried"
  elif timeout 60 mpirun --oversubscribe "$@" >start.txt 2>&1; then
    ok "$what: started on two ranks (a GPU is present)"
  elif grep -q 'error: .*no CUDA device' start.txt; then
    ok "$what: a start on two ranks without a GPU ends with: $(grep -m1 'no CUDA device' start.txt)"
  else
    fail "$what: the two-rank start failed without the no-device error"; head -5 start.txt
  fi
}
prog=cuda_t2/rank0
if [ -x "$prog" ]; then
  check "t2: rank0 --help exits 0" "$prog" --help
  start t2 -np 2 "$prog" --steps 0
fi
p2=cuda_p2_bf16
[ -x $p2/stage0 ] && [ -x $p2/stage1 ] &&
  start "p2 bf16" -np 1 $p2/stage0 --steps 0 : -np 1 $p2/stage1 --steps 0
echo "multi.sh: $(($(date +%s) - T0)) s"
[ "$FAILS" = 0 ] || { echo "$FAILS check(s) failed"; exit 1; }
echo "all passed"
