#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# bad_flags.sh: a table of bad command-line values across
# compile, run, schedule, simulate and info. Each case must exit with
# status 1 (no crash, no signal), print exactly one error line, name what
# the table expects (the flag, and what would be valid), never reach
# mpirun and never print a memory plan before the error. Each case prints
# its command and the message seen.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
M="$ROOT/models/gpt2.shard"
T="-D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 -D batch=2"
CASES=0

# bad "fragment" subcommand args...: one bad command line.
bad() {
  frag=$1; shift
  CASES=$((CASES + 1))
  start=$(date +%s)
  st=0; "$SHARDC" "$@" >out.txt 2>&1 || st=$?
  secs=$(($(date +%s) - start))
  errs=$(grep -c 'error' out.txt || true)
  msg=$(grep 'error' out.txt | head -1 || true)
  echo "case $CASES: shardc $*" | sed "s|$ROOT/||g"
  if [ $st -ne 1 ]; then
    fail "exit $st (expected 1)"; sed 's/^/      /' out.txt | tail -5
  elif [ "$errs" -ne 1 ]; then
    fail "$errs error lines (expected one)"; sed 's/^/      /' out.txt | tail -8
  elif ! grep 'error' out.txt | grep -qF -- "$frag"; then
    fail "expected '$frag' in: $msg"
  elif grep -v ': error: ' out.txt | grep 'memory plan\|MPI_ABORT\|mpirun' >/dev/null; then
    fail "the error came after the memory plan or from mpirun"; sed 's/^/      /' out.txt | tail -8
  else
    ok "exit 1 in ${secs}s: $msg"
  fi
}

# Misspelled flags: the nearest flag of the subcommand is suggested.
bad "did you mean --tp?" compile "$M" --tpp 2
bad "did you mean --microbatch?" schedule "$M" --microbach 2
bad "did you mean --global-batch?" simulate "$M" --global-bach 8
bad "did you mean --dtype?" run "$M" $T --dtyp f64

# compile: each flag's value on its own.
bad "--tp: expected a positive integer up to 65536, got '-1'" compile "$M" --tp -1
bad "--tp: expected a positive integer up to 65536, got 'abc'" compile "$M" --tp abc
bad "--pp: expected a positive integer up to 32768, got '0'" compile "$M" --pp 0
bad "--vpp: expected a positive integer up to 32768, got '0'" compile "$M" --vpp 0
bad "--dp: expected a positive integer up to 1048576, got 'x'" compile "$M" --dp x
bad "--dp: expected a positive integer up to 1048576, got '99999999'" compile "$M" --dp 99999999
bad "--vocab-multiple: expected a non-negative integer" compile "$M" --vocab-multiple -5
bad "--dtype: expected f32 or f64, got 'f16'" compile "$M" --dtype f16
bad "unknown target 'gpu' (known: cpu" compile "$M" --target gpu -o prog
bad "--target cpu needs an output folder (-o DIR)" compile "$M" --target cpu
bad "--report: expected comm, pp or tp, got 'foo'" compile "$M" --report foo
bad "--zero: expected 0 or 1, got '2'" compile "$M" --zero 2
bad "--bucket-mb: expected a positive number of MiB, got '0'" compile "$M" --bucket-mb 0
bad "--bucket-mb: expected a positive number of MiB, got 'abc'" compile "$M" --bucket-mb abc
bad "--recompute: expected none, selective or full, got 'some'" compile "$M" --recompute some
bad "--recompute-layers: expected a positive integer up to 1048576, got '0'" compile "$M" --recompute full --recompute-layers 0
bad "--recompute-layers 2: groups of layers need --recompute full" run "$M" $T --recompute selective --recompute-layers 2
bad "--global-batch: expected a positive integer, got '0'" compile "$M" --global-batch 0
bad "--global-batch: expected a positive integer, got '-4'" compile "$M" --global-batch -4
bad "--microbatch: expected a positive integer, got '0'" compile "$M" --microbatch 0
bad "--microbatch: expected a positive integer, got '1.5'" compile "$M" --microbatch 1.5
bad "--tp-strategy: expected megatron or none, got 'foo'" compile "$M" --tp-strategy foo
bad "--print-after: no pass named 'nope'" compile "$M" --print-after nope
bad "--world-size: expected a positive integer" compile "$M" --world-size 0
bad "--vpp-group: expected a positive integer" compile "$M" --vpp-group 0
bad "option '--tp' needs a value (N)" compile "$M" --tp
bad "option '--emit-ir' takes no value" compile "$M" --emit-ir=1
bad "-D heads: error: expected -D NAME=VALUE" compile "$M" -D heads
bad "'abc' is not a number" compile "$M" -D heads=abc
bad "the model has no config value 'nope'" compile "$M" -D nope=3
bad "heads must be a positive integer, got 0" compile "$M" -D heads=0

# compile: values inconsistent with each other, with or without a target.
bad "the world size must be t * p * d: 3 ranks, but t * p * d = 2 * 1 * 1 = 2" compile "$M" --world-size 3 --tp 2
bad "--pp-layout '1,x': expected layer counts separated by commas" compile "$M" --pp 2 --pp-layout 1,x
bad "--pp-layout '1' has 1 count, but p x v = 2 x 1 = 2 virtual stages" compile "$M" --pp 2 --pp-layout 1
bad "unknown schedule 'nope' (known: gpipe, 1f1b, interleaved" compile "$M" --pp 2 --schedule nope
bad "--schedule-file: /nonexistent: cannot read" compile "$M" $T --pp 2 --schedule-file /nonexistent --target cpu -o prog
bad "--schedule-file and --schedule both name the schedule" compile "$M" --pp 2 --schedule gpipe --schedule-file s.txt
bad "--zero 1 shards the optimizer over data-parallel replicas: it needs --dp > 1" compile "$M" --zero 1
bad "--zero 1 shards the optimizer over data-parallel replicas: it needs --dp > 1" compile "$M" $T --zero 1 --target cpu -o prog
bad "--vpp 2 needs pipeline stages (--pp > 1)" compile "$M" $T --vpp 2 --target cpu -o prog
bad "the model has 2 layers, fewer than the p x v = 3 x 1 = 3 virtual stages" compile "$M" $T --pp 3
bad "--global-batch 5 is not a multiple of microbatch 2 x dp 1" compile "$M" $T --global-batch 5 --target cpu -o prog
bad "--dtype applies to a target" compile "$M" --dtype f64

