# bench/common.sh: what the CPU benches share (sourced by cpu_train.sh and
# moe_cpu.sh, which set PY to a python3 first).

die() { echo "bench: $*" >&2; exit 1; }

# best A B: the larger of two rates (A may be empty).
best() { awk -v a="$1" -v b="$2" 'BEGIN {print (a == "" || b + 0 > a + 0) ? b : a}'; }

# rate LOG SKIP: tokens/s over the records after the first SKIP of a --log-json
# file (one JSON object per step with tokens_per_s; every step has the same
# tokens, so the overall rate is the harmonic mean of the step rates).
rate() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
recs = []
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if isinstance(r, dict) and "step" in r and "tokens_per_s" in r and "loss" in r:
        recs.append(r)
recs.sort(key=lambda r: r["step"])
kept = [r["tokens_per_s"] for r in recs[int(sys.argv[2]):] if r["tokens_per_s"] > 0]
if not kept:
    sys.exit("%s: no step records after the first %s" % (sys.argv[1], sys.argv[2]))
print("%.1f" % (len(kept) / sum(1.0 / t for t in kept)))
PYEOF
}
