#!/usr/bin/env bash
# pscluster vs TensorFlow ParameterServerStrategy on DLRM (issue 24): the
# job of examples/criteo_dlrm.yaml on 2 PS x 2 workers, both reading
# criteo_gen's TFRecord files: pscluster streaming them (PS_INPUT=tsv: its
# gzip TSV of the same rows, loaded whole), TF (tf_ps_dlrm.py) through
# tf.data. criteo_gen runs twice with the same
# flags (--format tsv, then --format tfrecord) and tf_ps_dlrm.py check_rows
# compares every row of the two before anything is timed.
# Prints a markdown table and writes bench/compare_tf/results_dlrm.json.
# Not part of ./run_tests.sh (needs the TF venv: ./setup.sh, PyPI).
#
#   bench/compare_tf/run_dlrm.sh                # 500k rows, 1 epoch x 1 run each
#   ROWS=200000 REPEATS=3 SKIP_BUILD=1 bench/compare_tf/run_dlrm.sh
#   TF_INPUT=replicate bench/compare_tf/run_dlrm.sh   # TF without the tf.data service
#   PS_INPUT=tsv bench/compare_tf/run_dlrm.sh         # pscluster's in-memory TSV path
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
EPOCHS="${EPOCHS:-1}"
REPEATS="${REPEATS:-1}"
PS="${PS:-2}"
WORKERS="${WORKERS:-2}"
ROWS="${ROWS:-500000}"
HOLDOUT_ROWS="${HOLDOUT_ROWS:-20000}"
SEED="${SEED:-1}"
CHECK_ROWS="${CHECK_ROWS:-1}"
OUT_JSON="${OUT_JSON:-$HERE/results_dlrm.json}"
VPY="$HERE/.venv/bin/python"

source "$HERE/lib.sh"
LOADAVG_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
compare_setup examples/criteo_dlrm.yaml
if [[ -z "${SKIP_BUILD:-}" ]]; then bazel build //datagen:criteo_gen; fi

GEN=(--rows "$ROWS" --holdout_rows "$HOLDOUT_ROWS" --shards 1 --seed "$SEED" --signal 1)
echo "== criteo_gen ${GEN[*]}: --format tsv and --format tfrecord" >&2
.bazel/bin/datagen/criteo_gen --out "$WORK/tsv" "${GEN[@]}" --format tsv >&2
.bazel/bin/datagen/criteo_gen --out "$WORK/tfrecord" "${GEN[@]}" --format tfrecord >&2
if [[ "$CHECK_ROWS" == 1 ]]; then
  echo "== tf_ps_dlrm.py check_rows: the TFRecord rows are the TSV rows" >&2
  TF_CPP_MIN_LOG_LEVEL=2 "$VPY" "$HERE/tf_ps_dlrm.py" check_rows --data "$WORK/tfrecord" \
    --tsv_data "$WORK/tsv" > "$WORK/check_rows.json"
else
  echo '{"same_rows": "not checked (CHECK_ROWS=0)"}' > "$WORK/check_rows.json"
fi
# PS_INPUT=tfrecord (default): pscluster streams the TFRecord files TF reads
# (data.*.stream, shard: data, a 10,000-record shuffle buffer); tsv: it loads
# the gzip TSV of the same rows into memory (examples/criteo_dlrm.yaml as is).
case "${PS_INPUT:-tfrecord}" in
  tfrecord)
    /usr/bin/python3 - "$WORK" <<'PY'
import sys, yaml
work = sys.argv[1]
job = yaml.safe_load(open(f"{work}/job.yaml"))
for part, name in (("train", "train"), ("eval", "holdout")):
    src = job["data"][part]
    job["data"][part] = {"format": "tfrecord", "path": [f"{work}/tfrecord/{name}-*.tfrecord"],
                         "columns": src["columns"], "label": src["label"],
                         "dense_columns": src["dense_columns"],
                         "stream": {"shard": "data", "shuffle_buffer": 10000}}
yaml.safe_dump(job, open(f"{work}/job.yaml", "w"), sort_keys=False)
PY
    grep -q "$WORK/tfrecord/train-\*.tfrecord" "$WORK/job.yaml" ||
      { echo "run_dlrm.sh: could not point the job at $WORK/tfrecord" >&2; exit 1; } ;;
  tsv)
    sed -i "s|data/criteo/|$WORK/tsv/|" "$WORK/job.yaml"
    grep -q "path: $WORK/tsv/train-00000-of-00001.tsv.gz" "$WORK/job.yaml" ||
      { echo "run_dlrm.sh: could not point the job at $WORK/tsv" >&2; exit 1; } ;;
  *) echo "run_dlrm.sh: PS_INPUT must be tfrecord or tsv, not '$PS_INPUT'" >&2; exit 2 ;;
