#!/bin/bash
# grid.sh TPTOOL MODEL smoke|quick|full: 3D-parallel training
# (tensor x pipeline x data, virtual chunks, every schedule, ZeRO-1,
# sequence parallelism) over MPI against one rank, with real programs
# (`shardc run`).
#
# The shape is tiny and its 9 layers (17 in the full grid) need an uneven
# split over most p x v (balanced by cost). Every configuration trains 10 steps of 8 microbatches
# (global batch 16 of microbatch 2, --no-shuffle) and must give the losses
# of the one-rank run: within 1e-5 relative at step 1 and 1e-4 at step 10;
# where the configuration has the reduced step-1 gradients (--dump-grads),
# they must be within 1e-5 of each tensor's largest entry too.
#
# smoke: three configurations that together take every path (interleaved
# chunks, ZeRO-1, all three axes with sequence parallelism), for the
# sanitizer build, whose programs run ten times slower; quick: a
# representative part of the grid (make test); full: every
# t x p x d <= 8 with v in {1, 2}, every registered schedule that suits
# the shape (`shardc schedule --list`, each tried), --zero 0/1
# when d > 1, --sequence-parallel on/off when t > 1 (make test-full).
# Prints one line per configuration and a summary.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TOOL=$(cd "$OLDPWD" && realpath "$1")
MODEL=$2
MODE=${3:-quick}
MODELS=$ROOT/models
STEPS=10
GB=16
# The full grid reaches t = 8 (heads and kv heads divisible by 8) and
# p x v = 16 (17 layers).
case $MODEL-$MODE in
gpt2-quick | gpt2-smoke) DEFS="-D vocab=97 -D seq=8 -D hidden=16 -D heads=4 -D layers=9 -D batch=2" ;;
gpt2-full) DEFS="-D vocab=97 -D seq=8 -D hidden=32 -D heads=8 -D layers=17 -D batch=2" ;;
llama-quick | llama-smoke) DEFS="-D vocab=65 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48 -D layers=9 -D batch=2" ;;
llama-full) DEFS="-D vocab=65 -D seq=8 -D hidden=64 -D heads=16 -D kv_heads=8 -D ffn=48 -D layers=17 -D batch=2" ;;
*)
  echo "grid.sh: unknown model $MODEL"
  exit 2
  ;;
esac

# The schedules come from shardc's registry, so that a new one is trained
# here without an edit: SCHEDULES lists them, and suits tells whether one
# takes p stages of v chunks with d replicas (m = GB / (2 d) microbatches).
SCHEDULES=$("$SHARDC" schedule --list | awk '{ print $1 }') ||
  { echo "FAIL: shardc schedule --list"; exit 1; }
# The placement must suit the model too (pp-partition may refuse a
# layout the schedule takes), so the model is partitioned as well
# (compile without a target writes nothing).
suits() {
  # shellcheck disable=SC2086
  "$SHARDC" schedule "$MODELS/$MODEL.shard" $DEFS --pp "$2" --vpp "$3" --dp "$4" \
    --global-batch $GB --schedule "$1" >/dev/null 2>&1 &&
    "$SHARDC" compile "$MODELS/$MODEL.shard" $DEFS --pp "$2" --vpp "$3" \
      --schedule "$1" >/dev/null 2>&1
}

