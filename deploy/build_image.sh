#!/usr/bin/env bash
# Builds the container images of deploy/docker-compose.yml with podman:
#
#   localhost/pscluster-base        Debian 12 (bookworm) minbase from debootstrap,
#                                   with the host's apt sources (no registry is
#                                   reachable: every image starts FROM it)
#   localhost/pscluster             deploy/Dockerfile, target `pscluster`: the
#                                   runtime libraries, Debian's
#                                   dataset-fashion-mnist, the Bazel-built
#                                   ps_server, worker_server, coordinator,
#                                   evaluator and psctl in /usr/local/bin,
#                                   user 10001
#   localhost/pscluster-prometheus  target `prometheus`: Debian's prometheus
#   localhost/pscluster-tensorboard target `tensorboard`: TensorBoard from PyPI
#                                   (pip in the build, through the host
#                                   network, trusting the host's CA bundle)
#
# Usage: deploy/build_image.sh [BIN_DIR]
#   BIN_DIR holds ps_server, worker_server, coordinator, evaluator and psctl
#   (default: the Bazel outputs, .bazel/bin/{ps,worker,coordinator,evaluator,
#   client}/; build them first: bazel build //ps:ps_server
#   //worker:worker_server //coordinator:coordinator //evaluator:evaluator
#   //client:psctl).
# Needs root, podman (deploy/compose_test.sh installs it) and the Debian
# mirror of /etc/apt/sources.list.d/debian.sources (apt runs in the build
# with --network host). The base image is made once: delete it
# (`podman rmi localhost/pscluster-base`) to rebuild it.
#
# The runtime packages are derived from the binaries: `ldd` of each, `dpkg -S`
# of every library. The build fails if one of them is missing from the
# Dockerfile's RUNTIME_PACKAGES. A library that no Debian package owns (today
# the worker's CUDA libraries, when it links them) is copied into the image
# under /opt/pscluster/lib.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
BASE_IMAGE=${BASE_IMAGE:-localhost/pscluster-base}
IMAGE=${IMAGE:-localhost/pscluster}
PROM_IMAGE=${PROM_IMAGE:-localhost/pscluster-prometheus}
TB_IMAGE=${TB_IMAGE:-localhost/pscluster-tensorboard}
STAGE=${STAGE:-$root/.deploy-stage}   # the build context (ignored by git)
DOCKERFILE=${DOCKERFILE:-$here/Dockerfile}

