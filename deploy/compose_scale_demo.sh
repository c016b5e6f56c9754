#!/usr/bin/env bash
# A `replicas` change on the compose cluster (issue 25, must-show 2): brings
# up deploy/docker-compose.yml with deploy/docker-compose.elastic.yml (the
# scalable `worker-elastic` service; the coordinator takes joiners), submits
# a Fashion-MNIST parameter_server job with the host's psctl, and during the
# job, triggered by its progress (polled, every wait bounded):
#   - at UP_AT (10 %) of its steps: `up --scale worker-elastic=3` (2 -> 5
#     workers); waits until the coordinator has recorded three
#     worker_joined events and every joiner's own /metrics counts steps
#     (pscluster_worker_steps_total > 0: it ran closures);
#   - then `up --scale worker-elastic=1` (5 -> 3): compose sends SIGTERM to
#     two replicas, which leave (LeaveCluster) and exit 0.
# Checks: the job SUCCEEDED with every step, no worker lost, three joins, and
# both leavers logged "left the cluster". Prints a summary with timings.
# Then `docker-compose down -v`, and every container, network, volume and
# process it started is removed or stopped (by pid).
#
# Slow (image build ~2 min, the job ~1-2 min): run by hand, not a test.
# Usage: deploy/compose_scale_demo.sh [PSCTL PS_SERVER WORKER_SERVER COORDINATOR EVALUATOR]
#   (default: the binaries under .bazel/bin/). Needs root, podman and
#   docker-compose 1.29 (deploy/compose_test.sh installs them with apt), and
#   the Debian mirror for the image build.
# Environment: EPOCHS (job length, default 120), UP_AT (fraction of the
#   steps at which to scale up, default 0.10), PSCLUSTER_ELASTIC_SUBNET (the
#   `pscluster` network, default 10.89.77.0/24; must be free).
# Results of a run: bench/results/2026-12-07-compose-scale.md.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
if [[ $# -ge 5 ]]; then
  PSCTL=$(abs "$1") PS_SERVER=$(abs "$2") WORKER_SERVER=$(abs "$3") COORDINATOR=$(abs "$4")
  EVALUATOR=$(abs "$5")
else
  B=$root/.bazel/bin
  PSCTL=$B/client/psctl PS_SERVER=$B/ps/ps_server WORKER_SERVER=$B/worker/worker_server
  COORDINATOR=$B/coordinator/coordinator EVALUATOR=$B/evaluator/evaluator
fi
for b in "$PSCTL" "$PS_SERVER" "$WORKER_SERVER" "$COORDINATOR" "$EVALUATOR"; do
  [[ -x $b ]] || { echo "compose_scale_demo.sh: $b not found: build it with Bazel first" >&2; exit 2; }
done
((EUID == 0)) || { echo "compose_scale_demo.sh: needs root (rootful podman)" >&2; exit 2; }
for tool in podman docker-compose openssl curl; do
  command -v "$tool" >/dev/null ||
    { echo "compose_scale_demo.sh: $tool not found (deploy/compose_test.sh lists the packages)" >&2; exit 2; }
done
EPOCHS=${EPOCHS:-120}
[[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || { echo "compose_scale_demo.sh: EPOCHS must be a positive integer" >&2; exit 2; }
export PSCLUSTER_ELASTIC_SUBNET=${PSCLUSTER_ELASTIC_SUBNET:-10.89.77.0/24}
[[ $PSCLUSTER_ELASTIC_SUBNET =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.0/24$ ]] ||
  { echo "compose_scale_demo.sh: PSCLUSTER_ELASTIC_SUBNET must be a /24 (a.b.c.0/24)" >&2; exit 2; }
NET_PREFIX=${BASH_REMATCH[1]}
export PSCTL
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"  # netavark needs iptables there
UP_AT=${UP_AT:-0.10}
[[ $UP_AT =~ ^0?\.[0-9]+$ ]] || { echo "compose_scale_demo.sh: UP_AT must be a fraction in (0, 1), e.g. 0.10" >&2; exit 2; }
JOINERS=3
STAY=1

TMP=$(mktemp -d /tmp/compose_scale_demo.XXXXXX)
SOCK="$TMP/podman.sock"
PROJECT="pscluster-scale-$$"
SERVICE_PID=""
LOG_PIDS=()
now() { date +%s.%N; }
T_START=$(now)
at() { awk -v a="$T_START" -v b="$(now)" 'BEGIN { printf "%6.1f s", b - a }'; }
say() { echo "[$(at)] $*"; }
compose() {
  DOCKER_HOST="unix://$SOCK" docker-compose -p "$PROJECT" -f "$TMP/deploy/docker-compose.yml" \
    -f "$TMP/deploy/docker-compose.elastic.yml" "$@"
}
cleanup() {
  local rc=$?
  if [[ -n $SERVICE_PID ]]; then
    if ((rc != 0)); then
      echo "---- container logs (last lines)" >&2
      compose logs --no-color --tail=20 2>&1 | tail -120 >&2
    fi
    compose down -v -t 5 > "$TMP/down.log" 2>&1 || cat "$TMP/down.log" >&2
    podman ps -aq --filter "label=com.docker.compose.project=$PROJECT" | xargs -r podman rm -f >/dev/null 2>&1
    podman network rm -f "${PROJECT}_pscluster" "${PROJECT}_edge" >/dev/null 2>&1
    podman volume rm -f "${PROJECT}_state" "${PROJECT}_checkpoints" >/dev/null 2>&1
    left=$(podman ps -aq --filter "label=com.docker.compose.project=$PROJECT" | wc -l)
    echo "teardown: docker-compose down -v; containers of project $PROJECT left: $left"
    kill -TERM "$SERVICE_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$SERVICE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVICE_PID" 2>/dev/null
  fi
  for pid in "${LOG_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  rm -rf "$TMP"
  exit $rc
}
trap cleanup EXIT

# podman's defaults fail on these machines; the same containers.conf as
# deploy/compose_test.sh writes (deploy-tooling.md section 1).
CONF=/etc/containers/containers.conf
WANT_CONF='[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"'
if [[ ! -f $CONF || "$(cat "$CONF")" != "$WANT_CONF" ]]; then
  [[ -f $CONF ]] && cp "$CONF" "$CONF.pscluster-bak"
  mkdir -p /etc/containers && printf '%s\n' "$WANT_CONF" > "$CONF"
  say "wrote $CONF"
fi
podman info > "$TMP/podman-info.log" 2>&1 || { tail -5 "$TMP/podman-info.log"; fail "podman info fails"; }

# ----------------------------------------------------------------- images
say "building the images (deploy/build_image.sh)"
mkdir -p "$TMP/bin"
ln -s "$PSCTL" "$TMP/bin/psctl"; ln -s "$PS_SERVER" "$TMP/bin/ps_server"
ln -s "$WORKER_SERVER" "$TMP/bin/worker_server"; ln -s "$COORDINATOR" "$TMP/bin/coordinator"
ln -s "$EVALUATOR" "$TMP/bin/evaluator"
STAGE="$TMP/stage" "$here/build_image.sh" "$TMP/bin" > "$TMP/build.log" 2>&1 ||
  { tail -30 "$TMP/build.log"; fail "deploy/build_image.sh failed"; }
grep -E '^TIMING' "$TMP/build.log"
rm -rf "$TMP/stage"

# ---------------------------------------------------------------- secrets
mkdir -p "$TMP/deploy"
cp -rL "$here/docker-compose.yml" "$here/docker-compose.elastic.yml" "$here/compose" "$TMP/deploy/"
chmod -R a+rX "$TMP"
SECRETS=$TMP/deploy/secrets
"$here/make_certs.sh" "$SECRETS" > "$TMP/certs.log" 2>&1 || { cat "$TMP/certs.log"; fail "make_certs.sh failed"; }
# The joiners' certificate (OU=worker, IP SANs of the subnet's hosts: see
# docker-compose.elastic.yml) and the join token, beside make_certs.sh's.
d=$SECRETS/worker-elastic
mkdir -p "$d"
sans="DNS:worker-elastic"
for i in $(seq 2 254); do sans+=",IP:$NET_PREFIX.$i"; done
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' \
  "$sans" > "$TMP/elastic.ext"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$d/tls.key" \
  -out "$TMP/elastic.csr" -subj "/O=pscluster/OU=worker/CN=worker-elastic" 2>> "$TMP/certs.log" &&
  openssl x509 -req -in "$TMP/elastic.csr" -CA "$SECRETS/ca/ca.pem" -CAkey "$SECRETS/ca/ca.key" \
    -CAcreateserial -out "$d/tls.crt" -days 2 -extfile "$TMP/elastic.ext" 2>> "$TMP/certs.log" ||
  { cat "$TMP/certs.log"; fail "cannot make the worker-elastic certificate"; }
cp "$SECRETS/ca/ca.pem" "$d/ca.crt"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$d/join_token"
cp "$d/join_token" "$SECRETS/coordinator/join_token"
chmod 0600 "$d/tls.key" "$d/join_token" "$SECRETS/coordinator/join_token"
chmod 0644 "$d/tls.crt" "$d/ca.crt"
chmod 0700 "$d"
chown -R 10001:10001 "$d" "$SECRETS/coordinator/join_token"
export PSCTL_TLS_CERT=$SECRETS/user/tls.crt PSCTL_TLS_KEY=$SECRETS/user/tls.key
export PSCTL_TLS_CA=$SECRETS/user/ca.crt PSCTL_TOKEN_FILE=$SECRETS/user/token
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export PSCLUSTER_COORDINATOR_PORT=$(free_port) PSCLUSTER_METRICS_PORT=$(free_port)

# ------------------------------------------------------------- compose up
podman system service --time=0 "unix://$SOCK" > "$TMP/service.log" 2>&1 &
SERVICE_PID=$!
for _ in $(seq 1 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || { cat "$TMP/service.log"; fail "podman system service did not create $SOCK"; }
# The training cluster only (no evaluator, Prometheus or TensorBoard), no
# elastic replica yet.
say "docker-compose up -d coordinator ps-0 ps-1 worker-0 worker-1"
compose up -d coordinator ps-0 ps-1 worker-0 worker-1 > "$TMP/up.log" 2>&1 ||
  { cat "$TMP/up.log"; fail "docker-compose up failed"; }
ADDRESS=127.0.0.1:$PSCLUSTER_COORDINATOR_PORT
deadline=$((SECONDS + 90))
until timeout 10 "$PSCTL" list --coordinator "$ADDRESS" > /dev/null 2>&1; do
  ((SECONDS < deadline)) || fail "the coordinator did not answer on $ADDRESS within 90 s"
  sleep 0.5
done
say "coordinator answers on $ADDRESS"

# -------------------------------------------------------------------- job
python3 - "$here/k8s/base/jobs/fashion_mnist_mlp.yaml" "$EPOCHS" > "$TMP/job.yaml" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = s.replace("train-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz\n    limit: 8000")
s = s.replace("t10k-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz\n    limit: 2000")
s = re.sub(r"name: .*", "name: compose-scale", s, count=1)
s = re.sub(r"epochs: \d+", "epochs: " + sys.argv[2], s)
s = s.replace("checkpoints/fashion-mnist-mlp", "checkpoints/compose-scale")
s = s.replace("checkpoints/tb/fashion-mnist-mlp", "checkpoints/tb/compose-scale")
assert "strategy: parameter_server" in s, "the shipped job is no longer parameter_server"
print(s, end="")
PY
# A connection that times out on a loaded machine never reached the
# coordinator: submit again (bounded); any other error is final.
for attempt in 1 2 3 4 5; do
  JOB=$("$PSCTL" submit "$TMP/job.yaml" --coordinator "$ADDRESS" 2> "$TMP/submit.err") && break
  JOB=""
  grep -q "failed to connect" "$TMP/submit.err" || { cat "$TMP/submit.err"; fail "psctl submit failed"; }
  say "psctl submit: could not connect (attempt $attempt), trying again"
  sleep 1
done
[[ -n $JOB ]] || { cat "$TMP/submit.err"; fail "psctl submit could not connect 5 times"; }
say "submitted job $JOB (fashion_mnist_mlp, $EPOCHS epochs of 8,000 examples, 2 PS, 2 workers)"
progress() {
  "$PSCTL" status "$JOB" --coordinator "$ADDRESS" -o json 2>/dev/null | python3 -c '
import json, sys
try:
    j = json.load(sys.stdin)
    print(j.get("steps", 0), j.get("total_steps", 0), j.get("state", "?"))
except Exception:
    print(0, 0, "?")'
}
running_or_fail() {  # running_or_fail WHAT
  case "$state" in SUCCEEDED | FAILED | CANCELLED) fail "the job ended ($state) before $1" ;; esac
}
events() {
  "$PSCTL" logs "$JOB" --coordinator "$ADDRESS" -o json > "$TMP/events.json" 2>/dev/null ||
    echo '{"events": []}' > "$TMP/events.json"
}
count_events() {
  events
  python3 -c 'import json,sys; print(sum(e["kind"] == sys.argv[2] for e in json.load(open(sys.argv[1]))["events"]))' \
    "$TMP/events.json" "$1"
}
# A joiner's pscluster_worker_steps_total, read from its /metrics inside it.
joiner_steps() {
  podman exec "$1" bash -c 'exec 3<>/dev/tcp/127.0.0.1/9100 && printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' 2>/dev/null |
    awk '$1 == "pscluster_worker_steps_total" { print int($2); found = 1 } END { if (!found) print 0 }'
}

deadline=$((SECONDS + 300))
while :; do
  read -r steps total state < <(progress)
  running_or_fail "$UP_AT of its steps"
  awk -v s="$steps" -v t="$total" -v f="$UP_AT" 'BEGIN { exit !(t > 0 && s >= f * t) }' && break
  ((SECONDS < deadline)) || fail "the job did not reach $UP_AT of its steps within 300 s"
  sleep 0.2
done
say "at $steps/$total steps: docker-compose up -d --no-deps --scale worker-elastic=$JOINERS worker-elastic"
compose up -d --no-deps --scale worker-elastic=$JOINERS worker-elastic > "$TMP/scale-up.log" 2>&1 ||
  { cat "$TMP/scale-up.log"; fail "scaling up failed"; }
mapfile -t ELASTIC < <(compose ps -q worker-elastic)
((${#ELASTIC[@]} == JOINERS)) || fail "compose runs ${#ELASTIC[@]} worker-elastic replicas, not $JOINERS"
declare -A IP  # each replica's address on the pscluster network: what it registers
for c in "${ELASTIC[@]}"; do
  podman logs -f "$c" > "$TMP/elastic-${c:0:12}.log" 2>&1 &
  LOG_PIDS+=($!)
  IP[$c]=$(podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$c")
done
deadline=$((SECONDS + 180))
while (($(count_events worker_joined) < JOINERS)); do
  read -r steps total state < <(progress)
  running_or_fail "$JOINERS workers joined"
  ((SECONDS < deadline)) || fail "$JOINERS workers did not join within 180 s ($(count_events worker_joined) did)"
  sleep 0.5
done
read -r steps total state < <(progress)
say "$JOINERS worker_joined events at $steps/$total steps"
python3 -c 'import json,sys; [print("  " + e["message"]) for e in json.load(open(sys.argv[1]))["events"] if e["kind"] == "worker_joined"]' "$TMP/events.json"
deadline=$((SECONDS + 180))
while :; do
  counts=()
  for c in "${ELASTIC[@]}"; do counts+=("$(joiner_steps "$c")"); done
  all=1
  for n in "${counts[@]}"; do ((n > 0)) || all=0; done
  ((all)) && break
  read -r steps total state < <(progress)
  running_or_fail "every joiner ran closures (steps per joiner: ${counts[*]})"
  ((SECONDS < deadline)) || fail "not every joiner ran closures within 180 s (steps per joiner: ${counts[*]})"
  sleep 0.5
done
read -r steps total state < <(progress)
say "every joiner ran closures: pscluster_worker_steps_total per joiner ${counts[*]} at $steps/$total steps"

running_or_fail "the scale-down"
say "at $steps/$total steps: docker-compose up -d --no-deps --scale worker-elastic=$STAY worker-elastic"
t_down=$(now)
compose up -d --no-deps --scale worker-elastic=$STAY worker-elastic > "$TMP/scale-down.log" 2>&1 ||
  { cat "$TMP/scale-down.log"; fail "scaling down failed"; }
down_s=$(awk -v a="$t_down" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
mapfile -t KEPT < <(compose ps -q worker-elastic)
((${#KEPT[@]} == STAY)) || fail "compose runs ${#KEPT[@]} worker-elastic replicas after scaling down, not $STAY"
read -r steps total state < <(progress)
say "scaled down in $down_s s; now at $steps/$total steps ($state)"
left=0
LEAVERS=()
for c in "${ELASTIC[@]}"; do
  [[ " ${KEPT[*]} " == *" $c "* ]] && continue
  LEAVERS+=("${IP[$c]}:2222")
  log="$TMP/elastic-${c:0:12}.log"
  for _ in $(seq 1 50); do grep -q "left the cluster" "$log" && break; sleep 0.1; done
  line=$(grep "left the cluster" "$log" | tail -n 1)
  [[ -n $line ]] || { tail -5 "$log"; fail "replica ${c:0:12} did not log that it left the cluster"; }
  echo "  replica ${c:0:12}: ${line#*] }"
  left=$((left + 1))
done
((left == JOINERS - STAY)) || fail "$left replicas left, not $((JOINERS - STAY))"

timeout 900 "$PSCTL" watch "$JOB" --coordinator "$ADDRESS" -o json > "$TMP/result.json" 2> "$TMP/watch.err" ||
  { cat "$TMP/watch.err" "$TMP/result.json" >&2; fail "psctl watch failed"; }
events
say "job ended"
python3 - "$TMP/result.json" "$TMP/events.json" "$JOINERS" "$T_START" "$t_down" "${LEAVERS[@]}" <<'PY' || fail "the job's result is wrong"
import json, sys
j = json.load(open(sys.argv[1]))
events = json.load(open(sys.argv[2]))["events"]
joiners = int(sys.argv[3])
t_start, t_down = float(sys.argv[4]), float(sys.argv[5])
leavers = sys.argv[6:]
kinds = [e["kind"] for e in events]
print("job %s: %s, %d/%d steps, workers_lost %d, %.1f s" % (
    j.get("job_id", "?"), j["state"], j["steps"], j["total_steps"], j.get("workers_lost", 0),
    j["wall_seconds"]))
print("events: worker_joined %d, worker_join_failed %d, retry %d, worker_down %d, worker_lost %d" % tuple(
    kinds.count(k) for k in ("worker_joined", "worker_join_failed", "retry", "worker_down", "worker_lost")))
for e in events:
    if e["kind"] in ("retry", "worker_down", "worker_up"):
        print("  [%6.1f s] %s: %s" % (e["unix_seconds"] - t_start, e["kind"], e["message"]))
# A worker that left is never health-checked again (docs/elastic_workers.md):
# no worker_down may name a leaver once the scale-down began. One marked
# down for a moment before (a missed check on a loaded machine) is printed
# above, not a failure.
down_leavers = [e["message"] for e in events if e["kind"] in ("worker_down", "worker_lost")
                and e["unix_seconds"] >= t_down and any(a in e["message"] for a in leavers)]
print("scale-down began at %.1f s; leavers %s; worker_down/lost naming a leaver after it: %d"
      % (t_down - t_start, " ".join(leavers), len(down_leavers)))
ok = (j["state"] == "SUCCEEDED" and j["steps"] == j["total_steps"] and j.get("workers_lost", 0) == 0
      and kinds.count("worker_joined") == joiners and "worker_join_failed" not in kinds
      and "worker_lost" not in kinds and not down_leavers)
print("OK" if ok else "NOT OK")
sys.exit(0 if ok else 1)
PY
say "PASS"
