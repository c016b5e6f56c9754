#!/usr/bin/env bash
# A hung, not dead, worker: a Fashion-MNIST job on 2 PS x 2 workers under
# `psctl local`; at 20 % of its steps (training progress, never a wall-clock
# schedule) one worker is stopped with SIGSTOP, and continued once the job
# has got past it (below).
#
# The coordinator must declare it lost after fault_tolerance.worker_timeout_s
# (2 s here) and re-dispatch its closure in flight, instead of waiting for
# the stopped worker's RunClosure. The worker stays stopped until that shows
# in events and training progress, never for a fixed time: the coordinator
# counted it lost (workers_lost), and the job trained past the closure that
# hangs: two closures' steps past the step it was stopped at when
# synchronous (a step needs every replica, and is counted once all are
# done), an epoch and two closures when asynchronous (an epoch ends once all
# of its closures did). A generous bound in seconds is only the safety net
# that fails a job that never gets past the hung worker.
# Then it is continued, and asserted:
#   - the job SUCCEEDED, with workers_lost >= 1;
#   - no closure call waited out its deadline (no retry says
#     DEADLINE_EXCEEDED): the hung worker's closure was given up on when the
#     worker was declared lost, not after its closure deadline (>= 10 s);
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
EPOCHS=50
# A shorter job (the suite's time) for the synchronous strategy.
[[ "$STRATEGY" == parameter_server ]] || EPOCHS=20
# The safety net: how long the stopped worker may hold the job up before the
# test fails (it is released within ~worker_timeout_s when all is well).
SAFETY_S=180

STOPPED_PID=""
cleanup() {
  # A stopped process dies from SIGKILL too, but CONT it first so that
  # nothing is left stopped if the kill races its exit.
  [[ -n "$STOPPED_PID" ]] && kill -CONT "$STOPPED_PID" 2>/dev/null
  testlib_cleanup
}
trap cleanup EXIT

# hung_job FILE CHECKPOINT_DIR
hung_job() {
  # The softmax regression of chaos_test.sh: its final accuracy hardly
  # depends on the order of asynchronous updates, so the 1 % comparison
  # measures lost or doubled work, not scheduling noise.
  write_job "$1" name=hung strategy="$STRATEGY" seed=11 layers="[{dense: {units: 10}}]" \
    optimizer="{type: adam, learning_rate: 0.0005}" epochs="$EPOCHS" \
    checkpoint="{dir: $2, every_steps: 300, keep: 2}" \
    fault_tolerance="{max_attempts: 5, health_check_interval_s: 0.2, worker_timeout_s: $WORKER_TIMEOUT_S}"
}

result() {  # result FILE FIELD
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# --- The clean run.
hung_job "$TMP/clean.yaml" "$TMP/clean-ckpt"
clean_start=$SECONDS
timeout 600 "$PSCTL" local "$TMP/clean.yaml" --ps 2 --workers 2 --describe --output json \
  "${BIN_FLAGS[@]}" > "$TMP/clean.json" 2> "$TMP/clean.err" \
  || { tail -20 "$TMP/clean.err"; fail "the clean run failed"; }
echo "clean run: eval_accuracy $(result "$TMP/clean.json" eval_accuracy)," \
     "$(result "$TMP/clean.json" steps) steps, $((SECONDS - clean_start)) s"

# --- The run with a hung worker.
hung_job "$TMP/hung.yaml" "$TMP/hung-ckpt"
hung_start=$SECONDS
local_in_background "$TMP/hung.json" "$TMP/hung.err" 600 "$TMP/hung.yaml" --ps 2 --workers 2 \
  --describe --output json "${BIN_FLAGS[@]}"

wait_progress "$ADDRESS" 0.2 300 || { tail -20 "$TMP/hung.err"; fail "the job ended (or stalled) before 20 % of its steps"; }
STOPPED_PID="$(pgrep -P "$PSCTL_PID" -f worker_server | shuf -n 1 || true)"
[[ -n "$STOPPED_PID" ]] || fail "no worker_server to stop"
STARTED_PIDS+=("$STOPPED_PID")
kill -STOP "$STOPPED_PID"
echo "kill -STOP worker pid $STOPPED_PID at $(job_progress "$ADDRESS")"

# hung_status: "STEPS TOTAL STATE WORKERS_LOST JOB_ID" of the newest job.
hung_status() {
  "$PSCTL" list --coordinator "$ADDRESS" -o json 2>/dev/null | python3 -c '
import json, sys
try:
    j = json.load(sys.stdin)["jobs"][-1]
    print(j.get("steps", 0), j.get("total_steps", 0), j.get("state", "?"), j.get("workers_lost", 0), j["job_id"])
except Exception:
    print(0, 0, "NONE", 0, "-")'
}
# While it is stopped, wait for the events: the worker declared lost, and
# training past the hung closure (see the top). Polled every 0.1 s, at most
# SAFETY_S.
read -r stop_steps total _ _ JOB_ID < <(hung_status)
((total > 0)) || fail "no job to follow"
past=$((stop_steps + 2 * 10))  # steps_per_closure 10
[[ "$STRATEGY" != parameter_server ]] || past=$((past + total / EPOCHS))
t0=$SECONDS
released=""
while ((SECONDS - t0 < SAFETY_S)); do
  read -r steps _ state lost _ < <(hung_status)
  case "$state" in SUCCEEDED | FAILED | CANCELLED) released="the job ended ($state)"; break ;; esac
  if ((lost >= 1 && steps >= past)); then
    released="declared lost ($lost), and at step $steps (>= $past)"
    break
  fi
  sleep 0.1
