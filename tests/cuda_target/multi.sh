#!/bin/sh
# The CUDA target's programs of more than one rank, in CI (nvcc and NCCL,
# no GPU): for a representative part of the equivalence grid
# (tests/pp_run/grid.sh, its tiny quick shape) each layout compiles with
# --target cuda, builds with nvcc against the NCCL backend warning-free,
# and its action tables, parameter and bucket tables, the collectives it
# calls (in order, buffers aside) and the manifest's rank map are those the
# CPU target writes for the same layout. The host code of the t=2 program
# then runs: --help, and a start on two ranks under mpirun that ends with
# the "no CUDA device" error. What the programs compute is
# tests/gpu/run.sh's.
#
#   multi.sh SHARDC MODELS_DIR
set -u
SHARDC=$1
MODELS=$2
. "$(dirname "$0")/../common/checks.sh"
GPT2="-D vocab=97 -D seq=8 -D hidden=16 -D heads=4 -D layers=9 -D batch=2"
LLAMA="-D vocab=65 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=9 -D batch=2"
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
  grep -o 'rt_comm_[a-z_]*([^;]*' "$1" |
    sed -E 's/cu_tp_scratch\(\)|tp_scratch/SCRATCH/g; s/(TMP|ACT|WGT|GRD|I32)\([0-9]+\)/BUF/g'
}

# The manifest without the fields that name the target and its sources.
manifest() {
  grep -v -e '"target":' -e '"source":' "$1"
}

# layout NAME MODEL DEFS OPTIONS...
layout() {
  name=$1 model=$2 defs=$3
  shift 3
  # shellcheck disable=SC2086
  if ! "$SHARDC" compile "$MODELS/$model.shard" $defs "$@" -o "cpu_$name" >cpu_$name.txt 2>&1; then
    fail "$name: the CPU target does not compile ($*)"; tail -3 cpu_$name.txt; return
  fi
  # shellcheck disable=SC2086
  if ! "$SHARDC" compile "$MODELS/$model.shard" $defs "$@" --target cuda -o "cuda_$name" \
    >cuda_$name.txt 2>&1; then
    fail "$name: --target cuda does not compile ($*)"; tail -3 cuda_$name.txt; return
  fi
  n=0 same=0 rows=0 calls=0 csame=0
  for src in cpu_$name/*.c; do
    prog=$(basename "$src" .c)
    n=$((n + 1))
    tables "$src" >a.txt
    tables "cuda_$name/$prog.cu" >b.txt
    rows=$((rows + $(grep -c '^  {' a.txt)))
    if [ -s a.txt ] && cmp -s a.txt b.txt; then same=$((same + 1)); else diff a.txt b.txt | head -5; fi
    comms "$src" >a.txt
    comms "cuda_$name/$prog.cu" >b.txt
    calls=$((calls + $(wc -l <a.txt)))
    if cmp -s a.txt b.txt; then csame=$((csame + 1)); else diff a.txt b.txt | head -5; fi
  done
  if [ "$same" = "$n" ]; then
    ok "$name: the tables of $n program(s) ($rows rows) are the CPU target's"
  else
    fail "$name: the tables of $((n - same)) of $n program(s) differ from the CPU target's"
  fi
  if [ "$csame" = "$n" ]; then
    ok "$name: the $calls collective calls of the programs are the CPU target's"
  else
    fail "$name: the collective calls of $((n - csame)) of $n program(s) differ from the CPU's"
  fi
  manifest "cpu_$name/manifest.json" >a.txt
  manifest "cuda_$name/manifest.json" >b.txt
  if cmp -s a.txt b.txt && grep -q '"ranks"' a.txt; then
    ok "$name: the manifest's rank map ($(grep -c '"rank":' a.txt) ranks) is the CPU target's"
  else
    fail "$name: the manifests differ"; diff a.txt b.txt | head -5
  fi
  grep -q -- '-lnccl' "cuda_$name/Makefile" || fail "$name: the Makefile does not link NCCL"
  t=$(date +%s)
  if "$SHARDC" build "cuda_$name" >make_$name.txt 2>&1 && [ ! -s make_$name.txt ]; then
    ok "$name: $n program(s) built and linked with nvcc in $(($(date +%s) - t)) s, silently"
  else
    fail "$name: the programs do not build silently"; head -20 make_$name.txt
  fi
}

layout t2 gpt2 "$GPT2" --tp 2
layout p2 gpt2 "$GPT2" --pp 2 --global-batch 16
layout p2v2 gpt2 "$GPT2" --pp 2 --vpp 2 --schedule interleaved --global-batch 16
layout d2z1 gpt2 "$GPT2" --dp 2 --zero 1 --global-batch 16
layout t2sp gpt2 "$GPT2" --tp 2 --sequence-parallel
layout t2p2d2 gpt2 "$GPT2" --tp 2 --pp 2 --dp 2 --global-batch 16
layout llama_t2sp llama "$LLAMA" --tp 2 --sequence-parallel

# The host code of a multi-rank program: --help, then a start on its two
# ranks under mpirun, which gets through the NCCL backend's start (MPI,
# the communicators; without a GPU no NCCL) to the device layer, which
# needs the GPU.
prog=cuda_t2/rank0
if [ -x "$prog" ]; then
  check "t2: rank0 --help exits 0" "$prog" --help
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  if ! command -v mpirun >/dev/null; then
    echo "no mpirun: the two-rank start is not tried"
  elif timeout 60 mpirun --oversubscribe -np 2 "$prog" --steps 0 >start.txt 2>&1; then
    ok "t2: started on two ranks (a GPU is present)"
  elif grep -q 'error: .*no CUDA device' start.txt; then
    ok "t2: a start on two ranks without a GPU ends with: $(grep -m1 'no CUDA device' start.txt)"
  else
    fail "t2: the two-rank start failed without the no-device error"; head -5 start.txt
  fi
fi
echo "multi.sh: $(($(date +%s) - T0)) s"
[ "$FAILS" = 0 ] || { echo "$FAILS check(s) failed"; exit 1; }
echo "all passed"
