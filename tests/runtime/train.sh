#!/bin/bash
# Training end to end on the toy model: the loss falls, the reports have
# their documented form, runs repeat exactly, microbatches, SGD and
# sampling work.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
make_corpus

"$TOY" --data train.bin --val-data val.bin --steps 150 --lr 1e-2 --log-every 50 --eval-every 75 \
  --log-json log.json --sample-prompt "the " --sample-tokens 40 >run.txt
sed 's/^/      /' run.txt
first=$(sed -n '1s/.*"loss":\([^,]*\).*/\1/p' log.json)
last=$(sed -n '$s/.*"loss":\([^,]*\).*/\1/p' log.json)
val=$(sed -n 's/^final: .*val loss //p' run.txt)
check "first loss $first is about ln(256) = 5.545" awk "BEGIN{exit !($first > 5.5 && $first < 5.6)}"
check "last loss $last is below 1.5" awk "BEGIN{exit !($last < 1.5)}"
check "final val loss $val is below 1.6" awk "BEGIN{exit !($val < 1.6)}"
check "memory plan printed by region" \
  grep -qE '^memory plan: weights .* \| grads .* \| optimizer .* \| activations .* \| temporaries .* \| total ' run.txt
check "progress lines: step, loss, lr, grad norm, tok/s, eta" \
  grep -qE '^step 50/150 \| loss [0-9]+\.[0-9]{4} \| lr [0-9]\.[0-9]{2}e-0[0-9] \| grad norm [0-9.e-]+ \| [0-9,]+ tok/s \| eta [0-9]+s$' run.txt
check "lines at steps 1, 50, 100, 150 ($(grep -c '^step [0-9]*/' run.txt))" test "$(grep -c '^step [0-9]*/' run.txt)" -eq 4
check "val loss lines at 75 and 150" test "$(grep -cE '^step (75|150) \| val loss [0-9.]+$' run.txt)" -eq 2
check "one JSON object per step ($(wc -l <log.json))" test "$(wc -l <log.json)" -eq 150
check "JSON fields step, loss, lr, grad_norm, tokens_per_s" \
  grep -q '^{"step":1,"loss":[0-9.]*,"lr":[0-9.e-]*,"grad_norm":[0-9.e-]*,"tokens_per_s":[0-9.e+]*}$' log.json
check "val_loss in the JSON of step 75" grep -q '^{"step":75,.*"val_loss":' log.json
sample=$(tail -1 run.txt)
check "a sample of 4 + 40 bytes: '$sample'" test "${#sample}" -eq 44

"$TOY" --data train.bin --steps 20 --log-json again1.json >/dev/null
"$TOY" --data train.bin --steps 20 --log-json again2.json >/dev/null
strip_timing again1.json >a1
strip_timing again2.json >a2
check "two runs with the same seed are identical" cmp a1 a2
"$TOY" --data train.bin --steps 20 --seed 7 --log-json seed7.json >/dev/null
strip_timing seed7.json >s7
check "another seed gives another run" test "$(cmp a1 s7 2>&1)" != ""

"$TOY" --data train.bin --steps 30 --global-batch 16 --lr 1e-2 --log-json gb.json >gb.txt
check "--global-batch 16: 4 microbatches ($(grep -o '([0-9]* microbatches)' gb.txt))" \
  grep -q "global batch 16 (4 microbatches)" gb.txt
"$TOY" --data train.bin --steps 60 --optimizer sgd --lr 5 --weight-decay 0 --log-json sgd.json >/dev/null
s0=$(sed -n '1s/.*"loss":\([^,]*\).*/\1/p' sgd.json)
s1=$(sed -n '$s/.*"loss":\([^,]*\).*/\1/p' sgd.json)
check "sgd lowers the loss: $s0 -> $s1" awk "BEGIN{exit !($s1 < $s0 - 0.5)}"

# Sampling from a checkpoint without training, as `shardc sample` does.
"$TOY" --data train.bin --steps 100 --lr 1e-2 --save ck >/dev/null
"$TOY" --init-from ck/model.safetensors --steps 0 --sample-prompt "the quick" --sample-tokens 30 --seed 5 >s1.txt
"$TOY" --init-from ck/model.safetensors --steps 0 --sample-prompt "the quick" --sample-tokens 30 --seed 5 >s2.txt
echo "      sample: $(tail -1 s1.txt)"
check "sampling is deterministic for a seed" cmp s1.txt s2.txt
"$TOY" --init-from ck/model.safetensors --steps 0 --sample-prompt "the" --sample-tokens 30 --temperature 0 >g.txt
echo "      greedy: $(tail -1 g.txt)"
check "temperature 0 is greedy (a bigram model repeats itself)" grep -q "^the" g.txt
"$TOY" --init-from ck/model.safetensors --steps 0 --sample-prompt "the" --sample-tokens 30 --temperature 0 --quiet >q.txt
check "--quiet prints the sample alone ($(wc -c <q.txt) bytes: 33 and a newline)" test "$(wc -c <q.txt)" -eq 34
finish
