#!/bin/bash
# The gemm-epilogue pass's printed choice (passes/gemm_epilogue.c) for the
# CUDA target: one line per GEMM whose cuBLASLt epilogue computes a gelu,
# a gelu_grad or a bias gradient, then the counts, with the epilogues on,
# with --no-gemm-epilogue, and per chunk with two pipeline stages; each
# under --verify-each. The printed choice is what codegen writes: as many
# fused GEMMs in the program as lines. The caller compares what this
# prints with the golden file (tests/expect.sh).
#
#   epilogue_choice.sh WORKDIR MODEL [compile options...]
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
shardc=$SHARDC
# WORKDIR and MODEL relative to where the test started.
work=$(cd "$OLDPWD" && realpath -m "$1") model=$(cd "$OLDPWD" && realpath "$2")
shift 2
rm -rf "$work"
mkdir -p "$work"
choice() {
  out=$1
  shift
  "$shardc" compile "$model" --target cuda -o "$work/$out" --print-after=gemm-epilogue \
    --verify-each "$@" >"$work/$out.txt"
  grep '^// epilogue' "$work/$out.txt" >"$work/$out.choice" || true
}
choice on "$@"
echo "== 1 rank"
cat "$work/on.choice"
lines=$(grep -c '^// epilogue of' "$work/on.choice" || true)
fused=$(grep -c 'k_cuda_gemm_fused' "$work/on/rank0.cu" || true)
[ "$lines" -eq "$fused" ] ||
  { echo "FAIL: $lines GEMMs with an epilogue printed, $fused fused GEMMs in the program"; exit 1; }
choice off "$@" --no-gemm-epilogue
echo "== 1 rank, --no-gemm-epilogue"
cat "$work/off.choice"
choice pp "$@" --pp 2 --global-batch 8
echo "== --pp 2: the counts per chunk"
grep '^// epilogues:' "$work/pp.choice"
