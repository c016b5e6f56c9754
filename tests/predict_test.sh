#!/usr/bin/env bash
# psctl predict end to end: every input row's prediction exactly once, in
# input order, even when a worker is SIGKILLed mid-run.
#
# Trains a small Fashion-MNIST MLP on 2 PS x 2 workers with a checkpoint at
# its end, then predicts the 10,000 t10k rows from that checkpoint on a
# fresh local cluster (2 PS x 2 workers, 10 rows a closure):
#   1. without faults (the job's eval data): the reference CSV;
#   2. with --data naming the same rows without their labels (rows to
#      predict need none), and a worker killed mid-run: once
#      psctl has reported some closures done, both workers are SIGSTOPped
#      (so that the run provably has closures left), worker 0 is SIGKILLed
#      and worker 1 continued; psctl must exit 0 with rows 0..9999 each once,
#      in order, and the very same floats as the reference (the same
#      checkpoint gives the same predictions whoever computes them);
#   3. bad input: a missing checkpoint directory, a data file that does not
#      exist, and one that is not an IDX file: exit 2, naming the problem,
#      and no CSV written.
#
# usage: predict_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
ROWS=10000
CLOSURE_ROWS=10

require_fashion_mnist "$DATA"

write_job "$TMP/job.yaml" name=predict-mlp seed=3 train_limit=3000 \
  layers="[{dense: {units: 256, activation: relu}}, {dense: {units: 10}}]" \
  checkpoint="{dir: $TMP/ckpt}"
rc=0
timeout 300 "$PSCTL" local "$TMP/job.yaml" --ps 2 --workers 2 "${BIN_FLAGS[@]}" \
  --run_dir "$TMP/run-train" > "$TMP/train.out" 2> "$TMP/train.err" || rc=$?
((rc == 0)) || { tail -n 30 "$TMP/train.err" >&2; fail "training exited $rc"; }

# check_csv FILE: a header and rows 0..ROWS-1, each once, in order, each with
# ten probabilities summing to 1 and their argmax as the class.
check_csv() {
  python3 - "$1" "$ROWS" <<'PY' || fail "$1 is not one prediction per row in input order"
import sys
path, rows = sys.argv[1], int(sys.argv[2])
lines = open(path).read().splitlines()
assert lines[0] == "row," + ",".join("p%d" % k for k in range(10)) + ",class", lines[0]
body = lines[1:]
assert len(body) == rows, "%d lines for %d rows" % (len(body), rows)
seen = [int(l.split(",", 1)[0]) for l in body]
assert seen == list(range(rows)), "rows out of order or repeated"
classes = set()
for l in body:
    f = l.split(",")
    p = [float(x) for x in f[1:11]]
    assert abs(sum(p) - 1) < 1e-4, l
    assert int(f[11]) == max(range(10), key=lambda k: p[k]), l
    classes.add(int(f[11]))
assert len(classes) >= 5, "the model predicts only %d classes" % len(classes)
print("%s: %d rows, once each, in order, %d classes predicted" % (path, rows, len(classes)))
PY
}

# 1. The reference: no fault, the job's own eval data.
rc=0
timeout 120 "$PSCTL" predict "$TMP/ckpt" -o "$TMP/ref.csv" --ps 2 --workers 2 \
  --closure_rows "$CLOSURE_ROWS" "${BIN_FLAGS[@]}" > "$TMP/ref.out" 2> "$TMP/ref.err" || rc=$?
((rc == 0)) || { tail -n 30 "$TMP/ref.err" >&2; fail "psctl predict exited $rc"; }
cat "$TMP/ref.out"
check_csv "$TMP/ref.csv"

# 2. The same rows through --data, without labels (rows to predict name
# none), and a worker killed mid-run.
cat > "$TMP/data.yaml" <<YAML
{format: idx, images: $DATA/t10k-images-idx3-ubyte.gz}
YAML
timeout 120 "$PSCTL" predict "$TMP/ckpt" --data "$TMP/data.yaml" -o "$TMP/kill.csv" --ps 2 \
  --workers 2 --closure_rows "$CLOSURE_ROWS" "${BIN_FLAGS[@]}" \
  > "$TMP/kill.out" 2> "$TMP/kill.err" &
