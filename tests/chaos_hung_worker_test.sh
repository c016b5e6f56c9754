#!/usr/bin/env bash
# A hung, not dead, worker: a Fashion-MNIST job on 2 PS x 2 workers under
# `psctl local`; at 20 % of its steps (training progress, never a wall-clock
# schedule) one worker is stopped with SIGSTOP for 20 s, then continued.
#
# The coordinator must declare it lost after fault_tolerance.worker_timeout_s
# (2 s here) and re-dispatch its closure in flight, so that training never
# stalls for much longer than that, instead of waiting for the stopped
# worker's RunClosure for the whole 20 s. Asserted:
#   - the job SUCCEEDED, with workers_lost >= 1;
#   - the longest stall while the worker was stopped (the time between two
#     progress samples whose steps increased, sampled every ~0.1 s) is below
#     2 x worker_timeout_s + a sampling margin;
#   - accuracy within 1 % of a clean run of the same job;
#   - every PS applied exactly the job's steps (describe.ps[i].applied_steps
#     == steps): the woken worker's late pushes of the re-dispatched closure
#     were dropped by the exactly-once keys.
#
# With STRATEGY central_storage (synchronous), the stopped worker's replica
# is re-run on the other worker while that one's replica waits at the step's
# barrier on the PS; every global step is still applied once on each PS.
#
# usage: chaos_hung_worker_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR [STRATEGY]
# Every process started is killed by pid on exit, the stopped worker is
# continued first; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
STRATEGY="${5:-parameter_server}"
WORKER_TIMEOUT_S=2
STOP_SECONDS=20     # the fault's duration: the one use of wall-clock time
EPOCHS=50
if [[ "$STRATEGY" != parameter_server ]]; then
  # A shorter job and stop (the suite's time): the stall bound is the same.
  STOP_SECONDS=8
  EPOCHS=20
fi
SAMPLE_MARGIN_S=0.5 # sampling granularity, on top of 2 x worker_timeout_s

STOPPED_PID=""
cleanup() {
  # A stopped process dies from SIGKILL too, but CONT it first so that
  # nothing is left stopped if the kill races its exit.
  [[ -n "$STOPPED_PID" ]] && kill -CONT "$STOPPED_PID" 2>/dev/null
  testlib_cleanup
}
trap cleanup EXIT

# write_job FILE CHECKPOINT_DIR
write_job() {
  # The softmax regression of chaos_test.sh: its final accuracy hardly
  # depends on the order of asynchronous updates, so the 1 % comparison
  # measures lost or doubled work, not scheduling noise.
  cat > "$1" <<YAML
name: hung
strategy: $STRATEGY
seed: 11
model:
  inputs: {dense: 784}
  layers:
    - dense: {units: 10}
optimizer: {type: adam, learning_rate: 0.0005}
data:
  train:
    images: $DATA/train-images-idx3-ubyte.gz
    labels: $DATA/train-labels-idx1-ubyte.gz
  eval:
    images: $DATA/t10k-images-idx3-ubyte.gz
    labels: $DATA/t10k-labels-idx1-ubyte.gz
  per_replica_batch: 64
train: {epochs: $EPOCHS, steps_per_closure: 10, closures_per_worker: 1}
checkpoint: {dir: $2, every_steps: 300, keep: 2}
fault_tolerance: {max_attempts: 5, health_check_interval_s: 0.2, worker_timeout_s: $WORKER_TIMEOUT_S}
YAML
}

