#!/bin/sh
# Counts what pp-partition and autodiff write for several (p, v, layers):
# pp_boundary nodes forward and backward (expected p*v - 1 each when p > 1,
# one per boundary between neighbouring virtual stages, since the residual
# stream is the only value that crosses; none when p = 1, where the chunks
# share one rank), every forward message going from virtual stage k to
# k + 1 and its adjoint back, the tied copies of a parameter (1 for the
# tied GPT-2 embedding with p > 1, whose gradients the runtime sums; 0 for
# LLaMA's separate output layer), and that the printed IR parses back to
# the same text.
#   counts.sh SHARDC MODELS_DIR
set -u
shardc=$1
models=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
gpt2="$models/gpt2.shard -D vocab=65 -D seq=8 -D hidden=16 -D heads=2"
llama="$models/llama.shard -D vocab=65 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48"
check() { # name p v layers tied_reduces model...
  name=$1 p=$2 v=$3 l=$4 tied=$5
  shift 5
  if ! "$shardc" compile "$@" -D layers="$l" --pp "$p" --vpp "$v" --emit-ir --verify-each \
      >"$tmp/x.ir" 2>"$tmp/err"; then
    echo "FAIL $name: compile failed"; cat "$tmp/err"; fail=1; return
  fi
  want=$(( p > 1 ? p * v - 1 : 0 ))
  fwd=$(awk '/^  backward:/ {b = 1} /= pp_boundary\(/ && !b' "$tmp/x.ir" | wc -l)
  bwd=$(awk '/^  backward:/ {b = 1} /= pp_boundary\(/ && b' "$tmp/x.ir" | wc -l)
  # Forward message k goes from k to k + 1, its gradient from k + 1 to k.
  pairs_f=$(awk '/^  backward:/ {b = 1} !b && /pp_boundary/ {match($0, /src = [0-9]+, dst = [0-9]+/); print substr($0, RSTART, RLENGTH)}' "$tmp/x.ir" | sort -u | wc -l)
  wrong=$(grep -o 'src = [0-9]*, dst = [0-9]*' "$tmp/x.ir" | awk '{s = $3 + 0; d = $6 + 0; if (s - d != 1 && d - s != 1) print}' | wc -l)
  ties=$(grep -c '^  param .* tied(@' "$tmp/x.ir")
  stages=$(grep -c '^  stage [0-9]*:' "$tmp/x.ir")
  "$shardc" compile "$tmp/x.ir" --passes=verify --emit-ir >"$tmp/again" 2>&1
  same=$(cmp -s "$tmp/x.ir" "$tmp/again" && echo yes || echo no)
  echo "$name: p=$p v=$v l=$l: boundaries forward $fwd backward $bwd (want $want each, $(( 2 * want )) per microbatch), distinct forward pairs $pairs_f, non-neighbour $wrong, tied copies $ties (want $tied), stage lines $stages, round trip $same"
  if [ "$fwd" != "$want" ] || [ "$bwd" != "$want" ] || [ "$pairs_f" != "$want" ] || \
     [ "$wrong" != 0 ] || [ "$ties" != "$tied" ] || [ "$same" != yes ]; then
    echo "FAIL $name"; fail=1
  fi
}
check gpt2 2 1 5 1 $gpt2 --vocab-multiple 8
check gpt2 2 2 5 1 $gpt2 --vocab-multiple 8
check gpt2 4 2 16 1 $gpt2 --vocab-multiple 8
check gpt2 3 1 7 1 $gpt2 --vocab-multiple 8
check gpt2 1 2 4 0 $gpt2 --vocab-multiple 8
check gpt2_t2_sp 2 2 4 1 $gpt2 --vocab-multiple 8 --tp 2 --sequence-parallel
check llama 3 1 5 0 $llama --vocab-multiple 8
check llama 2 3 6 0 $llama --vocab-multiple 8
# With sequence parallelism the message is one rank's [b, s/t, h] slice.
"$shardc" compile $gpt2 -D layers=2 --vocab-multiple 8 --tp 2 --sequence-parallel --pp 2 --emit-ir \
  | grep '= pp_boundary' | sed 's/^ *//'
exit $fail
