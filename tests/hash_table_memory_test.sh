#!/usr/bin/env bash
# A hash-table job over a 10-million-id space (Zipf-distributed synthetic CTR
# data) with max_rows set: every shard stops at its bound, evicts, and the
# PS processes' resident memory stays flat once the bound is reached. The same
# job without max_rows is run for contrast: its PS memory keeps growing.
#
# usage: hash_table_memory_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR [NUM_EXAMPLES]
# Prints the RSS samples (KiB) of both runs. Every process started is stopped
# by pid on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
NUM_EXAMPLES="${5:-2000000}"
MAX_ROWS=50000
TMP="${TEST_TMPDIR:-$(mktemp -d)}"



# write_job FILE MAX_ROWS_LINE
write_job() {
  cat > "$1" <<YAML
name: synthetic-ctr-10m
seed: 3
model:
  inputs:
    categorical:
      - {name: f0, hashed: true, embedding_dim: 16 $2, eviction: lfu}
      - {name: f1, hashed: true, embedding_dim: 16 $2, eviction: lfu}
      - {name: f2, hashed: true, embedding_dim: 16 $2, eviction: age}
      - {name: f3, hashed: true, embedding_dim: 16 $2, eviction: age}
  layers: [{dense: {units: 32, activation: relu}}, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
optimizer: {type: adagrad, learning_rate: 0.05}
data:
  train: {format: synthetic_ctr, num_examples: $NUM_EXAMPLES, id_space: 10000000, zipf_exponent: 1.05, seed: 1}
  eval: {format: synthetic_ctr, num_examples: 20000, id_space: 10000000, zipf_exponent: 1.05, seed: 2}
  per_replica_batch: 1024
train: {epochs: 1, steps_per_closure: 20, closures_per_worker: 1}
YAML
}

# run_job JOB OUT_JSON RSS_FILE: runs psctl local --describe --output json and
# samples the summed VmRSS of its ps_server children every 0.25 s while the
# job is RUNNING (the PS free the job's tables when it ends, so samples of
# the shutdown would move the windows below).
run_job() {
  timeout 600 "$PSCTL" local "$1" --ps 2 --workers 2 --describe --output json "${BIN_FLAGS[@]}" \
    > "$2" 2> "$2.err" &
  local tpid=$!
  STARTED_PIDS+=("$tpid")
  : > "$3"
  local deadline=$((SECONDS + 600)) psctl="" address="" pids rss state
  while kill -0 "$tpid" 2>/dev/null && ((SECONDS < deadline)); do
    [[ -n "$psctl" ]] || psctl="$(pgrep -P "$tpid" | head -n 1 || true)"
    [[ -n "$address" ]] || address="$(local_coordinator "$2.err")"
    state=""
    [[ -n "$address" ]] && read -r _ _ state < <(job_progress "$address")
    if [[ -n "$psctl" && "$state" == RUNNING ]]; then
      pids="$(pgrep -P "$psctl" -f ps_server || true)"
      rss=0
      for p in $pids; do
        local kb
        kb="$(awk '/^VmRSS/{print $2}' "/proc/$p/status" 2>/dev/null || true)"
        rss=$((rss + ${kb:-0}))
      done
      ((rss > 0)) && echo "$SECONDS $rss" >> "$3"
    fi
    sleep 0.25
  done
  local rc=0
  wait "$tpid" || rc=$?
  ((rc == 0)) || { cat "$2.err" >&2; fail "psctl local exited $rc"; }
}

write_job "$TMP/bounded.yaml" ", max_rows: $MAX_ROWS"
write_job "$TMP/unbounded.yaml" ""
run_job "$TMP/bounded.yaml" "$TMP/bounded.json" "$TMP/bounded.rss"
run_job "$TMP/unbounded.yaml" "$TMP/unbounded.json" "$TMP/unbounded.rss"

python3 - "$TMP" "$MAX_ROWS" <<'PY' || fail "memory was not bounded"
import json, sys
tmp, max_rows = sys.argv[1], int(sys.argv[2])
def load(name):
    result = json.load(open(f"{tmp}/{name}.json"))
    assert result["state"] == "SUCCEEDED", result
    rss = [int(line.split()[1]) for line in open(f"{tmp}/{name}.rss")]
    assert len(rss) >= 8, f"only {len(rss)} RSS samples for {name}"
    return result, rss
bounded, rss_b = load("bounded")
unbounded, rss_u = load("unbounded")
tables = [v for v in bounded["describe"]["variables"] if v["kind"] == "hash_table"]
assert len(tables) == 4, tables
evicted = 0
for t in tables:
    for s in t["shards"]:
        assert s["rows"] <= max_rows, f"{s['name']} holds {s['rows']} rows > max_rows {max_rows}"
        evicted += s["evictions"]
assert evicted > 0, "no row was evicted: the bound was never reached"
live_u = sum(s["rows"] for v in unbounded["describe"]["variables"] if v["kind"] == "hash_table"
             for s in v["shards"])
# Flat once bounded: from 35% to 75% of the run — training; the end holds
# the eval phase and shutdown — (medians of 10% windows, to ride out
# sampling noise) the bounded run's PS memory barely moves, while the
# unbounded run's keeps growing.
def window(rss, lo, hi):
    part = sorted(rss[int(len(rss) * lo):max(int(len(rss) * hi), int(len(rss) * lo) + 1)])
    return part[len(part) // 2]
b_mid, b_late = window(rss_b, 0.3, 0.4), window(rss_b, 0.7, 0.8)
u_mid, u_late = window(rss_u, 0.3, 0.4), window(rss_u, 0.7, 0.8)
print(f"bounded:   PS RSS (2 PS, KiB) first {rss_b[0]}, at 35% {b_mid}, at 75% {b_late}, "
      f"peak {max(rss_b)}; {evicted} rows evicted, max_rows {max_rows} per shard")
print(f"unbounded: PS RSS (2 PS, KiB) first {rss_u[0]}, at 35% {u_mid}, at 75% {u_late}, "
      f"peak {max(rss_u)}; {live_u} live rows")
assert b_late <= b_mid * 1.10 + 4096, f"bounded RSS grew from {b_mid} to {b_late} KiB"
assert u_late - u_mid > 2 * (b_late - b_mid), "the unbounded run did not grow faster"
assert max(rss_u) > max(rss_b) * 1.2, "the unbounded run did not use more memory"
print("OK")
PY
