# Shared by the runtime's shell tests: sourced with the toy programs and the
# file maker as $1 $2 $3. Runs in a fresh temporary folder.
TOY=$1
TOY64=$2
TOOL=$3
WORK=$(mktemp -d /tmp/rt_test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
# One thread: the tests compare runs bit for bit and must not crawl on a
# loaded machine; thread-count independence is the kernels' business.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMP_NUM_THREADS
FAILS=0

ok() { echo "ok:   $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

# check "what" command...: the command must succeed (its output goes to
# cmd.txt, shown when it fails).
check() {
  what=$1; shift
  if "$@" >cmd.txt 2>&1; then
    ok "$what"
  else
    fail "$what: exit $?"
    sed 's/^/      /' cmd.txt | tail -5
  fi
}

# expect_error "what" "message fragment" command...: the command must exit
# with status 1 and print the fragment; the message is shown.
expect_error() {
  what=$1 frag=$2; shift 2
  "$@" >out.txt 2>&1
  st=$?
  msg=$(grep 'error' out.txt | head -3)
  if [ $st -eq 1 ] && grep -qF -- "$frag" out.txt; then
    ok "$what: exit 1: $msg"
  else
    fail "$what: exit $st, expected 1 and '$frag'; got:"
    sed 's/^/      /' out.txt | tail -5
  fi
}

# A learnable byte-level corpus (vocab 256) for the toy model.
make_corpus() {
  "$TOOL" text train.bin "the quick brown fox jumps over the lazy dog. " 200
  "$TOOL" text val.bin "the lazy dog jumps over the quick brown fox. " 20
}

# The JSON log without the timing field, which differs from run to run.
strip_timing() { sed 's/,"tokens_per_s":[^,}]*//' "$1"; }

finish() {
  if [ $FAILS -eq 0 ]; then echo "passed"; exit 0; fi
  echo "FAILED: $FAILS check(s)"
  exit 1
}
