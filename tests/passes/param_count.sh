#!/bin/sh
# Checks that unrolling keeps the parameter count: `shardc info` of each
# bundled model against `shardc info` of its unrolled IR.
#   param_count.sh SHARDC MODELS_DIR
set -u
shardc=$1
models=$2
tmp=$(mktemp --suffix=.ir)
trap 'rm -f "$tmp"' EXIT
fail=0
count() { "$shardc" info --json "$@" | sed -n 's/^[[:space:]]*"parameters":[[:space:]]*\([0-9]*\),*$/\1/p'; }
for model in "$models"/*.shard; do
  # Small layer counts keep the unrolled IR short; the sizes stay real.
  if ! "$shardc" compile "$model" -D layers=3 --passes=fold,shape,unroll,verify --emit-ir >"$tmp"; then
    echo "FAIL: $model: unroll failed"
    fail=1
    continue
  fi
  before=$(count "$model" -D layers=3)
  after=$(count "$tmp")
  if [ -z "$before" ] || [ "$before" != "$after" ]; then
    echo "FAIL: $model: $before parameters before unroll, $after after"
    fail=1
  else
    echo "ok: $(basename "$model"): $before parameters before and after unroll"
  fi
done
exit $fail
