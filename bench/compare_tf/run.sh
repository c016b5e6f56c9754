#!/usr/bin/env bash
# pscluster vs TensorFlow ParameterServerStrategy, side by side, on this
# machine: the Fashion-MNIST MLP on 2 PS x 2 workers for EPOCHS epochs with
# both systems, plus TF's closure dispatch rate on 1, 2 and 4 workers.
# Prints a markdown table and writes bench/compare_tf/results.json.
# Not part of ./run_tests.sh (needs the TF venv: ./setup.sh, ~600 MB, PyPI).
#
#   bench/compare_tf/run.sh                 # 3 epochs x 3 runs each, ~4 minutes on 2 cores
#   EPOCHS=2 REPEATS=1 bench/compare_tf/run.sh
#   SKIP_BUILD=1 SKIP_DISPATCH=1 bench/compare_tf/run.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
EPOCHS="${EPOCHS:-3}"
REPEATS="${REPEATS:-3}"
PS="${PS:-2}"
WORKERS="${WORKERS:-2}"
DISPATCH_WORKERS="${DISPATCH_WORKERS:-1,2,4}"
DISPATCH_SECONDS="${DISPATCH_SECONDS:-5}"
OUT_JSON="${OUT_JSON:-$HERE/results.json}"
VPY="$HERE/.venv/bin/python"

source "$HERE/lib.sh"
compare_setup examples/fashion_mnist_mlp.yaml
run_alternating tf_ps_mlp.py

if [[ -z "${SKIP_DISPATCH:-}" ]]; then
  echo "== TensorFlow: dispatch rate of a no-op closure on $DISPATCH_WORKERS workers" >&2
  load tf_dispatch
  "$VPY" "$HERE/tf_ps_mlp.py" dispatch --workers "$DISPATCH_WORKERS" \
    --seconds "$DISPATCH_SECONDS" --json "$WORK/tf_dispatch.json" > /dev/null
fi

"$VPY" - "$WORK" "$OUT_JSON" "$EPOCHS" "$REPEATS" <<'EOF'
import json, os, platform, statistics, subprocess, sys, time
work, out_path, epochs, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def load(name):
    p = os.path.join(work, name)
    return json.load(open(p)) if os.path.exists(p) else None

def busy_pct(name):
    name = {"pscluster": "pscluster.%d" % ps_run, "tf": "tf.%d" % tf_run}.get(name, name)
    p = os.path.join(work, "load." + name)
    return float(open(p).read()) if os.path.exists(p) else None

def span(name):
    name = {"pscluster.time": "pscluster.%d.time" % ps_run, "tf.time": "tf.%d.time" % tf_run}[name]
    a, b = open(os.path.join(work, name)).read().split()
    return float(b) - float(a)

def median_run(system):
    """The run with the median examples/s of `system`, with its index."""
    runs = []
    for r in range(1, repeats + 1):
        d = load("%s.%d.json" % (system, r))
        if d is None:
            sys.exit("run.sh: %s run %d wrote no result" % (system, r))
        if system == "pscluster" and d.get("state") not in ("SUCCEEDED", None):
            sys.exit("run.sh: pscluster job ended %s: %s" % (d.get("state"), d.get("error")))
        runs.append((d["examples_per_sec"], r, d))
    runs.sort(key=lambda x: x[0])
    _, r, d = runs[(len(runs) - 1) // 2]
    return d, r, [x[0] for x in sorted(runs, key=lambda x: x[1])]

ps, ps_run, ps_all = median_run("pscluster")
tf, tf_run, tf_all = median_run("tf")
disp = load("tf_dispatch.json")

from importlib.metadata import version
rows = [
    {"system": "pscluster", "examples_per_sec": ps["examples_per_sec"],
     "eval_accuracy": ps["eval_accuracy"], "examples": ps["examples"],
     "train_seconds": ps["examples"] / ps["examples_per_sec"],
     "job_wall_seconds": ps["wall_seconds"], "command_wall_seconds": span("pscluster.time"),
     "cpu_busy_pct_before": busy_pct("pscluster")},
    {"system": "TensorFlow %s PSS" % tf["tf_version"], "examples_per_sec": tf["examples_per_sec"],
     "eval_accuracy": tf["eval_accuracy"], "examples": tf["examples"],
     "train_seconds": tf["train_seconds"],
     "job_wall_seconds": tf["process_wall_seconds"], "command_wall_seconds": span("tf.time"),
     "cpu_busy_pct_before": busy_pct("tf")},
]
ratio = ps["examples_per_sec"] / tf["examples_per_sec"]
acc_diff = ps["eval_accuracy"] - tf["eval_accuracy"]

print("\nMedian of %d alternating runs per system (the median run's accuracy and times)."
      % repeats)
print("\n| system | examples/s | eval accuracy | train s | wall s (whole command) | every run's examples/s |")
print("|---|---:|---:|---:|---:|---|")
for r, runs in zip(rows, (ps_all, tf_all)):
    print("| %s | %.0f | %.4f | %.1f | %.1f | %s |" % (r["system"], r["examples_per_sec"],
          r["eval_accuracy"], r["train_seconds"], r["command_wall_seconds"],
          ", ".join("%.0f" % x for x in runs)))
print("| **pscluster / TF** | **%.2fx** | %+.4f | | | |" % (ratio, acc_diff))
print("\nTarget: pscluster >= 3x TF's examples/s at equal accuracy (+-0.01): %s (%.2fx, accuracy %+.4f)"
      % ("MET" if ratio >= 3 and abs(acc_diff) <= 0.01 else "NOT MET", ratio, acc_diff))
busy = {n: busy_pct(n) for n in ("pscluster", "tf", "tf_dispatch")
        if busy_pct(n) is not None and busy_pct(n) > 20.0}
if busy:
    print("\nWARNING: other work kept the CPUs busy just before a phase (%% of all %d cores: %s); "
          "figures are skewed, rerun on an idle machine." % (os.cpu_count(), busy))
if disp:
    print("\n| TF dispatch (no-op closure, 1 PS) | closures/s |")
    print("|---|---:|")
    for d in disp["dispatch"]:
        print("| %d worker(s) | %.0f |" % (d["workers"], d["closures_per_sec"]))
    print("\nTarget: pscluster's dispatch >= 10x these (measured separately).")

result = {
    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "nproc": os.cpu_count(),
    "machine": platform.machine(),
    "python": platform.python_version(),
    "tensorflow": version("tensorflow-cpu"), "numpy": version("numpy"),
    "epochs": epochs, "repeats": repeats, "cluster": {"ps": tf["ps"], "workers": tf["workers"]},
    "per_replica_batch": tf["per_replica_batch"], "steps_per_closure": tf["steps_per_closure"],
    "cpu_busy_pct_before": {n: busy_pct(n) for n in ("pscluster", "tf", "tf_dispatch")},
    "rows": rows,
    "examples_per_sec_every_run": {"pscluster": ps_all, "tensorflow": tf_all},
    "throughput_ratio_pscluster_over_tf": ratio,
    "eval_accuracy_diff_pscluster_minus_tf": acc_diff,
    "targets": {"throughput_ratio_min": 3.0, "accuracy_tolerance": 0.01,
                "throughput_met": ratio >= 3 and abs(acc_diff) <= 0.01,
                "dispatch_ratio_min": 10.0},
    "pscluster": ps, "tensorflow_train": tf, "tensorflow_dispatch": disp,
}
with open(out_path, "w") as f:
    json.dump(result, f, indent=2)
print("\nwrote %s" % out_path)
EOF
