#!/bin/sh
# memory_plan.sh SHARDC WORKDIR MODEL ARGS...: the planner's memory per
# rank (simulate --precision fp32) against the memory plan `shardc compile
# --target cpu` makes for the same programs. Weights, gradients and the
# optimizer state must agree to the byte for every stage; the activations
# are printed side by side (the planner's are REFERENCE.md's formula, the
# compiler's its exact plan of one microbatch's live tensors: see
# docs/planner.md), not compared.
set -e
shardc=$1 dir=$2
shift 2
rm -rf "$dir"
"$shardc" compile "$@" --target cpu -o "$dir" >"$dir.plan"
"$shardc" simulate "$@" --precision fp32 --hw a100 --json >"$dir.json"
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
echo "$*"
awk 'NR == FNR { c[$1 " " $2] = $3; next }
  { k = $1 " " $2; seen[k] = 1
    if ($2 == "activations")
      same = sprintf("  (a peak stash of %d microbatch-chunks)", $4)
    else same = (c[k] == $3) ? "  same" : "  DIFFERENT"
    if (same == "  DIFFERENT" || !(k in c)) bad = 1
    printf "  stage %s %-11s compiler %10s planner %10s%s\n", $1, $2, c[k], $3, same }
  END { for (k in c) if (!(k in seen)) { print "  missing in the planner: " k; bad = 1 }
        exit bad }' "$dir.compiler" "$dir.planner"