# A configuration: t p d v schedule zero sp [group [recompute [flag]]]
# (sp: 1 or 0); schedule - is the default (1f1b for v = 1, interleaved for
# v > 1); group, when given and not -, is the interleaved schedule's
# --vpp-group N; schedule file is 1F1B written as a schedule file
# (one_f_one_b_file) for --schedule-file. recompute, when given and not -,
# is selective, full or full2 (full in groups of 2 layers): such a row must
# also equal the same layout without recomputation to the bit (trained
# first when no row before it did). flag, when given, is one more flag of
# the run.
quick_configs() {
  # Every registered schedule once, with ZeRO-1 over two replicas where it
  # takes v = 1, else on two chunks; last, interleaving with m = 8 not a
  # multiple of p = 3, in microbatch groups of 5 (the last group 3);
  # 1F1B read from a schedule file; and pipeline messages as 1/t slices
  # (scatter/gather, on whenever t > 1 without sequence parallelism) on
  # one and two chunks and with replicas, and once whole.
  for s in $SCHEDULES; do
    if suits "$s" 2 1 2; then
      echo "1 2 2 1 $s 1 0"
    elif suits "$s" 2 2 1; then
      echo "1 2 1 2 $s 0 0"
    fi
  done
  # The zero-bubble schedules (backward split into B and W) on more
  # shapes: tensor with sequence parallelism, four stages, ZeRO-1 on two
  # chunks; each where the model takes it. zb-v also with ZeRO-1 over four
  # replicas: the first stage holds both copies of GPT-2's tied embedding
  # and, with d > 2, makes the second copy's weights the first's.
  for s in zb-h1 zb-v; do
    v=1
    suits "$s" 2 1 1 || v=2
    d4=
    [ "$s" = zb-v ] && d4="1 2 4 $v $s 1 0"
    for c in "2 2 1 $v $s 0 1" "1 4 1 $v $s 0 0" "1 2 2 $v $s 1 0" ${d4:+"$d4"}; do
      # shellcheck disable=SC2086
      set -- $c
      [ "$c" = "1 2 2 1 $s 1 0" ] && continue # the loop above has it
      suits "$s" "$2" "$4" "$3" && echo "$c"
    done
  done
  cat <<EOF
1 2 1 1 - 0 0
1 4 1 2 - 0 0
1 1 2 1 - 0 0
1 1 4 1 - 1 0
2 2 1 2 - 0 1
2 2 2 2 - 1 1
1 3 1 2 - 0 0 5
1 4 2 1 file 1 0
2 2 1 2 - 0 1 - selective
2 2 2 2 - 1 1 - full
1 4 1 2 - 0 0 - full2
2 2 1 1 - 0 0
2 2 1 2 - 0 0
2 2 2 1 - 1 0
2 2 1 1 - 0 0 - - --no-scatter-gather
EOF
}

# Recomputation in the full grid: full on every t x p x d <= 8 (v = 2 where
# p > 1, ZeRO-1 where d > 1, sequence parallelism where t > 1), selective
# and full in groups of 2 on a few of them.
recompute_configs() {
  for t in 1 2 4; do for p in 1 2 4; do for d in 1 2 4; do
    [ $((t * p * d)) -le 8 ] && [ $((t * p * d)) -gt 1 ] || continue
    v=1 z=0 sp=0
    [ "$p" = 1 ] || v=2
    [ "$d" = 1 ] || z=1
    [ "$t" = 1 ] || sp=1
    echo "$t $p $d $v - $z $sp - full"
  done; done; done
  cat <<EOF
2 2 2 2 - 1 1 - selective
1 2 4 1 - 1 0 - selective
4 2 1 2 - 0 1 - full2
1 4 2 2 - 1 0 - full2
EOF
}

smoke_configs() {
  cat <<EOF
1 2 1 2 - 0 0
1 1 2 1 - 1 0
2 2 2 2 - 1 1
EOF
}

full_configs() {
  for t in 1 2 4 8; do for p in 1 2 4 8; do for d in 1 2 4 8; do
    [ $((t * p * d)) -le 8 ] || continue
    [ $((t * p * d)) -gt 1 ] || continue
    for v in 1 2; do
      [ "$v" = 1 ] || [ "$p" -gt 1 ] || continue
      # Every registered schedule that takes the shape (each replica's
      # microbatches must fill it: m = 8 / d).
      scheds=-
      if [ "$p" -gt 1 ]; then
        scheds=
        for s in $SCHEDULES; do suits "$s" "$p" "$v" "$d" && scheds="$scheds $s"; done
      fi
      for s in $scheds; do
        for z in 0 1; do
          [ "$z" = 0 ] || [ "$d" -gt 1 ] || continue
          for sp in 0 1; do
            [ "$sp" = 0 ] || [ "$t" -gt 1 ] || continue
            echo "$t $p $d $v $s $z $sp"
          done
        done
      done
    done
  done; done; done
  recompute_configs
}

"$TOOL" data data.bin 40000 61 || exit 1

# train NAME [FLAGS...]: 10 steps; leaves NAME.json, NAME.grads, NAME.out.
train() {
  name=$1
  shift
  # shellcheck disable=SC2086
  "$SHARDC" run "$MODELS/$MODEL.shard" $DEFS --vocab-multiple 8 "$@" --out "prog-$name" \
    --data data.bin --steps $STEPS --no-shuffle --global-batch $GB --lr 1e-2 --log-every $STEPS \
    --log-json "$name.json" --dump-grads "$name.grads" >"$name.out" 2>&1 </dev/null
}

