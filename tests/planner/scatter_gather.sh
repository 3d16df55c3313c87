#!/bin/sh
# The planner prices scatter/gather (docs/planner.md): at t = 8, p = 2 on
# a100 the pipeline neighbours sit on different nodes, so a message of
# 1/t per tensor rank over the network plus an all-gather inside the node
# must take less than the whole message from every rank
# (--no-scatter-gather). With sequence parallelism the message is 1/t
# already, so the flag would change nothing and simulate refuses it
# (flags.sh checks the words). Prints every message time.
#   scatter_gather.sh SHARDC MODEL
set -u
shardc=$1
model=$2
fail=0
msg() { # the simulated message time in ms of a configuration
  "$shardc" simulate "$model" -D heads=16 --pp 2 --microbatch 4 --global-batch 16 --hw a100 "$@" |
    sed -n 's/.*message \([0-9.]*\) ms.*/\1/p'
}
on=$(msg --tp 8)
off=$(msg --tp 8 --no-scatter-gather)
echo "t=8 p=2 a100: message $on ms with scatter/gather, $off ms whole"
awk -v a="$on" -v b="$off" 'BEGIN { exit !(a > 0 && a < b) }' || { echo "FAIL: not smaller"; fail=1; }
sp=$(msg --tp 8 --sequence-parallel)
echo "t=8 p=2 a100, sequence parallel: message $sp ms"
awk -v a="$sp" -v b="$off" 'BEGIN { exit !(a > 0 && a < b) }' || { echo "FAIL: SP message not a slice"; fail=1; }
if "$shardc" simulate "$model" -D heads=16 --pp 2 --microbatch 4 --global-batch 16 --hw a100 \
     --tp 8 --sequence-parallel --no-scatter-gather >/dev/null 2>&1; then
  echo "FAIL: --no-scatter-gather with --sequence-parallel accepted"; fail=1
else
  echo "--no-scatter-gather with --sequence-parallel: refused"
fi
[ $fail = 0 ] && echo ok
exit $fail
