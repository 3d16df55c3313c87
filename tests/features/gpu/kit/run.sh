#!/usr/bin/env bash
# The GPU kit's runner (docs/gpu.md): the checks of tests/features/gpu/run.sh and
# bench/gpu.sh on a bare CUDA machine, with the programs and the CPU
# target's references that scripts/gpu-kit.sh prepared where there is no
# GPU. Nothing is compiled here; the kit brings every library but the C
# runtime's and NVIDIA's, and finds cuBLASLt and NCCL on this machine.
#
#   run.sh 1        tier 1, first light: at most 4 minutes on one H200
#   run.sh 2        tier 2: every other row, at most 7 minutes
#   run.sh all      tier 1, then tier 2
#   run.sh --row NAME   one row alone (the tiers call it so, time-limited)
#
# Each tier checks its own deadline (a row gets what is left of it, and a
# row that would start with too little left is SKIPped, saying so),
# prints each row as it finishes (PASS, FAIL or SKIP, seconds, a note),
# and ends with one summary line. With $OUT set it writes the tier's rows
# as JSON to $OUT/gpu-tierN.json and copies the logs of failed rows to
# $OUT/gpu-logs/. A failed row prints its log's tail, in which the
# comparisons name the first mismatching step (and tptool the worst
# tensor). Exit status: 1 when a row failed, else 0.
#
# The payload is unpacked into $KIT_WORK (default ${TMPDIR:-/tmp}/shard-gpu-kit),
# once per kit.
set -u
K=$(cd "$(dirname "$0")" && pwd)
export LC_ALL=C
# shellcheck source=/dev/null
. "$K/kit.env"
W=${KIT_WORK:-${TMPDIR:-/tmp}/shard-gpu-kit}
# The emulator's kit (the rehearsal) runs the same rows slower: its limits
# are scaled, and its programs need no GPU.
if [ "$KIND" = emu ]; then SCALE=${KIT_SCALE:-40}; export GPU_EMU=1; else SCALE=${KIT_SCALE:-1}; fi
TIER1_S=$((240 * SCALE)) TIER2_S=$((420 * SCALE))

# ------------------------------------------------------------- unpacking
unpack() {
  local stamp
  stamp=$(ls -l --time-style=+%s "$K/payload.tar.xz" | awk '{ print $5, $6 }')
  [ -f "$W/.unpacked" ] && [ "$(cat "$W/.unpacked")" = "$stamp $K" ] && return 0
  rm -rf "$W" && mkdir -p "$W" || { echo "FAIL: cannot make $W"; exit 1; }
  LD_LIBRARY_PATH=$K/lib "$K/xz" -dc "$K/payload.tar.xz" | tar xf - -C "$W" ||
    { echo "FAIL: cannot unpack $K/payload.tar.xz into $W"; exit 1; }
  echo "$stamp $K" >"$W/.unpacked"
}

# --------------------------------------------- NVIDIA's libraries, found
# find_lib SONAME: the folder of the first SONAME among the CUDA toolkit's
# folders, the system's, and pip's nvidia packages under site-packages.
find_lib() {
  local d py
  for d in ${CUDA_HOME:+$CUDA_HOME/lib64 $CUDA_HOME/lib} /usr/local/cuda/lib64 /usr/local/cuda/lib \
           /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/lib \
           /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    [ -e "$d/$1" ] && { echo "$d"; return 0; }
  done
  d=$(ldconfig -p 2>/dev/null | awk -v so="$1" '$1 == so { print $NF; exit }')
  [ -n "$d" ] && { dirname "$d"; return 0; }
  for py in python3 python; do
    command -v $py >/dev/null || continue
    for d in $($py -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
      for sub in nccl cublas cuda_runtime cu13 cu13/lib; do
        [ -e "$d/nvidia/$sub/lib/$1" ] && { echo "$d/nvidia/$sub/lib"; return 0; }
        [ -e "$d/nvidia/$sub/$1" ] && { echo "$d/nvidia/$sub"; return 0; }
      done
    done
  done
  return 1
}

setup() {
  unpack
  local so d libs=$W/lib
  FOUND=""
  for so in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
    if d=$(find_lib $so); then
      FOUND="$FOUND $so: $d;"
      case ":$libs:" in *":$d:"*) ;; *) libs=$libs:$d ;; esac
    else
      FOUND="$FOUND $so: not found;"
    fi
  done
  # Python (PyTorch) keeps the machine's own libraries: the kit's are for
  # the kit's programs.
  PY_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # Open MPI, relocated into the kit (its installdirs' environment form).
  export PATH=$W/mpi/bin:$PATH OPAL_PREFIX=$W/mpi OPAL_BINDIR=$W/mpi/bin OPAL_LIBDIR=$W/lib
  export OPAL_PKGLIBDIR=$W/mpi/plugins OPAL_PKGDATADIR=$W/mpi/share/openmpi OPAL_DATADIR=$W/mpi/share
  export OPAL_SYSCONFDIR=$W/mpi/etc OMPI_MCA_mca_base_component_path=$W/mpi/plugins
  export PMIX_MCA_mca_base_component_path=$W/mpi/pmix PMIX_INSTALL_PREFIX=$W/mpi
  export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_plm_rsh_agent=false
  P=$W/p DATA=$W/austen_train.bin R=$K/ref
  TRAIN="--data $DATA --seed 1 --quiet"
  MTRAIN="$TRAIN --global-batch 4 --no-shuffle"
  # shellcheck source=tests/features/gpu/ranks.sh
  . "$K/ranks.sh"
  # shellcheck source=tests/features/gpu/compare.sh
  . "$K/compare.sh"
}

