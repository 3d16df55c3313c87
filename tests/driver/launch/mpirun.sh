#!/bin/bash
# mpirun.sh TPTOOL: the launch.sh that `shardc compile` writes,
# run without Slurm. The t=2, p=2 programs (4 ranks, two programs) started
# by launch.sh under mpirun, on this machine and through a host file, and
# by `shardc run --hostfile`, must give the one-rank losses; the script is
# the same bytes when compiled again, and passes shellcheck where it is
# installed. Prints the losses it compares.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TOOL=$(cd "$OLDPWD" && realpath "$1")
. "$ROOT/tests/driver/launch/lib.sh"
reference
P="--tp 2 --pp 2 --global-batch $GB"

# shellcheck disable=SC2086
check "compile t=2 p=2" "$SHARDC" compile "$M" $DEFS --vocab-multiple 8 $P --target cpu -o prog-4
check "build" "$SHARDC" build prog-4
# shellcheck disable=SC2016 # the script's own text, not ours to expand
if grep -q '^    -np 2 "$here/stage0" "$@" \\$' prog-4/launch.sh &&
  grep -q '^    : -np 2 "$here/stage1" "$@"$' prog-4/launch.sh; then
  ok "launch.sh: ranks 0-1 run stage0, ranks 2-3 stage1 (mpirun MPMD)"
else
  fail "launch.sh: no MPMD blocks for stage0 and stage1"
  grep -n 'np' prog-4/launch.sh
fi

# shellcheck disable=SC2086
timeout 300 prog-4/launch.sh $TRAIN --log-json sh.json >sh.out 2>&1 </dev/null ||
  { fail "launch.sh: exit $?"; tail -5 sh.out; }
compare "launch.sh (mpirun, 4 ranks)" sh.json

echo "localhost slots=4" >hosts
# shellcheck disable=SC2086
timeout 300 prog-4/launch.sh mpirun --hostfile hosts $TRAIN --log-json host.json >host.out 2>&1 \
  </dev/null || { fail "launch.sh mpirun --hostfile: exit $?"; tail -5 host.out; }
compare "launch.sh mpirun --hostfile hosts" host.json

# shellcheck disable=SC2086
timeout 300 "$SHARDC" run "$M" $DEFS --vocab-multiple 8 $P --out prog-4 --hostfile hosts $TRAIN \
  --log-json run.json >run.out 2>&1 </dev/null || { fail "shardc run --hostfile: exit $?"; tail -5 run.out; }
compare "shardc run --hostfile hosts (4 ranks)" run.json

# shellcheck disable=SC2086
"$SHARDC" compile "$M" $DEFS --vocab-multiple 8 $P --target cpu -o prog-4b >/dev/null 2>&1 || true
if cmp -s prog-4/launch.sh prog-4b/launch.sh; then
  ok "launch.sh: the same $(wc -c <prog-4/launch.sh) bytes when compiled again"
else
  fail "launch.sh differs between two compiles"
fi
if command -v shellcheck >/dev/null 2>&1; then
  check "shellcheck -s sh launch.sh" shellcheck -s sh prog-4/launch.sh
else
  echo "skip: shellcheck -s sh launch.sh (shellcheck is not on PATH; scripts/install-deps.sh installs it)"
fi
finish
