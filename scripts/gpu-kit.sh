#!/usr/bin/env bash
# Builds the GPU kit (docs/gpu.md): one folder with everything the GPU
# checks of tests/features/gpu/run.sh and bench/gpu.sh need on a bare CUDA machine,
# prepared on a machine with the CUDA toolkit and no GPU:
#
#   - the kernel and device test binaries and every rank program the rows
#     run, compiled for sm_90 (CUDA_ARCH), and the CPU program of the
#     checkpoint crossing;
#   - the CPU target's reference results of every model check (losses,
#     gradient norms, dumped gradients, a checkpoint to resume), computed
#     here, so that the GPU side only runs and compares;
#   - the libraries those programs link that a bare CUDA image lacks
#     (cJSON, the OpenMP runtime, OpenBLAS, Open MPI with its launcher and
#     plugins), and xz to unpack them;
#   - the runner, run.sh (tests/features/gpu/kit/run.sh), with the comparisons it
#     shares with tests/features/gpu/run.sh.
#
#   scripts/gpu-kit.sh [--emu] [--quick] BUILD OUT
#
# BUILD is a CMake build of the project configured with nvcc (shardc then
# compiles --target cuda, and the test binaries are built). The programs
# and the heavy files travel in one solid xz archive (payload.tar.xz),
# since every rank program carries the same kernels: 45 programs pack
# into little more than one. The kit must stay within 48 MiB; its size is
# printed, and a larger kit is an error.
#
# --emu builds the rehearsal's kit (tests/features/gpu/kit/rehearse.sh): the same
# rows with the CPU emulator's programs (tests/features/emu) in place of the nvcc
# ones, the speed rows at the tiny shapes (the emulator is far too slow
# for GPT-2 medium), and deadlines scaled to the emulator. --quick builds
# only what the quick rehearsal's rows need (tier 1's first rows).
#
# Compiled folders stay in OUT.work: a program whose compile command,
# compiler and libraries have not changed is not compiled or built again,
# and a reference whose program has not changed is not computed again.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
EMU=0 QUICK=0
while [ $# -gt 0 ]; do
  case $1 in
    --emu) EMU=1; shift ;;
    --quick) QUICK=1; shift ;;
    -*) echo "gpu-kit: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# = 2 ] || { echo "usage: scripts/gpu-kit.sh [--emu] [--quick] BUILD OUT" >&2; exit 2; }
BUILD=$(cd "$1" && pwd) || exit 1
OUT=$2
ARCH=${CUDA_ARCH:-90}
WORK=$OUT.work
SHARDC=$BUILD/shardc
DATA=$BUILD/data/austen_train.bin
export LC_ALL=C OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
T0=$SECONDS

die() { echo "gpu-kit: error: $*" >&2; exit 1; }
[ -x "$SHARDC" ] && [ -f "$DATA" ] || die "$BUILD has no shardc or $DATA (build the project first)"
if [ $EMU = 1 ]; then
  KERNELS=$BUILD/tests/test_kernels_cuda_emu DEVICE=$BUILD/tests/test_device_cuda_emu
  [ -f "$BUILD/emu/program.mk" ] || die "no $BUILD/emu/program.mk (the emulator's build)"
else
  KERNELS=$BUILD/tests/test_kernels_cuda DEVICE=$BUILD/tests/test_device_cuda
fi
[ -x "$KERNELS" ] && [ -x "$DEVICE" ] || die "no $KERNELS or $DEVICE (build the project with nvcc)"
"$SHARDC" compile "$ROOT/models/gpt2.shard" -D layers=1 --target cuda -o "$WORK/probe" \
  >/dev/null 2>&1 || die "this shardc cannot compile --target cuda (configure with nvcc)"
command -v mpirun >/dev/null || die "no mpirun: the CPU references of the multi-rank rows need MPI"
mkdir -p "$WORK" "$OUT"
rm -rf "$OUT/payload" "$OUT/ref"
mkdir -p "$OUT/payload/bin" "$OUT/payload/p" "$OUT/payload/lib" "$OUT/ref"

