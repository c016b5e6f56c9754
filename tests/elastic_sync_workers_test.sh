#!/usr/bin/env bash
# Elastic workers in a synchronous job (docs/elastic_workers.md): a
# central_storage (or multi_worker_mirrored) job on `psctl local --workers 2`;
# at JOIN_AT (10 %) of its steps (training progress, never a schedule) a
# worker_server started by hand joins it (2 -> 3 workers) and the job
# re-forms its replicas at the next split (3 replicas; a mirrored ring takes
# the joiner with a copy restored from a checkpoint taken then); once it
# trained to LEAVE_AT (55 %) with 3 replicas, the joiner gets SIGTERM and
# leaves (3 -> 2, re-formed again).
# Asserted:
#   - the joiner was set up (worker_joined), left with nothing in flight and
#     exited 0;
#   - two replicas_reformed events: "3 replicas (were 2)", then "2 replicas
#     (were 3)", each step keeping the job's global batch (mirrored: and two
#     ring_reformed events);
#   - the job SUCCEEDED with applied == steps on every PS, the same steps as
#     a fixed 2-worker run, no attempt counted on the leaver, no worker lost;
#   - accuracy within 1 % of the same job on the fixed 2-worker cluster
#     (each step is the same global batch's mean gradient, however many
#     replicas share it).
#
# usage: elastic_sync_workers_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR [STRATEGY]
# (STRATEGY: central_storage, the default, or multi_worker_mirrored).
# Every process started is killed by pid on exit; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
WORKER="$(abs "$3")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$WORKER"
           --coordinator_bin="$(abs "$4")")
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
require_fashion_mnist "$DATA"
STRATEGY="${5:-central_storage}"
JOIN_AT=0.1
LEAVE_AT=0.55

# Softmax regression (as elastic_workers_test.sh), global batch 128: 3
# replicas share it 43/43/42. central_storage: ~19,000 steps of ~1 ms on 2
# cores; multi_worker_mirrored (~1.5 ms a step, all-reduced between the
# workers): ~9,400 steps, with checkpoints (a joiner's copy starts from one).
EPOCHS=40 JOINER_FLAGS=() NUM_PS=2
if [[ "$STRATEGY" == multi_worker_mirrored ]]; then
  EPOCHS=20 NUM_PS=1
  JOINER_FLAGS=(--checkpoint_root="$(realpath "$TMP")")
fi
job() {  # job FILE NAME
  write_job "$1" name="elastic-$2" strategy="$STRATEGY" seed=11 \
    layers="[{dense: {units: 10}}]" optimizer="{type: adam, learning_rate: 0.0005}" \
    epochs="$EPOCHS" eval_limit=5000 per_replica_batch="" global_batch=128 \
    fault_tolerance="{max_attempts: 3, health_check_interval_s: 0.5}" \
    checkpoint="$([[ "$STRATEGY" == multi_worker_mirrored ]] &&
      echo "{dir: $(realpath "$TMP")/ckpt-$2, every_steps: 2000}")"
}
result() {  # result FILE FIELD
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# --- The fixed 2-worker run.
job "$TMP/fixed.yaml" fixed
t0=$SECONDS
timeout 300 "$PSCTL" local "$TMP/fixed.yaml" --ps "$NUM_PS" --workers 2 --output json \
  "${BIN_FLAGS[@]}" > "$TMP/fixed.json" 2> "$TMP/fixed.err" \
  || { tail -20 "$TMP/fixed.err"; fail "the fixed run failed"; }
echo "fixed run: eval_accuracy $(result "$TMP/fixed.json" eval_accuracy)," \
     "$(result "$TMP/fixed.json" steps) steps, $((SECONDS - t0)) s"

# --- The elastic run.
job "$TMP/elastic.yaml" elastic
t0=$SECONDS
local_in_background "$TMP/elastic.json" "$TMP/elastic.err" 300 "$TMP/elastic.yaml" --ps "$NUM_PS" \
  --workers 2 --describe --output json "${BIN_FLAGS[@]}"
TOKEN_FILE="$(sed -n 's/.*--join_token_file=\([^ ]*\) .*/\1/p' "$TMP/elastic.err" | head -n 1)"
[[ -n "$TOKEN_FILE" && -s "$TOKEN_FILE" ]] ||
  { tail -20 "$TMP/elastic.err"; fail "psctl local printed no join token"; }

JOB_ID=""
events() {  # events FILE: the job's events as JSON
  [[ -n "$JOB_ID" ]] || JOB_ID="$("$PSCTL" list --coordinator "$ADDRESS" -o json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][-1]["job_id"])')"
  "$PSCTL" logs "$JOB_ID" --coordinator "$ADDRESS" -o json > "$1" 2>/dev/null ||
    echo '{"events": []}' > "$1"
}
count_events() {  # count_events KIND [MESSAGE_PART]
  events "$TMP/events.json"
  python3 -c 'import json,sys; print(sum(e["kind"] == sys.argv[2] and sys.argv[3] in e["message"] for e in json.load(open(sys.argv[1]))["events"]))' \
    "$TMP/events.json" "$1" "${2:-}"
}
wait_event() {  # wait_event SECONDS KIND [MESSAGE_PART]
  local deadline=$((SECONDS + $1)) state
  while (($(count_events "$2" "${3:-}") < 1)); do
    ((SECONDS < deadline)) || { tail -20 "$TMP/elastic.err"; fail "no $2 event '${3:-}' within $1 s"; }
    read -r _ _ state < <(job_progress "$ADDRESS")
    case "$state" in SUCCEEDED | FAILED | CANCELLED) fail "the job ended ($state) before a $2 event '${3:-}'" ;; esac
    sleep 0.2
  done
}

