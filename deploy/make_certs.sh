#!/usr/bin/env bash
# Makes the mutual-TLS certificates and the bearer token of the
# docker-compose cluster (deploy/docker-compose.yml), with openssl:
#
#   DIR/ca/ca.pem, ca.key          the cluster CA (EC P-256). Its key is never
#                                  mounted into a container: keep it, or delete
#                                  it once the certificates are made.
#   DIR/<service>/tls.crt, tls.key, ca.crt
#                                  one certificate per compose service, signed
#                                  by the CA, subject CN=<service>,OU=<role>,
#                                  O=pscluster (role: coordinator, ps, worker:
#                                  the servers check it, rpc/peer_role.h), SAN
#                                  DNS:<service> (the name peers dial; the
#                                  coordinator's also DNS:localhost and
#                                  IP:127.0.0.1, its published port). Owned by
#                                  uid 10001 (the containers' user), directory
#                                  0700, key 0600. Compose mounts each service's
#                                  directory only into that service.
#   DIR/coordinator/auth_tokens    the coordinator's --auth_tokens_file: one
#                                  USER:TOKEN line per user (0600)
#   DIR/user/tls.crt, tls.key, ca.crt, token
#                                  psctl's: CN=$PSCLUSTER_USER,OU=user (client
#                                  auth only) and that user's token, owned by
#                                  whoever runs this script:
#     export PSCTL_TLS_CERT=DIR/user/tls.crt PSCTL_TLS_KEY=DIR/user/tls.key \
#            PSCTL_TLS_CA=DIR/user/ca.crt PSCTL_TOKEN_FILE=DIR/user/token
#
# Usage: deploy/make_certs.sh [DIR]     (default: deploy/secrets, git-ignored)
# Environment: PSCLUSTER_USER (default admin), DAYS (validity, default 365),
#   OWNER (default 10001:10001; chown needs root: as another user the files
#   stay yours, and the containers, uid 10001, cannot read the keys).
# Refuses to overwrite an existing DIR: delete it to make new certificates
# (then restart the cluster: servers read certificates at start-up).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${1:-$here/secrets}
USER_NAME=${PSCLUSTER_USER:-admin}
DAYS=${DAYS:-365}
OWNER=${OWNER:-10001:10001}
# service:role, as deploy/docker-compose.yml and deploy/compose/cluster.yaml name them.
SERVICES=(coordinator:coordinator ps-0:ps ps-1:ps worker-0:worker worker-1:worker)

command -v openssl >/dev/null || { echo "make_certs.sh: openssl not found" >&2; exit 2; }
[[ $USER_NAME =~ ^[A-Za-z0-9._-]+$ ]] || { echo "make_certs.sh: bad PSCLUSTER_USER '$USER_NAME'" >&2; exit 2; }
if [[ -e $DIR ]] && [[ -n "$(ls -A "$DIR" 2>/dev/null)" ]]; then
  echo "make_certs.sh: $DIR exists and is not empty: delete it to make new certificates" >&2
  exit 1
fi
umask 077
mkdir -p "$DIR/ca"
log="$DIR/ca/openssl.log"

echo "+ cluster CA: $DIR/ca/ca.pem"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$DIR/ca/ca.key" -out "$DIR/ca/ca.pem" -days "$DAYS" -subj "/O=pscluster/CN=pscluster CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>>"$log"

# cert NAME CN ROLE USAGE SAN: DIR/NAME/{tls.crt,tls.key,ca.crt}
cert() {
  local d="$DIR/$1"
  mkdir -p "$d"
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n%s' \
    "$4" "${5:+subjectAltName=$5
}" >"$d/ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$d/tls.key" \
    -out "$d/csr" -subj "/O=pscluster/OU=$3/CN=$2" 2>>"$log"
  openssl x509 -req -in "$d/csr" -CA "$DIR/ca/ca.pem" -CAkey "$DIR/ca/ca.key" -CAcreateserial \
    -out "$d/tls.crt" -days "$DAYS" -extfile "$d/ext" 2>>"$log"
  rm -f "$d/csr" "$d/ext"
  cp "$DIR/ca/ca.pem" "$d/ca.crt"
  chmod 0600 "$d/tls.key"
  chmod 0644 "$d/tls.crt" "$d/ca.crt"
  chmod 0700 "$d"
  echo "+ $d: CN=$2, OU=$3${5:+, $5}"
}

for entry in "${SERVICES[@]}"; do
  service=${entry%%:*} role=${entry#*:}
  san="DNS:$service"
  [[ $service == coordinator ]] && san="$san,DNS:localhost,IP:127.0.0.1"
  cert "$service" "$service" "$role" serverAuth,clientAuth "$san"
done
cert user "$USER_NAME" user clientAuth ""

token=$(openssl rand -hex 32)
printf '%s\n' "$token" >"$DIR/user/token"
printf '%s:%s\n' "$USER_NAME" "$token" >"$DIR/coordinator/auth_tokens"
chmod 0600 "$DIR/user/token" "$DIR/coordinator/auth_tokens"
echo "+ $DIR/coordinator/auth_tokens: user $USER_NAME; psctl's token: $DIR/user/token"

# The servers' directories belong to the containers' uid.
if ((EUID == 0)); then
  for entry in "${SERVICES[@]}"; do chown -R "$OWNER" "$DIR/${entry%%:*}"; done
else
  echo "make_certs.sh: not root: the service directories stay yours; chown -R $OWNER them" \
    "(the containers run as uid ${OWNER%%:*} and must read their keys)" >&2
fi
chmod 0755 "$DIR"
echo "made certificates for ${SERVICES[*]%%:*} and user $USER_NAME in $DIR"
echo "psctl: export PSCTL_TLS_CERT=$DIR/user/tls.crt PSCTL_TLS_KEY=$DIR/user/tls.key" \
  "PSCTL_TLS_CA=$DIR/user/ca.crt PSCTL_TOKEN_FILE=$DIR/user/token"
