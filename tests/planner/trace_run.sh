#!/bin/bash
# trace_run.sh DATA WORK: the demo shape trained a few steps with
# `shardc run --trace` on one rank and on two (t=2, p=2, d=2 in turn). Each
# trace must be valid JSON with one named process per rank and, on every
# rank, the forward and backward of every microbatch and one optimizer
# step for each recorded step; a pipeline's ranks also their message
# waits. With COMPARE=1 (the test sets it) the same configuration is
# simulated with the description `shardc hw --measure` wrote, `shardc
# compare-trace` prints both step times and draws both steps into
# NAME.svg, which must be well-formed XML, and the simulated step time
# must be within 25% of the measured one (issue 12; docs/planner.md).
#
# The runs record 4 steps after a warm-up step, and the description is
# measured first, on the same machine in the same minute. Another job's
# load slows a run and not its prediction, so a layout outside the bound
# is run again, up to 3 times: one attempt inside it passes (every
# attempt is printed); a model that is wrong fails all three. When all
# three miss, a probe asks whether the cores were this test's: busy
# processes, one per core, must each get 80% of a core. On a machine that
# other jobs share the miss is printed as such and not held against the
# model (the bound is about the model, not about the neighbours).
set -euo pipefail
# checks.sh runs every rank on one thread unless OMP_NUM_THREADS says more:
# that is the configuration held to the bound. One rank on both cores of a
# 2-core machine is predicted 35% slow (110.7 ms against 81 measured;
# docs/planner.md), which OMP_NUM_THREADS=2 shows.
. "$SHARDC_SRC/tests/common/checks.sh"
shardc=$SHARDC data=$(cd "$OLDPWD" && realpath "$1") work=$2
S="-D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256"
# WORK is kept for a look afterwards, relative to where the test started.
cd "$OLDPWD" && mkdir -p "$work" && cd "$work"
bad=0
# error NAME: the simulated step time's error in percent, from NAME.cmp.
error() { sed -n 's/.*simulated step time error \([-+0-9.]*\)%.*/\1/p' "$1.cmp"; }
# quiet: whether each of one busy process per core gets 80% of a core
# (tests/common/quiet.py).
quiet() { python3 "$SHARDC_SRC/tests/common/quiet.py"; }
# within NAME: |error| <= 25, running the layout again (up to 3 attempts
# in all) while it is not; prints each attempt's step times. BOUND=0 (the
# sanitizer build: its programs' own kernels run several times slower,
# while the GEMMs `hw --measure` times are OpenBLAS's, uninstrumented)
# prints the first attempt and holds nothing.
within() {
  for attempt in 1 2 3; do
    e=$(error "$1")
    sed -n "s/^step time: measured \([0-9.]* ms\).*simulated \([0-9.]* ms\).*/$1 attempt $attempt: measured \1, simulated \2 (error $e%)/p" "$1.cmp"
    if [ "${BOUND:-1}" = 0 ]; then
      echo "$1: not held to the 25% bound (BOUND=0: a sanitizer build)"
      return 0
    fi
    [ -n "$e" ] && awk -v e="$e" 'BEGIN { exit !(e <= 25 && e >= -25) }' && return 0
    [ $attempt = 3 ] && break
    train "$1" $mesh || return 1
    "$shardc" compare-trace "$1.json" "$1.sim.json" >"$1.cmp" || return 1
  done
  quiet && return 1
  echo "$1: outside 25% on a machine other jobs share: not counted"
}
if [ "${COMPARE:-0}" = 1 ]; then
  "$shardc" hw --measure -o measured.hw --max-size 512 >/dev/null || { echo "FAIL: hw --measure"; exit 1; }
fi
STEPS=6 RECORDED=4
# train NAME MESH...: the run, its trace in NAME.json.
train() {
  name=$1
  shift
  rm -f "$name.json"
  "$shardc" run "$ROOT/models/gpt2.shard" $S "$@" --microbatch 4 --global-batch $((16 * $dp)) \
    --data "$data" --steps $STEPS --trace-steps $RECORDED --quiet --out "prog-$name" \
    --trace "$name.json" >"$name.txt" 2>&1 || {
    echo "FAIL $name: shardc run exited $?"; tail -5 "$name.txt"; return 1; }
}
for layout in "1 1 1" "2 1 1" "1 2 1" "1 1 2"; do
  set -- $layout
  name=t$1p$2d$3 dp=$3
  mesh="--tp $1 --pp $2 --dp $3"
  train "$name" $mesh || { bad=1; continue; }
  python3 - "$name.json" $(($1 * $2 * $3)) 4 $RECORDED <<'PY' || { bad=1; continue; }
import json, sys
path, ranks, micro, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    ev = json.load(open(path))["traceEvents"]
except Exception as e:
    sys.exit(f"FAIL {path}: not a trace: {e}")
names = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
if sorted(names) != list(range(ranks)):
    sys.exit(f"FAIL {path}: processes {sorted(names)} for {ranks} ranks")
for r in range(ranks):
    x = [e for e in ev if e["pid"] == r and e["ph"] == "X"]
    if any(e["dur"] < 0 or e["ts"] < 0 for e in x):
        sys.exit(f"FAIL {path}: rank {r}: a negative time")
    count = lambda cat: sum(e["cat"] == cat for e in x)
    want = {"F": micro * steps, "B": micro * steps, "optimizer": steps}
    got = {k: count(k) for k in want}
    if got != want:
        sys.exit(f"FAIL {path}: rank {r} ({names[r]}): {got}, expected {want}")
    if "p1" in names.get(1, "") and count("message") == 0:
        sys.exit(f"FAIL {path}: rank {r}: a pipeline stage without message events")
print(f"ok {path}: {ranks} rank(s), " + ", ".join(names[r] for r in range(ranks)))
PY
  if [ "${COMPARE:-0}" = 1 ]; then
    "$shardc" simulate "$ROOT/models/gpt2.shard" $S $mesh --microbatch 4 \
      --global-batch $((16 * $3)) --hw measured.hw --precision fp32 --trace "$name.sim.json" \
      >"$name.sim.txt" 2>&1 || { echo "FAIL $name: simulate"; tail -5 "$name.sim.txt"; bad=1; continue; }
    echo "== $name: measured against simulated"
    "$shardc" compare-trace "$name.json" "$name.sim.json" --svg "$name.svg" >"$name.cmp" || {
      echo "FAIL $name: compare-trace"; bad=1; }
    cat "$name.cmp"
    python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$name.svg" ||
      { echo "FAIL $name: $name.svg is not XML"; bad=1; }
    within "$name" || { echo "FAIL $name: the simulated step time is not within 25% of the measured one"; bad=1; }
  fi
done
exit $bad
