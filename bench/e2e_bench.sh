#!/usr/bin/env bash
# e2e_bench: end-to-end training throughput of `psctl local` on the two
# examples (examples/fashion_mnist_mlp.yaml, examples/movielens_ctr.yaml),
# with (PS, workers) in {(1,1), (1,2), (2,2), (2,4)} and strategy one_device,
# each for --epochs epochs (rewritten with sed into a temporary copy).
#
# Per run it reports, from `psctl local --output json`:
#   examples/s          the coordinator's training examples / training-phase
#                       seconds (eval excluded);
#   train s             examples / examples_per_sec, i.e. the training phases'
#                       wall time;
#   compute/pull/push   seconds per worker: the job's sums over workers
#                       (worker/core/trainer.cc times each step's gather +
#                       forward/backward, pulls and pushes) divided by workers;
#                       push is one round trip per PS per step that also
#                       brings the next step's parameters (fused push+pull),
#                       so it includes the next step's pull; pull is only
#                       each closure's first pull;
#   other               train s - (compute + pull + push) per worker: time a
#                       worker spent outside its own timed steps during
#                       training (closure dispatch round trips, waiting for a
#                       closure, the last closures' tail). It is derived, not
#                       measured directly, and assumes every worker was busy
#                       for the whole phase;
#   accuracy / AUC      of the last epoch's eval.
# one_device runs train in the psctl process against an in-process store,
# so their pull/push are memory copies and the optimizer step, no RPC.
#
# usage: bench/e2e_bench.sh [--epochs N] [--output_json PATH] [--psctl PATH]
# Run from the repository root after `bazel build //client:psctl //ps:ps_server
# //worker:worker_server //coordinator:coordinator`. MovieLens needs
# data/movielens/movielens.csv (./setup.sh exports it); without it those
# runs are skipped and listed as skipped. Prints a markdown table on stdout.
# Exit: 0 if every run that was attempted succeeded, 1 otherwise, 2 usage.
set -euo pipefail

EPOCHS=2
OUTPUT_JSON=""
PSCTL=".bazel/bin/client/psctl"
while (($# > 0)); do
  case "$1" in
    --epochs) EPOCHS="$2"; shift 2 ;;
    --output_json) OUTPUT_JSON="$2"; shift 2 ;;
    --psctl) PSCTL="$2"; shift 2 ;;
    *) echo "usage: $0 [--epochs N] [--output_json PATH] [--psctl PATH]" >&2; exit 2 ;;
  esac
done
[[ -x "$PSCTL" ]] || { echo "e2e_bench: $PSCTL not built" >&2; exit 2; }

TMP="$(mktemp -d /tmp/e2e_bench.XXXXXX)"
RUNNING=""
cleanup() {
  [[ -n "$RUNNING" ]] && kill "$RUNNING" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

CONFIGS=("parameter_server 1 1" "parameter_server 1 2" "parameter_server 2 2"
         "parameter_server 2 4" "one_device 1 1")
EXAMPLES=(fashion_mnist_mlp movielens_ctr)
failed=0
: > "$TMP/runs.txt"
for example in "${EXAMPLES[@]}"; do
  if [[ "$example" == movielens_ctr && ! -s data/movielens/movielens.csv ]]; then
    echo "e2e_bench: data/movielens/movielens.csv missing (run ./setup.sh); skipping MovieLens" >&2
    echo "$example - - - skipped" >> "$TMP/runs.txt"
    continue
  fi
  for config in "${CONFIGS[@]}"; do
    read -r strategy ps workers <<< "$config"
    job="$TMP/$example-$strategy-$ps-$workers.yaml"
    sed -e "s/^  epochs: .*/  epochs: $EPOCHS/" -e "s/^strategy: .*/strategy: $strategy/" \
      "examples/$example.yaml" > "$job"
    out="${job%.yaml}.json"
    echo "e2e_bench: $example $strategy ps=$ps workers=$workers epochs=$EPOCHS" >&2
    "$PSCTL" local "$job" --ps "$ps" --workers "$workers" --output json --timeout_s 600 \
      > "$out" 2> "${out%.json}.err" &
    RUNNING=$!
    rc=0
    wait "$RUNNING" || rc=$?
    RUNNING=""
    if ((rc != 0)); then
      echo "e2e_bench: psctl exited $rc; last lines of its stderr:" >&2
      tail -n 5 "${out%.json}.err" >&2
      failed=1
    fi
    echo "$example $strategy $ps $workers $out" >> "$TMP/runs.txt"
  done
done

python3 - "$TMP/runs.txt" "$EPOCHS" "$OUTPUT_JSON" <<'PY'
import json, os, platform, subprocess, sys, time
runs_file, epochs, output_json = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = []
for line in open(runs_file):
    example, strategy, ps, workers, path = line.split()
    if path == "skipped":
        rows.append({"example": example, "state": "SKIPPED (no data/movielens/movielens.csv)"})
        continue
    row = {"example": example, "strategy": strategy, "ps": int(ps), "workers": int(workers),
           "epochs": epochs}
    try:
        r = json.load(open(path))
    except (OSError, ValueError) as e:
        row["state"] = f"NO RESULT ({e})"
        rows.append(row)
        continue
    row["state"] = r.get("state")
    eps = r.get("examples_per_sec") or 0
    row["examples_per_sec"] = eps
    row["wall_seconds"] = r.get("wall_seconds")
    row["eval_accuracy"] = r.get("eval_accuracy")
    row["eval_auc"] = r.get("eval_auc") or None
    w = int(workers) if strategy == "parameter_server" else 1
    train_s = r.get("examples", 0) / eps if eps else None
    row["train_seconds"] = train_s
    for k in ("compute", "pull", "push"):
        row[f"{k}_seconds_per_worker"] = r.get(f"{k}_seconds", 0) / w
    if train_s is not None:
        busy = sum(row[f"{k}_seconds_per_worker"] for k in ("compute", "pull", "push"))
        row["other_seconds_per_worker"] = train_s - busy
    rows.append(row)

def f(x, fmt):
    return "—" if x is None else format(x, fmt)

print(f"End to end, psctl local, {epochs} epoch(s) per run; time split is seconds per worker "
      "during training (other = train s − compute − pull − push; push includes the next "
      "step's pull, fused; pull is each closure's first pull).\n")
print("| example | strategy | PS | workers | examples/s | train s | compute | pull | push | "
      "other | eval accuracy | eval AUC | wall s | state |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if "strategy" not in r:
        print(f"| {r['example']} | — | — | — | — | — | — | — | — | — | — | — | — | {r['state']} |")
        continue
    print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
        r["example"], r["strategy"], r["ps"], r["workers"],
        f(r.get("examples_per_sec"), ".0f"), f(r.get("train_seconds"), ".1f"),
        f(r.get("compute_seconds_per_worker"), ".2f"), f(r.get("pull_seconds_per_worker"), ".2f"),
        f(r.get("push_seconds_per_worker"), ".2f"), f(r.get("other_seconds_per_worker"), ".2f"),
        f(r.get("eval_accuracy"), ".4f"), f(r.get("eval_auc"), ".4f"),
        f(r.get("wall_seconds"), ".1f"), r["state"]))
if output_json:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown")
    doc = {"benchmark": "e2e_bench", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "nproc": os.cpu_count(), "cpu_model": cpu, "epochs": epochs, "runs": rows}
    tmp = output_json + ".tmp"
    with open(tmp, "w") as out:
        json.dump(doc, out, indent=2)
        out.write("\n")
    os.replace(tmp, output_json)
PY
exit "$failed"
