#!/bin/bash
# The planner's routed layers (docs/planner.md, Mixtures of experts) on the
# small models/mixtral.shard (2 layers, hidden 64, top-2 of 8 experts of
# ffn 128, 64 tokens a microbatch) and models/deepseek_moe.shard:
# - one all-to-all priced by hand inside a node, and dearer across two;
# - the all-to-alls exposed whole (no overlap, Megatron-Core's default);
# - the all-to-all bytes one rank sends, (ep - 1) / ep of the T k h
#   dispatched elements at 2 bytes, and the same elements as `--report
#   comm` prints for an all_to_all of those rows, for ep = 2 and 4, and
#   what the compiled expert-parallel program sends (ep = 2, fp32);
# - the expert parameters a rank holds divided by ep, the rest whole;
# - the busiest rank's load: --moe-imbalance, capped by the capacity
#   factor, and a longer step under a larger imbalance;
# - the refusals of --ep: not dividing d or the experts, on a dense
#   model, and --moe-imbalance without it;
# - `plan` searching ep for a routed model, and keeping --ep E.
# Prints every number it checks.
#   moe.sh MODELS_DIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
models=$1
# Files of its own, apart from the other tests that run beside it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mix=$models/mixtral.shard
sim() { "$SHARDC" simulate "$mix" --hw h100 --global-batch 32 "$@"; }
# field JSON KEY...: a number of simulate's JSON (routed.X or stages.0.X).
field() {
  python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v = v[int(k)] if k.isdigit() else v[k]
print(v)' "$@"
}
sim --dp 4 --json >ep1.json
for ep in 2 4; do
  sim --dp 4 --ep "$ep" --json >ep$ep.json
  bytes=$(field ep$ep.json routed all_to_all_bytes)
  want=$(( (ep - 1) * 64 * 2 * 64 / ep * 2 ))
  echo "ep=$ep: all-to-all $bytes bytes sent per rank, (ep-1)/ep x 64 tokens x 2 x 64 x 2 B = $want"
  check "ep=$ep: all-to-all bytes as rt_comm counts them" test "$bytes" = "$want"
  # --report comm on an all_to_all of the same rows [T*k, h] = [128, 64]
  # over ep data ranks: its sent elements at the planner's 2 bytes.
  cat >a2a.ir <<IR
model a2a {
  mesh data = $ep
  input %counts: i32[$ep]
  input %targets: i32[128]
  param @x: f32[128, 64] = normal(0, 1)
  %0, %1 = all_to_all(@x, %counts) {axis = 2, size = $ep, rows = 128}
  %2 = cross_entropy(%0, %targets)
  output loss = %2
}
IR
  "$SHARDC" compile a2a.ir --passes=fold,shape,verify --report comm >report.txt
  sent=$(awk '$1 == "forward" && $2 == "all_to_all" { print $(NF - 2) }' report.txt)
  echo "ep=$ep: --report comm sends $sent elements of [128, 64]; the planner $((bytes / 2))"
  check "ep=$ep: the planner's all-to-all is --report comm's" test "$sent" = $((bytes / 2))
  p1=$(field ep1.json stages 0 params_per_rank) pe=$(field ep$ep.json stages 0 params_per_rank)
  # 2 layers x 3 stacked [8, 128, 64] expert weights; a rank keeps 1/ep.
  experts=$((2 * 3 * 8 * 128 * 64))
  echo "ep=$ep: $pe parameters per rank, $p1 at ep=1, experts $experts"
  check "ep=$ep: the experts divided by ep" test $((p1 - pe)) = $((experts - experts / ep))
done
# The compiled expert-parallel program (the ep-partition pass): every f32
# all-to-all of mixtral at d = 2, ep = 2 sends per call what the planner
# prices at fp32, and there are the planner's 4 per routed layer.
"$SHARDC" compile "$mix" --dp 2 --ep 2 --global-batch 4 --report comm -o prog-ep2 >ep2comm.txt
sim --dp 2 --ep 2 --precision fp32 --json >ep2f32.json
planned=$(field ep2f32.json routed all_to_all_bytes)
layers=$(field ep2f32.json stages 0 layers)
read -r calls per <<<"$(awk '$2 == "all_to_all" && $3 ~ /^f32/ { c += $(NF - 4); b += $(NF - 1) }
  END { printf "%d %d", c, c ? b / c : 0 }' ep2comm.txt)"
