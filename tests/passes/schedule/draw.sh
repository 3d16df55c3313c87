#!/bin/bash
# draw.sh KIND FILE ARGS...: runs `$SHARDC schedule ARGS --KIND FILE`
# (KIND svg or trace) and prints FILE, so that a golden can compare it.
# A filter of golden tests: it runs in the test's folder.
set -euo pipefail
kind=$1 file=$2
shift 2
"$SHARDC" schedule "$@" "--$kind" "$file" >/dev/null
cat "$file"
