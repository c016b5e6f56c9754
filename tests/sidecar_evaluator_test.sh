#!/usr/bin/env bash
# End to end: the sidecar evaluator beside a real 2 PS x 2 worker job
# (`psctl local`, Fashion-MNIST MLP, `eval: {mode: sidecar, keep_best:
# {metric: accuracy, mode: max}}`, a checkpoint every 300 steps).
#
# usage: sidecar_evaluator_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR EVALUATOR
#
# 1. The evaluator starts before the job (it waits for the job's log), and is
#    killed with SIGKILL once its state file says it evaluated a checkpoint
#    (and its /metrics said so too). While it is down the job commits at
#    least two more checkpoints (waited for on the directory, not on time),
#    and a torn checkpoint directory (data file, no MANIFEST) is planted.
#    The evaluator restarts (as TF_CONFIG task `evaluator`; a TF_CONFIG of
#    another task type is refused) with --until_job_ends and exits 0 after
#    the job.
#    Checks: every checkpoint the two runs report is committed (`psctl
#    checkpoint verify`) with the step reported; none is evaluated twice; the
#    restart resumed after the last one evaluated and passed over the older
#    ones for the newest; the last evaluated is the job's final checkpoint;
#    best/ holds the best by accuracy (its BEST record, and `psctl checkpoint
#    verify best/` restores it); the eval event files read back with one
#    eval/accuracy point per evaluated checkpoint at its step; the job's
#    result claims no eval metric (eval_mode sidecar). The event files are
#    parsed here, and by TensorBoard's EventAccumulator where the
#    tensorboard package is installed.
# 2. The same model with `eval: inline`: the evaluator's metrics of the
#    job's final checkpoint equal the job's own inline eval of its last epoch.
# Every process the test starts is stopped by pid on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
PS_SERVER="$(abs "$2")"
WORKER_SERVER="$(abs "$3")"
COORDINATOR="$(abs "$4")"
EVALUATOR="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
TMP="$(cd "$TMP" && pwd -P)"
DATA=/usr/share/datasets/fashion-mnist
BIN_FLAGS=(--ps_server_bin="$PS_SERVER" --worker_server_bin="$WORKER_SERVER"
           --coordinator_bin="$COORDINATOR")
require_fashion_mnist "$DATA"
start_s=$SECONDS

rm -rf "$TMP/ckpt" "$TMP/ckpt_inline" "$TMP/tb"
write_job "$TMP/job.yaml" name=sidecar eval_limit=2000 epochs=8 \
  checkpoint="{dir: $TMP/ckpt, every_steps: 300, keep: 100}" \
  extra=$'summaries: {logdir: tb, every_steps: 100}\neval: {mode: sidecar, keep_best: {metric: accuracy, mode: max}}'
EV_FLAGS=(--checkpoint_root="$TMP" --checkpoint_dir=ckpt --data_root=/usr/share/datasets
          --poll_interval_s=0.1)
STATE="$TMP/ckpt/evaluator/state"

# state_field KEY: the value of KEY in the evaluator's state file (empty without one).
state_field() { sed -n "s/^$1 //p" "$STATE" 2>/dev/null || true; }
# committed_ids: the ids of the directory's committed checkpoints, one a line.
committed_ids() {
  local m
  for m in "$TMP"/ckpt/ckpt-*/MANIFEST; do
    [[ -e "$m" ]] && basename "$(dirname "$m")" | sed 's/^ckpt-//'
  done | sort -n
}

# --- 1. Evaluator first: it waits for the job.
"$EVALUATOR" "${EV_FLAGS[@]}" --metrics_address=127.0.0.1:0 --port_file="$TMP/ev1.port" \
  > "$TMP/ev1.out" 2> "$TMP/ev1.err" &
