#!/bin/bash
# Installs the Debian packages shardc needs to build and test, and does
# nothing when they are all there, so every `make` target can call it.
# Written for Debian 12; needs root or sudo only when something is missing.
set -euo pipefail

# What each package is for:
#   build-essential cmake flex bison libfl-dev pkg-config: the compiler build (g++ also
#     builds the CUDA sources as C++ for the CPU emulator of tests/features/emu)
#   libcjson-dev: JSON (shardc info --json, manifests)
#   libopenblas-openmp-dev: GEMM in the CPU target's rank programs (the
#     OpenMP build shares the kernels' thread pool instead of fighting it)
#   openmpi-bin libopenmpi-dev: launching ranks, the CPU target's messages
#   clang (+ its compiler-rt), libomp-dev: libFuzzer and the sanitizer build
#     (libomp-dev is clang's OpenMP; gcc brings its own)
#   python3 python3-numpy python3-torch: reference numerics in the tests
#     (tests/features/oracle runs the same models in PyTorch, Debian's build, under
#     /usr/bin/python3)
#   time: peak memory of a run in bench/cpu_train.sh and bench/compile.sh
#   slurm-wlm: srun for `shardc run --launcher srun` and launch.sh; its
#     slurmctld, slurmd and munge for tests/driver/launch/slurm.sh, which starts
#     them from a configuration of its own (the packages' services are
#     not configured or used)
#   shellcheck: tests/driver/launch/mpirun.sh checks the launch.sh shardc writes
#   python3-venv: the virtual environment for the PyPI packages below
packages=(build-essential cmake flex bison libfl-dev pkg-config libcjson-dev
          libopenblas-openmp-dev openmpi-bin libopenmpi-dev clang libomp-dev python3
          python3-numpy python3-torch python3-venv time slurm-wlm shellcheck)

# tokenizers (Hugging Face) and tiktoken, which tests/tokenizer and
# bench/tokenizer.sh compare our BPE with, are not Debian packages. They go
# from PyPI into a virtual environment in build/pyenv (git-ignored; or
# $SHARDC_PYENV), made from Debian's python3 with --system-site-packages so
# that its numpy and torch stay visible: Debian's own python3 is left as it
# is. transformers, whose own model classes tests/features/oracle/hf_models.sh checks
# models/neox.shard and models/bert.shard against, is pinned to 4.40.2, the
# version that works with Debian's torch 1.13; pip then picks the
# tokenizers it supports (0.19). Nothing is done when they import already.
# Without network access this only warns, and those tests skip, saying why.
python_packages() {
  local root env
  root=$(cd "$(dirname "$0")/.." && pwd)
  env=${SHARDC_PYENV:-$root/build/pyenv}
  if "$env/bin/python" -c 'import tokenizers, tiktoken, transformers' 2>/dev/null; then
    echo "install-deps: tokenizers, tiktoken and transformers present in $env"
    return
  fi
  local plog
  plog=$(mktemp)
  if /usr/bin/python3 -m venv --system-site-packages "$env" >"$plog" 2>&1 &&
     "$env/bin/pip" install -q --disable-pip-version-check tokenizers tiktoken \
       transformers==4.40.2 >>"$plog" 2>&1; then
    echo "install-deps: installed tokenizers, tiktoken and transformers from PyPI into $env"
  else
    cat "$plog" >&2
    echo "install-deps: warning: could not install tokenizers, tiktoken and transformers into $env;" \
         "the tests that compare with them will skip" >&2
  fi
  rm -f "$plog"
}

# A package counts as present when dpkg has it installed; for the ones that
# are only a tool, that tool on PATH counts too (a cmake built by hand, say).
declare -A tool=([cmake]=cmake [flex]=flex [bison]=bison [pkg-config]=pkg-config
                 [clang]=clang [python3]=python3 [openmpi-bin]=mpirun
                 [shellcheck]=shellcheck)

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing=()
for p in "${packages[@]}"; do
  installed "$p" && continue
  [[ -n "${tool[$p]:-}" ]] && command -v "${tool[$p]}" >/dev/null 2>&1 && continue
  missing+=("$p")
done

# clang only recommends its runtime libraries (libFuzzer, the sanitizers), so
# with --no-install-recommends they may be absent: ask for the package that
# matches the clang version when clang is there but its fuzzer runtime is not.
fuzzer_runtime_missing() {
  command -v clang >/dev/null 2>&1 || return 1
  local lib
  lib=$(clang -print-file-name="libclang_rt.fuzzer-$(uname -m).a" 2>/dev/null || true)
  [[ "$lib" != /* || ! -e "$lib" ]]
}
clang_rt_package() {
  local major
  major=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
  echo "libclang-rt-${major:-14}-dev"
}
if [[ " ${missing[*]} " != *" clang "* ]] && fuzzer_runtime_missing; then
  missing+=("$(clang_rt_package)")
fi

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present, nothing to do"
  python_packages
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
# apt's chatter goes to a log that is shown only when something fails, so a
# successful run prints its one line.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt() {
  if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" >>"$log" 2>&1; then
    cat "$log" >&2
    echo "install-deps: apt-get $* failed" >&2
    exit 1
  fi
}
apt_install() { apt install -y -q --no-install-recommends "$@"; }
apt update -q
apt_install "${missing[@]}"
# clang itself was just installed: now its version is known.
if [[ " ${missing[*]} " == *" clang "* ]] && fuzzer_runtime_missing; then
  rt=$(clang_rt_package)
  apt_install "$rt"
  missing+=("$rt")
fi
echo "install-deps: installed ${missing[*]}"
python_packages