TPID=$!
STARTED_PIDS+=("$TPID")
# The closures psctl has reported done so far ("psctl: predict: N/M closures").
done_closures() {
  sed -n 's/^psctl: predict: \([0-9]*\)\/\([0-9]*\) closures.*/\1 \2/p' "$TMP/kill.err" | tail -n 1
}
WORKERS="" n=0 total=0
for _ in $(seq 1 3000); do  # at most 60 s
  [[ -n "$WORKERS" ]] ||
    WORKERS="$(sed -n 's/.*worker pids \([0-9,]*\)).*/\1/p' "$TMP/kill.err" 2>/dev/null | head -n 1 || true)"
  read -r n total < <(done_closures || true) || true
  [[ -n "$WORKERS" && -n "$n" ]] && ((total > 0 && n >= 20)) && break
  kill -0 "$TPID" 2>/dev/null || break
  sleep 0.02
done
[[ -n "$WORKERS" && -n "$n" ]] && ((n >= 20)) ||
  { tail -n 30 "$TMP/kill.err" >&2; fail "psctl predict reported no progress within 60 s"; }
W0="${WORKERS%%,*}" W1="${WORKERS##*,}"
STARTED_PIDS+=("$W0" "$W1")
# Freeze both workers: no closure finishes until worker 1 is continued, so
# what psctl reported now is where the run stands.
kill -STOP "$W0" "$W1"
# Not a trigger (that was progress, above): the answers the workers sent
# before they stopped reach psctl, so that the count below is final.
sleep 0.2
read -r at_kill total < <(done_closures)
if ((at_kill >= total)); then
  kill -CONT "$W1" "$W0" 2>/dev/null || true
  fail "the run finished before the fault ($at_kill/$total closures): use smaller closures"
fi
kill -KILL "$W0"
kill -CONT "$W1"
echo "killed worker 0 (pid $W0) with $at_kill/$total closures done"
rc=0
wait "$TPID" || rc=$?
((rc == 0)) ||
  { tail -n 30 "$TMP/kill.err" >&2; fail "psctl predict with a killed worker exited $rc"; }
cat "$TMP/kill.out"
gone "$W0" || fail "worker 0 (pid $W0) is still alive"
# The run went on after the kill: later closures were reported.
read -r final total < <(done_closures)
((final == total && final > at_kill)) ||
  fail "the run did not finish after the kill ($final/$total)"
check_csv "$TMP/kill.csv"
cmp "$TMP/ref.csv" "$TMP/kill.csv" ||
  fail "the predictions with a killed worker differ from those of the clean run"
retried="$(sed -n 's/.* \([0-9]*\) retried, .*/\1/p' "$TMP/kill.out")"
echo "predictions identical to the clean run; $retried closure(s) retried"

# 3. Bad input: exit 2, the problem named, no CSV.
expect_usage() {
  local name="$1" want="$2" rc=0
  shift 2
  timeout 60 "$PSCTL" predict "$@" -o "$TMP/$name.csv" --ps 1 --workers 1 "${BIN_FLAGS[@]}" \
    > "$TMP/$name.out" 2> "$TMP/$name.err" || rc=$?
  ((rc == 2)) || { cat "$TMP/$name.err" >&2; fail "$name: exited $rc, not 2"; }
  grep -q -- "$want" "$TMP/$name.err" ||
    { cat "$TMP/$name.err" >&2; fail "$name: the error does not say '$want'"; }
  [[ ! -e "$TMP/$name.csv" ]] || fail "$name: a CSV was written"
  ! compgen -G "$TMP/$name.csv.tmp*" > /dev/null || fail "$name: a temporary file was left"
  echo "$name: exit 2: $(tail -n 1 "$TMP/$name.err")"
}
expect_usage missing_ckpt "no checkpoint directory or job spec $TMP/no-such-ckpt" \
  "$TMP/no-such-ckpt"
echo "{format: idx, images: $TMP/no-such-images, labels: $TMP/no-such-labels}" > "$TMP/missing.yaml"
expect_usage missing_data "data file not found: $TMP/no-such-images" \
  "$TMP/ckpt" --data "$TMP/missing.yaml"
head -c 1000 /dev/urandom > "$TMP/garbage-images"
echo "{format: idx, images: $TMP/garbage-images, labels: $DATA/t10k-labels-idx1-ubyte.gz}" \
  > "$TMP/garbage.yaml"
expect_usage garbage_data "garbage-images" "$TMP/ckpt" --data "$TMP/garbage.yaml"
echo PASS
