#!/bin/bash
# Training speed of our CPU target against PyTorch and against the
# machine's sgemm roof, each measured in the same run on the same shape,
# batch, data and thread count, and the peak memory of our rank programs
# against their memory plans.
#
# Shapes (gpt2.shard, one microbatch a step, no gradient accumulation), and
# the targets of issue 26:
#   demo        layers=4 hidden=128 heads=4 seq=128 vocab=256, microbatch 8:
#               at least 3x PyTorch (per-op overhead dominates)
#   small       layers=6 hidden=256 heads=4 seq=256 vocab=256, microbatch 8:
#               at least 3x PyTorch
#   gpt2-small  the defaults (124M) at seq=256, microbatch 4: at least 2x
#               PyTorch, and the step's model FLOPs at 85% of the sgemm roof
#   gpt2-1024   the defaults at seq=1024, microbatch 1 (the same tokens a
#               step): the same targets as gpt2-small
# and at every shape peak RSS less the process's start within 5% of the
# planned bytes (0.95 .. 1.05).
#
# The roof is OpenBLAS's sgemm on ROOF_N x ROOF_N floats (default 2048) on
# THREADS threads, built by bench/sgemm_roof.c against the same OpenBLAS,
# compiler flags and OpenMP as the rank programs (a compiled program's
# Makefile), the best of ROOF_REPS calls. It is measured before the first
# shape and again after the last; the larger of the two counts. A shape's
# GEMM-bound fraction is its tokens/s times its model FLOPs per token
# (`shardc info`: every matrix multiply, the attention products without the
# causal halving, 3x the forward) over the roof.
#
# Layouts (LAYOUTS, default "t2 p2 d2"; MEM_SHAPES, default "demo
# gpt2-small"): the same shape compiled with --tp 2, --pp 2 or --dp 2 and
# run for MEM_STEPS steps on 2 ranks under mpirun, memory only: world rank
# 0's peak RSS less its start, against the plan that rank prints (which
# counts a pipeline stage's stash and message buffers and, under d, MPI's
# staging of the gradient buckets). Its start is the same program stopped by
# SHARDC_MEMORY_LIMIT=1 right before it allocates its plan, after MPI's
# start-up. Target: within 5%.
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
# the steps after the first few (*_SKIP), whose times include warm-up; each
# side runs TRIALS times (*_TRIALS), the two alternating, and keeps its best
# trial: the one that other jobs on the machine disturbed least. On 2 idle
# cores the whole run takes about 10 minutes, most of it GPT-2 small.
#
#   bench/cpu_train.sh                    every shape and layout
#   SHAPES=demo bench/cpu_train.sh        one of them
#   SHAPES= bench/cpu_train.sh            the layouts' memory only
#   DEMO_STEPS=40 DEMO_SKIP=5 DEMO_TRIALS=5 GPT2_STEPS=6 GPT2_SKIP=2 THREADS=2 BUILD=build \
#     WAIT_POLICY=active bench/cpu_train.sh
#   QUICK=1 bench/cpu_train.sh            a smoke test of the machinery (a few
#                                         seconds): a tiny shape, one layout,
#                                         a small roof; every number printed,
#                                         no target enforced
#
# Exit status 1 when a target is missed, a number is missing or a run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

BUILD=${BUILD:-build}
SHARDC=${SHARDC:-$BUILD/shardc}
THREADS=${THREADS:-$(nproc)}
QUICK=${QUICK:-}
DEMO_STEPS=${DEMO_STEPS:-30}
DEMO_SKIP=${DEMO_SKIP:-3}
DEMO_TRIALS=${DEMO_TRIALS:-3}
SMALL_STEPS=${SMALL_STEPS:-10}
SMALL_SKIP=${SMALL_SKIP:-2}
SMALL_TRIALS=${SMALL_TRIALS:-3}
GPT2_STEPS=${GPT2_STEPS:-4}
GPT2_SKIP=${GPT2_SKIP:-1}
GPT2_TRIALS=${GPT2_TRIALS:-2}
MEM_STEPS=${MEM_STEPS:-3}
ROOF_N=${ROOF_N:-2048}
ROOF_REPS=${ROOF_REPS:-5}
WAIT_POLICY=${WAIT_POLICY-passive}
SHAPES=${SHAPES-"demo small gpt2-small gpt2-1024"}
LAYOUTS=${LAYOUTS-"t2 p2 d2"}
MEM_SHAPES=${MEM_SHAPES-"demo gpt2-small"}
if [[ -n $QUICK ]]; then
  SHAPES=tiny MEM_SHAPES=tiny LAYOUTS=t2 ROOF_N=256 ROOF_REPS=2 MEM_STEPS=2
