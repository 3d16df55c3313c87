#!/bin/sh
# Checks the comm report against the formula in docs/parallelism.md: one
# transformer layer's tensor-parallel collectives send 8*b*s*h*(t-1)/t
# elements per rank and microbatch (two all-reduces forward and two backward of b*s*h each, a
# ring all-reduce sending 2(t-1)/t of its buffer). The per-layer numbers are
# the difference of the reports with layers=2 and layers=1. With sequence
# parallelism the all-gathers and reduce-scatters that replace them send
# the same; the all-reduces that remain are the gradients of the norm
# weights and row biases used on sequence slices (6 vectors of h).
#
#   comm_formula.sh SHARDC B S H T [--sequence-parallel] -- MODEL ARGS...
set -u
shardc=$1 b=$2 s=$3 h=$4 t=$5
shift 5
sp=
if [ "$1" = --sequence-parallel ]; then sp=$1; shift; fi
[ "$1" = -- ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for l in 1 2; do
  if ! "$shardc" compile "$@" -D batch=$b -D seq=$s -D hidden=$h -D layers=$l --tp $t $sp \
       --report comm >"$tmp/l$l.txt"; then
    echo "FAIL: compiling with layers=$l failed"
    exit 1
  fi
done
# bytes FILE KIND: the bytes of the rows of that collective.
bytes() {
  awk -v kind="$2" '$2 == kind { sum += $(NF - 1) } END { print sum + 0 }' "$1"
}
formula=$((8 * b * s * h * (t - 1) / t))
echo "formula: 8 * b * s * h * (t - 1) / t = 8 * $b * $s * $h * $(($t - 1)) / $t = $formula elements"
fail=0
for kind in all_reduce all_gather reduce_scatter; do
  eval "d_$kind=\$(( (\$(bytes $tmp/l2.txt $kind) - \$(bytes $tmp/l1.txt $kind)) / 4 ))"
  eval "echo \"per layer $kind: \$d_$kind elements\""
done
if [ -z "$sp" ]; then
  got=$d_all_reduce
  extra=$((d_all_gather + d_reduce_scatter))
  echo "all-reduce form: $got elements per layer, formula $formula"
  [ "$got" = "$formula" ] || fail=1
  [ "$extra" = 0 ] || { echo "unexpected all-gathers or reduce-scatters"; fail=1; }
else
  got=$((d_all_gather + d_reduce_scatter))
  norms=$((6 * 2 * (t - 1) * h / t))
  echo "sequence-parallel form: $got elements per layer in all-gathers and reduce-scatters, formula $formula"
  echo "all-reduces of the 6 norm and bias gradients: $d_all_reduce elements, expected 6 * 2(t-1)/t * h = $norms"
  [ "$got" = "$formula" ] || fail=1
  [ "$d_all_reduce" = "$norms" ] || fail=1
fi
if [ $fail = 0 ]; then echo "ok"; else echo "FAIL"; fi
exit $fail
