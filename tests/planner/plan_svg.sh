#!/bin/sh
# plan_svg.sh SHARDC FILE ARGS...: runs `shardc plan ARGS --svg FILE` and
# prints FILE, so that a golden can compare the drawing.
shardc=$1 file=$2
shift 2
"$shardc" plan "$@" --svg "$file" >/dev/null || exit 1
cat "$file"
