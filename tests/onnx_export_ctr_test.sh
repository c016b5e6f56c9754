#!/usr/bin/env bash
# psctl export --format onnx of examples/movielens_ctr.yaml: every kind of
# categorical input (user: a fixed vocabulary split over both PS by the
# partitioner; movie: hashed int ids; genres: hashed multi-valued strings,
# "|"-separated, combined by mean; decade: hashed with bucket_width 10).
#
# Trains the example, shortened (1 epoch on 40,000 ratings, eval on the
# first 5,000 of the holdout), on 2 PS x 2 workers with a final checkpoint;
# exports it (timed); runs pscluster's own eval forward pass on all 5,000
# eval rows (checkpoint_predict: its lookups go through the ParamRouter and
# the restored stores, as a worker's) and onnxruntime on the ids it fed
# (onnx_compare.py): logits and predictions within 1e-5. Then checks what a
# user of the file relies on:
#  - the ids: recomputed from the raw CSV with the recipe the model's
#    "pscluster.features" metadata and docs/onnx_export.md give (XXH3 from
#    Debian's python3-xxhash: holdout split, bucketing, string hashes, int64
#    keys), they equal the ids pscluster fed, row by row;
#  - every eval key is in the graph (checkpoint_predict created no row);
#  - a hashed key the checkpoint never held reads a zero row (the same
#    output as no id), and a fixed-vocabulary id outside [0, 672) fails the
#    run, as pscluster refuses it;
#  - the id inputs matter (all padding changes the predictions).
# Prints the file's size, the export's time and the largest differences.
#
# usage: onnx_export_ctr_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
#          CHECKPOINT_PREDICT ONNX_COMPARE EXAMPLE_YAML MOVIELENS_CSV
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
PREDICT="$(abs "$5")"
COMPARE="$(abs "$6")"
EXAMPLE="$(abs "$7")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
ROWS=5000

