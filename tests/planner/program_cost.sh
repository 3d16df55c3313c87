#!/bin/bash
# program_cost.sh WORK: the cost report of compiled programs
# (`shardc simulate --program DIR --hw NAME`, planner/program_cost.c, from
# the launch listing codegen/listing.c writes at compile time), without
# running them:
# - every call of a kernel, library or collective in the generated chunk
#   functions is a launch of the listing (CUDA: counted in the .cu; CPU:
#   the k_ calls and copies of rank0.c), and no launch is "unlisted" (one
#   no hook of the code generators recorded), for GPT-2, LLaMA (rmsnorm,
#   rope, SwiGLU), t = 2 (collectives, vocabulary-parallel loss) and p = 2
#   (a program per stage);
# - the collectives are no host waits: t = 2 in bf16 counts as many host
#   synchronisations a step as one rank;
# - an elementwise run's bytes are those its generated kernel moves: the
#   residual add of GPT-2 medium in bf16 reads two [16, 1024, 1024] bf16
#   tensors and writes one, 2 bytes each;
# - the report's sums agree: the step is its launches and host waits, the
#   tokens/s and MFU follow from it, the CSV has a line per launch group;
# - GPT-2 medium and a 1.3B shape in bf16 on the H200 preset: printed, with
#   an MFU between 10% and 90%; medium at t = 2: its collectives within 25%
#   of the paper-style count, its step between half of t = 1's and t = 1's;
# - the usage errors.
# The CUDA half needs a shardc built with the CUDA libraries; without them
# it says so and checks the CPU programs only.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
# WORK is kept for a look afterwards, relative to where the test started;
# check and fail below are this test's own.
shardc=$SHARDC models=$ROOT/models work=$(cd "$OLDPWD" && realpath -m "$1")
here=$ROOT/tests/planner
mkdir -p "$work" && cd "$work"
bad=0
fail() { echo "FAIL: $*"; bad=1; }
DEMO="-D layers=2 -D hidden=64 -D heads=4 -D seq=32 -D vocab=128 -D batch=2"

# compile NAME TARGET MODEL FLAGS...: the program in NAME; false when it
# does not compile.
compile() {
  name=$1 target=$2 model=$3
  shift 3
  "$shardc" compile "$models/$model" "$@" --target "$target" -o "$name" >"$name.log" 2>&1
}

