#!/usr/bin/env bash
# staleness_sweep: accuracy against worker count with and without bounded
# staleness and staleness-aware learning rates (docs/staleness.md; issue 25,
# item 4). The Fashion-MNIST MLP of examples/fashion_mnist_mlp.yaml, 2
# epochs of the same 20,000 training examples in every run, on `psctl local`
# with PS parameter servers and W workers, for each variant:
#   async    train.max_staleness absent (unbounded, as before)
#   ssp      train.max_staleness: SSP_BOUND (default 1)
#   lr       train.staleness_lr: inverse (unbounded)
#   ssp_lr   both
# One run at a time (never in parallel). Writes
# bench/results/<date>-staleness.{json,md,png} (bench/staleness_plot.py):
# per run the eval accuracy, steps and the steps each PS applied, the
# measured closure and push staleness, wall seconds, and the load average
# (uptime) before and after it. Not part of ./run_tests.sh.
#
#   bench/staleness_sweep.sh                         # every worker count and variant
#   bench/staleness_sweep.sh --workers 2,16,32 --variants async,ssp
#
# Knobs (env): PS (2), SSP_BOUND (1), EPOCHS (2), TRAIN_LIMIT (20000),
# BIN (the directory of psctl, ps_server, worker_server and coordinator;
# default .bazel/bin's), TIMEOUT_S (900 per run), OUT (bench/results/<date>-staleness).
# Exit: 0 when every run succeeded, 1 otherwise.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
WORKERS_LIST="2,8,16,32,64"
VARIANTS="async,ssp,lr,ssp_lr"
while (($#)); do
  case "$1" in
    --workers) WORKERS_LIST="$2"; shift 2 ;;
    --variants) VARIANTS="$2"; shift 2 ;;
    *) echo "usage: $0 [--workers 2,8,...] [--variants async,ssp,lr,ssp_lr]" >&2; exit 2 ;;
  esac
done
PS="${PS:-2}"
SSP_BOUND="${SSP_BOUND:-1}"
EPOCHS="${EPOCHS:-2}"
TRAIN_LIMIT="${TRAIN_LIMIT:-20000}"
TIMEOUT_S="${TIMEOUT_S:-900}"
OUT="${OUT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-staleness}"
# The Debian python3-matplotlib serves /usr/bin/python3, which may not be the
# python3 on PATH: use whichever imports it (else tables only, no PNG).
PY=python3
for py in python3 /usr/bin/python3; do
  if command -v "$py" > /dev/null && "$py" -c 'import matplotlib' 2> /dev/null; then
    PY="$py"
    break
  fi
done
BIN="${BIN:-}"
if [[ -z "$BIN" ]]; then
  (cd "$ROOT" && bazel build //client:psctl //ps:ps_server //worker:worker_server \
    //coordinator:coordinator)
  BIN="$ROOT/.bazel/bin"
  PSCTL="$BIN/client/psctl" PS_BIN="$BIN/ps/ps_server"
  WORKER_BIN="$BIN/worker/worker_server" COORD_BIN="$BIN/coordinator/coordinator"
else
  PSCTL="$BIN/psctl" PS_BIN="$BIN/ps_server" WORKER_BIN="$BIN/worker_server"
  COORD_BIN="$BIN/coordinator"
fi
for b in "$PSCTL" "$PS_BIN" "$WORKER_BIN" "$COORD_BIN"; do
  [[ -x "$b" ]] || { echo "staleness_sweep: $b is not built" >&2; exit 2; }
done

WORK="$(mktemp -d /tmp/staleness-sweep-XXXXXX)"
RUNNING=""
cleanup() {
  # The run in flight, by its pid (psctl stops its children on SIGTERM; they
  # die with it: PDEATHSIG).
  if [[ -n "$RUNNING" ]]; then
    kill -TERM "$RUNNING" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$RUNNING" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$RUNNING" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# job VARIANT: the example's job, EPOCHS epochs of TRAIN_LIMIT examples, and
# the variant's train options.
job() {
  local extra=""
  case "$1" in
    async) ;;
    ssp) extra="  max_staleness: $SSP_BOUND" ;;
    lr) extra="  staleness_lr: inverse" ;;
    ssp_lr) extra="  max_staleness: $SSP_BOUND"$'\n'"  staleness_lr: inverse" ;;
    *) echo "staleness_sweep: unknown variant '$1'" >&2; exit 2 ;;
  esac
  "$PY" - "$ROOT/examples/fashion_mnist_mlp.yaml" "$EPOCHS" "$TRAIN_LIMIT" "$extra" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