EV1=$!
STARTED_PIDS+=("$EV1")
for _ in $(seq 1 100); do grep -q "waiting for the job's log" "$TMP/ev1.err" && break; sleep 0.05; done
grep -q "waiting for the job's log" "$TMP/ev1.err" ||
  { cat "$TMP/ev1.err" >&2; fail "the evaluator did not wait for the job's log"; }

local_in_background "$TMP/result.json" "$TMP/result.err" 300 "$TMP/job.yaml" --ps 2 --workers 2 \
  "${BIN_FLAGS[@]}" --output json

# Killed once it has evaluated a checkpoint (its state says so).
deadline=$((SECONDS + 60))
until [[ "$(state_field evaluations)" -ge 1 ]] 2>/dev/null; do
  ((SECONDS < deadline)) || { cat "$TMP/ev1.err" >&2; fail "no checkpoint evaluated within 60 s"; }
  gone "$EV1" && { cat "$TMP/ev1.err" >&2; fail "the evaluator exited"; }
  sleep 0.02
done
metrics_port="$(cat "$TMP/ev1.port.metrics")"
python3 - "$metrics_port" <<'PY' || fail "/metrics does not show the evaluation"
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
import re
n = re.search(r"^pscluster_evaluator_evaluations_total (\S+)$", text, re.M)
assert n and float(n[1]) >= 1, text
assert 'pscluster_evaluator_eval{metric="accuracy"}' in text, text
assert 'pscluster_evaluator_best{field="id"}' in text, text
PY
kill -9 "$EV1"
for _ in $(seq 1 100); do gone "$EV1" && break; sleep 0.05; done
gone "$EV1" || fail "the evaluator survived SIGKILL"
first_last="$(state_field last_evaluated)"
echo "evaluator killed after checkpoint $first_last"

# While it is down: two more commits (on the directory's progress), and a
# torn checkpoint (a save whose MANIFEST never came).
deadline=$((SECONDS + 60))
until (($(committed_ids | awk -v l="$first_last" '$1 > l' | wc -l) >= 2)); do
  ((SECONDS < deadline)) || fail "the job committed no 2 checkpoints after $first_last within 60 s"
  kill -0 "$TPID" 2>/dev/null || fail "the job ended before 2 more checkpoints (make it longer)"
  sleep 0.02
done
mkdir -p "$TMP/ckpt/ckpt-999"
head -c 4096 /dev/urandom > "$TMP/ckpt/ckpt-999/ps-0.data"

# The restart runs as TF's evaluator task: TF_CONFIG with task type
# evaluator, the cluster not listing it. A TF_CONFIG of another task type is
# refused (exit 2, naming it).
CLUSTER='{"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}'
rc=0
TF_CONFIG="{\"cluster\": $CLUSTER, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
  timeout 20 "$EVALUATOR" "${EV_FLAGS[@]}" > /dev/null 2> "$TMP/bad_task.err" || rc=$?
((rc == 2)) && grep -q "this server runs evaluator tasks" "$TMP/bad_task.err" ||
  { cat "$TMP/bad_task.err" >&2; fail "a worker's TF_CONFIG was not refused with exit 2 (rc $rc)"; }
TF_CONFIG="{\"cluster\": $CLUSTER, \"task\": {\"type\": \"evaluator\", \"index\": 0}}" \
  "$EVALUATOR" "${EV_FLAGS[@]}" --until_job_ends > "$TMP/ev2.out" 2> "$TMP/ev2.err" &
EV2=$!
STARTED_PIDS+=("$EV2")
rc=0
wait "$TPID" || rc=$?
((rc == 0)) || { tail -20 "$TMP/result.err" >&2; fail "psctl local exited $rc"; }
rc=0
# Bounded: --until_job_ends returns once the job's log says it ended.
for _ in $(seq 1 600); do gone "$EV2" && break; sleep 0.1; done
gone "$EV2" || { tail "$TMP/ev2.err" >&2; fail "the evaluator did not exit within 60 s of the job's end"; }
wait "$EV2" || rc=$?
((rc == 0)) || { tail -20 "$TMP/ev2.err" >&2; fail "the restarted evaluator exited $rc"; }
grep -q "cluster task evaluator 0" "$TMP/ev2.err" || fail "the restart did not run as TF_CONFIG's evaluator task"
cat "$TMP/ev1.out" "$TMP/ev2.out"

