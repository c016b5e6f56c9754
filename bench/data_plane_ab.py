#!/usr/bin/env python3
"""A/B of two data_plane_bench binaries (e.g. a lever on and off), interleaved.

Runs binary A and binary B alternately, one repeat each (--repeats=1), for
--rounds rounds, with the same flags; every run also measures raw TCP (and
ps-lite with --pslite_bench), so each round's ratios come from one process
run. Prints, per shape and size, the median over rounds of each binary's
pscluster GB/s, of B/A, and of each binary's pscluster/raw TCP and
pscluster/ps-lite fused; then each round's B/A, in order, to show the scatter.

  bench/data_plane_ab.py --a=/tmp/fastbuild/data_plane_bench \
      --b=/tmp/opt/data_plane_bench --rounds=5 -- --seconds_per_point=0.3 \
      --pslite_bench=bench/.pslite/pslite_bench
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def run(binary, flags, out):
    subprocess.run([binary, "--repeats=1", f"--output_json={out}"] + flags, check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        # Binaries from before null was written for unmeasured paths wrote nan.
        return json.loads(re.sub(r"\bnan\b", "NaN", f.read()))["points"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", required=True, help="data_plane_bench, baseline")
    parser.add_argument("--b", required=True, help="data_plane_bench, with the lever")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("flags", nargs="*", help="flags for both, after --")
    args = parser.parse_args()
    rows = {}  # (cluster, bytes) -> {"a": [...], "b": [...]} of point dicts
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in ("a", "b"):
                print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr)
                for p in run(getattr(args, name), args.flags, os.path.join(tmp, "out.json")):
                    rows.setdefault((p["cluster"], p["bytes"]), {"a": [], "b": []})[name].append(p)
    med = statistics.median
    print("| shape | size | A pscluster GB/s | B pscluster GB/s | B/A | A /raw TCP | B /raw TCP "
          "| A /ps-lite fused | B /ps-lite fused | B/A, each round |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (cluster, size), runs in rows.items():
        a = [p["pscluster_gbps"] for p in runs["a"]]
        b = [p["pscluster_gbps"] for p in runs["b"]]
        ratios = [y / x for x, y in zip(a, b)]
        ratio = med(ratios)

        def m(name, key):
            vals = [p.get(key, float("nan")) for p in runs[name]]
            return med(vals)

        label = f"{size // (1 << 20)} MiB" if size >= 1 << 20 else f"{size // 1024} KiB"
        print(f"| {cluster} | {label} | {med(a):.3f} | {med(b):.3f} | {ratio:.2f} | "
              f"{m('a', 'pscluster_over_raw_tcp'):.2f} | {m('b', 'pscluster_over_raw_tcp'):.2f} | "
              f"{m('a', 'pscluster_over_pslite_fused'):.2f} | "
              f"{m('b', 'pscluster_over_pslite_fused'):.2f} | "
              f"{' '.join(f'{x:.2f}' for x in ratios)} |")


if __name__ == "__main__":
    main()
