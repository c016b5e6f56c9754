#!/usr/bin/env bash
# End-to-end tests of `psctl local` with the real servers.
#
# usage: psctl_local_test.sh train|kill9|bad_input PSCTL PS_SERVER WORKER_SERVER COORDINATOR
#   train      trains on a Fashion-MNIST subset on 2 PS + 2 workers; checks the
#              child processes, the JSON result, and that every child is gone
#   kill9      kill -9 psctl mid-job; every child must die within 10 s
#   restart_worker  kill -9 one worker twice mid-job (no PS rollback); psctl
#              restarts it at its address, the job still succeeds, the JSON
#              counts the restarts, and each PS applied every scheduled step
#              exactly once
#   restart_worker_sync  the same with strategy: central_storage (a killed
#              replica's closures run again; each global step applied once)
#   bad_input  malformed specs and missing data files exit 2 with file:line:col
#   one_device the same job with strategy: one_device trains in psctl's own
#              process (no children) to the accuracy of a 2 PS x 1 worker cluster
# Every process the test starts is stopped by pid on exit.
set -euo pipefail

case_name="$1"
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$2")"
PS_SERVER="$(abs "$3")"
WORKER_SERVER="$(abs "$4")"
COORDINATOR="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist



require_fashion_mnist "$DATA"

# local_job FILE EPOCHS TRAIN_LIMIT [STRATEGY]
local_job() {
  write_job "$1" name=psctl-local-test strategy="${4:-parameter_server}" train_limit="$3" \
    eval_limit=2000 epochs="$2"
}

BIN_FLAGS=(--ps_server_bin="$PS_SERVER" --worker_server_bin="$WORKER_SERVER"
           --coordinator_bin="$COORDINATOR")

# Starts `timeout 300 psctl local ARGS...` in the background; sets
# TIMEOUT_PID and PSCTL_PID (the child of timeout).
start_psctl() {
  timeout 300 "$PSCTL" local "$@" "${BIN_FLAGS[@]}" > "$TMP/stdout" 2> "$TMP/stderr" &
  TIMEOUT_PID=$!
  STARTED_PIDS+=("$TIMEOUT_PID")
  PSCTL_PID=""
  for _ in $(seq 1 500); do
    PSCTL_PID="$(pgrep -P "$TIMEOUT_PID" || true)"
    [[ -n "$PSCTL_PID" ]] && break
    sleep 0.01
  done
  [[ -n "$PSCTL_PID" ]] || fail "psctl did not start"
  STARTED_PIDS+=("$PSCTL_PID")
}

# Records psctl's server children (those given a --port_file; not the
# short-lived `coordinator --helpfull` psctl runs to learn its flags) as
# "pid name" lines in $TMP/children (union over polls) until ps_server x2,
# worker_server x2 and coordinator were all seen, psctl exited, or $1 seconds
# passed. Returns 0 if all were seen.
watch_children() {
  local deadline=$((SECONDS + $1))
  : > "$TMP/children"
  while ((SECONDS < deadline)); do
    pgrep -l -f -P "$PSCTL_PID" -- '--port_file=' >> "$TMP/children" || true
    sort -u -o "$TMP/children" "$TMP/children"
    for pid in $(cut -d' ' -f1 "$TMP/children"); do
      [[ " ${STARTED_PIDS[*]} " == *" $pid "* ]] || STARTED_PIDS+=("$pid")
    done
    if (($(grep -c ' ps_server$' "$TMP/children") >= 2 &&
         $(grep -c ' worker_server$' "$TMP/children") >= 2 &&
         $(grep -c ' coordinator$' "$TMP/children") >= 1)); then
      return 0
    fi
    kill -0 "$PSCTL_PID" 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}

# True if the process is gone (or a zombie nobody has reaped yet).
show_logs() {
  echo "--- psctl stdout:" >&2; cat "$TMP/stdout" >&2 || true
  echo "--- psctl stderr:" >&2; cat "$TMP/stderr" >&2 || true
}

