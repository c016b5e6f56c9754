# Shared helpers of the multi-process tests (sourced, not run).
#   abs PATH        the absolute path of PATH
#   fail MESSAGE    prints "FAIL: MESSAGE" to stderr and exits 1
#   STARTED_PIDS    pids to kill -9 when the test exits (append to it)
#   gone PID        true when PID has exited (or is a zombie)

abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

STARTED_PIDS=()
testlib_cleanup() {
  local pid
  for pid in "${STARTED_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}
trap testlib_cleanup EXIT

gone() {
  [[ ! -e "/proc/$1/stat" ]] && return 0
  local state
  state="$(sed -E 's/^.*\) (.).*$/\1/' "/proc/$1/stat" 2>/dev/null || echo X)"
  [[ "$state" == Z || "$state" == X ]]
}
