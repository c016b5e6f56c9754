#!/usr/bin/env bash
# Streaming input keeps a worker's memory flat: one worker (and one PS)
# streams a Criteo-layout TSV set about 30x its read budget (prefetch_bytes
# + shuffle_buffer records, ~0.4 MB), and its peak RSS (VmHWM from
# /proc/PID/status, read while the job runs) must stay within 8 MiB of the
# peak of the same job over one tenth of the files. (An in-memory load of
# the large set would hold all of it.)
#
# usage: streaming_memory_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR CRITEO_GEN
# Every process started is stopped by pid on exit; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
CRITEO_GEN="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA="$TMP/criteo"
SHARDS=10
BOUND_KB=$((8 * 1024))

timeout 60 "$CRITEO_GEN" --out "$DATA" --rows 50000 --holdout_rows 200 --shards "$SHARDS" \
  --format tsv --compress none --threads 2 > "$TMP/gen.out" 2>&1 ||
  { cat "$TMP/gen.out" >&2; fail "criteo_gen failed"; }

# memory_job FILE TRAIN_PATH
memory_job() {
  python3 - "$@" <<'PY'
import sys
out, train = sys.argv[1:3]
cols = ", ".join(["{label: int}"] + ["{I%d: int}" % i for i in range(1, 14)] +
                 ["{C%d: string}" % i for i in range(1, 27)])
def source(path):
    return f"""
    format: csv
    path: {path}
    delimiter: "\\t"
    header: false
    columns: [{cols}]
    label: {{column: label}}
    dense_columns: [{", ".join("I%d" % i for i in range(1, 14))}]
    stream: {{shard: data, prefetch_bytes: 262144, shuffle_buffer: 500}}"""
open(out, "w").write(f"""name: memory
strategy: parameter_server
model:
  inputs:
    dense: 13
    categorical: [{{name: C1, hashed: true, embedding_dim: 4}}]
  layers: [{{dense: {{units: 1}}}}]
  loss: sigmoid_cross_entropy
optimizer: {{type: sgd, learning_rate: 0.01}}
eval: none
data:
  train:{source(train)}
  eval:{source(sys.argv[3] if len(sys.argv) > 3 else train)}
  per_replica_batch: 500
train: {{epochs: 1, steps_per_closure: 4, closures_per_worker: 1}}
""")
PY
}

# peak_kb NAME: runs the job of $TMP/NAME.yaml on 1 PS x 1 worker and prints
# the worker's VmHWM (kB) last seen while it ran.
peak_kb() {
  local name="$1" hwm=0 pid="" v rc=0
  local_in_background "$TMP/$name.json" "$TMP/$name.err" 180 "$TMP/$name.yaml" --ps 1 \
    --workers 1 --output json "${BIN_FLAGS[@]}"
  for _ in $(seq 1 3000); do
    [[ -n "$pid" ]] || pid="$(pgrep -P "$PSCTL_PID" -f worker_server | head -n 1 || true)"
    if [[ -n "$pid" ]]; then
      v="$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)"
      [[ -n "$v" ]] && ((v > hwm)) && hwm="$v"
    fi
    kill -0 "$TPID" 2>/dev/null || break
    sleep 0.05
  done
  wait "$TPID" || rc=$?
  ((rc == 0)) || { tail -20 "$TMP/$name.err" "$TMP/$name.json" >&2; fail "$name: psctl exited $rc"; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["state"] == "SUCCEEDED" and r["examples"] == int(sys.argv[2]), (r["state"], r["examples"])' \
    "$TMP/$name.json" "$2" >&2 || fail "$name: wrong result"
  ((hwm > 0)) || fail "$name: no VmHWM read"
  echo "$hwm"
}

memory_job "$TMP/small.yaml" "$DATA/train-00000-of-000$SHARDS.tsv"
memory_job "$TMP/large.yaml" "'$DATA/train-*.tsv'" "$DATA/train-00000-of-000$SHARDS.tsv"
bytes="$(cat "$DATA"/train-*.tsv | wc -c)"
small="$(peak_kb small 5000)"
large="$(peak_kb large 50000)"
echo "train set $((bytes / 1024)) kB (budget ~400 kB): worker VmHWM over 1/$SHARDS of it" \
     "$small kB, over all of it $large kB (growth $((large - small)) kB, bound $BOUND_KB kB)"
((large - small <= BOUND_KB)) || fail "the worker's peak RSS grew by $((large - small)) kB"
echo PASS
