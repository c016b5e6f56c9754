#!/usr/bin/env bash
# strategy: central_storage (synchronous PS) against the asynchronous
# strategy on the same jobs, under `psctl local` with 2 PS x 2 workers:
#   - Fashion-MNIST MLP (2 epochs): eval accuracy within 0.01 of async;
#   - examples/movielens_ctr.yaml (embeddings, hash tables): eval AUC within
#     0.01 of async;
# and for each synchronous run: 2 replicas, global batch = 2 x per-replica,
# one update per global step on every PS (applied == steps == ceil(examples /
# global batch) x epochs).
#
# usage: sync_strategy_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR MOVIELENS_YAML MOVIELENS_CSV
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
MOVIELENS_YAML="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
[[ -r "$DATA/train-images-idx3-ubyte.gz" ]] ||
  fail "$DATA is missing: ./setup.sh installs dataset-fashion-mnist"
[[ $# -ge 6 && -r "$6" ]] ||
  fail "data/movielens/movielens.csv is missing: ./setup.sh exports it from r-cran-dslabs"
CSV="$(abs "$6")"

# run NAME YAML: psctl local on 2 PS x 2 workers, JSON result in $TMP/NAME.json.
run() {
  local rc=0
  timeout 600 "$PSCTL" local "$2" --ps 2 --workers 2 --describe --output json "${BIN_FLAGS[@]}" \
    > "$TMP/$1.json" 2> "$TMP/$1.err" &
  local pid=$!
  STARTED_PIDS+=("$pid")
  wait "$pid" || rc=$?
  ((rc == 0)) || { tail -30 "$TMP/$1.err" >&2; fail "$1: psctl local exited $rc"; }
}

for strategy in parameter_server central_storage; do
  cat > "$TMP/fmnist_$strategy.yaml" <<YAML
name: fmnist-$strategy
strategy: $strategy
seed: 7
model:
  inputs: {dense: 784}
  layers:
    - dense: {units: 64, activation: relu}
    - dense: {units: 10}
optimizer: {type: adam, learning_rate: 0.002}
data:
  train:
    images: $DATA/train-images-idx3-ubyte.gz
    labels: $DATA/train-labels-idx1-ubyte.gz
  eval:
    images: $DATA/t10k-images-idx3-ubyte.gz
    labels: $DATA/t10k-labels-idx1-ubyte.gz
  per_replica_batch: 64
train: {epochs: 2, steps_per_closure: 10, closures_per_worker: 1}
YAML
  sed -e "s|path: data/movielens/movielens.csv|path: $CSV|" \
      -e "s|^strategy: parameter_server|strategy: $strategy|" \
      "$MOVIELENS_YAML" > "$TMP/movielens_$strategy.yaml"
  grep -q "^strategy: $strategy" "$TMP/movielens_$strategy.yaml" ||
    fail "could not set the strategy of $MOVIELENS_YAML"
  run "fmnist_$strategy" "$TMP/fmnist_$strategy.yaml"
  run "movielens_$strategy" "$TMP/movielens_$strategy.yaml"
done

python3 - "$TMP" <<'PY' || fail "central_storage does not match the asynchronous strategy"
import json, math, os, sys
tmp = sys.argv[1]
def load(name):
    return json.load(open(os.path.join(tmp, name + ".json")))
for job, metric, train_examples in (("fmnist", "eval_accuracy", 60000), ("movielens", "eval_auc", None)):
    a, s = load(job + "_parameter_server"), load(job + "_central_storage")
    for r in (a, s):
        assert r["state"] == "SUCCEEDED", r
    assert s["strategy"] == "central_storage", s["strategy"]
    assert s["replicas"] == 2 and s["global_batch"] == 2 * s["per_replica_batch"], s
    epochs = len(s["epochs"])
    if train_examples is not None:
        expected = epochs * math.ceil(train_examples / s["global_batch"])
        assert s["total_steps"] == expected, (s["total_steps"], expected)
    # One update per global step on every PS, however many replicas pushed.
    assert s["steps"] == s["total_steps"], s
    applied = [p["applied_steps"] for p in s["describe"]["ps"]]
    assert applied == [s["steps"]] * 2, (applied, s["steps"])
    # The asynchronous job takes a step per replica batch: twice as many.
    assert a["steps"] == 2 * s["steps"] or abs(a["steps"] - 2 * s["steps"]) <= 2 * epochs, \
        (a["steps"], s["steps"])
    print("%-9s %s: async %.4f (%d steps, %.0f ex/s)  central_storage %.4f (%d steps, %.0f ex/s)" % (
        job, metric, a[metric], a["steps"], a["examples_per_sec"], s[metric], s["steps"],
        s["examples_per_sec"]))
    assert abs(a[metric] - s[metric]) <= 0.01, "%s: async %.4f vs central_storage %.4f" % (
        metric, a[metric], s[metric])
print("OK")
PY
