#!/usr/bin/env bash
# deploy/k8s/kubeflow's TFJob run as the training-operator would run it, on
# 127.0.0.1 (deploy/k8s/kubeflow/run_tfjob_locally.py): every replica gets
# the operator's TF_CONFIG and runs its container's command line; the chief
# (coordinator --run_job) runs the job and its exit status is the TFJob's.
#   1. The Fashion-MNIST job, cut to 1 epoch of 6,000 examples: the chief
#      exits 0 with SUCCEEDED and an accuracy well above chance (0.1).
#   2. The same job naming a data file outside the servers' --data_root: the
#      chief exits 1 naming the file (a TFJob that fails, not one that hangs).
#
# usage: tfjob_local_test.sh COORDINATOR PS_SERVER WORKER_SERVER
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "${TEST_SRCDIR:-}" ]]; then here="$TEST_SRCDIR/${TEST_WORKSPACE:-__main__}/deploy"; fi
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
bin="$tmp/bin"
mkdir -p "$bin"
for b in "$@"; do ln -sf "$(cd "$(dirname "$b")" && pwd)/$(basename "$b")" "$bin/"; done
python=/usr/bin/python3
[[ -x $python ]] || python=python3
[[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] ||
  { echo "FAIL: Debian dataset-fashion-mnist is missing: ./setup.sh installs it"; exit 1; }
run=("$python" "$here/k8s/kubeflow/run_tfjob_locally.py" --bin "$bin" --timeout 300)
manifests=("$here/k8s/kubeflow/tfjob-fashion-mnist.yaml" "$here/k8s/kubeflow/jobs-configmap.yaml")

rc=0
"${run[@]}" --job_override train.epochs=1 --job_override data.train.limit=6000 \
  "${manifests[@]}" > "$tmp/ok.out" 2>&1 || rc=$?
cat "$tmp/ok.out"
((rc == 0)) || { echo "FAIL: the chief exited $rc"; exit 1; }
line="$(grep -E '^job .* SUCCEEDED after [0-9]+ steps, eval accuracy' "$tmp/ok.out")" ||
  { echo "FAIL: no SUCCEEDED line from the chief"; exit 1; }
accuracy="${line##*eval accuracy }"
"$python" -c "import sys; sys.exit(0 if float('$accuracy') >= 0.5 else 1)" ||
  { echo "FAIL: accuracy $accuracy < 0.5"; exit 1; }

rc=0
"${run[@]}" --job_override data.train.images=/etc/hostname "${manifests[@]}" \
  > "$tmp/bad.out" 2>&1 || rc=$?
cat "$tmp/bad.out"
((rc == 1)) || { echo "FAIL: a job with a file outside --data_root: the chief exited $rc, not 1"; exit 1; }
grep -q "/etc/hostname" "$tmp/bad.out" || { echo "FAIL: the error does not name /etc/hostname"; exit 1; }
echo "PASS: the TFJob's chief exits 0 with the job SUCCEEDED (accuracy $accuracy), 1 naming a bad file"