wait_progress "$ADDRESS" "$JOIN_AT" 120 ||
  { tail -20 "$TMP/elastic.err"; fail "the job ended (or stalled) before $JOIN_AT of its steps"; }
echo "$((SECONDS - t0)) s: a worker joins at $(job_progress "$ADDRESS")"
"$WORKER" --coordinator="$ADDRESS" --address=127.0.0.1:0 --compute_threads=1 \
  --data_root=/usr/share/datasets --join_token_file="$TOKEN_FILE" "${JOINER_FLAGS[@]}" \
  > "$TMP/joiner.log" 2>&1 &
JOINER=$!
STARTED_PIDS+=("$JOINER")
wait_event 60 worker_joined
wait_event 30 replicas_reformed "3 replicas (were 2)"
echo "$((SECONDS - t0)) s: 3 replicas at $(job_progress "$ADDRESS")"
wait_progress "$ADDRESS" "$LEAVE_AT" 120 ||
  { tail -20 "$TMP/elastic.err"; fail "the job ended (or stalled) before $LEAVE_AT of its steps"; }
echo "$((SECONDS - t0)) s: SIGTERM to the joiner at $(job_progress "$ADDRESS")"
kill -TERM "$JOINER"
rc=0
timeout 90 tail -s 0.1 --pid="$JOINER" -f /dev/null || fail "the joiner did not exit after SIGTERM"
wait "$JOINER" || rc=$?
((rc == 0)) || { tail -5 "$TMP/joiner.log"; fail "the joiner exited $rc after SIGTERM"; }
grep -q "left the cluster with nothing in flight" "$TMP/joiner.log" ||
  { tail -5 "$TMP/joiner.log"; fail "the joiner did not leave cleanly"; }
wait_event 30 replicas_reformed "2 replicas (were 3)"
echo "$((SECONDS - t0)) s: the joiner left, 2 replicas at $(job_progress "$ADDRESS")"
LEAVER="$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$TMP/joiner.log" | head -n 1)"

rc=0
wait "$TPID" || rc=$?
((rc == 0)) || { tail -40 "$TMP/elastic.err" >&2; fail "the elastic run exited $rc"; }
echo "elastic run: $((SECONDS - t0)) s"
# (The events as of the second re-forming, the leave's: the coordinator is
# gone with the job.)

python3 - "$TMP/fixed.json" "$TMP/elastic.json" "$TMP/events.json" "$LEAVER" "$STRATEGY" <<'PY' || { tail -40 "$TMP/elastic.err" >&2; fail "elastic result"; }
import json, sys
fixed = json.load(open(sys.argv[1]))
run = json.load(open(sys.argv[2]))
events = json.load(open(sys.argv[3]))["events"]
leaver = sys.argv[4]
mirrored = sys.argv[5] == "multi_worker_mirrored"
assert leaver, "the joiner's log names no address"
assert run["state"] == "SUCCEEDED", run
reformed = [e["message"] for e in events if e["kind"] == "replicas_reformed"]
rings = [e["message"] for e in events if e["kind"] == "ring_reformed"]
failures = [e["message"] for e in events
            if e["kind"] in ("replica_failed", "worker_join_failed", "ps_recovered")]
joined = [e["message"] for e in events if e["kind"] == "worker_joined"]
retries = [e["message"] for e in events if e["kind"] == "retry"]
# On a loaded machine a worker's PS connection may time out: retried
# without counting an attempt ("(attempt 0)"), and not the leave's doing.
by_leaver = [r for r in retries if leaver in r and "(attempt 0)" not in r]
print("joined: %d; retries: %d (by the leaver: %d); workers_lost: %d" %
      (len(joined), len(retries), len(by_leaver), run.get("workers_lost", 0)))
for m in reformed + rings + failures + retries:
    print("  " + m)
gap = abs(run["eval_accuracy"] - fixed["eval_accuracy"])
print("accuracy: fixed 2 workers %.4f, 2->3->2 workers %.4f, gap %.4f" %
      (fixed["eval_accuracy"], run["eval_accuracy"], gap))
applied = [p["applied_steps"] for p in run["describe"]["ps"]]
print("steps %d, applied per PS %s" % (run["steps"], applied))
assert len(joined) == 1, joined
assert len(reformed) == 2, reformed
assert reformed[0].startswith("3 replicas (were 2)"), reformed
assert reformed[1].startswith("2 replicas (were 3)"), reformed
assert all("global batch of 128 examples" in m for m in reformed), reformed
assert not by_leaver, by_leaver
assert not failures, failures
assert len(rings) == (2 if mirrored else 0), rings
assert run.get("workers_lost", 0) == 0
assert run["replicas"] == 2 and run["global_batch"] == 128, (run["replicas"], run["global_batch"])
assert applied and all(a == run["steps"] for a in applied), \
    "PS applied %s steps, the job has %d" % (applied, run["steps"])
assert run["steps"] == fixed["steps"] == run["total_steps"], (run["steps"], fixed["steps"])
assert gap <= 0.01, "accuracy moved by %.4f (> 1%%)" % gap
print("OK")
PY