# check NAME HW [--global-batch N]: the listing and the report of NAME.
check() {
  name=$1 hw=$2
  shift 2
  "$shardc" simulate --program "$name" --hw "$hw" "$@" --json >"$name.json" 2>"$name.err" ||
    { fail "$name: simulate --program: $(cat "$name.err")"; return; }
  "$shardc" simulate --program "$name" --hw "$hw" "$@" --csv "$name.csv" >/dev/null 2>&1 ||
    { fail "$name: simulate --csv"; return; }
  "$shardc" simulate --program "$name" --hw "$hw" "$@" >"$name.txt" 2>&1 ||
    { fail "$name: simulate (text)"; return; }
  python3 - "$name" "$hw" <<'PY' || bad=1
import json, math, re, sys, glob, os
name, hw = sys.argv[1], sys.argv[2]
r = json.load(open(name + ".json"))
listing = json.load(open(name + "/kernels.json"))
ok = True
def fail(msg):
    global ok
    print(f"FAIL {name}: {msg}")
    ok = False
if r["unlisted"]:
    fail(f"{r['unlisted']} launch groups no hook recorded: " +
         ", ".join(sorted({l['kernel'] for l in r['launches'] if l.get('unlisted')})))
# Every call in the chunk functions of the generated sources is a launch.
cuda = listing["target"] == "cuda"
call = re.compile(r"^\s*(?:CU_CHECK\()?(k_cuda_\w+|CU_LAUNCH|cudaMemcpyAsync|cudaMemsetAsync|rt_comm_\w+|k_\w+|memcpy|memset)\(")
skip = {"k_cuda_gemm_init", "k_cuda_stream", "k_blas_serial_begin", "k_blas_serial_end",
        "k_attention_scratch"}
for prog in listing["programs"]:
    src = open(os.path.join(name, prog["name"] + (".cu" if cuda else ".c"))).read()
    # The chunk functions: from the first forward to the parameter table.
    body = src[src.index("static void forward"):src.index("static const RtParam")]
    calls = [m.group(1) for line in body.splitlines() for m in [call.match(line)] if m]
    calls = [c for c in calls if c not in skip]
    listed = [l for l in prog["launches"] if not l.get("runtime") and
              not l["kernel"].startswith("(loop)")]
    # A CPU loop is a launch of its own, not a call: the loops are left out.
    if len(calls) != len(listed):
        fail(f"{prog['name']}: {len(calls)} calls in the chunk functions, {len(listed)} launches "
             "listed")
# The sums of the report.
t = sum(l["calls_per_step"] * l["time_s"] for l in r["launches"]) + r["sync_time_s"]
if r["ranks"] == 1 and abs(t - r["step_time_s"]) > 1e-9 * max(t, 1):
    fail(f"the launches and waits sum to {t} s, the step is {r['step_time_s']} s")
if abs(r["tokens_per_s"] * r["step_time_s"] - r["tokens_per_step"]) > 1e-6 * r["tokens_per_step"]:
    fail("tokens/s is not the step's tokens over its time")
mfu = r["model_flops_per_step"] / (r["step_time_s"] * r["ranks"] * r["peak_flops"])
if abs(mfu - r["mfu"]) > 1e-9:
    fail(f"MFU {r['mfu']} is not the model FLOPs over the step at peak ({mfu})")
# A CPU's attention at the FLOPs its kernels run, the count `shardc hw
# --measure` takes its attention_efficiency at: causal blocks of 32 query
# rows each against the keys up to its last, the backward 5 products
# against the forward's 2 (pl_cpu_attention_flops). cpu2.hw has no
# parallel-region cost, so the time is the FLOPs over the rate, or the
# bytes over the memory's where those take longer.
desc = dict(l.split(" = ") for l in open(hw).read().splitlines()
            if " = " in l and not l.startswith("#")) if os.path.exists(hw) else {}
if "cores" in desc and "op_us" not in desc:
    rate = float(desc["attention_efficiency"]) * r["peak_flops"]
    for l in r["launches"]:
        if l["class"] != "attention":
            continue
        sh = dict(re.findall(r"([bshd])(\d+)", l["shape"]))
        b, s, h, d = (float(sh[k]) for k in "bshd")
        blocks = math.ceil(s / 32)
        frac = (blocks + 1) / (2 * blocks) if "causal" in l["shape"] else 1
        flops = 4 * b * s * s * h * d * frac * (2.5 if l["kernel"].startswith("k_attention_bwd") else 1)
        mem = (l["bytes_read"] + l["bytes_written"]) / (r["memory_bw"] * float(desc["memory_efficiency"]))
        want = max(flops / rate, mem)
        if abs(l["time_s"] - want) > 1e-9 * l["time_s"]:
            fail(f"{l['label']}: {l['time_s']:.6g} s, its kernel FLOPs ({flops:.4g}) at "
                 f"attention_efficiency give {flops / rate:.6g} s, its bytes {mem:.6g} s")
        else:
            print(f"ok {name}: {l['label']} ({l['shape']}) {1e6 * l['time_s']:.2f} us, "
                  f"{flops:.4g} kernel FLOPs at {rate / 1e9:.0f} GFLOP/s")
rows = open(name + ".csv").read().splitlines()
if len(rows) != len(r["launches"]) + 1:
    fail(f"{len(rows)} CSV lines for {len(r['launches'])} launch groups and a header")
if not r["sinks"] or any(s["seconds"] < r["sinks"][i + 1]["seconds"] for i, s in enumerate(r["sinks"][:-1])):
    fail("the sinks are not biggest first")
if ok:
    print(f"ok {name}: {len(r['launches'])} launch groups, {r['launches_per_step']:.0f} launches "
          f"per step, step {1e3 * r['step_time_s']:.3f} ms, MFU {100 * r['mfu']:.1f}%")
sys.exit(0 if ok else 1)
PY
}

