#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# outputs.sh: an output that names an input is refused before
# anything is written, and the input is left byte for byte as it was:
# --log-json, --dump-grads and --trace over --data (by its name, through a
# hard link and through a symbolic link), --log-json over --val-data, over
# the --init-from file and over the state file --resume reads, --log-json
# over a file --save writes, and two outputs naming one file. On one rank
# and on 2 (t=2). Each case prints the message.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 --microbatch 2"
head -c 20000 "$ROOT/data/corpus.txt" >text.txt
check "shardc data makes the shards" "$SHARDC" data text.txt -o v.bin
cp v.bin v.orig
ln v.bin hard.bin
ln -s v.bin soft.bin
check "a checkpoint to resume from" "$SHARDC" run $MODEL --out prog --data v.bin --steps 2 --save ck
cp ck/state.safetensors state.orig

# refused LABEL FRAGMENT ORIGINAL COPY -- FLAGS...: exit 1, the fragment in
# the error, no step run, ORIGINAL still equal to COPY.
refused() {
  label=$1 frag=$2 file=$3 copy=$4; shift 5
  for layout in one tp2; do
    extra=
    [ $layout = tp2 ] && extra="--tp 2"
    expect_error "$layout: $label" "$frag" "$SHARDC" run $MODEL $extra --out prog-$layout "$@"
    check "$layout: $label: no step ran" sh -c "! grep -q '^step 1/' out.txt"
    check "$layout: $label: $file is untouched" cmp "$file" "$copy"
  done
}

refused "--log-json over --data" "--log-json: v.bin is also --data v.bin" v.bin v.orig -- \
  --data v.bin --steps 3 --log-json v.bin
refused "--dump-grads over --data" "--dump-grads: v.bin is also --data v.bin" v.bin v.orig -- \
  --data v.bin --steps 3 --dump-grads v.bin
refused "--trace over --data" "--trace: v.bin is also --data v.bin" v.bin v.orig -- \
  --data v.bin --steps 3 --trace v.bin
refused "--log-json through a hard link to --data" "--log-json: hard.bin is also --data v.bin" \
  v.bin v.orig -- --data v.bin --steps 3 --log-json hard.bin
refused "--log-json through a symbolic link to --data" "--log-json: soft.bin is also --data v.bin" \
  v.bin v.orig -- --data v.bin --steps 3 --log-json soft.bin
refused "--log-json over a shard of a --data glob" "--log-json: v.bin is also --data v.bin" \
  v.bin v.orig -- --data "v.b?n" --steps 3 --log-json v.bin
refused "--log-json over --val-data" "--log-json: v.bin is also --val-data v.bin" v.bin v.orig -- \
  --data hard.bin --val-data v.bin --steps 3 --log-json v.bin
refused "--log-json over --init-from" "--log-json: ck/state.safetensors is also --init-from" \
  ck/state.safetensors state.orig -- --steps 0 --init-from ck/state.safetensors \
  --log-json ck/state.safetensors
refused "--log-json over the state --resume reads" \
  "--log-json: ck/state.safetensors is also --resume ck/state.safetensors" ck/state.safetensors \
  state.orig -- --data v.bin --steps 4 --resume ck --log-json ck/state.safetensors
refused "--log-json over a file --save writes" \
  "--log-json: ck/model.safetensors is also the output of --save" ck/state.safetensors \
  state.orig -- --data v.bin --steps 3 --save ck --log-json ck/model.safetensors
refused "--log-json and --trace into one file" "--trace: out.json is also the output of --log-json" \
  v.bin v.orig -- --data v.bin --steps 3 --log-json out.json --trace out.json
check "outputs elsewhere: the run goes" "$SHARDC" run $MODEL --out prog --data v.bin --steps 3 \
  --log-json log.json --trace trace.json --dump-grads grads.st
finish