if [[ $# -ge 1 ]]; then
  bins=("$1/ps_server" "$1/worker_server" "$1/coordinator" "$1/evaluator" "$1/psctl")
else
  bins=("$root/.bazel/bin/ps/ps_server" "$root/.bazel/bin/worker/worker_server"
        "$root/.bazel/bin/coordinator/coordinator" "$root/.bazel/bin/evaluator/evaluator"
        "$root/.bazel/bin/client/psctl")
fi
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "build_image.sh: $b not found: build it with Bazel first" >&2; exit 2; }
done

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

# The host's Debian mirror (first URIs of debian.sources).
mirror() {
  sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1
}

build_base() {
  if podman image exists "$BASE_IMAGE"; then
    echo "base image $BASE_IMAGE exists (podman rmi it to rebuild)"
    return
  fi
  command -v debootstrap >/dev/null || { echo "build_image.sh: debootstrap not installed" >&2; exit 2; }
  local t0 rootfs m
  t0=$(now)
  m=$(mirror)
  m=${m:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d "${TMPDIR:-/tmp}/pscluster-rootfs.XXXXXX")
  echo "+ debootstrap --variant=minbase bookworm $rootfs $m"
  if ! debootstrap --variant=minbase bookworm "$rootfs" "$m" > "$rootfs.log" 2>&1; then
    tail -20 "$rootfs.log" >&2
    rm -rf "$rootfs" "$rootfs.log"
    echo "build_image.sh: debootstrap failed" >&2
    exit 1
  fi
  # The host's sources (updates and security too) instead of debootstrap's.
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
    rm -f "$rootfs/etc/apt/sources.list"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  echo "+ tar -C $rootfs -c . | podman import - $BASE_IMAGE"
  tar -C "$rootfs" -c . | podman import -q - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs" "$rootfs.log"
  echo "TIMING base image (debootstrap + import): $(took "$t0")"
}

# The Debian packages that own the libraries the binaries load; prints
# NOPKG:<path> for a library no package owns.
runtime_packages() {
  local lib real pkg
  ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u |
    while read -r lib; do
      real=$(readlink -f "$lib")
      pkg=""
      for p in "$lib" "$real" "${real/#\/usr\/lib\//\/lib\/}" "${lib/#\/usr\/lib\//\/lib\/}"; do
        pkg=$(dpkg -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1) && [[ -n $pkg ]] && break
      done
      if [[ -n $pkg ]]; then echo "$pkg"; else echo "NOPKG:$lib"; fi
    done | sort -u
}

stage() {
  rm -rf "$STAGE"
  mkdir -p "$STAGE/bin" "$STAGE/lib"
  cp "${bins[@]}" "$STAGE/bin/"
  chmod 0755 "$STAGE"/bin/*
  local want missing=() p
  want=$(runtime_packages "${bins[@]}")
  # Every package the binaries need must be in the Dockerfile's list.
  local listed
  listed=$(sed -n '/^ARG RUNTIME_PACKAGES=/,/[^\\]$/p' "$DOCKERFILE" | tr -d '\\"' | sed 's/ARG RUNTIME_PACKAGES=//')
  for p in $want; do
    case "$p" in
      NOPKG:*)
        echo "copying ${p#NOPKG:} (no Debian package owns it) into /opt/pscluster/lib"
        cp -L "${p#NOPKG:}" "$STAGE/lib/" ;;
      *) grep -qw -- "$p" <<<"$listed" || missing+=("$p") ;;
    esac
  done
  if ((${#missing[@]})); then
    echo "build_image.sh: the binaries need Debian packages that deploy/Dockerfile's RUNTIME_PACKAGES lacks: ${missing[*]}" >&2
    exit 1
  fi
  echo "runtime packages (ldd + dpkg -S): $(grep -v NOPKG <<<"$want" | tr '\n' ' ')"
  cp "$DOCKERFILE" "$STAGE/Dockerfile"
  # pip in the tensorboard stage trusts what this host trusts (a proxy's CA).
  cp /etc/ssl/certs/ca-certificates.crt "$STAGE/pip-ca.crt"
}

build_base
t0=$(now)
stage
echo "+ podman build --network host --target pscluster -t $IMAGE $STAGE"
podman build --network host --target pscluster -t "$IMAGE" -f "$STAGE/Dockerfile" "$STAGE"
echo "TIMING image $IMAGE: $(took "$t0")"
t0=$(now)
echo "+ podman build --network host --target prometheus -t $PROM_IMAGE $STAGE"
podman build --network host --target prometheus -t "$PROM_IMAGE" -f "$STAGE/Dockerfile" "$STAGE"
echo "TIMING image $PROM_IMAGE: $(took "$t0")"
t0=$(now)
echo "+ podman build --network host --target tensorboard -t $TB_IMAGE $STAGE"
podman build --network host --target tensorboard -t "$TB_IMAGE" -f "$STAGE/Dockerfile" "$STAGE"
echo "TIMING image $TB_IMAGE: $(took "$t0")"
# No library may be missing in the image.
if podman run --rm --entrypoint sh "$IMAGE" -c 'ldd /usr/local/bin/*' | grep 'not found'; then
  echo "build_image.sh: libraries missing in $IMAGE" >&2
  exit 1
fi
echo "built $IMAGE, $PROM_IMAGE and $TB_IMAGE"
