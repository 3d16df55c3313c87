#!/bin/sh
# svg.sh SHARDC COMMAND FILE ARGS...: runs `shardc COMMAND ARGS --svg FILE`
# (plan or simulate) and prints FILE, so that a golden can compare the
# drawing.
shardc=$1 command=$2 file=$3
shift 3
"$shardc" "$command" "$@" --svg "$file" >/dev/null || exit 1
cat "$file"
