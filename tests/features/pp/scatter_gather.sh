#!/bin/bash
# Scatter/gather (docs/parallelism.md): with t > 1 and no sequence
# parallelism each tensor rank sends only its 1/t slice of a pipeline
# message and the receiving stage all-gathers the slices.
#   1. In the IR, every forward pp_boundary reads a tp_slice and its result
#      is all-gathered; so is every backward one (the adjoints of
#      all_gather and tp_slice), and the IR parses back. --no-scatter-gather
#      leaves no tp_slice or all_gather.
#   2. The comm report's pipeline bytes per rank are b*s*h reals without
#      it and b*s*h/t with it: the ratio is t.
#   3. With sequence parallelism nothing changes: the report is the same
#      with and without --no-scatter-gather.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
shardc=$SHARDC models=$ROOT/models
tmp=$WORK
fail=0
b=2 s=8 h=16
gpt2="$models/gpt2.shard -D vocab=65 -D seq=$s -D hidden=$h -D heads=4 -D batch=$b --vocab-multiple 8"

# ops FILE: "phase op input-op" for every pp_boundary, tp_slice and
# all_gather of the printed IR.
ops() {
  awk '/^  backward:/ { ph = "backward" } !ph { ph = "forward" }
       /^  %[0-9]+:/ {
         id = $1; sub(":", "", id)
         if (!match($0, /= [a-z_]+\(%[0-9]+/)) next
         call = substr($0, RSTART + 2, RLENGTH - 2); split(call, part, "(")
         op[id] = part[1]
         if (part[1] ~ /^(pp_boundary|tp_slice|all_gather)$/) print ph, part[1], op[part[2]]
       }' "$1"
}

check_ir() { # name p v
  name=$1 p=$2 v=$3
  shift 3
  want=$((p * v - 1))
  if ! "$shardc" compile $gpt2 -D layers=4 --tp 2 --pp "$p" --vpp "$v" --emit-ir --verify-each \
      >"$tmp/sg.ir" 2>"$tmp/err" ||
     ! "$shardc" compile $gpt2 -D layers=4 --tp 2 --pp "$p" --vpp "$v" --emit-ir \
      --no-scatter-gather >"$tmp/whole.ir" 2>>"$tmp/err"; then
    echo "FAIL $name: compile failed"; cat "$tmp/err"; fail=1; return
  fi
  ops "$tmp/sg.ir" >"$tmp/ops"
  line="$name:"
  for ph in forward backward; do
    sliced=$(grep -c "^$ph pp_boundary tp_slice$" "$tmp/ops" || true)
    gathered=$(grep -c "^$ph all_gather pp_boundary$" "$tmp/ops" || true)
    line="$line $ph messages of a slice $sliced, gathered $gathered (want $want each);"
    [ "$sliced" = "$want" ] && [ "$gathered" = "$want" ] || fail=1
  done
  others=$(grep -vc 'pp_boundary tp_slice$\|all_gather pp_boundary$\|^[a-z]* tp_slice [a-z_]*$' "$tmp/ops" || true)
  whole=$(ops "$tmp/whole.ir" | grep -vc pp_boundary || true)
  "$shardc" compile "$tmp/sg.ir" --passes=verify --emit-ir >"$tmp/again" 2>&1 || true
  same=$(cmp -s "$tmp/sg.ir" "$tmp/again" && echo yes || echo no)
  echo "$line unsliced messages $others; slices or gathers with --no-scatter-gather $whole; round trip $same"
  [ "$others" = 0 ] && [ "$whole" = 0 ] && [ "$same" = yes ] || { echo "FAIL $name"; fail=1; }
}
check_ir "t=2 p=2" 2 1
check_ir "t=2 p=2 v=2" 2 2
check_ir "t=2 p=4" 4 1

# pipe_bytes ARGS...: the pipeline bytes per rank of the comm report.
pipe_bytes() {
  "$shardc" compile $gpt2 -D layers=4 "$@" --report comm | sed -n 's/^per rank: .*pipeline \([0-9]*\),.*/\1/p'
}
for t in 2 4; do
  on=$(pipe_bytes --tp $t --pp 2 || true)
  off=$(pipe_bytes --tp $t --pp 2 --no-scatter-gather || true)
  whole=$((b * s * h * 4))
  echo "t=$t p=2: pipeline bytes per rank and microbatch $off whole (b*s*h*4 = $whole), $on with scatter/gather (b*s*h*4/t = $((whole / t))), ratio $((off / (on ? on : 1)))"
  [ "$off" = "$whole" ] && [ "$on" = $((whole / t)) ] || { echo "FAIL t=$t: pipeline bytes"; fail=1; }
done

"$shardc" compile $gpt2 -D layers=4 --tp 2 --pp 2 --sequence-parallel --report comm >"$tmp/sp" &&
  "$shardc" compile $gpt2 -D layers=4 --tp 2 --pp 2 --sequence-parallel --no-scatter-gather \
    --report comm >"$tmp/sp_off" || fail=1
if cmp -s "$tmp/sp" "$tmp/sp_off"; then
  echo "sequence parallel: the same report with and without --no-scatter-gather ($(sed -n 's/^per rank: .*\(pipeline [0-9]*\),.*/\1/p' "$tmp/sp"))"
else
  echo "FAIL sequence parallel: the report changes with --no-scatter-gather"; fail=1
fi
[ $fail = 0 ] && echo ok
exit $fail
