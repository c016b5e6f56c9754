#!/usr/bin/env bash
# Security and hostile input (issue 12), on servers started by hand:
#   - certificates made with openssl: a cluster CA with one cluster
#     certificate (IP:127.0.0.1), and a stranger's CA with its own certificate;
#   - 2 ps_server, 2 worker_server and a coordinator, all with mutual TLS, the
#     coordinator with bearer tokens for alice and bob, PS and coordinator with
#     a checkpoint root, the PS with a 256 MiB memory limit;
#   - alice trains a Fashion-MNIST job through it (psctl with her token and
#     the cluster certificate), with checkpoints;
#   - while it runs, a table of attacks (tests/security_attack.cc), each of
#     which must get its expected status code;
#   - the job still SUCCEEDS, each PS applied exactly its steps (no forged key
#     was taken, no NaN applied), accuracy is that of a clean run, the files
#     named by the attacks are untouched and the PS stayed small.
#
# usage: security_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR SECURITY_ATTACK
# Every process the test starts is stopped by pid on exit; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
PS_SERVER="$(abs "$2")"
WORKER_SERVER="$(abs "$3")"
COORDINATOR="$(abs "$4")"
ATTACK="$(abs "$5")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
DATA=/usr/share/datasets/fashion-mnist
unset TF_CONFIG PSCTL_COORDINATOR PSCTL_TOKEN_FILE PSCTL_TLS_CERT PSCTL_TLS_KEY PSCTL_TLS_CA
command -v openssl > /dev/null || fail "openssl is missing: ./setup.sh installs it"
[[ -r "$DATA/train-images-idx3-ubyte.gz" ]] ||
  fail "$DATA is missing: ./setup.sh installs dataset-fashion-mnist"

# --- Certificates, with the openssl command.
CERTS="$TMP/certs"
mkdir -p "$CERTS"
make_ca() {  # make_ca NAME
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$CERTS/$1-ca.key" -out "$CERTS/$1-ca.pem" -days 1 -subj "/CN=$1 CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
    2>> "$CERTS/openssl.log"
}
make_cert() {  # make_cert CA NAME: NAME.pem/.key signed by CA, for 127.0.0.1
  printf 'basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' \
    > "$CERTS/$2.ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$CERTS/$2.key" -out "$CERTS/$2.csr" -subj "/CN=$2" 2>> "$CERTS/openssl.log"
  openssl x509 -req -in "$CERTS/$2.csr" -CA "$CERTS/$1-ca.pem" -CAkey "$CERTS/$1-ca.key" \
    -CAcreateserial -out "$CERTS/$2.pem" -days 1 -extfile "$CERTS/$2.ext" 2>> "$CERTS/openssl.log"
}
make_ca cluster
make_cert cluster cluster
make_ca stranger
make_cert stranger stranger
TLS=(--tls_cert "$CERTS/cluster.pem" --tls_key "$CERTS/cluster.key" --tls_ca "$CERTS/cluster-ca.pem")
# A stranger who trusts the cluster's CA (so the server's certificate checks)
# but holds only a certificate of another CA.
cat "$CERTS/cluster-ca.pem" "$CERTS/stranger-ca.pem" > "$CERTS/both-ca.pem"
STRANGER_TLS=(--tls_cert "$CERTS/stranger.pem" --tls_key "$CERTS/stranger.key"
              --tls_ca "$CERTS/both-ca.pem")
ALICE_TOKEN="$(openssl rand -hex 24)"
BOB_TOKEN="$(openssl rand -hex 24)"
printf 'alice:%s\nbob:%s\n' "$ALICE_TOKEN" "$BOB_TOKEN" > "$TMP/tokens"
echo "$ALICE_TOKEN" > "$TMP/alice.token"
echo "$BOB_TOKEN" > "$TMP/bob.token"
chmod 600 "$TMP/tokens" "$TMP/alice.token" "$TMP/bob.token"

# --- The cluster.
read -r PS0 PS1 W0 W1 CHIEF < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
ROOT="$TMP/checkpoints"
mkdir -p "$ROOT"
start_server ps0 "$PS_SERVER" --address "127.0.0.1:$PS0" "${TLS[@]}" --checkpoint_root "$ROOT" \
  --max_memory_bytes 268435456
start_server ps1 "$PS_SERVER" --address "127.0.0.1:$PS1" "${TLS[@]}" --checkpoint_root "$ROOT" \
  --max_memory_bytes 268435456
