#!/bin/bash
# Training speed of our CPU target against PyTorch, measured in the same run
# on the same shape, batch, data and thread count, and the peak memory of
# our rank program against its memory plan.
#
# Shapes (gpt2.shard, one microbatch a step, no gradient accumulation):
#   demo         layers=4 hidden=128 heads=4 seq=128 vocab=256, microbatch 8
#                target: at least 2x PyTorch (per-op overhead dominates), and
#                peak RSS less the start within 5% of the plan
#   gpt2-small   the defaults (124M) at seq=256, microbatch 4
#                target: not slower than PyTorch (the GEMMs dominate), and
#                peak RSS less the process's RSS before the plan within 5%
#                of the planned bytes
#
# Layouts (LAYOUTS, default "t2 p2 d2"; MEM_SHAPES, default demo): the
# same shape compiled with --tp 2, --pp 2 or --dp 2 and run on 2 ranks
# under mpirun, memory only: world rank 0's peak RSS less its start,
# against the plan that rank prints (which counts a pipeline stage's
# stash and message buffers and, under d, MPI's staging of the gradient
# buckets). Its start
# is the same program stopped by SHARDC_MEMORY_LIMIT=1 right before it
# allocates its plan, after MPI's start-up. Target: within 5%.
#
# The peer is tests/features/oracle's PyTorch model (oracle.py with --fused-ops:
# torch's fused layernorm, GELU and cross entropy, AdamW, grad clipping),
# reading the same byte-level shard of data/corpus.txt. Both run with
# OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = torch threads = THREADS (default
# nproc) and the same OMP_WAIT_POLICY (WAIT_POLICY, default passive; set it
# to "" to keep the caller's). Passive, because on a machine that other
# jobs share, threads that spin while they wait (OpenMP's default) take the
# cores from the threads with work: both programs then swing by 5x from one
# run to the next, and PyTorch, whose pthread OpenBLAS spins next to its
# OpenMP team, runs at 2 threads slower than at 1. Tokens/s is taken over
# the steps after the first few (DEMO_SKIP, GPT2_SKIP), whose times include
# warm-up; each side runs TRIALS times (DEMO_TRIALS, GPT2_TRIALS), the two
# alternating, and keeps its best trial: the one that other jobs on the
# machine disturbed least. On 2 idle cores the whole run takes about 3
# minutes, most of it GPT-2 small.
#
#   bench/cpu_train.sh                    both shapes
#   SHAPES=demo bench/cpu_train.sh        one of them
#   SHAPES= bench/cpu_train.sh            the layouts' memory only
#   DEMO_STEPS=40 DEMO_SKIP=5 DEMO_TRIALS=5 GPT2_STEPS=6 GPT2_SKIP=2 THREADS=2 BUILD=build \
#     WAIT_POLICY=active bench/cpu_train.sh
#
# Exit status 1 when a target is missed or a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

BUILD=${BUILD:-build}
SHARDC=${SHARDC:-$BUILD/shardc}
THREADS=${THREADS:-$(nproc)}
DEMO_STEPS=${DEMO_STEPS:-30}
DEMO_SKIP=${DEMO_SKIP:-3}
DEMO_TRIALS=${DEMO_TRIALS:-3}
GPT2_STEPS=${GPT2_STEPS:-4}
GPT2_SKIP=${GPT2_SKIP:-1}
GPT2_TRIALS=${GPT2_TRIALS:-1}
WAIT_POLICY=${WAIT_POLICY-passive}
SHAPES=${SHAPES-"demo gpt2-small"}
LAYOUTS=${LAYOUTS-"t2 p2 d2"}
MEM_SHAPES=${MEM_SHAPES:-demo}
# Debian's python3-torch lives under the system python, not whatever
# python3 comes first on PATH.
PY=${PY:-/usr/bin/python3}
ORACLE=tests/features/oracle

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
[[ -n $WAIT_POLICY ]] && export OMP_WAIT_POLICY=$WAIT_POLICY

die() { echo "bench: $*" >&2; exit 1; }

TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) ||
  die "PyTorch missing for $PY (apt-get install python3-torch)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing (apt-get install time)"
