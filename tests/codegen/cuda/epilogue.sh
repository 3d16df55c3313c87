#!/bin/bash
# The GEMM epilogues of the CUDA target (codegen/cuda/gemm.c): in the tiny GPT-2
# every linear -> gelu is one GEMM with cuBLASLt's bias+GELU epilogue (it
# keeps the pre-activation), every linear_dx -> gelu_grad one GEMM with the
# GELU gradient in its epilogue, and every bias gradient comes from the
# epilogue of a GEMM (a linear_dw's, or a dgelu's); with --no-gemm-epilogue
# there is none of them. The flag leaves the CPU target's program as it is.
#
#   epilogue.sh WORKDIR MODEL LAYERS [compile options...]
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
shardc=$SHARDC
# WORKDIR and MODEL relative to where the test started.
work=$(cd "$OLDPWD" && realpath -m "$1") model=$(cd "$OLDPWD" && realpath "$2") layers=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
"$shardc" compile "$model" --target cuda -o "$work/on" "$@" >/dev/null
"$shardc" compile "$model" --target cuda --no-gemm-epilogue -o "$work/off" "$@" >/dev/null
count() { grep -c "$1" "$2" || true; }
on=$work/on/rank0.cu off=$work/off/rank0.cu
aux=$(count 'KC_EPI_BIAS_GELU_AUX' "$on")
dgelu=$(count 'KC_EPI_DGELU' "$on")
bgrad=$(count 'KC_EPI_BGRAD_[AB]\|KC_EPI_DGELU_BGRAD' "$on")
biases=$(count '= sum_to(' "$on")
absorbed=$(count 'in the epilogue of the GEMM' "$on")
echo "epilogues: $aux bias+gelu+aux, $dgelu dgelu, $bgrad bias gradients of $biases sum_to," \
  "$absorbed nodes absorbed (layers: $layers)"
[ "$aux" -eq "$layers" ] || { echo "FAIL: expected one bias+gelu epilogue per layer"; exit 1; }
[ "$dgelu" -eq "$layers" ] || { echo "FAIL: expected one dgelu epilogue per layer"; exit 1; }
[ "$bgrad" -gt 0 ] && [ "$bgrad" -le "$biases" ] || { echo "FAIL: bias gradients"; exit 1; }
[ "$absorbed" -eq $((aux + dgelu + bgrad)) ] || { echo "FAIL: absorbed nodes"; exit 1; }
n=$(count 'k_cuda_gemm_fused' "$off")
[ "$n" -eq 0 ] || { echo "FAIL: --no-gemm-epilogue still fuses $n GEMMs"; exit 1; }
[ "$(count 'in the epilogue of the GEMM' "$off")" -eq 0 ] || { echo "FAIL: absorbed nodes"; exit 1; }
echo "ok: --no-gemm-epilogue: no fused GEMM"
"$shardc" compile "$model" -o "$work/cpu" "$@" >/dev/null
"$shardc" compile "$model" --no-gemm-epilogue -o "$work/cpu_off" "$@" >/dev/null
cmp "$work/cpu/rank0.c" "$work/cpu_off/rank0.c" || { echo "FAIL: the flag changed the CPU program"; exit 1; }
echo "ok: the CPU target's program is the same with the flag"
