#!/bin/bash
# shellcheck disable=SC2086 # model flag lists are lists of words
# Counts what pp-partition and autodiff write for several (p, v, layers):
# pp_boundary nodes forward and backward (expected p*v - 1 each when p > 1,
# one per boundary between neighbouring virtual stages, since the residual
# stream is the only value that crosses; none when p = 1, where the chunks
# share one rank), every forward message going from virtual stage k to
# k + 1 and its adjoint back, the tied copies of a parameter (1 for the
# tied GPT-2 embedding with p > 1, whose gradients the runtime sums; 0 for
# LLaMA's separate output layer), and that the printed IR parses back to
# the same text.
#   counts.sh MODELS_DIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
models=$1
gpt2="$models/gpt2.shard -D vocab=65 -D seq=8 -D hidden=16 -D heads=2"
llama="$models/llama.shard -D vocab=65 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48"
case_of() { # name p v layers tied_reduces model...
  name=$1 p=$2 v=$3 l=$4 tied=$5
  shift 5
  if ! "$SHARDC" compile "$@" -D layers="$l" --pp "$p" --vpp "$v" --emit-ir --verify-each \
      >x.ir 2>err; then
    fail "$name: compile failed"; cat err; return
  fi
  want=$(( p > 1 ? p * v - 1 : 0 ))
  fwd=$(awk '/^  backward:/ {b = 1} /= pp_boundary\(/ && !b' x.ir | wc -l)
  bwd=$(awk '/^  backward:/ {b = 1} /= pp_boundary\(/ && b' x.ir | wc -l)
  # Forward message k goes from k to k + 1, its gradient from k + 1 to k.
  pairs_f=$(awk '/^  backward:/ {b = 1} !b && /pp_boundary/ {match($0, /src = [0-9]+, dst = [0-9]+/); print substr($0, RSTART, RLENGTH)}' x.ir | sort -u | wc -l)
  wrong=$({ grep -o 'src = [0-9]*, dst = [0-9]*' x.ir || true; } | awk '{s = $3 + 0; d = $6 + 0; if (s - d != 1 && d - s != 1) print}' | wc -l)
  ties=$(grep -c '^  param .* tied(@' x.ir || true)
  stages=$(grep -c '^  stage [0-9]*:' x.ir || true)
  "$SHARDC" compile x.ir --passes=verify --emit-ir >again 2>&1 || true
  same=$(cmp -s x.ir again && echo yes || echo no)
  line="$name: p=$p v=$v l=$l: boundaries forward $fwd backward $bwd (want $want each, $(( 2 * want )) per microbatch), distinct forward pairs $pairs_f, non-neighbour $wrong, tied copies $ties (want $tied), stage lines $stages, round trip $same"
  if [ "$fwd" != "$want" ] || [ "$bwd" != "$want" ] || [ "$pairs_f" != "$want" ] || \
     [ "$wrong" != 0 ] || [ "$ties" != "$tied" ] || [ "$same" != yes ]; then
    fail "$line"
  else
    ok "$line"
  fi
}
case_of gpt2 2 1 5 1 $gpt2 --vocab-multiple 8
case_of gpt2 2 2 5 1 $gpt2 --vocab-multiple 8
case_of gpt2 4 2 16 1 $gpt2 --vocab-multiple 8
case_of gpt2 3 1 7 1 $gpt2 --vocab-multiple 8
case_of gpt2 1 2 4 0 $gpt2 --vocab-multiple 8
case_of gpt2_t2_sp 2 2 4 1 $gpt2 --vocab-multiple 8 --tp 2 --sequence-parallel
case_of llama 3 1 5 0 $llama --vocab-multiple 8
case_of llama 2 3 6 0 $llama --vocab-multiple 8
# With sequence parallelism the message is one rank's [b, s/t, h] slice.
"$SHARDC" compile $gpt2 -D layers=2 --vocab-multiple 8 --tp 2 --sequence-parallel --pp 2 --emit-ir \
  | grep '= pp_boundary' | sed 's/^ *//'
finish
