#!/bin/bash
# Runs a command and prints its output with every number rounded to six
# significant digits, so that a golden does not depend on the last bits
# of a floating-point result (compilers may contract a * b + c). A filter
# of golden tests (expect.sh runs it in the test's folder), so it keeps
# its folder and exits with the command's status.
set -euo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
"$@" >"$out" 2>&1 || status=$?
awk '{
  out = ""
  while (match($0, /-?[0-9]+\.[0-9]+(e[-+]?[0-9]+)?/)) {
    out = out substr($0, 1, RSTART - 1) sprintf("%.6g", substr($0, RSTART, RLENGTH))
    $0 = substr($0, RSTART + RLENGTH)
  }
  print out $0
}' "$out"
exit $status
