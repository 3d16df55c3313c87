#!/bin/bash
# --gradcheck on the toy model in f64: the analytic gradient (two
# microbatches, so accumulation and d_loss = 1/2 take part) against central
# differences; a gradient broken by 1% in one coordinate must fail.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
make_corpus

st=0
"$TOY64" --data train.bin --global-batch 8 --gradcheck 40 >gc.txt || st=$?
sed 's/^/      /' gc.txt | grep gradcheck || true
check "f64 gradcheck passes at 1e-6 (exit $st)" test $st -eq 0
st=0
"$TOY64" --gradcheck 300 >gc2.txt || st=$?
{ grep 'gradcheck:' gc2.txt || true; } | sed 's/^/      /'
check "f64 gradcheck without data (seeded random tokens), every bias coordinate" test $st -eq 0
st=0
TOY_WRONG_BIAS_GRAD=1 "$TOY64" --gradcheck 300 >bad.txt || st=$?
{ grep 'head.bias\|gradcheck:' bad.txt || true; } | sed 's/^/      /'
check "a 1% error in one bias gradient fails the check (exit $st)" test $st -eq 1
st=0
"$TOY" --data train.bin --gradcheck 10 --gradcheck-tol 0.1 >f32.txt || st=$?
{ grep 'gradcheck:' f32.txt || true; } | sed 's/^/      /'
check "the f32 build runs it too (float rounding: tolerance 0.1)" test $st -eq 0
finish