# run: every layout gets the same divisibility message, before the plan and mpirun.
bad "--global-batch 5 is not a multiple of microbatch 2 x dp 1" run "$M" $T --global-batch 5 --steps 0
bad "--global-batch 6 is not a multiple of microbatch 2 x dp 2" run "$M" $T --dp 2 --global-batch 6 --steps 0
bad "--global-batch 5 is not a multiple of microbatch 2 x dp 1" run "$M" $T --pp 2 --global-batch 5 --steps 0
bad "--global-batch 6 is not a multiple of microbatch 4 x dp 1" run "$M" $T --microbatch 4 --global-batch 6 --steps 0
bad "--zero 1 shards the optimizer over data-parallel replicas: it needs --dp > 1" run "$M" $T --zero 1 --steps 0
bad "--vpp 2 needs pipeline stages (--pp > 1)" run "$M" $T --vpp 2 --steps 0
bad "the model has 2 layers, fewer than the p x v = 2 x 2 = 4 virtual stages" run "$M" $T --pp 2 --vpp 2 --steps 0
bad "= 2048 ranks, more than the 1024 that shardc run starts on one machine" run "$M" $T --tp 1024 --dp 2
bad "--tp: expected a positive integer up to 65536, got '0'" run "$M" $T --tp 0
bad "--steps: expected an integer of -1 (one pass over --data) or more, got '-2'" run "$M" $T --steps -2
bad "--steps: expected an integer of -1 (one pass over --data) or more, got 'x'" run "$M" $T --steps x
bad "--steps: training needs --data (or --steps 0)" run "$M" $T --steps 3
bad "--steps: training needs --data (or --steps 0)" run "$M" $T --dp 2 --steps 3
bad "unknown option '--world-size'" run "$M" $T --world-size 2
bad "did you mean --steps?" run "$M" $T --stepz 3
bad "the model file comes first" run --tp 2 "$M"

# schedule, simulate and info.
bad "--pp: expected a positive integer up to 32768, got '0'" schedule "$M" --pp 0
bad "--vpp: expected a positive integer up to 32768, got '-1'" schedule "$M" --pp 2 --vpp -1
bad "--fb-ratio: expected a number in (0, 1000], got '0'" schedule "$M" --pp 2 --fb-ratio 0
bad "--fb-ratio: expected a number in (0, 1000], got 'abc'" schedule "$M" --pp 2 --fb-ratio abc
bad "--schedule: unknown schedule 'nope' (known: gpipe, 1f1b, interleaved" schedule "$M" --pp 2 --schedule nope
bad "--global-batch 7 is not a multiple of microbatch 2 x dp 1" schedule "$M" --pp 2 --global-batch 7 --microbatch 2
bad "--vpp-group) must hold p = 4 to m = 8 microbatches, not 2; --vpp-group 4 or 8 would do" schedule "$M" --pp 4 --vpp 2 --vpp-group 2
bad "not a hardware preset (a100, h100, h200)" simulate "$M" --hw nope
bad "--hw NAME|FILE is required" simulate "$M"
bad "--global-batch 7 is not a multiple of microbatch 2 x dp 1" simulate "$M" --hw a100 --global-batch 7 --microbatch 2
bad "--tp: expected a positive integer, got '0'" simulate "$M" --hw a100 --tp 0
bad "--recompute: expected none, selective or full, got 'some'" simulate "$M" --hw a100 --recompute some
bad "--precision: expected mixed, bf16 or fp32, got 'fp16'" simulate "$M" --hw a100 --precision fp16
bad "--zero: expected 0 or 1" simulate "$M" --hw a100 --zero 3
bad "the model has 12 layers, fewer than the p x v = 100 x 1 virtual stages" simulate "$M" --hw a100 --pp 100
bad "unexpected argument 'extra' (one model file only)" info "$M" extra
bad "no model file given" info
bad "cannot open file" info /nonexistent.shard
bad "option '--json' takes no value" info "$M" --json=yes
bad "did you mean --json?" info "$M" --jsn
bad "did you mean --measure?" hw --measur
bad "did you mean --help?" passes --hlep

# run: the launcher.
bad "--launcher: expected mpirun or srun, got 'slurm'" run "$M" $T --tp 2 --launcher slurm --steps 0
bad "--launcher: expected mpirun or srun, got ''" run "$M" $T --tp 2 --launcher= --steps 0
bad "--hostfile: cannot read '/nonexistent': No such file or directory" run "$M" $T --tp 2 --hostfile /nonexistent --steps 0
bad "--hostfile: a host file is for mpirun" run "$M" $T --tp 2 --launcher srun --hostfile /etc/hostname --steps 0
# srun missing: a PATH with only the tools this table uses.
mkdir nosrun && for t in date grep sed head tail; do ln -s "$(command -v $t)" nosrun/; done
KEEP_PATH=$PATH PATH=$PWD/nosrun
bad "--launcher srun: srun is not on PATH" run "$M" $T --tp 2 --launcher srun --steps 0
PATH=$KEEP_PATH

echo "$CASES cases, $FAILS failed"
[ $FAILS -eq 0 ]
