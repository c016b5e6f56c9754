#!/usr/bin/env bash
# psctl export --format onnx end to end. Trains, on 2 PS x 1 worker under
# `psctl local` with a checkpoint at the end, a small Fashion-MNIST MLP
# (relu, tanh, gelu, a bare sigmoid, softmax cross-entropy) and a small CNN
# (conv2d valid and same, batch_norm, max_pool, avg_pool, flatten, dropout),
# exports each checkpoint, runs the file with onnxruntime on 256 eval rows
# and checks its logits and predictions (softmax) against pscluster's own —
# worker/core's Model forward pass on the restored variables
# (checkpoint_predict) — within 1e-5. Then a model with a hashed embedding
# table must be refused: exit 2, a message naming the embedding, no file.
#
# usage: onnx_export_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR CHECKPOINT_PREDICT
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
PREDICT="$(abs "$5")"
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

# check NAME: exports $TMP/ckpt-NAME and compares onnxruntime with pscluster.
check() {
  local name="$1" rc=0
  timeout 120 "$PSCTL" export "$TMP/ckpt-$name" --format onnx -o "$TMP/$name.onnx" \
    > "$TMP/$name.export" 2>&1 || rc=$?
  cat "$TMP/$name.export"
  ((rc == 0)) || fail "$name: psctl export exited $rc"
  timeout 120 "$PREDICT" "$TMP/ckpt-$name" 256 "$TMP/$name.ref" ||
    fail "$name: checkpoint_predict failed"
  timeout 120 /usr/bin/python3 - "$TMP/$name.onnx" "$TMP/$name.ref" "$name" <<'PY' ||
import sys
import numpy as np
import onnxruntime as ort

model, ref, name = sys.argv[1:4]
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
width = sess.get_inputs()[0].shape[1]
x = np.fromfile(ref + ".inputs", dtype=np.float32).reshape(-1, width)
logits, predictions = sess.run(["logits", "predictions"], {"input": x})
want_logits = np.fromfile(ref + ".logits", dtype=np.float32).reshape(logits.shape)
want_pred = np.fromfile(ref + ".predictions", dtype=np.float32).reshape(predictions.shape)
assert x.shape[0] == 256, x.shape
d_logits = float(np.max(np.abs(logits - want_logits)))
d_pred = float(np.max(np.abs(predictions - want_pred)))
# A model that predicts one class for everything would compare equal to a
# wrong export just as well: the trained model must separate the classes.
classes = len(set(np.argmax(want_logits, axis=1).tolist()))
print("%s: %d rows, max |logits diff| %.2e, max |predictions diff| %.2e, %d classes predicted"
      % (name, x.shape[0], d_logits, d_pred, classes))
assert d_logits <= 1e-5 and d_pred <= 1e-5, "%s: onnxruntime differs from pscluster" % name
assert classes >= 5, "%s: the model predicts only %d classes" % (name, classes)
PY
    fail "$name: the exported model does not give pscluster's predictions"
}

write_job "$TMP/mlp.yaml" name=onnx-mlp seed=3 train_limit=3000 eval_limit=512 \
  layers="[{dense: {units: 32, activation: relu}}, {dense: {units: 24, activation: tanh}}, {dense: {units: 16, activation: gelu}}, sigmoid, {dense: {units: 10}}]" \
  checkpoint="{dir: $TMP/ckpt-mlp}"
train mlp "$TMP/mlp.yaml"
check mlp

write_job "$TMP/cnn.yaml" name=onnx-cnn seed=4 train_limit=2000 eval_limit=512 \
  layers="[{conv2d: {filters: 4, kernel: 3, activation: relu}}, {batch_norm: {}}, {max_pool: {pool: 2}}, {conv2d: {filters: 6, kernel: 3, stride: 2, padding: same}}, {avg_pool: {pool: 3, stride: 2, padding: same}}, {batch_norm: {momentum: 0.9}}, flatten, {dense: {units: 16, activation: relu}}, {dropout: {rate: 0.3}}, {dense: {units: 10}}]" \
  checkpoint="{dir: $TMP/ckpt-cnn}"
sed -i 's/^  inputs: {dense: 784}$/  inputs: {image: [28, 28, 1]}/' "$TMP/cnn.yaml"
grep -q 'image: \[28, 28, 1\]' "$TMP/cnn.yaml" || fail "could not make the CNN job's input an image"
train cnn "$TMP/cnn.yaml"
check cnn

# Refused: a hashed embedding table.
cat > "$TMP/ctr.yaml" <<YAML
name: onnx-ctr
seed: 5
model:
  inputs:
    categorical:
      - {name: f0, hashed: true, embedding_dim: 4}
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
rc=0
timeout 120 "$PSCTL" export "$TMP/ckpt-ctr" --format onnx -o "$TMP/ctr.onnx" \
  > "$TMP/ctr.export" 2>&1 || rc=$?
cat "$TMP/ctr.export"
((rc == 2)) || fail "exporting a hashed embedding model exited $rc, not 2"
grep -q "categorical\[0\] 'f0' (a hashed embedding table)" "$TMP/ctr.export" ||
  fail "the refusal does not name the embedding table"
[[ ! -e "$TMP/ctr.onnx" && ! -e "$TMP/ctr.onnx.tmp" ]] || fail "a refused export left a file"
echo PASS
