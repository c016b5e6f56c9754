#!/usr/bin/env bash
# The docker-compose cluster for real (issue 11): builds the images with
# podman from the Bazel-built binaries (deploy/build_image.sh), brings
# deploy/docker-compose.yml up with docker-compose 1.29 talking to
# `podman system service`, submits a Fashion-MNIST job with the host's psctl
# through the coordinator's published port, kills the ps-0 container
# (SIGKILL) at ~30 % of the job's steps, and checks that the job SUCCEEDS with
# ps_recoveries >= 1 (ps-0 restarted by its restart policy, the job restored
# from its checkpoint), and that the compose Prometheus scraped
# pscluster_job_steps_total > 0. The job runs `eval: sidecar`: the compose
# `evaluator` service (PSCLUSTER_EVAL_JOB_DIR=compose-test) evaluates its
# checkpoints beside the 2 PS x 2 workers; the test waits until it has
# evaluated the job's final checkpoint and checks a sane accuracy there, its
# best/ record, and its gauge in Prometheus; the `tensorboard` service lists
# the job's run and the evaluator's (<run>/eval). Then `docker-compose down
# -v` and every process the test started is stopped (by pid).
# The cluster runs as shipped: mutual TLS with per-role certificates and a
# bearer token, made by deploy/make_certs.sh; psctl presents the OU=user
# certificate and the token. The test also checks that psctl without a
# certificate, and with one but without the token, is refused, and that a
# worker container holds only its own OU=worker certificate.
#
# Usage: deploy/compose_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR EVALUATOR
#   (as //deploy:compose_test; from a source tree, with no arguments, it uses
#   the binaries under .bazel/bin/).
# Needs root, the host's Debian mirror (apt installs the podman stack if it is
# missing, and apt runs inside the image build) and ~1 GB of disk. Where
# podman cannot run (not root, apt fails, `podman info` fails, debootstrap
# cannot reach the mirror) the test is SKIPPED with the reason, and a skipped
# test case is written to $XML_OUTPUT_FILE: it never passes silently.
#   PODMAN=/path/to/podman   use another podman (a missing one simulates a
#                            machine without podman: the test skips)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ -n "${TEST_SRCDIR:-}" ]]; then
  here="$TEST_SRCDIR/${TEST_WORKSPACE:-__main__}/deploy"
fi
root=$(cd "$here/.." && pwd)
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
gone() { ! kill -0 "$1" 2>/dev/null; }

