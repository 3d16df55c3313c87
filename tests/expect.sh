#!/bin/sh
# Golden-output check: runs a command and compares what it printed (stdout
# and stderr together) and its exit status with the expectation.
#
#   expect.sh EXPECTED_FILE EXIT_STATUS [--cd DIR] -- COMMAND [ARGS...]
#
# With UPDATE=1 in the environment the expected file is rewritten instead.
# --cd runs the command in DIR so that file names in messages are relative.
# When the command is shardc, @PASSES@ and @SCHEDULES@ in the expected file
# stand for the registered passes and schedules ("fold, shape, ...") as that
# shardc lists them, so that a new pass or schedule changes no golden file;
# UPDATE=1 writes the placeholders back.
set -u
expected=$1
status=$2
shift 2
dir=.
if [ "$1" = "--cd" ]; then dir=$2; shift 2; fi
[ "$1" = "--" ] && shift
actual=$(mktemp)
trap 'rm -f "$actual" "$actual.lists"' EXIT
(cd "$dir" && "$@") >"$actual" 2>&1
got=$?
case $1 in
*/shardc | shardc)
  shardc=$1
  case $shardc in /*) ;; */*) shardc="$dir/$shardc" ;; esac
  passes=$("$shardc" passes | awk '/^targets/ { exit } NR > 1 { print $1 }' | paste -sd, - | sed 's/,/, /g')
  schedules=$("$shardc" schedule --list | awk '{ print $1 }' | paste -sd, - | sed 's/,/, /g')
  if [ -n "$passes" ] && [ -n "$schedules" ]; then
    sed -e "s/$passes/@PASSES@/g" -e "s/$schedules/@SCHEDULES@/g" "$actual" >"$actual.lists"
    mv "$actual.lists" "$actual"
  fi
  ;;
esac
if [ "${UPDATE:-0}" = 1 ]; then
  cp "$actual" "$expected"
  echo "updated $expected (exit $got)"
  exit 0
fi
fail=0
if [ "$got" != "$status" ]; then
  echo "FAIL: exit status $got, expected $status: $*"
  fail=1
fi
if ! diff -u "$expected" "$actual"; then
  echo "FAIL: output differs from $expected"
  fail=1
fi
if [ $fail = 0 ]; then
  echo "ok: $(wc -l <"$actual") lines as expected, exit $got"
fi
exit $fail
