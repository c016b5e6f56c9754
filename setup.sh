#!/usr/bin/env bash
# Installs everything pscluster needs to build and test on a fresh Debian 12,
# as root. Idempotent: packages already installed are left alone, and
# `apt-get update` runs only when something is missing. The CUDA toolkit
# (nvcc, cudart, cuBLAS) is not a Debian 12 package: it must already be in
# $CUDA_HOME or /usr/local/cuda.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libyaml-cpp-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libxxhash-dev libcli11-dev
  dataset-fashion-mnist python3 procps
  prometheus curl
  r-base-core r-cran-dslabs
  # deploy/ checks: promtool, and Python with PyYAML and pip (kubernetes-validate below)
  prometheus python3-yaml python3-pip
)

installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  if ((EUID != 0)); then
    echo "setup: missing packages (${missing[*]}); run ./setup.sh as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} Debian packages are installed"
fi

# MovieLens ml-latest-small (100,004 ratings) ships inside r-cran-dslabs. Its
# GroupLens terms forbid redistribution, so it is exported here into the
# git-ignored data/ and never committed. The title column is dropped.
movielens="$(dirname "$0")/data/movielens/movielens.csv"
if [[ ! -s "$movielens" ]]; then
  mkdir -p "$(dirname "$movielens")"
  tmp="$(mktemp "$movielens.XXXXXX")"
  trap 'rm -f "$tmp"' EXIT
  Rscript -e 'data(movielens, package = "dslabs")' \
          -e 'cols <- c("userId", "movieId", "rating", "timestamp", "year", "genres")' \
          -e 'write.csv(movielens[, cols], commandArgs(TRUE)[1], row.names = FALSE)' \
          "$tmp"
  if (($(wc -l <"$tmp") < 2)); then
    echo "setup: exporting MovieLens with Rscript wrote no rows" >&2
    exit 1
  fi
  chmod 644 "$tmp"
  mv "$tmp" "$movielens"
  trap - EXIT
  echo "setup: exported MovieLens ($(($(wc -l <"$movielens") - 1)) ratings) to $movielens"
else
  echo "setup: MovieLens is at $movielens ($(($(wc -l <"$movielens") - 1)) ratings)"
fi

# --- deploy/ checks (deploy/check_deploy.sh, //deploy:*_test) ---------------
# kubectl with kustomize comes with the base image (/usr/bin/kubectl); promtool
# is in PACKAGES above. kubernetes-validate (Kubernetes JSON schemas, offline)
# is on PyPI only: installed for Debian's python3 into /usr/local/bin, which
# Bazel tests see on their PATH. Pinned in deploy/requirements-deploy.txt.
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  if ((EUID != 0)); then
    echo "setup: kubernetes-validate is missing; run ./setup.sh as root" >&2
    exit 1
  fi
  echo "setup: installing kubernetes-validate (PyPI)"
  /usr/bin/python3 -m pip install --quiet --break-system-packages \
    -r "$(dirname "$0")/deploy/requirements-deploy.txt"
fi
echo "setup: kubernetes-validate $(kubernetes-validate --version)"
command -v kubectl >/dev/null 2>&1 ||
  echo "setup: note: kubectl is missing (not a Debian 12 package): //deploy:k8s_manifests_test will be skipped" >&2

nvcc=""
for dir in ${CUDA_HOME:+"$CUDA_HOME"} /usr/local/cuda; do
  if [[ -x "$dir/bin/nvcc" ]]; then
    nvcc="$dir/bin/nvcc"
    break
  fi
done
if [[ -z "$nvcc" ]]; then
  cat >&2 <<MSG
setup: no CUDA toolkit found (looked for \$CUDA_HOME/bin/nvcc${CUDA_HOME:+ = $CUDA_HOME/bin/nvcc}
       and /usr/local/cuda/bin/nvcc).
       pscluster builds its CUDA backend everywhere (it runs only where a GPU exists),
       so the build needs the CUDA toolkit: nvcc, cudart and cuBLAS. Install it from
       NVIDIA (https://developer.nvidia.com/cuda-downloads) into /usr/local/cuda,
       or set CUDA_HOME to where it is installed, then run ./setup.sh again.
MSG
  exit 1
fi
echo "setup: CUDA toolkit: $nvcc"
