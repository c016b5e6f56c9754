#!/usr/bin/env bash
# A long-lived cluster used as a service: 2 ps_server, 2 worker_server and a
# coordinator (with --state_dir) started once from TF_CONFIG on 127.0.0.1,
# then four jobs submitted at once with `psctl submit`:
#   A  Fashion-MNIST softmax regression   (checked against `psctl local`)
#   B  MovieLens CTR, embeddings + MLP     (checked against `psctl local`)
#   C  a Fashion-MNIST MLP with 6144 units (~58 MB of Adam state on ps0: the memory check)
#   D  a copy of A, cancelled while queued
# They must run one at a time in submission order, each from its own
# initialisation (A and B within 1 % of the same job under `psctl local`),
# D never runs, the PS give their memory back after C, and psctl's exit codes
# say what happened (0 ok, 1 job cancelled/failed, 2 refused, 3 unreachable).
#
# usage: cluster_service_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR MOVIELENS_CTR.yaml MOVIELENS_CSV
# Every process the test starts is stopped by pid on exit; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
PS_SERVER="$(abs "$2")"
WORKER_SERVER="$(abs "$3")"
COORDINATOR="$(abs "$4")"
CTR_EXAMPLE="$(abs "$5")"
[[ $# -ge 6 && -r "$6" ]] ||
  fail "data/movielens/movielens.csv is missing: ./setup.sh exports it from r-cran-dslabs"
CSV="$(abs "$6")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
BIN_FLAGS=(--ps_server_bin="$PS_SERVER" --worker_server_bin="$WORKER_SERVER"
           --coordinator_bin="$COORDINATOR")
unset TF_CONFIG PSCTL_COORDINATOR
require_fashion_mnist "$DATA"

# fashion_job FILE NAME UNITS LIMIT EPOCHS: a Fashion-MNIST job; UNITS 0 is
# softmax regression (convex: runs differ by ~0.1 %, so 1 % measures training
# from the wrong start or lost work, not scheduling noise).
fashion_job() {
  local layers="[{dense: {units: 10}}]"
  (($3 > 0)) && layers="[{dense: {units: $3, activation: relu}}, {dense: {units: 10}}]"
  write_job "$1" name="$2" seed=11 layers="$layers" optimizer="{type: adam, learning_rate: 0.0005}" \
    train_limit="$4" epochs="$5"
}
fashion_job "$TMP/a.yaml" softmax 0 0 3
sed "s|path: data/movielens/movielens.csv|path: $CSV|" "$CTR_EXAMPLE" > "$TMP/b.yaml"
grep -q "path: $CSV" "$TMP/b.yaml" || fail "could not point the MovieLens example at $CSV"
fashion_job "$TMP/c.yaml" wide-mlp 6144 3000 1
fashion_job "$TMP/d.yaml" cancelled 0 0 3
fashion_job "$TMP/huge.yaml" huge 65536 0 1  # 616 MB of Adam state on one PS
sed "s/per_replica_batch: 64/per_replica_batch: 9223372036854775807/" "$TMP/a.yaml" > "$TMP/overflow.yaml"

field() {  # field FILE KEY: a top-level field of a JSON file
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# --- References: A and B under `psctl local`, on their own clusters.
for job in a b; do
  timeout 600 "$PSCTL" local "$TMP/$job.yaml" --ps 2 --workers 2 --output json "${BIN_FLAGS[@]}" \
    > "$TMP/$job-local.json" 2> "$TMP/$job-local.err" ||
    { tail -20 "$TMP/$job-local.err" >&2; fail "psctl local $job.yaml failed"; }
done
echo "psctl local: A eval_accuracy $(field "$TMP/a-local.json" eval_accuracy)," \
     "B eval_auc $(field "$TMP/b-local.json" eval_auc)"

# --- The long-lived cluster.
read -r PS0 PS1 W0 W1 CHIEF M0 M1 < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(7)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
CLUSTER="{\"chief\": [\"127.0.0.1:$CHIEF\"], \"worker\": [\"127.0.0.1:$W0\", \"127.0.0.1:$W1\"],
 \"ps\": [\"127.0.0.1:$PS0\", \"127.0.0.1:$PS1\"]}"
tf_config() { echo "{\"cluster\": $CLUSTER, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }
start() {  # start NAME TYPE INDEX BIN ARGS...: a server of the cluster, from TF_CONFIG
  local name="$1" type="$2" index="$3"
  shift 3
  TF_CONFIG="$(tf_config "$type" "$index")" start_server "$name" "$@"
}
# Confined paths: checkpoints under one root (each job without checkpoint.dir
# in ROOT/<job id>), data under Debian's datasets and the MovieLens export.
ROOT="$TMP/checkpoints"
DATA_ROOTS="/usr/share/datasets,$(dirname "$(readlink -f "$CSV")")"  # symlinks resolved
start ps0 ps 0 "$PS_SERVER" --metrics_address "127.0.0.1:$M0" --checkpoint_root "$ROOT"
start ps1 ps 1 "$PS_SERVER" --metrics_address "127.0.0.1:$M1" --checkpoint_root "$ROOT"
start worker0 worker 0 "$WORKER_SERVER" --compute_threads 1 --data_root "$DATA_ROOTS"
start worker1 worker 1 "$WORKER_SERVER" --compute_threads 1 --data_root "$DATA_ROOTS"
start coordinator chief 0 "$COORDINATOR" --state_dir "$TMP/state" \
  --ps_memory_limit_bytes 200000000 --checkpoint_root "$ROOT" --data_root "$DATA_ROOTS"
wait_listening ps0 ps1 worker0 worker1 coordinator
export PSCTL_COORDINATOR="127.0.0.1:$CHIEF"  # psctl's default --coordinator

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
BASE0="$(rss_kb "$PID_ps0")"
BASE1="$(rss_kb "$PID_ps1")"

# expect_exit RC NAME psctl ARGS...: psctl exits RC (stdout in $TMP/NAME.out).
expect_exit() {
  local want="$1" name="$2" rc=0
  shift 2
  timeout 600 "$PSCTL" "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" || rc=$?
  ((rc == want)) || { cat "$TMP/$name.err" >&2; show_logs; fail "psctl $*: exit $rc, want $want"; }
  echo "ok: psctl $1 ($name) exits $rc"
}

# Refused before they are queued: exit 2, the reason named.
expect_exit 2 overflow submit "$TMP/overflow.yaml"
grep -q "per_replica_batch must be <= 65536" "$TMP/overflow.err" || fail "overflow: no reason given"
expect_exit 2 huge submit "$TMP/huge.yaml"
grep -q "over the per-PS memory limit" "$TMP/huge.err" || fail "huge: no reason given"
expect_exit 3 unreachable status --coordinator 127.0.0.1:1
# Files outside the roots (issue 12): refused naming the field and the flag,
# never quoting the file.
sed "s|images: $DATA/train-images-idx3-ubyte.gz|images: /etc/shadow|" "$TMP/a.yaml" > "$TMP/shadow.yaml"
expect_exit 2 shadow submit "$TMP/shadow.yaml"
grep -q "data.train.images: '/etc/shadow' is not under a data root" "$TMP/shadow.err" ||
  fail "shadow: no reason given"
if grep -q "root:" "$TMP/shadow.err"; then fail "shadow: the error quotes the file"; fi
printf 'checkpoint: {dir: /tmp/elsewhere}\n' | cat "$TMP/a.yaml" - > "$TMP/elsewhere.yaml"
expect_exit 2 elsewhere submit "$TMP/elsewhere.yaml"
grep -q "checkpoint.dir: '/tmp/elsewhere' is outside --checkpoint_root" "$TMP/elsewhere.err" ||
  fail "elsewhere: no reason given"

# Three jobs at once (C comes later, for the memory check).
declare -A ID
for job in a b d; do
  expect_exit 0 "submit-$job" submit "$TMP/$job.yaml" -o json
  ID[$job]="$(field "$TMP/submit-$job.out" job_id)"
done
echo "submitted: ${ID[a]} ${ID[b]} ${ID[d]}"
expect_exit 0 cancel-d cancel "${ID[d]}"
expect_exit 2 cancel-d-again cancel "${ID[d]}"
expect_exit 2 cancel-nobody cancel nobody-1
expect_exit 0 list list -o json

# held PORT: "JOBS PARAMETER_BYTES SLOT_BYTES" a PS holds now, from its
# /metrics (pscluster_ps_jobs, pscluster_ps_held_bytes{kind}).
held() {
  curl -sf "http://127.0.0.1:$1/metrics" | awk '
    /^pscluster_ps_jobs / {jobs = $2; n++}
    /^pscluster_ps_held_bytes\{kind="parameters"\}/ {p = $2; n++}
    /^pscluster_ps_held_bytes\{kind="slots"\}/ {s = $2; n++}
    END {if (n == 3) printf "%d %d %d\n", jobs, p, s; else print "no PS metrics"}'
}
# expect_nothing_held WHEN: both PS hold no job and no byte.
expect_nothing_held() {
  local m h
  for m in "$M0" "$M1"; do
    h="$(held "$m")"
    [[ "$h" == "0 0 0" ]] || { show_logs; fail "$1: a PS still holds jobs/parameter/slot bytes: $h"; }
  done
  echo "ok: $1: neither PS holds a job or a byte (pscluster_ps_jobs, pscluster_ps_held_bytes)"
}

for job in a b; do expect_exit 0 "watch-$job" watch "${ID[$job]}" -o json; done
expect_nothing_held "after A and B"
# The PS after two jobs (their connections and gRPC buffers warmed up): C
# must leave them there again.
WARM0="$(rss_kb "$PID_ps0")"
WARM1="$(rss_kb "$PID_ps1")"
expect_exit 0 submit-c submit "$TMP/c.yaml" -o json
ID[c]="$(field "$TMP/submit-c.out" job_id)"
# C holds ~58 MB on ps0 while it runs: watch it in the background and sample.
timeout 600 "$PSCTL" watch "${ID[c]}" -o json > "$TMP/watch-c.out" 2> "$TMP/watch-c.err" &
WATCH_C=$!
STARTED_PIDS+=("$WATCH_C")
PEAK0=0
for _ in $(seq 1 6000); do
  gone "$WATCH_C" && break
  r="$(rss_kb "$PID_ps0")"
  ((r > PEAK0)) && PEAK0="$r"
  sleep 0.05
done
rc=0
wait "$WATCH_C" || rc=$?
((rc == 0)) || { cat "$TMP/watch-c.err" >&2; show_logs; fail "psctl watch C exited $rc"; }
expect_exit 1 watch-d watch "${ID[d]}" -o json  # CANCELLED

for job in a b c d; do expect_exit 0 "logs-$job" logs "${ID[$job]}" -o json; done
expect_exit 0 describe-a describe "${ID[a]}" -o json

python3 - "$TMP" "${ID[a]}" "${ID[b]}" "${ID[c]}" "${ID[d]}" <<'PY' || { show_logs; fail "wrong results"; }
import json, sys
tmp, ids = sys.argv[1], dict(zip("abcd", sys.argv[2:]))
load = lambda name: json.load(open("%s/%s" % (tmp, name)))
w = {j: load("watch-%s.out" % j) for j in "abcd"}
for j in "abc":
    assert w[j]["state"] == "SUCCEEDED", (j, w[j].get("error"))
assert w["d"]["state"] == "CANCELLED", w["d"]
local_a, local_b = load("a-local.json"), load("b-local.json")
acc, ref = w["a"]["eval_accuracy"], local_a["eval_accuracy"]
print("A: eval accuracy %.4f on the service, %.4f under psctl local" % (acc, ref))
assert abs(acc - ref) <= 0.01, "A differs by more than 1 %"
auc, ref = w["b"]["eval_auc"], local_b["eval_auc"]
print("B: eval AUC %.4f on the service, %.4f under psctl local" % (auc, ref))
assert abs(auc - ref) <= 0.01, "B differs by more than 1 %"
# Every training step ran and was applied (nothing dropped as a repeat of
# another job's keys).
for j in "ab":
    assert w[j]["steps"] == w[j]["total_steps"] > 0, (j, w[j]["steps"], w[j]["total_steps"])

# A's PS applied every step once, and its final checkpoint pruned every
# exactly-once key (what the PS held as the job ended).
d = load("describe-a.out")
applied = [p["applied_steps"] for p in d["ps"]]
assert all(a == w["a"]["total_steps"] for a in applied), (applied, w["a"]["total_steps"])
assert all(p["held_keys"] == 0 for p in d["ps"]), d["ps"]

# One at a time, in submission order; D never started.
def events(j):
    doc = load("logs-%s.out" % j)
    return doc["events"] if isinstance(doc, dict) else doc
when = {j: {e["kind"]: e["unix_seconds"] for e in events(j)} for j in "abcd"}
for j in "abc":
    assert "started" in when[j] and "succeeded" in when[j], (j, when[j])
assert when["a"]["succeeded"] <= when["b"]["started"], "B started before A ended"
assert when["b"]["succeeded"] <= when["c"]["started"], "C started before B ended"
assert "started" not in when["d"] and "cancelled" in when["d"], when["d"]
print("ok: A, B, C ran one after another in submission order; D was cancelled while queued")
PY

# PS memory: C's ~58 MB (plus its pooled messages) showed up on ps0 and went
# away when C ended: the PS holds no job and no byte of one, and its resident
# memory is back near where it was before C. What stays is gRPC and
# allocator state that does not grow from job to job (measured: 24-33 MB
# after each of three identical wide jobs in a row, 10-31 MB above the warm
# figure here depending on the machine's load), far below what C held.
expect_nothing_held "after C"
END0="$(rss_kb "$PID_ps0")"
END1="$(rss_kb "$PID_ps1")"
echo "ps0 RSS: ${BASE0} kB at start, ${WARM0} kB after A and B, peak ${PEAK0} kB during C," \
     "${END0} kB after C; ps1: ${BASE1} kB at start, ${WARM1} kB after A and B, ${END1} kB after C"
((PEAK0 - WARM0 > 58000)) || fail "C never held its ~58 MB on ps0 (peak ${PEAK0} kB)"
((END0 - WARM0 < (PEAK0 - WARM0) / 4)) ||
  fail "ps0 kept $((END0 - WARM0)) kB of the $((PEAK0 - WARM0)) kB it grew by during C"
((END1 - WARM1 < 32000)) || fail "ps1 kept $((END1 - WARM1)) kB after C ended"

stop_servers ps0 ps1 worker0 worker1 coordinator
echo PASS
