#!/bin/sh
# Runs a command and prints its output with every number rounded to six
# significant digits, so that a golden does not depend on the last bits
# of a floating-point result (compilers may contract a * b + c).
"$@" >round.out.$$ 2>&1
status=$?
awk '{
  out = ""
  while (match($0, /-?[0-9]+\.[0-9]+(e[-+]?[0-9]+)?/)) {
    out = out substr($0, 1, RSTART - 1) sprintf("%.6g", substr($0, RSTART, RLENGTH))
    $0 = substr($0, RSTART + RLENGTH)
  }
  print out $0
}' round.out.$$
rm -f round.out.$$
exit $status
