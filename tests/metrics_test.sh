#!/usr/bin/env bash
# Metrics on every process, with the real servers and Debian's Prometheus.
#
# usage: metrics_test.sh scrape|prometheus PSCTL PS_SERVER WORKER_SERVER COORDINATOR
#   scrape      `psctl local --metrics` trains Fashion-MNIST on 2 PS x 2 workers;
#               while it trains, /metrics of the coordinator, both PS and both
#               workers is fetched, passes `promtool check metrics`, and has the
#               pscluster_* and process_* metrics with sane values
#   prometheus  the same job scraped by a real Prometheus (127.0.0.1, 1 s
#               interval, static targets = the job's metrics addresses):
#               /api/v1/query for pscluster_job_steps_total answers, and rises
#               while the job trains
# Every process the test starts is stopped by pid on exit.
set -euo pipefail

case_name="$1"
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$2")"
PS_SERVER="$(abs "$3")"
WORKER_SERVER="$(abs "$4")"
COORDINATOR="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist

for tool in curl promtool prometheus python3; do
  command -v "$tool" > /dev/null ||
    fail "$tool is not installed (./setup.sh installs curl and Debian's prometheus, which brings promtool)"
done
require_fashion_mnist "$DATA"

# Enough epochs to train for well over 10 s on a small machine; the test
# cancels it (--timeout_s) once it has what it needs.
write_job "$TMP/job.yaml" name=metrics-test strategy=parameter_server train_limit=3000 \
  eval_limit=1000 per_replica_batch=32 epochs=1000 steps_per_closure=5 \
  checkpoint="{dir: $TMP/ckpt, every_steps: 40, keep: 2}"

local_in_background "$TMP/stdout" "$TMP/stderr" 300 "$TMP/job.yaml" --ps 2 --workers 2 \
  --metrics -o json --timeout_s 240 --run_dir "$TMP/run" \
  --ps_server_bin="$PS_SERVER" --worker_server_bin="$WORKER_SERVER" \
  --coordinator_bin="$COORDINATOR"

