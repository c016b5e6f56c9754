#!/usr/bin/env bash
# The synchronous strategies against the asynchronous one, under `psctl
# local` with 2 workers (and 2 PS where the strategy has PS).
#
# usage: sync_strategy_test.sh CASE PSCTL PS_SERVER WORKER_SERVER COORDINATOR MOVIELENS_YAML MOVIELENS_CSV
#   accuracy  Fashion-MNIST MLP (2 epochs) and examples/movielens_ctr.yaml
#             (embeddings, hash tables) with parameter_server, central_storage,
#             multi_worker_mirrored and mirrored (devices: 2, one process):
#             each synchronous run within 0.015 of
#             the asynchronous accuracy / AUC (Fashion-MNIST: the mean of 3
#             asynchronous runs, whose accuracy depends on timing), 2 replicas, global batch = 2 x
#             per-replica, one update per global step (applied == steps ==
#             ceil(examples / global batch) x epochs on every PS, or on
#             replica 0's copy), and the synchronous strategies agree.
#   checkpoint_interop  examples/movielens_ctr.yaml (a partitioned embedding,
#             hash tables, Adam slots) checkpointed by each kind of job and
#             resumed by another: 1 epoch parameter_server on 2 PS, then a 2nd
#             with multi_worker_mirrored (no PS: every worker restores a whole
#             copy; replica 0 writes the next checkpoint), then a 3rd with
#             central_storage on 1 PS. Each resumes (not starts over), keeps
#             the hash-table rows and the epochs before, and the loss goes on.
#   service   servers started by hand (2 ps_server, 2 worker_server, a
#             coordinator, each with --checkpoint_root), then jobs submitted
#             one after another with `psctl submit` + `psctl watch`:
#             central_storage, multi_worker_mirrored (checkpointing),
#             parameter_server, multi_worker_mirrored again: each trains from
#             its own start to the same accuracy as under psctl local; a
#             mirrored job leaves nothing on the workers' copies; then a
#             coordinator of the same workers and no PS runs a mirrored job
#             and refuses a parameter_server job, naming the missing PS.
#   kill_mirrored  multi_worker_mirrored with checkpoints; worker-1 killed
#             with kill -9 at 30 % of the steps (a point of training progress):
#             psctl restarts it, every copy rolls back to the last checkpoint,
#             the job succeeds with lost steps counted and every step applied.
set -euo pipefail

case_name="$1"
shift
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
MOVIELENS_YAML="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
[[ -r "$DATA/train-images-idx3-ubyte.gz" ]] ||
  fail "$DATA is missing: ./setup.sh installs dataset-fashion-mnist"