# ------------------------------------------------------------ programs
# The quick kit's runs are 3 steps (its references too), so that its
# rehearsal stays well under a minute.
STEPS=$([ $QUICK = 1 ] && echo 3 || echo 10)
TINY_gpt2="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D layers=2 -D batch=2"
TINY_llama="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D kv_heads=2 -D layers=2 -D batch=2 -D ffn=96"
TINY_mixtral="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D kv_heads=2 -D layers=2 -D batch=2 -D ffn=96"
TINY_deepseek_moe="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D layers=2 -D batch=2"
TINY_vector=""
TINY_unfused=$TINY_gpt2
TRAIN="--data $DATA --seed 1 --quiet"
MTRAIN="$TRAIN --global-batch 4 --no-shuffle"
STAMP_LIBS=$(ls -l --time-style=+%s "$SHARDC" "$BUILD"/runtime/*.a "$BUILD"/kernels/*.a \
  "$BUILD"/tests/*.a 2>/dev/null | awk '{ print $6, $7 }' | cksum)

# program NAME TARGET MODEL PRECISION OPTIONS...: compiles and builds the
# folder WORK/NAME unless its stamp (command, compiler and libraries) is
# unchanged; MODEL is models/MODEL.shard, else tests/features/gpu/ or
# tests/features/recompute/MODEL.shard, at its tiny shape (none with NOTINY set).
program() {
  local name=$1 target=$2 model=$3 prec=$4 dir=$WORK/$1 file defs stamp
  shift 4
  file=$ROOT/models/$model.shard
  [ -f "$file" ] || file=$ROOT/tests/features/gpu/$model.shard
  [ -f "$file" ] || file=$ROOT/tests/features/recompute/$model.shard
  eval "defs=\${TINY_$model:-}"
  [ -z "${NOTINY:-}" ] || defs=""
  stamp="$file $defs $* $target $prec sm_$ARCH emu=$EMU $STAMP_LIBS"
  if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ]; then return 0; fi
  rm -rf "$dir"
  # shellcheck disable=SC2086
  "$SHARDC" compile "$file" $defs "$@" --target "$target" --precision "$prec" \
    --cuda-arch "sm_$ARCH" -o "$dir" >"$dir.log" 2>&1 || { cat "$dir.log" >&2; die "$name: compile"; }
  if [ "$target" = cuda ] && [ $EMU = 1 ]; then
    make -s -C "$dir" -f Makefile -f "$BUILD/emu/program.mk" >>"$dir.log" 2>&1
  else
    "$SHARDC" build "$dir" >>"$dir.log" 2>&1
  fi || { tail -n 30 "$dir.log" >&2; die "$name: build"; }
  echo "$stamp" >"$dir/.stamp"
  echo "  built $name ($target, $prec)"
}

# ship NAME: the programs the manifest of WORK/NAME names (rank0, or one
# per pipeline stage) and the manifest into the kit, stripped.
ship() {
  local d=$OUT/payload/p/$1 f
  mkdir -p "$d"
  cp "$WORK/$1/manifest.json" "$d/"
  for f in $(sed -n 's/.*"program":[[:space:]]*"\([^"]*\)".*/\1/p' "$WORK/$1/manifest.json" | sort -u); do
    cp "$WORK/$1/$f" "$d/" && strip -s "$d/$f" 2>/dev/null || die "$1: no program $f"
  done
}

