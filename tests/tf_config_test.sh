#!/usr/bin/env bash
# A long-lived cluster started the way Kubernetes would: 2 ps_server,
# 2 worker_server and a coordinator, each told its task by TF_CONFIG (one PS by
# --cluster FILE instead, with a TF_CONFIG for another task that it must
# ignore), on 127.0.0.1 free ports. One worker starts only after the job was
# submitted: the job waits for it and succeeds. Before that, servers given a
# malformed or inconsistent cluster exit 2 naming the problem.
#
# usage: tf_config_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR JOB.yaml
# Every process the test starts is stopped by pid on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
PS_SERVER="$(abs "$2")"
WORKER_SERVER="$(abs "$3")"
COORDINATOR="$(abs "$4")"
EXAMPLE_JOB="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
unset TF_CONFIG

require_fashion_mnist "$DATA"

# Five distinct free ports: all bound at once, then released.
read -r PS0 PS1 W0 W1 CHIEF < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')

CLUSTER="{\"chief\": [\"127.0.0.1:$CHIEF\"],
 \"worker\": [\"127.0.0.1:$W0\", \"127.0.0.1:$W1\"],
 \"ps\": [\"127.0.0.1:$PS0\", \"127.0.0.1:$PS1\"]}"
# tf_config TYPE INDEX: this cluster's TF_CONFIG for one task.
tf_config() { echo "{\"cluster\": $CLUSTER, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }
cat > "$TMP/cluster.yaml" <<YAML
cluster:
  chief: [127.0.0.1:$CHIEF]
  worker: [127.0.0.1:$W0, 127.0.0.1:$W1]
  ps:
    - 127.0.0.1:$PS0
    - 127.0.0.1:$PS1
YAML

# expect_bad_flags NAME MESSAGE ENV_TF_CONFIG BIN ARGS...: the server exits 2
# within 10 s and its stderr names the problem.
expect_bad_flags() {
  local name="$1" message="$2" tf="$3"
  shift 3
  local rc=0
  TF_CONFIG="$tf" timeout 10 "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" || rc=$?
  ((rc == 2)) || { cat "$TMP/$name.err" >&2; fail "$name: exit $rc, want 2"; }
  grep -qF -- "$message" "$TMP/$name.err" ||
    { cat "$TMP/$name.err" >&2; fail "$name: stderr does not say '$message'"; }
  echo "ok: $name: $(head -1 "$TMP/$name.err")"
}

expect_bad_flags malformed "TF_CONFIG:1:" '{"cluster": {"ps": ["127.0.0.1:1"]' "$PS_SERVER"
expect_bad_flags malformed_says_json "malformed JSON" '{"cluster": {"ps": [' "$PS_SERVER"
expect_bad_flags no_cluster "missing \`cluster\`" '{"task": {"type": "ps", "index": 0}}' "$PS_SERVER"
expect_bad_flags out_of_range "task worker 5 is out of range: the cluster has 2 worker tasks" \
  "$(tf_config worker 5)" "$WORKER_SERVER"
expect_bad_flags wrong_type "this task is worker 0, but this server runs ps tasks" \
  "$(tf_config worker 0)" "$PS_SERVER"
expect_bad_flags bad_port "port '70000' is out of range" \
  '{"cluster": {"ps": ["127.0.0.1:70000"], "worker": ["a:1"]}, "task": {"type": "ps"}}' "$PS_SERVER"
expect_bad_flags bad_log_level "--log_level='loud'" "" "$PS_SERVER" --log_level=loud
expect_bad_flags cluster_and_ps "either --cluster or --ps/--workers" "" \
  "$COORDINATOR" --cluster "$TMP/cluster.yaml" --ps "127.0.0.1:$PS0"

# start NAME TF_CONFIG BIN ARGS...: starts a server in the background.
start() {
  local name="$1" tf="$2"
  shift 2
  TF_CONFIG="$tf" "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" &
  STARTED_PIDS+=("$!")
  eval "PID_${name}=$!"
}

show_logs() {
  local f
  for f in "$TMP"/*.err "$TMP"/*.out; do
    echo "--- $f:" >&2
    tail -n 30 "$f" >&2 || true
  done
}

# wait_listening NAME ADDRESS: within 60 s the server prints that it listens
# on ADDRESS.
wait_listening() {
  local name="$1" address="$2" pid_var="PID_$1"
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    grep -q "listening on" "$TMP/$name.out" 2>/dev/null && break
    gone "${!pid_var}" && { show_logs; fail "$name exited before listening"; }
    sleep 0.1
  done
  grep -qF "listening on $address" "$TMP/$name.out" ||
    { show_logs; fail "$name does not listen on $address"; }
  echo "ok: $name listens on $address"
}

start ps0 "$(tf_config ps 0)" "$PS_SERVER"
# --cluster wins over TF_CONFIG (here: another task's).
start ps1 "$(tf_config worker 0)" "$PS_SERVER" --cluster "$TMP/cluster.yaml" --task_type ps \
  --task_index 1 --log_level warn
start worker0 "$(tf_config worker 0)" "$WORKER_SERVER" --compute_threads 1
start coordinator "$(tf_config chief 0)" "$COORDINATOR" --cluster_wait_s 120 --log_level debug
wait_listening ps0 "127.0.0.1:$PS0"
wait_listening ps1 "127.0.0.1:$PS1"
wait_listening worker0 "127.0.0.1:$W0"
wait_listening coordinator "127.0.0.1:$CHIEF"
# --log_level warn: ps1 logs no info lines.
! grep -q "\[info\]" "$TMP/ps1.err" || { show_logs; fail "ps1 --log_level warn still logs info"; }

# examples/fashion_mnist_mlp.yaml, shrunk: 1 epoch on 6000 examples.
python3 - "$EXAMPLE_JOB" "$TMP/job.yaml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r"epochs: \d+", "epochs: 1", text)
text = re.sub(r"(\n    labels: [^\n]*train-labels[^\n]*)", r"\1\n    limit: 6000", text)
text = re.sub(r"(\n    labels: [^\n]*t10k-labels[^\n]*)", r"\1\n    limit: 2000", text)
assert text.count("limit:") == 2, text
open(sys.argv[2], "w").write(text)
PY

COORD=(--coordinator "127.0.0.1:$CHIEF")
timeout 60 "$PSCTL" submit "$TMP/job.yaml" "${COORD[@]}" > "$TMP/submit.out" 2> "$TMP/submit.err" ||
  { cat "$TMP/submit.err" >&2; show_logs; fail "psctl submit failed"; }
JOB_ID="$(grep -v '^\s*$' "$TMP/submit.out" | tail -1 | tr -d '[:space:]')"
[[ -n "$JOB_ID" ]] || fail "psctl submit printed no job id"
echo "submitted $JOB_ID"

# The second worker comes late: the job must wait for it, not fail. It
# starts once the job is seen RUNNING (out of the queue, in its wait for
# every task to answer: without worker 1 it can neither train nor, before
# --cluster_wait_s, fail), polled for at most 60 s; the job's end below
# says whether it waited.
deadline=$((SECONDS + 60))
state=""
while ((SECONDS < deadline)); do
  read -r steps _ state < <(job_progress "127.0.0.1:$CHIEF")
  [[ "$state" == QUEUED || "$state" == NONE ]] || break
  gone "$PID_coordinator" && { show_logs; fail "coordinator exited"; }
  sleep 0.1
done
[[ "$state" == RUNNING ]] || { show_logs; fail "job $JOB_ID is $state, want RUNNING (waiting for worker 1)"; }
((steps == 0)) || { show_logs; fail "job $JOB_ID trained $steps steps without worker 1"; }
gone "$PID_coordinator" && { show_logs; fail "coordinator exited"; }
echo "ok: job $JOB_ID is RUNNING and waits for worker 1"
start worker1 "$(tf_config worker 1)" "$WORKER_SERVER" --compute_threads 1
wait_listening worker1 "127.0.0.1:$W1"

rc=0
timeout 300 "$PSCTL" watch "$JOB_ID" "${COORD[@]}" --output json > "$TMP/watch.json" \
  2> "$TMP/watch.err" || rc=$?
((rc != 124)) || { show_logs; fail "psctl watch did not end within 300 s"; }
cat "$TMP/watch.json"
python3 - "$TMP/watch.json" <<'PY' || { cat "$TMP/watch.err" >&2; show_logs; fail "bad result"; }
import json, sys
job = json.loads(open(sys.argv[1]).read())
state = job.get("state")
assert state in ("SUCCEEDED", 3), "job ended %s: %s" % (state, job.get("error"))
acc = job.get("eval_accuracy", job.get("evalAccuracy"))
assert acc is not None and acc > 0.5, "eval accuracy %s <= 0.5" % acc
print("ok: job SUCCEEDED, eval accuracy %.4f" % acc)
PY
((rc == 0)) || { show_logs; fail "psctl watch exited $rc"; }

# Every server still runs (none crashed); stop them by pid, bounded.
stop_servers ps0 ps1 worker0 worker1 coordinator
echo PASS