[[ $# -ge 6 && -r "$6" ]] ||
  fail "data/movielens/movielens.csv is missing: ./setup.sh exports it from r-cran-dslabs"
CSV="$(abs "$6")"

# fmnist_job FILE STRATEGY EPOCHS [EXTRA YAML LINE]
fmnist_job() {
  write_job "$1" name="fmnist-$2" strategy="$2" epochs="$3" extra="${4:-}"
}

# run NAME YAML: psctl local on 2 PS x 2 workers, JSON result in $TMP/NAME.json.
run() {
  local rc=0
  timeout 600 "$PSCTL" local "$2" --ps 2 --workers 2 --describe --output json "${BIN_FLAGS[@]}" \
    > "$TMP/$1.json" 2> "$TMP/$1.err" &
  local pid=$!
  STARTED_PIDS+=("$pid")
  wait "$pid" || rc=$?
  ((rc == 0)) || { tail -30 "$TMP/$1.err" >&2; fail "$1: psctl local exited $rc"; }
}

test_accuracy() {
  local strategy devices
  for strategy in parameter_server central_storage multi_worker_mirrored mirrored; do
    # mirrored: the 2 replicas are threads of one process.
    devices=""
    [[ "$strategy" == mirrored ]] && devices="devices: 2"
    fmnist_job "$TMP/fmnist_$strategy.yaml" "$strategy" 2 "$devices"
    sed -e "s|path: data/movielens/movielens.csv|path: $CSV|" \
        -e "s|^strategy: parameter_server|strategy: $strategy\n$devices|" \
        "$MOVIELENS_YAML" > "$TMP/movielens_$strategy.yaml"
    grep -q "^strategy: $strategy" "$TMP/movielens_$strategy.yaml" ||
      fail "could not set the strategy of $MOVIELENS_YAML"
    run "fmnist_$strategy" "$TMP/fmnist_$strategy.yaml"
    run "movielens_$strategy" "$TMP/movielens_$strategy.yaml"
  done
  # Asynchronous accuracy depends on the workers' timing (staleness): over
  # runs it moved 0.840-0.859 on Fashion-MNIST (0.840 with the rest of the
  # suite running beside it), so the reference is the mean of three runs.
  run fmnist_parameter_server_2 "$TMP/fmnist_parameter_server.yaml"
  run fmnist_parameter_server_3 "$TMP/fmnist_parameter_server.yaml"
  python3 - "$TMP" <<'PY' || fail "a synchronous strategy does not match the asynchronous one"
import json, math, os, sys
tmp = sys.argv[1]
def load(name):
    return json.load(open(os.path.join(tmp, name + ".json")))
for job, metric, train_examples in (("fmnist", "eval_accuracy", 60000), ("movielens", "eval_auc", None)):
    a = load(job + "_parameter_server")
    assert a["state"] == "SUCCEEDED", a
    runs = [a] + [load("%s_parameter_server_%d" % (job, i)) for i in (2, 3)
                  if os.path.exists(os.path.join(tmp, "%s_parameter_server_%d.json" % (job, i)))]
    for r in runs:
        assert r["state"] == "SUCCEEDED", r
    reference = sum(r[metric] for r in runs) / len(runs)
    line = "%-9s %s: async %.4f (%s; %d steps, %.0f ex/s)" % (
        job, metric, reference, " ".join("%.4f" % r[metric] for r in runs), a["steps"],
        a["examples_per_sec"])
    results = {}
    for strategy in ("central_storage", "multi_worker_mirrored", "mirrored"):
        s = load("%s_%s" % (job, strategy))
        assert s["state"] == "SUCCEEDED", s
        assert s["strategy"] == strategy, s["strategy"]
        assert s["replicas"] == 2 and s["global_batch"] == 2 * s["per_replica_batch"], s
        epochs = len(s["epochs"])
        if train_examples is not None:
            expected = epochs * math.ceil(train_examples / s["global_batch"])
            assert s["total_steps"] == expected, (strategy, s["total_steps"], expected)
        # One update per global step on every PS (the mirrored job's one
        # "PS" is replica 0's copy), however many replicas pushed.
        assert s["steps"] == s["total_steps"], s
        applied = [p["applied_steps"] for p in s["describe"]["ps"]]
        copies = 2 if strategy == "central_storage" else 1
        assert s["ps"] == (2 if copies == 2 else 0), (strategy, s["ps"])
        assert applied == [s["steps"]] * copies, (strategy, applied, s["steps"])
        # The asynchronous job takes a step per replica batch: twice as many.
        assert abs(a["steps"] - 2 * s["steps"]) <= 2 * epochs, (a["steps"], s["steps"])
        line += "  %s %.4f (%d steps, %.0f ex/s)" % (strategy, s[metric], s["steps"],
                                                    s["examples_per_sec"])
        # Within 1.5 points of the asynchronous mean (typical gap: 0.1-0.5).
        assert abs(reference - s[metric]) <= 0.015, "%s %s: async %.4f vs %.4f" % (
            strategy, metric, reference, s[metric])
        results[strategy] = s[metric]
    print(line)
    # The same data order and the same mean gradient each step: the
    # synchronous strategies train the same model (up to summation order).
    assert max(results.values()) - min(results.values()) <= 0.002, results
print("OK")
PY
}

test_kill_mirrored() {
  fmnist_job "$TMP/job.yaml" multi_worker_mirrored 6 \
    "checkpoint: {dir: $TMP/ckpt, every_steps: 300}"
  local run_dir="$TMP/run"
  local_in_background "$TMP/out.json" "$TMP/err" 300 "$TMP/job.yaml" --workers 2 \
    --output json --describe --run_dir "$run_dir" "${BIN_FLAGS[@]}"
  wait_progress "$ADDRESS" 0.3 240 ||
    { tail -30 "$TMP/err" >&2; fail "the job ended (or stalled) before 30 % of its steps"; }
  local victim
  victim="$(pgrep -P "$PSCTL_PID" -f 'worker_server .*/worker-1\.port' | head -1 || true)"
  [[ -n "$victim" ]] || { tail -30 "$TMP/err" >&2; fail "no worker-1 under psctl"; }
  STARTED_PIDS+=("$victim")
  echo "kill -9 worker-1 (pid $victim) at 30 % of the steps"
  kill -9 "$victim"
  local rc=0
  wait "$TPID" || rc=$?
  ((rc == 0)) || { tail -40 "$TMP/err" >&2; fail "psctl local exited $rc"; }
  grep -q "psctl: restarted worker-1 (pid $victim" "$TMP/err" ||
    { tail -30 "$TMP/err" >&2; fail "worker-1 was not restarted"; }
  python3 - "$TMP/out.json" <<'PY' || { tail -30 "$TMP/err" >&2; fail "bad result"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["state"] == "SUCCEEDED", r
assert r["strategy"] == "multi_worker_mirrored" and r["ps"] == 0, r
assert r["ps_recoveries"] >= 1, "no rollback: %s" % r
# Rolled back to a checkpoint (every 300 steps): fewer than 300 steps lost
# per rollback (none if the kill came right after one).
assert 0 <= r["lost_steps"] < 300 * r["ps_recoveries"], r["lost_steps"]
assert r["steps"] == r["total_steps"], r
assert r["steps_trained"] - r["steps"] == r["lost_steps"], r
applied = r["describe"]["ps"][0]["applied_steps"]
assert applied == r["total_steps"], "replica 0 applied %d of %d steps" % (applied, r["total_steps"])
assert r["eval_accuracy"] > 0.8, r["eval_accuracy"]
print("OK: accuracy %.4f, rollbacks %d, lost steps %d, restarts %s" % (
    r["eval_accuracy"], r["ps_recoveries"], r["lost_steps"], r["restarts"]))
PY
}

test_checkpoint_interop() {
  local i=0 strategy num_ps
  for spec in parameter_server:2 multi_worker_mirrored:0 central_storage:1; do
    i=$((i + 1))
    strategy="${spec%%:*}" num_ps="${spec##*:}"
    sed -e "s|path: data/movielens/movielens.csv|path: $CSV|" \
        -e "s|^strategy: parameter_server|strategy: $strategy|" \
        -e "s|^  epochs: 3|  epochs: $i|" "$MOVIELENS_YAML" > "$TMP/interop_$i.yaml"
    printf 'checkpoint: {dir: %s, keep: 2}\n' "$TMP/ckpt" >> "$TMP/interop_$i.yaml"
    grep -q "^  epochs: $i" "$TMP/interop_$i.yaml" || fail "could not set the epochs"
    local rc=0
    timeout 600 "$PSCTL" local "$TMP/interop_$i.yaml" --ps "$((num_ps > 0 ? num_ps : 1))" \
      --workers 2 --describe --output json "${BIN_FLAGS[@]}" > "$TMP/interop_$i.json" \
      2> "$TMP/interop_$i.err" &
    local pid=$!
    STARTED_PIDS+=("$pid")
    wait "$pid" || rc=$?
    ((rc == 0)) || { tail -30 "$TMP/interop_$i.err" >&2; fail "$strategy run exited $rc"; }
  done
  python3 - "$TMP" <<'PY' || fail "a checkpoint did not carry over between strategies"
import json, os, sys
tmp = sys.argv[1]
runs = [json.load(open(os.path.join(tmp, "interop_%d.json" % i))) for i in (1, 2, 3)]
for r, strategy, ps, epochs in zip(runs, ("parameter_server", "multi_worker_mirrored",
                                          "central_storage"), (2, 0, 1), (1, 2, 3)):
    assert r["state"] == "SUCCEEDED", r
    assert r["strategy"] == strategy and r["ps"] == ps, (strategy, r["strategy"], r["ps"])
    assert len(r["epochs"]) == epochs, (strategy, r["epochs"])
    tables = {v["name"]: v for v in r["describe"]["variables"]}
    movie = sum(s["rows"] for s in tables["embedding/movie"]["shards"])
    assert movie > 8000, "%s holds %d movie rows" % (strategy, movie)
    print("%-22s resumed from checkpoint %3d: epochs %s, AUC %.4f, movie rows %d" % (
        strategy, r["resumed_from_checkpoint"],
        [round(e["train_loss"], 4) for e in r["epochs"]], r["eval_auc"], movie))
assert runs[0]["resumed_from_checkpoint"] == -1, "the first run must start fresh"
for prev, cur in zip(runs, runs[1:]):
    assert cur["resumed_from_checkpoint"] >= 0, "%s did not resume" % cur["strategy"]
    assert cur["epochs"][:len(prev["epochs"])] == prev["epochs"], "history changed"
    # Went on from the checkpoint, not from the initializers: the new
    # epoch's loss is below the first epoch's.
    assert cur["epochs"][-1]["train_loss"] < runs[0]["epochs"][0]["train_loss"], cur["epochs"]
assert runs[-1]["eval_auc"] >= 0.78, runs[-1]["eval_auc"]
print("OK")
PY
}

test_service() {
  local PS_SERVER WORKER_SERVER COORDINATOR
  PS_SERVER="${BIN_FLAGS[0]#*=}" WORKER_SERVER="${BIN_FLAGS[1]#*=}" COORDINATOR="${BIN_FLAGS[2]#*=}"
  read -r PS0 PS1 W0 W1 CHIEF CHIEF2 < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
  local root="$TMP/checkpoints"
  mkdir -p "$root"
  start_server ps0 "$PS_SERVER" --address "127.0.0.1:$PS0" --checkpoint_root "$root"
  start_server ps1 "$PS_SERVER" --address "127.0.0.1:$PS1" --checkpoint_root "$root"
  start_server worker0 "$WORKER_SERVER" --address "127.0.0.1:$W0" --checkpoint_root "$root" \
    --compute_threads 1
  start_server worker1 "$WORKER_SERVER" --address "127.0.0.1:$W1" --checkpoint_root "$root" \
    --compute_threads 1
  start_server coordinator "$COORDINATOR" --address "127.0.0.1:$CHIEF" \
    --ps "127.0.0.1:$PS0,127.0.0.1:$PS1" --workers "127.0.0.1:$W0,127.0.0.1:$W1" \
    --checkpoint_root "$root"
  wait_listening ps0 ps1 worker0 worker1 coordinator
  local i=0 strategy id rc
  for strategy in central_storage multi_worker_mirrored parameter_server multi_worker_mirrored; do
    i=$((i + 1))
    local extra=""
    [[ $i == 2 ]] && extra="checkpoint: {dir: $root/mirrored, every_steps: 100}"
    fmnist_job "$TMP/service_$i.yaml" "$strategy" 1 "$extra"
    sed -i 's/^    labels: \(.*train-labels.*\)$/    labels: \1\n    limit: 20000/' "$TMP/service_$i.yaml"
    rc=0
    timeout 120 "$PSCTL" submit "$TMP/service_$i.yaml" --coordinator "127.0.0.1:$CHIEF" -o json \
      > "$TMP/submit_$i.json" 2> "$TMP/submit_$i.err" || rc=$?
    ((rc == 0)) || { cat "$TMP/submit_$i.err" >&2; show_logs; fail "submit $strategy: exit $rc"; }
    id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job_id"])' "$TMP/submit_$i.json")"
    rc=0
    timeout 300 "$PSCTL" watch "$id" --coordinator "127.0.0.1:$CHIEF" -o json \
      > "$TMP/watch_$i.json" 2> "$TMP/watch_$i.err" || rc=$?
    ((rc == 0)) || { cat "$TMP/watch_$i.err" >&2; show_logs; fail "$strategy job $id: watch exit $rc"; }
    echo "job $i ($strategy, $id): done"
  done
  python3 - "$TMP" <<'PY' || { show_logs; fail "a job on the long-lived servers is wrong"; }
import json, os, sys
tmp = sys.argv[1]
runs = [json.load(open(os.path.join(tmp, "watch_%d.json" % i))) for i in (1, 2, 3, 4)]
for r, strategy in zip(runs, ("central_storage", "multi_worker_mirrored", "parameter_server",
                              "multi_worker_mirrored")):
    assert r["state"] == "SUCCEEDED", r
    assert r.get("strategy") == strategy, (strategy, r.get("strategy"))
    assert r["steps"] == r["total_steps"] > 0, r
    assert r.get("resumed_from_checkpoint", -1) == -1, "a job started from another's state: %s" % r
    applied = r["ps_applied_steps"]
    assert applied == [r["steps"]] * len(applied) and applied, (strategy, applied, r["steps"])
    assert r["eval_accuracy"] > 0.75, (strategy, r["eval_accuracy"])  # untrained: ~0.1
    print("%-22s %d steps, accuracy %.4f, applied %s" % (strategy, r["steps"], r["eval_accuracy"],
                                                       applied))
# The same job twice on the same servers: the second trained from its own
# initialisation, not from the first's weights (same data, same seed).
assert abs(runs[1]["eval_accuracy"] - runs[3]["eval_accuracy"]) <= 0.002, (
    runs[1]["eval_accuracy"], runs[3]["eval_accuracy"])
print("OK")
PY
  ls "$root/mirrored" | grep -q . || fail "the mirrored job wrote no checkpoint under $root/mirrored"
  stop_servers coordinator
  # A coordinator of the same workers and no PS: mirrored jobs only.
  start_server coordinator2 "$COORDINATOR" --address "127.0.0.1:$CHIEF2" \
    --workers "127.0.0.1:$W0,127.0.0.1:$W1" --checkpoint_root "$root"
  wait_listening coordinator2
  # The PS job is refused at submission (exit 2), naming the missing PS.
  rc=0
  timeout 120 "$PSCTL" submit "$TMP/service_3.yaml" --coordinator "127.0.0.1:$CHIEF2" -o json \
    > "$TMP/submit2_3.json" 2> "$TMP/submit2_3.err" || rc=$?
  ((rc == 2)) || { cat "$TMP/submit2_3.err" >&2; fail "PS job without PS: submit exit $rc, want 2"; }
  grep -q "no PS task" "$TMP/submit2_3.err" ||
    { cat "$TMP/submit2_3.err" >&2; fail "the refusal does not name the missing PS"; }
  rc=0
  timeout 120 "$PSCTL" submit "$TMP/service_4.yaml" --coordinator "127.0.0.1:$CHIEF2" -o json \
    > "$TMP/submit2_4.json" 2> "$TMP/submit2_4.err" || rc=$?
  ((rc == 0)) || { cat "$TMP/submit2_4.err" >&2; show_logs; fail "submit to coordinator2: $rc"; }
  id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job_id"])' "$TMP/submit2_4.json")"
  rc=0
  timeout 300 "$PSCTL" watch "$id" --coordinator "127.0.0.1:$CHIEF2" -o json \
    > "$TMP/watch2_4.json" 2> "$TMP/watch2_4.err" || rc=$?
  ((rc == 0)) || { cat "$TMP/watch2_4.err" >&2; show_logs; fail "mirrored job without PS: $rc"; }
  echo "OK: a PS-less coordinator ran the mirrored job and refused the PS job naming the missing PS"
  stop_servers coordinator2 worker0 worker1 ps0 ps1
}

case "$case_name" in
  accuracy) test_accuracy ;;
  service) test_service ;;
  checkpoint_interop) test_checkpoint_interop ;;
  kill_mirrored) test_kill_mirrored ;;
  *) fail "unknown case $case_name" ;;
esac