# A copy of a bf16 program whose vector stores add 1/128 to every other
# element (tests/features/gpu/run.sh's check_vector): it must train differently.
vecmut() {
  local src=$WORK/$1 dst=$WORK/$1-vecmut
  if [ -f "$dst/.stamp" ] && [ "$(cat "$dst/.stamp")" = "$(cat "$src/.stamp")" ]; then return 0; fi
  rm -rf "$dst" && cp -r "$src" "$dst" &&
    sed -i 's/cu_b2(y\([0-9]*\)l\[0\]/cu_b2(1.0078125f * y\1l[0]/' "$dst/rank0.cu" && rm -f "$dst/rank0" || die "vecmut $1"
  grep -q 'cu_b2(1.0078125f' "$dst/rank0.cu" || die "$1: no bf16 vector store to perturb"
  if [ $EMU = 1 ]; then make -s -C "$dst" -f Makefile -f "$BUILD/emu/program.mk"
  else make -s -C "$dst"; fi >"$dst.log" 2>&1 || die "$1-vecmut: build"
  cp "$src/.stamp" "$dst/.stamp"
}

WHAT=$([ $EMU = 1 ] && echo "emulator programs (rehearsal)" || echo "nvcc programs, sm_$ARCH")
[ $QUICK = 1 ] && WHAT="$WHAT, quick rows only"
echo "== gpu-kit: $WHAT, into $OUT"
CPU_PROGS="gpt2 llama"
CUDA_PROGS="gpt2 llama gpt2-bf16 llama-bf16 nccl-t2"
program gpt2-cpu cpu gpt2 fp32
program llama-cpu cpu llama fp32
program gpt2 cuda gpt2 fp32
program llama cuda llama fp32
program gpt2-bf16 cuda gpt2 bf16
program llama-bf16 cuda llama bf16
program nccl-t2 cuda gpt2 fp32 --tp 2 --global-batch 4
program nccl-t2-cpu cpu gpt2 fp32 --tp 2 --global-batch 4
program nccl-one-cpu cpu gpt2 fp32 --global-batch 4
# The routed models (mixtures of experts, kernels/cuda/moe.cu): Mixtral in
# fp32 and bf16 (tier 1), DeepSeek-MoE (tier 2); not in the quick kit.
MOE_MODELS=$([ $QUICK = 1 ] || echo "mixtral deepseek_moe")
for m in $MOE_MODELS; do
  program $m-cpu cpu $m fp32
  program $m cuda $m fp32
  program $m-bf16 cuda $m bf16
done
# The speed rows: GPT-2 at bench/gpu.sh's shapes in bf16, and its graphs
# shape and many-rank layouts (the emulator kit: the tiny GPT-2, for the
# rows' mechanics only: the emulator is far too slow for these shapes).
if [ $EMU = 1 ]; then
  SPEED_SHAPES=("small $TINY_gpt2" "medium $TINY_gpt2" "1.3B $TINY_gpt2")
  GRAPH_SHAPE=$TINY_gpt2 MULTI_SHAPE=$TINY_gpt2 MULTI_GB=4
else
  B="-D seq=1024 -D vocab=50257"
  SPEED_SHAPES=("small -D layers=12 -D hidden=768 -D heads=12 -D batch=16 $B"
                "medium -D layers=24 -D hidden=1024 -D heads=16 -D batch=16 $B"
                "1.3B -D layers=24 -D hidden=2048 -D heads=16 -D batch=8 $B")
  GRAPH_SHAPE="-D layers=6 -D hidden=256 -D heads=4 -D batch=4 -D seq=128 -D vocab=512"
  MULTI_SHAPE="-D layers=12 -D hidden=768 -D heads=12 -D batch=4 $B" MULTI_GB=16
