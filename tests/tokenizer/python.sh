#!/bin/bash
# Runs a Python script of tests/tokenizer with an interpreter that has the
# packages `tokenizers` and `tiktoken`: the virtual environment that
# scripts/install-deps.sh makes (build/pyenv), else python3 itself. Exits 77
# (skipped) with the reason when neither has them.
#   python.sh SCRIPT ARGS...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
for py in "${SHARDC_PYENV:-$root/build/pyenv}/bin/python" /usr/bin/python3 python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  if "$py" -c 'import tokenizers, tiktoken' 2>/dev/null; then
    exec "$py" "$@"
  fi
done
echo "SKIP: no python with the packages tokenizers and tiktoken (scripts/install-deps.sh installs them into build/pyenv)"
exit 77