result() {  # result FILE FIELD
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# --- The clean run.
write_job "$TMP/clean.yaml" "$TMP/clean-ckpt"
clean_start=$SECONDS
timeout 600 "$PSCTL" local "$TMP/clean.yaml" --ps 2 --workers 2 --describe --output json \
  "${BIN_FLAGS[@]}" > "$TMP/clean.json" 2> "$TMP/clean.err" \
  || { tail -20 "$TMP/clean.err"; fail "the clean run failed"; }
echo "clean run: eval_accuracy $(result "$TMP/clean.json" eval_accuracy)," \
     "$(result "$TMP/clean.json" steps) steps, $((SECONDS - clean_start)) s"

# --- The run with a hung worker.
write_job "$TMP/hung.yaml" "$TMP/hung-ckpt"
hung_start=$SECONDS
local_in_background "$TMP/hung.json" "$TMP/hung.err" 600 "$TMP/hung.yaml" --ps 2 --workers 2 \
  --describe --output json "${BIN_FLAGS[@]}"

wait_progress "$ADDRESS" 0.2 300 || { tail -20 "$TMP/hung.err"; fail "the job ended (or stalled) before 20 % of its steps"; }
STOPPED_PID="$(pgrep -P "$PSCTL_PID" -f worker_server | shuf -n 1 || true)"
[[ -n "$STOPPED_PID" ]] || fail "no worker_server to stop"
STARTED_PIDS+=("$STOPPED_PID")
kill -STOP "$STOPPED_PID"
echo "kill -STOP worker pid $STOPPED_PID at $(job_progress "$ADDRESS")"

# Sample the progress while it is stopped: "SECONDS_SINCE_STOP STEPS STATE".
t0=$EPOCHREALTIME
elapsed() { awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }
: > "$TMP/samples.txt"
while awk -v e="$(elapsed)" -v s="$STOP_SECONDS" 'BEGIN { exit !(e < s) }'; do
  read -r steps _ state < <(job_progress "$ADDRESS")
  [[ "$state" == NONE ]] || echo "$(elapsed) $steps $state" >> "$TMP/samples.txt"
  case "$state" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
  sleep 0.1
done
kill -CONT "$STOPPED_PID" 2>/dev/null || true
STOPPED_PID=""
read -r steps total state < <(job_progress "$ADDRESS")
echo "kill -CONT after ${STOP_SECONDS} s at $steps $total $state"
# The job is sized to outlast the stop (~30 s clean here), so that the woken
# worker rejoins it; a much faster machine may finish first: said, not failed.
[[ "$state" == RUNNING ]] || echo "note: the job ended before the worker was continued"

rc=0
wait "$TPID" || rc=$?
((rc == 0)) || { tail -40 "$TMP/hung.err" >&2; fail "the run with a hung worker exited $rc"; }
echo "hung run: $((SECONDS - hung_start)) s"
grep -E "worker_(down|lost|up)|declared lost" "$TMP/hung.err" || true

python3 - "$TMP/clean.json" "$TMP/hung.json" "$TMP/samples.txt" "$WORKER_TIMEOUT_S" \
  "$SAMPLE_MARGIN_S" <<'PY' || { tail -40 "$TMP/hung.err" >&2; fail "hung-worker result"; }
import json, sys
clean = json.load(open(sys.argv[1]))
hung = json.load(open(sys.argv[2]))
samples = [l.split() for l in open(sys.argv[3]) if l.strip()]
timeout_s, margin = float(sys.argv[4]), float(sys.argv[5])
assert hung["state"] == "SUCCEEDED", hung
assert len(samples) >= 20, "only %d progress samples in the stop" % len(samples)
period = float(samples[-1][0]) / len(samples)
# The stall: time between two samples whose steps increased; the stop's
# start and the last sample (the window's end, or the job's) bound it too.
marks, last_steps = [0.0], int(samples[0][1])
for t, steps, state in samples:
    if int(steps) > last_steps:
        marks.append(float(t))
        last_steps = int(steps)
marks.append(float(samples[-1][0]))
stall = max(b - a for a, b in zip(marks, marks[1:]))
bound = 2 * timeout_s + margin
print("samples: %d (every %.2f s); longest stall while stopped: %.2f s (bound %.2f s)" %
      (len(samples), period, stall, bound))
print("workers_lost: %d" % hung.get("workers_lost", -1))
gap = abs(hung["eval_accuracy"] - clean["eval_accuracy"])
print("accuracy: clean %.4f, hung %.4f, gap %.4f" % (clean["eval_accuracy"], hung["eval_accuracy"], gap))
applied = [p["applied_steps"] for p in hung["describe"]["ps"]]
print("steps %d, applied per PS %s" % (hung["steps"], applied))
assert hung.get("workers_lost", 0) >= 1, "no worker was declared lost"
assert stall < bound, "training stalled for %.2f s (>= %.2f s)" % (stall, bound)
assert gap <= 0.01, "accuracy moved by %.4f (> 1%%)" % gap
assert applied and all(a == hung["steps"] for a in applied), \
    "PS applied %s steps, the job has %d" % (applied, hung["steps"])
print("OK")
PY