# ------------------------------------------------------------------ rows
# Each row is a function that prints what it compared and returns 0
# (PASS), 77 (SKIP, with a SKIP: line) or anything else (FAIL).
need_gpu() {
  [ "$KIND" = emu ] && return 0
  [ "$NGPUS" -gt 0 ] || { echo "SKIP: no GPU (nvidia-smi sees none)"; return 77; }
}
# train PROGRAM JSON ARGS...: STEPS steps of TRAIN logged to JSON.
train() {
  local prog=$1 json=$2
  shift 2
  rm -f "$json"
  # shellcheck disable=SC2086
  "$prog" $TRAIN --steps "$STEPS" --log-json "$json" "$@" || { echo "FAIL: the run of $prog $*"; return 1; }
}
L=.  # where the row's own files go (set per row)

row_kernels() {
  need_gpu || return $?
  # On the emulator, the first 3 shapes of each list, as ctest's emu/kernels
  # (the quick kit: the first one).
  if [ "$KIND" = emu ]; then "$W/bin/test_kernels_cuda" --shapes $([ "$QUICK" = 1 ] && echo 1 || echo 3)
  else "$W/bin/test_kernels_cuda"; fi
}
row_device() { need_gpu || return $?; "$W/bin/test_device_cuda"; }
row_sanitize_kernels() { # TOOL
  need_gpu || return $?
  command -v compute-sanitizer >/dev/null || { echo "SKIP: compute-sanitizer not on PATH"; return 77; }
  compute-sanitizer --tool "$1" --error-exitcode 1 "$W/bin/test_kernels_cuda" --small
}
row_fp32() { # MODEL
  need_gpu || return $?
  train "$P/$1/rank0" "$L/$1.json" && cmp_losses "$1 fp32, GPU against CPU" "$R/$1-cpu.json" "$L/$1.json" 1e-4 &&
    echo "all checks passed: $1 fp32 losses as the CPU target's over $STEPS steps"
}
row_bf16() { # MODEL
  need_gpu || return $?
  train "$P/$1-bf16/rank0" "$L/$1-bf16.json" &&
    cmp_losses "$1 bf16 GPU against fp32 CPU" "$R/$1-cpu.json" "$L/$1-bf16.json" 2e-2 rel &&
    echo "all checks passed: $1 bf16 within 2e-2 of the CPU target's fp32 losses over $STEPS steps"
}
# nccl_run LAYOUT TAG JSON ARGS...: the layout's ranks, sharing the GPUs
# where there are fewer than ranks (tests/features/gpu/ranks.sh).
nccl_run() {
  local dir=$P/$1 n share
  n=$(ranks_of "$dir") share=$(share_of "$(ranks_of "$dir")")
  HOW=$([ "$share" = 1 ] && echo "$n ranks sharing $NGPUS GPU(s) over sockets" || echo "$n ranks, one GPU each")
  [ "$KIND" = emu ] && HOW="$n ranks on the CPU emulator, NCCL over MPI"
  rm -f "$3"
  SHARD_NCCL_EMU_STATS=1 mpirun_job "$dir" "$share" - $MTRAIN --steps "$STEPS" --log-json "$3" "${@:4}" \
    >"$L/$2.log" 2>&1 || { tail -n 20 "$L/$2.log"; echo "FAIL: $1 ($HOW)"; return 1; }
  if [ "$KIND" = emu ]; then
    local used
    used=$(grep -c 'nccl emulation: world rank [0-9]*: [1-9][0-9]* operations' "$L/$2.log")
    [ "$used" = "$n" ] || { echo "FAIL: $1: $used of $n ranks ran operations on (emulated) NCCL"; return 1; }
  fi
}
row_nccl() { # LAYOUT [bf16]: gpt2's, or LAYOUT-mixtral the tiny Mixtral's
  need_gpu || return $?
  local what="gpt2 $1"
  case $1 in *-mixtral) what="mixtral ${1%-mixtral}" ;; esac
  if [ "${2:-}" = bf16 ]; then
    nccl_run "nccl-$1-bf16" "nccl-$1-bf16" "$L/nccl-$1-bf16.json" &&
      cmp_losses "$1 bf16 on NCCL against the CPU target's fp32" "$R/nccl-$1-cpu.json" \
        "$L/nccl-$1-bf16.json" 2e-2 rel &&
      echo "all checks passed: $what bf16 on NCCL ($HOW) within 2e-2 of the CPU target's fp32 losses"
  else
    # d2 runs with --deterministic (NCCL pinned to Ring and Simple), t2 and
    # p2 with NCCL's own choice, as tests/gpu/run.sh's check_nccl.
    local det=()
    [ "$1" = d2 ] && det=(--deterministic)
    nccl_run "nccl-$1" "nccl-$1" "$L/nccl-$1.json" "${det[@]}" || return 1
    if [ "$KIND" = emu ] && [ "$1" = d2 ] && [ -z "${NCCL_ALGO:-}${NCCL_PROTO:-}" ]; then
      local saw n
      n=$(ranks_of "$P/nccl-$1")
      saw=$(grep -c 'nccl emulation: world rank .*NCCL_ALGO=Ring NCCL_PROTO=Simple$' "$L/nccl-$1.log")
      [ "$saw" = "$n" ] || { echo "FAIL: d2 --deterministic: $saw of $n ranks saw Ring and Simple"; return 1; }
    fi
    cmp_losses "$1${det:+ ${det[0]}} on NCCL against the CPU target" "$R/nccl-$1-cpu.json" "$L/nccl-$1.json" 1e-4 &&
      echo "all checks passed: $what${det:+ ${det[0]}} on NCCL ($HOW) has the CPU target's losses"
  fi
}
row_nccl_kill() {
  need_gpu || return $?
  local dir=$P/nccl-t2 n t0 dt rc limit=20
  kill_script "$L/kill-rank.sh" "$L/nccl-kill.json"
  n=$(ranks_of "$dir")
  rm -f "$L/nccl-kill.json"
  t0=$SECONDS
  timeout $((limit + 60)) bash -c "$(declare -f mpirun_job); mpirun_job $dir $(share_of "$n") $L/kill-rank.sh \
    $MTRAIN --steps 100000 --log-every 1 --timeout $limit --log-json $L/nccl-kill.json" >"$L/nccl-kill.log" 2>&1
  rc=$? dt=$((SECONDS - t0))
  tail -n 8 "$L/nccl-kill.log"
  [ "$rc" = 124 ] && { echo "FAIL: the job was still running $((limit + 60)) s after its start"; return 1; }
  [ "$rc" != 0 ] || { echo "FAIL: the job exited 0 with a rank killed"; return 1; }
  [ "$dt" -le $((limit + 45)) ] || { echo "FAIL: the job took $dt s to end (--timeout $limit)"; return 1; }
  echo "all checks passed: rank 1 killed, the job ended with status $rc after $dt s (--timeout $limit)"
}
row_epilogues() {
  need_gpu || return $?
  echo "fused GEMMs: $(cat "$R/gpt2-fused-gemms")"
  # The library's GELU may use an approximate tanh (tests/features/gpu/run.sh's EPI_TOL).
  train "$P/gpt2/rank0" "$L/epi.json" && train "$P/gpt2-noepi/rank0" "$L/noepi.json" &&
    cmp_losses "gpt2 fp32 epilogues against none" "$L/noepi.json" "$L/epi.json" 1e-4 rel &&
    echo "all checks passed: the fused epilogues give the unfused program's losses"
}
row_vector() {
  need_gpu || return $?
  local m out=""
  for m in gpt2 llama vector; do
    train "$P/$m-bf16/rank0" "$L/$m-on.json" || return 1
    SHARD_CUDA_VECTOR=0 train "$P/$m-bf16/rank0" "$L/$m-off.json" || return 1
    same_bits "$m bf16 vector loops on against off" "$L/$m-off.json" "$L/$m-on.json" || return 1
    train "$P/$m-bf16-vecmut/rank0" "$L/$m-mut.json" || return 1
    json_bits "$L/$m-mut.json" | cmp -s - <(json_bits "$L/$m-on.json") &&
      { echo "FAIL: $m: perturbing the bf16 vector stores changed nothing: the vector loops never ran"; return 1; }
    echo "$m bf16: $(cat "$R/$m-bf16-vector-stores") bf16 vector stores"
    out="$out $m"
  done
  echo "all checks passed: vector loops on and off give the same bits:$out"
}
graphs_run() { # PROG JSON LOG on|off [ARGS]
  rm -f "$2"
  "$1" --data "$DATA" --seed 1 --steps "$STEPS" --log-json "$2" --cuda-graphs "$4" "${@:5}" >"$3" 2>&1 ||
    { echo "FAIL: the GPU run with --cuda-graphs $4:"; tail -n 5 "$3"; return 1; }
}
row_graphs() {
  need_gpu || return $?
  local tag prog ref replays captured
  for tag in plain drop; do
    prog=$P/gpt2/rank0 ref=$R/gpt2-cpu.json
    [ $tag = drop ] && prog=$P/gpt2-drop/rank0 ref=$R/drop-cpu.json
    graphs_run "$prog" "$L/$tag-on.json" "$L/$tag-on.log" on || return 1
    graphs_run "$prog" "$L/$tag-off.json" "$L/$tag-off.log" off || return 1
    grep -q '^cuda graphs: replayed as graphs: forward, backward' "$L/$tag-on.log" ||
      { echo "FAIL: $tag: the log does not say forward and backward are replayed"; return 1; }
    replays=$(sed -n 's/^cuda graphs: \([0-9]*\) captured, \([0-9]*\) replays.*/\2/p' "$L/$tag-on.log")
    [ "${replays:-0}" -gt 0 ] || { echo "FAIL: $tag: no graph was replayed"; return 1; }
    grep -q 'plain launches (--cuda-graphs off): forward, backward' "$L/$tag-off.log" &&
      ! grep -q 'replays' "$L/$tag-off.log" || { echo "FAIL: $tag: --cuda-graphs off still ran graphs"; return 1; }
    echo "$tag: $(grep '^cuda graphs: [0-9]' "$L/$tag-on.log")"
    cmp_losses "$tag graphs on against off" "$L/$tag-off.json" "$L/$tag-on.json" 0 &&
      cmp_losses "$tag graphs on against the CPU target" "$ref" "$L/$tag-on.json" 1e-4 || return 1
  done
  # A pipeline stage's graph per stash slot (p=2), on against off.
  local n m
  n=$(ranks_of "$P/nccl-p2")
  for m in on off; do
    mpirun_job "$P/nccl-p2" "$(share_of "$n")" - --data "$DATA" --seed 1 --steps "$STEPS" \
      --log-json "$L/p2-$m.json" --cuda-graphs $m >"$L/p2-$m.log" 2>&1 ||
      { echo "FAIL: p2 with --cuda-graphs $m:"; tail -n 5 "$L/p2-$m.log"; return 1; }
  done
  captured=$(sed -n 's/^cuda graphs: \([0-9]*\) captured, \([0-9]*\) replays.*/\1 \2/p' "$L/p2-on.log")
  # shellcheck disable=SC2086
  set -- $captured
  [ "${1:-0}" -ge 4 ] && [ "${2:-0}" -gt 0 ] ||
    { echo "FAIL: p2: want a forward and a backward graph per stash slot, and replays (got: ${captured:-none})"; return 1; }
  cmp_losses "p2 graphs on against off" "$L/p2-off.json" "$L/p2-on.json" 0 &&
    cmp_losses "p2 graphs on against the CPU target's one rank" "$R/graphs-p2-one.json" "$L/p2-on.json" 1e-4 &&
    echo "all checks passed: graphs on and off give the same losses, with and without dropout, and on a pipeline stage"
}
row_grads() {
  need_gpu || return $?
  local m out=""
  [ -x "$W/bin/tptool" ] || { echo "SKIP: the kit has no tptool"; return 77; }
  for m in gpt2 llama; do
    # shellcheck disable=SC2086
    "$P/$m/rank0" $TRAIN --steps 1 --dump-grads "$L/$m.grads" || { echo "FAIL: $m GPU run"; return 1; }
    out="$out $m: $("$W/bin/tptool" cmp "$R/$m-cpu.grads" "$L/$m.grads" 1e-4)" || { echo "FAIL: $m gradients:$out"; return 1; }
  done
  echo "all checks passed:$out"
}
row_ckpt() {
  need_gpu || return $?
  local T="$TRAIN --lr-schedule constant"
  rm -rf "$L/ckpt-cuda"
  # GPU 5 steps, CPU 5 more; CPU's 5 steps (made at kit time), GPU 5 more.
  # shellcheck disable=SC2086
  "$P/gpt2/rank0" $T --steps 5 --save "$L/ckpt-cuda" --log-json "$L/ckpt-cuda.json" || { echo "FAIL: 5 steps on the GPU"; return 1; }
  # A checkpoint names the corpus it trained on; here it is the kit's copy.
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} "$P/gpt2-cpu/rank0" --resume "$L/ckpt-cuda" --data "$DATA" --steps "$STEPS" --quiet \
    --log-json "$L/ckpt-cuda.json" || { echo "FAIL: --resume on the CPU from the GPU's checkpoint"; return 1; }
  cmp_losses "cuda 5 steps, cpu 5 more" "$R/ckpt-ref.json" "$L/ckpt-cuda.json" 1e-4 || return 1
  cp "$R/ckpt-cpu.json" "$L/ckpt-cpu.json"
  rm -rf "$L/ckpt-cpu" && cp -r "$R/ckpt-cpu" "$L/ckpt-cpu"
  "$P/gpt2/rank0" --resume "$L/ckpt-cpu" --data "$DATA" --steps "$STEPS" --quiet --log-json "$L/ckpt-cpu.json" ||
    { echo "FAIL: --resume on the GPU from the CPU's checkpoint"; return 1; }
  cmp_losses "cpu 5 steps, cuda 5 more" "$R/ckpt-ref.json" "$L/ckpt-cpu.json" 1e-4 &&
    echo "all checks passed: checkpoints cross GPU->CPU and CPU->GPU"
}
row_sanitize_model() {
  need_gpu || return $?
  command -v compute-sanitizer >/dev/null || { echo "SKIP: compute-sanitizer not on PATH"; return 77; }
  local tool
  for tool in memcheck racecheck; do
    # shellcheck disable=SC2086
    compute-sanitizer --tool $tool --error-exitcode 1 "$P/gpt2/rank0" $TRAIN --steps 2 || { echo "FAIL: $tool"; return 1; }
  done
  echo "all checks passed: memcheck and racecheck on 2 steps of the tiny GPT-2"
}
row_recompute() { # PRECISION
  need_gpu || return $?
  local prec=$1 sfx="" tol=1e-4 rel="" m p base
  [ "$prec" = bf16 ] && sfx=-bf16 tol=2e-2 rel=rel
  for m in gpt2 llama unfused; do
    train "$P/$m$sfx/rank0" "$L/$m.json" && train "$P/$m$sfx-noepi/rank0" "$L/$m-noepi.json" || return 1
    cmp_losses "$m $prec, GPU against CPU" "$R/$m-cpu.json" "$L/$m.json" $tol $rel || return 1
    for p in $(cat "$R/recompute-programs"); do
      case $p in "$m$sfx"-rc-*-noepi) ;; *) continue ;; esac
      base=${p%-noepi}
      if grep -qx "$base" "$R/recompute-same"; then
        # Only selective may leave a model with the fused attention as it is.
        case $base in *-rc-selective) [ "$m" != unfused ] ;; *) false ;; esac ||
          { echo "FAIL: $base: the program is the one without recomputation"; return 1; }
        echo "$base: the program is the one without recomputation (nothing to recompute)"
        continue
      fi
      train "$P/$base/rank0" "$L/$base.json" && train "$P/$p/rank0" "$L/$p.json" || return 1
      same_bits "$base --no-gemm-epilogue against none" "$L/$m-noepi.json" "$L/$p.json" &&
        cmp_losses "$base against none" "$L/$m.json" "$L/$base.json" $([ $prec = bf16 ] && echo 2e-2 || echo 1e-4) rel &&
        cmp_losses "$base, GPU against CPU" "$R/$m-cpu.json" "$L/$base.json" $tol $rel || return 1
    done
  done
  echo "all checks passed: --recompute selective and full ($prec) train the losses without it"
}
row_dropout() {
  need_gpu || return $?
  train "$P/gpt2-drop/rank0" "$L/drop.json" && train "$P/gpt2-drop-full/rank0" "$L/drop-full.json" &&
    train "$P/gpt2-drop-bf16/rank0" "$L/drop-bf16.json" || return 1
  cmp_losses "gpt2 dropout 0.1, GPU against CPU" "$R/drop-cpu.json" "$L/drop.json" 1e-4 &&
    same_bits "gpt2 dropout 0.1 --recompute full against none" "$L/drop.json" "$L/drop-full.json" &&
    cmp_losses "gpt2 dropout 0.1 bf16 GPU against fp32 CPU" "$R/drop-cpu.json" "$L/drop-bf16.json" 2e-2 rel &&
    echo "all checks passed: dropout 0.1 on the GPU has the CPU target's masks, recomputed too"
}
row_accum() {
  need_gpu || return $?
  local m
  for m in gpt2 llama; do
    train "$P/$m/rank0" "$L/gb4-$m.json" --global-batch 4 &&
      cmp_losses "$m --global-batch 4 (2 microbatches), GPU against CPU" "$R/gb4-$m-cpu.json" "$L/gb4-$m.json" 1e-4 ||
      return 1
  done
  echo "all checks passed: gradient accumulation over 2 microbatches has the CPU target's losses"
}

