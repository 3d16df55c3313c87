#!/bin/bash
# Expert parallelism (--ep) on the CPU target against one rank, with the
# tiny Mixtral (models/mixtral.shard).
#
#   moe_ep.sh TPTOOL quick   ep 2 of d 2 and ep 4 of d 4: losses over 10
#                            steps within 1e-5 and step-1 gradients within
#                            1e-4 of one rank's; a capacity factor that
#                            drops tokens gives one rank's losses at ep 4; a
#                            checkpoint saved at ep 2 (d 4, ZeRO-1) resumes at
#                            ep 1 and at ep 4 with one rank's next losses;
#                            the flags' errors; --report comm's all_to_all rows
#   moe_ep.sh TPTOOL grid    the layouts of up to 8 ranks where ep composes
#                            with d, t, sequence parallelism, p, v, the
#                            schedules and ZeRO-1, 4 layers, the same two
#                            checks; DeepSeek-MoE at ep 4; validation
#                            losses at ep 2
#
# TPTOOL is tests/features/tp_run's tool (`cmp A B TOL`: the worst
# difference of two gradient dumps relative to each tensor's largest entry).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TPTOOL=$1 MODE=$2
corpus_shards
STEPS=10
if [[ $MODE == grid ]]; then
  M=("$ROOT/models/mixtral.shard" -D seq=16 -D hidden=32 -D ffn=48 -D layers=4)
  RUN=(--data train.bin --no-shuffle --global-batch 8 --quiet)
  CONFIGS=("--dp 4 --ep 2" "--dp 8 --ep 4" "--dp 2 --ep 2 --tp 2"
           "--dp 2 --ep 2 --tp 2 --sequence-parallel" "--dp 4 --ep 4 --tp 2"
           "--dp 2 --ep 2 --pp 2" "--dp 2 --ep 2 --pp 2 --vpp 2" "--dp 4 --ep 2 --pp 2"
           "--dp 2 --ep 2 --pp 2 --schedule zb-h1" "--dp 2 --ep 2 --tp 2 --pp 2"
           "--dp 2 --ep 2 --recompute full" "--dp 4 --ep 2 --zero 1" "--dp 8 --ep 4 --zero 1"
           "--dp 2 --ep 2 --tp 2 --zero 1" "--dp 4 --ep 2 --pp 2 --zero 1")
else
  M=("$ROOT/models/mixtral.shard" -D seq=16 -D hidden=32 -D ffn=48)
  RUN=(--data train.bin --no-shuffle --global-batch 4 --quiet)
  CONFIGS=("--dp 2 --ep 2" "--dp 4 --ep 4")
fi

# within A B TOL: the largest relative difference of two loss logs, printed;
# false when it passes TOL or the logs differ in length.
within() {
  [[ -s $1 && -s $2 ]] || return 1
  [[ $(wc -l <"$1") == $(wc -l <"$2") ]] || return 1
  paste <(losses "$1") <(losses "$2") |
    awk -v tol="$3" '{ d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r }
                     END { printf "  losses: largest relative difference %.2e\n", m; exit m > tol }'
}

check "one rank" "$SHARDC" run "${M[@]}" "${RUN[@]}" --steps $STEPS --log-json one.jsonl \
  --dump-grads one.grads
for cfg in "${CONFIGS[@]}"; do
  name=$(echo "$cfg" | tr -d ' -')
  # shellcheck disable=SC2086
  check "$cfg" "$SHARDC" run "${M[@]}" $cfg "${RUN[@]}" --steps $STEPS --log-json "$name.jsonl" \
    --dump-grads "$name.grads"
  if within one.jsonl "$name.jsonl" 1e-5; then
    ok "$cfg: $STEPS losses within 1e-5 of one rank's"
  else
    fail "$cfg: losses differ from one rank's"
  fi
  if [[ -s $name.grads ]] && g=$("$TPTOOL" cmp one.grads "$name.grads" 1e-4); then
    echo "  gradients: $g"
    ok "$cfg: step-1 gradients within 1e-4"
  else
    fail "$cfg: step-1 gradients: ${g:-no dump}"
  fi
