#!/bin/bash
# The cheap checks of models/neox.shard, in the default test set (the
# comparison with Hugging Face's own class is hf_models.sh, label long):
#
#   tests/features/oracle/models_cpu.sh DATA
#
# 1. `shardc info` at the default shape counts Pythia-160M's 162,322,944
#    parameters;
# 2. a tiny shape trains 2 steps on one rank from the seeded init; the
#    losses are the ones recorded below (1e-4: the kernels are built for
#    the machine, so the last bits may move);
# 3. the same under --tp 2 gives the one-rank losses (1e-5);
# 4. tests/features/oracle/neox_slices.shard, the partial rotary written with slice
#    and an unequal concat, gives the same losses as rope's dims (1e-6).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
DATA=$(cd "$OLDPWD" && realpath "$1")
HERE=$ROOT/tests/features/oracle
export OMP_NUM_THREADS=1
fail=0

count=$("$SHARDC" info "$ROOT/models/neox.shard" | awk '$1 == "parameters" {print $2}' || true)
echo "neox parameters: $count (Pythia-160M: 162,322,944)"
[ "$count" = "162,322,944" ] || { echo "FAIL: parameter count"; fail=1; }

TINY="-D vocab=256 -D seq=16 -D hidden=32 -D heads=4 -D layers=2 -D init_std=0.1"
losses() { # MODEL ARGS...: the logged losses, one a line
  m=$1
  shift
  # shellcheck disable=SC2086
  "$SHARDC" run "$m" $TINY --data "$DATA" --no-shuffle --steps 2 --quiet --log-json l.jsonl "$@" \
    >run.txt 2>&1 || { cat run.txt; echo "FAIL: $m $*"; exit 1; }
  sed 's/.*"loss":\([^,]*\),.*/\1/' l.jsonl
}
# within A B TOL: |A - B| <= TOL for each pair of lines
within() {
  paste "$1" "$2" | awk -v tol="$3" -v what="$4" '
    { d = $1 - $2; if (d < 0) d = -d; printf "  %s step %d: %.9f %.9f |diff| %.2e\n", what, NR, $1, $2, d
      if (d > tol) bad = 1 }
    END { exit bad }'
}
losses "$ROOT/models/neox.shard" >one.txt
printf "5.7356319\n5.6365981\n" >expected.txt
within one.txt expected.txt 1e-4 "1 rank vs recorded" || { echo "FAIL: recorded loss"; fail=1; }
losses "$ROOT/models/neox.shard" --tp 2 >tp2.txt
within one.txt tp2.txt 1e-5 "1 rank vs --tp 2" || { echo "FAIL: --tp 2"; fail=1; }
losses "$HERE/neox_slices.shard" >slices.txt
within one.txt slices.txt 1e-6 "rope dims vs slices" || { echo "FAIL: slices"; fail=1; }
[ $fail = 0 ] && echo "models_cpu: PASS" || echo "models_cpu: FAIL"
exit $fail