fi
# Debian's python3-torch lives under the system python, not whatever
# python3 comes first on PATH.
PY=${PY:-/usr/bin/python3}
ORACLE=tests/features/oracle

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
[[ -n $WAIT_POLICY ]] && export OMP_WAIT_POLICY=$WAIT_POLICY

. bench/common.sh

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


# shape NAME: the model's -D flags (SHAPE_DEFS, the microbatch last), the
# steps, skipped steps and trials of the speed runs, and the targets: the
# least ratio against PyTorch (SHAPE_SPEED) and the least fraction of the
# sgemm roof (SHAPE_ROOF, empty where the shape is not GEMM-bound).
shape() {
  SHAPE_ROOF=
  case $1 in
  tiny)
    SHAPE_DEFS=(-D layers=2 -D hidden=64 -D heads=2 -D seq=32 -D vocab=256 -D batch=2)
    SHAPE_RUN=(4 1 1) SHAPE_SPEED=0 ;;
  demo)
    SHAPE_DEFS=(-D layers=4 -D hidden=128 -D heads=4 -D seq=128 -D vocab=256 -D batch=8)
    SHAPE_RUN=("$DEMO_STEPS" "$DEMO_SKIP" "$DEMO_TRIALS") SHAPE_SPEED=3 ;;
  small)
    SHAPE_DEFS=(-D layers=6 -D hidden=256 -D heads=4 -D seq=256 -D vocab=256 -D batch=8)
    SHAPE_RUN=("$SMALL_STEPS" "$SMALL_SKIP" "$SMALL_TRIALS") SHAPE_SPEED=3 ;;
  gpt2-small)
    SHAPE_DEFS=(-D seq=256 -D batch=4)
    SHAPE_RUN=("$GPT2_STEPS" "$GPT2_SKIP" "$GPT2_TRIALS") SHAPE_SPEED=2 SHAPE_ROOF=0.85 ;;
  gpt2-1024)
    SHAPE_DEFS=(-D seq=1024 -D batch=1)
    SHAPE_RUN=("$GPT2_STEPS" "$GPT2_SKIP" "$GPT2_TRIALS") SHAPE_SPEED=2 SHAPE_ROOF=0.85 ;;
  *) die "unknown shape $1 (tiny, demo, small, gpt2-small, gpt2-1024)" ;;
  esac
}

# compile NAME DIR FLAGS...: shardc compile and build into DIR.
compile() {
  local name=$1 dir=$2
  shift 2
  "$SHARDC" compile models/gpt2.shard --target cpu -o "$dir" "$@" >"$dir.compile" 2>&1 ||
    { cat "$dir.compile" >&2; die "$name: shardc compile failed"; }
  "$SHARDC" build "$dir" >"$dir.build" 2>&1 ||
    { tail -20 "$dir.build" >&2; die "$name: shardc build failed"; }
}

# roof DIR: measure the sgemm roof (sets ROOF_LAST, raises ROOF), with the
# helper built once from the compiler, flags and libraries of DIR's Makefile.
ROOF=0 ROOF_FIRST=
roof() {
  local exe=$WORK/sgemm_roof
  if [[ ! -x $exe ]]; then
    local cc cflags ldlibs
    cc=$(sed -n 's/^CC = //p' "$1/Makefile")
    cflags=$(sed -n 's/^CFLAGS = //p' "$1/Makefile")
    ldlibs=$(sed -n 's/^LDLIBS = //p' "$1/Makefile")
    # shellcheck disable=SC2086 # the Makefile's flags are word lists
    $cc $cflags -o "$exe" bench/sgemm_roof.c $ldlibs || die "could not build bench/sgemm_roof.c"
  fi
  local line
  line=$("$exe" "$ROOF_N" "$ROOF_REPS") || die "sgemm_roof failed"
  echo "  roof: $line"
  ROOF_LAST=$(sed -n 's/.* \([0-9.]*\) GFLOP\/s.*/\1/p' <<<"$line")
  ROOF=$(best "$ROOF" "$ROOF_LAST")
}

declare -A RATE FLOPS

