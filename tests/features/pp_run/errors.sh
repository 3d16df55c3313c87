#!/bin/bash
# errors.sh TPTOOL MPIRUN_SH MPIEXEC: the mistakes one can
# make launching pipeline-stage programs each stop every rank with exit 1
# and a message that says what to do, never a hang.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TOOL=$(cd "$OLDPWD" && realpath "$1")
MPIRUN=$(cd "$OLDPWD" && realpath "$2")
MPIEXEC=$3
MODELS=$ROOT/models
"$TOOL" data data.bin 20000 61 || exit 1
check "compile p=2 v=2 for global batch 8" "$SHARDC" compile "$MODELS/gpt2.shard" -D vocab=97 \
  -D seq=8 -D hidden=16 -D heads=4 -D layers=4 -D batch=2 --vocab-multiple 8 --pp 2 --vpp 2 \
  --global-batch 8 --target cpu -o prog
check "build the stage programs" "$SHARDC" build prog
run="--data data.bin --steps 1"
# shellcheck disable=SC2086
{
  expect_error "a stage program alone" "compiled for t=1 x p=2 x d=1 = 2 ranks, but the job has 1" \
    prog/stage0 $run
  expect_error "stages launched out of order" "runs the program of stage 1: launch the stage programs in order" \
    sh "$MPIRUN" "$MPIEXEC" 1 prog/stage1 $run : -np 1 prog/stage0 $run
  expect_error "another global batch than the schedule's" "--global-batch" \
    sh "$MPIRUN" "$MPIEXEC" 1 prog/stage0 $run --global-batch 12 : -np 1 prog/stage1 $run --global-batch 12
  expect_error "sampling from a pipeline stage" "one pipeline stage" \
    sh "$MPIRUN" "$MPIEXEC" 1 prog/stage0 --steps 0 --sample-prompt hi : -np 1 prog/stage1 --steps 0 --sample-prompt hi
} </dev/null
finish
