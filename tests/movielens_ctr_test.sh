#!/usr/bin/env bash
# examples/movielens_ctr.yaml end to end on 2 PS x 2 workers with the real
# MovieLens ratings: test AUC >= 0.78, and `--describe` shows the embedding
# shards spread over both PS.
#
# usage: movielens_ctr_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR EXAMPLE_YAML MOVIELENS_CSV
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


# The example as it is, but reading the CSV from where the test finds it.
sed "s|path: data/movielens/movielens.csv|path: $CSV|" "$EXAMPLE" > "$TMP/movielens_ctr.yaml"
grep -q "path: $CSV" "$TMP/movielens_ctr.yaml" || fail "could not point the example at $CSV"

timeout 600 "$PSCTL" local "$TMP/movielens_ctr.yaml" --ps 2 --workers 2 --describe --output json \
  "${BIN_FLAGS[@]}" > "$TMP/result.json" 2> "$TMP/stderr" &
PID=$!
STARTED_PIDS+=("$PID")
rc=0
wait "$PID" || rc=$?
((rc == 0)) || { tail -30 "$TMP/stderr" >&2; fail "psctl local exited $rc"; }

python3 - "$TMP/result.json" <<'PY' || fail "bad MovieLens result"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["state"] == "SUCCEEDED", r
print("eval AUC per epoch:", [round(e["eval_auc"], 4) for e in r["epochs"]],
      "logloss %.4f" % r["eval_loss"], "examples/s %.0f" % r["examples_per_sec"])
assert r["eval_auc"] >= 0.78, "test AUC %.4f < 0.78" % r["eval_auc"]
d = r["describe"]
by_name = {v["name"]: v for v in d["variables"]}
user = by_name["embedding/user"]
assert user["kind"] == "embedding" and user["shape"] == [672, 16], user
assert sorted(s["ps"] for s in user["shards"]) == [0, 1], user
assert sum(s["rows"] for s in user["shards"]) == 672, user
for name in ("embedding/movie", "embedding/genres", "embedding/decade"):
    t = by_name[name]
    assert t["kind"] == "hash_table", t
    assert sorted(s["ps"] for s in t["shards"]) == [0, 1], t
movie_rows = sum(s["rows"] for s in by_name["embedding/movie"]["shards"])
assert 8000 < movie_rows <= 9066, "movie table holds %d rows" % movie_rows
loads = [p["parameter_bytes"] + p["slot_bytes"] for p in d["ps"]]
assert len(loads) == 2 and min(loads) > 0.3 * max(loads), "unbalanced PS load %s" % loads
print("OK: AUC %.4f; user shards on PS %s; movie rows %d; PS bytes %s" %
      (r["eval_auc"], [s["ps"] for s in user["shards"]], movie_rows, loads))
PY
