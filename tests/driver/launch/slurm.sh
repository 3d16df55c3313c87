#!/bin/bash
# slurm.sh TPTOOL: a real one-node Slurm on this machine.
# Starts munged, slurmctld and slurmd (Debian's slurm-wlm) from a
# configuration written into the test's folder (their state, logs, sockets
# and ports are the test's own; nothing outside it changes), then runs the
# t=2, p=2 programs (4 ranks, two programs) under srun and compares their
# losses with one rank's:
#   1. `shardc run --launcher srun` (srun allocates the job itself);
#   2. DIR/launch.sh srun;
#   3. DIR/launch.sh in an sbatch job (srun is its default there);
#   4. `shardc run` without --launcher under salloc (srun is its default).
# Each run must have started a Slurm job step (slurmd's log) and must give
# the one-rank losses. The daemons are stopped at the end, on failure too;
# every Slurm command runs under a time limit. Where Slurm cannot run here
# (not installed, not root, a daemon that does not come up) the test says
# why and exits 77 (a skip).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TOOL=$(cd "$OLDPWD" && realpath "$1")
skip() {
  echo "SKIP: $*"
  exit 77
}
for d in munged slurmctld slurmd srun sbatch salloc scontrol sinfo; do
  command -v $d >/dev/null 2>&1 ||
    skip "$d is not installed (Debian's slurm-wlm; scripts/install-deps.sh installs it)"
done
[ "$(id -u)" = 0 ] || skip "slurmd needs root to start job steps"
. "$ROOT/tests/driver/launch/lib.sh"

# ------------------------------------------------------------ the cluster
S=$WORK/slurm
mkdir -p "$S/state" "$S/spool" "$S/munge"
chmod 711 "$S" "$S/munge"
host=$(hostname -s)
# GNU nproc counts OMP_NUM_THREADS, which checks.sh sets: ask the system.
cpus=$(getconf _NPROCESSORS_ONLN)
# Ports of our own, apart from a system Slurm's (6817, 6818) and from
# another run of this test.
port=$((20000 + $$ % 20000))
cat >"$S/slurm.conf" <<EOF
ClusterName=shardc-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$S/slurm.conf"
unset SLURM_JOB_ID SLURM_JOBID SLURM_NTASKS SLURM_MPI_TYPE

running() {
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* ([^)]*) [ZX]' "/proc/$1/stat"
}
pid_of() { cat "$S/$1.pid" 2>/dev/null || true; }

# Stops what we started, by the ids in the pid files: scontrol asks both
# Slurm daemons to end, then whatever still runs after 10 s is killed.
stop_cluster() {
  timeout 10 scontrol shutdown >/dev/null 2>&1
  for d in slurmctld slurmd munged; do
    p=$(pid_of $d)
    [ -n "$p" ] || continue
    [ $d != munged ] || kill "$p" 2>/dev/null
    i=0
    while running "$p" && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
    running "$p" && kill -9 "$p" 2>/dev/null
  done
}
# Under set +e: a daemon already gone is no failure here.
trap 'set +e; stop_cluster; cd /; rm -rf "$WORK"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Shows a daemon's log and skips: the cluster would not come up.
no_cluster() {
  echo "$1"
  for f in "$S"/*.log "$S/munge/log"; do [ -f "$f" ] && { echo "--- $f"; tail -8 "$f"; }; done
  skip "$1"
}

dd if=/dev/urandom of="$S/munge/key" bs=1024 count=1 2>/dev/null
chmod 400 "$S/munge/key"
timeout 20 munged --force --socket="$S/munge/socket" --key-file="$S/munge/key" \
  --log-file="$S/munge/log" --pid-file="$S/munged.pid" --seed-file="$S/munge/seed" ||
  no_cluster "munged did not start"
timeout 20 slurmctld -i || no_cluster "slurmctld did not start"
timeout 20 slurmd || no_cluster "slurmd did not start"
i=0
until [ "$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null)" = idle ]; do
  i=$((i + 1))
  [ $i -lt 60 ] || no_cluster "node $host did not become idle in 30 s: $(timeout 5 sinfo -h -o '%t %E' 2>&1)"
  sleep 0.5
done
ok "Slurm $(srun --version | cut -d' ' -f2): node $host idle, $cpus CPUs; srun --mpi=list:" \
  "$(srun --mpi=list 2>&1 | sed -n 's/^[[:space:]]\{1,\}//p' | paste -sd' ' -)"

# --------------------------------------------------------------- the runs
reference
P="--tp 2 --pp 2 --global-batch $GB"
steps() { grep -c 'launch task StepId=[0-9]*\.0 ' "$S/slurmd.log" || true; }

# slurm_run WHAT LOG COMMAND...: runs the command (2 minutes at most); a
# job step must have started and the losses must be the one rank's.
slurm_run() {
  what=$1 log=$2
  shift 2
  before=$(steps)
  timeout 120 "$@" >run.out 2>&1 </dev/null || { fail "$what: exit $?"; tail -8 run.out; }
  after=$(steps)
  if [ "$after" -gt "$before" ]; then
    ok "$what: ran as Slurm job step $(grep 'launch task StepId=' "$S/slurmd.log" | tail -1 |
      sed 's/.*StepId=\([^ ]*\).*/\1/')"
  else
    fail "$what: no Slurm job step was started"
    tail -8 run.out
  fi
  compare "$what" "$log"
}

