#!/bin/sh
# The CUDA target's multi-rank programs on the CPU emulator: the tiny GPT-2
# of tests/gpu/run.sh at t=2, p=2 and d=2, compiled with --target cuda, its
# rank programs built as C++ against the emulated CUDA runtime and kernels
# and the NCCL stand-in (shard_rt_cuda_nccl_emu: runtime/comm_nccl.c on
# tests/emu/nccl_mpi.c), run under mpirun; their losses over 10 steps must
# be the CPU target's for the same layout (fp32, 1e-4), which must be one
# rank's. The rows "nccl t2/p2/d2" of tests/gpu/run.sh, without a GPU.
#
#   nccl_programs.sh SHARDC SOURCE_DIR DATA CXX "LINK..." [LAYOUT...]
#
# LAYOUT: t2, p2, d2 (the default list), t2p2 or t2p2d2.
# SHARDC must be able to write multi-rank CUDA programs (a build with nvcc
# and NCCL); LINK is the libraries, in order, and the link flags.
set -u
SHARDC=$1 SRC=$2 DATA=$3 CXX=$4 LINK=$5
shift 5
LAYOUTS=${*:-t2 p2 d2}
. "$SRC/tests/common/checks.sh"
TINY="-D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D layers=2 -D batch=2"
# --no-shuffle as in the equivalence grid: shuffled orders are not the
# same sequences per step across layouts. --global-batch 4 at run time
# too: a program's own default is batch x d sequences (2 for one rank and
# for t=2), whatever the compile's --global-batch said.
TRAIN="--data $DATA --seed 1 --quiet --steps 10 --no-shuffle --global-batch 4"
# The compile options of a layout; each trains 4 sequences a step.
opts_of() {
  case $1 in
  t2) echo "--tp 2 --global-batch 4" ;;
  p2) echo "--pp 2 --global-batch 4" ;;
  d2) echo "--dp 2 --global-batch 4" ;;
  t2p2) echo "--tp 2 --pp 2 --global-batch 4" ;;
  t2p2d2) echo "--tp 2 --pp 2 --dp 2 --global-batch 4" ;;
  *) echo "--global-batch 4" ;;
  esac
}
T0=$(date +%s)

# cpu LAYOUT: the CPU target's programs, built by shardc.
cpu() {
  opts=$(opts_of "$1")
  # shellcheck disable=SC2086
  "$SHARDC" compile "$SRC/models/gpt2.shard" $TINY $opts -o "cpu_$1" >"cpu_$1.log" 2>&1 &&
    "$SHARDC" build "cpu_$1" >>"cpu_$1.log" 2>&1
}