start_server worker0 "$WORKER_SERVER" --address "127.0.0.1:$W0" "${TLS[@]}" --compute_threads 1
start_server worker1 "$WORKER_SERVER" --address "127.0.0.1:$W1" "${TLS[@]}" --compute_threads 1
start_server coordinator "$COORDINATOR" --address "127.0.0.1:$CHIEF" "${TLS[@]}" \
  --ps "127.0.0.1:$PS0,127.0.0.1:$PS1" --workers "127.0.0.1:$W0,127.0.0.1:$W1" \
  --auth_tokens_file "$TMP/tokens" --state_dir "$TMP/state" --checkpoint_root "$ROOT"
wait_listening ps0 ps1 worker0 worker1 coordinator
# One listening socket per server: no second, unannounced port.
for name in ps0 ps1 worker0 worker1 coordinator; do
  pid_var="PID_$name"
  n="$(ss -Hltnp 2>/dev/null | grep -c "pid=${!pid_var}," || true)"
  [[ "$n" == 1 ]] || { ss -ltnp >&2; fail "$name listens on $n TCP ports, want 1"; }
done
echo "ok: each server listens on exactly one port"

# alice's psctl: the cluster certificate and her token.
export PSCTL_COORDINATOR="127.0.0.1:$CHIEF" PSCTL_TOKEN_FILE="$TMP/alice.token"
export PSCTL_TLS_CERT="$CERTS/cluster.pem" PSCTL_TLS_KEY="$CERTS/cluster.key"
export PSCTL_TLS_CA="$CERTS/cluster-ca.pem"

field() {  # field FILE KEY: a top-level field of a JSON file
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}
cat > "$TMP/job.yaml" <<YAML
name: secure
seed: 5
model:
  inputs: {dense: 784}
  layers: [{dense: {units: 64, activation: relu}}, {dense: {units: 10}}]
optimizer: {type: adam, learning_rate: 0.001}
data:
  train:
    images: $DATA/train-images-idx3-ubyte.gz
    labels: $DATA/train-labels-idx1-ubyte.gz
  eval:
    images: $DATA/t10k-images-idx3-ubyte.gz
    labels: $DATA/t10k-labels-idx1-ubyte.gz
  per_replica_batch: 32
train: {epochs: 4, steps_per_closure: 20, closures_per_worker: 1}
checkpoint: {dir: secure, every_steps: 1000}
YAML
sed 's|images: .*train-images.*|images: /etc/shadow|' "$TMP/job.yaml" > "$TMP/shadow.yaml"
sed 's|dir: secure|dir: /tmp/elsewhere-'$$'|' "$TMP/job.yaml" > "$TMP/elsewhere.yaml"

"$PSCTL" submit "$TMP/job.yaml" -o json > "$TMP/submit.json" 2> "$TMP/submit.err" ||
  { cat "$TMP/submit.err" >&2; show_logs; fail "alice could not submit with her credentials"; }
JOB="$(field "$TMP/submit.json" job_id)"
echo "alice submitted $JOB"
wait_progress "127.0.0.1:$CHIEF" 0.05 300 || { show_logs; fail "$JOB did not reach 5 % of its steps"; }

