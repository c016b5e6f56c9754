#!/usr/bin/env bash
# A job that diverges must fail, never succeed: Fashion-MNIST with SGD at a
# learning rate of 1e30 under `psctl local` (2 PS x 2 workers). The workers
# fail their closures at the first non-finite loss, the coordinator retries
# them (fault_tolerance.max_attempts: 3), then fails the job naming the
# global step: psctl exits 1, the JSON says FAILED with that error, the
# coordinator's job events hold the retries and the failure, and every
# server psctl started is gone.
#
# usage: nonfinite_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
PS_SERVER="$(abs "$2")"
WORKER_SERVER="$(abs "$3")"
COORDINATOR="$(abs "$4")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist

require_fashion_mnist "$DATA"

write_job "$TMP/diverge.yaml" name=diverge \
  layers="[{dense: {units: 32, activation: relu}}, {dense: {units: 10}}]" \
  loss=softmax_cross_entropy optimizer="{type: sgd, learning_rate: 1e30}" \
  train_limit=2560 eval_limit=500 epochs=2 steps_per_closure=5 fault_tolerance="{max_attempts: 3}"

rc=0
timeout 120 "$PSCTL" local "$TMP/diverge.yaml" --ps 2 --workers 2 -o json --no_restart \
  --run_dir "$TMP/run" --ps_server_bin="$PS_SERVER" --worker_server_bin="$WORKER_SERVER" \
  --coordinator_bin="$COORDINATOR" > "$TMP/out.json" 2> "$TMP/err" || rc=$?
[[ $rc -eq 1 ]] || fail "psctl local exited $rc, want 1; stderr: $(tail -5 "$TMP/err")"

python3 - "$TMP/out.json" <<'PY'
import json, os, re, sys, time
result = json.load(open(sys.argv[1]))
assert result["state"] == "FAILED", result["state"]
error = result["error"]
assert re.search(r"non-finite (loss \((nan|-?inf)\)|gradient) at global step \d+", error), error
assert "failed after 3 attempt(s)" in error, error
pids = result["pids"]
all_pids = pids["ps"] + pids["worker"] + [pids["coordinator"]]
def gone(pid):
    try:
        state = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")
deadline = time.time() + 10
while time.time() < deadline and not all(gone(p) for p in all_pids):
    time.sleep(0.1)
alive = [p for p in all_pids if not gone(p)]
assert not alive, "still running: %s" % alive
print("OK: FAILED with: " + error)
PY

# The job's events (the coordinator logs each): retries, then the failure
# naming the step; never a success.
log="$TMP/run/coordinator.log"
grep -q "retry: training closure .*non-finite" "$log" || fail "no retry event in $log"
grep -Eq "failed: .*non-finite .* at global step [0-9]+" "$log" || fail "no failed event in $log"
if grep -q "succeeded" "$log"; then fail "the job reported success: $(grep succeeded "$log")"; fi
grep -q "FAILED" "$TMP/out.json" || fail "no FAILED in the result"
echo PASS