# ------------------------------------------------------------ speed rows
WARM=${BENCH_WARMUP:-2} BSTEPS=${BENCH_STEPS:-5}
[ "$QUICK" = 1 ] && WARM=${BENCH_WARMUP:-1} BSTEPS=${BENCH_STEPS:-2}
# run_ours DIR [ARGS...]: WARM + BSTEPS steps (RUN_STEPS overrides), the
# process's GPU memory sampled; prints "tokens_per_s max_mem_MiB".
run_ours() {
  local dir=$1 pid mem j=$L/$(basename "$1").json
  shift
  rm -f "$j"
  "$dir/rank0" --data "$DATA" --steps "${RUN_STEPS:-$((WARM + BSTEPS))}" --seed 1 --quiet --log-json "$j" "$@" \
    >"$j.log" 2>&1 &
  pid=$!
  mem=$(gpu_mem_peak "$pid")
  wait "$pid" || { echo "FAIL: $(tail -n 3 "$j.log")" >&2; return 1; }
  sed 's/.*"step":\([0-9]*\).*"tokens_per_s":\([^,}]*\).*/\1 \2/' "$j" | awk -v w="$WARM" '$1 > w { print $2 }' |
    sort -g | awk -v mem="$mem" '{ v[NR] = $1 } END { if (NR) printf "%.0f %d\n", v[int((NR + 1) / 2)], mem }'
}
shape_of() { awk -v n="$1" '$1 == n { $1 = ""; print substr($0, 2) }' "$R/speed-shapes"; }
def() { echo "$1" | sed -n "s/.*-D $2=\([0-9]*\).*/\1/p" | tail -n 1; }
row_speed() { # NAME
  need_gpu || return $?
  local s l h heads b seq V fpt got tps mem mfu note="" mode tg r
  s=$(shape_of "$1")
  l=$(def "$s" layers) h=$(def "$s" hidden) heads=$(def "$s" heads) b=$(def "$s" batch)
  seq=$(def "$s" seq) V=$(def "$s" vocab)
  fpt=$(awk -v l="$l" -v h="$h" -v s="$seq" -v V="$V" \
    'BEGIN { printf "%.6e", 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)) }')
  echo "GPT-2 $1: l=$l h=$h heads=$heads batch=$b seq=$seq vocab=$V, bf16, $WARM warm-up + $BSTEPS timed steps"
  got=$(run_ours "$P/bench-$1") && [ -n "$got" ] || { echo "FAIL: ours"; return 1; }
  # shellcheck disable=SC2086
  set -- $got
  tps=$1 mem=$2
  mfu=$(awk -v t="$tps" -v f="$fpt" -v p="${PEAK:-989}" 'BEGIN { printf "%.1f%%", 100 * t * f / (p * 1e12) }')
  echo "ours: $tps tokens/s, MFU $mfu of ${PEAK:-989} TFLOP/s, $mem MiB"
  SPEED_NOTE="ours $tps tok/s, MFU $mfu"
  if [ "$KIND" = emu ]; then
    SPEED_NOTE="$SPEED_NOTE (emulator kit: the tiny shape, not a speed)"
  elif LD_LIBRARY_PATH=$PY_LD_LIBRARY_PATH python3 -c "import torch" 2>/dev/null; then
    for mode in eager compile; do
      tg=$(LD_LIBRARY_PATH=$PY_LD_LIBRARY_PATH python3 "$K/torch_gpt2.py" --mode $mode --layers "$l" --hidden "$h" --heads "$heads" --batch "$b" \
        --seq "$seq" --vocab "$V" --warmup "$WARM" --steps "$BSTEPS" 2>"$L/torch-$mode.err" | tail -n 1 |
        sed 's/.*"tokens_per_s": \([^,]*\),.*/\1/')
      case $tg in [0-9]*)
        r=$(awk -v a="$tps" -v b="$tg" 'BEGIN { printf "%.2f", a / b }')
        echo "torch $mode: $tg tokens/s (ours / $mode $r)"
        SPEED_NOTE="$SPEED_NOTE, torch $mode $tg (x$r)" ;;
        *) echo "torch $mode failed: $(tail -n 2 "$L/torch-$mode.err")"; SPEED_NOTE="$SPEED_NOTE, torch $mode failed" ;;
      esac
    done
  else
    SPEED_NOTE="$SPEED_NOTE, no PyTorch (python3 -c 'import torch' fails)"
  fi
  echo "all checks passed: $SPEED_NOTE"
}
# Every flash attention shape (head sizes 16, 64, 128, causal or not, kv
# groups, more key tiles than the backward's dq splits) against the CPU
# twin: the largest error of the backward's dq, dk and dv over them.
row_attention_flash() {
  need_gpu || return $?
  "$W/bin/test_kernels_cuda" --attention >"$L/attention-flash.txt" 2>&1 || { grep -E "FAIL|failed" "$L/attention-flash.txt" | tail -n 3; return 1; }
  echo "all checks passed: $(awk '/^attention_flash_bwd/ { for (i = 1; i < NF; i++) if ($i == "err" && $(i + 1) + 0 > m) m = $(i + 1) + 0 }
    END { printf "largest flash backward error %.2e", m }' "$L/attention-flash.txt")"
}
row_attention() {
  need_gpu || return $?
  [ "$KIND" = emu ] && { echo "SKIP: emulator kit: attention at GPT-2 small's shape (b 8, s 1024) is hours on the CPU emulator"; return 77; }
  "$W/bin/test_kernels_cuda" --bench-attention >"$L/attention.txt" 2>&1 || { tail -n 3 "$L/attention.txt"; return 1; }
  echo "all checks passed: $(sed -n 's/^attention_bench //p' "$L/attention.txt")"
}
row_graph_bench() {
  need_gpu || return $?
  local mode got on off
  for mode in on off; do
    got=$(RUN_STEPS=$([ "$KIND" = emu ] && echo 6 || echo 40) run_ours "$P/bench-graphs" --cuda-graphs $mode) &&
      [ -n "$got" ] || { echo "FAIL: --cuda-graphs $mode"; return 1; }
    [ $mode = on ] && on=${got% *} || off=${got% *}
  done
  echo "all checks passed: graphs on $on tok/s, off $off tok/s, on/off $(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.2f", a / b }')"
}
row_many_ranks() {
  need_gpu || return $?
  local l n s one="" out="" gb seq
  read -r gb seq <"$R/multi-global-batch"
  for l in one t2 p2 d2; do
    n=$(ranks_of "$P/multi-$l")
    rm -f "$L/multi-$l.json"
    if [ "$n" = 1 ]; then
      "$P/multi-$l/rank0" --data "$DATA" --steps $((WARM + BSTEPS)) --seed 1 --quiet --log-json "$L/multi-$l.json" \
        >"$L/multi-$l.log" 2>&1
    else
      mpirun_job "$P/multi-$l" "$(share_of "$n")" - --data "$DATA" --steps $((WARM + BSTEPS)) --seed 1 --quiet \
        --log-json "$L/multi-$l.json" --dp-stats >"$L/multi-$l.log" 2>&1
    fi || { tail -n 10 "$L/multi-$l.log"; echo "FAIL: $l"; return 1; }
    s=$(sed 's/.*"step":\([0-9]*\).*"tokens_per_s":\([^,}]*\).*/\1 \2/' "$L/multi-$l.json" |
      awk -v w="$WARM" '$1 > w { print $2 }' | sort -g |
      awk -v tok=$((gb * seq)) '{ v[NR] = $1 } END { if (NR) printf "%.4f", tok / v[int((NR + 1) / 2)] }')
    [ -z "$one" ] && one=$s
    echo "$l: $n rank(s), $s s/step, /one $(awk -v a="$s" -v b="$one" 'BEGIN { printf "%.2f", a / b }')"
    out="$out $l $s"
  done
  local how="ranks sharing the GPU"
  [ "$NGPUS" -ge 2 ] && how="own GPUs"
  [ "$KIND" = emu ] && how="the CPU emulator"
  echo "all checks passed: s/step:$out ($how)"
}

