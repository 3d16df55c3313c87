#!/bin/bash
# shellcheck disable=SC2086 # shapes and flag lists are lists of words
# memory.sh: the activations one layer keeps per microbatch,
# from the memory plans `shardc compile` prints, against the formulas of
# Korthikanti et al. (REFERENCE.md), at several shapes and layouts.
#
# A layer's figure is the difference between the kept activations of the
# same model with 4 and with 2 layers, halved (what the layers outside the
# stack keep cancels). The formulas count 16-bit activations; our CPU
# programs keep fp32 (4 bytes), so each formula is doubled before the
# comparison. Checked to the byte:
#  - full: 2 * (2 s b h) per layer, / t with sequence parallelism (the
#    layer's input, and nothing else);
#  - none on GPT-2: (4 + 12/t) elements of s b h (layer input, the two
#    norms' outputs, the residual after attention, q k v, the attention
#    output, the MLP's two activations), with sequence parallelism
#    (2 + 14/t): the input and the residual are sequence slices, the two
#    gathered norm outputs are whole. The formula's 34 (17 elements) is
#    more: it counts the 1-byte dropout masks, which our counter-based
#    dropout draws again; and it has no s^2 term here, because the fused
#    attention op keeps no score matrix (its backward recomputes it),
#    only each query row's log-sum-exp, a s b / t more elements;
#  - selective on GPT-2: the same as none (nothing left to recompute);
#  - selective on a model with the attention written out
#    (tests/features/recompute/unfused.shard): none minus selective is the softmax
#    output and its dropout's, 2 a s^2 b elements (the formula's 5 a s^2 b
#    bytes count the 1-byte mask too).
# Prints one line per shape, layout and mode: measured bytes per layer and
# the doubled formula.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"

# kept MODEL ARGS...: the kept activations of the compiled program (bytes).
kept() {
  m=$1; shift
  "$SHARDC" compile "$m" "$@" --target cpu -o prog >plan.txt 2>&1 || { cat plan.txt >&2; echo -1; return; }
  awk '/activations kept/ { print $5; exit }' plan.txt
}

# per_layer MODEL ARGS...: one layer's kept bytes (4 layers minus 2, halved).
per_layer() {
  m=$1; shift
  a=$(kept "$m" -D layers=2 "$@")
  b=$(kept "$m" -D layers=4 "$@")
  if [ "$a" -ge 0 ] && [ "$b" -ge 0 ]; then echo $(((b - a) / 2)); else echo error; fi
}

# formula MODE s b h a t sp: Korthikanti's bytes per layer, times 2 (fp32).
formula() {
  awk -v m="$1" -v s="$2" -v b="$3" -v h="$4" -v a="$5" -v t="$6" -v sp="$7" 'BEGIN {
    sbh = s * b * h
    if (m == "full") f = 2 * sbh / (sp ? t : 1)
    else if (m == "selective") f = sp ? 34 * sbh / t : sbh * (10 + 24 / t)
    else if (sp) f = sbh * (34 + 5 * a * s / h) / t
    else f = sbh * (10 + 24 / t + 5 * a * s / (h * t))
    printf "%d", 2 * f }'
}

# ours MODE s b h a t sp: what our GPT-2 programs keep per layer (see above).
ours() {
  awk -v m="$1" -v s="$2" -v b="$3" -v h="$4" -v a="$5" -v t="$6" -v sp="$7" 'BEGIN {
    e = s * b * h * 4
    lse = s * b * a / t * 4
    if (m == "full") printf "%d", e / (sp ? t : 1)
    else printf "%d", (sp ? e * (2 + 14 / t) : e * (4 + 12 / t)) + lse }'
}

