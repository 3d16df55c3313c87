#!/bin/sh
# mpirun.sh MPIEXEC NP PROGRAM [ARGS...]: runs PROGRAM on NP ranks of this
# machine with the launch recipe of runtime/comm.h:
# - as root, the two variables without which Open MPI refuses to start;
# - --oversubscribe, since NP may exceed the cores (harmless otherwise);
# - mpi_yield_when_idle, so that waiting ranks do not spin on the cores the
#   others (or other jobs on the machine) compute on;
# - --bind-to none, so that a rank's OpenMP threads are not all pinned to
#   one core, and OMP_NUM_THREADS = max(1, cores / NP) for each rank.
set -e
mpiexec=$1
np=$2
shift 2
cores=$(nproc 2>/dev/null || echo 1)
threads=$((cores / np))
[ "$threads" -ge 1 ] || threads=1
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMP_NUM_THREADS=$threads
exec "$mpiexec" -np "$np" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
  -x OMP_NUM_THREADS "$@"
