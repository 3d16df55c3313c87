# shellcheck shell=sh disable=SC2034
# Shared by the real-program tests: sourced with the compiler, the file
# maker (rt_testtool) and the repository root as $1 $2 $3. They run in a
# fresh temporary folder, where `shardc run` keeps its compiled programs
# (.shardc/).
SHARDC=$1
TOOL=$2
ROOT=$3
. "$(dirname "$0")/../../common/checks.sh"
