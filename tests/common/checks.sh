# shellcheck shell=bash
# What the shell tests share. Every shell test starts
#
#   #!/bin/bash
#   set -euo pipefail
#   . "$SHARDC_SRC/tests/common/checks.sh"
#
# and takes the compiler from $SHARDC, the source tree from $SHARDC_SRC
# ($ROOT here) and the build folder from $SHARDC_BUILD, which CMake puts in
# every test's environment (tests/CMakeLists.txt). This file gives a fresh
# temporary folder to run in (removed at exit), one OpenMP thread unless
# the caller sets more (runs are compared bit for bit and must not crawl on
# a loaded machine; thread-count independence is the kernels' business),
# and the check helpers below, which keep going after a failed check under
# set -e (a test reports every check, then finish exits 1).
: "${SHARDC:?the compiler under test: CMake sets SHARDC for every test}"
: "${SHARDC_SRC:?the source tree: CMake sets SHARDC_SRC for every test}"
# Absolute, as the test runs elsewhere (a hand-run test may give them
# relative to where it starts).
ROOT=$(cd "$SHARDC_SRC" && pwd)
case $SHARDC in
*/*) SHARDC=$(cd "$(dirname "$SHARDC")" && pwd)/$(basename "$SHARDC") ;;
esac
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMP_NUM_THREADS
FAILS=0

ok() { echo "ok:   $*"; }

# corpus_shards: train.bin, byte-level shards of the corpus's first 20,000
# bytes, for the tests that train a tiny model a few steps (SHARDC is the
# compiler, ROOT the source tree).
corpus_shards() {
  head -c 20000 "$ROOT/data/corpus.txt" >text.txt
  check "shardc data makes the shards" "$SHARDC" data text.txt -o train.bin
}
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

# check "what" command...: the command must succeed (its output goes to
# cmd.txt, shown when it fails).
check() {
  what=$1; shift
  st=0
  "$@" >cmd.txt 2>&1 || st=$?
  if [ $st -eq 0 ]; then
    ok "$what"
  else
    fail "$what: exit $st"
    sed 's/^/      /' cmd.txt | tail -5
  fi
}

# expect_error "what" "message fragment" command...: the command must exit
# with status 1 and print the fragment in an error line; the message is shown.
expect_error() {
  what=$1 frag=$2; shift 2
  st=0
  "$@" >out.txt 2>&1 || st=$?
  msg=$(grep 'error' out.txt | head -3 || true)
  # (not grep -q at the end of a pipe: under pipefail, the first grep's
  # SIGPIPE when -q stops reading early would fail a match)
  if [ $st -eq 1 ] && grep 'error' out.txt | grep -F -- "$frag" >/dev/null; then
    ok "$what: exit 1: $msg"
  else
    fail "$what: exit $st, expected 1 and '$frag'; got:"
    sed 's/^/      /' out.txt | tail -5
  fi
}

# The JSON log without the timing field, which differs from run to run.
strip_timing() { sed 's/,"tokens_per_s":[^,}]*//' "$1"; }
# The loss fields of a JSON log, one a line, as printed (17 digits: exact).
losses() { sed 's/.*"loss":\([^,}]*\).*/\1/' "$1"; }

finish() {
  if [ $FAILS -eq 0 ]; then echo "passed"; exit 0; fi
  echo "FAILED: $FAILS check(s)"
  exit 1
}
