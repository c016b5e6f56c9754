#!/usr/bin/env bash
# Elastic workers (docs/elastic_workers.md): a job on `psctl local --ps 2
# --workers 2`; at JOIN_AT (5 %) of its steps (training progress, never a
# schedule) six more worker_servers started by hand join it (2 -> 8) with
# --coordinator and the run's join token; once all six took the job and it
# trained to LEAVE_AT (50 %), five of them get SIGTERM (8 -> 3) and leave
# gracefully.
# Asserted:
#   - every joiner was set up for the job (six "worker_joined" events) and
#     every leaver exited 0 having left with nothing in flight;
#   - the job SUCCEEDED with applied == steps on every PS, no attempt counted
#     on a leaver (no "retry" event names one with an attempt; on a loaded
#     machine a worker's PS connection may still time out, an uncounted
#     retry that is printed), and no worker declared lost;
#   - accuracy within 1 % of the same job on a fixed 2-worker cluster;
#   - a stranger's registration (wrong token, no token) is refused, and so
#     is one with an address where no worker answers, each with a clear
#     error, and none of them joined.
#
# usage: elastic_workers_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
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
JOIN_AT=0.05
LEAVE_AT=0.5

# The softmax regression of chaos_test.sh: its accuracy hardly depends on
# the order of asynchronous updates, so the 1 % comparison measures lost or
# doubled work, not staleness.
job() {
  write_job "$1" name=elastic seed=11 layers="[{dense: {units: 10}}]" \
    optimizer="{type: adam, learning_rate: 0.0005}" epochs=12 eval_limit=5000 \
    fault_tolerance="{max_attempts: 3, health_check_interval_s: 0.5}"
}
result() {  # result FILE FIELD
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# --- The fixed 2-worker run.
job "$TMP/fixed.yaml"
t0=$SECONDS
timeout 300 "$PSCTL" local "$TMP/fixed.yaml" --ps 2 --workers 2 --output json \
  "${BIN_FLAGS[@]}" > "$TMP/fixed.json" 2> "$TMP/fixed.err" \
  || { tail -20 "$TMP/fixed.err"; fail "the fixed run failed"; }
echo "fixed run: eval_accuracy $(result "$TMP/fixed.json" eval_accuracy)," \
     "$(result "$TMP/fixed.json" steps) steps, $((SECONDS - t0)) s"

# --- The elastic run.
job "$TMP/elastic.yaml"
t0=$SECONDS
local_in_background "$TMP/elastic.json" "$TMP/elastic.err" 300 "$TMP/elastic.yaml" --ps 2 \
  --workers 2 --describe --output json "${BIN_FLAGS[@]}"
TOKEN_FILE="$(sed -n 's/.*--join_token_file=\([^ ]*\) .*/\1/p' "$TMP/elastic.err" | head -n 1)"
[[ -n "$TOKEN_FILE" && -s "$TOKEN_FILE" ]] ||
  { tail -20 "$TMP/elastic.err"; fail "psctl local printed no join token"; }

# start_worker NAME FLAGS...: a worker_server joining the cluster; its pid in
# PID_<NAME>, its log in $TMP/NAME.log.
start_worker() {
  local name="$1"
  shift
  "$WORKER" --coordinator="$ADDRESS" --address=127.0.0.1:0 --compute_threads=1 \
    --data_root=/usr/share/datasets "$@" > "$TMP/$name.log" 2>&1 &
  printf -v "PID_$name" '%s' "$!"
  STARTED_PIDS+=("$!")
}

wait_progress "$ADDRESS" "$JOIN_AT" 120 ||
  { tail -20 "$TMP/elastic.err"; fail "the job ended (or stalled) before $JOIN_AT of its steps"; }
echo "$((SECONDS - t0)) s: joining 6 workers at $(job_progress "$ADDRESS")"
for i in 1 2 3 4 5 6; do start_worker "w$i" --join_token_file="$TOKEN_FILE"; done

# Meanwhile strangers: each must exit 1 with the coordinator's refusal.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TMP/wrong_token"
start_worker stranger --join_token_file="$TMP/wrong_token"
start_worker anonymous
start_worker badaddr --join_token_file="$TOKEN_FILE" --advertise_address=127.0.0.1:1
for name in stranger anonymous badaddr; do
  pid_var="PID_$name"
  rc=0
  timeout 30 tail -s 0.1 --pid="${!pid_var}" -f /dev/null || fail "$name did not exit"
  wait "${!pid_var}" || rc=$?
  echo "$name: exit $rc: $(tail -n 1 "$TMP/$name.log")"
  ((rc == 1)) || fail "$name's registration was not refused (exit $rc)"
done
grep -q "wrong join token" "$TMP/stranger.log" ||
  fail "the stranger's refusal does not say why"
grep -q "no join token" "$TMP/anonymous.log" || fail "the tokenless refusal does not say why"
grep -q "127.0.0.1:1.*does not answer Ping" "$TMP/badaddr.log" ||
  fail "the bad address's refusal does not name it"

# events FILE: the newest job's events as JSON.
JOB_ID="$("$PSCTL" list --coordinator "$ADDRESS" -o json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][-1]["job_id"])')"
events() {
  "$PSCTL" logs "$JOB_ID" --coordinator "$ADDRESS" -o json > "$1" 2>/dev/null ||
    echo '{"events": []}' > "$1"
}
count_events() {  # count_events KIND
  events "$TMP/events.json"
  python3 -c 'import json,sys; print(sum(e["kind"] == sys.argv[2] for e in json.load(open(sys.argv[1]))["events"]))' \
    "$TMP/events.json" "$1"
}
deadline=$((SECONDS + 60))
while (($(count_events worker_joined) < 6)); do
  ((SECONDS < deadline)) || { tail -20 "$TMP/elastic.err"; fail "the workers did not all join within 60 s"; }
  read -r _ _ state < <(job_progress "$ADDRESS")
  case "$state" in SUCCEEDED | FAILED | CANCELLED) fail "the job ended ($state) before the workers joined" ;; esac
  sleep 0.3