# Every row: tier, name, function and arguments, limit in seconds on one
# H200 (scaled for the emulator's kit). Tier 1 is first light: if the
# kernels or the device layer fail, tier 2's answers mean little.
ROWS_TABLE=(
  "1|kernels|row_kernels|90"
  "1|device|row_device|30"
  "1|gpt2 fp32|row_fp32 gpt2|20"
  "1|llama fp32|row_fp32 llama|20"
  "1|gpt2 bf16|row_bf16 gpt2|20"
  "1|llama bf16|row_bf16 llama|20"
  "1|mixtral fp32|row_fp32 mixtral|20"
  "1|mixtral bf16|row_bf16 mixtral|20"
  "1|nccl t2|row_nccl t2|45"
  "1|speed gpt2 medium|row_speed medium|90"
  "2|gpt2 epilogues|row_epilogues|20"
  "2|vector loops|row_vector|40"
  "2|cuda graphs|row_graphs|45"
  "2|gradients 1 step|row_grads|20"
  "2|checkpoint crossing|row_ckpt|30"
  "2|recompute|row_recompute fp32|60"
  "2|recompute bf16|row_recompute bf16|45"
  "2|dropout|row_dropout|20"
  "2|accumulation|row_accum|20"
  "2|deepseek_moe fp32|row_fp32 deepseek_moe|20"
  "2|deepseek_moe bf16|row_bf16 deepseek_moe|20"
  "2|nccl p2|row_nccl p2|30"
  "2|nccl d2|row_nccl d2|30"
  "2|nccl t2 bf16|row_nccl t2 bf16|30"
  "2|nccl p2 bf16|row_nccl p2 bf16|30"
  "2|nccl d2 bf16|row_nccl d2 bf16|30"
  "2|nccl d2 ep2 mixtral|row_nccl d2ep2-mixtral|30"
  "2|nccl rank killed|row_nccl_kill|90"
  "2|attention flash shapes|row_attention_flash|30"
  "2|attention bench|row_attention|30"
  "2|speed gpt2 small|row_speed small|45"
  "2|speed gpt2 1.3B|row_speed 1.3B|60"
  "2|graphs bench|row_graph_bench|30"
  "2|many ranks|row_many_ranks|90"
  "2|kernels memcheck|row_sanitize_kernels memcheck|90"
  "2|kernels racecheck|row_sanitize_kernels racecheck|90"
  "2|model sanitizer|row_sanitize_model|90"
)
# The quick kit (scripts/gpu-kit.sh --quick, ctest's gpu/kit_rehearsal)
# runs a few of tier 1's rows: one of each kind.
QUICK_ROWS="|kernels|device|gpt2 fp32|llama bf16|nccl t2|speed gpt2 medium|"

