#!/usr/bin/env bash
# Re-sharding restore: the MovieLens CTR job (a partitioned embedding, hash
# tables, dense layers, Adam slots) trains 2 epochs on 2 PS and checkpoints;
# the same job resumed from that checkpoint on 3 PS trains a third epoch, then
# on 1 PS a fourth. Every run must resume (not start over), lay the variables
# out for its own PS count, keep every hash-table row, and continue the loss.
#
# usage: reshard_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR EXAMPLE_YAML MOVIELENS_CSV
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
EXAMPLE="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"

[[ $# -ge 6 && -r "$6" ]] ||
  fail "data/movielens/movielens.csv is missing: ./setup.sh exports it from r-cran-dslabs"
CSV="$(abs "$6")"


# run EPOCHS NUM_PS OUT: the example, with its checkpoints in $TMP/ckpt.
run() {
  sed -e "s|path: data/movielens/movielens.csv|path: $CSV|" \
      -e "s|^  epochs: 3|  epochs: $1|" "$EXAMPLE" > "$TMP/job.yaml"
  printf 'checkpoint: {dir: %s, keep: 2}\n' "$TMP/ckpt" >> "$TMP/job.yaml"
  timeout 600 "$PSCTL" local "$TMP/job.yaml" --ps "$2" --workers 2 --describe --output json \
    "${BIN_FLAGS[@]}" > "$3" 2> "$3.err" &
  local pid=$!
  STARTED_PIDS+=("$pid")
  local rc=0
  wait "$pid" || rc=$?
  ((rc == 0)) || { tail -30 "$3.err" >&2; fail "run on $2 PS exited $rc"; }
}

run 2 2 "$TMP/ps2.json"
run 3 3 "$TMP/ps3.json"
run 4 1 "$TMP/ps1.json"

python3 - "$TMP" <<'PY' || fail "re-sharding"
import json, sys
tmp = sys.argv[1]
runs = [json.load(open(f"{tmp}/ps{n}.json")) for n in (2, 3, 1)]
for r, num_ps, epochs in zip(runs, (2, 3, 1), (2, 3, 4)):
    assert r["state"] == "SUCCEEDED", r
    assert r["ps"] == num_ps and len(r["epochs"]) == epochs, (num_ps, r["epochs"])
    d = r["describe"]
    assert len(d["ps"]) == num_ps, d["ps"]
    by_name = {v["name"]: v for v in d["variables"]}
    movie = by_name["embedding/movie"]
    assert len(movie["shards"]) == num_ps, movie
    rows = sum(s["rows"] for s in movie["shards"])
    # Every movie's row survives each restore (9,066 movies in the data).
    assert rows == 9066, f"{num_ps} PS: movie table holds {rows} rows"
    assert all(s["rows"] > 0 for s in movie["shards"]), movie
    assert {s["ps"] for v in d["variables"] for s in v["shards"]} == set(range(num_ps))
    losses = [round(e["train_loss"], 4) for e in r["epochs"]]
    print(f"{num_ps} PS: resumed from checkpoint {r['resumed_from_checkpoint']}, "
          f"train loss per epoch {losses}, eval AUC {r['eval_auc']:.4f}, movie rows {rows}")
assert runs[0]["resumed_from_checkpoint"] == -1, "the first run must start fresh"
for prev, cur in zip(runs, runs[1:]):
    assert cur["resumed_from_checkpoint"] >= 0, "did not resume from the checkpoint"
    # The history carries over, and the new epoch continues the loss curve:
    # a model that restarted from scratch would be back near its first
    # epoch's loss (~0.62 after one epoch, 0.69 untrained).
    assert cur["epochs"][:len(prev["epochs"])] == prev["epochs"], "history changed"
    new, last = cur["epochs"][-1]["train_loss"], prev["epochs"][-1]["train_loss"]
    first = prev["epochs"][0]["train_loss"]
    assert new < first and new < last * 1.05, f"loss jumped across the restore: {last} -> {new}"
    assert cur["eval_auc"] > prev["eval_auc"] - 0.02, (prev["eval_auc"], cur["eval_auc"])
print("OK")
PY
