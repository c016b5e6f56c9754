#!/usr/bin/env python3
"""Tables and curves of bench/scale.sh (issue 25).

Reads the run's work directory (each scale_bench mode's JSON, markdown table
and load; startup.tsv from the psctl local runs) and writes into --out_dir:
  <date>-scale.md    the must-show table at 8, 64, 256 and 1,024 workers, the
                     two targets met or not, then every mode's full table;
  <date>-scale.json  the same figures, machine-readable;
  scale-dispatch.png, scale-ps-connections.png, scale-push-pull.png,
  scale-startup.png  the curves (when matplotlib imports; else none, said so).
"""
import argparse
import json
import os
import sys

TABLE_WORKERS = (8, 64, 256, 1024)
TARGET_RATIO = 0.80          # dispatch rate at 256 workers vs at 8
TARGET_KIB_PER_CONN = 64.0   # PS RSS per idle connection


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"scale_plots: {path}: {e}", file=sys.stderr)
        return None


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def read_startup(path):
    rows = []
    for line in read_text(path).splitlines():
        n, up, step, done, rc = line.split("\t")
        rows.append({"workers": int(n), "cluster_up_s": float(up), "first_step_s": float(step),
                     "succeeded_s": float(done), "psctl_exit": int(rc)})
    return rows


def fmt(x, spec=".0f"):
    return "-" if x is None else format(x, spec)


def idle_kib_per_connection(ps):
    """KiB per data-plane client: slope from 0 clients to the largest step
    whose pulls all succeeded (past the cap, clients hold no connection)."""
    if not ps:
        return None, None
    for series in ps["series"]:
        if series["series"] != "data_plane":
            continue
        steps = series["steps"]
        ok = [s for s in steps if s["failed_pulls"] == 0 and s["clients"] > steps[0]["clients"]]
        if not ok:
            return None, None
        last = ok[-1]
        added = last["clients"] - steps[0]["clients"]
        return (last["rss_bytes"] - steps[0]["rss_bytes"]) / 1024.0 / added, last["clients"]
    return None, None


