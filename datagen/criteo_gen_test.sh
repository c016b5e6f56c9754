#!/usr/bin/env bash
# criteo_gen end to end: writes a small data set in both formats, checks the
# files (TSV layout, TFRecord framing and CRCs via Python's own reader of the
# framing, record counts), meta.json (valid JSON, Bayes AUC in range,
# holdout rows), that the same flags give the same bytes, and that bad flags
# and an unwritable directory are refused with a clear message.
#
# usage: criteo_gen_test.sh CRITEO_GEN
set -euo pipefail
GEN="$(realpath "$1")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$GEN" --out "$TMP/a" --rows 3000 --shards 3 --holdout_rows 20000 --format both --seed 5 \
  > "$TMP/a.out" || fail "criteo_gen exited $?"
cat "$TMP/a.out"
grep -q "3000 train + 20000 holdout rows, 8 files" "$TMP/a.out" || fail "summary line"
"$GEN" --out "$TMP/b" --rows 3000 --shards 3 --holdout_rows 20000 --format both --seed 5 \
  --threads 1 > /dev/null
for f in "$TMP"/a/*-of-*; do
  cmp -s "$f" "$TMP/b/$(basename "$f")" || fail "$(basename "$f") differs between two runs"
done
ls "$TMP"/a/*.tmp 2>/dev/null && fail "temporary files left behind"

/usr/bin/python3 - "$TMP/a" <<'PY'
import gzip, json, os, struct, sys
d = sys.argv[1]
meta = json.load(open(os.path.join(d, "meta.json")))
assert meta["train_rows"] == 3000 and meta["holdout_rows"] == 20000, meta
assert 0.6 < meta["bayes_auc"] < 0.98, meta
assert abs(meta["bayes_auc"] - meta["expected_bayes_auc"]) < 0.02, meta
assert 0.15 < meta["train_click_rate"] < 0.35, meta
files = {f["path"]: f for f in meta["files"]}
assert len(files) == 8, files
rows = 0
for name in sorted(files):
    path = os.path.join(d, name)
    assert os.path.getsize(path) == files[name]["bytes"], name
    if name.endswith(".tsv.gz"):
        lines = gzip.open(path, "rt").read().splitlines()
        for line in lines:
            fields = line.split("\t")
            assert len(fields) == 40, line
            assert fields[0] in ("0", "1"), line
            assert all(f == "" or f.isdigit() for f in fields[1:14]), line
            assert all(f == "" or (len(f) == 8 and int(f, 16) >= 0) for f in fields[14:]), line
        assert len(lines) == files[name]["rows"], name
        if name.startswith("train"):
            rows += len(lines)
    else:
        data = open(path, "rb").read()
        n, off = 0, 0
        while off < len(data):
            (length,) = struct.unpack_from("<Q", data, off)
            off += 12 + length + 4
            n += 1
        assert off == len(data) and n == files[name]["rows"], (name, n)
assert rows == 3000, rows
print("criteo_gen_test: files, meta and framing check out; Bayes AUC",
      meta["bayes_auc"], "expected", meta["expected_bayes_auc"])
PY

# Bad flags: exit 2 naming the flag; an unwritable directory: exit 1 naming it.
rc=0; "$GEN" --out "$TMP/c" --rows 10 --format parquet > "$TMP/bad.out" 2>&1 || rc=$?
((rc == 2)) || fail "--format parquet: exit $rc, want 2"
grep -q "format" "$TMP/bad.out" || fail "--format parquet: message does not name the flag"
rc=0; "$GEN" --out /proc/criteo --rows 10 > "$TMP/bad.out" 2>&1 || rc=$?
((rc == 1)) || fail "unwritable --out: exit $rc, want 1"
grep -q "/proc/criteo" "$TMP/bad.out" || fail "unwritable --out: message does not name it"
echo "criteo_gen_test: PASS"
