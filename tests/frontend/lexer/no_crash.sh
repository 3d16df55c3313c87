#!/bin/bash
# Adversarial inputs: shardc must reject each with exit status 1 and an
# error message; a crash (status 128 or more), a hang (the ctest timeout)
# or a success fails the test.
#
#   no_crash.sh WORKDIR CASE [FILE]
#
# Large inputs are generated into WORKDIR at test time rather than kept in
# the repository; CASE `file` checks FILE as it is.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
work=$1
case_name=$2
mkdir -p "$work"
input=$work/$case_name.shard

# repeat N TEXT: TEXT written N times, without newlines.
repeat() { head -c "$1" /dev/zero | tr '\0' '\n' | sed "s/^/$2/" | tr -d '\n'; }

case $case_name in
deep_parens) { printf 'let x = '; head -c 100000 /dev/zero | tr '\0' '('; } >"$input" ;;
deep_lists) { printf 'let x = '; head -c 100000 /dev/zero | tr '\0' '['; } >"$input" ;;
deep_negation) { printf 'let x = '; head -c 100000 /dev/zero | tr '\0' '-'; printf '1\n'; } >"$input" ;;
deep_calls) { printf 'input x: [4]\nlet y = '; repeat 20000 'gelu('; printf 'x'; repeat 20000 ')'; printf '\noutput o = y\n'; } >"$input" ;;
deep_repeats) { printf 'input x: [4]\n'; repeat 50000 'repeat h[1] { '; } >"$input" ;;
block_chain)
  {
    printf 'input x: [4]\n'
    awk 'BEGIN { for (i = 0; i < 3000; i++) printf "block B%d(v) {\n  return B%d(v)\n}\n", i, i + 1;
                 print "block B3000(v) {\n  return v\n}" }'
    printf 'output o = B0(x)\n'
  } >"$input" ;;
long_name) { printf 'let x = '; head -c 10000000 /dev/zero | tr '\0' 'a'; printf '\n'; } >"$input" ;;
long_sum) { printf 'let x = 1'; repeat 5000000 '+1'; printf '\n'; } >"$input" ;;
long_list) { printf 'input x: [4]\nlet y = reshape(x, ['; repeat 1000000 '1, '; printf '1])\noutput o = y\n'; } >"$input" ;;
long_comment) { printf '#'; head -c 10000000 /dev/zero; printf '\nlet x = @\n'; } >"$input" ;;
many_bad_bytes) head -c 10000000 /dev/zero | tr '\0' '@' >"$input" ;;
nul_bytes) head -c 1000000 /dev/zero >"$input" ;;
all_bytes) awk 'BEGIN { for (r = 0; r < 64; r++) for (i = 1; i < 256; i++) printf "%c", i }' >"$input" ;;
file) input=$3 ;;
*) echo "unknown case $case_name"; exit 2 ;;
esac

out=$work/$case_name.out
status=0
"$SHARDC" compile "$input" >"$out" 2>&1 || status=$?
if [ "$status" -ne 1 ]; then
  echo "FAIL: $case_name: exit status $status, expected 1"
  head -c 2000 "$out"
  exit 1
fi
if ! grep -q 'error:' "$out" || grep -q 'internal error' "$out"; then
  echo "FAIL: $case_name: no error message, or an internal error"
  head -c 2000 "$out"
  exit 1
fi
echo "ok: $case_name rejected: $(head -n 1 "$out" | cut -c1-160)"