# one_f_one_b_file P M FILE: 1F1B's compute order for P stages and M
# microbatches as a schedule file (docs/schedules.md): stage r warms up
# with min(P - r - 1, M) forwards, then alternates, then drains.
one_f_one_b_file() {
  r=0
  : >"$3"
  while [ $r -lt "$1" ]; do
    w=$(($1 - r - 1))
    [ $w -le "$2" ] || w=$2
    line='' i=0
    while [ $i -lt $w ]; do line="$line F$i.0" i=$((i + 1)); done
    i=0
    while [ $i -lt $(($2 - w)) ]; do line="$line F$((w + i)).0 B$i.0" i=$((i + 1)); done
    while [ $i -lt "$2" ]; do line="$line B$i.0" i=$((i + 1)); done
    echo "$line" >>"$3"
    r=$((r + 1))
  done
}

# The log without its timings: what two runs must share to the bit.
strip_rate() { sed 's/,"tokens_per_s":[^}]*//' "$1.json"; }
loss_at() { sed -n "$2p" "$1.json" | sed 's/.*"loss":\([^,}]*\).*/\1/'; }
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; printf "%.1e", d / m }' 2>/dev/null || true; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

if ! train ref; then
  fail "one rank: exit $?"
  tail -5 ref.out
  finish
fi
r1=$(loss_at ref 1) r10=$(loss_at ref $STEPS)
printf '%s (%s): %d steps, global batch %d; one rank: loss@1 %s, loss@%d %s\n' "$MODEL" "$MODE" \
  $STEPS $GB "$r1" $STEPS "$r10"
printf '%-34s %-9s %-9s %-9s %s\n' "t p d v schedule zero sp [group rc]" "rel@1" "rel@$STEPS" "grads@1" \
  "recompute"
n=0
configs=$(case $MODE in full) full_configs ;; smoke) smoke_configs ;; *) quick_configs ;; esac)
echo "$configs" | while read -r t p d v s z sp grp rc flag; do
  [ "$grp" != - ] || grp=
  [ "$rc" != - ] || rc=
  twin="t$t-p$p-d$d-v$v-$s-z$z-sp$sp${grp:+-g$grp}${flag:+$flag}"
  name="$twin${rc:+-$rc}"
  set -- --tp "$t" --pp "$p" --dp "$d" --vpp "$v" --zero "$z"
  if [ "$s" = file ]; then
    one_f_one_b_file "$p" $((GB / (2 * d))) "$name.sched"
    set -- "$@" --schedule-file "$name.sched"
  elif [ "$s" != - ]; then
    set -- "$@" --schedule "$s"
  fi
  [ "$sp" = 0 ] || set -- "$@" --sequence-parallel
  [ -z "$grp" ] || set -- "$@" --vpp-group "$grp"
  if [ -n "$rc" ] && [ ! -f "$twin.json" ] && ! train "$twin" "$@"; then
    echo "FAIL: $twin: exit"
    echo x >>fails
    continue
  fi
  case $rc in
  '') ;;
  full2) set -- "$@" --recompute full --recompute-layers 2 ;;
  *) set -- "$@" --recompute "$rc" ;;
  esac
  [ -z "$flag" ] || set -- "$@" "$flag"
  if ! train "$name" "$@"; then
    echo "FAIL: $name: exit"
    sed 's/^/      /' "$name.out" | tail -5
    echo x >>fails
    continue
  fi
  e1=$(relerr "$(loss_at "$name" 1)" "$r1") e10=$(relerr "$(loss_at "$name" $STEPS)" "$r10")
  gst=0
  g=$("$TOOL" cmp ref.grads "$name.grads" 1e-5) || gst=$?
  ge=$(echo "$g" | sed -n 's/.*largest entry \([^ ]*\) .*/\1/p')
  bits=
  if [ -n "$rc" ]; then
    if [ "$(strip_rate "$name")" = "$(strip_rate "$twin")" ] && cmp -s "$name.grads" "$twin.grads"; then
      bits="= none, to the bit"
    else
      bits="DIFFERS from none"
      echo "FAIL: $name: losses or gradients differ from $twin's"
      echo x >>fails
    fi
  fi
  printf '%-34s %-9s %-9s %-9s %s\n' "$t $p $d $v $s $z $sp${grp:+ $grp}${rc:+ ${grp:--} $rc}${flag:+ ${grp:--} ${rc:--} $flag}" \
    "$e1" "$e10" "${ge:-?}" "$bits"
  le "$e1" 1e-5 || { echo "FAIL: $name: loss at step 1"; echo x >>fails; }
  le "$e10" 1e-4 || { echo "FAIL: $name: loss at step $STEPS"; echo x >>fails; }
  [ $gst -eq 0 ] || { echo "FAIL: $name: gradients: $g"; echo x >>fails; }
  rm -rf "prog-$name"
done
n=$(echo "$configs" | wc -l)
FAILS=$({ cat fails 2>/dev/null || true; } | wc -l)
echo "$MODEL: $n configurations against one rank"
finish
