#!/usr/bin/env bash
# Issue 20's speed must-show: the Fashion-MNIST MLP of
# examples/fashion_mnist_mlp.yaml on 2 PS x 2 workers, trained three ways in
# alternating rounds of one run:
#   yaml    psctl local of the YAML job (C++ workers);
#   python  examples/python/fashion_mnist_mlp.py: the same model, optimizer,
#           batch and closure size as a ClusterCoordinator program, NumPy
#           functions on Python workers (python3 -m pscluster.worker);
#   tf      bench/compare_tf/tf_ps_mlp.py, TF 2.x ParameterServerStrategy,
#           when bench/compare_tf/.venv exists (bench/compare_tf/setup.sh
#           makes it; ~600 MB from PyPI); skipped otherwise.
# examples/s: training examples over the time of the training epochs (the
# YAML job's training phases; the program's schedule-to-join of each epoch;
# TF's epoch loop), so start-up and evaluation are left out of all three.
#
#   bench/python_api_bench.sh [--epochs N] [--rounds N] [--no_tf] [--bin DIR]
#
# --no_tf: leave TF out even when its venv exists. --bin DIR: use the
# servers, psctl and _pscluster.so under DIR (laid out as Bazel's bin
# directory: DIR/ps/ps_server, DIR/python/_pscluster.so, ...) instead of
# building them here (e.g. a copy made while the tree built, so that other
# builds do not change them mid-run).
# Results: bench/results/<date>-python-api.{json,md}. Not part of
# ./run_tests.sh; run it on a quiet machine (it prints the load).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
epochs=3
rounds=3
tf=1
bin=
while (($# > 0)); do
  case "$1" in
    --epochs) epochs="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --no_tf) tf=0; shift ;;
    --bin) bin="$2"; shift 2 ;;
    *) echo "python_api_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z $bin ]]; then
  bazel build //client:psctl //ps:ps_server //worker:worker_server //coordinator \
    //python:_pscluster.so
  bin="$PWD/.bazel/bin"
fi
bin="$(cd "$bin" && pwd)"
python=/usr/bin/python3
vpy=bench/compare_tf/.venv/bin/python
work="$(mktemp -d "${TMPDIR:-/tmp}/python-api-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" - "$work/job.yaml" "$epochs" <<'PY'
import sys, yaml
job = yaml.safe_load(open("examples/fashion_mnist_mlp.yaml"))
job["train"]["epochs"] = int(sys.argv[2])
yaml.safe_dump(job, open(sys.argv[1], "w"), sort_keys=False)
PY
# The package and its extension from this tree's build, whatever setup.sh
# last put on Python's path.
export PYTHONPATH="$PWD/python:$bin/python"
systems=(yaml python)
if ((tf == 0)); then
  echo "python_api_bench: --no_tf: TF not run"
elif [[ -x $vpy ]]; then
  systems+=(tf)
else
  echo "python_api_bench: no $vpy: TF not run"
fi
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "python_api_bench: load before: $(uptime)"
for ((r = 1; r <= rounds; ++r)); do
  for s in "${systems[@]}"; do
    case "$s" in
      yaml)
        "$bin/client/psctl" local "$work/job.yaml" --ps 2 --workers 2 --output json \
          --ps_server_bin="$bin/ps/ps_server" --worker_server_bin="$bin/worker/worker_server" \
          --coordinator_bin="$bin/coordinator/coordinator" > "$work/yaml.$r.json" \
          2> "$work/yaml.$r.err" || { tail -20 "$work/yaml.$r.err" >&2; exit 1; } ;;
      python)
        "$python" examples/python/fashion_mnist_mlp.py --epochs "$epochs" \
          --json "$work/python.$r.json" > "$work/python.$r.out" 2>&1 ||
          { tail -20 "$work/python.$r.out" >&2; exit 1; } ;;
      tf)
        "$vpy" bench/compare_tf/tf_ps_mlp.py train --ps 2 --workers 2 --epochs "$epochs" \
          --json "$work/tf.$r.json" > "$work/tf.$r.out" 2>&1 ||
          { tail -20 "$work/tf.$r.out" >&2; exit 1; } ;;
    esac
    "$python" -c "import json,sys; r=json.load(open(sys.argv[1])); print('  round $r $s: %.0f examples/s, accuracy %.4f' % (r['examples_per_sec'], r['eval_accuracy']))" "$work/$s.$r.json"
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "python_api_bench: load after: $(uptime)"
"$python" - "$work" "$rounds" "$epochs" "$(date -u +%Y-%m-%d)" "$load_before" "$load_after" \
  "${systems[@]}" <<'PY'
import json, os, statistics, sys
work, rounds, epochs, date = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
load_before, load_after, systems = sys.argv[5], sys.argv[6], sys.argv[7:]
runs = {s: [json.load(open(f"{work}/{s}.{r}.json")) for r in range(1, rounds + 1)] for s in systems}
med = {s: statistics.median(x["examples_per_sec"] for x in v) for s, v in runs.items()}
acc = {s: statistics.median(x["eval_accuracy"] for x in v) for s, v in runs.items()}
res = {"date": date, "epochs": int(epochs), "rounds": rounds, "nproc": os.cpu_count(),
       "examples_per_sec": {s: [x["examples_per_sec"] for x in v] for s, v in runs.items()},
       "eval_accuracy": {s: [x["eval_accuracy"] for x in v] for s, v in runs.items()},
       "median_examples_per_sec": med, "median_eval_accuracy": acc,
       "python_over_yaml": med["python"] / med["yaml"],
       "load_average_before": load_before, "load_average_after": load_after}
if "tf" in med:
    res["python_over_tf"] = med["python"] / med["tf"]
name = {"yaml": "YAML job (C++ workers)", "python": "Python ClusterCoordinator (NumPy workers)",
        "tf": "TF ParameterServerStrategy"}
lines = [f"# Fashion-MNIST MLP: the Python API against the YAML path and TF PSS ({date})", "",
         f"2 PS x 2 workers, {epochs} epochs, {rounds} alternating rounds, {os.cpu_count()} cores "
         "(`bench/python_api_bench.sh`).",
         f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}.", "",
         "| system | examples/s per round | median | eval accuracy per round |",
         "|---|---|---:|---|"]
for s in systems:
    lines.append(f"| {name[s]} | {', '.join('%.0f' % x for x in res['examples_per_sec'][s])} | "
                 f"{med[s]:.0f} | {', '.join('%.4f' % x for x in res['eval_accuracy'][s])} |")
lines += ["", f"Python / YAML: **{res['python_over_yaml']:.2f}x** (target >= 0.7)."]
if "tf" in med:
    lines.append(f"Python / TF PSS: **{res['python_over_tf']:.2f}x** (target >= 2).")
else:
    lines.append("TF PSS: not run (--no_tf, or no bench/compare_tf/.venv).")
json.dump(res, open(f"bench/results/{date}-python-api.json", "w"), indent=1)
open(f"bench/results/{date}-python-api.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