# The CPU programs, priced on a made-up CPU description.
compile cpu_gpt2 cpu gpt2.shard $DEMO && check cpu_gpt2 "$here/cpu2.hw" --global-batch 8
SHARDC_CHUNKS=0 compile cpu_gpt2_nochunks cpu gpt2.shard $DEMO &&
  check cpu_gpt2_nochunks "$here/cpu2.hw"
compile cpu_llama cpu llama.shard -D layers=2 -D seq=32 -D hidden=64 -D heads=4 -D kv_heads=2 \
  -D ffn=128 -D vocab=128 && check cpu_llama "$here/cpu2.hw"
compile cpu_tp2 cpu gpt2.shard $DEMO --tp 2 && check cpu_tp2 "$here/cpu2.hw"
compile cpu_pp2 cpu gpt2.shard $DEMO --pp 2 --global-batch 8 && check cpu_pp2 "$here/cpu2.hw"
for p in cpu_gpt2 cpu_gpt2_nochunks cpu_llama cpu_tp2 cpu_pp2; do
  [ -f "$p/kernels.json" ] || fail "$p: no kernels.json ($(tail -n 1 "$p.log"))"
done

# The CUDA programs, where this shardc has the CUDA libraries.
if compile cuda_gpt2 cuda gpt2.shard $DEMO; then
  check cuda_gpt2 h200
  compile cuda_bf16 cuda gpt2.shard $DEMO --precision bf16 && check cuda_bf16 h200
  compile cuda_llama cuda llama.shard -D layers=2 -D seq=32 -D hidden=64 -D heads=4 \
    -D kv_heads=2 -D ffn=128 -D vocab=128 --precision bf16 && check cuda_llama h100
  if compile cuda_tp2 cuda gpt2.shard $DEMO --tp 2 --precision bf16; then
    check cuda_tp2 h200
    # The collectives are ordered on the device (runtime/comm/comm_nccl.c):
    # two ranks wait on the host as often a step as one does.
    syncs() { python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["host_syncs_per_step"]))' "$1"; }
    s1=$(syncs cuda_bf16.json) s2=$(syncs cuda_tp2.json)
    echo "host synchronisations a step: $s1 at t = 1, $s2 at t = 2"
    [ "$s1" = "$s2" ] || fail "t = 2 waits on the host $s2 times a step, one rank $s1"
  elif grep -q "NCCL" cuda_tp2.log; then
    echo "cuda_tp2: this shardc has no NCCL backend: the program of two ranks is not checked"
  else
    fail "cuda_tp2 does not compile: $(tail -n 1 cuda_tp2.log)"
  fi
  # GPT-2 medium (24 x 1024, batch 16, seq 1024) and a 1.3B shape (24 x
  # 2048, 16 heads, seq 2048, batch 8), bf16, on one H200.
  compile medium cuda gpt2.shard -D layers=24 -D hidden=1024 -D heads=16 -D batch=16 -D seq=1024 \
    -D vocab=50257 --precision bf16 && check medium h200
  compile b13 cuda gpt2.shard -D layers=24 -D hidden=2048 -D heads=16 -D batch=8 -D seq=2048 \
    -D vocab=50257 --precision bf16 && check b13 h200
  for p in medium b13; do
    [ -f "$p.json" ] || { fail "$p: no report"; continue; }
    python3 - "$p" <<'PY' || bad=1
import json, sys
name = sys.argv[1]
r = json.load(open(name + ".json"))
if not 0.1 < r["mfu"] < 0.9:
    sys.exit(f"FAIL {name}: MFU {r['mfu']:.3f} outside 10-90%")
print(f"{name} on {r['hw']}: step {1e3 * r['step_time_s']:.1f} ms, {r['tokens_per_s']:.0f} tokens/s, "
      f"MFU {100 * r['mfu']:.1f}%; biggest sink: {r['sinks'][0]['what']} "
      f"({1e3 * r['sinks'][0]['seconds']:.1f} ms)")
