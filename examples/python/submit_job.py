#!/usr/bin/env python3
"""Trains a YAML job on a local pscluster from Python.

Starts a local cluster (2 PS, 2 workers and a coordinator, child processes
of this script), submits the job, prints its progress, and prints the final
accuracy; the cluster stops when the script ends.

    ./setup.sh                                     # once: builds and installs pscluster
    python3 examples/python/submit_job.py          # examples/fashion_mnist_mlp.yaml
    python3 examples/python/submit_job.py JOB.yaml --ps 1 --workers 2

Against a running coordinator instead, use pscluster.Client alone:
    client = pscluster.Client("HOST:PORT", token=TOKEN, tls=pscluster.TLS(cert, key, ca))
"""

import argparse
import os
import sys

import pscluster

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", nargs="?",
                        default=os.path.join(HERE, "..", "fashion_mnist_mlp.yaml"))
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600, help="seconds")
    args = parser.parse_args()

    with pscluster.Cluster.local(ps=args.ps, workers=args.workers) as cluster:
        print(f"cluster up: coordinator {cluster.address}, logs in {cluster.run_dir}")
        client = pscluster.Client(cluster.address, token=cluster.token, tls=cluster.tls)
        try:
            job_id = client.submit(args.job)
        except pscluster.Error as e:
            print(f"submit failed ({e.code}): {e.message}", file=sys.stderr)
            return 2
        print(f"submitted {job_id}")

        seen_epochs = set()

        def progress(status):
            for epoch in status.get("epochs", []):
                if epoch["epoch"] not in seen_epochs:
                    seen_epochs.add(epoch["epoch"])
                    print(f"  epoch {epoch['epoch']}: eval accuracy {epoch['eval_accuracy']:.4f}")

        final = client.watch(job_id, timeout=args.timeout, on_update=progress)
        if final["state"] != "SUCCEEDED":
            print(f"job {final['state']}: {final.get('error', '')}", file=sys.stderr)
            for event in client.logs(job_id)[-5:]:
                print(f"  {event['kind']}: {event['message']}", file=sys.stderr)
            return 1
        print(f"{final['job']}: eval accuracy {final['eval_accuracy']:.4f}, "
              f"{final['examples_per_sec']:.0f} examples/s, {final['wall_seconds']:.1f} s")
        return 0


if __name__ == "__main__":
    sys.exit(main())
