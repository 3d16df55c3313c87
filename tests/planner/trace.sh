#!/bin/bash
# trace.sh FILE ARGS...: runs `$SHARDC simulate ARGS --trace FILE` and
# prints FILE one event a line, numbers rounded (round.sh), so that a
# golden can compare it. A filter of golden tests: it runs in the test's
# folder.
set -euo pipefail
file=$1
shift
"$SHARDC" simulate "$@" --trace "$file" >/dev/null
bash "$(dirname "$0")/round.sh" sed 's/},{/},\n{/g' "$file"