done
if [[ $MODE == grid ]]; then
  # DeepSeek-MoE: fine-grained experts beside shared ones (a dense MLP
  # every rank keeps whole).
  D=("$ROOT/models/deepseek_moe.shard" -D seq=16 -D hidden=32)
  check "deepseek_moe, one rank" "$SHARDC" run "${D[@]}" "${RUN[@]}" --steps 5 --log-json ds1.jsonl
  check "deepseek_moe, --dp 4 --ep 4" "$SHARDC" run "${D[@]}" --dp 4 --ep 4 "${RUN[@]}" --steps 5 \
    --log-json ds4.jsonl
  if within ds1.jsonl ds4.jsonl 1e-5; then
    ok "deepseek_moe at ep 4: one rank's losses"
  else
    fail "deepseek_moe at ep 4: losses differ"
  fi
  # Evaluation runs the all_to_alls too, on every rank of the group.
  EV=(--steps 4 --val-data train.bin --eval-every 2 --eval-batches 2)
  check "eval, one rank" "$SHARDC" run "${M[@]}" "${RUN[@]}" "${EV[@]}" --log-json ev1.jsonl
  check "eval, --dp 4 --ep 2" "$SHARDC" run "${M[@]}" --dp 4 --ep 2 "${RUN[@]}" "${EV[@]}" \
    --log-json ev2.jsonl
  val() { grep -o '"val_loss":[0-9.e-]*' "$1" | cut -d: -f2; }
  echo "  val losses: $(val ev1.jsonl | tr '\n' ' ')| ep 2: $(val ev2.jsonl | tr '\n' ' ')"
  if [[ -n $(val ev1.jsonl) ]] && cmp -s <(val ev1.jsonl) <(val ev2.jsonl); then
    ok "validation losses at ep 2 are one rank's"
  else
    fail "validation losses differ"
  fi
  finish
fi

# A capacity of 0.5 drops copies: ep 4 drops the same ones as one rank
# (each rank's dispatch keeps its own tokens' first copies, as one rank
# does for each microbatch), so the losses agree, and differ from the
# dropless ones.
check "capacity 0.5, one rank" "$SHARDC" run "${M[@]}" -D capacity=0.5 "${RUN[@]}" --steps 3 \
  --log-json cap1.jsonl
check "capacity 0.5, --dp 4 --ep 4" "$SHARDC" run "${M[@]}" -D capacity=0.5 --dp 4 --ep 4 \
  "${RUN[@]}" --steps 3 --log-json cap4.jsonl
echo "  capacity 0.5: $(losses cap1.jsonl | tr '\n' ' ')| ep 4: $(losses cap4.jsonl | tr '\n' ' ')"
if within cap1.jsonl cap4.jsonl 1e-5 && ! cmp -s <(losses cap1.jsonl | head -1) <(losses one.jsonl | head -1); then
  ok "capacity drops: one rank's losses at ep 4, not the dropless ones"
else
  fail "capacity losses"
fi

# Checkpoints hold whole experts ([8, ...], as one rank writes them) and
# their whole AdamW state: saved at ep 2 of d 4 with ZeRO-1 (each expert's
# state sharded over its 2 holders) after 3 of 5 steps, resumed at ep 1
# and ep 4, steps 4 and 5 have the losses of one rank resumed from its own
# checkpoint.
check "one rank saves" "$SHARDC" run "${M[@]}" "${RUN[@]}" --steps 3 --save ck1
check "one rank resumes" "$SHARDC" run "${M[@]}" "${RUN[@]}" --steps 5 --resume ck1 \
  --log-json r1.jsonl
check "--ep 2 --dp 4 --zero 1 saves" "$SHARDC" run "${M[@]}" --dp 4 --ep 2 --zero 1 "${RUN[@]}" \
  --steps 3 --save ck2
for cfg in "" "--dp 4 --ep 4"; do
  # shellcheck disable=SC2086
  check "resume at ${cfg:-one rank}" "$SHARDC" run "${M[@]}" $cfg "${RUN[@]}" --steps 5 \
    --resume ck2 --log-json r.jsonl
  if within r1.jsonl r.jsonl 1e-5; then
    ok "saved at ep 2, resumed at ${cfg:-one rank}: the losses of one rank's resume"
  else
    fail "resumed at ${cfg:-one rank}: $(losses r.jsonl | tr '\n' ' ')"
  fi
done

expect_error "--ep needs a routed layer" "--ep 2: the model has no routed layer" \
  "$SHARDC" compile "$ROOT/models/gpt2.shard" -D layers=1 --dp 2 --ep 2 --target cpu -o bad
expect_error "--ep must divide --dp" "--ep 3 must divide --dp 2" \
  "$SHARDC" compile "${M[@]}" --dp 2 --ep 3
LINE=$(grep -n 'moe_dispatch(x, chosen' "$ROOT/models/mixtral.shard" | cut -d: -f1)
expect_error "--ep must divide the experts" \
  "mixtral.shard:$LINE:27: error: ep-partition: --ep 3 must divide the routed layer's 8 experts" \
  "$SHARDC" compile "${M[@]}" --dp 3 --ep 3 --target cpu -o bad

# The tokens' all_to_all in the comm report: T*k = 32 rows of 32 reals
# per layer, half of them to the other expert rank.
"$SHARDC" compile "${M[@]}" --dp 2 --ep 2 --report comm >comm.txt
grep all_to_all comm.txt | sed 's/^/  /'
if grep -q 'forward   all_to_all  *f32\[32, 32\]  *2  *512  *1024  *4096 ' comm.txt; then
  ok "--report comm shows the all_to_all bytes"
else
  fail "--report comm's all_to_all"
fi
finish