test_train() {
  local_job "$TMP/job.yaml" 1 6000
  start_psctl "$TMP/job.yaml" --ps 2 --workers 2 --output json
  if ! watch_children 240; then
    show_logs
    echo "children seen:" >&2; cat "$TMP/children" >&2
    fail "did not see 2 ps_server, 2 worker_server and a coordinator as children of psctl"
  fi
  echo "children of psctl ($PSCTL_PID):"; cat "$TMP/children"
  local rc=0
  wait "$TIMEOUT_PID" || rc=$?
  ((rc != 124)) || { show_logs; fail "psctl local did not finish within 300 s"; }
  ((rc == 0)) || { show_logs; fail "psctl local exited $rc"; }
  cat "$TMP/stdout"
  python3 - "$TMP/stdout" "$TMP/children" <<'PY' || { show_logs; fail "bad result"; }
import json, os, sys
text = open(sys.argv[1]).read()
result = json.loads(text)  # raises unless stdout is exactly one JSON value
assert isinstance(result, dict), "stdout is not a JSON object"
assert result["state"] == "SUCCEEDED", result
assert result["strategy"] == "parameter_server", result
assert result["ps"] == 2 and result["workers"] == 2, result
assert result["eval_accuracy"] > 0.5, "eval_accuracy %s <= 0.5" % result["eval_accuracy"]
assert result["steps"] > 0 and result["examples"] >= 6000, result
pids = result["pids"]
assert len(pids["ps"]) == 2 and len(pids["worker"]) == 2 and pids["coordinator"] > 0, pids
all_pids = pids["ps"] + pids["worker"] + [pids["coordinator"]]
seen = {int(line.split()[0]) for line in open(sys.argv[2]) if line.strip()}
assert seen <= set(all_pids), "children %s not in the reported pids %s" % (seen, all_pids)
def gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
alive = [p for p in all_pids if not gone(p)]
assert not alive, "still running after psctl exited: %s" % alive
print("OK: eval_accuracy %.4f, %d steps, pids gone: %s" % (
    result["eval_accuracy"], result["steps"], all_pids))
PY
}

test_kill9() {
  # Long enough that the job is still running when psctl is killed.
  local_job "$TMP/job.yaml" 200 60000
  start_psctl "$TMP/job.yaml" --ps 2 --workers 2
  if ! watch_children 120; then
    show_logs
    fail "did not see the cluster start under psctl"
  fi
  local children
  children="$(cut -d' ' -f1 "$TMP/children")"
  kill -0 "$PSCTL_PID" 2>/dev/null || { show_logs; fail "psctl ended before it could be killed"; }
  echo "kill -9 psctl ($PSCTL_PID); its children: $(echo $children)"
  kill -9 "$PSCTL_PID"
  wait "$TIMEOUT_PID" || true
  local deadline=$((SECONDS + 10)) alive
  while :; do
    alive=""
    for pid in $children; do
      gone "$pid" || alive+=" $pid"
    done
    [[ -z "$alive" ]] && break
    ((SECONDS < deadline)) || fail "children outlived kill -9 of psctl by 10 s:$alive"
    sleep 0.1
  done
  echo "OK: all children gone"
}

# Pid of psctl's live child whose command line matches the regex $1 ("" if none).
child_matching() {
  pgrep -P "$PSCTL_PID" -f "$1" | head -1 || true
}

