#!/usr/bin/env bash
# Installs everything pscluster needs to build and test on a fresh Debian 12,
# as root. Idempotent: packages already installed are left alone, and
# `apt-get update` runs only when something is missing. The CUDA toolkit
# (nvcc, cudart, cuBLAS) is optional and not a Debian 12 package: it is used
# when found in $CUDA_HOME or /usr/local/cuda (PSCLUSTER_NO_CUDA=1: ignore it).
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
  # fuzz/: clang with libFuzzer and the sanitizer runtimes (--config=fuzz)
  clang libclang-rt-14-dev
  # TLS: libcrypto checks certificates at start-up; psctl local --tls and the
  # security tests make their certificates with the openssl command
  libssl-dev openssl
  # The pscluster Python package (python/): its pybind11 extension, and pytest;
  # cloudpickle carries ClusterCoordinator.schedule's functions to the Python
  # workers; torch (CPU) for the PyTorch bridge and examples/python's torch model
  python3-dev pybind11-dev python3-pytest python3-cloudpickle python3-torch
  # TensorBoard event files (common/tfrecord.h): CRC32C from ISA-L
  libisal-dev
  # psctl export --format onnx: ONNX's protobuf schema; its tests run the
  # model with onnxruntime (PyPI, below) on numpy, and compute categorical
  # ids with XXH3 as a user of the model would (python3-xxhash)
  libonnx-dev python3-numpy python3-xxhash
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

# pip_module MODULE REQUIREMENTS: installs REQUIREMENTS (pinned) from PyPI
# for Debian's python3 unless it already imports MODULE. Only for what
# Debian 12 does not package.
pip_module() {
  /usr/bin/python3 -c "import $1" >/dev/null 2>&1 && return 0
  if ((EUID != 0)); then
    echo "setup: the Python module $1 is missing; run ./setup.sh as root" >&2
    exit 1
  fi
  echo "setup: installing $1 (PyPI, $2)"
  /usr/bin/python3 -m pip install --quiet --break-system-packages -r "$(dirname "$0")/$2"
}
# onnxruntime runs exported models in //tests:onnx_export_test.
pip_module onnxruntime tests/requirements-onnx.txt
# tensorboard: its event-file reader checks the job summaries in
# //tests:tensorboard_summaries_test, and `tensorboard --logdir` shows them.
pip_module tensorboard tests/requirements-tensorboard.txt
command -v kubectl >/dev/null 2>&1 ||
  echo "setup: note: kubectl is missing (not a Debian 12 package): //deploy:k8s_manifests_test will be skipped" >&2

# CUDA is optional: third_party/cuda_configure.bzl builds the CUDA backend
# (libpscluster_cuda.so) when it finds a toolkit, and a CPU-only stub otherwise.
nvcc=""
if [[ "${PSCLUSTER_NO_CUDA:-0}" == "0" ]]; then
  for dir in ${CUDA_HOME:+"$CUDA_HOME"} /usr/local/cuda; do
    if [[ -x "$dir/bin/nvcc" ]]; then
      nvcc="$dir/bin/nvcc"
      break
    fi
  done
fi
if [[ -n "$nvcc" ]]; then
  echo "setup: CUDA toolkit: $nvcc (the worker loads the CUDA backend for device: cuda|auto on a GPU)"
elif [[ "${PSCLUSTER_NO_CUDA:-0}" != "0" ]]; then
  echo "setup: PSCLUSTER_NO_CUDA is set: building CPU only"
else
  cat <<MSG
setup: no CUDA toolkit found (looked for \$CUDA_HOME/bin/nvcc${CUDA_HOME:+ = $CUDA_HOME/bin/nvcc}
       and /usr/local/cuda/bin/nvcc): building CPU only. Every target builds, jobs with
       device: auto run on the CPU, and device: cuda fails its setup (FAILED_PRECONDITION).
       For the CUDA backend, install the toolkit (nvcc, cudart, cuBLAS) from NVIDIA into
       /usr/local/cuda or set CUDA_HOME, then run ./setup.sh and bazel build again.
MSG
fi

# --- the pscluster Python package (python/, README "Python and C++ job client")
# Builds the extension _pscluster.so (against Debian's python3-dev) and the
# servers Cluster.local starts, then puts python/ and the extension's
# directory on the path of every python3 of the same version (Debian's, and
# the one first on PATH) with a pscluster.pth file in its site-packages, so
# `import pscluster` works from any directory. PSCLUSTER_NO_PYTHON=1 skips
# this.
if [[ "${PSCLUSTER_NO_PYTHON:-0}" == "0" ]]; then
  repo="$(cd "$(dirname "$0")" && pwd)"
  if ! (cd "$repo" && bazel build --noshow_progress \
      //python:_pscluster.so //ps:ps_server //worker:worker_server //coordinator); then
    # Not fatal: the test run that follows reports the build error as such.
    echo "setup: could not build the Python extension (above); pscluster is not importable" >&2
  fi
  ext_dir="$(cd "$repo" && bazel info bazel-bin 2>/dev/null)/python"
  want="$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  pth_done=()
  for py in /usr/bin/python3 "$(command -v python3 || true)"; do
    [[ -n "$py" && -x "$py" ]] || continue
    version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    if [[ "$version" != "$want" ]]; then
      echo "setup: $py is Python $version, not $want (the extension's): not installing pscluster for it" >&2
      continue
    fi
    site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    [[ " ${pth_done[*]} " == *" $site "* ]] && continue
    pth_done+=("$site")
    pth="$site/pscluster.pth"
    content="$(printf '%s\n%s' "$repo/python" "$ext_dir")"
    if [[ -f "$pth" && "$(cat "$pth")" == "$content" ]]; then
      echo "setup: pscluster is importable by $py ($pth)"
    elif mkdir -p "$site" 2>/dev/null && printf '%s\n' "$content" > "$pth" 2>/dev/null; then
      echo "setup: pscluster is importable by $py (wrote $pth)"
    else
      echo "setup: cannot write $pth; use PYTHONPATH=$repo/python:$ext_dir" >&2
    fi
  done
fi
