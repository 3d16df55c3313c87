#!/bin/bash
# shellcheck disable=SC2086 # the -D lists are lists of words
# Many shards: `shardc data --shard-tokens` cuts a text into shards of a set
# size; --data DIR reads the folder's shards (in name order, the windows
# shuffled across all of them by --seed); --resume continues at the same
# token of the same shard, says so, and warns when the data set changed.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TINY="-D vocab=256 -D hidden=16 -D heads=2 -D layers=1 -D seq=16 --microbatch 2"
gpt2() { "$SHARDC" run "$ROOT/models/gpt2.shard" $TINY --out prog "$@"; }
loss_at() { sed -n "$2p" "$1" | sed 's/.*"loss":\([^,}]*\).*/\1/'; }

head -c 20000 "$ROOT/data/corpus.txt" >text.txt
mkdir shards
check "shardc data --shard-tokens 6000: shards of a set size" \
  "$SHARDC" data text.txt -o shards/train.bin --shard-tokens 6000
cp cmd.txt data.txt
sed 's/^/      /' data.txt
n=$({ ls shards/*.bin 2>/dev/null || true; } | wc -l)
check "  ... 4 shards, 6000 + 6000 + 6000 + 2000 tokens" sh -c \
  "[ $n -eq 4 ] && grep -q 'train_000000.bin: 6000 tokens' data.txt && grep -q 'train_000003.bin: 2000 tokens' data.txt"

check "6 steps over the folder, shuffled, saved at step 3" gpt2 --data shards --steps 6 --log-every 1 \
  --log-json all.json --save ck --save-every 3 --keep-last 2
cp cmd.txt run.txt
check "  ... the folder is its 4 shards" grep -q "train data: shards | 4 shards, 20,000 tokens" run.txt
gpt2 --data shards --resume ck/step-00000003 --save ck2 --log-every 1 --log-json rest.json >resume.txt 2>&1 || true
note=$({ grep '^data: ' resume.txt || true; })
echo "      $note"
check "--resume says where it continues" sh -c 'grep -Eq "^data: step 4 continues at token [0-9]+ of train_00000[0-3].bin, where the saved run stopped" resume.txt'
bad=0
for s in 1 2 3; do
  a=$(loss_at all.json $((s + 3))) b=$(loss_at rest.json $s)
  echo "      step $((s + 3)): $a straight, $b resumed"
  [ -n "$a" ] && [ "$a" = "$b" ] || bad=1
done
if [ $bad -eq 0 ]; then ok "the resumed steps are the straight run's, bit for bit"; else fail "resumed losses differ"; fi

# A shard more: the windows move, and --resume says so.
cp shards/train_000001.bin shards/train_000004.bin
gpt2 --data shards --resume ck/step-00000003 --save ck3 >changed.txt 2>&1 || true
w=$({ grep 'warning: --resume' changed.txt || true; })
echo "      $w"
check "a changed data set is a warning at --resume" sh -c 'grep -q "warning: --resume: step 4 reads .* but the saved run would have read .*: the data set (shards) is not the one it trained on" changed.txt'

mkdir empty
expect_error "a folder without shards" "empty: a folder without token shards (*.bin) in it" \
  gpt2 --data empty --steps 1

if [ $FAILS -eq 0 ]; then
  echo "shards: passed"
  exit 0
fi
echo "shards: FAILED: $FAILS check(s)"
exit 1
