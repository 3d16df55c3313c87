#!/bin/bash
# Compiles a model with cgtool, builds the rank program with every warning
# an error, and runs it:
#
#   run.sh CGTOOL TESTTOOL WORKDIR MODEL_DIR MODEL MODE [cgtool options...]
#
# MODE start: the program starts and prints its memory plan (--steps 0).
# MODE gradcheck: an f64 build passes the gradient check on 4 coordinates
#   of every parameter, over 2 microbatches.
# MODE train: an f32 build trains 60 steps on a repeating token sequence and
#   its loss falls below a quarter of the first step's.
# WORKDIR is absolute: checks.sh runs the script in a fresh folder.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
cgtool=$1 testtool=$2 work=$3 modeldir=$4 model=$5 mode=$6
shift 6
rm -rf "$work"
mkdir -p "$work"
if [ "$mode" = gradcheck ]; then set -- "$@" --f64; fi
(cd "$modeldir" && "$cgtool" compile "$model" "$work/out" "$@") >"$work/plan.txt"
grep -q "^  total " "$work/plan.txt" || { echo "FAIL: no plan printed"; cat "$work/plan.txt"; exit 1; }
cc=$(sed -n 's/^CC = //p' "$work/out/Makefile")
make -s -C "$work/out" CC="$cc -Wall -Wextra -Werror" >"$work/make.txt" 2>&1 ||
  { echo "FAIL: the generated program does not build"; cat "$work/make.txt"; exit 1; }
echo "built $model ($*): $(wc -l <"$work/out/rank0.c") lines of C, plan total $(sed -n 's/^  total *\([0-9]*\) bytes.*/\1/p' "$work/plan.txt") bytes"
prog=$work/out/rank0
case $mode in
start)
  "$prog" --steps 0 >"$work/run.txt" 2>&1 || { cat "$work/run.txt"; exit 1; }
  grep "^memory plan" "$work/run.txt"
  ;;
gradcheck)
  "$prog" --gradcheck 4 --global-batch "$(sed -n 's/^  \.batch = \([0-9]*\),/\1/p' "$work/out/rank0.c" | awk '{print 2 * $1}')" \
    >"$work/run.txt" 2>&1 || { cat "$work/run.txt"; exit 1; }
  grep "^gradcheck: " "$work/run.txt"
  ;;
train)
  vocab=$(sed -n 's/^  \.vocab = \([0-9]*\),/\1/p' "$work/out/rank0.c")
  "$testtool" seq "$work/data.bin" 20000 "$vocab"
  "$prog" --data "$work/data.bin" --steps 60 --lr 1e-2 --log-every 10 --no-shuffle \
    --global-batch 4 --log-json "$work/log.json" >"$work/run.txt" 2>&1 || { cat "$work/run.txt"; exit 1; }
  first=$(head -1 "$work/log.json" | sed 's/.*"loss":[ ]*\([0-9.e+-]*\).*/\1/')
  last=$(tail -1 "$work/log.json" | sed 's/.*"loss":[ ]*\([0-9.e+-]*\).*/\1/')
  echo "loss: step 1 $first, step 60 $last"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 4) }' || { echo "FAIL: the loss did not fall"; cat "$work/run.txt"; exit 1; }
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
echo "ok"
