#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# save_lock.sh: one writer per checkpoint folder.
# - A second run saving into the folder of a running one is refused at
#   once (exit 1, the holder's pid and host), and the first run's
#   checkpoint holds its own step; a symbolic link to the folder is the
#   same folder.
# - A folder mixing the state of one run with the model of another is
#   refused by --resume; the model of an earlier step of the same run (a
#   save interrupted between its two files) is a note.
# - Temporaries left by a save killed half way are removed at the next
#   start, with a note; none is left after a complete save.
# - A malformed `latest` pointer is refused, naming it.
# - A --save location where nothing can be written fails before the first
#   step.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 --microbatch 2"
corpus_shards
run() { "$SHARDC" run $MODEL --out prog --data train.bin "$@" </dev/null; }
check "the program builds" run --steps 0
meta() { python3 "$ROOT/tests/features/reliability/st_meta.py" "$@"; }

# --- two runs, one folder ---------------------------------------------------
# Run A: 40 steps, a checkpoint every 10, step 2 slowed by 3 s so that B
# starts while A runs. One rank: `shardc run` becomes the program, so $!
# is the lock's holder.
SHARDC_FAULT=0:2:slow "$SHARDC" run $MODEL --out prog --data train.bin --steps 40 --save-every 10 \
  --save ck --seed 1 >a.txt 2>&1 </dev/null &
apid=$!
for _ in $(seq 100); do grep -q "^step 1/" a.txt && break; sleep 0.1; done
t0=$(date +%s.%N)
bst=0; run --steps 60 --save-every 20 --save ck --seed 2 >b.txt 2>&1 || bst=$?
took=$(echo "$(date +%s.%N) - $t0" | bc)
ast=0; wait $apid || ast=$?
msg=$({ grep -m1 "error" b.txt || true; })
echo "      A (pid $apid, seed 1): exit $ast; B (seed 2): exit $bst after $took s"
echo "      B: $msg"
check "the second run is refused: exit 1" test $bst -eq 1
check "  naming the holder's pid and host" grep -qF "another run saves into this folder (pid $apid on host $(hostname)" b.txt
check "  before its first step" sh -c "! grep -q '^step 1/' b.txt"
check "  within 2 s" test "$(echo "$took < 2" | bc)" -eq 1
check "the first run ends well: exit 0" test $ast -eq 0
echo "      ck/state.safetensors: step $(meta ck/state.safetensors step), seed $(meta ck/state.safetensors flag.seed), run $(meta ck/state.safetensors run_id)"
check "  its checkpoint holds its own step 40 and seed 1" \
  test "$(meta ck/state.safetensors step) $(meta ck/state.safetensors flag.seed)" = "40 1"
check "  state and model of the same run and step" \
  test "$(meta ck/state.safetensors run_id) $(meta ck/state.safetensors step)" = "$(meta ck/model.safetensors run_id) $(meta ck/model.safetensors step)"
ln -s ck ck-link
SHARDC_FAULT=0:42:slow run --steps 45 --save ck-link --resume ck-link >c.txt 2>&1 &
cpid=$!
for _ in $(seq 100); do grep -q "^step 41/" c.txt && break; sleep 0.1; done
dst=0; run --steps 60 --save ck --seed 2 >d.txt 2>&1 || dst=$?
wait $cpid || true
echo "      through a link: $(grep -m1 error d.txt)"
check "a symbolic link to the folder is the same folder: refused" \
  sh -c "[ $dst -eq 1 ] && grep -q 'another run saves into this folder' d.txt"

# --- a folder of two runs -----------------------------------------------------
check "run X: seed 1, 3 steps" run --steps 3 --seed 1 --save x
check "run Y: seed 2, 3 steps" run --steps 3 --seed 2 --save y
cp y/model.safetensors x/model.safetensors
expect_error "state of run X beside the model of run Y: --resume refuses" "this folder mixes two runs" \
  run --steps 6 --resume x
check "run Z: seed 1, 2 steps" run --steps 2 --seed 1 --save z
cp z/model.safetensors x/model.safetensors
est=0; run --steps 4 --resume x >e.txt 2>&1 || est=$?
echo "      the model of step 2 beside the state of step 3 (run $(meta x/state.safetensors run_id)): exit $est: $(grep -m1 'note: model' e.txt)"
check "  the model of an earlier step of the same run: a note, and the run resumes" \
  sh -c "[ $est -eq 0 ] && grep -q 'a save was interrupted between its two files' e.txt"

# --- temporaries ----------------------------------------------------------
fst=0; RT_FAULT_AFTER_BYTES=3000 run --steps 2 --save t >f.txt 2>&1 || fst=$?
left=$(ls t | { grep -c '\.tmp' || true; })
echo "      killed 3000 bytes into its save: exit $fst, left: $(ls t | tr '\n' ' ')"
check "a save killed half way leaves a temporary" sh -c "[ $fst -eq 3 ] && [ $left -ge 1 ]"
gst=0; run --steps 2 --save t >g.txt 2>&1 || gst=$?
echo "      the next run: exit $gst: $(grep -m1 'note: removed' g.txt); left: $(ls t | tr '\n' ' ')"
check "  the next start removes it, with a note" \
  sh -c "[ $gst -eq 0 ] && grep -q 'note: removed 1 temporary an interrupted save left in t' g.txt"
check "  and no temporary is left after a complete save" sh -c "! ls t | grep -q tmp"
check "  nor in any folder of a --keep-last run" \
  sh -c "$SHARDC run $MODEL --out prog --data train.bin --steps 3 --save-every 1 --keep-last 2 --save k </dev/null && ! ls -R k | grep -q tmp"

# --- a malformed pointer ----------------------------------------------------
printf '../../etc\n' >k/latest
expect_error "a latest pointer of '../../etc': --resume refuses it, naming it" \
  "k/latest: the pointer to the newest checkpoint holds '../../etc', not a folder name" \
  run --steps 4 --resume k

# --- an unwritable --save -------------------------------------------------
expect_error "--save below a file: refused before the first step" "cannot create" \
  run --steps 300 --save train.bin/sub
check "  no step ran" sh -c "! grep -q '^step 1/' out.txt"
expect_error "--save in /proc: refused before the first step" "cannot create" \
  run --steps 300 --save /proc/shardc-save-test
check "  no step ran" sh -c "! grep -q '^step 1/' out.txt"
finish
