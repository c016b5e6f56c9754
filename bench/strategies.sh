#!/usr/bin/env bash
# strategies: pscluster's training strategies side by side with TensorFlow's
# MultiWorkerMirroredStrategy on the same job, in one run, one after the other
# (never in parallel): the Fashion-MNIST MLP of examples/fashion_mnist_mlp.yaml
# for EPOCHS epochs with
#   1. pscluster parameter_server  (async PS; PS x WORKERS, batch 64 per worker)
#   2. pscluster central_storage   (synchronous PS; global batch 64 x WORKERS)
#   3. pscluster one_device        (one process, batch 64)
#   4. every strategy in STRATEGIES (default "mirrored multi_worker_mirrored"),
#      per_replica_batch 64 (mirrored: with `devices: MIRRORED_DEVICES`, default
#      WORKERS, i.e. as many replicas in one process as MWMS has workers);
#      one that psctl rejects as an unknown strategy is "not available"
#   5. TensorFlow MWMS on TF_WORKERS workers (bench/compare_tf/tf_mwms_mlp.py)
# Prints a markdown table and writes OUT_JSON (default
# bench/results/strategies.json): every figure, date, nproc, versions, and the
# load average and CPU use just before each run. Not part of ./run_tests.sh.
#
#   bench/strategies.sh                            # EPOCHS=2, ~45 s on 2 cores
#   EPOCHS=5 STRATEGIES="mirrored multi_worker_mirrored" bench/strategies.sh
#   SKIP_TF=1 bench/strategies.sh                  # pscluster rows only
#
# Knobs (env): EPOCHS (2), PS (2), WORKERS (2), STRATEGIES (extra pscluster
# strategies, space- or comma-separated), MIRRORED_DEVICES (= WORKERS),
# TF_WORKERS (= WORKERS), SKIP_TF,
# OUT_JSON, PSCTL (.bazel/bin/client/psctl), TIMEOUT_S (600, per run), BUILD=1
# (bazel build the four binaries first; also done when psctl is missing).
# Exit: 0 when every run that was attempted succeeded or was "not available",
# 1 otherwise.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
EPOCHS="${EPOCHS:-2}"
PS="${PS:-2}"
WORKERS="${WORKERS:-2}"
TF_WORKERS="${TF_WORKERS:-$WORKERS}"
STRATEGIES="${STRATEGIES-mirrored multi_worker_mirrored}"
OUT_JSON="${OUT_JSON:-$ROOT/bench/results/strategies.json}"
PSCTL="${PSCTL:-.bazel/bin/client/psctl}"
TIMEOUT_S="${TIMEOUT_S:-600}"
MIRRORED_DEVICES="${MIRRORED_DEVICES:-$WORKERS}"
VPY="$ROOT/bench/compare_tf/.venv/bin/python"

cd "$ROOT"
if [[ -n "${BUILD:-}" || ! -x "$PSCTL" ]]; then
  bazel build //client:psctl //ps:ps_server //worker:worker_server //coordinator:coordinator
fi
[[ -x "$PSCTL" ]] || { echo "strategies: $PSCTL not built" >&2; exit 2; }

WORK="$(mktemp -d /tmp/strategies-XXXXXX)"
RUNNING=""
cleanup() {
  # Stop the run in flight by its pid (psctl and tf_mwms_mlp.py stop their own
  # children on SIGTERM, and their children die with them: PDEATHSIG).
  if [[ -n "$RUNNING" ]]; then
    kill -TERM "$RUNNING" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$RUNNING" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$RUNNING" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
# Before each run: the load average and how busy the CPUs were (all cores, %)
# over 2 s when none of this script's processes run.
load_before() {
  local a b
  cat /proc/loadavg > "$WORK/$1.loadavg"
  uptime > "$WORK/$1.uptime"
  a=$(head -1 /proc/stat); sleep 2; b=$(head -1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x); split(b, y); t = 0; for (i = 2; i <= 9; i++) t += y[i] - x[i];
    idle = (y[5] - x[5]) + (y[6] - x[6]); printf "%.1f\n", (t > 0 ? 100 * (t - idle) / t : 0) }' > "$WORK/$1.busy"
}