test_restart_worker() {
  # Long enough to kill a worker twice while it trains (~40 s on 2 cores; the
  # job of the brief, 3 epochs of 20000 examples, is over in 2 s).
  local_job "$TMP/job.yaml" 15 60000 "${1:-parameter_server}"
  local run_dir="$TMP/restart-run"
  start_psctl "$TMP/job.yaml" --ps 2 --workers 2 --output json --run_dir "$run_dir" --describe
  if ! watch_children 240; then
    show_logs
    fail "did not see the cluster start under psctl"
  fi
  # Kill worker-1 at 20 % and at 50 % of the job's steps (points of training
  # progress, not of time: the test means the same on any machine's speed).
  local address="" deadline=$((SECONDS + 120))
  until [[ -n "$address" ]]; do
    ((SECONDS < deadline)) || { show_logs; fail "no coordinator address within 120 s"; }
    address="$(local_coordinator "$TMP/stderr")"
    sleep 0.1
  done
  local pattern='worker_server .*/worker-1\.port' victim new fraction
  for round in 1 2; do
    fraction=$([[ $round == 1 ]] && echo 0.2 || echo 0.5)
    wait_progress "$address" "$fraction" 240 ||
      { show_logs; fail "round $round: the job ended (or stalled) before $fraction of its steps"; }
    victim="$(child_matching "$pattern")"
    [[ -n "$victim" ]] || { show_logs; fail "round $round: no worker-1 under psctl"; }
    STARTED_PIDS+=("$victim")
    echo "round $round: kill -9 worker-1 (pid $victim)"
    kill -9 "$victim"
    deadline=$((SECONDS + 30))
    new=""
    while [[ -z "$new" || "$new" == "$victim" ]]; do
      ((SECONDS < deadline)) || { show_logs; fail "round $round: worker-1 not restarted in 30 s"; }
      kill -0 "$PSCTL_PID" 2>/dev/null || { show_logs; fail "psctl ended before the restart"; }
      sleep 0.1
      new="$(child_matching "$pattern")"
    done
    STARTED_PIDS+=("$new")
    echo "round $round: worker-1 restarted as pid $new"
    grep -q "psctl: restarted worker-1 (pid $victim killed by signal 9" "$TMP/stderr" ||
      { show_logs; fail "round $round: no restart line for pid $victim on stderr"; }
  done
  local rc=0
  wait "$TIMEOUT_PID" || rc=$?
  ((rc != 124)) || { show_logs; fail "psctl local did not finish within 300 s"; }
  ((rc == 0)) || { show_logs; fail "psctl local exited $rc"; }
  cat "$TMP/stdout"
  (($(grep -c -- '^--- restarted ---$' "$run_dir/worker-1.log") == 2)) ||
    { show_logs; fail "worker-1.log does not hold two restart markers"; }
  python3 - "$TMP/stdout" <<'PY' || { show_logs; fail "bad result"; }
import json, sys
result = json.load(open(sys.argv[1]))
assert result["state"] == "SUCCEEDED", result
assert result["eval_accuracy"] > 0.6, "eval_accuracy %s <= 0.6" % result["eval_accuracy"]
restarts = result["restarts"]
assert restarts["worker-1"] >= 2, restarts
assert set(restarts) == {"ps-0", "ps-1", "worker-0", "worker-1", "coordinator"}, restarts
# Exactly-once: a killed worker's closures were retried, yet every PS applied
# each scheduled step once; repeats of applied steps were dropped.
steps = result["total_steps"]
assert result["steps"] == steps, result
for ps in result["describe"]["ps"]:
    assert ps["applied_steps"] == steps, "PS %d applied %d steps, %d were scheduled" % (
        ps["ps"], ps["applied_steps"], steps)
print("exactly-once: %d steps scheduled; applied per PS %s; dropped repeats per PS %s" % (
    steps, [p["applied_steps"] for p in result["describe"]["ps"]],
    [p["duplicate_steps"] for p in result["describe"]["ps"]]))
pids = result["pids"]
all_pids = pids["ps"] + pids["worker"] + [pids["coordinator"]]
def gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
alive = [p for p in all_pids if not gone(p)]
assert not alive, "still running after psctl exited: %s" % alive
print("OK: eval_accuracy %.4f, restarts %s, pids gone: %s" % (
    result["eval_accuracy"], restarts, all_pids))
PY
  # Every worker-1 process seen (killed or latest) is gone too.
  for pid in "${STARTED_PIDS[@]}"; do
    [[ "$pid" == "$TIMEOUT_PID" ]] && continue
    gone "$pid" || fail "pid $pid outlived psctl"
  done
}

