#!/usr/bin/env bash
# Streaming input (docs/streaming_input.md) end to end on 2 PS x 2 workers
# under `psctl local`: criteo_gen writes 4 train shards and 1 holdout shard
# of a Criteo-layout log as TFRecord (tf.Example) and plain TSV, and each
# job streams them, never loading them whole.
#
# Cases:
#   tfrecord_file  TFRecord, shard: file (one closure per file, the paths a
#                  glob); a worker killed with kill -9 once 20 % of the steps
#                  are done (progress from `psctl list`, never a clock)
#   tsv_data       TSV, shard: data (record ranges, the workers seeking to
#                  them); the coordinator killed at 30 %, resuming from its
#                  checkpoint (the input fingerprint matches)
#   changed_files  tsv_data's checkpoint resumed over 3 of the 4 files:
#                  refused (the input fingerprint differs)
#   corrupt_skip   TSV with a malformed line, corrupt_records: skip: counted
#   corrupt_fail   the same with corrupt_records: fail: the job FAILED,
#                  naming the file and line
# Each run that succeeds must show: SUCCEEDED, steps == total_steps, every PS
# applied each step once (ps_applied_steps == steps), and every record
# trained once per epoch: examples == epochs x the train rows.
#
# usage: streaming_input_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR CRITEO_GEN
# Every process started is stopped by pid on exit; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
CRITEO_GEN="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA="$TMP/criteo"
ROWS=6000
EPOCHS=2

timeout 60 "$CRITEO_GEN" --out "$DATA" --rows "$ROWS" --holdout_rows 500 --shards 4 \
  --format both --compress none --threads 2 > "$TMP/gen.out" 2>&1 ||
  { cat "$TMP/gen.out" >&2; fail "criteo_gen failed"; }

# stream_job FILE NAME FORMAT TRAIN_PATH EVAL_PATH STREAM [CHECKPOINT_DIR]
stream_job() {
  python3 - "$@" <<'PY'
import sys
out, name, fmt, train, evalp, stream = sys.argv[1:7]
ckpt = sys.argv[7] if len(sys.argv) > 7 else ""
cols = ["{label: int}"] + ["{I%d: int}" % i for i in range(1, 14)] + \
       ["{C%d: string}" % i for i in range(1, 27)]
dense = ", ".join("{column: I%d, transform: log1p}" % i for i in range(1, 14))
extra = "" if fmt == "tfrecord" else '\n    delimiter: "\\t"\n    header: false'
def source(path):
    return f"""
    format: {fmt}
    path: {path}{extra}
    columns: [{", ".join(cols)}]
    label: {{column: label}}
    dense_columns: [{dense}]
    stream: {stream}"""
feats = "\n".join("      - {name: C%d, hashed: true, embedding_dim: 4}" % i for i in range(1, 7))
yaml = f"""name: {name}
strategy: parameter_server
seed: 3
model:
  inputs:
    dense: 13
    categorical:
{feats}
  layers:
    - dense: {{units: 16, activation: relu}}
    - dense: {{units: 1}}
  loss: sigmoid_cross_entropy
optimizer: {{type: adam, learning_rate: 0.002}}
data:
  train:{source(train)}
  eval:{source(evalp)}
  per_replica_batch: 25
train: {{epochs: {sys.argv[8] if len(sys.argv) > 8 else 2}, steps_per_closure: 10, closures_per_worker: 1}}
fault_tolerance: {{max_attempts: 20, health_check_interval_s: 0.2}}
"""
if ckpt:
    yaml += f"checkpoint: {{dir: {ckpt}, every_steps: 40, keep: 2}}\n"
open(out, "w").write(yaml)
PY
}

