#!/bin/sh
# The planner prices scatter/gather (docs/planner.md): at t = 8, p = 2 on
# a100 the pipeline neighbours sit on different nodes, so a message of
# 1/t per tensor rank over the network plus an all-gather inside the node
# must take less than the whole message from every rank
# (--no-scatter-gather). With sequence parallelism the message is 1/t
# already and the flag changes nothing. Prints every message time.
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
on=$(msg --tp 8 --sequence-parallel)
off=$(msg --tp 8 --sequence-parallel --no-scatter-gather)
echo "t=8 p=2 a100, sequence parallel: message $on ms, $off ms with --no-scatter-gather"
[ -n "$on" ] && [ "$on" = "$off" ] || { echo "FAIL: sequence parallelism changed"; fail=1; }
[ $fail = 0 ] && echo ok
exit $fail
