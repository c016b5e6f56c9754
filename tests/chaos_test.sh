#!/usr/bin/env bash
# Chaos: a Fashion-MNIST job on 2 PS x 2 workers under `psctl local` (the
# supervisor). While it trains, kill -9 a random worker every few seconds,
# then a PS, then the coordinator; each comes back through the supervisor.
# The job must complete, heal the PS failure from a checkpoint, and end
# within 1% of a clean run's accuracy on the same seed.
#
# usage: chaos_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
# Every process started is stopped by pid on exit; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist



# write_job FILE CHECKPOINT_DIR
write_job() {
  # Softmax regression: a convex model whose final accuracy hardly depends on
  # the order of asynchronous updates (runs differ by ~0.1 %), so the 1 %
  # comparison measures lost or doubled work, not scheduling noise.
  cat > "$1" <<YAML
name: chaos
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
train: {epochs: 24, steps_per_closure: 10, closures_per_worker: 1}
checkpoint: {dir: $2, every_steps: 150, keep: 3}
fault_tolerance: {max_attempts: 50, ps_recovery_timeout_s: 60, health_check_interval_s: 0.2}
YAML
}

result() {  # result FILE FIELD
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# --- The clean run.
write_job "$TMP/clean.yaml" "$TMP/clean-ckpt"
timeout 600 "$PSCTL" local "$TMP/clean.yaml" --ps 2 --workers 2 --output json "${BIN_FLAGS[@]}" \
  > "$TMP/clean.json" 2> "$TMP/clean.err" || { tail -20 "$TMP/clean.err"; fail "the clean run failed"; }
echo "clean run: eval_accuracy $(result "$TMP/clean.json" eval_accuracy)"

# --- The chaos run.
write_job "$TMP/chaos.yaml" "$TMP/chaos-ckpt"
timeout 600 "$PSCTL" local "$TMP/chaos.yaml" --ps 2 --workers 2 --output json "${BIN_FLAGS[@]}" \
  > "$TMP/chaos.json" 2> "$TMP/chaos.err" &
TPID=$!
STARTED_PIDS+=("$TPID")
PSCTL_PID=""
for _ in $(seq 1 100); do
  PSCTL_PID="$(pgrep -P "$TPID" | head -n 1 || true)"
  [[ -n "$PSCTL_PID" ]] && pgrep -P "$PSCTL_PID" -f coordinator > /dev/null && break
  sleep 0.1
done
[[ -n "$PSCTL_PID" ]] || fail "psctl did not start"

# kill_one PATTERN: kill -9 one child of psctl whose command line matches.
kill_one() {
  local victims victim
  victims="$(pgrep -P "$PSCTL_PID" -f "$1" || true)"
  [[ -n "$victims" ]] || { echo "no $1 to kill (job over?)"; return 0; }
  victim="$(echo "$victims" | shuf -n 1)"
  echo "$(date +%T.%N | cut -c1-12) kill -9 $1 pid $victim"
  kill -9 "$victim" 2>/dev/null || true
}
# Wait for the job to be well under way (a first checkpoint taken).
for _ in $(seq 1 200); do
  ls "$TMP"/chaos-ckpt/ckpt-*/MANIFEST > /dev/null 2>&1 && break
  kill -0 "$TPID" 2>/dev/null || break
  sleep 0.1
done
for _ in 1 2 3; do
  kill_one worker_server
  sleep 2
done
kill_one ps_server
sleep 4
kill_one coordinator
rc=0
wait "$TPID" || rc=$?
((rc == 0)) || { tail -40 "$TMP/chaos.err" >&2; fail "the chaos run exited $rc"; }
grep -E "restarted|kill" "$TMP/chaos.err" || true

python3 - "$TMP/clean.json" "$TMP/chaos.json" <<'PY' || { tail -40 "$TMP/chaos.err" >&2; fail "chaos result"; }
import json, os, sys
clean = json.load(open(sys.argv[1]))
chaos = json.load(open(sys.argv[2]))
assert chaos["state"] == "SUCCEEDED", chaos
restarts = chaos.get("restarts", {})
print("restarts:", restarts)
for kind in ("worker", "ps", "coordinator"):
    assert any(k.startswith(kind) and v > 0 for k, v in restarts.items()), f"no {kind} restarted: {restarts}"
print("PS recoveries %d, lost steps %d, last recovery %.2f s" %
      (chaos.get("ps_recoveries", 0), chaos.get("lost_steps", 0), chaos.get("last_recovery_seconds", 0)))
assert chaos.get("ps_recoveries", 0) >= 1, "the PS failure was not healed by a restore"
assert chaos.get("last_recovery_seconds", 99) < 10, "healing took %.1f s" % chaos["last_recovery_seconds"]
gap = abs(chaos["eval_accuracy"] - clean["eval_accuracy"])
print("clean %.4f, chaos %.4f, gap %.4f" % (clean["eval_accuracy"], chaos["eval_accuracy"], gap))
assert gap <= 0.01, "accuracy moved by %.4f (> 1%%)" % gap
pids = chaos["pids"]
for pid in pids["ps"] + pids["worker"] + [pids["coordinator"]]:
    assert not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] in "ZX", pid
print("OK")
PY
