#!/bin/sh
# shellcheck disable=SC2086 # flag lists are lists of words
# bad_flags.sh SHARDC ROOT: a table of bad command-line values across
# compile, run, schedule, simulate and info. Each case must exit with
# status 1 (no crash, no signal), print exactly one error line, name what
# the table expects (the flag, and what would be valid), never reach
# mpirun and never print a memory plan before the error. Each case prints
# its command and the message seen.
SHARDC=$1
ROOT=$2
. "$ROOT/tests/common/checks.sh"
M="$ROOT/models/gpt2.shard"
T="-D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 -D batch=2"
CASES=0

# bad "fragment" subcommand args...: one bad command line.
bad() {
  frag=$1; shift
  CASES=$((CASES + 1))
  start=$(date +%s)
  "$SHARDC" "$@" >out.txt 2>&1
  st=$?
  secs=$(($(date +%s) - start))
  errs=$(grep -c 'error' out.txt)
  msg=$(grep 'error' out.txt | head -1)
  echo "case $CASES: shardc $*" | sed "s|$ROOT/||g"
  if [ $st -ne 1 ]; then
    fail "exit $st (expected 1)"; sed 's/^/      /' out.txt | tail -5
  elif [ "$errs" -ne 1 ]; then
    fail "$errs error lines (expected one)"; sed 's/^/      /' out.txt | tail -8
  elif ! grep 'error' out.txt | grep -qF -- "$frag"; then
    fail "expected '$frag' in: $msg"
  elif grep -q 'memory plan\|MPI_ABORT\|mpirun' out.txt; then
    fail "the error came after the memory plan or from mpirun"; sed 's/^/      /' out.txt | tail -8
  else
    ok "exit 1 in ${secs}s: $msg"
  fi
}

# Misspelled flags: the nearest flag of the subcommand is suggested.
bad "did you mean --tp?" compile "$M" --tpp 2
bad "did you mean --microbatch?" schedule "$M" --microbach 2
bad "did you mean --global-batch?" simulate "$M" --global-bach 8
bad "did you mean --json?" info "$M" --jsn

echo "$CASES cases, $FAILS failed"
[ $FAILS -eq 0 ]
