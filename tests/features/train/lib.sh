# shellcheck shell=bash disable=SC2034
# Shared by the real-program tests: sourced, after set -euo pipefail, with
# the file maker (rt_testtool) as $1. They run in a fresh temporary
# folder, where `shardc run` keeps its compiled programs (.shardc/).
TOOL=$1
. "$SHARDC_SRC/tests/common/checks.sh"
