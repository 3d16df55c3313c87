#!/bin/sh
# Counts the collectives one layer adds to the partitioned program: compiles
# the model with layers=1 and layers=2 through the CPU target's passes and
# prints, per phase and kind, the difference of the two counts (the nodes of
# one layer), then checks them against the expectation.
#
#   layer_counts.sh SHARDC "EXPECTED" MODEL ARGS...
#
# EXPECTED lists "KIND FORWARD BACKWARD" triples, e.g.
# "all_reduce 2 2 all_gather 0 0 reduce_scatter 0 0".
set -u
shardc=$1
expected=$2
shift 2
passes=fold,shape,tp-annotate,vocab-pad,tp-partition,tp-fuse,unroll,autodiff,tp-fuse,verify
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for l in 1 2; do
  if ! "$shardc" compile "$@" -D layers=$l --passes=$passes --emit-ir >"$tmp/l$l.ir"; then
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
fail=0
set -- $expected
while [ $# -ge 3 ]; do
  kind=$1
  for phase in forward backward; do
    want=$2
    [ $phase = backward ] && want=$3
    one=$(count "$tmp/l1.ir" "$kind" $phase)
    two=$(count "$tmp/l2.ir" "$kind" $phase)
    per=$((two - one))
    status=ok
    [ "$per" = "$want" ] || { status="FAIL (expected $want)"; fail=1; }
    echo "$kind $phase: $one with one layer, $two with two: $per per layer: $status"
  done
  shift 3
done
exit $fail
