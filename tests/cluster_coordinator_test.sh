#!/usr/bin/env bash
# ClusterCoordinator (issue 20) against real processes on 127.0.0.1: 2
# ps_server and 2 fashion_mnist_worker (examples/cpp, a worker binary with
# registered C++ functions).
#  1. cluster_coordinator_errors: Join with nothing scheduled, an unknown
#     function, a function that fails (its error at Fetch and Join, later
#     closures cancelled), scheduling again afterwards.
#  2. fashion_mnist_coordinator trains the YAML MLP's model for one epoch;
#     after 10 closures are fetched (progress, not time) worker 1 is killed
#     with SIGKILL: its closure in flight is retried on worker 0, and every update is
#     applied once (each PS's applied steps == the steps the closures made);
#     eval accuracy >= 0.80.
#
# usage: cluster_coordinator_test.sh PS_SERVER WORKER COORDINATOR ERRORS
# Every process the test starts is stopped by pid on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PS_SERVER="$(abs "$1")"
WORKER="$(abs "$2")"
COORDINATOR="$(abs "$3")"
ERRORS="$(abs "$4")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
unset TF_CONFIG

require_fashion_mnist "$DATA"

start_server ps0 "$PS_SERVER" --address 127.0.0.1:0
start_server ps1 "$PS_SERVER" --address 127.0.0.1:0
start_server worker0 "$WORKER" --address 127.0.0.1:0 --compute_threads 1 --fashion_mnist_dir "$DATA"
start_server worker1 "$WORKER" --address 127.0.0.1:0 --compute_threads 1 --fashion_mnist_dir "$DATA"
wait_listening ps0 ps1 worker0 worker1
# "NAME listening on HOST:PORT"
address() { grep -o "listening on [0-9.:]*" "$TMP/$1.out" | head -1 | cut -d' ' -f3; }
PS="$(address ps0),$(address ps1)"
WORKERS="$(address worker0),$(address worker1)"
echo "PS $PS, workers $WORKERS"

# --- 1. Errors.
timeout 120 "$ERRORS" --ps "$PS" --workers "$WORKERS" > "$TMP/errors.out" 2> "$TMP/errors.err" ||
  { cat "$TMP/errors.out" "$TMP/errors.err" >&2; show_logs; fail "cluster_coordinator_errors"; }
cat "$TMP/errors.out"

# --- 2. Training, worker 1 killed mid-run.
"$COORDINATOR" --ps "$PS" --workers "$WORKERS" --epochs 1 \
  > "$TMP/coordinator.out" 2> "$TMP/coordinator.err" &
COORD=$!
STARTED_PIDS+=("$COORD")
deadline=$((SECONDS + 120))
until grep -q "fetched 10/" "$TMP/coordinator.out" 2>/dev/null; do
  gone "$COORD" && { cat "$TMP/coordinator.out" "$TMP/coordinator.err" >&2; fail "the coordinator ended before 10 closures were fetched"; }
  ((SECONDS < deadline)) || { show_logs; fail "10 closures not fetched within 120 s"; }
  sleep 0.1
done
kill -9 "$PID_worker1"
echo "killed worker 1 after: $(grep fetched "$TMP/coordinator.out" | tail -1)"
deadline=$((SECONDS + 180))
while ! gone "$COORD"; do
  ((SECONDS < deadline)) || { show_logs; fail "the coordinator did not finish within 180 s of the kill"; }
  sleep 0.2
done
rc=0
wait "$COORD" || rc=$?
((rc == 0)) || { cat "$TMP/coordinator.out" "$TMP/coordinator.err" >&2; show_logs; fail "the coordinator exited $rc"; }
grep -E "^(epoch 1: train|eval|steps|ps )" "$TMP/coordinator.out"

steps="$(awk '/^steps /{print $2}' "$TMP/coordinator.out")"
# One epoch: ceil(60000 / 64) steps, each pushed to both PS.
((steps == 938)) || fail "the closures made $steps steps, want 938"
for p in 0 1; do
  applied="$(awk -v p="ps $p:" '$0 ~ "^"p {print $4}' "$TMP/coordinator.out")"
  ((applied == steps)) || fail "PS $p applied $applied steps, want $steps (each exactly once)"
done
accuracy="$(awk '/^eval /{print $5}' "$TMP/coordinator.out")"
python3 -c "import sys; sys.exit(0 if float('$accuracy') >= 0.80 else 1)" ||
  fail "eval accuracy $accuracy < 0.80"
# The closure worker 1 was running went to worker 0 (the dispatch loop logs it).
retried="$(grep -c "on worker $(address worker1).*\(retrying\|re-dispatching\)" "$TMP/coordinator.err" || true)"
((retried >= 1)) || { cat "$TMP/coordinator.err" >&2; fail "no closure of the killed worker was retried"; }
echo "ok: one epoch with worker 1 killed mid-run: accuracy $accuracy, $steps steps applied once on each PS, $retried closure failure(s) retried"

stop_servers ps0 ps1 worker0
echo PASS
