#!/bin/bash
# shellcheck disable=SC2086 # sizes are numbers, $sp one word or none
# Checks the comm report against the formula in docs/parallelism.md: one
# transformer layer's tensor-parallel collectives send 8*b*s*h*(t-1)/t
# elements per rank and microbatch (two all-reduces forward and two backward of b*s*h each, a
# ring all-reduce sending 2(t-1)/t of its buffer). The per-layer numbers are
# the difference of the reports with layers=2 and layers=1. With sequence
# parallelism the all-gathers and reduce-scatters that replace them send
# the same; the all-reduces that remain are the gradients of the norm
# weights and row biases used on sequence slices (6 vectors of h).
#
#   comm_formula.sh B S H T [--sequence-parallel] -- MODEL ARGS...
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
b=$1 s=$2 h=$3 t=$4
shift 4
sp=
if [ "$1" = --sequence-parallel ]; then sp=$1; shift; fi
[ "$1" = -- ] && shift
for l in 1 2; do
  if ! "$SHARDC" compile "$@" -D batch=$b -D seq=$s -D hidden=$h -D layers=$l --tp $t $sp \
       --report comm >"l$l.txt"; then
    echo "FAIL: compiling with layers=$l failed"
    exit 1
  fi
done
# bytes FILE KIND: the bytes of the rows of that collective.
bytes() {
  awk -v kind="$2" '$2 == kind { sum += $(NF - 1) } END { print sum + 0 }' "$1"
}
formula=$((8 * b * s * h * (t - 1) / t))
echo "formula: 8 * b * s * h * (t - 1) / t = 8 * $b * $s * $h * $((t - 1)) / $t = $formula elements"
# per_layer KIND: the elements one layer's collectives of that kind send.
per_layer() { echo $((($(bytes l2.txt "$1") - $(bytes l1.txt "$1")) / 4)); }
d_all_reduce=$(per_layer all_reduce)
d_all_gather=$(per_layer all_gather)
d_reduce_scatter=$(per_layer reduce_scatter)
echo "per layer: all_reduce $d_all_reduce, all_gather $d_all_gather, reduce_scatter $d_reduce_scatter elements"
if [ -z "$sp" ]; then
  got=$d_all_reduce
  extra=$((d_all_gather + d_reduce_scatter))
  check "all-reduce form: $got elements per layer, formula $formula" test "$got" = "$formula"
  check "no all-gathers or reduce-scatters: $extra elements" test "$extra" = 0
else
  got=$((d_all_gather + d_reduce_scatter))
  norms=$((6 * 2 * (t - 1) * h / t))
  check "sequence-parallel form: $got elements per layer in all-gathers and reduce-scatters, formula $formula" \
    test "$got" = "$formula"
  check "all-reduces of the 6 norm and bias gradients: $d_all_reduce elements, expected 6 * 2(t-1)/t * h = $norms" \
    test "$d_all_reduce" = "$norms"
fi
finish
