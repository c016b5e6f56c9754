# Shared helpers of the multi-process tests (sourced, not run).
#   abs PATH        the absolute path of PATH
#   require_fashion_mnist DIR   fails unless DIR holds Fashion-MNIST
#   fail MESSAGE    prints "FAIL: MESSAGE" to stderr and exits 1
#   STARTED_PIDS    pids to kill -9 when the test exits (append to it)
#   gone PID        true when PID has exited (or is a zombie)
# Servers started by hand (they need TMP set to the test's scratch directory):
#   start_server NAME CMD...   runs CMD in the background, stdout/stderr in
#                              $TMP/NAME.out/.err; sets PID_NAME, adds it to
#                              STARTED_PIDS (environment assignments before
#                              the call, e.g. TF_CONFIG=..., reach CMD)
#   show_logs                  the tail of every server log, on stderr
#   wait_listening NAME...     each prints "listening on" within 60 s, else
#                              the test fails naming it (and shows the logs)
# Jobs:
#   write_job FILE KEY=VALUE...  a Fashion-MNIST job (see below)

abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

# require_fashion_mnist DIR: fails the test unless DIR holds the four
# Fashion-MNIST files (Debian's dataset-fashion-mnist, which ./setup.sh
# installs, puts them in /usr/share/datasets/fashion-mnist).
require_fashion_mnist() {
  local f
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
           t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [[ -r "$1/$f" ]] ||
      fail "$1/$f is missing: install the Fashion-MNIST data set (./setup.sh installs dataset-fashion-mnist)"
  done
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

STARTED_PIDS=()
# The session of process $1 (field 6 of /proc/PID/stat, counted after the
# command name, which may hold spaces); empty when it is gone.
testlib_session() { sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f4; }
testlib_cleanup() {
  local pid own
  own="$(testlib_session $$)"
  for pid in "${STARTED_PIDS[@]}"; do
    # A pid that already exited may belong to another process by now (pid_max
    # is 32768 here, and a build spawns thousands): only processes of this
    # test's session are its own (servers change process group, not session).
    [[ -n "$own" && "$(testlib_session "$pid")" == "$own" ]] || continue
    kill -9 "$pid" 2>/dev/null || true
  done
}
trap testlib_cleanup EXIT

gone() {
  [[ ! -e "/proc/$1/stat" ]] && return 0
  local state
  state="$(sed -E 's/^.*\) (.).*$/\1/' "/proc/$1/stat" 2>/dev/null || echo X)"
  [[ "$state" == Z || "$state" == X ]]
}

# Progress of a job, for fault tests that must trigger on training progress,
# never on wall-clock time (a fast machine finishes before a schedule, a slow
# one has not started). They need PSCTL set to the psctl binary.
#   local_coordinator STDERR_FILE   the coordinator address `psctl local` printed
#   job_progress ADDRESS            "STEPS TOTAL_STEPS STATE" of the newest job
#   wait_progress ADDRESS FRACTION SECONDS
#                                   waits until the newest job has done
#                                   FRACTION of its steps; returns 1 if it
#                                   ended first or SECONDS passed
local_coordinator() {
  # The stderr file may not exist yet (the background psctl opens it): no
  # address then, not a failure (under set -e, a failed assignment ends the
  # test silently).
  [[ -f "$1" ]] || return 0
  sed -n 's/.*coordinator \(127\.0\.0\.1:[0-9][0-9]*\).*/\1/p' "$1" 2>/dev/null | head -n 1 || true
}

job_progress() {
  "$PSCTL" list --coordinator "$1" -o json 2>/dev/null | python3 -c '
import json, sys
try:
    jobs = json.load(sys.stdin)["jobs"]
except Exception:
    jobs = []
if jobs:
    j = jobs[-1]
    print(j.get("steps", 0), j.get("total_steps", 0), j.get("state", "?"))
else:
    print(0, 0, "NONE")'
}

wait_progress() {
  local address="$1" fraction="$2" deadline=$((SECONDS + $3))
  local steps total state
  while ((SECONDS < deadline)); do
    read -r steps total state < <(job_progress "$address")
    case "$state" in SUCCEEDED | FAILED | CANCELLED) return 1 ;; esac
    if ((total > 0)) && awk -v s="$steps" -v t="$total" -v f="$fraction" 'BEGIN { exit !(s >= f * t) }'; then
      return 0
    fi
    sleep 0.05
  done
  return 1
}

# local_in_background STDOUT STDERR SECONDS ARGS...: runs `psctl local ARGS...`
# under `timeout SECONDS` in the background and waits (at most 60 s) until
# psctl has started and printed its coordinator. Sets TPID (timeout's pid:
# wait for it), PSCTL_PID (psctl's: its children are the servers) and
# ADDRESS (the coordinator); fails the test if no cluster comes up.
local_in_background() {
  local out="$1" err="$2" limit="$3"
  shift 3
  timeout "$limit" "$PSCTL" local "$@" > "$out" 2> "$err" &
  TPID=$!
  STARTED_PIDS+=("$TPID")
  PSCTL_PID="" ADDRESS=""
  for _ in $(seq 1 600); do
    [[ -n "$PSCTL_PID" ]] || PSCTL_PID="$(pgrep -P "$TPID" | head -n 1 || true)"
    ADDRESS="$(local_coordinator "$err")"
    [[ -n "$PSCTL_PID" && -n "$ADDRESS" ]] && break
    kill -0 "$TPID" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$PSCTL_PID" && -n "$ADDRESS" ]] ||
    { tail -20 "$err" >&2; fail "psctl local did not start a cluster"; }
  STARTED_PIDS=("$PSCTL_PID" "${STARTED_PIDS[@]}")
}

