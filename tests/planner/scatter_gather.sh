#!/bin/bash
# The planner prices scatter/gather (docs/planner.md): at t = 8, p = 2 on
# a100 the pipeline neighbours sit on different nodes, so a message of
# 1/t per tensor rank over the network plus an all-gather inside the node
# must take less than the whole message from every rank
# (--no-scatter-gather). With sequence parallelism the message is 1/t
# already, so the flag would change nothing and simulate refuses it
# (flags.sh checks the words). Prints every message time.
#   scatter_gather.sh MODEL
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
model=$1
msg() { # the simulated message time in ms of a configuration
  "$SHARDC" simulate "$model" -D heads=16 --pp 2 --microbatch 4 --global-batch 16 --hw a100 "$@" |
    sed -n 's/.*message \([0-9.]*\) ms.*/\1/p'
}
on=$(msg --tp 8)
off=$(msg --tp 8 --no-scatter-gather)
echo "t=8 p=2 a100: message $on ms with scatter/gather, $off ms whole"
check "with scatter/gather smaller than whole" awk -v a="$on" -v b="$off" 'BEGIN { exit !(a > 0 && a < b) }'
sp=$(msg --tp 8 --sequence-parallel)
echo "t=8 p=2 a100, sequence parallel: message $sp ms"
check "the sequence-parallel message is a slice" awk -v a="$sp" -v b="$off" 'BEGIN { exit !(a > 0 && a < b) }'
if "$SHARDC" simulate "$model" -D heads=16 --pp 2 --microbatch 4 --global-batch 16 --hw a100 \
     --tp 8 --sequence-parallel --no-scatter-gather >/dev/null 2>&1; then
  fail "--no-scatter-gather with --sequence-parallel accepted"
else
  ok "--no-scatter-gather with --sequence-parallel: refused"
fi
finish
