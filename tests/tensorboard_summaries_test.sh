#!/usr/bin/env bash
# End to end: a job's `summaries:` writes TensorBoard event files that the
# `tensorboard` package's own reader (EventAccumulator) reads back.
#
# usage: tensorboard_summaries_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
# A 2-epoch Fashion-MNIST subset on 2 PS x 2 workers under `psctl local`,
# with checkpoints and `summaries: {logdir: tb, every_steps: 20}` (relative:
# under the checkpoint root, here checkpoint.dir's parent). The logdir holds
# one events.out.tfevents.* file; its scalars are those README "TensorBoard"
# lists, and their values are the job's own: the last epoch's eval accuracy
# and loss equal the final status, the per-PS bytes the job's variables, the
# checkpoint events the checkpoints committed. Then a logdir outside the
# checkpoint root is refused (exit 2, naming summaries.logdir) before any
# server starts. Every process the test starts is stopped by pid on exit.
# Needs the PyPI package tensorboard (./setup.sh installs it).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
PS_SERVER="$(abs "$2")"
WORKER_SERVER="$(abs "$3")"
COORDINATOR="$(abs "$4")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
BIN_FLAGS=(--ps_server_bin="$PS_SERVER" --worker_server_bin="$WORKER_SERVER"
           --coordinator_bin="$COORDINATOR")

require_fashion_mnist "$DATA"
python3 -c 'import tensorboard' 2>/dev/null ||
  fail "python3 cannot import tensorboard: run ./setup.sh (it pip-installs tests/requirements-tensorboard.txt)"

rm -rf "$TMP/ckpt" "$TMP/tb"
write_job "$TMP/job.yaml" name=tensorboard-test train_limit=6000 eval_limit=2000 epochs=2 \
  checkpoint="{dir: $TMP/ckpt, every_steps: 50}" \
  extra="summaries: {logdir: tb, every_steps: 20}"
start_s="$(date +%s)"
rc=0
timeout 300 "$PSCTL" local "$TMP/job.yaml" --ps 2 --workers 2 "${BIN_FLAGS[@]}" --output json \
  > "$TMP/result.json" 2> "$TMP/result.err" &
pid=$!
STARTED_PIDS+=("$pid")
wait "$pid" || rc=$?
((rc == 0)) || { tail -30 "$TMP/result.err" >&2; fail "psctl local exited $rc"; }
end_s="$(date +%s)"

python3 - "$TMP/result.json" "$TMP/tb" "$start_s" "$end_s" <<'PY' || fail "the event file does not read back as the job's"
import glob, json, math, os, re, socket, sys
from tensorboard.backend.event_processing import event_accumulator

result = json.load(open(sys.argv[1]))
logdir, start_s, end_s = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
assert result["state"] == "SUCCEEDED", result["state"]

files = glob.glob(os.path.join(logdir, "*"))
assert len(files) == 1, files
name = os.path.basename(files[0])
m = re.fullmatch(r"events\.out\.tfevents\.(\d+)\.(.+)\.(\d+)", name)
assert m, name
assert start_s <= int(m.group(1)) <= end_s, name
assert m.group(2) == socket.gethostname(), name

acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
want = {"train/loss", "train/learning_rate", "train/examples_per_sec", "epoch",
        "epoch/train_loss", "epoch/eval_loss", "epoch/eval_accuracy", "epoch/wall_seconds",
        "ps/0/parameter_bytes", "ps/0/slot_bytes", "ps/1/parameter_bytes", "ps/1/slot_bytes",
        "checkpoint/id", "checkpoint/bytes"}
assert want <= tags, sorted(want - tags)
assert "epoch/eval_auc" not in tags, "a 10-class model has no AUC"
S = {t: acc.Scalars(t) for t in tags}
for t, events in S.items():
    for e in events:
        assert math.isfinite(e.value), (t, e)
        assert start_s - 1 <= e.wall_time <= end_s + 1, (t, e)

def close(a, b, tol=1e-6):
    return abs(a - b) <= tol * max(1.0, abs(b))

steps = result["steps"]
# Epochs: one point each, at the job's step then, values the job's.
assert [e.value for e in S["epoch"]] == [1.0, 2.0], S["epoch"]
assert S["epoch"][-1].step == steps, (S["epoch"], steps)
for tag, key in [("epoch/train_loss", "train_loss"), ("epoch/eval_loss", "eval_loss"),
                 ("epoch/eval_accuracy", "eval_accuracy")]:
    got = [e.value for e in S[tag]]
    expected = [ep[key] for ep in result["epochs"]]
    assert len(got) == 2 and all(close(g, x) for g, x in zip(got, expected)), (tag, got, expected)
assert close(S["epoch/eval_accuracy"][-1].value, result["eval_accuracy"])
assert close(S["epoch/eval_loss"][-1].value, result["eval_loss"])
# Training loss every 20 steps (at the end of the closure that reached
# them: closures of 10 steps per worker), falling from ~2.3 (10 classes).
loss = S["train/loss"]
assert len(loss) >= steps // 20 - 2, (len(loss), steps)
assert all(b.step > a.step for a, b in zip(loss, loss[1:])), [e.step for e in loss]
assert all(0 < e.value < 5 for e in loss), [e.value for e in loss]
assert loss[-1].value < loss[0].value, (loss[0], loss[-1])
assert all(close(e.value, 0.002) for e in S["train/learning_rate"]), S["train/learning_rate"]
assert S["train/examples_per_sec"][-1].value > 0
# Per-PS bytes: the MLP 784-64-10's 50,890 float32 parameters over the two
# PS, and Adam's two slots per parameter.
params = sum(S["ps/%d/parameter_bytes" % p][-1].value for p in (0, 1))
slots = sum(S["ps/%d/slot_bytes" % p][-1].value for p in (0, 1))
assert params == 50890 * 4 and slots == 2 * params, (params, slots)
# Checkpoints: one event per commit, the last the final one at the last step.
ckpt = S["checkpoint/id"]
assert len(ckpt) == result["checkpoints"] >= 2, (len(ckpt), result["checkpoints"])
assert ckpt[-1].step == steps, (ckpt[-1], steps)
assert [e.value for e in ckpt] == sorted(set(e.value for e in ckpt)), ckpt
assert all(e.value > 0 for e in S["checkpoint/bytes"])
print("tensorboard: %s: %d tags, %d train/loss points, eval accuracy %.4f == status %.4f, "
      "%d checkpoints" % (name, len(tags), len(loss), S["epoch/eval_accuracy"][-1].value,
                          result["eval_accuracy"], len(ckpt)))
PY

# A logdir outside the checkpoint root: refused before any server starts.
write_job "$TMP/outside.yaml" name=tensorboard-outside train_limit=600 \
  checkpoint="{dir: $TMP/ckpt2}" extra="summaries: {logdir: /tmp/../etc/tb}"
rc=0
timeout 60 "$PSCTL" local "$TMP/outside.yaml" --ps 1 --workers 1 "${BIN_FLAGS[@]}" \
  > "$TMP/outside.out" 2> "$TMP/outside.err" || rc=$?
((rc == 2)) || { cat "$TMP/outside.err" >&2; fail "a logdir outside the root: expected exit 2, got $rc"; }
grep -q "summaries.logdir" "$TMP/outside.err" ||
  { cat "$TMP/outside.err" >&2; fail "the refusal does not name summaries.logdir"; }
[[ ! -e /etc/tb ]] || fail "/etc/tb was created"
echo "outside: $(head -c 300 "$TMP/outside.err")"
echo PASS
