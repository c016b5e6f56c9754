#!/usr/bin/env bash
# scale: how pscluster's costs grow with workers and PS tasks (issue 25). Runs
# //bench:scale_bench's modes and `psctl local` start-ups, then
# bench/scale_plots.py draws the curves (PNG) and writes the table at 8, 64,
# 256 and 1,024 workers:
#
#   dispatch        closures/s, coordinator CPU per closure, p50/p99, health
#                   checks/s, coordinator threads; 2 .. 1,024 simulated workers
#                   (real WorkerService servers in one child process)
#   ps_connections  ps_server RSS and threads per idle client, 0 .. 2,000
#   push_pull       fused push+pull p50/p99, 1 .. 32 PS x 1 .. 16 workers
#   startup         psctl local with 1 PS and N worker processes (2 .. 128): time
#                   to "cluster up", to the first step done, and to SUCCEEDED
#                   (a job of one closure per worker)
#
# Outputs bench/results/<YYYY-MM-DD>-scale.{md,json} and
# bench/results/scale-<metric>.png. The machine is shared: `uptime` load is
# recorded next to each mode; compare ratios within one run. Plots need
# python3-matplotlib, installed here with apt when missing and running as
# root (else the tables are written without plots). About 4-5 minutes on
# 2 vCPUs; --quick: the smallest configuration of each mode (~10-30 s).
#
# usage: bench/scale.sh [--quick] [--out_dir DIR] [--no_build]   (from anywhere)
# Exit: 0 when every mode ran, 1 otherwise.
set -uo pipefail

cd "$(dirname "$0")/.."
OUT_DIR="bench/results"
BUILD=1
QUICK=0
while (($# > 0)); do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --out_dir) OUT_DIR="$2"; shift 2 ;;
    --no_build) BUILD=0; shift ;;
    *) echo "usage: $0 [--quick] [--out_dir DIR] [--no_build]" >&2; exit 2 ;;
  esac
done
# --quick is a smoke test: its figures go to a scratch directory unless
# --out_dir says otherwise.
((QUICK)) && [[ "$OUT_DIR" == bench/results ]] && OUT_DIR="/tmp/scale-quick-results"
DATE="$(date -u +%F)"
WORK="$(mktemp -d /tmp/scale.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT_DIR"
BIN=.bazel/bin
failed=0
log() { echo "scale: $*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

if ((BUILD)); then
  log "building"
  if ! bazel build //bench:scale_bench //ps:ps_server //client:psctl //worker:worker_server \
      //coordinator:coordinator >&2; then
    log "build failed"
    exit 1
  fi
fi
# The harness opens thousands of sockets; scale_bench raises its own soft
# limit, psctl's children inherit this one.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# The Debian package serves /usr/bin/python3, which may not be the python3 on
# PATH (pyenv): use whichever imports matplotlib.
python_with_matplotlib() {
  local py
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import matplotlib' 2>/dev/null; then
      echo "$py"
      return 0
    fi
  done
  return 1
}
if ! PY="$(python_with_matplotlib)"; then
  PY=python3
  if ((EUID == 0)) && command -v apt-get >/dev/null; then
    log "installing python3-matplotlib (plots)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3-matplotlib >&2 || log "python3-matplotlib not installed: tables only"
    PY="$(python_with_matplotlib)" || PY=python3
  else
    log "python3-matplotlib missing (apt-get install python3-matplotlib as root): tables only"
  fi
fi

quick=()
((QUICK)) && quick=(--quick)
# mode NAME SECONDS [FLAGS...]: one scale_bench mode, its table to $WORK/NAME.md, its JSON
# to $WORK/NAME.json, the load before and after to $WORK/NAME.load.
mode() {
  local name="$1" limit="$2"
  shift 2
  log "$name (load $(load))"
  echo "$(load)" > "$WORK/$name.load"
  if ! timeout "$limit" "$BIN/bench/scale_bench" --mode="$name" "${quick[@]}" \
      --ps_server_bin="$BIN/ps/ps_server" --output_json="$WORK/$name.json" "$@" \
      > "$WORK/$name.md" 2> "$WORK/$name.err"; then
    log "$name failed; its stderr:"
    tail -20 "$WORK/$name.err" >&2
    failed=1
  fi
  echo "$(load)" >> "$WORK/$name.load"
}
# Median of 3 interleaved repeats: the 256-vs-8 ratio is the must-show.
mode dispatch 1500 --repeats=3 --idle_s=2
mode ps_connections 600
mode push_pull 600

# startup: psctl local with N workers; each stderr line stamped as it comes.
log "startup (load $(load))"
echo "$(load)" > "$WORK/startup.load"
counts=(2 4 8 16 32 64 128)
((QUICK)) && counts=(2)
: > "$WORK/startup.tsv"
for n in "${counts[@]}"; do
  cat > "$WORK/job.yaml" <<EOF
model:
  inputs:
    dense: 2
    categorical: [{name: tag, hashed: true, embedding_dim: 2}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
optimizer: {type: sgd}
data:
  train: {format: synthetic_ctr, num_examples: $((16 * n)), id_space: 16}
  eval: {format: synthetic_ctr, num_examples: 16, id_space: 16}
  per_replica_batch: 16
EOF
  start="$(date +%s.%N)"
  timeout 300 "$BIN/client/psctl" local "$WORK/job.yaml" --ps 1 --workers "$n" 2>&1 |
    while IFS= read -r line; do echo "$(date +%s.%N) $line"; done > "$WORK/startup-$n.log"
  rc="${PIPESTATUS[0]}"
  # Seconds from start to: "cluster up", the first progress line with a
  # step done, "SUCCEEDED" (-1: not seen).
  awk -v n="$n" -v s="$start" -v rc="$rc" '
    BEGIN { up = -1; step = -1; done = -1 }
    / cluster up:/ && up < 0 { up = $1 - s }
    / step [1-9][0-9]*\// && step < 0 { step = $1 - s }
    /SUCCEEDED/ && done < 0 { done = $1 - s }
    END { printf "%d\t%.3f\t%.3f\t%.3f\t%d\n", n, up, step, done, rc }' \
    "$WORK/startup-$n.log" >> "$WORK/startup.tsv"
  if [[ "$rc" != 0 ]]; then
    log "startup with $n workers: psctl exited $rc; last lines:"
    tail -5 "$WORK/startup-$n.log" >&2
    failed=1
  fi
done
echo "$(load)" >> "$WORK/startup.load"

log "tables and plots"
if ! "$PY" bench/scale_plots.py --work "$WORK" --out_dir "$OUT_DIR" --date "$DATE" \
    --machine "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))" \
    --quick "$QUICK"; then
  failed=1
fi
exit "$failed"
