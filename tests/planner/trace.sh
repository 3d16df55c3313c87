#!/bin/sh
# trace.sh SHARDC FILE ARGS...: runs `shardc simulate ARGS --trace FILE`
# and prints FILE one event a line, numbers rounded (round.sh), so that a
# golden can compare it.
shardc=$1 file=$2
shift 2
"$shardc" simulate "$@" --trace "$file" >/dev/null || exit 1
sh round.sh sed 's/},{/},\n{/g' "$file"