if [[ ! -x $SHARDC ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DATA=$WORK/corpus.bin
"$PY" "$ORACLE/shard_data.py" text data/corpus.txt -o "$DATA" >/dev/null

# program DIR: the rank-0 program that `shardc build DIR` made, found
# through manifest.json (ranks -> program), else the one executable there.
program() {
  "$PY" - "$1" <<'EOF'
import json, os, sys
d = sys.argv[1]
def names(x):
    if isinstance(x, dict):
        for k, v in x.items():
            if k in ("program", "binary", "executable") and isinstance(v, str):
                yield v
            yield from names(v)
    elif isinstance(x, list):
        for v in x:
            yield from names(v)
try:
    cands = list(names(json.load(open(os.path.join(d, "manifest.json")))))
except (OSError, ValueError):
    cands = []
for c in cands:
    for p in (c, os.path.splitext(c)[0]):
        p = os.path.join(d, p)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            print(p); sys.exit(0)
exe = [os.path.join(d, f) for f in sorted(os.listdir(d))
       if os.path.isfile(os.path.join(d, f)) and os.access(os.path.join(d, f), os.X_OK)
       and not f.endswith((".sh", ".py"))]
if len(exe) == 1:
    print(exe[0]); sys.exit(0)
sys.exit("no rank program found in %s (candidates %s)" % (d, cands or exe))
EOF
}

# rate LOG SKIP: tokens/s over the records after the first SKIP of a --log-json
# file (one JSON object per step with tokens_per_s; every step has the same
# tokens, so the overall rate is the harmonic mean of the step rates).
rate() {
  "$PY" - "$1" "$2" <<'EOF'
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
EOF
}

# plan_bytes FILE...: the total of the memory plan as printed (the last
# line that says "total"; a byte count, or a number with a unit).
plan_bytes() {
  "$PY" - "$@" <<'EOF'
import re, sys
units = {"": 1, "b": 1, "bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9,
         "kib": 2**10, "mib": 2**20, "gib": 2**30}
best = None
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        if "total" not in line.lower():
            continue
        nums = re.findall(r"(\d[\d,]*(?:\.\d+)?)\s*(bytes|[kmg]i?b|b)?\b", line, re.I)
        vals = [float(n.replace(",", "")) * units[(u or "").lower()] for n, u in nums]
        exact = [float(n.replace(",", "")) for n, u in nums
                 if "." not in n and (u or "bytes").lower() in ("bytes", "b")]
        if vals:
            best = max(exact) if exact else max(vals)
if best is None:
    sys.exit("no memory plan total found")
print("%d" % best)
EOF
}

# peak_kb FILE: "Maximum resident set size (kbytes)" of /usr/bin/time -v.
peak_kb() { awk -F': ' '/Maximum resident set size/ {print $2}' "$1"; }

fail=0
report=()

# best A B: the larger of two rates (A may be empty).
best() { awk -v a="$1" -v b="$2" 'BEGIN {print (a == "" || b + 0 > a + 0) ? b : a}'; }

# bench NAME STEPS SKIP MICROBATCH TRIALS ORACLE_CONFIG -D...: one shape, both
# sides, TRIALS alternating runs each; the best rate of each side counts.
bench() {
  local name=$1 steps=$2 skip=$3 mb=$4 trials=$5 cfg=$6
  shift 6
  local defs=("$@" -D batch="$mb")
  local dir=$WORK/$name seq
  seq=$(sed -n 's/.*seq=\([0-9]*\).*/\1/p' <<<"$cfg")
  echo "== $name: gpt2.shard ${defs[*]}, microbatch $mb, $steps steps ($skip skipped)," \
    "$THREADS threads, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}, best of $trials"

  "$SHARDC" compile models/gpt2.shard --target cpu -o "$dir" "${defs[@]}" >"$WORK/$name.compile" 2>&1 ||
    { cat "$WORK/$name.compile" >&2; die "$name: shardc compile failed"; }
  "$SHARDC" build "$dir" >"$WORK/$name.build" 2>&1 ||
    { tail -20 "$WORK/$name.build" >&2; die "$name: shardc build failed"; }
  local prog
  prog=$(program "$dir") || die "$name: no program in $dir"
  # What the process holds before it allocates its plan: the same program
  # stopping at its flags (libraries, OpenMP and OpenBLAS start-up).
  /usr/bin/time -v -o "$WORK/$name.time0" "$prog" --help >/dev/null 2>&1 || true

  local ours="" torch="" t r
  for ((t = 1; t <= trials; t++)); do
    /usr/bin/time -v -o "$WORK/$name.time$t" "$prog" --data "$DATA" --steps "$steps" \
      --global-batch "$mb" --no-shuffle --log-every 1 --log-json "$WORK/$name.$t.jsonl" \
      >"$WORK/$name.out" 2>&1 || { tail -20 "$WORK/$name.out" >&2; die "$name: training run failed"; }
    r=$(rate "$WORK/$name.$t.jsonl" "$skip") || die "$name: no rate in our log"
    ours=$(best "$ours" "$r")
    "$PY" "$ORACLE/oracle.py" --model gpt2 --config "$cfg" --data "$DATA" --batch "$mb" \
      --seq "$seq" --global-batch "$mb" --steps "$steps" --no-shuffle --fused-ops \
      --threads "$THREADS" --quiet --out "$WORK/$name.torch.json" \
      --log-json "$WORK/$name.torch.$t.jsonl" >"$WORK/$name.torch.out" 2>&1 ||
      { tail -20 "$WORK/$name.torch.out" >&2; die "$name: PyTorch run failed"; }
    r=$(rate "$WORK/$name.torch.$t.jsonl" "$skip") || die "$name: no rate in PyTorch's log"
    torch=$(best "$torch" "$r")
    [[ $trials -gt 1 ]] && echo "  trial $t: shardc $(rate "$WORK/$name.$t.jsonl" "$skip")," \
      "PyTorch $r tokens/s"
  done

  local ratio
  ratio=$(awk -v a="$ours" -v b="$torch" 'BEGIN {printf "%.2f", a / b}')
  printf '  %-28s %12s tokens/s\n' "shardc (CPU target)" "$ours"
  printf '  %-28s %12s tokens/s\n' "PyTorch $TORCH_VERSION" "$torch"
  printf '  %-28s %12s x\n' "ratio shardc / PyTorch" "$ratio"
  RATIO=$ratio OURS=$ours TORCH=$torch

  local peak base plan
  peak=$(peak_kb "$WORK/$name.time1")
  base=$(peak_kb "$WORK/$name.time0")
  if plan=$(plan_bytes "$WORK/$name.out" "$WORK/$name.compile" 2>/dev/null); then
    awk -v p="$peak" -v b="$base" -v plan="$plan" 'BEGIN {
      used = (p - b) * 1024
      printf "  peak RSS %.1f MiB, before the plan %.1f MiB, difference %.1f MiB\n", p / 1024, b / 1024, used / 2^20
      printf "  memory plan %.1f MiB: difference / plan = %.3f\n", plan / 2^20, used / plan }'
  else
    echo "  peak RSS $((peak / 1024)) MiB; no memory plan total found in the program's or compile's output"
    plan=0
  fi
  MEM_RATIO=$(awk -v p="$peak" -v b="$base" -v plan="$plan" \
    'BEGIN {if (plan > 0) printf "%.4f", (p - b) * 1024 / plan; else print "nan"}')
}

# layout_mem NAME LAYOUT -D...: world rank 0's peak RSS less its start
# against its printed plan, on 2 ranks of LAYOUT (t2, p2, d2); sets
# MEM_RATIO.
layout_mem() {
  local name=$1 layout=$2
  shift 2
  local flag dir=$WORK/$name-$layout
  case $layout in
  t2) flag=--tp ;; p2) flag=--pp ;; d2) flag=--dp ;;
  *) die "unknown layout $layout (t2, p2, d2)" ;;
  esac
  "$SHARDC" compile models/gpt2.shard --target cpu -o "$dir" "$flag" 2 "$@" \
    >"$dir.compile" 2>&1 || { cat "$dir.compile" >&2; die "$name $layout: shardc compile failed"; }
  "$SHARDC" build "$dir" >"$dir.build" 2>&1 || die "$name $layout: shardc build failed"
  # Each rank under /usr/bin/time, its report named by its world rank; a
  # pipeline runs one program per stage.
  printf '#!/bin/sh\nout=$1\nshift\nexec /usr/bin/time -v -o "$out.$OMPI_COMM_WORLD_RANK" "$@"\n' \
    >"$WORK/timed.sh"
  chmod +x "$WORK/timed.sh"
  local progs=() args=(--data "$DATA" --steps "$DEMO_STEPS" --no-shuffle)
  if [[ $layout = p2 ]]; then progs=("$dir/stage0" "$dir/stage1"); else progs=("$dir/rank0" "$dir/rank0"); fi
  local mpi=(mpirun --oversubscribe -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS)
  [[ -n ${OMP_WAIT_POLICY:-} ]] && mpi+=(-x OMP_WAIT_POLICY)
  [[ $(id -u) = 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  SHARDC_MEMORY_LIMIT=1 "${mpi[@]}" -x SHARDC_MEMORY_LIMIT -np 1 "$WORK/timed.sh" "$dir.time0" \
    "${progs[0]}" "${args[@]}" : -np 1 "${progs[1]}" "${args[@]}" >"$dir.out0" 2>&1 || true
  "${mpi[@]}" -np 1 "$WORK/timed.sh" "$dir.time1" "${progs[0]}" "${args[@]}" : \
    -np 1 "${progs[1]}" "${args[@]}" >"$dir.out" 2>&1 ||
    { tail -20 "$dir.out" >&2; die "$name $layout: training run failed"; }
  local peak base plan
  peak=$(peak_kb "$dir.time1.0")
  base=$(peak_kb "$dir.time0.0")
  plan=$(grep -m1 '^memory plan:' "$dir.out" | sed 's/.*| total \([0-9.]*\) \([KMG]\)B.*/\1 \2/' |
    awk '{m = $2 == "K" ? 1e3 : $2 == "M" ? 1e6 : 1e9; printf "%d", $1 * m}')
  grep -m1 '^memory plan:' "$dir.out" | sed 's/^/  /'
  awk -v p="$peak" -v b="$base" -v plan="$plan" -v l="$layout" 'BEGIN {
    used = (p - b) * 1024
    printf "  %s, world rank 0: peak RSS %.1f MiB, at its start %.1f MiB, difference %.1f MiB; plan %.1f MiB: %.3f\n", l, p / 1024, b / 1024, used / 2^20, plan / 2^20, used / plan }'
  MEM_RATIO=$(awk -v p="$peak" -v b="$base" -v plan="$plan" \
    'BEGIN {if (plan > 0 && b > 0) printf "%.4f", (p - b) * 1024 / plan; else print "nan"}')
}

