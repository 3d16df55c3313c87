#!/bin/bash
# flat_sum.sh: a flat chain of many terms is not deep nesting.
# A sum of 1,001 tensors compiles (it was refused as "nests too deeply"),
# and so does one of 10,000; a chain of 10,001 terms is refused with its
# own message; nesting 1,001 levels deep, 1 + (1 + (...)), is still
# refused. A static sum of 1,001 numbers, and one of 10,000 config names,
# compile and fold to their values (a static chain is a tree that the
# fold pass evaluates in a loop, left to right; it was refused as
# "nests too deeply"). The printed IR of a static sum of 990 numbers,
# (((1 + 1) + 1) + ...), reads back to the same text and evaluates to its
# value; a printed chain of 10,000 levels reads, one of 10,001 is refused
# with its own message, and 201 levels of real nesting are still refused.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
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
elif kind == "names":
    lines.append("let k = " + " + ".join(["hidden"] * n))
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
model num10000.shard 10000 number
model names10000.shard 10000 names
model num150.shard 150 number
model ten1001.shard 1001 tensor
model ten10000.shard 10000 tensor
model ten10001.shard 10001 tensor
model nest.shard 1001 nested
for m in num150 num1001 num10000 names10000 ten1001 ten10000; do
  t0=$(date +%s.%N)
  st=0; "$SHARDC" compile $m.shard >$m.txt 2>&1 || st=$?
  echo "      $m: exit $st in $(echo "$(date +%s.%N) - $t0" | bc) s"
  check "$m: a flat chain compiles" test $st -eq 0
done
expect_error "a chain of 10001 terms: refused, saying so" "expression chains more than 10000 terms" \
  "$SHARDC" compile ten10001.shard
expect_error "nesting 1001 levels deep: still refused" "nests too deeply (more than 1000 levels)" \
  "$SHARDC" compile nest.shard
for m in num1001:1001 num10000:10000 names10000:80000; do
  "$SHARDC" compile ${m%%:*}.shard --emit-ir >${m%%:*}.folded 2>&1 || true
  echo "      ${m%%:*}: $(grep -o 'config k = .*' ${m%%:*}.folded || echo 'no config k')"
  check "${m%%:*}: folds to ${m#*:}" grep -q "config k = ${m#*:}\$" ${m%%:*}.folded
done
model num990.shard 990 number
"$SHARDC" compile num990.shard --passes=verify --emit-ir >num990.ir 2>&1 || true
st=0; "$SHARDC" compile num990.ir --passes=verify --emit-ir >num990.back.ir 2>&1 || st=$?
echo "      a static sum of 990 numbers printed as IR ($(wc -c <num990.ir) bytes), read back: exit $st"
check "a printed static sum of 990 numbers reads back to the same text" \
  sh -c "[ $st -eq 0 ] && cmp num990.ir num990.back.ir"
check "and folds to 990" sh -c "'$SHARDC' compile num990.ir --emit-ir | grep -q 'config k = 990\$'"
# chain FILE N: printed IR whose config k is a left chain of N + 1 terms
# in the printer's parentheses.
chain() {
  python3 -c '
import sys
path, n = sys.argv[1], int(sys.argv[2])
e = "(" * n + "1" + "".join(" + 1)" for _ in range(n))
open(path, "w").write("model m {\n  config k = %s\n  input %%x: f32[4, 8]\n  %%0 = scale(%%x) {s = k}\n  output loss = %%0\n}\n" % e)' "$@"
}
chain chain10000.ir 9999
chain chain10001.ir 10000
check "a printed chain of 10000 levels reads and folds" \
  sh -c "'$SHARDC' compile chain10000.ir --emit-ir | grep -q 'config k = 10000\$'"
expect_error "a printed chain of 10001 levels: refused, saying why" \
  "expression tree deeper than 10000 levels (each term of a chain of operators is one)" \
  "$SHARDC" compile chain10001.ir
python3 -c '
open("right.ir", "w").write("model m {\n  config k = " + "1 + (" * 201 + "1" + ")" * 201 + "\n}\n")'
expect_error "201 levels of real nesting in printed IR: still refused" \
  "expression nested too deeply (more than 200 levels)" "$SHARDC" compile right.ir
finish
