#!/bin/bash
# svg.sh COMMAND FILE ARGS...: runs `$SHARDC COMMAND ARGS --svg FILE`
# (plan or simulate) and prints FILE, so that a golden can compare the
# drawing. A filter of golden tests: it runs in the test's folder.
set -euo pipefail
command=$1 file=$2
shift 2
"$SHARDC" "$command" "$@" --svg "$file" >/dev/null
cat "$file"
