#!/bin/bash
# sizes.sh: sizes that overflow a 64-bit count of bytes are
# errors of the shape pass naming the tensor and its dimension, never a
# negative numel in the generated tables: hidden = 2^31 (c_attn.weight is
# [2^31, 3 * 2^31]), and a model whose tensors each fit but whose
# parameters together do not (hidden = 2^25, 400 layers). The largest
# shape that fits compiles.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
GPT2="$ROOT/models/gpt2.shard -D heads=1"
expect_error "hidden = 2^31" \
  "error: shape: @attn.c_attn.weight has the shape [2147483648, 6442450944], more than 2^60 elements from dimension 1" \
  "$SHARDC" compile $GPT2 -D hidden=2147483648 -o h31
check "  no program written" test ! -e h31/rank0.c
expect_error "hidden = 2^25, 400 layers: the parameters together" \
  "error: shape: the model's parameters add up to more than 2^60 elements" \
  "$SHARDC" compile $GPT2 -D hidden=33554432 -D layers=400 -o h25
st=0; "$SHARDC" compile $GPT2 -D hidden=33554432 -D layers=2 -o ok >ok.txt 2>&1 || st=$?
echo "      hidden = 2^25, 2 layers: exit $st: $(grep -m1 'weights' ok.txt)"
check "hidden = 2^25, 2 layers: compiles, and its weights' count is positive" \
  sh -c "[ $st -eq 0 ] && grep -q '^ *weights  *[0-9]' ok.txt"
finish