done
echo "$((SECONDS - t0)) s: 6 workers joined at $(job_progress "$ADDRESS")"
wait_progress "$ADDRESS" "$LEAVE_AT" 120 ||
  { tail -20 "$TMP/elastic.err"; fail "the job ended (or stalled) before $LEAVE_AT of its steps"; }
echo "$((SECONDS - t0)) s: SIGTERM to 5 joined workers at $(job_progress "$ADDRESS")"
for i in 1 2 3 4 5; do pid_var="PID_w$i"; kill -TERM "${!pid_var}"; done
for i in 1 2 3 4 5; do
  pid_var="PID_w$i"
  rc=0
  timeout 90 tail -s 0.1 --pid="${!pid_var}" -f /dev/null || fail "worker w$i did not exit after SIGTERM"
  wait "${!pid_var}" || rc=$?
  ((rc == 0)) || { tail -5 "$TMP/w$i.log"; fail "worker w$i exited $rc after SIGTERM"; }
  grep -q "left the cluster with nothing in flight" "$TMP/w$i.log" ||
    { tail -5 "$TMP/w$i.log"; fail "worker w$i did not leave cleanly"; }
done
echo "$((SECONDS - t0)) s: 5 workers left at $(job_progress "$ADDRESS")"
events "$TMP/events.json"
# The leavers' addresses, for the check that none of their closures was retried.
for i in 1 2 3 4 5; do
  sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$TMP/w$i.log" | head -n 1
done > "$TMP/leavers.txt"

rc=0
wait "$TPID" || rc=$?
((rc == 0)) || { tail -40 "$TMP/elastic.err" >&2; fail "the elastic run exited $rc"; }
echo "elastic run: $((SECONDS - t0)) s"
for i in 6; do pid_var="PID_w$i"; kill -TERM "${!pid_var}" 2>/dev/null || true; done

python3 - "$TMP/fixed.json" "$TMP/elastic.json" "$TMP/events.json" "$TMP/leavers.txt" <<'PY' || { tail -40 "$TMP/elastic.err" >&2; fail "elastic result"; }
import json, sys
fixed = json.load(open(sys.argv[1]))
run = json.load(open(sys.argv[2]))
events = json.load(open(sys.argv[3]))["events"]
leavers = open(sys.argv[4]).read().split()
assert len(leavers) == 5, leavers
assert run["state"] == "SUCCEEDED", run
kinds = [e["kind"] for e in events]
joined = [e["message"] for e in events if e["kind"] == "worker_joined"]
retries = [e["message"] for e in events if e["kind"] == "retry"]
join_failed = [e["message"] for e in events if e["kind"] == "worker_join_failed"]
# On a loaded machine a worker's PS connection may time out: retried
# without counting an attempt ("(attempt 0)", "ps ADDR: ..."), and not the
# leave's doing. No attempt may be counted on a leaver.
by_leavers = [r for r in retries if any(a in r for a in leavers) and "(attempt 0)" not in r]
print("joined: %d; retries: %d (by leavers: %d); workers_lost: %d" %
      (len(joined), len(retries), len(by_leavers), run.get("workers_lost", 0)))
for r in retries:
    print("  " + r)
gap = abs(run["eval_accuracy"] - fixed["eval_accuracy"])
print("accuracy: fixed 2 workers %.4f, 2->8->3 workers %.4f, gap %.4f" %
      (fixed["eval_accuracy"], run["eval_accuracy"], gap))
applied = [p["applied_steps"] for p in run["describe"]["ps"]]
print("steps %d, applied per PS %s" % (run["steps"], applied))
assert len(joined) == 6, joined
assert not by_leavers, by_leavers
assert not join_failed, join_failed
assert run.get("workers_lost", 0) == 0
assert applied and all(a == run["steps"] for a in applied), \
    "PS applied %s steps, the job has %d" % (applied, run["steps"])
assert run["steps"] == fixed["steps"]
assert gap <= 0.01, "accuracy moved by %.4f (> 1%%)" % gap
print("OK")
PY
