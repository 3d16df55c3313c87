#!/bin/bash
# bench/moe_cpu.sh in its quick mode: the tiny Mixtral trained by our
# program and by transformers' MixtralForCausalLM, a few steps each, both
# rates and their ratio printed. The full bench is manual (timings need a
# quiet machine); this keeps the script and its peer from breaking.
# Skipped (77), saying why, without transformers.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"

PY=${SHARDC_PYENV:-$SHARDC_BUILD/pyenv}/bin/python
if ! "$PY" -c 'import torch, transformers' 2>/dev/null; then
  echo "skipped: $PY cannot import torch and transformers (scripts/install-deps.sh makes build/pyenv)"
  exit 77
fi
THREADS=1 QUICK=1 PY=$PY SHARDC=$SHARDC bash "$ROOT/bench/moe_cpu.sh" >bench.txt 2>&1 || {
  cat bench.txt
  fail "bench/moe_cpu.sh QUICK=1 exited non-zero"
  finish
}
cat bench.txt
for pattern in \
  '^  shardc  *[0-9][0-9]* tokens/s$' \
  '^  HF MixtralForCausalLM  *[0-9][0-9]* tokens/s (torch .* transformers .*)$' \
  '^  ratio shardc / HF  *[0-9.]* x (target >= 1)$'; do
  if grep -q -- "$pattern" bench.txt; then ok "$pattern"; else fail "no line matches $pattern"; fi
done
finish
