#!/usr/bin/env bash
# One MovieLens example job (a recommendation model: DCN-v2, ...) end to end
# on 2 PS x 2 workers with the real ratings: it succeeds, its holdout AUC
# reaches MIN_AUC, and every variable named in VARIABLE... exists.
#
# usage: movielens_model_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
#          EXAMPLE_YAML MOVIELENS_CSV MIN_AUC VARIABLE...
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
EXAMPLE="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"

[[ $# -ge 7 && -r "$6" ]] ||
  fail "data/movielens/movielens.csv is missing: ./setup.sh exports it from r-cran-dslabs"
CSV="$(abs "$6")"
MIN_AUC="$7"
shift 7
NAME="$(basename "$EXAMPLE" .yaml)"

# The example as it is, but reading the CSV from where the test finds it.
sed "s|path: data/movielens/movielens.csv|path: $CSV|" "$EXAMPLE" > "$TMP/$NAME.yaml"
grep -q "path: $CSV" "$TMP/$NAME.yaml" || fail "could not point the example at $CSV"

timeout 120 "$PSCTL" local "$TMP/$NAME.yaml" --ps 2 --workers 2 --describe --output json \
  "${BIN_FLAGS[@]}" > "$TMP/result.json" 2> "$TMP/stderr" &
PID=$!
STARTED_PIDS+=("$PID")
rc=0
wait "$PID" || rc=$?
((rc == 0)) || { tail -30 "$TMP/stderr" >&2; fail "psctl local exited $rc"; }

python3 - "$TMP/result.json" "$NAME" "$MIN_AUC" "$@" <<'PY' || fail "bad $NAME result"
import json, sys
r = json.load(open(sys.argv[1]))
name, min_auc, wanted = sys.argv[2], float(sys.argv[3]), sys.argv[4:]
assert r["state"] == "SUCCEEDED", r
names = {v["name"] for v in r["describe"]["variables"]}
for v in wanted:
    assert v in names, "%s: no variable %s among %s" % (name, v, sorted(names))
print("%s: eval AUC per epoch:" % name, [round(e["eval_auc"], 4) for e in r["epochs"]],
      "logloss %.4f" % r["eval_loss"], "examples/s %.0f" % r["examples_per_sec"])
assert r["eval_auc"] >= min_auc, "%s: test AUC %.4f < %.2f" % (name, r["eval_auc"], min_auc)
print("OK: %s AUC %.4f" % (name, r["eval_auc"]))
PY