# check RESULT_JSON NAME [corrupt records expected]
check() {
  python3 - "$1" "$2" "$ROWS" "$EPOCHS" "${3:-0}" <<'PY' || { tail -40 "$TMP/$2.err" >&2; fail "$2: wrong result"; }
import json, sys
r = json.load(open(sys.argv[1]))
name, rows, epochs, corrupt = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
print("  %s: %s, steps %d/%d, applied %s, examples %d, corrupt %d, lost %d, restarts %s, "
      "eval AUC %.3f" % (name, r["state"], r["steps"], r["total_steps"], r["ps_applied_steps"],
      r["examples"], r["corrupt_records"], r["lost_steps"], r.get("restarts"), r["eval_auc"] or 0))
assert r["state"] == "SUCCEEDED", r.get("error")
assert r["steps"] == r["total_steps"] > 0, (r["steps"], r["total_steps"])
assert r["ps_applied_steps"] == [r["steps"]] * 2, r["ps_applied_steps"]
assert r["steps_trained"] - r["steps"] == r["lost_steps"]
# Every record once per epoch: the examples the closures trained.
assert r["examples"] == epochs * rows, (r["examples"], epochs * rows)
assert r["corrupt_records"] == corrupt, r["corrupt_records"]
assert r["eval_auc"] and r["eval_auc"] > 0.55, r["eval_auc"]
PY
}

# at FRACTION: waits until the job has done FRACTION of its steps.
at() {
  wait_progress "$ADDRESS" "$1" 120 || fail "the job ended (or stalled) before $1 of its steps"
  echo "  at $(job_progress "$ADDRESS")"
}

kill_child() {  # kill_child PATTERN: kill -9 one child of psctl matching PATTERN
  local victim
  victim="$(pgrep -P "$PSCTL_PID" -f "$1" | head -n 1 || true)"
  [[ -n "$victim" ]] || fail "no $1 to kill"
  echo "  kill -9 $victim ($1)"
  kill -9 "$victim" 2>/dev/null || true
}

run() {  # run NAME KILL_PATTERN FRACTION
  local name="$1" rc=0
  local_in_background "$TMP/$name.json" "$TMP/$name.err" 240 "$TMP/$name.yaml" --ps 2 \
    --workers 2 --output json "${BIN_FLAGS[@]}"
  if [[ -n "$2" ]]; then at "$3"; kill_child "$2"; fi
  wait "$TPID" || rc=$?
  ((rc == 0)) || { tail -40 "$TMP/$name.err" "$TMP/$name.json" >&2; fail "$name: psctl exited $rc"; }
}

echo "=== tfrecord_file"
stream_job "$TMP/tfrecord_file.yaml" tfrecord_file tfrecord "'$DATA/train-*.tfrecord'" \
  "$DATA/holdout-00000-of-00001.tfrecord" "{shard: file, prefetch_bytes: 65536, shuffle_buffer: 200}" \
  "$TMP/tfrecord_file-ckpt"
run tfrecord_file worker_server 0.2
check "$TMP/tfrecord_file.json" tfrecord_file
# The kill must have met the job: the killed worker's closure was retried
# (the job log's retry event: the worker usually holds a file's closure at
# 20 %), or, when it died between two closures, the health checks marked it
# down (worker_down) or psctl restarted it before the job ended (restarts
# wait out a backoff, so a short rest of the job may finish first).
# (A file-sharded closure is logged as "records [B, E) of FILE".)
if grep -raqE "training closure [0-9]+ \(epoch [0-9]+, (examples|records) \[[0-9]+, [0-9]+\)( of [^)]*)?\) (failed on|was in flight on) worker" \
  "$TMP/tfrecord_file-ckpt"; then
  echo "  a closure was retried"
elif grep -raqE "worker [0-9]+ \([^)]*\) is not answering" "$TMP/tfrecord_file-ckpt"; then
  echo "  the killed worker was marked down (it held no closure)"
else
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert any(k.startswith("worker") and v > 0 for k, v in r["restarts"].items()), r["restarts"]' \
    "$TMP/tfrecord_file.json" ||
    fail "tfrecord_file: the killed worker was neither retried, marked down nor restarted"
fi

echo "=== tsv_data"
stream_job "$TMP/tsv_data.yaml" tsv_data csv "['$DATA/train-0000[0-1]-*.tsv', '$DATA/train-0000[2-3]-*.tsv']" \
  "$DATA/holdout-00000-of-00001.tsv" "{shard: data, prefetch_bytes: 65536, shuffle_buffer: 100}" \
  "$TMP/tsv_data-ckpt"
