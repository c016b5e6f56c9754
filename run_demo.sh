#!/usr/bin/env bash
# Builds pscluster and trains the Fashion-MNIST MLP on a local cluster of
# 2 parameter servers and 2 workers (child processes on 127.0.0.1).
# Extra arguments go to `psctl local`, e.g. ./run_demo.sh --output json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

./setup.sh >&2   # keep stdout for psctl (e.g. --output json)
bazel build //client:psctl //ps:ps_server //worker:worker_server //coordinator:coordinator >&2
# .bazelrc sets --symlink_prefix=.bazel/, so outputs are under .bazel/bin.
exec .bazel/bin/client/psctl local examples/fashion_mnist_mlp.yaml --ps 2 --workers 2 "$@"