slug() { echo "$1" | tr ' .' '__'; }

if [ "${1:-}" = --row ]; then
  setup
  for r in "${ROWS_TABLE[@]}"; do
    IFS='|' read -r tier name fn limit <<<"$r"
    [ "$name" = "$2" ] || continue
    L=$W/rows/$(slug "$name")
    rm -rf "$L" && mkdir -p "$L"
    cd "$L" || exit 1
    # shellcheck disable=SC2086
    $fn
    exit $?
  done
  echo "unknown row $2"
  exit 2
fi

case ${1:-} in
  1 | 2) TIERS=$1 ;;
  all) TIERS="1 2" ;;
  *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac

setup
FAILED=0
echo "== GPU kit ($KIND, $ARCH), built $BUILT"
echo "   machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)"
echo "   NVIDIA libraries:$FOUND"
echo "   unpacked in $W; nvcc: $(command -v nvcc || echo none); compute-sanitizer: $(command -v compute-sanitizer || echo none);" \
  "python3 torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
[ "$KIND" = emu ] && echo "   emulator kit (the rehearsal): the programs run on the CPU emulator; limits x$SCALE"
for tier in $TIERS; do
  budget=$([ "$tier" = 1 ] && echo $TIER1_S || echo $TIER2_S)
  t_start=$SECONDS pass=0 fail=0 skip=0 json=""
  echo
  echo "== tier $tier: at most ${budget}s"
  printf '%-22s %-5s %6s  %s\n' row result sec note
  for r in "${ROWS_TABLE[@]}"; do
    IFS='|' read -r t name fn limit <<<"$r"
    [ "$t" = "$tier" ] || continue
    limit=$((limit * SCALE))
    left=$((budget - (SECONDS - t_start)))
    log=$W/logs/$(slug "$name").log
    mkdir -p "$W/logs"
    t0=$SECONDS
    if [ "$QUICK" = 1 ] && [ "${QUICK_ROWS#*|"$name"|}" = "$QUICK_ROWS" ]; then
      res=SKIP note="not in the quick kit (scripts/gpu-kit.sh --quick)"
    elif [ "$left" -lt $((limit / 3 < 10 ? 10 : limit / 3)) ]; then
      res=SKIP note="no time left of tier $tier's ${budget}s ($left s left, the row may take $limit s)"
    else
      [ "$limit" -gt "$left" ] && limit=$left
      timeout -k 5 "$limit" "$0" --row "$name" >"$log" 2>&1
      rc=$?
      case $rc in
        0) res=PASS note=$(grep -m1 -E '^all checks passed|checks, [0-9]+ failed|ERROR SUMMARY' "$log" | sed 's/^all checks passed: //') ;;
        77) res=SKIP note=$(grep -m1 '^SKIP' "$log" | sed 's/^SKIP: //') ;;
        124 | 137) res=FAIL note="stopped after ${limit}s (its limit, or the tier's deadline)" ;;
        *) res=FAIL note="exit $rc: $(grep -m1 -E '^FAIL|first mismatch|checks, [0-9]+ failed|ERROR SUMMARY' "$log")" ;;
      esac
    fi
    dt=$((SECONDS - t0))
    printf '%-22s %-5s %6s  %s\n' "$name" "$res" "$dt" "${note:0:160}"
    case $res in PASS) pass=$((pass + 1)) ;; SKIP) skip=$((skip + 1)) ;; FAIL) fail=$((fail + 1)) FAILED=1 ;; esac
    if [ "$res" = FAIL ]; then
      echo "   --- the last lines of $log:"
      tail -n 15 "$log" | sed 's/^/   | /'
      [ -n "${OUT:-}" ] && mkdir -p "$OUT/gpu-logs" && cp "$log" "$OUT/gpu-logs/" &&
        cp -r "$W/rows/$(slug "$name")" "$OUT/gpu-logs/$(slug "$name").files" 2>/dev/null
    fi
    esc=$(printf '%s' "$note" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\000-\037')
    json="$json${json:+,
}  {\"tier\": $tier, \"row\": \"$name\", \"result\": \"$res\", \"seconds\": $dt, \"note\": \"$esc\"}"
  done
  total=$((SECONDS - t_start))
  summary="tier $tier: $pass PASS, $fail FAIL, $skip SKIP in ${total}s (limit ${budget}s) on ${KIND} kit"
  echo "$summary"
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    printf '{"kit": "%s", "built": "%s", "libraries": "%s", "tier": %s, "seconds": %s, "limit": %s,\n "summary": "%s",\n "rows": [\n%s\n]}\n' \
      "$KIND" "$BUILT" "$(echo "$FOUND" | sed 's/"/\\"/g')" "$tier" "$total" "$budget" "$summary" "$json" >"$OUT/gpu-tier$tier.json"
  fi
done
exit $FAILED
