# shellcheck shell=bash disable=SC2034
# Shared by the runtime's shell tests: sourced, after set -euo pipefail,
# with the toy programs and the file maker as $1 $2 $3.
TOY=$1
TOY64=$2
TOOL=$3
. "$SHARDC_SRC/tests/common/checks.sh"

# A learnable byte-level corpus (vocab 256) for the toy model.
make_corpus() {
  "$TOOL" text train.bin "the quick brown fox jumps over the lazy dog. " 200
  "$TOOL" text val.bin "the lazy dog jumps over the quick brown fox. " 20
}
