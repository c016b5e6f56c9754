#!/usr/bin/env bash
# psctl export --format onnx end to end. Trains, on 2 PS x 1 worker under
# `psctl local` with a checkpoint at the end, a small Fashion-MNIST MLP
# (relu, tanh, gelu, a bare sigmoid, softmax cross-entropy), a small CNN
# (conv2d valid and same, batch_norm, max_pool, avg_pool, flatten, dropout)
# and a synthetic CTR model with dense inputs, a hashed embedding table
# (keys spread over the whole uint64 range, so half are negative as int64)
# and a fixed vocabulary combined by mean; exports each checkpoint, runs the
# file with onnxruntime on eval rows (onnx_compare.py) and checks its
# logits and predictions against pscluster's own — worker/core's Model
# forward pass on the restored variables, its ids looked up as a worker's
# eval step does (checkpoint_predict) — within 1e-5. The CTR model's eval
# keys must all be in the checkpoint (no row created by the lookups).
# (tests/onnx_export_ctr_test.sh does the same for MovieLens.)
#
# usage: onnx_export_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR CHECKPOINT_PREDICT ONNX_COMPARE
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
PREDICT="$(abs "$5")"
COMPARE="$(abs "$6")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist

require_fashion_mnist "$DATA"
/usr/bin/python3 -c 'import numpy, onnxruntime' 2>/dev/null ||
  fail "python3 cannot import numpy and onnxruntime: run ./setup.sh (python3-numpy, PyPI onnxruntime)"

# train NAME JOB: runs the job to completion (at most 300 s).
train() {
  local rc=0
  timeout 300 "$PSCTL" local "$2" --ps 2 --workers 1 --output json "${BIN_FLAGS[@]}" \
    --run_dir "$TMP/run-$1" > "$TMP/$1.json" 2> "$TMP/$1.err" &
  local tpid=$!
  STARTED_PIDS+=("$tpid")
  wait "$tpid" || rc=$?
  if ((rc != 0)); then
    tail -n 30 "$TMP/$1.err" >&2
    ((rc != 124)) || fail "$1: psctl local did not finish within 300 s"
    fail "$1: psctl local exited $rc"
  fi
}

# check NAME ROWS [COMPARE FLAGS...]: exports $TMP/ckpt-NAME and compares
# onnxruntime with pscluster on ROWS eval rows.
check() {
  local name="$1" rows="$2" rc=0
  shift 2
  timeout 120 "$PSCTL" export "$TMP/ckpt-$name" --format onnx -o "$TMP/$name.onnx" \
    > "$TMP/$name.export" 2>&1 || rc=$?
  cat "$TMP/$name.export"
  ((rc == 0)) || fail "$name: psctl export exited $rc"
  timeout 120 "$PREDICT" "$TMP/ckpt-$name" "$rows" "$TMP/$name.ref" ||
    fail "$name: checkpoint_predict failed"
  timeout 120 /usr/bin/python3 "$COMPARE" "$TMP/$name.onnx" "$TMP/$name.ref" "$name" "$@" ||
    fail "$name: the exported model does not give pscluster's predictions"
}

write_job "$TMP/mlp.yaml" name=onnx-mlp seed=3 train_limit=3000 eval_limit=512 \
  layers="[{dense: {units: 32, activation: relu}}, {dense: {units: 24, activation: tanh}}, {dense: {units: 16, activation: gelu}}, sigmoid, {dense: {units: 10}}]" \
  checkpoint="{dir: $TMP/ckpt-mlp}"
train mlp "$TMP/mlp.yaml"
check mlp 256 --min_classes 5

write_job "$TMP/cnn.yaml" name=onnx-cnn seed=4 train_limit=2000 eval_limit=512 \
  layers="[{conv2d: {filters: 4, kernel: 3, activation: relu}}, {batch_norm: {}}, {max_pool: {pool: 2}}, {conv2d: {filters: 6, kernel: 3, stride: 2, padding: same}}, {avg_pool: {pool: 3, stride: 2, padding: same}}, {batch_norm: {momentum: 0.9}}, flatten, {dense: {units: 16, activation: relu}}, {dropout: {rate: 0.3}}, {dense: {units: 10}}]" \
  checkpoint="{dir: $TMP/ckpt-cnn}"
sed -i 's/^  inputs: {dense: 784}$/  inputs: {image: [28, 28, 1]}/' "$TMP/cnn.yaml"
grep -q 'image: \[28, 28, 1\]' "$TMP/cnn.yaml" || fail "could not make the CNN job's input an image"
train cnn "$TMP/cnn.yaml"
check cnn 256 --min_classes 5

# Categorical inputs: dense inputs, a hashed table (synthetic ids are
# XXH3 hashes: keys over all of uint64) and a fixed vocabulary, mean.
cat > "$TMP/ctr.yaml" <<YAML
name: onnx-ctr
seed: 5
model:
  inputs:
    dense: 3
    categorical:
      - {name: f0, hashed: true, embedding_dim: 4}
      - {name: f1, vocab_size: 50, embedding_dim: 3, combiner: mean}
  layers: [{dense: {units: 8, activation: relu}}, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
optimizer: {type: adagrad, learning_rate: 0.05}
data:
  train: {format: synthetic_ctr, num_examples: 2000, id_space: 1000, seed: 1}
  eval: {format: synthetic_ctr, num_examples: 200, id_space: 1000, seed: 2}
  per_replica_batch: 100
train: {epochs: 1, steps_per_closure: 5, closures_per_worker: 1}
checkpoint: {dir: $TMP/ckpt-ctr}
YAML
train ctr "$TMP/ctr.yaml"
check ctr 200 --min_spread 0.01
grep -q "ids/f0, ids/f1 (int64 \[batch, n\], -1 padding" "$TMP/ctr.export" ||
  fail "psctl export does not name the id inputs"
/usr/bin/python3 - "$TMP/ctr.ref.json" <<'PY' || fail "the CTR eval lookups created rows"
import json, sys
r = json.load(open(sys.argv[1]))
# The final checkpoint follows the last eval, whose lookups created every
# eval key's row: the graph holds them all.
assert r["created_rows"] == 0, r
PY
echo PASS