# bench NAME: one shape, both sides, TRIALS alternating runs each; the best
# rate of each side counts. Sets RATIO and MEM_RATIO, and RATE[NAME] and
# FLOPS[NAME] (model FLOPs per token) for the roof's verdict.
bench() {
  local name=$1
  shape "$name"
  local steps=${SHAPE_RUN[0]} skip=${SHAPE_RUN[1]} trials=${SHAPE_RUN[2]}
  local defs=("${SHAPE_DEFS[@]}") dir=$WORK/$name seq=1024 mb cfg="" d
  # The oracle's --config is the -D flags but the microbatch; its --seq the seq.
  for d in "${defs[@]}"; do
    case $d in
    -D) ;;
    batch=*) mb=${d#batch=} ;;
    seq=*) cfg+=${cfg:+,}$d seq=${d#seq=} ;;
    *) cfg+=${cfg:+,}$d ;;
    esac
  done
  echo "== $name: gpt2.shard ${defs[*]}, microbatch $mb, $steps steps ($skip skipped)," \
    "$THREADS threads, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}, best of $trials"

  compile "$name" "$dir" "${defs[@]}"
  local prog
  prog=$(program "$dir") || die "$name: no program in $dir"
  if [[ -z $ROOF_FIRST ]]; then
    roof "$dir"
    ROOF_FIRST=$ROOF_LAST
  fi
  FLOPS[$name]=$("$SHARDC" info models/gpt2.shard "${defs[@]}" --json |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["flops_per_token"])') ||
    die "$name: no FLOPs per token from shardc info"
  # What the process holds before it allocates its plan: the same program
  # stopping at its flags (libraries, OpenMP and OpenBLAS start-up).
  /usr/bin/time -v -o "$dir.time0" "$prog" --help >/dev/null 2>&1 || true

  local ours="" torch="" t r
  for ((t = 1; t <= trials; t++)); do
    /usr/bin/time -v -o "$dir.time$t" "$prog" --data "$DATA" --steps "$steps" \
      --global-batch "$mb" --no-shuffle --log-every 1 --log-json "$dir.$t.jsonl" \
      >"$dir.out" 2>&1 || { tail -20 "$dir.out" >&2; die "$name: training run failed"; }
    r=$(rate "$dir.$t.jsonl" "$skip") || die "$name: no rate in our log"
    ours=$(best "$ours" "$r")
    "$PY" "$ORACLE/oracle.py" --model gpt2 --config "$cfg" --data "$DATA" --batch "$mb" \
      --seq "$seq" --global-batch "$mb" --steps "$steps" --no-shuffle --fused-ops \
      --threads "$THREADS" --quiet --out "$dir.torch.json" \
      --log-json "$dir.torch.$t.jsonl" >"$dir.torch.out" 2>&1 ||
      { tail -20 "$dir.torch.out" >&2; die "$name: PyTorch run failed"; }
    r=$(rate "$dir.torch.$t.jsonl" "$skip") || die "$name: no rate in PyTorch's log"
    torch=$(best "$torch" "$r")
    [[ $trials -gt 1 ]] && echo "  trial $t: shardc $(rate "$dir.$t.jsonl" "$skip")," \
      "PyTorch $r tokens/s"
  done

  RATIO=$(awk -v a="$ours" -v b="$torch" 'BEGIN {printf "%.2f", a / b}')
  RATE[$name]=$ours
  printf '  %-28s %12s tokens/s\n' "shardc (CPU target)" "$ours"
  printf '  %-28s %12s tokens/s\n' "PyTorch $TORCH_VERSION" "$torch"
  printf '  %-28s %12s x\n' "ratio shardc / PyTorch" "$RATIO"
  OURS=$ours TORCH=$torch

  local peak base plan
  peak=$(peak_kb "$dir.time1")
  base=$(peak_kb "$dir.time0")
  if plan=$(plan_bytes "$dir.out" "$dir.compile" 2>/dev/null); then
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

