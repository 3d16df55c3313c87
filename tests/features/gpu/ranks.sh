# shellcheck shell=bash
# Starting a compiled model's rank programs on this machine's GPUs, for
# tests/features/gpu/run.sh and bench/gpu.sh (sourced by both; defines functions
# and NGPUS only).
#
# With fewer GPUs than ranks, the ranks share them: NCCL refuses two ranks
# on one GPU unless each looks like its own host (NCCL_HOSTID) and talks
# over sockets on loopback (no peer-to-peer, no shared memory, no
# InfiniBand), which is slow but moves the same bytes through the same
# code.

NGPUS=$( (nvidia-smi -L 2>/dev/null || true) | { grep -c '^GPU' || true; })

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

# kill_script FILE JSON: writes FILE, a script that runs its arguments (a
# rank) and kills it (SIGKILL) once the run has logged two steps to JSON.
kill_script() {
  cat >"$1" <<KILL
# Runs the rank, then kills it (SIGKILL) once the run has logged two steps.
"\$@" & pid=\$!
for _ in \$(seq 600); do
  [ "\$(wc -l <"$2" 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 0.1
done
kill -9 \$pid
wait \$pid
KILL
}

# gpu_mem_peak PID: the most GPU memory (MiB) nvidia-smi shows for process
# PID while it runs (0 without nvidia-smi); returns when PID has ended.
gpu_mem_peak() {
  local mem=0 m
  while kill -0 "$1" 2>/dev/null; do
    m=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
      awk -F', *' -v p="$1" '$1 == p { print $2 }')
    [ -n "$m" ] && [ "$m" -gt "$mem" ] && mem=$m
    sleep 0.2
  done
  echo "$mem"
}