def plots(out_dir, dispatch, ps, push_pull, startup):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (apt-get install python3-matplotlib): no plots"
    made = []
    if dispatch:
        pts = dispatch["points"]
        w = [p["workers"] for p in pts]
        fig, ax = plt.subplots(2, 3, figsize=(15, 8))
        panels = [
            ("closures/s", [("closures_per_sec", "closures/s")]),
            ("coordinator CPU us per closure", [("coordinator_cpu_us_per_closure", "coordinator"),
                                                ("worker_cpu_us_per_closure", "workers (child)")]),
            ("closure latency ms", [("p50_ms", "p50"), ("p99_ms", "p99")]),
            ("health-check RPCs/s", [("health_rpc_per_sec", "RPCs (both pollers)"),
                                     ("checks_without_rpc_per_sec",
                                      "checks answered without an RPC")]),
            ("health checks' share of coordinator CPU", [("health_cpu_share", "share")]),
            ("coordinator threads", [("coordinator_threads", "threads")]),
        ]
        for a, (title, series) in zip(ax.flat, panels):
            for key, label in series:
                a.plot(w, [p[key] for p in pts], marker="o", label=label)
            a.set_xscale("log", base=2)
            a.set_xlabel("workers")
            a.set_title(title)
            a.grid(True, alpha=0.3)
            if len(series) > 1:
                a.legend()
        fig.suptitle(f"dispatch (NOOP closures), {dispatch['date']}, load {dispatch['load']}")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "scale-dispatch.png"), dpi=80)
        made.append("scale-dispatch.png")
    if ps:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        for series in ps["series"]:
            c = [s["clients"] for s in series["steps"]]
            ax[0].plot(c, [s["rss_bytes"] / 2**20 for s in series["steps"]], marker="o",
                       label=series["series"])
            ax[1].plot(c, [s["threads"] for s in series["steps"]], marker="o",
                       label=series["series"])
        for a, t in zip(ax, ("ps_server RSS MiB", "ps_server threads")):
            a.set_xlabel("idle clients")
            a.set_title(t)
            a.grid(True, alpha=0.3)
            a.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "scale-ps-connections.png"), dpi=80)
        made.append("scale-ps-connections.png")
    if push_pull:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        by_ps = {}
        for p in push_pull["points"]:
            if "error" in p:  # a shape that failed: in the table, not on the curve
                continue
            by_ps.setdefault(p["ps"], []).append(p)
        for n_ps, pts in sorted(by_ps.items()):
            w = [p["workers"] for p in pts]
            ax[0].plot(w, [p["p50_ms"] for p in pts], marker="o", label=f"{n_ps} PS")
            ax[1].plot(w, [p["p99_ms"] for p in pts], marker="o", label=f"{n_ps} PS")
        for a, t in zip(ax, ("push+pull p50 ms", "push+pull p99 ms")):
            a.set_xscale("log", base=2)
            a.set_xlabel("concurrent workers")
            a.set_title(t)
            a.grid(True, alpha=0.3)
            a.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "scale-push-pull.png"), dpi=80)
        made.append("scale-push-pull.png")
    if startup:
        fig, a = plt.subplots(figsize=(6, 4))
        w = [r["workers"] for r in startup]
        for key, label in (("cluster_up_s", "cluster up"), ("first_step_s", "first step done"),
                           ("succeeded_s", "job SUCCEEDED")):
            a.plot(w, [r[key] for r in startup], marker="o", label=label)
        a.set_xscale("log", base=2)
        a.set_xlabel("worker processes (1 PS)")
        a.set_ylabel("seconds from psctl local")
        a.grid(True, alpha=0.3)
        a.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "scale-startup.png"), dpi=80)
        made.append("scale-startup.png")
    return "plots: " + ", ".join(made) if made else "no data to plot"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--machine", default="")
    ap.add_argument("--quick", default="0")
    args = ap.parse_args()
    w = args.work
    dispatch = read_json(os.path.join(w, "dispatch.json"))
    ps = read_json(os.path.join(w, "ps_connections.json"))
    push_pull = read_json(os.path.join(w, "push_pull.json"))
    startup = read_startup(os.path.join(w, "startup.tsv"))
    os.makedirs(args.out_dir, exist_ok=True)
    plot_line = plots(args.out_dir, dispatch, ps, push_pull, startup)

    md = [f"# Scale harness, {args.date}", "",
          f"{args.machine}; bench/scale.sh{' --quick' if args.quick == '1' else ''}. The machine is "
          "shared: absolute figures are noisy, compare ratios within the run. Load (1/5/15 min) "
          "before and after each mode is listed with its table.", ""]
    result = {"date": args.date, "machine": args.machine, "dispatch": dispatch,
              "ps_connections": ps, "push_pull": push_pull, "startup": startup, "targets": {}}
    by_w = {p["workers"]: p for p in dispatch["points"]} if dispatch else {}
    md += ["## At 8, 64, 256 and 1,024 workers", "",
           "| workers | closures/s | vs 8 workers | coordinator CPU us/closure | p50 ms | p99 ms "
           "| health-check RPC/s (both pollers, one liveness) | coordinator threads |",
           "|---|---|---|---|---|---|---|---|"]
    base = by_w.get(8, {}).get("closures_per_sec")
    for n in TABLE_WORKERS:
        p = by_w.get(n)
        if p is None:
            md.append(f"| {n} | not measured | | | | | | |")
            continue
        ratio = p["closures_per_sec"] / base if base else None
        md.append(f"| {n} | {p['closures_per_sec']:.0f} | {fmt(ratio, '.2f')} | "
                  f"{p['coordinator_cpu_us_per_closure']:.1f} | {p['p50_ms']:.2f} | "
                  f"{p['p99_ms']:.2f} | {p['health_rpc_per_sec']:.0f} "
                  f"| {p['coordinator_threads']} |")
    md.append("")
    ratio = by_w[256]["closures_per_sec"] / base if base and 256 in by_w else None
    kib, at = idle_kib_per_connection(ps)
    result["targets"] = {
        "dispatch_256_vs_8": {"measured": ratio, "target": TARGET_RATIO,
                              "met": ratio is not None and ratio >= TARGET_RATIO},
        "ps_kib_per_idle_connection": {"measured": kib, "at_clients": at,
                                       "target": TARGET_KIB_PER_CONN,
                                       "met": kib is not None and kib <= TARGET_KIB_PER_CONN},
    }
    md += ["## Targets", "",
           f"- dispatch rate at 256 workers >= {TARGET_RATIO:.0%} of that at 8: "
           + ("not measured" if ratio is None else
              f"{ratio:.2f} — {'met' if ratio >= TARGET_RATIO else 'NOT met'}"),
           f"- ps_server RSS per idle data-plane client <= {TARGET_KIB_PER_CONN:.0f} KiB: "
           + ("not measured" if kib is None else
              f"{kib:.1f} KiB (0 -> {at} clients, one gRPC channel + one data-plane connection "
              f"each) — {'met' if kib <= TARGET_KIB_PER_CONN else 'NOT met'}"),
           "", plot_line, ""]
    for name, title in (("dispatch", "Dispatch"), ("ps_connections", "PS idle connections"),
                        ("push_pull", "Push+pull latency")):
        loads = read_text(os.path.join(w, f"{name}.load")).splitlines()
        md += [f"## {title}", "", f"load before / after: {' / '.join(loads)}", "",
               read_text(os.path.join(w, f"{name}.md")) or "(failed: no table)", ""]
    loads = read_text(os.path.join(w, "startup.load")).splitlines()
    md += ["## Start-up (psctl local, 1 PS, a job of one closure per worker)", "",
           f"load before / after: {' / '.join(loads)}", "",
           "| workers | cluster up s | first step done s | SUCCEEDED s | psctl exit |",
           "|---|---|---|---|---|"]
    for r in startup:
        md.append(f"| {r['workers']} | {r['cluster_up_s']:.2f} | {r['first_step_s']:.2f} | "
                  f"{r['succeeded_s']:.2f} | {r['psctl_exit']} |")
    md.append("")
    with open(os.path.join(args.out_dir, f"{args.date}-scale.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(args.out_dir, f"{args.date}-scale.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("\n".join(md))
    return 0 if dispatch and ps and push_pull else 1


if __name__ == "__main__":
    sys.exit(main())
