#!/bin/bash
# demo_bits.sh DATA EXPECTED BUILD: the demo shape (models/gpt2.shard,
# 4 layers, hidden 128, seq 128, byte vocabulary) trained 10 steps on one
# rank, on t=2 x p=2, on t=2 x p=2 with v=2 (the demo's mesh) and on
# t=2 x p=2 x d=2 with ZeRO-1 must print, to the bit, the losses and
# gradient norms recorded in EXPECTED. The numbers were recorded before the
# runtime's device layer and the codegen's program layout were introduced;
# a refactoring that changes any of them changed what the programs compute.
#
# Bits depend on the compiler and the processor (the kernels are built with
# -march=native; gcc and clang contract and vectorise differently), so
# EXPECTED has one section per build, headed `# build KEY`, KEY being BUILD
# (compiler, version, sanitizers, and the processor that -march=native
# resolves to, which tests/features/train/tests.cmake asks the compiler for) and the
# processor's widest vector unit.
# Where no section matches, the losses must agree with the first one within
# 1e-5 relative (gradient norms 1e-4), and the test says that bits were not
# compared; DEMO_BITS_RECORD=1 appends a section for this build instead.
# One OpenMP thread (checks.sh): the kernels' reductions split by thread.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
DATA=$1
EXPECTED=$2
BUILD=$3

flags=$({ grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true; } | tr ' ' '\n')
isa=
for f in avx avx2 avx512f; do echo "$flags" | grep -qx $f && isa=$f; done
KEY="$BUILD $(uname -m)${isa:+-$isa}"
if [ -n "${DEMO_BITS_RECORD:-}" ]; then
  echo "# build $KEY" >record.txt
elif grep -qxF "# build $KEY" "$EXPECTED"; then
  echo "build $KEY: a recording of this build exists; comparing bits"
else
  echo "build $KEY: no recording of this build in $(basename "$EXPECTED"); comparing with the first" \
    "recording within 1e-5 (losses) and 1e-4 (gradient norms), not bits"
fi

run_layout() {
  name=$1; shift
  "$SHARDC" run "$ROOT/models/gpt2.shard" -D layers=4 -D hidden=128 -D heads=4 -D seq=128 \
    -D vocab=256 --microbatch 4 --data "$DATA" --global-batch 16 --lr 2e-3 --warmup 20 \
    --lr-min 2e-4 --weight-decay 0.1 --steps 10 --log-every 10 --quiet \
    --out "prog-$name" --log-json "$name.jsonl" "$@" >"$name.txt" 2>&1 || {
    fail "$name: exit $?"; sed 's/^/      /' "$name.txt" | tail -5; return; }
  if [ -n "${DEMO_BITS_RECORD:-}" ]; then
    python3 -c "
import json, sys
for l in open(sys.argv[2]):
    r = json.loads(l)
    print(sys.argv[1], r['step'], repr(r['loss']), repr(r['grad_norm']))" "$name" "$name.jsonl" >>record.txt
    ok "$name: recorded"
    return
  fi
  if python3 - "$name" "$name.jsonl" "$EXPECTED" "$KEY" <<'PY'; then
import json, sys
name, log, expected, key = sys.argv[1:5]
sections, cur = {}, None
for l in open(expected):
    if l.startswith("# build "):
        cur = l[len("# build "):].strip()
        sections[cur] = []
    elif cur and l.split() and l.split()[0] == name:
        sections[cur].append(l.split())
bits = key in sections
want = sections[key] if bits else next(iter(sections.values()))
got = [json.loads(l) for l in open(log)]
bad = 0
for (_, step, loss, norm), r in zip(want, got):
    if bits:
        same = r["loss"] == float(loss) and r["grad_norm"] == float(norm)
    else:
        same = (abs(r["loss"] - float(loss)) <= 1e-5 * abs(float(loss)) and
                abs(r["grad_norm"] - float(norm)) <= 1e-4 * abs(float(norm)))
    same = same and r["step"] == int(step)
    if not same or int(step) in (1, 10):
        print("      %-9s step %2d loss %r (recorded %s) grad norm %r (recorded %s)%s"
              % (name, r["step"], r["loss"], loss, r["grad_norm"], norm, "" if same else "  DIFFERS"))
    bad += not same
if len(want) != 10 or len(got) != 10 or bad:
    print("FAIL: %s: %d of %d steps differ (%d recorded)" % (name, bad, len(got), len(want)))
    sys.exit(1)
PY
    ok "$name: 10 steps equal the recorded losses and gradient norms"
  else
    FAILS=$((FAILS + 1))
  fi
}

run_layout 1
run_layout t2p2 --tp 2 --pp 2
run_layout t2p2v2 --tp 2 --pp 2 --vpp 2
run_layout t2p2d2z1 --tp 2 --pp 2 --dp 2 --zero 1
if [ -n "${DEMO_BITS_RECORD:-}" ]; then
  cat record.txt >>"$EXPECTED"
  echo "appended the recording of build $KEY to $EXPECTED"
fi
finish