# target SHAPE WHAT CONDITION(awk) TARGET: one line of the verdict.
target() {
  local v=PASS
  awk "BEGIN {exit !($3)}" || { v=FAIL; fail=1; }
  echo "$v: $1: $2"
  report+=("$(printf '%-11s %-28s %-10s %s' "$1" "$2" "$4" "$v")")
}

for shape in $SHAPES; do
  case $shape in
  demo)
    bench demo "$DEMO_STEPS" "$DEMO_SKIP" 8 "$DEMO_TRIALS" \
      "vocab=256,hidden=128,heads=4,layers=4,seq=128" \
      -D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256
    target demo "$OURS / $TORCH = ${RATIO}x" "$RATIO >= 2" ">= 2x"
    target demo "RSS - start / plan = $MEM_RATIO" \
      "\"$MEM_RATIO\" != \"nan\" && $MEM_RATIO >= 0.95 && $MEM_RATIO <= 1.05" "0.95 .. 1.05"
    ;;
  gpt2-small)
    bench gpt2-small "$GPT2_STEPS" "$GPT2_SKIP" 4 "$GPT2_TRIALS" "seq=256" -D seq=256
    target gpt2-small "$OURS / $TORCH = ${RATIO}x" "$RATIO >= 1" ">= 1x"
    target gpt2-small "RSS - start / plan = $MEM_RATIO" \
      "\"$MEM_RATIO\" != \"nan\" && $MEM_RATIO >= 0.95 && $MEM_RATIO <= 1.05" "0.95 .. 1.05"
    ;;
  *) die "unknown shape $shape (demo, gpt2-small)" ;;
  esac
done

for shape in $MEM_SHAPES; do
  for layout in $LAYOUTS; do
    echo "== $shape, $layout: memory of world rank 0 against its plan"
    case $shape in
    demo) layout_mem demo "$layout" -D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256 \
      -D batch=8 ;;
    gpt2-small) layout_mem gpt2-small "$layout" -D seq=256 -D batch=4 ;;
    *) die "unknown shape $shape (demo, gpt2-small)" ;;
    esac
    target "$shape $layout" "RSS - start / plan = $MEM_RATIO" \
      "\"$MEM_RATIO\" != \"nan\" && $MEM_RATIO >= 0.95 && $MEM_RATIO <= 1.05" "0.95 .. 1.05"
  done
done

echo
echo "tokens/s of shardc and PyTorch $TORCH_VERSION, $THREADS threads on $(nproc) cores," \
  "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
printf '%-11s %-28s %-10s %s\n' shape measured target verdict
printf '%s\n' "${report[@]}"
exit $fail