# stop_servers NAME...: each server's pid is in PID_<NAME>. Fails if one has
# died, else sends SIGTERM to all and waits at most 10 s for each to exit.
stop_servers() {
  local name pid_var
  for name in "$@"; do
    pid_var="PID_$name"
    gone "${!pid_var}" && fail "$name died during the test"
    kill -TERM "${!pid_var}"
  done
  for name in "$@"; do
    pid_var="PID_$name"
    for _ in $(seq 1 100); do gone "${!pid_var}" && break; sleep 0.1; done
    gone "${!pid_var}" || fail "$name did not stop within 10 s of SIGTERM"
  done
}

start_server() {
  local name="$1"
  shift
  "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" &
  STARTED_PIDS+=("$!")
  eval "PID_${name}=$!"
}

show_logs() {
  local f
  for f in "$TMP"/ps*.err "$TMP"/worker*.err "$TMP"/coordinator*.err; do
    [[ -e "$f" ]] || continue
    echo "--- $f:" >&2
    tail -n 25 "$f" >&2 || true
  done
}

wait_listening() {
  local name pid_var deadline
  for name in "$@"; do
    pid_var="PID_$name"
    deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do
      grep -q "listening on" "$TMP/$name.out" 2>/dev/null && break
      gone "${!pid_var}" && { show_logs; fail "$name exited before listening"; }
      sleep 0.1
    done
    grep -q "listening on" "$TMP/$name.out" || { show_logs; fail "$name is not listening after 60 s"; }
  done
}

# write_job FILE [KEY=VALUE...]: writes the tests' Fashion-MNIST job to FILE:
# the base job below, with the fields that differ given as KEY=VALUE. VALUE
# is YAML (flow style for maps and lists); an empty VALUE leaves an optional
# line out. Keys, and their values in the base job:
#   name: test                 strategy: (none: parameter_server)
#   seed: 7                    layers: [{dense: {units: 64, activation: relu}}, {dense: {units: 10}}]
#   loss: (none)               optimizer: {type: adam, learning_rate: 0.002}
#   train_limit: (none)        eval_limit: (none)
#   per_replica_batch: 64      global_batch: (none)
#   epochs: 1                  steps_per_closure: 10      closures_per_worker: 1
#   checkpoint: (none)         fault_tolerance: (none)
#   extra: (none)              lines appended as they are (e.g. "devices: 2")
# The data files are those under $DATA (default /usr/share/datasets/fashion-mnist).
# Each field keeps a line of its own ("    labels: .../train-labels...",
# "per_replica_batch: 64", "train: {epochs: N, ...}"), for tests that edit
# the file with sed. An unknown KEY fails the test.
write_job() {
  local file="$1" kv key
  shift
  local -A job=(
    [name]=test [strategy]="" [seed]=7
    [layers]="[{dense: {units: 64, activation: relu}}, {dense: {units: 10}}]"
    [loss]="" [optimizer]="{type: adam, learning_rate: 0.002}"
    [train_limit]="" [eval_limit]="" [per_replica_batch]=64 [global_batch]=""
    [epochs]=1 [steps_per_closure]=10 [closures_per_worker]=1
    [checkpoint]="" [fault_tolerance]="" [extra]=""
  )
  for kv in "$@"; do
    key="${kv%%=*}"
    [[ "$kv" == *=* && -v "job[$key]" ]] || fail "write_job: '$kv' is not KEY=VALUE with a known KEY"
    job[$key]="${kv#*=}"
  done
  local data="${DATA:-/usr/share/datasets/fashion-mnist}"
  {
    testlib_job_line name ""
    testlib_job_line strategy ""
    testlib_job_line seed ""
    echo "model:"
    echo "  inputs: {dense: 784}"
    testlib_job_line layers "  "
    testlib_job_line loss "  "
    testlib_job_line optimizer ""
    echo "data:"
    echo "  train:"
    echo "    images: $data/train-images-idx3-ubyte.gz"
    echo "    labels: $data/train-labels-idx1-ubyte.gz"
    [[ -z "${job[train_limit]}" ]] || echo "    limit: ${job[train_limit]}"
    echo "  eval:"
    echo "    images: $data/t10k-images-idx3-ubyte.gz"
    echo "    labels: $data/t10k-labels-idx1-ubyte.gz"
    [[ -z "${job[eval_limit]}" ]] || echo "    limit: ${job[eval_limit]}"
    testlib_job_line per_replica_batch "  "
    testlib_job_line global_batch "  "
    echo "train: {epochs: ${job[epochs]}, steps_per_closure: ${job[steps_per_closure]}," \
         "closures_per_worker: ${job[closures_per_worker]}}"
    testlib_job_line checkpoint ""
    testlib_job_line fault_tolerance ""
    [[ -z "${job[extra]}" ]] || echo "${job[extra]}"
  } > "$file"
}

# testlib_job_line KEY INDENT: "INDENTKEY: VALUE" of write_job's `job` (bash
# scoping: the caller's local), nothing when the value is empty.
testlib_job_line() { [[ -z "${job[$1]}" ]] || echo "$2$1: ${job[$1]}"; }