"$PSCTL" checkpoint verify "$TMP/ckpt" -o json > "$TMP/verify.json" ||
  fail "psctl checkpoint verify failed"
"$PSCTL" checkpoint verify "$TMP/ckpt/best" -o json > "$TMP/verify_best.json" ||
  fail "psctl checkpoint verify best/ failed"

python3 - "$TMP" <<'PY' || fail "the evaluator's record is wrong"
import glob, json, os, re, struct, sys
tmp = sys.argv[1]
result = json.load(open(f"{tmp}/result.json"))
assert result["state"] == "SUCCEEDED", result["state"]
assert result["eval_mode"] == "sidecar", result
assert result["eval_accuracy"] is None and "eval_accuracy" not in result["epochs"][-1], result

line = re.compile(r"evaluated checkpoint (\d+) step (\d+): loss (\S+) accuracy (\S+) examples (\d+)(.*)")
runs = []
for name in ("ev1.out", "ev2.out"):
    runs.append([line.match(l) for l in open(f"{tmp}/{name}") if l.startswith("evaluated")])
first, second = runs
assert first and second, runs
evaluated = [(int(m[1]), int(m[2]), float(m[4])) for m in first + second]
ids = [e[0] for e in evaluated]
assert len(ids) == len(set(ids)), f"a checkpoint evaluated twice: {ids}"
assert ids == sorted(ids), ids
assert 999 not in ids, "the torn checkpoint was evaluated"
for m in first + second:
    assert int(m[5]) == 2000, m[0]

verify = json.load(open(f"{tmp}/verify.json"))
committed = {c["id"]: c for c in verify["checkpoints"] if c["state"] == "committed"}
for cid, step, _ in evaluated:
    assert cid in committed, f"checkpoint {cid} reported but not committed: {sorted(committed)}"
    assert committed[cid]["global_step"] == step, (cid, step, committed[cid])
final = max(committed)
assert ids[-1] == final, f"the final checkpoint {final} was not evaluated: {ids}"

state = dict(l.split() for l in open(f"{tmp}/ckpt/evaluator/state"))
assert int(state["last_evaluated"]) == final, state
assert int(state["evaluations"]) == len(ids), (state, ids)
# The restart resumed after the last evaluated and went to the newest.
first_last = int(first[-1][1])
missed = [c for c in committed if first_last < c < int(second[0][1])]
assert int(second[0][1]) > first_last
assert len(missed) >= 1 and "passed over" in second[0][6], (missed, second[0][0])

best = max(evaluated, key=lambda e: (e[2], -e[0]))  # the first of the best
record = dict(l.split() for l in open(f"{tmp}/ckpt/best/BEST"))
assert int(record["checkpoint"]) == best[0], (record, evaluated)
assert record["metric"] == "accuracy" and record["mode"] == "max", record
assert abs(float(record["value"]) - best[2]) < 1e-6, (record, best)
vb = json.load(open(f"{tmp}/verify_best.json"))
assert vb["restored"] and vb["restored_id"] == best[0], vb

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7F) << s; s += 7
        if c < 0x80: return v, i

def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i); f, t = key >> 3, key & 7
        if t == 0: v, i = varint(b, i)
        elif t == 1: v = b[i:i + 8]; i += 8
        elif t == 5: v = b[i:i + 4]; i += 4
        elif t == 2: n, i = varint(b, i); v = b[i:i + n]; i += n
        else: raise ValueError(t)
        yield f, v

