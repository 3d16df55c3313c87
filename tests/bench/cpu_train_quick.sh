#!/bin/bash
# bench/cpu_train.sh in its quick mode: a tiny shape trained by our program
# and by PyTorch, its memory against its plan on one rank and on two ranks
# of t=2, and the sgemm roof built and measured, each number printed. The
# full bench is manual (minutes, and timings need a quiet machine); this
# keeps the script itself from breaking. Skipped (77) without PyTorch.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "skipped: no PyTorch for /usr/bin/python3 (apt-get install python3-torch)"
  exit 77
fi

THREADS=1 QUICK=1 SHARDC=$SHARDC bash "$ROOT/bench/cpu_train.sh" >bench.txt 2>&1 || {
  cat bench.txt
  fail "bench/cpu_train.sh QUICK=1 exited non-zero"
  finish
}
cat bench.txt
# Each line that the full bench rests on, with a number in it.
for pattern in \
  '^  roof: sgemm N=256 threads=1 best [0-9.]* s [0-9.]* GFLOP/s' \
  '^  ratio shardc / PyTorch  *[0-9.]* x' \
  '^  memory plan [0-9.]* MiB: difference / plan = [0-9.]*' \
  '^  t2, world rank 0: peak RSS [0-9.]* MiB.*: [0-9.]*$' \
  '^  tiny: [0-9.]* tokens/s x [0-9.e+]* FLOP/token = [0-9.]* GFLOP/s, [0-9.]* of the roof' \
  '^tiny t2  *RSS - start / plan = [0-9.]*  *0.95 .. 1.05 ran (quick)'; do
  if grep -q -- "$pattern" bench.txt; then ok "$pattern"; else fail "no line matches $pattern"; fi
done
finish