# layout_mem NAME LAYOUT: world rank 0's peak RSS less its start against its
# printed plan, on 2 ranks of LAYOUT (t2, p2, d2); sets MEM_RATIO.
layout_mem() {
  local name=$1 layout=$2 flag dir=$WORK/$1-$2
  case $layout in
  t2) flag=--tp ;; p2) flag=--pp ;; d2) flag=--dp ;;
  *) die "unknown layout $layout (t2, p2, d2)" ;;
  esac
  shape "$name"
  # One microbatch per replica or two through the pipeline (its peak
  # stash on stage 0 is already 2 under 1f1b): the least that shows the
  # peak, as the peak is reached in the first step.
  local mb=${SHAPE_DEFS[-1]#batch=} gb
  gb=$([[ $layout = t2 ]] && echo "$mb" || echo $((2 * mb)))
  compile "$name $layout" "$dir" "$flag" 2 --global-batch "$gb" "${SHAPE_DEFS[@]}"
  # Each rank under /usr/bin/time, its report named by its world rank; a
  # pipeline runs one program per stage.
  printf '#!/bin/sh\nout=$1\nshift\nexec /usr/bin/time -v -o "$out.$OMPI_COMM_WORLD_RANK" "$@"\n' \
    >"$WORK/timed.sh"
  chmod +x "$WORK/timed.sh"
  local progs=() args=(--data "$DATA" --steps "$MEM_STEPS" --global-batch "$gb" --no-shuffle)
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
  # The plan as the run used it, from the program's closing memory line
  # (which counts MPI's reduction staging at its peak where the banner
  # printed a bound), else the banner's total.
  plan=$(sed -n 's/^memory: .*| plan as run \([0-9.]*\) \([KMG]\)B.*/\1 \2/p' "$dir.out")
  [[ -n $plan ]] || plan=$(grep -m1 '^memory plan:' "$dir.out" |
    sed 's/.*| total \([0-9.]*\) \([KMG]\)B.*/\1 \2/')
  plan=$(awk '{m = $2 == "K" ? 1e3 : $2 == "M" ? 1e6 : 1e9; printf "%.0f", $1 * m}' <<<"$plan")
  grep -m1 '^memory plan:' "$dir.out" | sed 's/^/  /'
  grep -m1 '^memory: ' "$dir.out" | sed 's/^/  /' || true
  awk -v p="$peak" -v b="$base" -v plan="$plan" -v l="$layout" 'BEGIN {
    used = (p - b) * 1024
    printf "  %s, world rank 0: peak RSS %.1f MiB, at its start %.1f MiB, difference %.1f MiB; plan %.1f MiB: %.3f\n", l, p / 1024, b / 1024, used / 2^20, plan / 2^20, used / plan }'
  MEM_RATIO=$(awk -v p="$peak" -v b="$base" -v plan="$plan" \
    'BEGIN {if (plan > 0 && b > 0) printf "%.4f", (p - b) * 1024 / plan; else print "nan"}')
}

# target SHAPE WHAT CONDITION(awk) TARGET: one line of the verdict. In the
# quick mode a target is not enforced (a tiny shape says nothing about
# speed, and its plan is too small for RSS to measure), but a number that
# is missing still fails.
target() {
  local v=PASS
  if [[ -n $QUICK ]]; then
    v="ran (quick)"
    [[ $2 = *nan* || $2 = *" = x"* ]] && { v=FAIL; fail=1; }
  else
    awk "BEGIN {exit !($3)}" || { v=FAIL; fail=1; }
  fi
  echo "$v: $1: $2"
  report+=("$(printf '%-16s %-34s %-12s %s' "$1" "$2" "$4" "$v")")
}

# mem_target SHAPE: the verdict on MEM_RATIO.
mem_target() {
  target "$1" "RSS - start / plan = $MEM_RATIO" \
    "\"$MEM_RATIO\" != \"nan\" && $MEM_RATIO >= 0.95 && $MEM_RATIO <= 1.05" "0.95 .. 1.05"
}

for name in $SHAPES; do
  bench "$name"
  target "$name" "$OURS / $TORCH = ${RATIO}x" "$RATIO >= $SHAPE_SPEED" ">= ${SHAPE_SPEED}x"
  mem_target "$name"
done

for name in $MEM_SHAPES; do
  for layout in $LAYOUTS; do
    echo "== $name, $layout: memory of world rank 0 against its plan"
    layout_mem "$name" "$layout"
    mem_target "$name $layout"
  done
done

# The roof again after the last shape, and each shape's share of it.
if [[ -n $SHAPES ]]; then
  echo "== the sgemm roof, again after the shapes"
  roof "$WORK/${SHAPES%% *}"
  echo "  roof: ${ROOF_FIRST} GFLOP/s before the shapes, ${ROOF_LAST} after: ${ROOF} counts"
  for name in $SHAPES; do
    shape "$name"
    frac=$(awk -v r="${RATE[$name]}" -v f="${FLOPS[$name]}" -v roof="$ROOF" \
      'BEGIN {printf "%.3f", r * f / 1e9 / roof}')
    gflops=$(awk -v r="${RATE[$name]}" -v f="${FLOPS[$name]}" 'BEGIN {printf "%.1f", r * f / 1e9}')
    echo "  $name: ${RATE[$name]} tokens/s x $(printf '%.4g' "${FLOPS[$name]}") FLOP/token =" \
      "$gflops GFLOP/s, $frac of the roof"
    if [[ -n $SHAPE_ROOF ]]; then
      target "$name" "$gflops / $ROOF GFLOP/s = $frac" "$frac >= $SHAPE_ROOF" ">= $SHAPE_ROOF roof"
    fi
  done
fi

echo
echo "shardc against PyTorch $TORCH_VERSION and the sgemm roof (${ROOF} GFLOP/s at N=$ROOF_N)," \
  "$THREADS threads on $(nproc --all) cores, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
printf '%-16s %-34s %-12s %s\n' shape measured target verdict
printf '%s\n' "${report[@]}"
exit $fail