# emu LAYOUT: the CUDA target's sources, each rank built as C++ on the emulator.
emu() {
  opts=$(opts_of "$1")
  # shellcheck disable=SC2086
  "$SHARDC" compile "$SRC/models/gpt2.shard" $TINY $opts --target cuda -o "emu_$1" \
    >"emu_$1.log" 2>&1 || return 1
  for cu in emu_$1/*.cu; do
    # shellcheck disable=SC2086
    $CXX -std=c++20 -O2 -fopenmp -ffp-contract=off -DSHARD_CUDA_EMU \
      -Wno-missing-field-initializers -I "$SRC/tests/emu/include" -I "$SRC" \
      -I "$SRC/kernels/cuda" -o "${cu%.cu}" -x c++ "$cu" -x none \
      -Wl,--start-group $LINK -Wl,--end-group \
      >>"emu_$1.log" 2>&1 || return 1
  done
}

# job DIR LOG [MPIRUN_OPTION...]: every rank of DIR's manifest under
# mpirun (one block per rank, each with the options); with KILL set, rank
# 1 runs through $KILL and TRAIN is KILL_TRAIN.
job() {
  dir=$1 log=$2
  shift 2
  opt="$*" r=0
  set --
  for prog in $(sed -n 's/.*"program":[[:space:]]*"\([^"]*\)".*/\1/p' "$dir/manifest.json"); do
    [ $# -gt 0 ] && set -- "$@" :
    wrap='' train=$TRAIN
    [ -n "${KILL:-}" ] && train=$KILL_TRAIN && [ $r = 1 ] && wrap="sh $KILL"
    # shellcheck disable=SC2086
    set -- "$@" -np 1 $opt $wrap "$dir/$prog" $train --log-json "$log"
    r=$((r + 1))
  done
  # comm.h's launch recipe (tests/comm/mpirun.sh), for several programs.
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  timeout -k 5 600 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    -x OMP_NUM_THREADS "$@"
}

# close WHAT REF OTHER: every step's loss within 1e-4 of REF's.
close() {
  sed 's/.*"step":\([0-9]*\).*"loss":\([^,}]*\).*/\1 \2/' "$2" >ref.sl
  sed 's/.*"step":\([0-9]*\).*"loss":\([^,}]*\).*/\1 \2/' "$3" >got.sl
  msg=$(awk -v what="$1" 'NR == FNR { ref[$1] = $2; next } { got[$1] = $2 }
    END { worst = 0; n = 0
      for (s in ref) { if (!(s in got)) { print what ": step " s " missing"; exit 1 }
        d = got[s] - ref[s]; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
      printf "%s: %d steps, largest |loss difference| %.2e (limit 1e-4)", what, n, worst
      exit n != 10 || worst > 1e-4 }' ref.sl got.sl)
  if [ $? -eq 0 ]; then ok "$msg"; else fail "$msg"; fi
}

cpu one || { fail "one rank: the CPU target does not build"; tail -5 cpu_one.log; finish; }
# shellcheck disable=SC2086
./cpu_one/rank0 $TRAIN --log-json one.json >one.log 2>&1 || { fail "one rank: the run"; finish; }
for l in $LAYOUTS; do
  cpu "$l" || { fail "$l: the CPU target does not build"; tail -5 "cpu_$l.log"; continue; }
  emu "$l" || { fail "$l: the CUDA target does not build on the emulator"; tail -5 "emu_$l.log"; continue; }
  n=$(grep -c '"rank":' "emu_$l/manifest.json")
  job "cpu_$l" "cpu_$l.json" >"cpu_$l.run" 2>&1 || { fail "$l: the CPU run"; tail -5 "cpu_$l.run"; continue; }
  t=$(date +%s)
  job "emu_$l" "emu_$l.json" -x SHARD_NCCL_EMU_STATS=1 >"emu_$l.run" 2>&1 ||
    { fail "$l: the CUDA run on the emulator"; tail -5 "emu_$l.run"; continue; }
  # Every rank's NCCL stand-in says how many operations it ran.
  used=$(grep -c 'nccl emulation: world rank [0-9]*: [1-9][0-9]* operations' "emu_$l.run")
  if [ "$used" = "$n" ]; then
    ok "$l: $n CUDA rank programs ran 10 steps on the emulator in $(($(date +%s) - t)) s," \
      "each with operations on NCCL: $(grep -o 'world rank 0: [0-9]* operations' "emu_$l.run")"
  else
    fail "$l: $used of $n ranks ran operations on NCCL"; grep 'nccl emulation' "emu_$l.run"
  fi
  close "$l: CPU target against one rank" one.json "cpu_$l.json"
  close "$l: CUDA target on the emulator over NCCL against the CPU target" "cpu_$l.json" "emu_$l.json"
done
# tests/gpu/run.sh's "nccl rank killed": t=2, rank 1 killed (SIGKILL) once
# the run has logged two steps; the job must end, non-zero, naming it,
# well within its --timeout.
kill_rank() {
  limit=20
  cat >kill.sh <<KILL
"\$@" & pid=\$!
for _ in \$(seq 600); do
  [ "\$(wc -l <kill.json 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 0.1
done
kill -9 \$pid
wait \$pid
KILL
  t=$(date +%s)
  KILL=kill.sh KILL_TRAIN="$TRAIN --steps 100000 --log-every 1 --timeout $limit" \
    job emu_t2 kill.json >kill.run 2>&1
  rc=$? dt=$(($(date +%s) - t))
  if [ $rc != 0 ] && [ $rc != 124 ] && [ $dt -le $((limit + 30)) ] &&
    grep -Eq 'Process name: \[\[[0-9]+,[0-9]+\],1\]' kill.run; then
    ok "t2, rank 1 killed after $(wc -l <kill.json) steps: mpirun exit $rc after $dt s, naming rank 1"
  else
    fail "t2, rank 1 killed: exit $rc after $dt s (--timeout $limit)"; tail -8 kill.run
  fi
}
[ -f emu_t2.json ] && kill_rank
echo "$(($(date +%s) - T0)) s"
finish