echo "ep=2, fp32: the compiled program's $calls all-to-alls of its rows send $per bytes each;" \
     "the planner $planned, $((4 * layers)) of them"
check "ep=2: the compiled all-to-all's bytes are the planner's" test "$per" = "$planned"
check "ep=2: 4 all-to-alls a routed layer, as the planner counts" test "$calls" = $((4 * layers))
# Inside one h100 node: a launch (4 us), NVLink's latency (3 us) and 3/4
# of the busiest rank's 1.25 x 8192 elements at 2 bytes over 450 GB/s at
# the collectives' 0.8.
a2a=$(field ep4.json routed all_to_all_s)
want=$(awk 'BEGIN { printf "%.6g", 4e-6 + 3e-6 + 0.75 * 1.25 * 8192 * 2 / (450e9 * 0.8) }')
echo "ep=4: one all-to-all $a2a s, by hand $want s"
check "ep=4: the all-to-all priced over NVLink" \
  awk -v a="$a2a" -v b="$want" 'BEGIN { exit !(a > 0 && (a - b) / b < 1e-4 && (b - a) / b < 1e-4) }'
# Across two nodes (16 expert ranks, 8 per node; hidden 1024, 2048 tokens,
# so that the bytes outweigh the latencies) half the parts leave
# through each GPU's 50 GB/s adapter: far slower per byte than in a node.
ds=$models/deepseek_moe.shard
"$SHARDC" simulate "$ds" -D hidden=1024 -D seq=2048 --hw h100 --dp 16 --ep 8 --json >ds8.json
"$SHARDC" simulate "$ds" -D hidden=1024 -D seq=2048 --hw h100 --dp 16 --ep 16 --json >ds16.json
t8=$(field ds8.json routed all_to_all_s) t16=$(field ds16.json routed all_to_all_s)
echo "deepseek_moe: all-to-all $t8 s over one node (ep=8), $t16 s over two (ep=16)"
check "an all-to-all across nodes costs more" awk -v a="$t8" -v b="$t16" 'BEGIN { exit !(b > 2 * a) }'
# No overlap (Megatron-Core's default, docs/planner.md): the all-to-alls
# are exposed whole. deepseek_moe's shared experts could hide them
# (Megatron-Core's opt-in --moe-shared-expert-overlap), but do not: a
# slower NVLink (h100 at 1/100 of its bandwidth) lengthens the compute of
# the step by exactly its m x layers x 4 all-to-alls' extra time.
"$SHARDC" hw h100 | sed 's/^intra_bw_gbs = .*/intra_bw_gbs = 4.5/; s/^name = .*/name = slow/' >slow.hw
"$SHARDC" simulate "$ds" --hw h100 --dp 4 --ep 4 --json >dsfast.json
"$SHARDC" simulate "$ds" --hw slow.hw --dp 4 --ep 4 --json >dsslow.json
status=0
python3 - <<'PY' || status=$?
import json, sys
f, s = json.load(open("dsfast.json")), json.load(open("dsslow.json"))
grew = s["stages"][0]["compute_s"] - f["stages"][0]["compute_s"]
a2a = (s["routed"]["all_to_all_s"] - f["routed"]["all_to_all_s"]) * f["microbatches"] * \
      f["stages"][0]["layers"] * f["routed"]["per_layer"] * 4
print(f"deepseek_moe ep=4: compute {1e3 * grew:.4f} ms longer on the slow link, "
      f"its all-to-alls {1e3 * a2a:.4f} ms longer")
if not (a2a > 0 and abs(grew - a2a) <= 1e-6 * a2a + 1e-12):
    sys.exit("FAIL the all-to-alls are not exposed whole")
PY
check "the all-to-alls overlap nothing (no overlap by default)" test $status = 0
check "ep=1: no all-to-all" test "$(field ep1.json routed all_to_all_bytes)" = 0

