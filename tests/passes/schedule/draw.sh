#!/bin/sh
# draw.sh SHARDC KIND FILE ARGS...: runs `shardc schedule ARGS --KIND FILE`
# (KIND svg or trace) and prints FILE, so that a golden can compare it.
shardc=$1 kind=$2 file=$3
shift 3
"$shardc" schedule "$@" "--$kind" "$file" >/dev/null && cat "$file"
