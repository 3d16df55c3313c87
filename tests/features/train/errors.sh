#!/bin/bash
# shellcheck disable=SC1091,SC2016
# Bad data and checkpoints given to a real compiled program (gpt2.shard,
# tiny, vocab 97): each is an error that names the file and the problem,
# exit 1. The toy program of tests/runtime covers every variant; these make
# sure the compiled program reaches the same checks with its own shapes
# (its vocabulary, its batch and sequence, its parameter table).
#
#   errors.sh RT_TESTTOOL
set -euo pipefail
. "$(dirname "$0")/lib.sh"
SMALL="-D vocab=97 -D hidden=32 -D heads=2 -D layers=2 -D seq=16 --microbatch 2"
# shellcheck disable=SC2086 # the -D lists are lists of words
gpt2() { "$SHARDC" run "$ROOT/models/gpt2.shard" $SMALL "$@"; }
# shellcheck disable=SC2086
gpt2_with() { defs=$1; shift; "$SHARDC" run "$ROOT/models/gpt2.shard" $SMALL $defs "$@"; }

"$TOOL" seq good.bin 1000 97
check "a good shard trains (2 steps, global batch 4)" gpt2 --data good.bin --steps 2 --global-batch 4

# --- data ---------------------------------------------------------------------
cp good.bin magic.bin && "$TOOL" header magic.bin 0 7
expect_error "wrong magic" "magic.bin: not a token shard: magic 7, expected 20240520" \
  gpt2 --data magic.bin --steps 1
head -c 1500 good.bin >trunc.bin
expect_error "truncated data file" \
  "trunc.bin: truncated: the header says 1000 tokens (2000 bytes), the file holds 476" \
  gpt2 --data trunc.bin --steps 1
"$TOOL" seq few.bin 60 97
expect_error "fewer tokens than one batch (global batch 4 of seq 16)" \
  "few.bin: 60 tokens, fewer than one window of batch*seq+1 = 4*16+1 = 65" \
  gpt2 --data few.bin --steps 1 --global-batch 4
# Byte-level text holds letters (ids 97 and up) that a vocab of 97 lacks.
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 20) >text.txt
"$SHARDC" data text.txt -o text.bin >/dev/null
expect_error "token id >= vocab (text bytes for a vocab-97 model)" \
  "text.bin: token 1 has id 104, outside the vocabulary of 97" \
  gpt2 --data text.bin --steps 1
expect_error "token id >= vocab in --val-data" "text.bin: token 1 has id 104" \
  gpt2 --data good.bin --val-data text.bin --steps 1

# --- checkpoints ----------------------------------------------------------------
check "a vocabulary of 256 saves its weights" gpt2_with "-D vocab=256" --steps 0 --save v256
expect_error "--init-from with one tensor of the wrong shape (names it and both shapes)" \
  "v256/model.safetensors: tensor wte.weight has shape [256, 32], the model expects [97, 32]" \
  gpt2 --init-from v256/model.safetensors --steps 0
check "  ... and reports only that tensor ($(grep -c error: out.txt) error line)" \
  test "$(grep -c error: out.txt)" -eq 1
expect_error "--init-from weights of a shallower model: the missing tensors on one line, the nearest names" \
  "l2/model.safetensors: missing tensor h.2.ln_1.weight (the model expects [32]); nearest names in the file: h.0.ln_1.weight, h.1.ln_1.weight, h.0.ln_2.weight; and 11 more problems, the last: missing tensor h.2.mlp.c_proj.bias (the model expects [32])" \
  sh -c '"$1" run "$2" $3 --steps 0 --save l2 >/dev/null && "$1" run "$2" $3 -D layers=3 --init-from l2/model.safetensors --steps 0' \
  sh "$SHARDC" "$ROOT/models/gpt2.shard" "$SMALL"
check "two steps save a checkpoint" gpt2 --data good.bin --steps 2 --save ck
expect_error "--resume into a model of another shape" \
  "ck/state.safetensors: --resume: a checkpoint of another model than this program's" \
  gpt2_with "-D seq=32" --resume ck
check "  ... the error lists the -D and the shapes that differ" \
  sh -c 'grep -qF -- "-D seq: 16 in the checkpoint, 32 in this program" out.txt &&
         grep -qF "tensor wpe.weight has shape [16, 32], the model expects [32, 32]" out.txt' 
size=$(wc -c <ck/model.safetensors)
head -c $((size - 1000)) ck/model.safetensors >cut.safetensors
expect_error "--init-from a truncated weights file" "cut.safetensors: tensor" \
  gpt2 --init-from cut.safetensors --steps 0

# --- the compiler's flags ------------------------------------------------------
# --passes reaches the compiler as in `shardc compile`: the target's own
# pipeline, named, trains; an unknown pass is the compiler's error.
check "--passes with the target's pipeline trains" \
  gpt2 --data good.bin --steps 1 \
  --passes fold,shape,tp-annotate,vocab-pad,tp-partition,tp-fuse,unroll,autodiff,tp-fuse,verify,memplan
expect_error "--passes with an unknown pass" "--passes: no pass named 'nope'" \
  gpt2 --passes fold,nope --steps 1
# --target picks the codegen target from its table, as in `shardc compile`.
check "--target cpu trains" gpt2 --data good.bin --steps 1 --target cpu
expect_error "--target with an unknown target" "unknown target 'nosuch' (known: cpu" \
  gpt2 --target nosuch --steps 1
finish