run tsv_data coordinator 0.3
check "$TMP/tsv_data.json" tsv_data
# The restarted coordinator resumed from a checkpoint (same files: the
# fingerprint matched) and re-ran only the closures after it.
grep -raq "restored checkpoint" "$TMP/tsv_data-ckpt" ||
  fail "tsv_data: the restarted coordinator did not resume from a checkpoint"

echo "=== changed_files"
# tsv_data's checkpoint directory resumed over another file set (a file
# less): the finished splits would name other records, so it is refused,
# naming both fingerprints.
stream_job "$TMP/changed_files.yaml" tsv_data csv "'$DATA/train-0000[0-2]-*.tsv'" \
  "$DATA/holdout-00000-of-00001.tsv" "{shard: data}" "$TMP/tsv_data-ckpt"
rc=0
timeout 120 "$PSCTL" local "$TMP/changed_files.yaml" --ps 2 --workers 2 --output json \
  "${BIN_FLAGS[@]}" > "$TMP/changed_files.json" 2> "$TMP/changed_files.err" || rc=$?
((rc != 0)) || fail "changed_files: the job was not refused"
python3 - "$TMP/changed_files.json" <<'PY' || { tail -20 "$TMP/changed_files.err" >&2; fail "changed_files: wrong failure"; }
import json, sys
r = json.load(open(sys.argv[1]))
print("  changed_files: %s: %s" % (r["state"], r["error"][:300]))
assert r["state"] == "FAILED", r["state"]
assert "was taken over the train input [files=4 " in r["error"], r["error"]
assert "the job's input now is [files=3 " in r["error"], r["error"]
PY

echo "=== corrupt_skip"
mkdir -p "$TMP/bad"
cp "$DATA"/train-*.tsv "$TMP/bad/"
echo "1	not-a-number" >> "$TMP/bad/train-00002-of-00004.tsv"  # line ROWS/4 + 1 of that file
stream_job "$TMP/corrupt_skip.yaml" corrupt_skip csv "'$TMP/bad/train-*.tsv'" \
  "$DATA/holdout-00000-of-00001.tsv" "{shard: data, corrupt_records: skip}" "$TMP/skip-ckpt"
run corrupt_skip "" ""
# Counted once per epoch (the line is an extra record, so a unit of one
# record: one step of no example per epoch).
check "$TMP/corrupt_skip.json" corrupt_skip "$EPOCHS"
# The first corrupt record is named, with its file and line, in the job's
# events (kept in the job log beside the checkpoints).
grep -raq "train-00002-of-00004.tsv, line $((ROWS / 4 + 1))" "$TMP/skip-ckpt" ||
  fail "corrupt_skip: the corrupt record is not named in the job log"

echo "=== corrupt_fail"
stream_job "$TMP/corrupt_fail.yaml" corrupt_fail csv "'$TMP/bad/train-*.tsv'" \
  "$DATA/holdout-00000-of-00001.tsv" "{shard: data, corrupt_records: fail}"
rc=0
timeout 120 "$PSCTL" local "$TMP/corrupt_fail.yaml" --ps 2 --workers 2 --output json \
  "${BIN_FLAGS[@]}" > "$TMP/corrupt_fail.json" 2> "$TMP/corrupt_fail.err" || rc=$?
((rc != 0)) || fail "corrupt_fail: the job did not fail"
python3 - "$TMP/corrupt_fail.json" "$ROWS" <<'PY' || { tail -20 "$TMP/corrupt_fail.err" >&2; fail "corrupt_fail: wrong failure"; }
import json, sys
r = json.load(open(sys.argv[1]))
print("  corrupt_fail: %s: %s" % (r["state"], r["error"][:300]))
assert r["state"] == "FAILED", r["state"]
assert "train-00002-of-00004.tsv, line %d" % (int(sys.argv[2]) // 4 + 1) in r["error"], r["error"]
PY
echo PASS
