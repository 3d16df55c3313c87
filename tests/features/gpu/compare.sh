# shellcheck shell=bash
# The comparisons of two --log-json files (one JSON object per step) that
# the GPU checks make: sourced by tests/features/gpu/run.sh and by the GPU kit's
# runner (tests/features/gpu/kit/run.sh), which reads $STEPS, the steps each run
# must have. Each prints what it compared; a failure prints FAIL and the
# first step that fails, and returns 1.

# steps_losses JSON: "step loss" per line of a --log-json file.
steps_losses() { sed 's/.*"step":\([0-9]*\).*"loss":\([^,}]*\).*/\1 \2/' "$1"; }

# cmp_losses WHAT REF OTHER TOL [rel]: every step of REF in OTHER,
# |loss - ref| <= TOL, or with `rel` |loss - ref| <= TOL |ref|. Over the
# limit, a second line names the first step over it with both losses.
cmp_losses() {
  steps_losses "$2" >"$2.sl"
  steps_losses "$3" >"$3.sl"
  awk -v what="$1" -v tol="$4" -v want="$STEPS" -v rel="${5:-}" '
    NR == FNR { ref[$1] = $2; next }
    { got[$1] = $2 }
    END {
      worst = 0; n = 0; first = ""
      for (s = 1; s <= want; s++) {
        if (!(s in ref)) continue
        if (!(s in got) || got[s] !~ /^-?[0-9]/ || ref[s] !~ /^-?[0-9]/) {
          printf "FAIL: %s: first mismatch at step %s: loss %s against %s\n", what, s, got[s], ref[s]
          exit 1
        }
        d = got[s] - ref[s]; if (d < 0) d = -d
        if (rel != "") { r = ref[s] < 0 ? -ref[s] : ref[s]; d = r > 0 ? d / r : d }
        if (d > worst) worst = d
        if (d > tol && first == "") first = sprintf("step %d: loss %s against %s", s, got[s], ref[s])
        n++
      }
      if (n != want) { printf "FAIL: %s: %d steps compared, not %d\n", what, n, want; exit 1 }
      printf "%s: %d steps, largest %s|loss difference| %.2e (limit %s)\n", what, n,
             rel != "" ? "relative " : "", worst, tol
      if (first != "") printf "  first mismatch: %s\n", first
      exit first != ""
    }' "$2.sl" "$3.sl"
}

# json_bits JSON: "step loss grad_norm" per line, as the program printed
# them (cJSON prints a double so that it reads back to the same bits).
json_bits() { sed 's/.*"step":\([0-9]*\).*"loss":\([^,}]*\).*"grad_norm":\([^,}]*\).*/\1 \2 \3/' "$1"; }

# same_bits WHAT REF OTHER: every step's loss and gradient norm in OTHER
# are REF's to the bit.
same_bits() {
  local n
  n=$(json_bits "$2" | wc -l)
  if [ "$n" = "$STEPS" ] && [ "$(json_bits "$2")" = "$(json_bits "$3")" ]; then
    echo "$1: $n steps, losses and gradient norms to the bit"
    return 0
  fi
  echo "FAIL: $1: not the same bits over $n steps; the first that differ (step loss grad_norm):"
  paste -d '|' <(json_bits "$2") <(json_bits "$3") | awk -F '|' '$1 != $2 { print "  " $1 "  against  " $2 }' |
    head -n 3
  return 1
}
