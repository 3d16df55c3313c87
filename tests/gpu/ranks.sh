# shellcheck shell=bash
# Starting a compiled model's rank programs on this machine's GPUs, for
# tests/gpu/run.sh and bench/gpu.sh (sourced by both; defines functions
# and NGPUS only).
#
# With fewer GPUs than ranks, the ranks share them: NCCL refuses two ranks
# on one GPU unless each looks like its own host (NCCL_HOSTID) and talks
# over sockets on loopback (no peer-to-peer, no shared memory, no
# InfiniBand), which is slow but moves the same bytes through the same
# code.

NGPUS=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU')

# How a layout of N ranks runs here: 0 on its own GPUs (or on the CPU
# emulator, GPU_EMU=1, whose NCCL stand-in needs no settings), 1 sharing them.
share_of() { [ -n "${GPU_EMU:-}" ] || [ "$1" -le "$NGPUS" ] && echo 0 || echo 1; }
ranks_of() { grep -c '"rank":' "$1/manifest.json"; }

# mpirun_job DIR SHARE KILL_SCRIPT ARGS...: starts every rank of DIR's
# manifest under mpirun (one -np 1 block per rank, MPMD), each through env:
# with SHARE=1 the ranks share the GPUs (the NCCL settings above); with a
# KILL_SCRIPT other than "-", rank 1 runs as `bash KILL_SCRIPT PROGRAM
# ARGS...` (which kills it at a moment of its choosing).
mpirun_job() {
  local dir=$1 share=$2 kill=$3 r=0 prog
  local -a cmd=() envs=()
  shift 3
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for prog in $(sed -n 's/.*"program":[[:space:]]*"\([^"]*\)".*/\1/p' "$dir/manifest.json"); do
    envs=(env OMP_NUM_THREADS=1)
    [ "$share" = 1 ] && envs+=(NCCL_HOSTID="shard-rank$r" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
                               NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo)
    [ ${#cmd[@]} -gt 0 ] && cmd+=(:)
    if [ "$kill" != - ] && [ $r = 1 ]; then
      cmd+=(-np 1 "${envs[@]}" bash "$kill" "$dir/$prog" "$@")
    else
      cmd+=(-np 1 "${envs[@]}" "$dir/$prog" "$@")
    fi
    r=$((r + 1))
  done
  mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 "${cmd[@]}"
}
