#!/bin/sh
# The CUDA target without a GPU: compiles a model for --target cuda, builds
# the rank program with nvcc (warning-free: anything nvcc or the host
# compiler prints fails the test), and runs its host code: --help works
# and exits 0, and a start that needs the device (--steps 0 allocates the
# memory plan) exits non-zero with the "no CUDA device" error. On a machine
# with a GPU the start simply succeeds.
#
#   run.sh SHARDC WORKDIR MODEL [compile options...]
set -eu
shardc=$1 work=$2 model=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
"$shardc" compile "$model" --target cuda -o "$work/out" "$@" >"$work/plan.txt" ||
  { echo "FAIL: compile"; cat "$work/plan.txt"; exit 1; }
grep -q '^ARCH = sm_90$' "$work/out/Makefile" || { echo "FAIL: the Makefile's ARCH is not sm_90"; exit 1; }
t0=$(date +%s)
"$shardc" build "$work/out" >"$work/make.txt" 2>&1 ||
  { echo "FAIL: the generated program does not build"; cat "$work/make.txt"; exit 1; }
t1=$(date +%s)
if [ -s "$work/make.txt" ]; then
  echo "FAIL: nvcc is not silent:"
  cat "$work/make.txt"
  exit 1
fi
echo "built $(basename "$model") ($*) with nvcc in $((t1 - t0)) s: $(wc -l <"$work/out/rank0.cu") lines," \
  "$(grep -c '^__global__ void fused_' "$work/out/rank0.cu") fused kernels"
prog=$work/out/rank0
"$prog" --help >"$work/help.txt" 2>&1 || { echo "FAIL: --help"; cat "$work/help.txt"; exit 1; }
grep -q '^usage: ' "$work/help.txt" || { echo "FAIL: --help prints no usage"; exit 1; }
if "$prog" --steps 0 >"$work/start.txt" 2>&1; then
  echo "started on a GPU: $(grep -m1 '^memory plan' "$work/start.txt" || echo ok)"
  exit 0
fi
grep -q 'error: no CUDA device' "$work/start.txt" ||
  { echo "FAIL: the start failed without the no-device error:"; cat "$work/start.txt"; exit 1; }
grep 'no CUDA device' "$work/start.txt"
echo "ok: --help exits 0; a start without a GPU exits non-zero with the no-device error"