epochs, limit, extra = sys.argv[2], sys.argv[3], sys.argv[4]
text, n1 = re.subn(r"(?m)^  epochs: \d+$", "  epochs: " + epochs, text)
text, n2 = re.subn(r"(?m)^(    labels: .*train-labels.*)$", r"\1\n    limit: " + limit, text)
text, n3 = re.subn(r"(?m)^(  closures_per_worker: \d+)$", r"\1" + ("\n" + extra if extra else ""), text)
assert n1 == n2 == n3 == 1, (n1, n2, n3)
sys.stdout.write(text)
PY
}

IFS=, read -r -a workers <<< "$WORKERS_LIST"
IFS=, read -r -a variants <<< "$VARIANTS"
status=0
: > "$WORK/runs.jsonl"
for w in "${workers[@]}"; do
  for v in "${variants[@]}"; do
    name="w$w-$v"
    job "$v" > "$WORK/$name.yaml"
    load0="$(cat /proc/loadavg)"
    echo "== $name: $(uptime)" >&2
    # A cluster that fails before its first step (on this shared 2-core
    # machine under load, gRPC connects to a just-started server sometimes
    # fail: "tcp handshaker shutdown") is started again, up to 3 attempts;
    # a job that trained and failed is not.
    attempt=0
    while true; do
      attempt=$((attempt + 1))
      t0=$(date +%s.%N)
      rc=0
      timeout -k 10 "$((TIMEOUT_S + 60))" "$PSCTL" local "$WORK/$name.yaml" --ps "$PS" \
        --workers "$w" --ps_server_bin="$PS_BIN" --worker_server_bin="$WORKER_BIN" \
        --coordinator_bin="$COORD_BIN" --timeout_s "$TIMEOUT_S" --output json \
        > "$WORK/$name.json" 2> "$WORK/$name.err" &
      RUNNING=$!
      wait "$RUNNING" || rc=$?
      RUNNING=""
      t1=$(date +%s.%N)
      ((rc != 0 && attempt < 3)) || break
      "$PY" -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("steps", 0) == 0 else 1)' \
        "$WORK/$name.json" 2> /dev/null || break
      echo "staleness_sweep: $name failed before training (attempt $attempt): $(tail -1 "$WORK/$name.err"); again" >&2
    done
    load1="$(cat /proc/loadavg)"
    ((rc == 0)) || { status=1; echo "staleness_sweep: $name exited $rc:" >&2; tail -3 "$WORK/$name.err" >&2; }
    "$PY" - "$WORK/$name.json" "$w" "$v" "$rc" "$t0" "$t1" "$load0" "$load1" "$SSP_BOUND" \
      "$attempt" >> "$WORK/runs.jsonl" <<'PY'
import json, sys
path, w, v, rc, t0, t1, load0, load1, bound, attempts = sys.argv[1:11]
try:
    r = json.load(open(path))
except Exception:
    r = {}
row = {"workers": int(w), "variant": v, "rc": int(rc), "wall_seconds": float(t1) - float(t0),
       "max_staleness": int(bound) if v.startswith("ssp") else None,
       "staleness_lr": "inverse" if v.endswith("lr") else "none",
       "loadavg_before": load0, "loadavg_after": load1, "attempts": int(attempts)}
row["error"] = r.get("error")
for k in ("state", "eval_accuracy", "eval_loss", "steps", "ps_applied_steps",
          "max_closure_staleness", "max_push_staleness", "examples_per_sec"):
    row[k] = r.get(k)
print(json.dumps(row))
PY
    tail -1 "$WORK/runs.jsonl" >&2
  done
done
cp "$WORK/runs.jsonl" "$OUT.runs.jsonl"
"$PY" "$HERE/staleness_plot.py" --runs "$WORK/runs.jsonl" --out "$OUT" --ps "$PS" \
  --epochs "$EPOCHS" --train_limit "$TRAIN_LIMIT" --ssp_bound "$SSP_BOUND"
exit "$status"
