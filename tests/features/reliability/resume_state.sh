#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# resume_state.sh: every piece of state a run carries comes
# back on resume. On one rank and on t=2: 6 steps in one run against 3
# steps, --resume and 3 more (constant learning rate, dropout, shuffled
# data), each in a folder of its own with the same --save name:
# - the state files at step 6 are equal byte for byte, and field by field
#   (st_fields.py lists what differs): weights, both AdamW moments, and the
#   metadata (step, data position, the sampler's random generator, every
#   restored flag). The first run sets the saved flags that act on the
#   next steps away from their defaults, so that a flag the resume did not
#   restore would change them;
# - a sample generated after the resumed run equals the uninterrupted
#   run's byte for byte (a resume that dropped the sampler's generator
#   would sample something else).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 -D dropout_rate=0.1 --microbatch 2"
corpus_shards
DATA=$(pwd)/train.bin
C="--data $DATA --global-batch 4 --lr 1e-2 --lr-schedule constant --save ck --quiet"
C="$C --beta1 0.8 --beta2 0.99 --eps 1e-6 --weight-decay 0.05 --clip 0.7 --warmup 2 --seed 7"
C="$C --val-data $DATA --eval-every 2 --eval-batches 2 --log-every 2 --save-every 2"
SAMPLE="--sample-prompt The --sample-tokens 60 --temperature 0.8"

case_of() {
  label=$1; shift
  mkdir -p "$label-one" "$label-two"
  (cd "$label-one" && "$SHARDC" run $MODEL "$@" --out ../prog-$label $C --steps 6 $SAMPLE \
    >sample.txt 2>err.txt) || { fail "$label: the uninterrupted run: $(head -3 $label-one/err.txt)"; return; }
  (cd "$label-two" && "$SHARDC" run $MODEL "$@" --out ../prog-$label $C --steps 3 >/dev/null 2>err.txt &&
    "$SHARDC" run $MODEL "$@" --out ../prog-$label --resume ck --steps 6 --quiet $SAMPLE \
      >sample.txt 2>>err.txt) || { fail "$label: 3 + resume + 3: $(head -3 $label-two/err.txt)"; return; }
  echo "      $label: sample after 6 steps:         $(head -c 60 $label-one/sample.txt | tr -c "[:print:]" .)"
  echo "      $label: sample after 3 + resume + 3: $(head -c 60 $label-two/sample.txt | tr -c "[:print:]" .)"
  check "$label: the state files at step 6 are equal byte for byte" \
    cmp "$label-one/ck/state.safetensors" "$label-two/ck/state.safetensors"
  if command -v python3 >/dev/null; then
    st=0
    python3 "$ROOT/tests/features/reliability/st_fields.py" "$label-one/ck/state.safetensors" \
      "$label-two/ck/state.safetensors" >fields.txt || st=$?
    cat fields.txt
    check "$label: every saved field came back (the field by field comparison)" test $st -eq 0
    check "$label: the flags the first run set are the checkpoint's" \
      sh -c "grep -q 'flag.beta1' '$label-one/ck/state.safetensors' && \
             grep -q '\"flag.clip\":\"0.7\"' '$label-two/ck/state.safetensors'"
  fi
  check "$label: so are the weights files" \
    cmp "$label-one/ck/model.safetensors" "$label-two/ck/model.safetensors"
  check "$label: the samples are equal byte for byte ($(wc -c <$label-one/sample.txt) bytes)" \
    cmp "$label-one/sample.txt" "$label-two/sample.txt"
}

case_of one
case_of tp2 --tp 2
finish
