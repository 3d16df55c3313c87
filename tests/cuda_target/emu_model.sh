#!/bin/sh
# The tiny GPT-2's CUDA programs built as C++ on the CPU emulator of the
# CUDA runtime and cuBLASLt (tests/emu) and trained for a few steps against
# the CPU target's program on the same data and seed: the program with
# cuBLASLt's GEMM epilogues and the one without (--no-gemm-epilogue) within
# 1e-5 of the CPU target's every loss (fp32), the bf16 program within 2e-2
# (relative). This runs the generated host code end to end without a GPU:
# the staged token windows, the fused GEMMs and the absorbed nodes.
#
#   emu_model.sh SHARDC WORKDIR MODEL DATA CXX SRC_DIR "LINK" [compile options...]
set -eu
shardc=$1 work=$2 model=$3 data=$4 cxx=$5 src=$6 link=$7
shift 7
steps=5
rm -rf "$work"
mkdir -p "$work"
run() { # NAME: trains NAME's rank0 for $steps steps into NAME.json
  OMP_NUM_THREADS=2 "$work/$1/rank0" --data "$data" --seed 1 --quiet --steps $steps \
    --log-json "$work/$1.json" >"$work/$1.log" 2>&1 || { echo "FAIL: $1 does not train"; cat "$work/$1.log"; exit 1; }
}
emu_build() { # NAME [compile options]: the CUDA program NAME on the emulator
  name=$1
  shift
  "$shardc" compile "$model" --target cuda -o "$work/$name" "$@" >/dev/null
  cp "$work/$name/rank0.cu" "$work/$name/rank0.cc"
  # shellcheck disable=SC2086
  "$cxx" -O1 -std=c++20 -DSHARD_CUDA_EMU -ffp-contract=off -w -I"$src/tests/emu/include" \
    -I"$src" -I"$src/kernels/cuda" -o "$work/$name/rank0" "$work/$name/rank0.cc" $link \
    >"$work/$name.build.log" 2>&1 || { echo "FAIL: $name does not build on the emulator"; cat "$work/$name.build.log"; exit 1; }
}
"$shardc" compile "$model" -o "$work/cpu" "$@" >/dev/null
"$shardc" build "$work/cpu" >"$work/cpu.build.log" 2>&1 || { cat "$work/cpu.build.log"; exit 1; }
emu_build fused "$@"
emu_build unfused "$@" --no-gemm-epilogue
emu_build bf16 "$@" --precision bf16
for p in cpu fused unfused bf16; do run $p; done
grep -c 'k_cuda_gemm_fused' "$work/fused/rank0.cu" | sed 's/^/fused GEMMs in the program: /'
status=0
cmp() { # NAME TOL [rel]
  awk -v what="$1" -v tol="$2" -v rel="${3:-}" -v want=$steps '
    { match($0, /"loss":[^,}]*/); v = substr($0, RSTART + 7, RLENGTH - 7) }
    NR == FNR { ref[FNR] = v; next }
    { got[FNR] = v }
    END {
      worst = 0
      for (s = 1; s <= want; s++) {
        if (!(s in got) || got[s] !~ /^-?[0-9]/) { printf "FAIL: %s: step %d has no loss\n", what, s; exit 1 }
        d = got[s] - ref[s]; if (d < 0) d = -d
        if (rel != "") d = d / (ref[s] < 0 ? -ref[s] : ref[s])
        if (d > worst) worst = d
      }
      printf "%s: %d steps, largest %s|loss difference| from the CPU target %.2e (limit %s)\n",
             what, want, rel != "" ? "relative " : "", worst, tol
      exit worst > tol
    }' "$work/cpu.json" "$work/$1.json" || status=1
}
cmp fused 1e-5
cmp unfused 1e-5
cmp bf16 2e-2 rel
[ $status -eq 0 ] && echo "ok: the emulated CUDA programs train as the CPU target does"
exit $status
