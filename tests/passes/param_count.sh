#!/bin/bash
# Checks that unrolling keeps the parameter count: `shardc info` of each
# bundled model against `shardc info` of its unrolled IR.
#   param_count.sh MODELS_DIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
models=$1
count() { "$SHARDC" info --json "$@" | sed -n 's/^[[:space:]]*"parameters":[[:space:]]*\([0-9]*\),*$/\1/p'; }
for model in "$models"/*.shard; do
  # Small layer counts keep the unrolled IR short; the sizes stay real.
  if ! "$SHARDC" compile "$model" -D layers=3 --passes=fold,shape,unroll,verify --emit-ir >unrolled.ir; then
    fail "$model: unroll failed"
    continue
  fi
  before=$(count "$model" -D layers=3)
  after=$(count unrolled.ir)
  if [ -z "$before" ] || [ "$before" != "$after" ]; then
    fail "$model: $before parameters before unroll, $after after"
  else
    ok "$(basename "$model"): $before parameters before and after unroll"
  fi
done
finish
