#!/bin/sh
# The C++ compiler in nvcc's place for a --target cuda program folder's
# Makefile (tests/features/emu/programs.cmake writes the make variables that use
# it): `cxx.sh CXX ARGS...` runs CXX ARGS with every .cu source compiled as
# C++ (-x c++ before it, -x none after, so the libraries that follow are
# linked, not compiled).
cxx=$1
shift
for a in "$@"; do
  shift
  case $a in
    *.cu) set -- "$@" -x c++ "$a" -x none ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec $cxx "$@"