test_one_device() {
  local_job "$TMP/one.yaml" 2 6000 one_device
  local_job "$TMP/cluster.yaml" 2 6000 parameter_server
  local rc=0
  timeout 300 "$PSCTL" local "$TMP/one.yaml" --output json "${BIN_FLAGS[@]}" \
    > "$TMP/one.json" 2> "$TMP/one.err" &
  local pid=$!
  STARTED_PIDS+=("$pid")
  # One process: psctl (under timeout) starts no servers. Watched for as
  # long as the run lasts (however fast the machine), not at one moment.
  local inner="" deadline=$((SECONDS + 300))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    [[ -n "$inner" ]] || inner="$(pgrep -P "$pid" || true)"
    if [[ -n "$inner" ]] && pgrep -P "$inner" > /dev/null; then
      fail "strategy one_device started child processes: $(pgrep -a -P "$inner")"
    fi
    sleep 0.05
  done
  wait "$pid" || rc=$?
  ((rc == 0)) || { cat "$TMP/one.err" >&2; fail "one_device run exited $rc"; }
  rc=0
  # One worker with one closure in flight applies the same updates in the same
  # order as one device: over gRPC and across 2 PS, the result must match.
  timeout 300 "$PSCTL" local "$TMP/cluster.yaml" --ps 2 --workers 1 --output json \
    "${BIN_FLAGS[@]}" > "$TMP/cluster.json" 2> "$TMP/cluster.err" || rc=$?
  ((rc == 0)) || { cat "$TMP/cluster.err" >&2; fail "cluster run exited $rc"; }
  python3 - "$TMP/one.json" "$TMP/cluster.json" <<'PY' || fail "bad one_device result"
import json, sys
one = json.load(open(sys.argv[1]))
cluster = json.load(open(sys.argv[2]))
assert one["state"] == "SUCCEEDED" and one["strategy"] == "one_device", one
assert "pids" not in one, one
assert one["eval_accuracy"] > 0.6, one
assert cluster["state"] == "SUCCEEDED" and cluster["workers"] == 1, cluster
gap = abs(one["eval_accuracy"] - cluster["eval_accuracy"])
assert gap < 0.005, "one_device %.4f vs cluster %.4f" % (one["eval_accuracy"], cluster["eval_accuracy"])
print("OK: one_device %.4f, cluster %.4f" % (one["eval_accuracy"], cluster["eval_accuracy"]))
PY
}

# expect_bad_input FILE PATTERN: psctl exits 2 and stderr matches PATTERN.
expect_bad_input() {
  local rc=0
  timeout 60 "$PSCTL" local "$1" --output json "${BIN_FLAGS[@]}" \
    > "$TMP/stdout" 2> "$TMP/stderr" || rc=$?
  ((rc == 2)) || { show_logs; fail "$1: expected exit 2, got $rc"; }
  grep -Eq "$2" "$TMP/stderr" || { show_logs; fail "$1: stderr does not match '$2'"; }
  [[ ! -s "$TMP/stdout" ]] || { show_logs; fail "$1: bad input must print nothing on stdout"; }
  echo "OK: $(basename "$1"): $(head -1 "$TMP/stderr")"
}

