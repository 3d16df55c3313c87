#!/bin/sh
# flat_sum.sh SHARDC ROOT: a flat chain of many terms is not deep nesting.
# A sum of 1,001 tensors compiles (it was refused as "nests too deeply"),
# and so does one of 10,000; a chain of 10,001 terms is refused with its
# own message; nesting 1,001 levels deep, 1 + (1 + (...)), is still
# refused, and so is a sum of 1,001 numbers: a static expression stays a
# tree that the passes and the reader of the printed IR (200 levels, ir/)
# walk recursively, so its terms still count as levels.
SHARDC=$1
ROOT=$2
. "$ROOT/tests/common/checks.sh"
# model FILE N KIND: a model whose output is a chain of N terms of KIND
# (number: a static sum; tensor: x + x + ...; nested: 1 + (1 + (...)) N
# deep). The default pipeline (fold, shape, verify) runs on each.
model() {
  python3 - "$@" <<'PY'
import sys
path, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = ["model m", "let hidden = 8", "input x: [4, hidden]"]
if kind == "number":
    lines.append("let k = " + " + ".join(["1"] * n))
    lines.append("output loss = x * k")
elif kind == "tensor":
    lines.append("output loss = " + " + ".join(["x"] * n))
else:
    lines.append("let k = " + "1 + (" * n + "1" + ")" * n)
    lines.append("output loss = x * k")
open(path, "w").write("\n".join(lines) + "\n")
PY
}
model num1001.shard 1001 number
model num150.shard 150 number
model ten1001.shard 1001 tensor
model ten10000.shard 10000 tensor
model ten10001.shard 10001 tensor
model nest.shard 1001 nested
for m in num150 ten1001 ten10000; do
  t0=$(date +%s.%N)
  "$SHARDC" compile $m.shard >$m.txt 2>&1
  st=$?
  echo "      $m: exit $st in $(echo "$(date +%s.%N) - $t0" | bc) s"
  check "$m: a flat chain compiles" test $st -eq 0
done
expect_error "a chain of 10001 terms: refused, saying so" "expression chains more than 10000 terms" \
  "$SHARDC" compile ten10001.shard
expect_error "nesting 1001 levels deep: still refused" "nests too deeply (more than 1000 levels)" \
  "$SHARDC" compile nest.shard
expect_error "a static sum of 1001 numbers: still counted as levels" \
  "nests too deeply (more than 1000 levels)" "$SHARDC" compile num1001.shard
finish
