#!/bin/bash
# fail.sh MPIRUN_SH MPIEXEC NP PATTERN PROGRAM [ARGS...]: runs PROGRAM on NP
# ranks (through mpirun.sh) and passes when the job fails as it should: mpirun
# exits non-zero, within LIMIT (10) seconds, and its output matches PATTERN
# (grep -E), the failing rank's message. A hang is killed after 20 seconds
# and fails the test.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
mpirun_sh=$1
mpiexec=$2
np=$3
pattern=$4
shift 4
limit=10
out=$WORK/out.txt
start=$(date +%s%N)
rc=0
timeout -k 5 20 sh "$mpirun_sh" "$mpiexec" "$np" "$@" >"$out" 2>&1 || rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
status=0
if [ "$rc" -eq 0 ]; then
  echo "FAIL: mpirun exited 0; a failing rank must make it fail"
  status=1
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: the job hung and was killed after 20 s"
  status=1
fi
if ! grep -Eq -- "$pattern" "$out"; then
  echo "FAIL: the output does not match: $pattern"
  status=1
fi
if [ "$ms" -gt $((limit * 1000)) ]; then
  echo "FAIL: the job took $ms ms to come down (limit $limit s)"
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "--- output of: $* on $np ranks (exit $rc)"
  cat "$out"
  exit 1
fi
echo "ok: '$*' on $np ranks: mpirun exit $rc after $ms ms, output has /$pattern/"
