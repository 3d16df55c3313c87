#!/bin/sh
# trace_run.sh SHARDC DATA WORK: the demo shape trained a few steps with
# `shardc run --trace` on one rank and on two (t=2, p=2, d=2 in turn). Each
# trace must be valid JSON with one named process per rank and, on every
# rank, the forward and backward of every microbatch and one optimizer
# step for each recorded step (2 by default); a pipeline's ranks also
# their message waits. With COMPARE=1 (the test sets it once compare-trace
# exists) the same configuration is simulated with the description
# `shardc hw --measure` wrote and `shardc compare-trace` prints both step
# times and their ratio (a measurement, printed, not held to a bound) and
# draws both steps into NAME.svg, which must be well-formed XML.
shardc=$1 data=$2 work=$3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
S="-D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256"
mkdir -p "$work" && cd "$work" || exit 1
bad=0
if [ "${COMPARE:-0}" = 1 ]; then
  "$shardc" hw --measure -o measured.hw --max-size 256 >/dev/null || { echo "FAIL: hw --measure"; exit 1; }
fi
for layout in "1 1 1" "2 1 1" "1 2 1" "1 1 2"; do
  set -- $layout
  name=t$1p$2d$3
  mesh="--tp $1 --pp $2 --dp $3"
  rm -f "$name.json"
  "$shardc" run "$ROOT/models/gpt2.shard" $S $mesh --microbatch 4 --global-batch $((16 * $3)) \
    --data "$data" --steps 4 --quiet --out "prog-$name" --trace "$name.json" >"$name.txt" 2>&1 || {
    echo "FAIL $name: shardc run exited $?"; tail -5 "$name.txt"; bad=1; continue; }
  python3 - "$name.json" $(($1 * $2 * $3)) 4 2 <<'PY' || { bad=1; continue; }
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
    "$shardc" compare-trace "$name.json" "$name.sim.json" --svg "$name.svg" || {
      echo "FAIL $name: compare-trace"; bad=1; }
    python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$name.svg" ||
      { echo "FAIL $name: $name.svg is not XML"; bad=1; }
  fi
done
exit $bad
