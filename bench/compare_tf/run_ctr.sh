#!/usr/bin/env bash
# pscluster vs TensorFlow ParameterServerStrategy, side by side, on this
# machine: the MovieLens CTR job (examples/movielens_ctr.yaml) on 2 PS x 2
# workers for EPOCHS epochs with both systems (tf_ps_ctr.py for TF).
# Prints a markdown table and writes bench/compare_tf/results_ctr.json.
# Not part of ./run_tests.sh (needs the TF venv: ./setup.sh, ~600 MB, PyPI,
# and data/movielens/movielens.csv: the repository's ./setup.sh).
#
#   bench/compare_tf/run_ctr.sh                 # 3 epochs x 3 runs each
#   EPOCHS=1 REPEATS=1 SKIP_BUILD=1 bench/compare_tf/run_ctr.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
EPOCHS="${EPOCHS:-3}"
REPEATS="${REPEATS:-3}"
PS="${PS:-2}"
WORKERS="${WORKERS:-2}"
OUT_JSON="${OUT_JSON:-$HERE/results_ctr.json}"
VPY="$HERE/.venv/bin/python"

source "$HERE/lib.sh"
[[ -r "$ROOT/data/movielens/movielens.csv" ]] ||
  { echo "run_ctr.sh: data/movielens/movielens.csv is missing (./setup.sh exports it)" >&2; exit 1; }
compare_setup examples/movielens_ctr.yaml
run_alternating tf_ps_ctr.py

"$VPY" - "$WORK" "$OUT_JSON" "$EPOCHS" "$REPEATS" <<'EOF'
import json, os, platform, statistics, sys, time
work, out_path, epochs, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def load(name):
    p = os.path.join(work, name)
    return json.load(open(p)) if os.path.exists(p) else None

def busy_pct(name):
    p = os.path.join(work, "load." + name)
    return float(open(p).read()) if os.path.exists(p) else None

def span(name):
    a, b = open(os.path.join(work, name)).read().split()
    return float(b) - float(a)

def runs_of(system):
    runs = []
    for r in range(1, repeats + 1):
        d = load("%s.%d.json" % (system, r))
        if d is None:
            sys.exit("run_ctr.sh: %s run %d wrote no result" % (system, r))
        if system == "pscluster" and d.get("state") not in ("SUCCEEDED", None):
            sys.exit("run_ctr.sh: pscluster job ended %s: %s" % (d.get("state"), d.get("error")))
        train_s = (d["train_seconds"] if system == "tf"
                   else d["examples"] / d["examples_per_sec"])
        runs.append({"run": r, "examples_per_sec": d["examples_per_sec"],
                     "eval_auc": d["eval_auc"], "eval_loss": d["eval_loss"],
                     "examples": d["examples"], "train_seconds": train_s,
                     "job_wall_seconds": d["wall_seconds"] if system == "pscluster"
                     else d["process_wall_seconds"],
                     "command_wall_seconds": span("%s.%d.time" % (system, r)),
                     "cpu_busy_pct_before": busy_pct("%s.%d" % (system, r)),
                     "result": d})
    return runs

def med(runs, key):
    return statistics.median(x[key] for x in runs)

ps_runs, tf_runs = runs_of("pscluster"), runs_of("tf")
tf_version = tf_runs[0]["result"]["tf_version"]
rows = []
for name, runs in (("pscluster", ps_runs), ("TensorFlow %s PSS" % tf_version, tf_runs)):
    rows.append({"system": name, "examples_per_sec": med(runs, "examples_per_sec"),
                 "eval_auc": med(runs, "eval_auc"), "eval_loss": med(runs, "eval_loss"),
                 "train_seconds": med(runs, "train_seconds"),
                 "command_wall_seconds": med(runs, "command_wall_seconds"),
                 "examples_per_sec_every_run": [x["examples_per_sec"] for x in runs],
                 "eval_auc_every_run": [x["eval_auc"] for x in runs]})
ratio = rows[0]["examples_per_sec"] / rows[1]["examples_per_sec"]
auc_diff = rows[0]["eval_auc"] - rows[1]["eval_auc"]

print("\nMovieLens CTR, %d PS x %d workers, %d epoch(s): median of %d alternating run(s) per "
      "system, each column on its own." % (tf_runs[0]["result"]["ps"],
                                           tf_runs[0]["result"]["workers"], epochs, repeats))
print("\n| system | examples/s | eval AUC | eval logloss | train s | wall s (whole command) "
      "| every run's examples/s | every run's AUC |")
print("|---|---:|---:|---:|---:|---:|---|---|")
for r in rows:
    print("| %s | %.0f | %.4f | %.4f | %.1f | %.1f | %s | %s |" % (
        r["system"], r["examples_per_sec"], r["eval_auc"], r["eval_loss"], r["train_seconds"],
        r["command_wall_seconds"], ", ".join("%.0f" % x for x in r["examples_per_sec_every_run"]),
        ", ".join("%.4f" % x for x in r["eval_auc_every_run"])))
print("| **pscluster / TF** | **%.2fx** | %+.4f | | | | | |" % (ratio, auc_diff))
busy = {"%s.%d" % (s, x["run"]): x["cpu_busy_pct_before"] for s, runs in
        (("pscluster", ps_runs), ("tf", tf_runs)) for x in runs
        if x["cpu_busy_pct_before"] is not None and x["cpu_busy_pct_before"] > 20.0}
if busy:
    print("\nWARNING: other work kept the CPUs busy just before a phase (%% of all %d cores: %s); "
          "figures are skewed, rerun on an idle machine." % (os.cpu_count(), busy))

from importlib.metadata import version
result = {
    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "job": "examples/movielens_ctr.yaml",
    "nproc": os.cpu_count(),
    "machine": platform.machine(),
    "python": platform.python_version(),
    "tensorflow": version("tensorflow-cpu"), "numpy": version("numpy"),
    "epochs": epochs, "repeats": repeats,
    "cluster": {"ps": tf_runs[0]["result"]["ps"], "workers": tf_runs[0]["result"]["workers"]},
    "per_replica_batch": tf_runs[0]["result"]["per_replica_batch"],
    "steps_per_closure": tf_runs[0]["result"]["steps_per_closure"],
    "medians": rows,
    "throughput_ratio_pscluster_over_tf": ratio,
    "eval_auc_diff_pscluster_minus_tf": auc_diff,
    "pscluster_runs": ps_runs, "tensorflow_runs": tf_runs,
}
with open(out_path, "w") as f:
    json.dump(result, f, indent=2)
print("\nwrote %s" % out_path)
EOF
