#!/usr/bin/env python3
"""Table and JSON of bench/strategies.sh's runs (see that script).

Reads the work directory strategies.sh filled: runs.txt ("NAME SYSTEM" per
run, in order), and per run NAME.out / NAME.err (stdout, stderr), NAME.time
("t0 t1 rc"), NAME.loadavg, NAME.uptime, NAME.busy (load before the run) and,
for TensorFlow, NAME.json. Prints a markdown table; writes --out_json.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

ASYNC = "parameter_server"


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def load_json(path):
    text = read(path)
    if not text or not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def git_commit(root):
    """HEAD's commit read from .git's files (no git command)."""
    head = (read(os.path.join(root, ".git", "HEAD")) or "").strip()
    if not head.startswith("ref: "):
        return head or None
    ref = head[5:]
    c = read(os.path.join(root, ".git", ref))
    if c:
        return c.strip()
    for line in (read(os.path.join(root, ".git", "packed-refs")) or "").splitlines():
        if line.endswith(" " + ref):
            return line.split()[0]
    return None


def one_run(work, name, system):
    t0, t1, rc = (read(os.path.join(work, name + ".time")) or "0 0 -1").split()
    rc = int(rc)
    err = read(os.path.join(work, name + ".err"), "")
    row = {
        "strategy": name, "system": system, "rc": rc,
        "command_wall_seconds": float(t1) - float(t0),
        "loadavg_before": (read(os.path.join(work, name + ".loadavg")) or "").strip(),
        "uptime_before": (read(os.path.join(work, name + ".uptime")) or "").strip(),
        "cpu_busy_pct_before": float(read(os.path.join(work, name + ".busy"), "nan")),
    }
    if system == "tensorflow":
        r = load_json(os.path.join(work, name + ".json"))
        row["strategy"] = "multi_worker_mirrored (TF)"
        if rc != 0 or r is None:
            row["status"] = "failed"
            row["error"] = err[-2000:]
            return row
        row.update({"status": "ok", "replicas": r["replicas"], "global_batch": r["global_batch"],
                    "steps": r["steps"], "examples_per_sec": r["examples_per_sec"],
                    "eval_accuracy": r["eval_accuracy"], "result": r})
        return row
    r = load_json(os.path.join(work, name + ".out"))
    # Exit 2 naming the strategy (or the `devices` key that mirrored jobs
    # carry) as unknown: this psctl does not have it.
    if rc == 2 and re.search(r"unknown strategy|unknown key 'devices'", err):
        row["status"] = "not available"
        row["error"] = err.strip()[-500:]
        return row
    if rc != 0 or r is None or r.get("state") != "SUCCEEDED":
        row["status"] = "failed"
        row["error"] = (r or {}).get("error") or err[-2000:]
        if r is not None:
            row["result"] = r
        return row
    row.update({"status": "ok", "replicas": r.get("replicas"),
                "global_batch": r.get("global_batch"),
                "steps": r.get("steps_trained", r.get("steps")),
                "examples_per_sec": r.get("examples_per_sec"),
                "eval_accuracy": r.get("eval_accuracy"), "result": r})
    return row


def versions(psctl):
    v = {"python": platform.python_version(), "kernel": platform.release(),
         "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                            if l.startswith("model name")), "unknown")}
    try:
        v["psctl"] = subprocess.run([psctl, "--version"], capture_output=True, text=True,
                                    timeout=10).stdout.strip()
        v["psctl_mtime"] = time.strftime("%Y-%m-%dT%H:%M:%S%z",
                                         time.localtime(os.path.getmtime(psctl)))
    except (OSError, subprocess.SubprocessError):
        v["psctl"] = None
    try:
        from importlib.metadata import version, PackageNotFoundError
        for pkg in ("tensorflow-cpu", "numpy"):
            try:
                v[pkg] = version(pkg)
            except PackageNotFoundError:
                v[pkg] = None
    except ImportError:
        pass
    return v


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--out_json", required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--ps", type=int, required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--tf_workers", type=int, required=True)
    p.add_argument("--psctl", required=True)
    p.add_argument("--tf_note", default="")
    a = p.parse_args()

    rows = []
    for line in open(os.path.join(a.work, "runs.txt")):
        name, system = line.split()
        rows.append(one_run(a.work, name, system))
    if a.tf_note:
        rows.append({"strategy": "multi_worker_mirrored (TF)", "system": "tensorflow",
                     "status": a.tf_note})
    base = next((r for r in rows if r["strategy"] == ASYNC and r["status"] == "ok"), None)
    base_eps = base["examples_per_sec"] if base else None
    for r in rows:
        if r["status"] == "ok" and base_eps:
            r["ratio_to_pscluster_async"] = r["examples_per_sec"] / base_eps

    def f(x, fmt):
        return "—" if x is None else format(x, fmt)

    tf_ver = next((r["result"].get("tf_version") for r in rows
                   if r["system"] == "tensorflow" and r.get("result")), None)
    print("\nFashion-MNIST MLP, %d epoch(s); pscluster on %d PS x %d workers "
          "(one_device: one process), TF MWMS on %d workers; run one after the other.\n"
          % (a.epochs, a.ps, a.workers, a.tf_workers))
    print("| strategy | system | replicas | global batch | steps | examples/s | "
          "ratio to pscluster async | eval accuracy | wall s | load avg before |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        system = r["system"]
        if system == "tensorflow" and tf_ver:
            system = "TensorFlow %s" % tf_ver
        load = " ".join((r.get("loadavg_before") or "").split()[:3]) or "—"
        if r["status"] != "ok":
            print("| %s | %s | %s | | | | | | %s | %s |" % (
                r["strategy"], system, r["status"],
                f(r.get("command_wall_seconds"), ".1f"), load))
            continue
        gb = str(r["global_batch"])
        if r["strategy"] == ASYNC:
            # Asynchronous: every push is a step of one worker's batch.
            gb += " (%s per step)" % r["result"].get("per_replica_batch", "?")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["strategy"], system, r["replicas"], gb, r["steps"],
            f(r["examples_per_sec"], ",.0f"),
            (f(r["ratio_to_pscluster_async"], ".2f") + "×") if base_eps else "—",
            f(r["eval_accuracy"], ".4f"), f(r["command_wall_seconds"], ".1f"), load))
    busy = [r["strategy"] for r in rows if r.get("cpu_busy_pct_before", 0.0) > 20.0]
    print("\nCPU busy (%% of all %d cores, 2 s before each run): %s" % (
        os.cpu_count(), ", ".join("%s %.0f%%" % (r["strategy"], r["cpu_busy_pct_before"])
                                  for r in rows if "cpu_busy_pct_before" in r)))
    if busy:
        print("WARNING: other work kept the CPUs busy before %s; those figures are skewed, "
              "rerun on an idle machine." % ", ".join(busy))
    for r in rows:
        if r["status"] == "failed":
            print("\n%s failed (rc %s): %s" % (r["strategy"], r.get("rc"),
                                               (r.get("error") or "").strip()[-600:]))

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    doc = {
        "benchmark": "strategies",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "nproc": os.cpu_count(), "machine": platform.machine(),
        "versions": versions(a.psctl), "pscluster_commit": git_commit(root),
        "epochs": a.epochs, "ps": a.ps, "workers": a.workers, "tf_workers": a.tf_workers,
        "job": "examples/fashion_mnist_mlp.yaml (epochs, strategy and batch rewritten)",
        "baseline": ASYNC,
        "rows": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out_json)), exist_ok=True)
    tmp = a.out_json + ".tmp"
    with open(tmp, "w") as out:
        json.dump(doc, out, indent=2)
        out.write("\n")
    os.replace(tmp, a.out_json)
    print("\nwrote %s" % a.out_json)
    return 0 if all(r["status"] in ("ok", "not available") or r["status"].startswith("skipped")
                    or r["status"].startswith("not available") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