fi
# speed_program NAME OPTIONS...: models/gpt2.shard in bf16 at the shape
# OPTIONS give, not the tiny one.
speed_program() {
  local name=$1
  shift
  NOTINY=1 program "$name" cuda gpt2 bf16 "$@"
}
: >"$OUT/ref/speed-shapes"
for s in "${SPEED_SHAPES[@]}"; do
  n=${s%% *}
  echo "$s" >>"$OUT/ref/speed-shapes"
  [ $QUICK = 1 ] && [ "$n" != medium ] && continue
  # shellcheck disable=SC2086
  speed_program "bench-$n" ${s#* }
done

if [ $QUICK = 0 ]; then
  program gpt2-noepi cuda gpt2 fp32 --no-gemm-epilogue
  program vector-bf16 cuda vector bf16
  for m in gpt2 llama vector; do vecmut $m-bf16; done
  program gpt2-drop-cpu cpu gpt2 fp32 -D dropout_rate=0.1
  program gpt2-drop cuda gpt2 fp32 -D dropout_rate=0.1
  program gpt2-drop-full cuda gpt2 fp32 -D dropout_rate=0.1 --recompute full
  program gpt2-drop-bf16 cuda gpt2 bf16 -D dropout_rate=0.1
  program unfused-cpu cpu unfused fp32
  # Recomputation (tests/features/gpu/run.sh's check_recompute): each model, its
  # modes, with and without the epilogues, fp32 and bf16.
  RC_MODES_gpt2="selective full" RC_MODES_llama="full" RC_MODES_unfused="selective full"
  RC_PROGS=""
  for prec in fp32 bf16; do
    sfx=$([ $prec = bf16 ] && echo -bf16)
    for m in gpt2 llama unfused; do
      program "$m$sfx" cuda $m $prec
      program "$m$sfx-noepi" cuda $m $prec --no-gemm-epilogue
      RC_PROGS="$RC_PROGS $m$sfx $m$sfx-noepi"
      eval "modes=\$RC_MODES_$m"
      for mode in $modes; do
        program "$m$sfx-rc-$mode" cuda $m $prec --recompute $mode
        program "$m$sfx-rc-$mode-noepi" cuda $m $prec --recompute $mode --no-gemm-epilogue
        RC_PROGS="$RC_PROGS $m$sfx-rc-$mode $m$sfx-rc-$mode-noepi"
      done
    done
  done
  for l in p2 d2; do
    opt=$([ $l = p2 ] && echo --pp || echo --dp)
    program nccl-$l cuda gpt2 fp32 $opt 2 --global-batch 4
    program nccl-$l-cpu cpu gpt2 fp32 $opt 2 --global-batch 4
  done
  for l in t2 p2 d2; do
    opt=$([ $l = t2 ] && echo --tp || { [ $l = p2 ] && echo --pp || echo --dp; })
    program nccl-$l-bf16 cuda gpt2 bf16 $opt 2 --global-batch 4
  done
  # Expert parallelism over NCCL (--ep 2 of d 2, the tiny Mixtral), the
  # CPU target's same layout and its one-rank run at the same global batch.
  program nccl-d2ep2-mixtral cuda mixtral fp32 --dp 2 --ep 2 --global-batch 4
  program nccl-d2ep2-mixtral-cpu cpu mixtral fp32 --dp 2 --ep 2 --global-batch 4
  program nccl-one-mixtral-cpu cpu mixtral fp32 --global-batch 4
  # The benchmarks' graphs shape and many-rank layouts (bench/gpu.sh).
  # shellcheck disable=SC2086
  speed_program bench-graphs $GRAPH_SHAPE
  for l in one t2 p2 d2; do
    opt=$(case $l in one) ;; t2) echo --tp 2 ;; p2) echo --pp 2 ;; d2) echo --dp 2 ;; esac)
    # shellcheck disable=SC2086
    speed_program multi-$l $MULTI_SHAPE --global-batch $MULTI_GB $opt
  done
  echo "$MULTI_GB $(echo "$MULTI_SHAPE" | sed -n 's/.*-D seq=\([0-9]*\).*/\1/p')" >"$OUT/ref/multi-global-batch"
fi