# run NAME SYSTEM CMD...: runs CMD in the background (stdout -> NAME.out,
# stderr -> NAME.err) with a time limit, records rc and wall seconds.
run() {
  local name="$1" system="$2"; shift 2
  echo "== $name ($system): $*" >&2
  load_before "$name"
  local t0 t1 rc=0
  t0=$(now)
  timeout -k 10 "$((TIMEOUT_S + 60))" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err" &
  RUNNING=$!
  wait "$RUNNING" || rc=$?
  RUNNING=""
  t1=$(now)
  echo "$t0 $t1 $rc" > "$WORK/$name.time"
  echo "$name $system" >> "$WORK/runs.txt"
  if ((rc != 0)); then
    echo "strategies: $name exited $rc; last lines of its stderr:" >&2
    tail -n 3 "$WORK/$name.err" >&2
  fi
}

# job STRATEGY BATCH_LINE [DEVICES]: examples/fashion_mnist_mlp.yaml with
# EPOCHS epochs, the strategy, the batch line (per_replica_batch: 64 or
# global_batch: N) and, when given, `devices: DEVICES` (replicas per process).
job() {
  local out="$WORK/job-$1.yaml"
  sed -e "s/^  epochs: [0-9][0-9]*\$/  epochs: $EPOCHS/" \
      -e "s/^strategy: [a-z_]*/strategy: $1/" \
      -e "s/^  per_replica_batch: 64\$/  $2/" examples/fashion_mnist_mlp.yaml > "$out"
  if [[ -n "${3:-}" ]]; then
    sed -i "s/^\(device: .*\)\$/\1\ndevices: $3/" "$out"
    grep -q "^devices: $3\$" "$out" || { echo "strategies: could not set devices for $1" >&2; exit 1; }
  fi
  grep -q "^  epochs: $EPOCHS\$" "$out" && grep -q "^strategy: $1\b" "$out" && grep -q "^  $2\$" "$out" \
    || { echo "strategies: could not write the job for $1" >&2; exit 1; }
  echo "$out"
}

: > "$WORK/runs.txt"
PSCTL_ARGS=(--ps "$PS" --workers "$WORKERS" --output json --timeout_s "$TIMEOUT_S")
j=$(job parameter_server "per_replica_batch: 64")
run parameter_server pscluster "$PSCTL" local "$j" "${PSCTL_ARGS[@]}"
j=$(job central_storage "global_batch: $((64 * WORKERS))")
run central_storage pscluster "$PSCTL" local "$j" "${PSCTL_ARGS[@]}"
j=$(job one_device "per_replica_batch: 64")
run one_device pscluster "$PSCTL" local "$j" "${PSCTL_ARGS[@]}"
for s in ${STRATEGIES//,/ }; do
  case "$s" in
    parameter_server|central_storage|one_device) continue ;;  # already run
    *[!a-z0-9_]*) echo "strategies: bad strategy name '$s'" >&2; exit 2 ;;
  esac
  devices=""
  [[ "$s" == mirrored ]] && devices="$MIRRORED_DEVICES"
  j=$(job "$s" "per_replica_batch: 64" "$devices")
  run "$s" pscluster "$PSCTL" local "$j" "${PSCTL_ARGS[@]}"
done

TF_NOTE=""
if [[ -n "${SKIP_TF:-}" ]]; then
  TF_NOTE="skipped (SKIP_TF)"
elif [[ ! -x "$VPY" ]]; then
  TF_NOTE="not available: no $VPY (run bench/compare_tf/setup.sh)"
  echo "strategies: $TF_NOTE" >&2
else
  run tf_multi_worker_mirrored tensorflow "$VPY" bench/compare_tf/tf_mwms_mlp.py \
    --workers "$TF_WORKERS" --epochs "$EPOCHS" --timeout_s "$TIMEOUT_S" \
    --json "$WORK/tf_multi_worker_mirrored.json"
fi

PYTHON=python3
[[ -x "$VPY" ]] && PYTHON="$VPY"
"$PYTHON" "$HERE/strategies_table.py" --work "$WORK" --out_json "$OUT_JSON" \
  --epochs "$EPOCHS" --ps "$PS" --workers "$WORKERS" --tf_workers "$TF_WORKERS" \
  --psctl "$PSCTL" --tf_note "$TF_NOTE"