M="$ROOT/models/gpt2.shard"
printf '%-28s %-10s %12s %12s %s\n' "s b h a, layout" mode "bytes/layer" "formula x2" "check"
for shape in "64 1 64 4" "128 2 64 4" "64 2 128 8"; do
  set -- $shape
  s=$1 b=$2 h=$3 a=$4
  for layout in "1 0" "2 0" "2 1" "4 1"; do
    t=${layout% *} sp=${layout#* }
    flags="--tp $t"
    [ "$sp" = 1 ] && flags="$flags --sequence-parallel"
    none=
    for mode in none selective full; do
      # shellcheck disable=SC2086
      got=$(per_layer "$M" -D seq="$s" -D batch="$b" -D hidden="$h" -D heads="$a" -D vocab=128 \
        $flags --recompute $mode)
      f=$(formula $mode "$s" "$b" "$h" "$a" "$t" "$sp")
      want=$(ours $mode "$s" "$b" "$h" "$a" "$t" "$sp")
      [ $mode = none ] && none=$got
      [ $mode = selective ] && want=$none
      what="s=$s b=$b h=$h a=$a t=$t sp=$sp"
      line=$(printf '%-28s %-10s %12s %12s' "$s $b $h $a, t=$t sp=$sp" $mode "$got" "$f")
      if [ "$got" != error ] && [ "$got" = "$want" ]; then
        ok "$line"
      else
        fail "$line: expected $want ($what)"
      fi
    done
  done
done

# The attention written out: selective recomputes the softmax and its
# dropout (2 a s^2 b reals of 4 bytes per layer); full keeps the input.
U="$ROOT/tests/features/recompute/unfused.shard"
for shape in "16 2 32 2" "32 1 32 4"; do
  set -- $shape
  s=$1 b=$2 h=$3 a=$4
  d="-D seq=$s -D batch=$b -D hidden=$h -D heads=$a -D vocab=64"
  # shellcheck disable=SC2086
  none=$(per_layer "$U" $d --recompute none)
  # shellcheck disable=SC2086
  sel=$(per_layer "$U" $d --recompute selective)
  # shellcheck disable=SC2086
  full=$(per_layer "$U" $d --recompute full)
  core=$((2 * a * s * s * b * 4))
  line=$(printf 'unfused s=%s b=%s h=%s a=%s: none %s, selective %s (saves %s; formula 5as^2b x2 = %s), full %s' \
    "$s" "$b" "$h" "$a" "$none" "$sel" $((none - sel)) $((10 * a * s * s * b)) "$full")
  if [ "$none" != error ] && [ "$sel" != error ] && [ $((none - sel)) = $core ] && [ "$full" = $((s * b * h * 4)) ]; then
    ok "$line"
  else
    fail "$line: expected selective to save $core and full to keep $((s * b * h * 4))"
  fi
done

# With row chunks (the CPU target's runs, planned at this shape) the
# temporaries under full must not grow with the layers: a run that held
# the whole forward would bring back what recomputation frees.
D="-D seq=128 -D batch=8 -D hidden=128 -D heads=4 -D vocab=256"
temps() {
  # shellcheck disable=SC2086
  "$SHARDC" compile "$M" $D "$@" --target cpu -o prog | awk '/temporaries/ { print $2; exit }'
}
t4=$(temps -D layers=4 --recompute full) t8=$(temps -D layers=8 --recompute full)
n4=$(temps -D layers=4)
if [ -n "$t4" ] && [ "$t4" = "$t8" ] && [ "$t4" -le "$n4" ]; then
  ok "full, demo shape: temporaries $t4 bytes at 4 layers and $t8 at 8 (none: $n4 at 4)"
else
  fail "full, demo shape: temporaries $t4 bytes at 4 layers, $t8 at 8, none $n4 at 4"
fi

# The planner prices groups of layers: every N-th input kept, one group live.
sim() {
  "$SHARDC" simulate "$ROOT/models/gpt3.shard" --hw a100 --tp 8 --pp 4 --global-batch 64 "$@" --json |
    sed -n 's/.*"memory_bytes_per_gpu":[^0-9]*\([0-9]*\).*/\1/p'
}
s1=$(sim --recompute full) s4=$(sim --recompute full --recompute-layers 4)
if [ -n "$s1" ] && [ -n "$s4" ] && [ "$s1" != "$s4" ]; then
  ok "simulate gpt3 t=8 p=4, full: $s1 bytes per GPU; in groups of 4 layers: $s4"
else
  fail "simulate: --recompute-layers 4 gives $s4 bytes, 1 gives $s1"
fi

# The plan prints both figures under recomputation, and only its own without.
"$SHARDC" compile "$M" -D layers=2 -D seq=64 -D hidden=64 -D heads=4 -D vocab=128 --recompute full \
  --target cpu -o prog >plan.txt 2>&1
if grep -q 'without recomputation' plan.txt; then
  ok "--recompute full prints: $(grep -A1 'activations kept' plan.txt | tr -s ' ' | tr '\n' ';')"
else
  fail "--recompute full: no 'without recomputation' line in the plan"
fi
"$SHARDC" compile "$M" -D layers=2 -D seq=64 -D hidden=64 -D heads=4 -D vocab=128 --target cpu \
  -o prog >plan.txt 2>&1
if grep -q 'without recomputation' plan.txt; then
  fail "--recompute none prints a 'without recomputation' line"
else
  ok "--recompute none prints only its own activations"
fi
finish
