#!/bin/bash
# Flags: --help documents every one; bad flags and values are clear errors
# (all of them reported), exit 1.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
make_corpus

st=0
"$TOY" --help >help.txt || st=$?
missing=""
for f in data val-data steps global-batch lr beta1 beta2 eps weight-decay clip warmup lr-min \
         lr-schedule optimizer seed log-every log-json eval-every eval-batches save save-every \
         resume init-from no-shuffle sample-prompt sample-tokens temperature top-k dump-grads \
         gradcheck gradcheck-tol gradcheck-floor quiet comm-stats help; do
  grep -q -- "^  --${f}[ ]" help.txt || missing="$missing --$f"
done
check "--help exits 0 and documents $(grep -c '^  --' help.txt) flags${missing:+, missing:$missing}" \
  test $st -eq 0 -a -z "$missing"

expect_error "not a number" "--lr: 'abc' is not a number" "$TOY" --lr abc
expect_error "nan is not a number" "--lr: 'nan' is not a number" "$TOY" --lr nan
expect_error "negative steps" "--steps: -5 is out of range" "$TOY" --steps -5
expect_error "fractional steps" "--steps: '1.5' is not an integer" "$TOY" --steps 1.5
expect_error "beta1 of 1" "--beta1: 1 is out of range" "$TOY" --beta1 1
expect_error "negative temperature" "--temperature: -1 is out of range" "$TOY" --temperature -1
expect_error "unknown optimizer" "--optimizer: 'adam' is not one of adamw|sgd" "$TOY" --optimizer adam
expect_error "unknown schedule" "--lr-schedule: 'linear' is not one of cosine|constant" \
  "$TOY" --lr-schedule linear
expect_error "typo gets a suggestion" "unknown flag '--lrr' (did you mean --lr?)" "$TOY" --lrr 1
expect_error "unknown flag" "unknown flag '--frobnicate' (--help lists the flags)" "$TOY" --frobnicate
expect_error "missing value" "--data: needs a value (GLOB)" "$TOY" --data
expect_error "value forgotten before the next flag" "--data: needs a value (GLOB)" \
  "$TOY" --data --steps 5
expect_error "a switch with a value" "--no-shuffle: takes no value" "$TOY" --no-shuffle=1
expect_error "a stray argument" "unexpected argument 'train.bin' (flags start with --)" \
  "$TOY" train.bin
"$TOY" --lr x --steps y --bogus >all.txt 2>&1 || true
check "every error of a command line is reported ($(grep -c error: all.txt) of 3)" \
  test "$(grep -c error: all.txt)" -eq 3
expect_error "global batch not a multiple" "--global-batch 6 is not a multiple of microbatch 4 x dp 1" \
  "$TOY" --data train.bin --global-batch 6
expect_error "--save-every without --save" "--save-every: needs --save DIR" "$TOY" --data train.bin --save-every 5
expect_error "--eval-every without --val-data" "--eval-every: needs --val-data" \
  "$TOY" --data train.bin --eval-every 5
expect_error "training without data" "--steps: training needs --data (or --steps 0)" "$TOY" --steps 5
expect_error "--init-from with --resume" "--init-from: cannot be combined with --resume" \
  "$TOY" --init-from x --resume y
expect_error "--dump-grads without a step" "--dump-grads: needs a step to run" \
  "$TOY" --dump-grads g.st --steps 0
check "--name=value works" "$TOY" --data=train.bin --steps=2 --lr=1e-3
finish
