#!/bin/bash
# Counts the collectives one layer adds to the partitioned program: compiles
# the model with layers=1 and layers=2 through the CPU target's passes and
# prints, per phase and kind, the difference of the two counts (the nodes of
# one layer), then checks them against the expectation.
#
#   layer_counts.sh "EXPECTED" MODEL ARGS...
#
# EXPECTED lists "KIND FORWARD BACKWARD" triples, e.g.
# "all_reduce 2 2 all_gather 0 0 reduce_scatter 0 0".
# MODEL is relative to the folder the test starts in (its golden files
# name it so), which checks.sh leaves for a fresh one.
set -euo pipefail
start=$PWD
. "$SHARDC_SRC/tests/common/checks.sh"
expected=$1
shift
passes=fold,shape,tp-annotate,vocab-pad,tp-partition,tp-fuse,unroll,autodiff,tp-fuse,verify
for l in 1 2; do
  if ! (cd "$start" && "$SHARDC" compile "$@" -D layers=$l --passes=$passes --emit-ir) >"l$l.ir"; then
    echo "FAIL: compiling with layers=$l failed"
    exit 1
  fi
done
# count FILE KIND PHASE: nodes of op KIND before (forward) or after
# (backward) the `backward:` line.
count() {
  awk -v kind="$2" -v phase="$3" '
    /^  backward:$/ { bwd = 1; next }
    index($0, "= " kind "(") && ((phase == "forward") != bwd) { n++ }
    END { print n + 0 }' "$1"
}
# shellcheck disable=SC2086 # the triples are words
set -- $expected
while [ $# -ge 3 ]; do
  kind=$1
  for phase in forward backward; do
    want=$2
    [ $phase = backward ] && want=$3
    one=$(count "l1.ir" "$kind" $phase)
    two=$(count "l2.ir" "$kind" $phase)
    per=$((two - one))
    if [ "$per" = "$want" ]; then
      ok "$kind $phase: $one with one layer, $two with two: $per per layer"
    else
      fail "$kind $phase: $one with one layer, $two with two: $per per layer, expected $want"
    fi
  done
  shift 3
done
finish