[[ $# -ge 8 && -r "$8" ]] ||
  fail "data/movielens/movielens.csv is missing: ./setup.sh exports it from r-cran-dslabs"
CSV="$(abs "$8")"
/usr/bin/python3 -c 'import numpy, onnxruntime, xxhash' 2>/dev/null ||
  fail "python3 cannot import numpy, onnxruntime and xxhash: run ./setup.sh (python3-numpy, python3-xxhash, PyPI onnxruntime)"

# The example, reading the CSV from where the test finds it, shortened.
sed -e "s|path: data/movielens/movielens.csv|path: $CSV|" \
    -e "s|^\(    split: {holdout_fraction: 0.2, seed: 7, part: train}\)$|\1\n    limit: 40000|" \
    -e "s|^\(    split: {holdout_fraction: 0.2, seed: 7, part: holdout}\)$|\1\n    limit: $ROWS|" \
    -e 's/^  epochs: 3$/  epochs: 1/' "$EXAMPLE" > "$TMP/ctr.yaml"
echo "checkpoint: {dir: $TMP/ckpt}" >> "$TMP/ctr.yaml"
[[ "$(grep -c "path: $CSV" "$TMP/ctr.yaml")" == 2 && "$(grep -c '^    limit: ' "$TMP/ctr.yaml")" == 2 ]] &&
  grep -q '^  epochs: 1$' "$TMP/ctr.yaml" || fail "could not shorten the example job"

rc=0
timeout 300 "$PSCTL" local "$TMP/ctr.yaml" --ps 2 --workers 2 --output json "${BIN_FLAGS[@]}" \
  --run_dir "$TMP/run" > "$TMP/result.json" 2> "$TMP/local.err" &
TPID=$!
STARTED_PIDS+=("$TPID")
wait "$TPID" || rc=$?
((rc == 0)) || { tail -n 30 "$TMP/local.err" >&2; fail "psctl local exited $rc"; }

start=$(date +%s.%N)
timeout 120 "$PSCTL" export "$TMP/ckpt" --format onnx -o "$TMP/ctr.onnx" > "$TMP/export" 2>&1 || rc=$?
end=$(date +%s.%N)
cat "$TMP/export"
((rc == 0)) || fail "psctl export exited $rc"
grep -q "ids/user, ids/movie, ids/genres, ids/decade (int64 \[batch, n\], -1 padding" \
  "$TMP/export" || fail "psctl export does not name the four id inputs"
echo "export: $(stat -c %s "$TMP/ctr.onnx") bytes in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s (psctl export, wall)"

timeout 120 "$PREDICT" "$TMP/ckpt" "$ROWS" "$TMP/ref" || fail "checkpoint_predict failed"
timeout 120 /usr/bin/python3 "$COMPARE" "$TMP/ctr.onnx" "$TMP/ref" movielens --min_spread 0.1 ||
  fail "the exported model does not give pscluster's predictions"

timeout 300 /usr/bin/python3 - "$TMP/ctr.onnx" "$TMP/ref" "$CSV" "$ROWS" <<'PY' ||
import csv, json, math, struct, sys
import numpy as np
import onnxruntime as ort
import xxhash

model, ref, path, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
meta = json.loads(sess.get_modelmeta().custom_metadata_map["pscluster.features"])
info = json.load(open(ref + ".json"))
assert info["created_rows"] == 0, "eval looked up keys the checkpoint lacks: %s" % info
assert [m["input"] for m in meta] == [f["input"] for f in info["features"]], (meta, info)
assert [i.name for i in sess.get_inputs()] == [m["input"] for m in meta], sess.get_inputs()
fed = {f["input"]: np.fromfile(ref + ".ids.%d" % k, dtype=np.int64).reshape(rows, f["width"])
       for k, f in enumerate(info["features"])}


def int64(u):  # a uint64 key as the int64 of the same bits
    return u - (1 << 64) if u >= 1 << 63 else u


# docs/onnx_export.md, "Computing the ids": the ids of one raw value.
def ids_of(m, raw):
    if raw is None:
        return []
    seed = int(m["feature_seed"])
    vocab = m["vocab_size"]

    def from_int(n):
        if vocab > 0:
            if 0 <= n < vocab:
                return n
            assert m["oov"] == "hash", "id %d outside the vocabulary" % n
            return xxhash.xxh3_64_intdigest(struct.pack("<q", n), seed=seed) % vocab
        return n if n >= 0 else int64(xxhash.xxh3_64_intdigest(struct.pack("<q", n), seed=seed))

    def from_string(t):
        h = xxhash.xxh3_64_intdigest(t.encode(), seed=seed)
        return h % vocab if vocab > 0 else int64(h)

    if m["column_type"] == "string":
        parts = raw.split(m["separator"]) if m["separator"] else [raw]
        parts = [p.strip(" \t\n\v\f\r") for p in parts]
        return [from_string(p) for p in parts if p]
    x = float(raw) if m["column_type"] == "float" else int(raw)
    if m["bucket_width"] > 0:
        x = math.floor(x / m["bucket_width"])
    return [from_int(int(x))]


# The eval rows, as worker/core's CSV reader picks them: the holdout part of
# the split (XXH3 of the 0-based row number as 8 little-endian bytes, seeded
# 7, below 0.2 * 2^64), rows with a rating, the first `rows` of them. NA or
# an empty field is a missing value (every string here is quoted, never NA).
bound = int(math.ldexp(0.2, 64))
want = {m["input"]: [] for m in meta}
with open(path, newline="") as f:
    reader = csv.DictReader(f)
    for row, record in enumerate(reader):
        if len(want[meta[0]["input"]]) == rows:
            break
        if xxhash.xxh3_64_intdigest(struct.pack("<Q", row), seed=7) >= bound:
            continue
        if record["rating"] in ("NA", ""):
            continue
        for m in meta:
            raw = record[m["column"]]
            want[m["input"]].append(ids_of(m, None if raw in ("NA", "") else raw))
for m in meta:
    got = [[int(i) for i in r if i != -1] for r in fed[m["input"]]]
    assert got == want[m["input"]], "%s: the recipe's ids differ from pscluster's" % m["input"]
print("ids: the recipe gives pscluster's ids for all %d eval rows (%s)"
      % (rows, ", ".join("%s %d" % (m["input"], sum(len(r) for r in want[m["input"]]))
                         for m in meta)))

base = sess.run(["predictions"], fed)[0]
# A movie key the checkpoint never held reads a zero row: the same output as
# no id at all.
table = {m["input"]: m for m in meta}
unseen = dict(fed)
unseen["ids/movie"] = np.full_like(fed["ids/movie"], 10**15)
padded = dict(fed)
padded["ids/movie"] = np.full_like(fed["ids/movie"], -1)
a, b = sess.run(["predictions"], unseen)[0], sess.run(["predictions"], padded)[0]
assert np.array_equal(a, b), "an unseen key does not read a zero row"
assert float(np.max(np.abs(a - base))) > 1e-3, "the movie ids do not change the predictions"
# All padding: the embeddings matter.
empty = {k: np.full_like(v, -1) for k, v in fed.items()}
assert float(np.max(np.abs(sess.run(["predictions"], empty)[0] - base))) > 1e-3
# A user id outside [0, 672): pscluster refuses it, and so does the graph.
bad = dict(fed)
bad["ids/user"] = fed["ids/user"].copy()
bad["ids/user"][0, 0] = table["ids/user"]["vocab_size"]
try:
    sess.run(["predictions"], bad)
    ran = True
except Exception as e:  # onnxruntime's InvalidArgument
    assert "out of data bounds" in str(e), e
    ran = False
    print("an id outside the vocabulary fails the run: Gather's", str(e).split("Status Message: ")[-1])
assert not ran, "an id outside the vocabulary ran"
print("tables:", ", ".join("%s %s %d rows x %d" % (m["feature"], m["table"], m["rows"],
                                                    m["embedding_dim"]) for m in meta))
PY
  fail "the exported model's inputs do not behave as documented"
echo PASS
