#!/bin/bash
# The CUDA target without a GPU: compiles a model for --target cuda, builds
# the rank program with nvcc (warning-free: anything nvcc or the host
# compiler prints fails the test), and runs its host code: --help works
# and exits 0, and a start that needs the device (--steps 0 allocates the
# memory plan) exits non-zero with the "no CUDA device" error. On a machine
# with a GPU the start simply succeeds.
#
#   run.sh WORKDIR MODEL [compile options...]
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
shardc=$SHARDC
# WORKDIR and MODEL relative to where the test started.
work=$(cd "$OLDPWD" && realpath -m "$1") model=$(cd "$OLDPWD" && realpath "$2")
shift 2
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
# The vocabulary is padded at t = 1 too (vocab-pad, CgTarget.vocab_pad_always):
# the loss runs over a multiple of 128 columns, of which the first `valid`
# (the model's vocabulary, 257 in the tiny models) are real.
ce=$(grep -m1 'k_cuda_cross_entropy_fwd' "$work/out/rank0.cu" || true)
cols=$(echo "$ce" | awk -F', ' '{print $5}') valid=$(echo "$ce" | awk -F', ' '{print $6}')
echo "loss over $cols columns, $valid of them real"
[ -n "$cols" ] && [ $((cols % 128)) -eq 0 ] && [ "$valid" -lt "$cols" ] ||
  { echo "FAIL: the loss is not over a padded vocabulary: $ce"; exit 1; }
echo "built $(basename "$model") ($*) with nvcc in $((t1 - t0)) s: $(wc -l <"$work/out/rank0.cu") lines," \
  "$(grep -c '^__global__ void fused_' "$work/out/rank0.cu") fused kernels"
# bf16: the step's GEMMs and kernels are the bf16 ones, and the memory plan
# keeps the activations in about half the bytes of the fp32 program's.
case " $* " in *" --precision bf16 "*)
  gemms=$(grep -c 'KC_BF16' "$work/out/rank0.cu" || true)
  calls=$(grep -c '_bf16(' "$work/out/rank0.cu" || true)
  [ "$gemms" -gt 0 ] && [ "$calls" -gt 0 ] || { echo "FAIL: no bf16 GEMMs or kernels in rank0.cu"; exit 1; }
  # Weight gradients stay fp32: no batch sum stored in bf16 (the position
  # embedding's gradient is summed over the batch into fp32, then added
  # into its table).
  bfsums=$(grep -c 'cu_sum_rows)(BF(' "$work/out/rank0.cu" || true)
  echo "bf16 batch sums: $bfsums"
  [ "$bfsums" -eq 0 ] || { echo "FAIL: a batch sum in bf16:"; grep 'cu_sum_rows)(BF(' "$work/out/rank0.cu"; exit 1; }
  "$shardc" compile "$model" --target cuda -o "$work/fp32" "$@" --precision fp32 >"$work/plan32.txt" ||
    { echo "FAIL: compile fp32"; cat "$work/plan32.txt"; exit 1; }
  a16=$(awk '/activations kept/ {print $(NF-3)}' "$work/plan.txt")
  a32=$(awk '/activations kept/ {print $(NF-3)}' "$work/plan32.txt")
  w16=$(awk '/^  weights/ {print $(NF-3)}' "$work/plan.txt")
  w32=$(awk '/^  weights/ {print $(NF-3)}' "$work/plan32.txt")
  echo "bf16: $gemms GEMMs with KC_BF16, $calls bf16 kernel calls; activations kept $a16 bytes (fp32: $a32), weights $w16 (fp32: $w32)"
  [ "$w16" -eq "$w32" ] || { echo "FAIL: the fp32 master weights changed size"; exit 1; }
  [ $((2 * a16)) -le $((a32 + 64 * 64)) ] && [ "$a16" -lt "$a32" ] ||
    { echo "FAIL: the bf16 activations are not about half the fp32 ones"; exit 1; } ;;
esac
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
