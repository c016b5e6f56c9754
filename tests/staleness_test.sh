#!/usr/bin/env bash
# Bounded staleness end to end (docs/staleness.md): `psctl local` on 2 PS x
# 4 workers, two closures in flight per worker, with the real servers.
#
# usage: staleness_test.sh bound0|bound2 PSCTL PS_SERVER WORKER_SERVER COORDINATOR
#   bound0  train.max_staleness: 0: the closures run one after another, so
#           every closure starts with staleness 0 and every push finds no
#           other push applied since its pull (the PS measures 0); each PS
#           applied every step exactly once
#   bound2  train.max_staleness: 2 with staleness_lr: inverse: up to 3
#           closures run at once, so the measured closure staleness is 1..2
#           (never more) and the PS measures stale pushes (> 0); each PS
#           applied every step exactly once, and the model still learns
# Every process the test starts is stopped by pid on exit (psctl stops its
# children; they die with it).
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

# staleness_job FILE TRAIN_EXTRA: 4,000 examples, 1 epoch, 5 steps of 32 a
# closure (25 closures).
staleness_job() {
  cat > "$1" <<YAML
name: staleness-test
seed: 5
model:
  inputs: {dense: 784}
  layers: [{dense: {units: 32, activation: relu}}, {dense: {units: 10}}]
optimizer: {type: adam, learning_rate: 0.003}
data:
  train:
    images: $DATA/train-images-idx3-ubyte.gz
    labels: $DATA/train-labels-idx1-ubyte.gz
    limit: 4000
  eval:
    images: $DATA/t10k-images-idx3-ubyte.gz
    labels: $DATA/t10k-labels-idx1-ubyte.gz
    limit: 1000
  per_replica_batch: 32
train: {epochs: 1, steps_per_closure: 5, closures_per_worker: 2, $2}
YAML
}

# run_local OUT JOB: psctl local on 2 PS x 4 workers, -o json into OUT,
# bounded by 240 s.
run_local() {
  local rc=0
  timeout 240 "$PSCTL" local "$2" --ps 2 --workers 4 --ps_server_bin="$PS_SERVER" \
    --worker_server_bin="$WORKER_SERVER" --coordinator_bin="$COORDINATOR" \
    --output json > "$1" 2> "$1.err" &
  local pid=$!
  STARTED_PIDS+=("$pid")
  wait "$pid" || rc=$?
  if ((rc != 0)); then
    tail -30 "$1.err" >&2
    fail "psctl local $2 exited $rc"
  fi
}

# check OUT BOUND MIN_PUSH_STALENESS MAX_PUSH_STALENESS
check() {
  python3 - "$@" <<'PY' || { cat "$1" >&2; fail "bad result"; }
import json, sys
r = json.load(open(sys.argv[1]))
bound, push_lo, push_hi = (int(a) for a in sys.argv[2:5])
print("max_staleness %d: closure staleness %d, push staleness %d, accuracy %.4f, %d steps, "
      "applied %s" % (bound, r["max_closure_staleness"], r["max_push_staleness"],
                      r["eval_accuracy"], r["steps"], r["ps_applied_steps"]))
assert r["state"] == "SUCCEEDED", r["state"]
assert r["steps"] == 125, r["steps"]  # 4000 / 32
assert r["ps_applied_steps"] == [r["steps"]] * 2, r["ps_applied_steps"]
# The bound held; with 8 dispatch threads waiting, the first closures
# start at once, so the measured staleness reaches the bound.
assert r["max_closure_staleness"] == bound, r["max_closure_staleness"]
assert push_lo <= r["max_push_staleness"] <= push_hi, r["max_push_staleness"]
assert r["eval_accuracy"] >= 0.6, r["eval_accuracy"]
PY
}

case "$case_name" in
  bound0)
    staleness_job "$TMP/job.yaml" "max_staleness: 0"
    run_local "$TMP/out.json" "$TMP/job.yaml"
    # One closure at a time: no push lands between a step's pull and push.
    check "$TMP/out.json" 0 0 0
    ;;
  bound2)
    staleness_job "$TMP/job.yaml" "max_staleness: 2, staleness_lr: inverse"
    run_local "$TMP/out.json" "$TMP/job.yaml"
    # Up to 3 closures at once: the PS measures stale pushes, at most the
    # steps the overlapping closures (2 before, 2 after) can push.
    check "$TMP/out.json" 2 1 20
    ;;
  *) fail "unknown case '$case_name'" ;;
esac
echo PASS