# "psctl: cluster up: ...; metrics coordinator=H:P ps=H:P,H:P worker=H:P,H:P"
up="$(grep -m1 'cluster up' "$TMP/stderr")"
METRICS_COORDINATOR="$(sed -n 's/.* coordinator=\([0-9.:]*\).*/\1/p' <<< "$up")"
IFS=, read -r -a METRICS_PS <<< "$(sed -n 's/.* ps=\([0-9.:,]*\).*/\1/p' <<< "$up")"
IFS=, read -r -a METRICS_WORKER <<< "$(sed -n 's/.* worker=\([0-9.:,]*\).*/\1/p' <<< "$up")"
[[ -n "$METRICS_COORDINATOR" && ${#METRICS_PS[@]} -eq 2 && ${#METRICS_WORKER[@]} -eq 2 ]] ||
  fail "no metrics addresses in psctl's cluster-up line: $up"
echo "metrics: coordinator $METRICS_COORDINATOR, ps ${METRICS_PS[*]}, worker ${METRICS_WORKER[*]}"

# Waits (at most 60 s) until the job has trained some steps.
wait_progress "$ADDRESS" 0.002 60 || fail "the job made no progress: $(job_progress "$ADDRESS")"

# scrape NAME ADDRESS: /metrics of ADDRESS into $TMP/NAME.prom.
scrape() {
  curl -sf --max-time 10 "http://$2/metrics" > "$TMP/$1.prom" ||
    fail "cannot fetch http://$2/metrics ($1)"
}

# value FILE SERIES: the value of the sample SERIES (name plus labels, exactly
# as exposed, e.g. 'pscluster_ps_held_bytes{kind="parameters"}'); empty if none.
value() {
  awk -v s="$2" '$1 == s { print $2; exit }' "$1"
}

# expect FILE SERIES OP NUMBER: fails unless the sample exists and compares.
expect() {
  local v
  v="$(value "$1" "$2")"
  [[ -n "$v" ]] || fail "$(basename "$1"): no sample $2"
  awk -v v="$v" -v n="$4" -v op="$3" 'BEGIN {
    ok = (op == ">" && v > n) || (op == ">=" && v >= n) || (op == "==" && v == n) ||
         (op == "<=" && v <= n)
    exit !ok }' || fail "$(basename "$1"): $2 is $v, expected $3 $4"
  echo "  $(basename "$1" .prom): $2 = $v"
}

case_scrape() {
  # Let a checkpoint or two commit and an epoch finish first.
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    scrape coordinator "$METRICS_COORDINATOR"
    v="$(value "$TMP/coordinator.prom" 'pscluster_job_eval_metric{metric="accuracy"}')"
    c="$(value "$TMP/coordinator.prom" pscluster_checkpoints_total)"
    [[ -n "$v" && "${c:-0}" != 0 ]] && break
    sleep 0.5
  done
  scrape ps-0 "${METRICS_PS[0]}"
  scrape ps-1 "${METRICS_PS[1]}"
  scrape worker-0 "${METRICS_WORKER[0]}"
  scrape worker-1 "${METRICS_WORKER[1]}"
  [[ "$(job_progress "$ADDRESS")" == *RUNNING ]] || fail "the job is no longer running"

  for name in coordinator ps-0 ps-1 worker-0 worker-1; do
    out="$(promtool check metrics < "$TMP/$name.prom" 2>&1)" ||
      fail "promtool check metrics on $name: $out"
    echo "promtool check metrics $name: OK"
    expect "$TMP/$name.prom" process_cpu_seconds_total ">" 0
    expect "$TMP/$name.prom" process_resident_memory_bytes ">" 1000000
    expect "$TMP/$name.prom" process_start_time_seconds ">" 1000000000
  done

  local f="$TMP/coordinator.prom"
  expect "$f" 'pscluster_jobs{state="running"}' == 1
  for state in queued succeeded failed cancelled; do expect "$f" "pscluster_jobs{state=\"$state\"}" == 0; done
  expect "$f" pscluster_queue_depth == 0
  expect "$f" pscluster_job_steps_total ">" 0
  expect "$f" pscluster_job_examples_total ">" 0
  expect "$f" pscluster_job_examples_per_second ">" 0
  expect "$f" pscluster_job_train_loss ">" 0
  expect "$f" 'pscluster_job_eval_metric{metric="accuracy"}' ">" 0.3
  expect "$f" 'pscluster_job_eval_metric{metric="loss"}' ">" 0
  expect "$f" pscluster_closures_scheduled_total ">" 0
  expect "$f" pscluster_closures_retried_total == 0
  expect "$f" pscluster_closures_failed_total == 0
  expect "$f" pscluster_ps_recoveries_total == 0
  expect "$f" pscluster_lost_steps_total == 0
  expect "$f" pscluster_workers_lost_total == 0
  expect "$f" pscluster_checkpoints_total ">" 0
  expect "$f" pscluster_checkpoint_age_seconds ">=" 0
  expect "$f" pscluster_checkpoint_age_seconds "<=" 120
  expect "$f" pscluster_checkpoint_duration_seconds ">" 0
  expect "$f" pscluster_checkpoint_bytes ">" 100000  # 784x64 floats alone are 200 KB
  expect "$f" 'pscluster_cluster_tasks_healthy{task_type="ps"}' == 2
  expect "$f" 'pscluster_cluster_tasks_healthy{task_type="worker"}' == 2
  expect "$f" pscluster_checkpoint_failures_total == 0
  expect "$f" pscluster_checkpoints_disabled == 0
  grep -q '^pscluster_rpc_requests_total{.*service="Coordinator"' "$f" ||
    fail "coordinator: no pscluster_rpc_requests_total"
  # Counters only grow; examples follow steps.
  steps="$(value "$f" pscluster_job_steps_total)"
  examples="$(value "$f" pscluster_job_examples_total)"
  awk -v s="$steps" -v e="$examples" 'BEGIN { exit !(e >= s && e <= 32 * s) }' ||
    fail "coordinator: $examples examples for $steps steps at batch 32"

  for name in ps-0 ps-1; do
    f="$TMP/$name.prom"
    expect "$f" 'pscluster_ps_held_bytes{kind="parameters"}' ">" 0
    expect "$f" 'pscluster_ps_held_bytes{kind="slots"}' ">" 0  # adam's moments
    expect "$f" pscluster_ps_jobs == 1
    grep -q '^pscluster_ps_variable_bytes{.*kind="parameters".*variable="' "$f" ||
      fail "$name: no pscluster_ps_variable_bytes per variable"
    grep -E '^pscluster_ps_variable_bytes\{' "$f" | grep -q 'job' &&
      fail "$name: a job label on pscluster_ps_variable_bytes"
    grep -q '^pscluster_ps_applied_updates_total' "$f" || fail "$name: no pscluster_ps_applied_updates_total"
  done
  for name in worker-0 worker-1; do
    f="$TMP/$name.prom"
    expect "$f" pscluster_worker_compute_seconds_total ">" 0
    expect "$f" pscluster_worker_pull_seconds_total ">" 0
    expect "$f" pscluster_worker_push_seconds_total ">" 0
    expect "$f" pscluster_worker_steps_total ">" 0
    expect "$f" pscluster_worker_examples_total ">" 0
  done
  # No job or closure id anywhere as a label.
  if grep -hE '^pscluster_[a-z_]+\{[^}]*(job_id|closure)' "$TMP"/*.prom; then
    fail "a job or closure id is a label"
  fi
}

# query PROM_ADDRESS EXPR: the first result's value of an instant query; empty if none.
query() {
  { curl -sf --max-time 5 "http://$1/api/v1/query" --data-urlencode "query=$2" || true; } | python3 -c '
import json, sys
try:
    r = json.load(sys.stdin)["data"]["result"]
    print(r[0]["value"][1] if r else "")
except Exception:
    print("")'
}

case_prometheus() {
  local port
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  local targets="'$METRICS_COORDINATOR', '${METRICS_PS[0]}', '${METRICS_PS[1]}', '${METRICS_WORKER[0]}', '${METRICS_WORKER[1]}'"
  cat > "$TMP/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pscluster
    static_configs:
      - targets: [$targets]
YAML
  promtool check config "$TMP/prometheus.yml" > "$TMP/promtool-config.log" 2>&1 ||
    fail "promtool check config: $(cat "$TMP/promtool-config.log")"
  prometheus --config.file="$TMP/prometheus.yml" --web.listen-address="127.0.0.1:$port" \
    --storage.tsdb.path="$TMP/tsdb" > "$TMP/prometheus.log" 2>&1 &
  PROM_PID=$!
  STARTED_PIDS+=("$PROM_PID")
  local prom="127.0.0.1:$port" first="" deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    gone "$PROM_PID" && fail "prometheus exited: $(tail -5 "$TMP/prometheus.log")"
    first="$(query "$prom" pscluster_job_steps_total)"
    [[ -n "$first" ]] && break
    sleep 0.5
  done
  [[ -n "$first" ]] || fail "prometheus never had pscluster_job_steps_total (log: $(tail -5 "$TMP/prometheus.log"))"
  local up
  up="$(query "$prom" 'count(up == 1)')"
  # Every target is scraped (up == 1) once each has been tried.
  deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)) && [[ "$up" != 5 ]]; do sleep 0.5; up="$(query "$prom" 'count(up == 1)')"; done
  [[ "$up" == 5 ]] || fail "prometheus: $up of 5 targets up"
  echo "prometheus: 5 targets up; pscluster_job_steps_total = $first"
  local second="" rise=""
  deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    sleep 0.5  # a poll of Prometheus (it scrapes every 1 s), not a fault schedule
    second="$(query "$prom" pscluster_job_steps_total)"
    if awk -v a="$first" -v b="$second" 'BEGIN { exit !(b > a) }'; then rise=1; break; fi
  done
  [[ "$(job_progress "$ADDRESS")" == *RUNNING* ]] || fail "the job ended before the check"
  [[ -n "$rise" ]] || fail "pscluster_job_steps_total did not rise in Prometheus: $first then $second"
  echo "prometheus: pscluster_job_steps_total rose from $first to $second"
  local rate
  rate="$(query "$prom" 'sum(rate(pscluster_worker_steps_total[5s]))')"
  echo "prometheus: sum(rate(pscluster_worker_steps_total[5s])) = ${rate:-none}"
  kill -TERM "$PROM_PID"
  for _ in $(seq 1 100); do gone "$PROM_PID" && break; sleep 0.1; done
  gone "$PROM_PID" || fail "prometheus did not stop within 10 s of SIGTERM"
}

case "$case_name" in
  scrape) case_scrape ;;
  prometheus) case_prometheus ;;
  *) fail "unknown case $case_name" ;;
esac

# Stop the job: psctl cancels on SIGINT and stops every child.
children="$(pgrep -P "$PSCTL_PID" || true)"
kill -INT "$PSCTL_PID"
wait "$TPID" || true
for pid in $children; do
  for _ in $(seq 1 100); do gone "$pid" && break; sleep 0.1; done
  gone "$pid" || fail "child $pid left behind"
done
echo "PASS: $case_name"
