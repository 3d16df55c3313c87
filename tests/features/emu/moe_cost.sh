#!/bin/bash
# The cost report of a routed model's CUDA program (`shardc simulate
# --program`, planner/program_cost.c): the tiny Mixtral in fp32 and bf16,
# with and without a capacity factor. Every call of a routed kernel in the
# chunk functions of rank0.cu is a launch of the listing, none is
# "unlisted", and each grouped GEMM is priced as a batched product over the
# experts of `per` rows (the tokens, or the capacity when it is smaller):
# FLOPs 2 E per in out. Needs a shardc built with the CUDA libraries; skips
# (77) without them.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
M=("$ROOT/models/mixtral.shard" -D seq=16 -D hidden=32 -D ffn=48 -D batch=2)
for form in "fp32" "bf16" "fp32 -D capacity=0.5"; do
  read -r prec extra <<<"$form"
  dir=mx-$prec${extra:+-cap}
  # shellcheck disable=SC2086
  if ! "$SHARDC" compile "${M[@]}" $extra --target cuda --precision "$prec" -o "$dir" >"$dir.log" 2>&1; then
    if grep -q 'built without the CUDA libraries' "$dir.log"; then
      echo "SKIP: $(grep -m1 error "$dir.log")"
      exit 77
    fi
    fail "$dir: compile: $(grep -m1 error "$dir.log")"
    continue
  fi
  "$SHARDC" simulate --program "$dir" --hw h200 --json >"$dir.json" 2>"$dir.err" ||
    { fail "$dir: simulate: $(cat "$dir.err")"; continue; }
  # 32 tokens, top 2 of 8: 64 rows, at most 32 an expert (4 with capacity 0.5).
  per=$([ -n "$extra" ] && echo 4 || echo 32)
  if python3 - "$dir" "$per" <<'PY'; then ok "$dir: the routed calls priced"; else fail "$dir: the routed calls"; fi
import json, re, sys
d, per = sys.argv[1], int(sys.argv[2])
r = json.load(open(d + ".json"))
prog = json.load(open(d + "/kernels.json"))["programs"][0]
src = open(f"{d}/rank0.cu").read()
body = src[src.index("static void forward"):src.index("static const RtParam")]
routed = re.compile(r"^\s*(k_cuda_(?:router|moe|grouped)_\w+)\(")
calls = [m.group(1) for l in body.splitlines() for m in [routed.match(l)] if m]
listed = [l["kernel"] for l in prog["launches"] if routed.match(l["kernel"] + "(")]
print(f"  {d}: {len(calls)} routed calls, {len(listed)} listed, {r['unlisted']} unlisted")
ok = calls == listed and r["unlisted"] == 0 and calls
for l in r["launches"]:
    if not l["kernel"].startswith("k_cuda_grouped_gemm"):
        continue
    e, m, n, k = 8, *map(int, re.match(r"(\d+)x(\d+)x(\d+) x8", l["shape"]).groups())
    rows = k if "grouped_linear_dw" in l["label"] else m
    want = 2.0 * e * m * n * k
    print(f"  {l['label']:34s} {l['shape']:14s} {l['flops']:.0f} FLOPs, {l['time_s'] * 1e6:.2f} us")
    ok = ok and l["class"] == "gemm" and l["flops"] == want and rows == per
sys.exit(0 if ok else 1)
PY
done
finish