esac
# TF_INPUT=service (default): TF reads through a tf.data service job, every
# row once per epoch as pscluster does; replicate: every TF worker reads the
# whole file (plain tf.data, ~75 % distinct rows per epoch).
case "${TF_INPUT:-service}" in
  service) TF_EXTRA_ARGS="--data $WORK/tfrecord --data_service" ;;
  replicate) TF_EXTRA_ARGS="--data $WORK/tfrecord" ;;
  *) echo "run_dlrm.sh: TF_INPUT must be service or replicate, not '$TF_INPUT'" >&2; exit 2 ;;
esac
run_alternating tf_ps_dlrm.py
LOADAVG_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

PS_INPUT="${PS_INPUT:-tfrecord}" "$VPY" - "$WORK" "$OUT_JSON" "$EPOCHS" "$REPEATS" "$LOADAVG_BEFORE" "$LOADAVG_AFTER" <<'EOF'
import json, os, platform, statistics, sys, time
work, out_path, epochs, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
loadavg_before, loadavg_after = sys.argv[5], sys.argv[6]

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
            sys.exit("run_dlrm.sh: %s run %d wrote no result" % (system, r))
        if system == "pscluster" and d.get("state") not in ("SUCCEEDED", None):
            sys.exit("run_dlrm.sh: pscluster job ended %s: %s" % (d.get("state"), d.get("error")))
        train_s = (d["train_seconds"] if system == "tf"
                   else d["examples"] / d["examples_per_sec"])
        runs.append({"run": r, "examples_per_sec": d["examples_per_sec"],
                     "eval_auc": d["eval_auc"], "eval_loss": d["eval_loss"],
                     "examples": d["examples"], "train_seconds": train_s,
                     "command_wall_seconds": span("%s.%d.time" % (system, r)),
                     "cpu_busy_pct_before": busy_pct("%s.%d" % (system, r)),
                     "result": d})
    return runs

def med(runs, key):
    return statistics.median(x[key] for x in runs)

meta = json.load(open(os.path.join(work, "tsv", "meta.json")))
meta_tfr = json.load(open(os.path.join(work, "tfrecord", "meta.json")))
check = json.load(open(os.path.join(work, "check_rows.json")))
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

print("\nDLRM on criteo_gen (%d train rows, %d holdout, Bayes AUC %.4f), %d PS x %d workers, "
      "%d epoch(s): median of %d alternating run(s) per system." % (
          meta["train_rows"], meta["holdout_rows"], meta["bayes_auc"],
          tf_runs[0]["result"]["ps"], tf_runs[0]["result"]["workers"], epochs, repeats))
print("\n| system | examples/s | holdout AUC | logloss | train s | wall s (whole command) "
      "| every run's examples/s | every run's AUC |")
print("|---|---:|---:|---:|---:|---:|---|---|")
for r in rows:
    print("| %s | %.0f | %.4f | %.4f | %.1f | %.1f | %s | %s |" % (
        r["system"], r["examples_per_sec"], r["eval_auc"], r["eval_loss"], r["train_seconds"],
        r["command_wall_seconds"], ", ".join("%.0f" % x for x in r["examples_per_sec_every_run"]),
        ", ".join("%.4f" % x for x in r["eval_auc_every_run"])))
print("| **pscluster / TF** | **%.2fx** | %+.4f | | | | | |" % (ratio, auc_diff))
print("\nload average (1/5/15 min) before %s, after %s on %d cores; rows checked: %s"
      % (loadavg_before, loadavg_after, os.cpu_count(), check))
busy = {"%s.%d" % (s, x["run"]): x["cpu_busy_pct_before"] for s, runs in
        (("pscluster", ps_runs), ("tf", tf_runs)) for x in runs
        if x["cpu_busy_pct_before"] is not None and x["cpu_busy_pct_before"] > 20.0}
if busy:
    print("\nWARNING: other work kept the CPUs busy just before a phase (%% of all %d cores: %s); "
          "figures are skewed, rerun on an idle machine." % (os.cpu_count(), busy))

from importlib.metadata import version
result = {
    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "job": "examples/criteo_dlrm.yaml",
    "data": {"generator": "criteo_gen --rows %d --holdout_rows %d --shards 1 --seed %d --signal %g"
                          % (meta["train_rows"], meta["holdout_rows"], meta["seed"], meta["signal"]),
             "pscluster_reads": {"tfrecord": "tfrecord (tf.Example), streamed",
                                 "tsv": "tsv.gz, loaded whole"}[os.environ["PS_INPUT"]],
             "tensorflow_reads": "tfrecord (tf.Example)",
             "bayes_auc": meta["bayes_auc"], "bayes_logloss": meta["bayes_logloss"],
             "same_bayes_auc_in_both_meta": meta["bayes_auc"] == meta_tfr["bayes_auc"],
             "check_rows": check},
    "nproc": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
    "loadavg_before": loadavg_before, "loadavg_after": loadavg_after,
    "tensorflow": version("tensorflow-cpu"), "numpy": version("numpy"),
    "tensorflow_input": tf_runs[0]["result"]["input"],
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