test_bad_input() {
  mkdir -p "$TMP/typo" "$TMP/indent" "$TMP/nodata"
  local_job "$TMP/typo/job.yaml" 1 6000
  sed -i 's/type: adam,/type: adamm,/' "$TMP/typo/job.yaml"
  local line
  line="$(grep -n 'adamm' "$TMP/typo/job.yaml" | cut -d: -f1)"
  expect_bad_input "$TMP/typo/job.yaml" "job\\.yaml:$line:[0-9]+: .*adamm"

  local_job "$TMP/indent/job.yaml" 1 6000
  sed -i 's/^    labels: \(.*t10k-labels.*\)$/   labels: \1/' "$TMP/indent/job.yaml"
  grep -q '^   labels: .*t10k-labels' "$TMP/indent/job.yaml" || fail "could not break the indentation"
  expect_bad_input "$TMP/indent/job.yaml" 'job\.yaml:[0-9]+:[0-9]+: '

  local_job "$TMP/nodata/job.yaml" 1 6000
  sed -i "s|t10k-labels-idx1-ubyte.gz|no-such-labels.gz|" "$TMP/nodata/job.yaml"
  expect_bad_input "$TMP/nodata/job.yaml" "^data file not found: $DATA/no-such-labels.gz\$"

  # A data file that exists but is not an idx file (a gzipped text): the
  # workers find it before training; the job FAILS as invalid input, exit 2.
  mkdir -p "$TMP/corrupt"
  echo "these are not Fashion-MNIST labels" | gzip > "$TMP/corrupt/labels.gz"
  local_job "$TMP/corrupt/job.yaml" 1 6000
  sed -i "s|$DATA/t10k-labels-idx1-ubyte.gz|$TMP/corrupt/labels.gz|" "$TMP/corrupt/job.yaml"
  local rc=0
  timeout 120 "$PSCTL" local "$TMP/corrupt/job.yaml" --output json "${BIN_FLAGS[@]}" \
    > "$TMP/corrupt.json" 2> "$TMP/corrupt.err" || rc=$?
  ((rc == 2)) || { cat "$TMP/corrupt.err" >&2; fail "corrupt data: expected exit 2, got $rc"; }
  python3 - "$TMP/corrupt.json" <<'PY' || { cat "$TMP/corrupt.err" >&2; fail "corrupt data result"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["state"] == "FAILED" and r["invalid_input"] is True and r["steps"] == 0, r
assert "labels.gz" in r["error"], r["error"]
print("OK: corrupt data file: exit 2:", r["error"][:160])
PY
}

# --tls: a throwaway CA and cluster certificate made with openssl, mutual TLS
# on every channel and a token on the job service; the job trains through it.
test_tls() {
  local_job "$TMP/job.yaml" 1 6000
  local rc=0
  timeout 300 "$PSCTL" local "$TMP/job.yaml" --tls --keep_run_dir --run_dir "$TMP/run" \
    --output json "${BIN_FLAGS[@]}" > "$TMP/stdout" 2> "$TMP/stderr" || rc=$?
  ((rc == 0)) || { show_logs; fail "psctl local --tls exited $rc"; }
  python3 - "$TMP/stdout" <<'PY' || { show_logs; fail "bad result"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["state"] == "SUCCEEDED", r
assert r["eval_accuracy"] > 0.5, r["eval_accuracy"]
assert r["ps_applied_steps"] == [r["total_steps"]] * 2, r
print("OK: SUCCEEDED over mutual TLS, eval_accuracy %.4f" % r["eval_accuracy"])
PY
  local dir="$TMP/run/tls"
  for f in ca.pem cluster.pem cluster.key tokens; do
    [[ -s "$dir/$f" ]] || fail "--tls left no $f in the run directory"
  done
  [[ ! -e "$dir/ca.key" ]] || fail "the CA key was kept: anyone could sign cluster certificates"
  [[ "$(stat -c %a "$dir")" == 700 ]] || fail "$dir is not private"
  openssl verify -CAfile "$dir/ca.pem" "$dir/cluster.pem" || fail "the cluster certificate does not verify"
  [[ -s "$TMP/run/coordinator.log" ]] || fail "no coordinator log in the run directory"
  # The coordinator warns when its job service is open, or when its tokens
  # would cross the network in plaintext (tokens without TLS).
  if grep -E "open to anyone|travel in plaintext" "$TMP/run/coordinator.log"; then
    fail "the coordinator ran without tokens or without TLS"
  fi
  echo "OK: certificates, token and key handling"
}

case "$case_name" in
  train) test_train ;;
  tls) test_tls ;;
  kill9) test_kill9 ;;
  restart_worker_sync) test_restart_worker central_storage ;;
  restart_worker) test_restart_worker ;;
  bad_input) test_bad_input ;;
  one_device) test_one_device ;;
  *) fail "unknown case $case_name" ;;
esac
echo PASS
