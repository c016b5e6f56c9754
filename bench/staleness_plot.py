#!/usr/bin/env python3
"""Table and plot of bench/staleness_sweep.sh: eval accuracy against worker
count per variant (async, ssp, lr, ssp_lr), with the measured staleness and
the load. Writes OUT.json, OUT.md and OUT.png. Several --runs files (sweeps
of worker subsets) are merged; a later row of the same (workers, variant)
replaces an earlier one."""
import argparse
import datetime
import json
import os

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # tables only (apt-get install python3-matplotlib for the PNG)
    plt = None

LABELS = {
    "async": "async (unbounded)",
    "ssp": "bounded staleness (max_staleness: {b})",
    "lr": "staleness_lr: inverse (unbounded)",
    "ssp_lr": "max_staleness: {b} + staleness_lr: inverse",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ps", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--train_limit", type=int, default=20000)
    ap.add_argument("--ssp_bound", type=int, default=1)
    a = ap.parse_args()
    rows = {}
    for path in a.runs:
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                rows[(r["workers"], r["variant"])] = r
    runs = [rows[k] for k in sorted(rows, key=lambda k: (k[0], list(LABELS).index(k[1])))]
    for r in runs:  # a run that failed measured nothing
        if r.get("state") != "SUCCEEDED":
            r["eval_accuracy"] = None
    base = next((r["eval_accuracy"] for r in runs
                 if r["workers"] == 2 and r["variant"] == "async" and r.get("eval_accuracy")), None)
    meta = {
        "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "nproc": os.cpu_count(),
        "ps": a.ps,
        "epochs": a.epochs,
        "train_examples": a.train_limit,
        "ssp_bound": a.ssp_bound,
        "job": "examples/fashion_mnist_mlp.yaml (784-256-10 MLP, adam 0.001, batch 64 per "
               "worker, 20 steps a closure, 1 closure per worker)",
        "baseline_2_worker_async_accuracy": base,
        "runs": runs,
    }
    with open(a.out + ".json", "w") as f:
        json.dump(meta, f, indent=2)

    variants = [v for v in LABELS if any(r["variant"] == v for r in runs)]
    workers = sorted({r["workers"] for r in runs})
    lines = [
        "# Accuracy against worker count, with and without bounded staleness",
        "",
        f"`bench/staleness_sweep.sh`, {meta['date']}, {meta['nproc']} cores (shared with other "
        f"engineers' builds and tests), {a.ps} PS. Fashion-MNIST MLP of "
        f"`examples/fashion_mnist_mlp.yaml`, {a.epochs} epochs of the same {a.train_limit} "
        "training examples in every run; eval accuracy on the 10,000 test examples. Closure "
        "staleness: earlier closures unfinished when a closure starts (max over the job); push "
        "staleness: pushes a PS applied between a step's pull and its push (max). "
        "Load: /proc/loadavg (1, 5, 15 min) before the run.",
        "",
        "| workers | variant | accuracy | vs 2-worker async | steps | applied per PS | "
        "closure staleness | push staleness | wall s | load before |",
        "|---:|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in runs:
        acc = r.get("eval_accuracy")
        delta = f"{100 * (acc - base) / base:+.1f} %" if acc is not None and base else "-"
        lines.append("| {w} | {v} | {acc} | {d} | {s} | {ap} | {cs} | {ps} | {t:.0f} | {l} |".format(
            w=r["workers"], v=r["variant"] if r.get("state") == "SUCCEEDED" else
            f"{r['variant']} ({r.get('state') or 'rc ' + str(r['rc'])})",
            acc=f"{acc:.4f}" if acc is not None else "-", d=delta, s=r.get("steps"),
            ap=r.get("ps_applied_steps"), cs=r.get("max_closure_staleness"),
            ps=r.get("max_push_staleness"), t=r["wall_seconds"],
            l=" ".join(r["loadavg_before"].split()[:3])))
    lines += ["", "Variants: " + "; ".join(
        f"`{v}` = {LABELS[v].format(b=a.ssp_bound)}" for v in variants) + "."]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")

    print("\n".join(lines))
    if plt is None:
        print("staleness_plot: matplotlib is missing: no PNG")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for v in variants:
        pts = sorted((r["workers"], r["eval_accuracy"]) for r in runs
                     if r["variant"] == v and r.get("eval_accuracy") is not None)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    label=LABELS[v].format(b=a.ssp_bound))
    if base:
        ax.axhspan(base * 0.99, base * 1.01, color="grey", alpha=0.2,
                   label="2-worker async accuracy ±1 %")
    ax.set_xscale("log", base=2)
    ax.set_xticks(workers)
    ax.set_xticklabels([str(w) for w in workers])
    ax.set_xlabel("workers")
    ax.set_ylabel("eval accuracy after %d epochs" % a.epochs)
    ax.set_title("Fashion-MNIST MLP, %d examples x %d epochs, %d PS" %
                 (a.train_limit, a.epochs, a.ps))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out + ".png", dpi=110)


if __name__ == "__main__":
    main()