PY
  done
  # GPT-2 medium at t = 2 against the paper-style count (REFERENCE.md,
  # "Communication per microbatch"): 8 b s h (t-1)/t elements a layer of
  # tensor-parallel all-reduces, 2 bytes each, over the preset's NVLink at
  # its comm_efficiency; the collectives within 25% of it, and the step
  # between half of one rank's and one rank's (a step of 470 ms against
  # 103 ms at t = 1 was the bias sums priced as one thread a column).
  if compile medium_tp2 cuda gpt2.shard -D layers=24 -D hidden=1024 -D heads=16 -D batch=16 \
    -D seq=1024 -D vocab=50257 --precision bf16 --tp 2; then
    check medium_tp2 h200
    "$shardc" hw h200 >h200.txt
    python3 - <<'PY' || bad=1
import json, re, sys
hw = dict(re.findall(r"^(\w+) = (\S+)", open("h200.txt").read(), re.M))
one, two = json.load(open("medium.json")), json.load(open("medium_tp2.json"))
b, s, h, layers, t = 16, 1024, 1024, 24, 2
formula = 8 * b * s * h * (t - 1) / t * layers * 2 / (float(hw["intra_bw_gbs"]) * 1e9 *
                                                    float(hw["comm_efficiency"]))
coll = two["classes"]["collective"]["time_s"]
t1, t2 = one["step_time_s"], two["step_time_s"]
print(f"medium t=2: collectives {1e3 * coll:.2f} ms, paper-style {1e3 * formula:.2f} ms "
      f"(ratio {coll / formula:.3f}); step {1e3 * t2:.1f} ms, t=1 {1e3 * t1:.1f} ms")
if not 0.75 < coll / formula < 1.25:
    sys.exit(f"FAIL medium_tp2: collectives {coll / formula:.3f} x the paper-style count")
if not t1 / 2 < t2 < t1:
    sys.exit(f"FAIL medium_tp2: step {1e3 * t2:.1f} ms outside ({1e3 * t1 / 2:.1f}, {1e3 * t1:.1f})")
PY
  elif grep -q "NCCL" medium_tp2.log; then
    echo "medium_tp2: this shardc has no NCCL backend: GPT-2 medium at t = 2 is not checked"
  else
    fail "medium_tp2 does not compile: $(tail -n 1 medium_tp2.log)"
  fi
  # The residual add of medium, fused with the norm after it (add-norm):
  # two bf16 [16, 1024, 1024] and the norm's weight and bias read, the sum
  # and the norm written.
  python3 - <<'PY' || bad=1
import json, sys
r = json.load(open("medium.json"))
adds = [l for l in r["launches"] if l["label"] == "F add_layernorm [16, 1024, 1024]" and
        l["kernel"] == "k_cuda_add_layernorm_fwd_bf16"]
want = (2 * 16 * 1024 * 1024 * 2 + 2 * 1024 * 2, 2 * 16 * 1024 * 1024 * 2)
big = max(adds, key=lambda l: l["calls_per_step"]) if adds else None
if not big or (big["bytes_read"], big["bytes_written"]) != want:
    sys.exit(f"FAIL medium: the residual add moves {big and (big['bytes_read'], big['bytes_written'])}"
             f" bytes, not {want}")
print(f"ok medium: the residual add and its norm read {want[0]} and write {want[1]} bytes")
PY
elif grep -q "built without the CUDA libraries" cuda_gpt2.log; then
  echo "SKIP the CUDA programs: this shardc was built without the CUDA libraries"
else
  fail "cuda_gpt2 does not compile: $(tail -n 3 cuda_gpt2.log)"
fi

# Usage errors.
out=$("$shardc" simulate --program "$work/nothing" --hw h200 2>&1) &&
  fail "simulate --program of a folder without a listing exited 0"
echo "$out" | grep -q "kernels.json" || fail "no word of kernels.json: $out"
out=$("$shardc" simulate --csv x.csv --hw h200 2>&1) && fail "--csv without --program exited 0"
echo "$out" | grep -q -- "--csv goes with --program" || fail "--csv alone: $out"
out=$("$shardc" simulate "$models/gpt2.shard" --program cpu_gpt2 --hw h200 2>&1) &&
  fail "--program with a MODEL exited 0"
out=$("$shardc" simulate --program cpu_gpt2 2>&1) && fail "--program without --hw exited 0"
[ $bad = 0 ] && echo "program_cost: all checks passed"
exit $bad
