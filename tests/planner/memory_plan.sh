#!/bin/bash
# memory_plan.sh WORKDIR MODEL ARGS...: the planner's memory per
# rank (simulate --precision fp32) against the memory plan `shardc compile
# --target cpu` makes for the same programs. Weights, gradients and the
# optimizer state must agree to the byte for every stage; the planner's
# activations are the compiler's plan of one microbatch over the stage's
# chunks times the peak stash over v (simulate uses the plan where the
# model compiles: docs/planner.md), checked to the byte, and the formula's
# figure (--no-memory-plan) is printed beside them.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
dir=$1
shift
rm -rf "$dir"
"$SHARDC" compile "$@" --target cpu -o "$dir" >"$dir.plan"
"$SHARDC" simulate "$@" --precision fp32 --hw a100 --json >"$dir.json"
"$SHARDC" simulate "$@" --precision fp32 --hw a100 --json --no-memory-plan >"$dir.formula.json"
# v, the chunks per stage, from the arguments (1 unless --vpp N).
v=1 prev=
for a in "$@"; do
  [ "$prev" = --vpp ] && v=$a
  prev=$a
done
# The compiler's regions: `[stageN: ]memory plan ...` then one line each.
awk '
  /memory plan/ { st = ($1 ~ /^stage[0-9]+:$/) ? substr($1, 6) + 0 : 0 }
  $1 == "weights" || $1 == "gradients" || $1 == "optimizer" || $1 == "activations" {
    print st, $1, $(NF - 3) }' "$dir.plan" >"$dir.compiler"
awk -F'[:,]' '
  /"stage":/ { st = $2 + 0 }
  /"weights_bytes":/ { printf "%d weights %.0f\n", st, $2 }
  /"gradients_bytes":/ { printf "%d gradients %.0f\n", st, $2 }
  /"optimizer_bytes":/ { printf "%d optimizer %.0f\n", st, $2 }
  /"activations_bytes":/ { act = $2 }
  /"peak_stash":/ { printf "%d activations %.0f %d\n", st, act, $2 }' "$dir.json" >"$dir.planner"
awk -F'[:,]' '/"activations_bytes":/ { printf "%d %.0f\n", n++, $2 }' "$dir.formula.json" >"$dir.formula"
echo "$*"
awk -v v="$v" -v F="$dir.formula" -v C="$dir.compiler" '
  FILENAME == F { f[$1] = $2; next }
  FILENAME == C { c[$1 " " $2] = $3; next }
  { k = $1 " " $2; seen[k] = 1
    if ($2 == "activations") {
      want = c[k] * $4 / v
      same = sprintf("  = compiler x stash %d / v %d %s; formula %s", $4, v,
                     (want == $3) ? "same" : "DIFFERENT", f[$1])
      if (want != $3) bad = 1
    } else {
      same = (c[k] == $3) ? "  same" : "  DIFFERENT"
      if (same == "  DIFFERENT") bad = 1
    }
    if (!(k in c)) bad = 1
    printf "  stage %s %-11s compiler %10s planner %10s%s\n", $1, $2, c[k], $3, same }
  END { for (k in c) if (!(k in seen)) { print "  missing in the planner: " k; bad = 1 }
        exit bad }' "$dir.formula" "$dir.compiler" "$dir.planner"