points = {}
files = glob.glob(f"{tmp}/tb/eval/events.out.tfevents.*")
assert len(files) == 2, files  # one per evaluator run
for path in files:
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        event = data[at + 12:at + 12 + n]
        at += 16 + n
        step, tags = 0, {}
        for f, v in fields(event):
            if f == 2: step = v
            if f == 5:
                for sf, sv in fields(v):
                    if sf != 1: continue
                    val = dict(fields(sv))
                    if 2 in val: tags[val[1].decode()] = struct.unpack("<f", val[2])[0]
        if "eval/accuracy" in tags: points[step] = tags
assert sorted(points) == sorted(e[1] for e in evaluated), (sorted(points), evaluated)
for cid, step, acc in evaluated:
    assert abs(points[step]["eval/accuracy"] - acc) < 1e-6, (step, points[step], acc)
    assert points[step]["eval/checkpoint_id"] == cid
try:  # TensorBoard's own reader too, where the package is installed (./setup.sh)
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    event_accumulator = None
if event_accumulator is not None:
    seen = {}
    for path in files:
        acc = event_accumulator.EventAccumulator(path)
        acc.Reload()
        for e in acc.Scalars("eval/accuracy"):
            seen[e.step] = e.value
    assert sorted(seen) == sorted(points), (sorted(seen), sorted(points))
    for step, tags in points.items():
        assert abs(seen[step] - tags["eval/accuracy"]) < 1e-6, (step, seen[step])
    print("TensorBoard's EventAccumulator reads the same eval/accuracy points")
print(f"evaluated {ids} of committed {sorted(committed)}; best {best[0]} ({best[2]})")
PY

# --- 2. Against the coordinator's own inline eval of the same model.
write_job "$TMP/job_inline.yaml" name=inline train_limit=12000 eval_limit=2000 epochs=2 \
  checkpoint="{dir: $TMP/ckpt_inline, every_steps: 100, keep: 2}" extra="eval: inline"
timeout 120 "$PSCTL" local "$TMP/job_inline.yaml" --ps 2 --workers 2 "${BIN_FLAGS[@]}" \
  --output json > "$TMP/inline.json" 2> "$TMP/inline.err" &
pid=$!
STARTED_PIDS+=("$pid")
rc=0
wait "$pid" || rc=$?
((rc == 0)) || { tail -20 "$TMP/inline.err" >&2; fail "psctl local (inline) exited $rc"; }
timeout 60 "$EVALUATOR" --checkpoint_root="$TMP" --checkpoint_dir=ckpt_inline \
  --data_root=/usr/share/datasets --poll_interval_s=0.1 --until_job_ends \
  > "$TMP/ev3.out" 2> "$TMP/ev3.err" &
pid=$!
STARTED_PIDS+=("$pid")
rc=0
wait "$pid" || rc=$?
((rc == 0)) || { tail -20 "$TMP/ev3.err" >&2; fail "the evaluator (inline job) exited $rc"; }
cat "$TMP/ev3.out"
python3 - "$TMP/inline.json" "$TMP/ev3.out" <<'PY' || fail "the evaluator disagrees with the job's inline eval"
import json, re, sys
r = json.load(open(sys.argv[1]))
assert r["state"] == "SUCCEEDED" and r["eval_mode"] == "inline", r
m = [re.match(r"evaluated checkpoint \d+ step \d+: loss (\S+) accuracy (\S+)", l)
     for l in open(sys.argv[2]) if l.startswith("evaluated")]
assert len(m) == 1, m
loss, acc = float(m[0][1]), float(m[0][2])
assert abs(acc - r["eval_accuracy"]) < 1e-6, (acc, r["eval_accuracy"])
assert abs(loss - r["eval_loss"]) < 1e-5, (loss, r["eval_loss"])
print(f"inline eval {r['eval_accuracy']:.6f} / {r['eval_loss']:.6f} == evaluator {acc:.6f} / {loss:.6f}")
PY
echo "PASS: sidecar_evaluator_test ($((SECONDS - start_s)) s)"
