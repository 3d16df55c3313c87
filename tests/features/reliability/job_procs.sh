# shellcheck shell=bash
# job_procs PATTERN: how many processes started in the current folder
# (their working folder: other runs of these tests on the machine use the
# same program names) hold PATTERN in their command line. Sourced by the
# tests that check that no process of a job is left.
job_procs() {
  n=0
  for d in /proc/[0-9]*; do
    [ "$(readlink "$d/cwd" 2>/dev/null)" = "$PWD" ] || continue
    case "$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)" in *"$1"*) n=$((n + 1)) ;; esac
  done
  echo $n
}