# --- The attacks, while the job runs: NAME EXPECTED TARGET ARGS...
echo "sentinel: not a checkpoint" > "$TMP/victim.txt"
ln -s "$TMP" "$ROOT/escape"
RESULTS="$TMP/attacks.txt"
: > "$RESULTS"
attack() {
  local name="$1" expect="$2" target="$3" rc=0
  shift 3
  "$ATTACK" --attack "$name" --target "$target" --expect "$expect" "$@" \
    >> "$RESULTS" 2>> "$TMP/attack.err" || rc=$?
  ((rc == 0)) || { tail -n 1 "$RESULTS" >&2; tail -n 3 "$TMP/attack.err" >&2; fail "attack $name: want $expect"; }
  tail -n 1 "$RESULTS"
}
P="127.0.0.1:$PS0"
C="127.0.0.1:$CHIEF"
W="127.0.0.1:$W0"
# An insider's RPCs (a cluster certificate) into the running job's namespace,
# first, while the job surely runs (a job that had ended would answer
# NOT_FOUND): without the coordinator's key and leases nothing is taken.
attack ps_restore_wipe PERMISSION_DENIED "$P" "${TLS[@]}" --job "$JOB"
attack ps_recreate PERMISSION_DENIED "$P" "${TLS[@]}" --job "$JOB"
attack ps_push_nan PERMISSION_DENIED "$P" "${TLS[@]}" --job "$JOB"
attack ps_push_nan_keyed PERMISSION_DENIED "$P" "${TLS[@]}" --job "$JOB"
attack ps_future_keys PERMISSION_DENIED "$P" "${TLS[@]}" --job "$JOB" --count 3760
# No cluster certificate: the TLS handshake fails, for every service.
attack ps_stats UNAVAILABLE "$P"
attack worker_ping UNAVAILABLE "$W"
attack coordinator_list UNAVAILABLE "$C"
attack ps_push_nan UNAVAILABLE "$P" --job "$JOB"
attack ps_stats UNAVAILABLE "$P" "${STRANGER_TLS[@]}"
attack coordinator_list UNAVAILABLE "$C" "${STRANGER_TLS[@]}" --token "$ALICE_TOKEN"
# A cluster certificate but no or a wrong token: the job service refuses.
attack coordinator_list UNAUTHENTICATED "$C" "${TLS[@]}"
attack coordinator_list UNAUTHENTICATED "$C" "${TLS[@]}" --token "$(openssl rand -hex 24)"
attack coordinator_cancel UNAUTHENTICATED "$C" "${TLS[@]}" --job "$JOB"
# bob may look, not cancel alice's job; nobody may submit outside the roots.
attack coordinator_list OK "$C" "${TLS[@]}" --token "$BOB_TOKEN"
attack coordinator_cancel PERMISSION_DENIED "$C" "${TLS[@]}" --token "$BOB_TOKEN" --job "$JOB"
attack coordinator_submit INVALID_ARGUMENT "$C" "${TLS[@]}" --token "$BOB_TOKEN" --arg "$TMP/shadow.yaml"
if grep -q "root:" "$RESULTS"; then fail "an error quoted /etc/shadow"; fi
attack coordinator_submit INVALID_ARGUMENT "$C" "${TLS[@]}" --token "$BOB_TOKEN" --arg "$TMP/elsewhere.yaml"
# An insider's RPCs (a cluster certificate): internal RPCs are no public API.
attack ps_save INVALID_ARGUMENT "$P" "${TLS[@]}" --job "$JOB" --arg "$TMP/victim.txt"
attack ps_save INVALID_ARGUMENT "$P" "${TLS[@]}" --job "$JOB" --arg "../victim.txt"
attack ps_save INVALID_ARGUMENT "$P" "${TLS[@]}" --job "$JOB" --arg "secure/../../victim.txt"
attack ps_save INVALID_ARGUMENT "$P" "${TLS[@]}" --job "$JOB" --arg "escape/victim.txt"
attack ps_restore_path INVALID_ARGUMENT "$P" "${TLS[@]}" --job attacker-restore --arg "/etc/passwd"
attack ps_push_nan_own INVALID_ARGUMENT "$P" "${TLS[@]}" --job attacker-own
attack ps_create_huge RESOURCE_EXHAUSTED "$P" "${TLS[@]}" --job attacker-big
attack ps_create_huge RESOURCE_EXHAUSTED "$P" "${TLS[@]}" --job attacker-big2
attack ps_oversized RESOURCE_EXHAUSTED "$P" "${TLS[@]}" --job attacker-own --max_message_bytes 1073741824
echo "ok: $(wc -l < "$RESULTS") attacks refused"

# --- The job was not harmed.
timeout 600 "$PSCTL" watch "$JOB" -o json > "$TMP/final.json" 2> "$TMP/watch.err" ||
  { cat "$TMP/watch.err" >&2; show_logs; fail "$JOB did not succeed"; }
[[ "$(field "$TMP/final.json" state)" == SUCCEEDED ]] || fail "$JOB: $(cat "$TMP/final.json")"
python3 - "$TMP/final.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
steps, applied = s["total_steps"], s["ps_applied_steps"]
assert applied == [steps, steps], f"PS applied {applied}, want [{steps}, {steps}]: a forged key or NaN got in"
assert s["eval_accuracy"] > 0.82, f"eval accuracy {s['eval_accuracy']}: training was harmed"
assert s.get("owner", "alice") == "alice", s.get("owner")
print(f"ok: SUCCEEDED, each PS applied exactly {steps} steps, eval accuracy {s['eval_accuracy']:.4f}")
EOF
[[ "$(cat "$TMP/victim.txt")" == "sentinel: not a checkpoint" ]] || fail "victim.txt was overwritten"
[[ ! -e /tmp/elsewhere-$$ ]] || fail "a checkpoint was written outside the root"
for name in ps0 ps1; do
  pid_var="PID_$name"
  rss="$(awk '/^VmRSS:/ {print $2}' "/proc/${!pid_var}/status")"
  ((rss < 200000)) || fail "$name holds $rss kB: the huge CreateVariables got through"
  echo "ok: $name RSS $rss kB"
done
stop_servers coordinator worker0 worker1 ps0 ps1
echo "PASS"
