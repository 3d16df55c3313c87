#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# memory.sh: a configuration whose memory plan exceeds the
# machine's memory is an error before anything is allocated. shardc run
# compares the plan's bytes for every rank of this machine with the memory
# available (SHARDC_MEMORY_LIMIT here, to be deterministic, and the real
# MemAvailable for a shape no machine holds): exit 1, one error line
# giving both numbers, no memory plan printed, no rank started. The rank
# program makes the same check before it allocates, alone and under plain
# mpirun (ranks of the machine from Open MPI). Prints each case's message.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
M="$ROOT/models/gpt2.shard"
T="-D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 -D batch=2"
corpus_shards

# refused LABEL LIMIT FRAGMENT COMMAND...: exit 1, one error line with the
# fragment and both numbers, nothing after the checks.
refused() {
  label=$1 limit=$2 frag=$3; shift 3
  st=0; SHARDC_MEMORY_LIMIT=$limit SHARDC_JOB_KEEP=1 "$@" >"$label.txt" 2>&1 </dev/null || st=$?
  msg=$(grep 'error' "$label.txt" || true)
  echo "      $label (SHARDC_MEMORY_LIMIT=${limit:-unset}): exit $st: $msg"
  check "$label: exit status 1" test "$st" -eq 1
  check "$label: one error line, with '$frag'" \
    sh -c "[ \$(grep -c error '$label.txt') -eq 1 ] && grep error '$label.txt' | grep -qF -- '$frag'"
  check "$label: it gives the plan's bytes and the bytes available" \
    sh -c "grep error '$label.txt' | grep -q 'needs [0-9.]* [KMGT]*i*B.* than the [0-9.]* [KMGT]*i*B available'"
  check "$label: no memory plan, no banner, no step before the error" \
    sh -c "! grep -q 'memory plan:\|weights  \|^step\|MPI_ABORT\|mpirun' '$label.txt'"
}

# shardc run: the plan of every rank of the machine against the limit.
refused run1 100K "the memory plan needs" "$SHARDC" run "$M" $T --out p1 --data train.bin --steps 2
refused run4 500K "for the 4 ranks of this machine" "$SHARDC" run "$M" $T --out p4 --tp 2 --pp 2 \
  --data train.bin --steps 2
check "run4: no rank was started (no job folder)" sh -c "! ls -d p4/job-* 2>/dev/null"
st=0; SHARDC_MEMORY_LIMIT=12X "$SHARDC" run "$M" $T --out p1 --data train.bin --steps 2 >bad.txt 2>&1 || st=$?
echo "      bad-limit (SHARDC_MEMORY_LIMIT=12X): exit $st: $(grep error bad.txt)"
check "bad-limit: exit 1, one error line naming the variable and what is valid" \
  sh -c "[ $st -eq 1 ] && [ \$(grep -c error bad.txt) -eq 1 ] && \
         grep -q \"SHARDC_MEMORY_LIMIT: '12X' is not a number of bytes (such as\" bad.txt"
# The real check: a shape no machine of ours holds (about 13 TB of
# weights), against MemAvailable; only compiled, never allocated.
refused real "" "(MemAvailable in /proc/meminfo)" "$SHARDC" run "$M" -D vocab=256 -D seq=8 \
  -D hidden=65536 -D heads=64 -D layers=64 -D batch=1 --out big --data train.bin --steps 2
# A limit the plan fits in: the run goes on.
st=0
SHARDC_MEMORY_LIMIT=1G "$SHARDC" run "$M" $T --out p4 --tp 2 --pp 2 --data train.bin --steps 2 \
  >fits.txt 2>&1 || st=$?
check "a limit the plan fits in: the 4-rank run trains (exit $st)" grep -q '^step 2/2' fits.txt

# The rank program itself, before it allocates: alone, and 2 ranks under
# plain mpirun (its error names 2 ranks of this machine).
for p in "" "--tp 2"; do
  "$SHARDC" compile "$M" $T $p --target cpu -o "t${p#--tp }" >/dev/null
  "$SHARDC" build "t${p#--tp }" >/dev/null 2>&1
done
refused rank 50K "for the 1 rank of this machine" t/rank0 --data train.bin --steps 2
# Under plain mpirun each rank says it (and Open MPI's abort follows).
st=0
SHARDC_MEMORY_LIMIT=150K sh "$ROOT/tests/runtime/comm/mpirun.sh" mpirun 2 t2/rank0 --data train.bin \
  --steps 2 >mpirun2.txt 2>&1 </dev/null || st=$?
msg=$(grep -m1 'the memory plan needs' mpirun2.txt || true)
echo "      mpirun2 (SHARDC_MEMORY_LIMIT=150K): exit $st: $msg"
check "mpirun2: exit status not 0" test "$st" -ne 0
check "mpirun2: the rank's error names 2 ranks of this machine and both numbers" \
  sh -c "grep -q 'for the 2 ranks of this machine ([0-9.]* KB per rank), more than the 153.60 KB available' mpirun2.txt"
check "mpirun2: no step ran" sh -c "! grep -q '^step' mpirun2.txt"
finish