# Log names with a space and a quote: srun's --multi-prog file quotes them.
# The job's folder is kept, to look at its --multi-prog file.
export SHARDC_JOB_KEEP=1
# shellcheck disable=SC2086
slurm_run "shardc run --launcher srun (4 ranks)" "run 1's.json" \
  "$SHARDC" run "$M" $DEFS --vocab-multiple 8 $P --out prog-4 --launcher srun $TRAIN \
  --log-json "run 1's.json"
unset SHARDC_JOB_KEEP
conf=$(find prog-4 -name multi-prog.conf | head -1)
if [ -n "$conf" ] && [ "$(wc -l <"$conf")" = 2 ]; then
  ok "srun --multi-prog file: $(sed "s|$WORK/||" "$conf" | cut -c1-50 | paste -sd'|' -)..."
else
  fail "shardc run --launcher srun left no two-line --multi-prog file"
fi
rm -rf prog-4/job-*

# shellcheck disable=SC2086
slurm_run "launch.sh srun (4 ranks)" "sh 2's.json" prog-4/launch.sh srun $TRAIN \
  --log-json "sh 2's.json"

cat >batch.sh <<EOF
#!/bin/sh
exec "$WORK/prog-4/launch.sh" $TRAIN --log-json batch.json
EOF
# A batch job of one task, as a user submits it; launch.sh's srun
# overcommits its CPU with the 4 ranks.
slurm_run "sbatch launch.sh (4 ranks)" batch.json sbatch --wait -n 1 -o "$WORK/batch.out" batch.sh
[ -s batch.out ] && tail -2 batch.out | sed 's/^/      /'

# shellcheck disable=SC2086
slurm_run "salloc shardc run, srun by default (4 ranks)" salloc.json salloc -n 1 \
  "$SHARDC" run "$M" $DEFS --vocab-multiple 8 $P --out prog-4 $TRAIN --log-json salloc.json
# A rank killed under srun ends the job with shardc's message naming it
# (the ranks report to shardc from srun's job step as from mpirun's).
export SHARDC_JOB_KEEP=1
# shellcheck disable=SC2086
timeout 120 "$SHARDC" run "$M" $DEFS --vocab-multiple 8 $P --out prog-4 --launcher srun \
  --data data.bin --steps 100000 --global-batch $GB --timeout 20 >kill.out 2>&1 </dev/null &
job=$!
unset SHARDC_JOB_KEEP
i=0 victim=
while [ -z "$victim" ] && [ $i -lt 300 ]; do
  sleep 0.2
  i=$((i + 1))
  rec=$(find prog-4 -path '*/job-*/rank-2' | head -1)
  [ -n "$rec" ] && grep -q '^action step' "$rec" && victim=$(sed -n 's/^pid //p' "$rec")
done
start=$(date +%s)
[ -n "$victim" ] && { kill -9 "$victim" || true; }
st=0
wait $job || st=$?
secs=$(($(date +%s) - start))
msg=$(grep 'shardc: error: rank' kill.out || true)
if [ -n "$victim" ] && [ $st = 1 ] && echo "$msg" | grep -q 'rank 2 (tp=0 pp=1 dp=0, program stage1) died'; then
  ok "rank 2 killed under srun: exit 1 after ${secs}s: $msg"
else
  fail "rank 2 killed under srun (pid ${victim:-none}): exit $st after ${secs}s"
  tail -8 kill.out
fi
finish