if [[ $# -ge 5 ]]; then
  PSCTL=$(abs "$1") PS_SERVER=$(abs "$2") WORKER_SERVER=$(abs "$3") COORDINATOR=$(abs "$4")
  EVALUATOR=$(abs "$5")
else
  PSCTL=$root/.bazel/bin/client/psctl PS_SERVER=$root/.bazel/bin/ps/ps_server
  WORKER_SERVER=$root/.bazel/bin/worker/worker_server COORDINATOR=$root/.bazel/bin/coordinator/coordinator
  EVALUATOR=$root/.bazel/bin/evaluator/evaluator
fi
export PSCTL
PODMAN=${PODMAN:-podman}
# Bazel's strict action env leaves /usr/sbin off PATH; netavark needs iptables there.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/compose_test.XXXXXX")
PROJECT="pscluster-test-$$-$RANDOM"

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
TIMINGS=()
timing() { TIMINGS+=("$1: $(took "$2")"); echo "TIMING $1: $(took "$2")"; }

skip() {
  echo "SKIPPED: $1"
  if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
    local msg=${1//&/&amp;}
    msg=${msg//\"/&quot;}; msg=${msg//</&lt;}; msg=${msg//>/&gt;}
    cat > "$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="deploy" tests="1" skipped="1">
<testcase name="compose_cluster" classname="deploy"><skipped message="$msg"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}

# ---------------------------------------------------------------- cleanup
# A unix socket path must stay under 108 bytes: not under Bazel's long TEST_TMPDIR.
SOCKDIR=$(mktemp -d /tmp/pscompose.XXXXXX)
SOCK="$SOCKDIR/podman.sock"
SERVICE_PID=""
compose() { DOCKER_HOST="unix://$SOCK" docker-compose -p "$PROJECT" -f "$TMP/deploy/docker-compose.yml" "$@"; }
cleanup() {
  local rc=$?
  if [[ -n $SERVICE_PID ]]; then
    if ((rc != 0)); then
      echo "---- container logs (last lines)" >&2
      compose logs --no-color --tail=30 2>&1 | tail -150 >&2
    fi
    compose down -v -t 1 > "$TMP/down.log" 2>&1 || cat "$TMP/down.log" >&2
    # Whatever down left (docker-compose removes the network; be sure).
    "$PODMAN" ps -aq --filter "label=com.docker.compose.project=$PROJECT" | xargs -r "$PODMAN" rm -f >/dev/null 2>&1
    "$PODMAN" network rm -f "${PROJECT}_pscluster" "${PROJECT}_edge" >/dev/null 2>&1
    "$PODMAN" volume rm -f "${PROJECT}_state" "${PROJECT}_checkpoints" >/dev/null 2>&1
    kill -TERM "$SERVICE_PID" 2>/dev/null
    for _ in $(seq 1 50); do gone "$SERVICE_PID" && break; sleep 0.1; done
    kill -9 "$SERVICE_PID" 2>/dev/null
  fi
  rm -rf "$TMP" "$SOCKDIR"
  ((${#TIMINGS[@]})) && printf 'TIMINGS: %s\n' "$(IFS=';'; echo "${TIMINGS[*]}")"
  exit $rc
}
trap cleanup EXIT

# ------------------------------------------------------------------ setup
t0=$(now)
((EUID == 0)) || skip "not root (uid $EUID): rootful podman is needed (cgroup v1 host, no rootless setup)"
PACKAGES=(podman buildah runc crun fuse-overlayfs slirp4netns uidmap containernetworking-plugins netavark
  aardvark-dns catatonit conmon golang-github-containers-common debootstrap docker-compose skopeo)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || skip "apt-get not found: cannot install ${missing[*]}"
  echo "+ apt-get install ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" > "$TMP/apt.log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update > "$TMP/apt.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" > "$TMP/apt.log" 2>&1 ||
      { tail -5 "$TMP/apt.log"; skip "apt-get could not install ${missing[*]} (mirror unreachable?)"; }
  fi
fi
command -v "$PODMAN" >/dev/null 2>&1 || skip "podman ($PODMAN) not found on PATH after installing the podman packages"
command -v docker-compose >/dev/null 2>&1 || skip "docker-compose not found after installing it"
# podman's defaults fail on these machines (rlimits above the hard limits;
# crun refuses hybrid cgroups): deploy-tooling.md section 1.
CONF=/etc/containers/containers.conf
WANT_CONF='[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"'
if [[ ! -f $CONF ]]; then
  mkdir -p /etc/containers && printf '%s\n' "$WANT_CONF" > "$CONF"
  echo "wrote $CONF (it was absent)"
elif [[ "$(cat "$CONF")" != "$WANT_CONF" ]]; then
  cp "$CONF" "$CONF.pscluster-bak"
  printf '%s\n' "$WANT_CONF" > "$CONF"
  echo "rewrote $CONF (it differed; the old one is $CONF.pscluster-bak)"
else
  echo "$CONF is already as needed"
fi
"$PODMAN" info > "$TMP/podman-info.log" 2>&1 ||
  { tail -5 "$TMP/podman-info.log"; skip "podman info fails: $(tail -1 "$TMP/podman-info.log")"; }
timing setup "$t0"

# ----------------------------------------------------------------- images
t0=$(now)
mkdir -p "$TMP/bin"
ln -s "$PSCTL" "$TMP/bin/psctl"; ln -s "$PS_SERVER" "$TMP/bin/ps_server"
ln -s "$WORKER_SERVER" "$TMP/bin/worker_server"; ln -s "$COORDINATOR" "$TMP/bin/coordinator"
ln -s "$EVALUATOR" "$TMP/bin/evaluator"
if ! "$PODMAN" image exists localhost/pscluster-base; then
  # debootstrap needs the mirror; without it no image can be made.
  m=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
  curl -sfI --max-time 10 "${m:-http://deb.debian.org/debian}/dists/bookworm/Release" > /dev/null ||
    skip "the Debian mirror ${m:-http://deb.debian.org/debian} is unreachable: no base image can be made"
fi
PATH="$(dirname "$(command -v "$PODMAN")"):$PATH" STAGE="$TMP/stage" \
  "$root/deploy/build_image.sh" "$TMP/bin" 2>&1 | tee "$TMP/build.log" | grep -E '^(\+|TIMING|runtime|copying|built|base)|rror'
((PIPESTATUS[0] == 0)) || { tail -30 "$TMP/build.log"; fail "deploy/build_image.sh failed"; }
rm -rf "$TMP/stage"
timing "images (base cached or not, pscluster, prometheus, tensorboard)" "$t0"

# ----------------------------------------------------------- compose up
t0=$(now)
# The compose files, dereferenced (runfiles are symlinks, which a bind mount
# into a container cannot follow).
mkdir -p "$TMP/deploy"
cp -rL "$here/docker-compose.yml" "$here/compose" "$here/prometheus" "$TMP/deploy/"
chmod -R a+rX "$TMP/deploy" "$TMP"
# The certificates and token, as a user makes them (after the chmod: the keys
# stay 0600, owned by the containers' uid 10001).
"$here/make_certs.sh" "$TMP/deploy/secrets" > "$TMP/certs.log" 2>&1 ||
  { cat "$TMP/certs.log"; fail "deploy/make_certs.sh failed"; }
SECRETS=$TMP/deploy/secrets
export PSCTL_TLS_CERT=$SECRETS/user/tls.crt PSCTL_TLS_KEY=$SECRETS/user/tls.key
export PSCTL_TLS_CA=$SECRETS/user/ca.crt PSCTL_TOKEN_FILE=$SECRETS/user/token
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export PSCLUSTER_COORDINATOR_PORT=$(free_port) PSCLUSTER_METRICS_PORT=$(free_port) PSCLUSTER_PROMETHEUS_PORT=$(free_port)
export PSCLUSTER_TENSORBOARD_PORT=$(free_port)
# The evaluator watches the test job's checkpoint directory.
export PSCLUSTER_EVAL_JOB_DIR=compose-test
# Prometheus scrapes every 1 s here (the shipped config: 15 s).
sed -i 's/^\(  scrape_interval:\).*/\1 1s/' "$TMP/deploy/prometheus/prometheus.yml"

"$PODMAN" system service --time=0 "unix://$SOCK" > "$TMP/service.log" 2>&1 &
SERVICE_PID=$!
for _ in $(seq 1 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || { cat "$TMP/service.log"; fail "podman system service did not create $SOCK"; }
echo "+ docker-compose -p $PROJECT up -d   (coordinator on 127.0.0.1:$PSCLUSTER_COORDINATOR_PORT, prometheus on 127.0.0.1:$PSCLUSTER_PROMETHEUS_PORT)"
compose up -d 2>&1 | tail -20
((PIPESTATUS[0] == 0)) || fail "docker-compose up failed"
ADDRESS=127.0.0.1:$PSCLUSTER_COORDINATOR_PORT
deadline=$((SECONDS + 90))
until timeout 10 "$PSCTL" list --coordinator "$ADDRESS" > /dev/null 2>&1; do
  ((SECONDS < deadline)) || fail "the coordinator did not answer on $ADDRESS within 90 s"
  sleep 0.5
done
timing "compose up (until the coordinator answers)" "$t0"
compose ps

# ---------------------------------------------------------------- security
# No certificate: the TLS handshake fails. A certificate but no token:
# UNAUTHENTICATED. (env -u: psctl's defaults come from these variables.)
if out=$(timeout 20 env -u PSCTL_TLS_CERT -u PSCTL_TLS_KEY -u PSCTL_TLS_CA \
  "$PSCTL" list --coordinator "$ADDRESS" 2>&1); then
  fail "psctl without a certificate was answered: $out"
fi
echo "psctl without a certificate: refused ($(tail -1 <<<"$out" | cut -c1-120))"
if out=$(timeout 20 env -u PSCTL_TOKEN_FILE "$PSCTL" list --coordinator "$ADDRESS" 2>&1); then
  fail "psctl without a token was answered: $out"
fi
grep -qi "unauthenticated\|token" <<<"$out" || fail "psctl without a token: not UNAUTHENTICATED: $out"
echo "psctl without a token: refused ($(tail -1 <<<"$out" | cut -c1-120))"
# Each container holds its own certificate only.
w0=$(compose ps -q worker-0)
subject=$("$PODMAN" exec "$w0" cat /etc/pscluster/tls/tls.crt | openssl x509 -noout -subject -nameopt RFC2253)
[[ $subject == *OU=worker* ]] || fail "worker-0's certificate is not OU=worker: $subject"
"$PODMAN" exec "$w0" ls /etc/pscluster/tls | sort | tr '\n' ' ' | grep -qx 'ca.crt tls.crt tls.key ' ||
  fail "worker-0's /etc/pscluster/tls holds more than its own certificate: $("$PODMAN" exec "$w0" ls /etc/pscluster/tls)"
echo "worker-0 holds only its own certificate ($subject)"

# -------------------------------------------------------------------- job
t0=$(now)
python3 - "$root/deploy/k8s/base/jobs/fashion_mnist_mlp.yaml" > "$TMP/job.yaml" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
# A few thousand examples and enough epochs to last ~20 s; a checkpoint every
# 500 steps, so ps-0's restart restores one.
s = s.replace("train-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz\n    limit: 8000")
s = s.replace("t10k-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz\n    limit: 2000")
s = re.sub(r"name: .*", "name: compose-test", s, count=1)
s = re.sub(r"epochs: \d+", "epochs: 50", s)
s = re.sub(r"every_steps: \d+", "every_steps: 500", s)
s = s.replace("checkpoints/fashion-mnist-mlp", "checkpoints/compose-test")
s = s.replace("checkpoints/tb/fashion-mnist-mlp", "checkpoints/tb/compose-test")
assert "mode: sidecar" in s, "the shipped job no longer runs eval: sidecar"
print(s, end="")
PY
JOB=$("$PSCTL" submit "$TMP/job.yaml" --coordinator "$ADDRESS") || fail "psctl submit failed"
echo "submitted job $JOB"
# Poll the job's progress (psctl status -o json) until 30 % of its steps.
progress() {
  "$PSCTL" status "$JOB" --coordinator "$ADDRESS" -o json 2>/dev/null | python3 -c '
import json, sys
try:
    j = json.load(sys.stdin)
    print(j.get("steps", 0), j.get("total_steps", 0), j.get("state", "?"))
except Exception:
    print(0, 0, "?")'
}
deadline=$((SECONDS + 300))
while :; do
  read -r steps total state < <(progress)
  case "$state" in SUCCEEDED | FAILED | CANCELLED) fail "the job ended ($state) before 30 % of its steps" ;; esac
  ((total > 0 && steps * 10 >= total * 3)) && break
  ((SECONDS < deadline)) || fail "the job did not reach 30 % of its steps within 300 s"
  sleep 0.1
done
# A crash, not a stop: SIGKILL to the container's init (tini) by its host pid.
# (`podman kill` counts as a user stop: podman would not restart it.)
ps0=$(compose ps -q ps-0)
ps0_pid=$("$PODMAN" inspect --format '{{.State.Pid}}' "$ps0")
echo "at $steps/$total steps ($state): kill -9 ps-0 (host pid $ps0_pid); its restart policy (unless-stopped) restarts it"
kill -9 "$ps0_pid" || fail "could not kill ps-0 (pid $ps0_pid)"
timeout 600 "$PSCTL" watch "$JOB" --coordinator "$ADDRESS" -o json > "$TMP/result.json" 2> "$TMP/watch.err"
rc=$?
"$PSCTL" logs "$JOB" --coordinator "$ADDRESS" > "$TMP/joblog.txt" 2>&1
grep -iE "ps|recover|checkpoint" "$TMP/joblog.txt" | tail -8
((rc == 0)) || { cat "$TMP/watch.err" "$TMP/result.json" "$TMP/joblog.txt" >&2; fail "psctl watch exited $rc"; }
echo "ps-0: $("$PODMAN" inspect --format 'restarts={{.RestartCount}} state={{.State.Status}}' "$ps0")"
python3 - "$TMP/result.json" <<'PY' || fail "the job's result is wrong"
import json, sys
j = json.load(open(sys.argv[1]))
print("job %s: %s, %d/%d steps, eval %s, ps_recoveries %d, lost_steps %d, checkpoints %d, %.1f s"
      % (j["job_id"] if "job_id" in j else "?", j["state"], j["steps"], j["total_steps"], j["eval_mode"],
         j["ps_recoveries"], j["lost_steps"], j["checkpoints"], j["wall_seconds"]))
# eval: sidecar: the coordinator claims no eval metric (the evaluator's are below).
ok = (j["state"] == "SUCCEEDED" and j["ps_recoveries"] >= 1 and j["eval_mode"] == "sidecar"
      and j["eval_accuracy"] is None)
sys.exit(0 if ok else 1)
PY
timing "job (submit to SUCCEEDED)" "$t0"

# -------------------------------------------------------------- evaluator
# The evaluator ran beside the job: it must reach the job's final checkpoint
# (waited for on its state file, bounded) with a sane accuracy there.
t0=$(now)
ev=$(compose ps -q evaluator)
JOBDIR=/var/lib/pscluster/checkpoints/compose-test
newest=$("$PODMAN" exec "$ev" sh -c "ls -d $JOBDIR/ckpt-*/MANIFEST" | sed 's#.*/ckpt-\([0-9]*\)/MANIFEST#\1#' | sort -n | tail -1)
[[ -n $newest ]] || fail "no committed checkpoint in $JOBDIR"
deadline=$((SECONDS + 120))
until [[ "$("$PODMAN" exec "$ev" sed -n 's/^last_evaluated //p' "$JOBDIR/evaluator/state" 2>/dev/null)" == "$newest" ]]; do
  ((SECONDS < deadline)) || { compose logs --tail=20 evaluator; fail "the evaluator did not evaluate checkpoint $newest within 120 s"; }
  sleep 0.5
done
compose logs --no-color evaluator 2>/dev/null | grep -E "evaluated checkpoint|skipped checkpoint" > "$TMP/evaluator.txt"
cat "$TMP/evaluator.txt"
"$PODMAN" exec "$ev" cat "$JOBDIR/evaluator/state" "$JOBDIR/best/BEST" > "$TMP/evaluator_state.txt" ||
  fail "no evaluator state or best/BEST in $JOBDIR"
sed 's/^/  /' "$TMP/evaluator_state.txt"
python3 - "$TMP/evaluator.txt" "$newest" <<'PY' || fail "the evaluator's results are wrong"
import re, sys
lines = [re.search(r"evaluated checkpoint (\d+) step (\d+): loss (\S+) accuracy (\S+)", l)
         for l in open(sys.argv[1])]
lines = [m for m in lines if m]
ids = [int(m[1]) for m in lines]
assert ids and ids[-1] == int(sys.argv[2]), (ids, sys.argv[2])
assert len(ids) == len(set(ids)), ids
acc = float(lines[-1][4])
print(f"evaluator: {len(ids)} checkpoints evaluated beside the job, final {ids[-1]} accuracy {acc:.4f}")
assert acc >= 0.70, acc
PY
query="http://127.0.0.1:$PSCLUSTER_PROMETHEUS_PORT/api/v1/query?query=pscluster_evaluator_eval%7Bmetric%3D%22accuracy%22%7D"
deadline=$((SECONDS + 60))
until curl -sf --max-time 5 "$query" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
sys.exit(0 if r and float(r[0]["value"][1]) >= 0.70 else 1)' 2>/dev/null; do
  ((SECONDS < deadline)) || fail "Prometheus has no pscluster_evaluator_eval{metric=\"accuracy\"} >= 0.70"
  sleep 1
done
echo "Prometheus: pscluster_evaluator_eval{metric=\"accuracy\"} scraped"
timing "evaluator (job end to its final checkpoint evaluated)" "$t0"

# ------------------------------------------------------------ tensorboard
t0=$(now)
deadline=$((SECONDS + 120))
until runs=$(curl -sf --max-time 5 "http://127.0.0.1:$PSCLUSTER_TENSORBOARD_PORT/data/runs") &&
      python3 -c 'import json, sys; r = json.loads(sys.argv[1]); sys.exit(0 if {"compose-test", "compose-test/eval"} <= set(r) else 1)' "$runs"; do
  ((SECONDS < deadline)) || fail "TensorBoard on 127.0.0.1:$PSCLUSTER_TENSORBOARD_PORT lists no runs compose-test and compose-test/eval (got: ${runs:-nothing})"
  sleep 2
done
echo "TensorBoard runs: $runs"
timing tensorboard "$t0"

# ------------------------------------------------------------- prometheus
t0=$(now)
query="http://127.0.0.1:$PSCLUSTER_PROMETHEUS_PORT/api/v1/query?query=pscluster_job_steps_total"
deadline=$((SECONDS + 60))
value=""
while ((SECONDS < deadline)); do
  value=$(curl -sf --max-time 5 "$query" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(max(float(x["value"][1]) for x in r) if r else "")' 2>/dev/null)
  [[ -n $value ]] && awk -v v="$value" 'BEGIN { exit !(v > 0) }' && break
  sleep 1
done
[[ -n $value ]] && awk -v v="$value" 'BEGIN { exit !(v > 0) }' ||
  fail "Prometheus ($query) has no pscluster_job_steps_total > 0 (last: '$value')"
echo "Prometheus: pscluster_job_steps_total = $value"
up=$(curl -sf "http://127.0.0.1:$PSCLUSTER_PROMETHEUS_PORT/api/v1/query?query=up" | python3 -c '
import json, sys
print(" ".join("%s=%s" % (x["metric"]["instance"], x["value"][1]) for x in json.load(sys.stdin)["data"]["result"]))')
echo "Prometheus up: $up"
timing prometheus "$t0"

t0=$(now)
compose down -v -t 1 > "$TMP/down.log" 2>&1 || { cat "$TMP/down.log"; fail "docker-compose down failed"; }
timing "compose down" "$t0"
echo "PASS"
