#!/bin/bash
# What a run says of its routed layers: with a capacity factor, each
# logged step's line and --log-json record hold the token-slots each
# routed layer dropped and its load balance (the busiest expert's copies
# over the mean), and the run ends with the totals. Checked: the slots
# are tokens x top_k per layer; dropless (capacity 0) and a capacity no
# expert reaches drop none; capacity 0.5 drops, the same counts on one
# rank, under --dp 2, --tp 2 and --pp 2 and with --recompute full; the
# end's total is the sum of the steps', and at least what the rows cannot
# hold; a dense model's lines stay as they were.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
corpus_shards
M=("$ROOT/models/mixtral.shard" -D seq=16 -D hidden=32 -D ffn=48)
RUN=(--data train.bin --no-shuffle --global-batch 2 --steps 3)
field() { sed -n "s/.*\"$1\":\[\([^]]*\)\].*/\1/p" "$2" | tr '\n' ' '; }
# values FIELD FILE: the field's numbers of every step, one a line.
values() { field "$1" "$2" | tr -s ', ' '\n'; }
run_cap() { # NAME CAPACITY FLAGS...
  local name=$1 cap=$2; shift 2
  check "capacity $cap $*" "$SHARDC" run "${M[@]}" -D capacity="$cap" "${RUN[@]}" "$@" --log-json "$name.jsonl" \
    --log-every 1
  cp cmd.txt "$name.txt"
}
run_cap free 0
run_cap roomy 4
run_cap one 0.5
echo "  slots by step:   $(field moe_slots one.jsonl)"
echo "  dropped, 0:      $(field moe_dropped free.jsonl)"
echo "  dropped, 4:      $(field moe_dropped roomy.jsonl)"
echo "  dropped, 0.5:    $(field moe_dropped one.jsonl)"
echo "  load, 0.5:       $(field moe_load one.jsonl)"
grep '^  moe: ' one.txt | head -2 || true
grep '^moe: ' one.txt || true
if [ "$(field moe_slots one.jsonl)" = "64,64 64,64 64,64 " ]; then ok "2 x 16 tokens x top 2 = 64 slots a layer"; else fail "slots"; fi
if [ "$(field moe_dropped free.jsonl)" = "0,0 0,0 0,0 " ] && [ "$(field moe_dropped roomy.jsonl)" = "0,0 0,0 0,0 " ]; then
  ok "dropless and capacity 4 (as many rows as copies) drop nothing"
else
  fail "drops without a binding capacity"
fi
total=$(values moe_dropped one.jsonl | awk 'NF { s += $1 } END { print s + 0 }')
if [ "$total" -gt 0 ] && grep -q "^moe: $total of 384 token-slots dropped over 3 steps" one.txt; then
  ok "capacity 0.5 drops $total slots, the end's total"
else
  fail "capacity 0.5: $total dropped, end line: $(grep '^moe: ' one.txt || true)"
fi
# 16 tokens x 2 a microbatch, 8 experts of ceil(0.5 x 32 / 8) = 2 rows:
# at most 16 kept, so at least 2 x 16 of a step's 64 dropped.
if values moe_dropped one.jsonl | awk 'NF && $1 < 32 { bad = 1 } END { exit bad }'; then
  ok "at least the 32 slots a layer that 8 experts of 2 rows cannot hold"
else
  fail "fewer drops than the capacity forces"
fi
if values moe_load one.jsonl | awk 'NF && $1 < 1 { bad = 1 } END { exit bad }'; then
  ok "load max/mean >= 1"
else
  fail "a load under 1"
fi
# The backward's recomputed forward counts nothing a second time.
for par in dp tp pp recompute; do
  if [ $par = recompute ]; then run_cap $par 0.5 --recompute full; else run_cap $par 0.5 --$par 2; fi
  if [ -n "$(field moe_dropped one.jsonl)" ] && [ "$(field moe_dropped $par.jsonl)" = "$(field moe_dropped one.jsonl)" ] &&
    [ "$(field moe_load $par.jsonl)" = "$(field moe_load one.jsonl)" ]; then
    ok "$par: the same drops and loads as one rank"
  else
    fail "$par: dropped $(field moe_dropped $par.jsonl), load $(field moe_load $par.jsonl)"
  fi
done
check "a dense model" "$SHARDC" run "$ROOT/models/llama.shard" -D seq=16 -D hidden=32 -D heads=4 -D kv_heads=2 \
  -D ffn=48 "${RUN[@]}" \
  --log-json dense.jsonl
if ! grep -q '^  moe: \|^moe: ' cmd.txt && ! grep -q '"moe_' dense.jsonl; then ok "  ... says nothing of routed layers"; else fail "a dense model's log names moe"; fi
finish