# ---------------------------------------------------------- references
# ref NAME PROGRAM ARGS...: the CPU target's --log-json of a run, once per
# program stamp and arguments.
. "$ROOT/tests/features/gpu/ranks.sh"
ref() {
  local name=$1 prog=$2 key j=$WORK/ref-$1.json
  shift 2
  key="$(cat "$WORK/$prog/.stamp") $*"
  if ! { [ -f "$j" ] && [ "$(cat "$j.key" 2>/dev/null)" = "$key" ]; }; then
    rm -f "$j"
    if [ "$(ranks_of "$WORK/$prog")" = 1 ]; then
      # shellcheck disable=SC2086
      "$WORK/$prog/rank0" "$@" --log-json "$j" >"$j.log" 2>&1
    else
      # shellcheck disable=SC2086
      mpirun_job "$WORK/$prog" 0 - "$@" --log-json "$j" >"$j.log" 2>&1
    fi || { tail -n 20 "$j.log" >&2; die "reference $name ($prog $*)"; }
    echo "$key" >"$j.key"
    echo "  reference $name"
  fi
  cp "$j" "$OUT/ref/$name.json"
}
echo "== references (the CPU target, $STEPS steps)"
# shellcheck disable=SC2086
ref gpt2-cpu gpt2-cpu $TRAIN --steps $STEPS
# shellcheck disable=SC2086
ref llama-cpu llama-cpu $TRAIN --steps $STEPS
for m in $MOE_MODELS; do
  # shellcheck disable=SC2086
  ref $m-cpu $m-cpu $TRAIN --steps $STEPS
done
# shellcheck disable=SC2086
ref nccl-t2-cpu nccl-t2-cpu $MTRAIN --steps $STEPS
# shellcheck disable=SC2086
ref nccl-one nccl-one-cpu $MTRAIN --steps $STEPS
. "$ROOT/tests/features/gpu/compare.sh"
cmp_losses "t2 CPU target against one rank" "$OUT/ref/nccl-one.json" "$OUT/ref/nccl-t2-cpu.json" 1e-4 ||
  die "the CPU target's t2 run is not one rank's"
rm -f "$OUT"/ref/*.sl
if [ $QUICK = 0 ]; then
  for l in p2 d2; do
    # shellcheck disable=SC2086
    ref nccl-$l-cpu nccl-$l-cpu $MTRAIN --steps $STEPS
    cmp_losses "$l CPU target against one rank" "$OUT/ref/nccl-one.json" "$OUT/ref/nccl-$l-cpu.json" 1e-4 ||
      die "the CPU target's $l run is not one rank's"
  done
  # shellcheck disable=SC2086
  ref nccl-d2ep2-mixtral-cpu nccl-d2ep2-mixtral-cpu $MTRAIN --steps $STEPS
  # shellcheck disable=SC2086
  ref nccl-one-mixtral nccl-one-mixtral-cpu $MTRAIN --steps $STEPS
  cmp_losses "d2 ep2 mixtral CPU target against one rank" "$OUT/ref/nccl-one-mixtral.json" \
    "$OUT/ref/nccl-d2ep2-mixtral-cpu.json" 1e-4 || die "the CPU target's d2 ep2 mixtral run is not one rank's"
  # shellcheck disable=SC2086
  ref drop-cpu gpt2-drop-cpu $TRAIN --steps $STEPS
  # shellcheck disable=SC2086
  ref unfused-cpu unfused-cpu $TRAIN --steps $STEPS
  for m in gpt2 llama; do
    # shellcheck disable=SC2086
    ref gb4-$m-cpu $m-cpu $TRAIN --global-batch 4 --steps $STEPS
  done
  # The graphs check's pipeline against one rank at its global batch.
  # shellcheck disable=SC2086
  ref graphs-p2-one nccl-one-cpu $TRAIN --global-batch 4 --steps $STEPS
  # The checkpoint crossing: the CPU's 10 steps at a constant rate, and
  # its first 5 saved for the GPU to resume.
  # shellcheck disable=SC2086
  ref ckpt-ref gpt2-cpu $TRAIN --lr-schedule constant --steps $STEPS
  rm -rf "$OUT/ref/ckpt-cpu"
  # shellcheck disable=SC2086
  "$WORK/gpt2-cpu/rank0" $TRAIN --lr-schedule constant --steps 5 --save "$OUT/ref/ckpt-cpu" \
    --log-json "$OUT/ref/ckpt-cpu.json" >"$WORK/ckpt.log" 2>&1 || die "the CPU checkpoint"
  # One step's gradients (tests/features/gpu/run.sh's check_grads).
  for m in gpt2 llama; do
    # shellcheck disable=SC2086
    "$WORK/$m-cpu/rank0" $TRAIN --steps 1 --dump-grads "$OUT/ref/$m-cpu.grads" >"$WORK/grads.log" 2>&1 ||
      die "$m: the CPU gradients"
  done
  # Which recompute programs are the ones without (nothing to recompute):
  # the runner reports them instead of running them.
  : >"$OUT/ref/recompute-same"
  for p in $RC_PROGS; do
    case $p in *-rc-*) ;; *) continue ;; esac
    base=${p%%-rc-*}
    case $p in *-noepi) base=$base-noepi ;; esac
    cmp -s "$WORK/$p/rank0.cu" "$WORK/$base/rank0.cu" && echo "$p" >>"$OUT/ref/recompute-same"
  done
  echo "$RC_PROGS" >"$OUT/ref/recompute-programs"
  grep -c 'k_cuda_gemm_fused' "$WORK/gpt2/rank0.cu" >"$OUT/ref/gpt2-fused-gemms"
  for m in gpt2 llama vector; do grep -c 'cu_b2(y' "$WORK/$m-bf16/rank0.cu" >"$OUT/ref/$m-bf16-vector-stores"; done
fi

# --------------------------------------------------------------- ship
for d in "$WORK"/*/; do
  n=$(basename "$d")
  [ -f "$d/.stamp" ] || continue
  case $n in *-cpu) [ "$n" = gpt2-cpu ] || continue ;; probe) continue ;; esac
  [ $QUICK = 1 ] && case " $CUDA_PROGS bench-medium " in *" $n "*) ;; *) continue ;; esac
  ship "$n"
