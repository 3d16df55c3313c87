#!/bin/bash
# shellcheck disable=SC2086 # model flag lists are lists of words
# `shardc info --json` against the published numbers: GPT-2's four published
# parameter counts, Llama-2-7B's and the 1T model's of the Megatron-LM
# paper, and the GPT models' FLOPs per token against the paper's
# 72 l h^2 (1 + s/(6h) + V/(12 l h)) (per token: the per-step formula / B s).
#   counts.sh MODELS_DIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
models=$1
count_of() { # name expected-params model flags...
  name=$1 want=$2 model=$3
  shift 3
  json=$("$SHARDC" info "$models/$model" "$@" --json) || { fail "$name: shardc info failed"; return; }
  got=$(printf '%s' "$json" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["parameters"]))')
  flops=$(printf '%s' "$json" | python3 -c '
import json, sys
o = json.load(sys.stdin); c = o["config"]
l, h, s, V = c["layers"], c["hidden"], c["seq"], c["vocab"]
# The formula holds for the GPT family (ffn 4h, MHA); other models print it for reference.
want = 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
print("%.6g %.6g %.3g" % (o["flops_per_token"], want, abs(o["flops_per_token"] - want) / want))')
  if [ "$got" = "$want" ]; then
    ok "$name: $got parameters; flops/token, formula, rel diff: $flops"
  else
    fail "$name: $got parameters, expected $want"
  fi
}
count_of "gpt2 small"  124439808  gpt2.shard
count_of "gpt2 medium" 354823168  gpt2.shard -D layers=24 -D hidden=1024 -D heads=16
count_of "gpt2 large"  774030080  gpt2.shard -D layers=36 -D hidden=1280 -D heads=20
count_of "gpt2 xl"     1557611200 gpt2.shard -D layers=48 -D hidden=1600 -D heads=25
count_of "gpt3 1T"     1008038758400 gpt3.shard -D layers=128 -D hidden=25600 -D heads=160
count_of "llama 7B"    6738415616 llama.shard
# The GPT models' FLOPs must equal the paper's formula exactly (to rounding).
for args in "gpt2.shard" "gpt3.shard -D layers=128 -D hidden=25600 -D heads=160"; do
  rel=$("$SHARDC" info "$models/${args%% *}" ${args#*.shard} --json | python3 -c '
import json, sys
o = json.load(sys.stdin); c = o["config"]
l, h, s, V = c["layers"], c["hidden"], c["seq"], c["vocab"]
want = 72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
print(abs(o["flops_per_token"] - want) / want)')
  if python3 -c "import sys; sys.exit(0 if float('$rel') < 1e-9 else 1)"; then
    ok "${args%% *}: flops per token equal the formula (rel diff $rel)"
  else
    fail "${args%% *}: flops per token differ from the formula by $rel"
  fi
done
# The JSON object has the fields tools rely on.
if ! "$SHARDC" info "$models/gpt2.shard" --json | python3 -c '
import json, sys
o = json.load(sys.stdin)
need = ["model", "parameters", "flops_per_token", "parameters_by_kind", "layers", "config"]
missing = [k for k in need if k not in o]
kinds = sorted(o["parameters_by_kind"])
assert not missing, "missing fields: %s" % missing
assert sum(o["parameters_by_kind"].values()) == o["parameters"], "kinds do not add up"
print("ok:   info --json fields %s; kinds %s add up to %d" % (need, kinds, o["parameters"]))'; then
  fail "info --json lacks fields tools rely on"
fi
finish