load=$(field ep4.json routed load)
echo "ep=4: load $load of the mean (the default imbalance)"
check "the default imbalance is 1.25" test "$load" = 1.25
sim --dp 4 --ep 4 --moe-imbalance 2 --json >imb2.json
sim --dp 4 --ep 4 --moe-imbalance 1 --json >imb1.json
t1=$(field imb1.json step_time_s) t2=$(field imb2.json step_time_s)
echo "ep=4: step $t1 s balanced, $t2 s at imbalance 2"
check "a larger imbalance, a longer step" awk -v a="$t1" -v b="$t2" 'BEGIN { exit !(b > a) }'
sim -D capacity=1.1 --dp 4 --ep 4 --moe-imbalance 2 --json >cap.json
cap=$(field cap.json routed load)
echo "ep=4, capacity factor 1.1, imbalance 2: load $cap"
check "the capacity factor caps the load" test "$cap" = 1.1

"$SHARDC" simulate "$models/deepseek_moe.shard" --hw h100 --dp 4 --ep 4 --json >ds.json
echo "deepseek_moe, ep=4: top-$(field ds.json routed top_k) of $(field ds.json routed experts)," \
     "$(field ds.json routed all_to_all_bytes) bytes per all-to-all"
check "deepseek_moe: top-4 of 16 experts of ffn 32, shared experts of ffn 2 x 32" \
  test "$(field ds.json routed top_k)/$(field ds.json routed experts)/$(field ds.json routed expert_ffn)/$(field ds.json routed shared_ffn)" = 4/16/32/64
check "mixtral: no shared experts" test "$(field ep4.json routed shared_ffn)" = 0

# refused CMD WORDS MODEL FLAGS...: `shardc CMD` exits 1 saying WORDS.
refused() {
  cmd=$1 words=$2 model=$3
  shift 3
  status=0
  "$SHARDC" "$cmd" "$model" --hw h100 "$@" >out 2>&1 || status=$?
  if [ $status = 1 ] && grep -qF -- "$words" out; then
    ok "$cmd $*: exit 1: $(grep -F -- "$words" out)"
  else
    fail "$cmd $*: exit $status, expected 1 and '$words': $(cat out)"
  fi
}
refused simulate "--ep 3 must divide --dp 4" "$mix" --dp 4 --ep 3
refused simulate "--ep 16 must divide the 8 experts" "$mix" --dp 16 --ep 16
refused simulate "the model has no routed layer" "$models/gpt2.shard" --dp 2 --ep 2
refused simulate "--moe-imbalance needs --ep > 1" "$mix" --dp 2 --moe-imbalance 1.5
refused simulate "--moe-imbalance: expected a factor of at least 1" "$mix" --dp 2 --ep 2 \
  --moe-imbalance 0.5
refused plan "--ep 3 must divide --gpus 8" "$mix" --gpus 8 --global-batch 32 --ep 3
refused plan "--ep 16 must divide the 8 experts" "$mix" --gpus 16 --global-batch 32 --ep 16
refused plan "the model has no routed layer" "$models/gpt2.shard" --gpus 8 --global-batch 32 \
  --ep 2

"$SHARDC" plan "$mix" --gpus 8 --global-batch 32 --hw h100 --top 40 >plan.txt
head -n 6 plan.txt
check "plan has an ep column" grep -q ' ep  b ' plan.txt
eps=$(awk '/^ +[0-9]+ / && NF > 10 { print $6 }' plan.txt | sort -u | tr '\n' ' ')
echo "plan: ep values among the 40 fastest: $eps"
check "plan tries ep > 1" awk -v e="$eps" 'BEGIN { n = split(e, a, " "); for (i = 1; i <= n; i++) if (a[i] > 1) exit 0; exit 1 }'
# plan --ep E keeps E (its refusals are above).
"$SHARDC" plan "$mix" --gpus 8 --global-batch 32 --hw h100 --ep 4 --top 40 >plan4.txt 2>/dev/null
eps=$(awk '/^ +[0-9]+ / && NF > 10 { print $6 }' plan4.txt | sort -u | tr '\n' ' ')
echo "plan --ep 4: ep values $eps"
check "plan --ep 4 keeps ep 4" test "$eps" = "4 "
finish
