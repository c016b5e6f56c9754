#!/usr/bin/env bash
# examples/python/fashion_mnist_mlp.py against servers started by hand from
# TF_CONFIG, as a Kubernetes user runs them (one process per pod, each with
# its own TF_CONFIG; here all on 127.0.0.1): 2 ps_server and 2 Python workers
# (python3 -m pscluster.worker), then the program as the chief with
# --tf_config. Every server is stopped by its pid at the end.
#
#   examples/python/tf_config_cluster.sh [--epochs N] [--base_port P]
#
# Needs the build (bazel build //ps:ps_server //python:_pscluster.so).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
epochs=1
base=23400
while (($# > 0)); do
  case "$1" in
    --epochs) epochs="$2"; shift 2 ;;
    --base_port) base="$2"; shift 2 ;;
    *) echo "tf_config_cluster: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin=.bazel/bin
export PYTHONPATH="$PWD/python:$PWD/$bin/python"
cluster="{\"ps\": [\"127.0.0.1:$base\", \"127.0.0.1:$((base + 1))\"],
  \"worker\": [\"127.0.0.1:$((base + 2))\", \"127.0.0.1:$((base + 3))\"],
  \"chief\": [\"127.0.0.1:$((base + 4))\"]}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/tf-config-cluster.XXXXXX")"
pids=()
stop() {
  ((${#pids[@]} == 0)) || kill "${pids[@]}" 2>/dev/null || true
  ((${#pids[@]} == 0)) || wait "${pids[@]}" 2>/dev/null || true
}
trap stop EXIT
for i in 0 1; do
  TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"ps\", \"index\": $i}}" \
    "$bin/ps/ps_server" > "$logs/ps-$i.log" 2>&1 &
  pids+=($!)
  TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
    /usr/bin/python3 -m pscluster.worker > "$logs/worker-$i.log" 2>&1 &
  pids+=($!)
done
echo "tf_config_cluster: ps_server and pscluster.worker started by hand (pids ${pids[*]}; logs in $logs)"
TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"chief\", \"index\": 0}}" \
  /usr/bin/python3 examples/python/fashion_mnist_mlp.py --tf_config --epochs "$epochs"