done
# The job's events, for the deadline check below (the coordinator ends
# with the job).
"$PSCTL" logs "$JOB_ID" --coordinator "$ADDRESS" -o json > "$TMP/events.json" 2> "$TMP/events.err" ||
  echo '{"events": []}' > "$TMP/events.json"
kill -CONT "$STOPPED_PID" 2>/dev/null || true
STOPPED_PID=""
[[ -n "$released" ]] || { tail -40 "$TMP/hung.err" >&2
  fail "the job did not get past the hung worker within ${SAFETY_S} s (at step ${steps:-?}, want >= $past; workers_lost ${lost:-?})"; }
read -r steps total state _ _ < <(hung_status)
echo "kill -CONT after $((SECONDS - t0)) s: $released; now at $steps/$total $state"
# The stop ends long before the job does, so that the woken worker rejoins
# it; a much faster machine may finish first: said, not failed.
[[ "$state" == RUNNING ]] || echo "note: the job ended before the worker was continued"

rc=0
wait "$TPID" || rc=$?
((rc == 0)) || { tail -40 "$TMP/hung.err" >&2; fail "the run with a hung worker exited $rc"; }
echo "hung run: $((SECONDS - hung_start)) s"
grep -E "worker_(down|lost|up)|declared lost" "$TMP/hung.err" || true

python3 - "$TMP/clean.json" "$TMP/hung.json" "$TMP/events.json" <<'PY' || { tail -40 "$TMP/hung.err" >&2; fail "hung-worker result"; }
import json, sys
clean = json.load(open(sys.argv[1]))
hung = json.load(open(sys.argv[2]))
events = json.load(open(sys.argv[3]))["events"]
assert hung["state"] == "SUCCEEDED", hung
retries = [e["message"] for e in events if e["kind"] == "retry"]
print("workers_lost: %d; retries before the worker was continued: %d" % (hung.get("workers_lost", -1), len(retries)))
for r in retries:
    print("  retry: " + r)
waited_out = [r for r in retries if "DEADLINE_EXCEEDED" in r and "declared lost" not in r]
gap = abs(hung["eval_accuracy"] - clean["eval_accuracy"])
print("accuracy: clean %.4f, hung %.4f, gap %.4f" % (clean["eval_accuracy"], hung["eval_accuracy"], gap))
applied = [p["applied_steps"] for p in hung["describe"]["ps"]]
print("steps %d, applied per PS %s" % (hung["steps"], applied))
assert hung.get("workers_lost", 0) >= 1, "no worker was declared lost"
assert not waited_out, "closure calls waited out their deadline: %s" % waited_out
assert gap <= 0.01, "accuracy moved by %.4f (> 1%%)" % gap
assert applied and all(a == hung["steps"] for a in applied), \
    "PS applied %s steps, the job has %d" % (applied, hung["steps"])
print("OK")
PY