done
cp "$KERNELS" "$OUT/payload/bin/test_kernels_cuda"
cp "$DEVICE" "$OUT/payload/bin/test_device_cuda"
[ -x "$BUILD/tests/tptool" ] && cp "$BUILD/tests/tptool" "$OUT/payload/bin/"
cp "$DATA" "$OUT/payload/austen_train.bin"
strip -s "$OUT"/payload/bin/* 2>/dev/null

# The libraries: every one the kit's programs (and mpirun's) link, but
# the C library's, libgcc's and libstdc++'s (in every base image) and the
# NVIDIA libraries (the runner finds the machine's own).
BASE_LIBS='^(linux-vdso|libc|libm|libdl|libpthread|librt|libutil|ld-linux-x86-64|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-.*)\.so'
OMPI_LIB=$(dirname "$(readlink -f "$(ldconfig -p | sed -n 's/.*libmpi\.so\.40 .*=> //p' | head -n 1)")")
OMPI_PLUGINS=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
OMPI_DATA=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
[ -d "$OMPI_PLUGINS" ] && [ -d "$OMPI_DATA" ] || die "cannot find Open MPI's plugins and data (ompi_info)"
M=$OUT/payload/mpi
mkdir -p "$M/bin" "$M/plugins" "$M/share"
for b in orterun orted; do cp "$(command -v $b)" "$M/bin/"; done
ln -sf orterun "$M/bin/mpirun"
cp "$OMPI_PLUGINS"/*.so "$M/plugins/"
cp -r "$OMPI_DATA" "$M/share/openmpi"
# PMIx, and its plugins, where Open MPI uses an external one.
PMIX_LIB=$(ldd "$OMPI_PLUGINS"/mca_pmix_ext3x.so 2>/dev/null | sed -n 's/.*libpmix\.so\.2 => \([^ ]*\).*/\1/p')
if [ -n "$PMIX_LIB" ]; then
  PMIX_PLUGINS=$(dirname "$(readlink -f "$PMIX_LIB")")/pmix2/lib/pmix
  [ -d "$PMIX_PLUGINS" ] || PMIX_PLUGINS=$(ls -d /usr/lib/*/pmix2/lib/pmix 2>/dev/null | head -n 1)
  [ -d "$PMIX_PLUGINS" ] && mkdir -p "$M/pmix" && cp "$PMIX_PLUGINS"/*.so "$M/pmix/"
  PMIX_DATA=$(ls -d /usr/share/pmix 2>/dev/null | head -n 1)
  [ -n "$PMIX_DATA" ] && cp -r "$PMIX_DATA" "$M/share/pmix"
fi
XZ=$(command -v xz) || die "no xz"
cp "$XZ" "$OUT/xz"
# The closure of every ELF file's libraries, by soname.
libs_of() { ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'; }
: >"$WORK/libs"
find "$OUT/payload" "$OUT/xz" -type f -print0 | xargs -0 file 2>/dev/null | grep ELF | cut -d: -f1 |
  while read -r f; do libs_of "$f"; done | sort -u >"$WORK/libs"
mkdir -p "$OUT/lib"
while read -r so path; do
  echo "$so" | grep -Eq "$BASE_LIBS" && continue
  # liblzma for the kit's own xz, outside the archive it unpacks.
  case $so in liblzma.so*) cp -L "$path" "$OUT/lib/$so" ;; *) cp -L "$path" "$OUT/payload/lib/$so" ;; esac
done <"$WORK/libs"
# Open MPI's own libraries, for its launcher and plugins.
cp -L "$OMPI_LIB"/libmpi.so.40 "$OMPI_LIB"/libopen-rte.so.40 "$OMPI_LIB"/libopen-pal.so.40 \
  "$OUT/payload/lib/" 2>/dev/null
[ -n "$PMIX_LIB" ] && cp -L "$PMIX_LIB" "$OUT/payload/lib/"

cp "$ROOT/tests/features/gpu/kit/run.sh" "$OUT/run.sh"
cp "$ROOT/tests/features/gpu/compare.sh" "$ROOT/tests/features/gpu/ranks.sh" "$ROOT/bench/torch_gpt2.py" "$OUT/"
chmod +x "$OUT/run.sh"
{
  echo "KIND=$([ $EMU = 1 ] && echo emu || echo nvcc)"
  echo "QUICK=$QUICK"
  echo "ARCH=sm_$ARCH"
  echo "STEPS=$STEPS"
  echo "BUILT='$(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)'"
  echo "PEAK=$("$SHARDC" hw h200 2>/dev/null | sed -n 's/^peak_bf16_tflops = //p')"
} >"$OUT/kit.env"
# Packed again only when a file changed (xz -9 of it takes a while).
PSTAMP=$(cd "$OUT/payload" && find . -type f -print0 | sort -z | xargs -0 cksum | cksum)
if [ -f "$OUT/payload.tar.xz" ] && [ "$(cat "$WORK/payload.stamp" 2>/dev/null)" = "$PSTAMP" ]; then
  echo "== payload unchanged"
else
  echo "== packing"
  (cd "$OUT/payload" && tar cf - .) | "$XZ" -9 -T2 >"$OUT/payload.tar.xz.tmp" &&
    mv "$OUT/payload.tar.xz.tmp" "$OUT/payload.tar.xz" || die "packing"
  echo "$PSTAMP" >"$WORK/payload.stamp"
fi
rm -rf "$OUT/payload"
BYTES=$(du -sb "$OUT" | cut -f1)
MIB=$(awk -v b="$BYTES" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "gpu-kit: $OUT: $MIB MiB ($BYTES bytes; limit 48 MiB), $(ls "$WORK" | grep -vc '\.') programs" \
  "built, $((SECONDS - T0)) s"
[ "$BYTES" -le $((48 * 1048576)) ] || die "the kit is larger than 48 MiB"
