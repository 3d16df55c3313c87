#!/bin/sh
# demo_bits.sh SHARDC DATA EXPECTED: the demo shape (models/gpt2.shard, 4
# layers, hidden 128, seq 128, byte vocabulary) trained 10 steps on one
# rank, on t=2 x p=2, on t=2 x p=2 with v=2 (the demo's mesh) and on
# t=2 x p=2 x d=2 with ZeRO-1 must print, to the bit, the losses and
# gradient norms recorded in EXPECTED. The numbers were recorded before the
# runtime's device layer and the codegen's program layout were introduced;
# a refactoring that changes any of them changed what the programs compute.
# One OpenMP thread (checks.sh): the kernels' reductions split by thread.
SHARDC=$1
DATA=$2
EXPECTED=$3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/../common/checks.sh"

run_layout() {
  name=$1; shift
  "$SHARDC" run "$ROOT/models/gpt2.shard" -D layers=4 -D hidden=128 -D heads=4 -D seq=128 \
    -D vocab=256 --microbatch 4 --data "$DATA" --global-batch 16 --lr 2e-3 --warmup 20 \
    --lr-min 2e-4 --weight-decay 0.1 --steps 10 --log-every 10 --quiet \
    --out "prog-$name" --log-json "$name.jsonl" "$@" >"$name.txt" 2>&1 || {
    fail "$name: exit $?"; sed 's/^/      /' "$name.txt" | tail -5; return; }
  python3 - "$name" "$name.jsonl" "$EXPECTED" <<'PY' && ok "$name: 10 steps equal the recorded losses and gradient norms to the bit" || FAILS=$((FAILS + 1))
import json, sys
name, log, expected = sys.argv[1:4]
want = [l.split() for l in open(expected) if l.split() and l.split()[0] == name]
got = [json.loads(l) for l in open(log)]
bad = 0
for (_, step, loss, norm), r in zip(want, got):
    same = r["step"] == int(step) and r["loss"] == float(loss) and r["grad_norm"] == float(norm)
    if not same or int(step) in (1, 10):
        print("      %-9s step %2d loss %r (recorded %s) grad norm %r (recorded %s)%s"
              % (name, r["step"], r["loss"], loss, r["grad_norm"], norm, "" if same else "  DIFFERS"))
    bad += not same
if len(want) != 10 or len(got) != 10 or bad:
    print("FAIL: %s: %d of %d steps differ (%d recorded)" % (name, bad, len(got), len(want)))
    sys.exit(1)
PY
}

run_layout 1
run_layout t2p2 --tp 2 --pp 2
run_layout t2p2v2 --tp 2 --pp 2 --vpp 2
run_layout t2p2d2z1 --tp 2 --pp 2 --dp 2 --zero 1
finish
