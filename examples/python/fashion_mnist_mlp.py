#!/usr/bin/env python3
"""The Fashion-MNIST MLP of examples/fashion_mnist_mlp.yaml as a pscluster
ClusterCoordinator program in NumPy: 2 PS x 2 Python workers.

Same model (784 -> 256 relu -> 10, softmax cross-entropy; glorot_uniform
kernels, zero biases), optimizer (Adam 0.001 on the PS), batch (64),
closure size (20 steps) and epochs (5) as the YAML job, reading the same
idx files from /usr/share/datasets. Each closure pulls the four variables,
runs forward and backward in NumPy and pushes the four gradients: one step
per batch, applied once even when a closure is retried.

    python3 examples/python/fashion_mnist_mlp.py [--epochs 5] [--workers 2] [--json OUT]

--json OUT writes the run's figures (examples/s over the epochs' schedule-to-
join time, after every worker loaded the data; eval accuracy, steps and every
PS's applied steps) for bench/python_api_bench.sh.
"""

import argparse
import gzip
import itertools
import json
import struct
import sys
import time

import numpy as np

import pscluster

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(prefix):
    """(x float32 [n, 784] in [0, 1], y int64 [n]) of "train" or "t10k"."""
    x = read_idx(f"{DATA}/{prefix}-images-idx3-ubyte.gz").reshape(-1, 784)
    y = read_idx(f"{DATA}/{prefix}-labels-idx1-ubyte.gz")
    return x.astype(np.float32) / 255.0, y.astype(np.int64)


def dataset_fn():
    """Runs once on each worker (create_per_worker_dataset): the worker reads
    the idx files itself, and every next() gives the same arrays."""
    return itertools.repeat((load("train"), load("t10k")))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps_per_closure", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tf_config", action="store_true",
                        help="use the servers of TF_CONFIG instead of starting local ones")
    parser.add_argument("--json", help="write the run's figures to this file")
    args = parser.parse_args()

    if args.tf_config:
        cluster = pscluster.Cluster.from_tf_config()
    else:
        cluster = pscluster.Cluster.local(ps=args.ps, workers=args.workers, worker="python",
                                          start_timeout=60)
    strategy = pscluster.ParameterServerStrategy(
        cluster, optimizer=pscluster.optimizers.Adam(args.learning_rate))
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        k0 = pscluster.Variable(shape=(784, args.hidden), name="dense_0/kernel",
                                initializer=pscluster.initializers.GlorotUniform(args.seed))
        b0 = pscluster.Variable(shape=(args.hidden,), name="dense_0/bias", initializer="zeros")
        k1 = pscluster.Variable(shape=(args.hidden, 10), name="dense_1/kernel",
                                initializer=pscluster.initializers.GlorotUniform(args.seed + 1))
        b1 = pscluster.Variable(shape=(10,), name="dense_1/bias", initializer="zeros")
    variables = [k0, b0, k1, b1]

    def forward(params, x, y):
        w0, c0, w1, c1 = params
        h_pre = x @ w0 + c0
        h = np.maximum(h_pre, 0)
        logits = h @ w1 + c1
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.log(p[np.arange(len(y)), y] + 1e-12)
        return h_pre, h, p, loss

    data = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def train_step(data, epoch, begin, end, batch, seed):
        """Examples [begin, end) of epoch `epoch`'s shuffle (seeded, so a
        retry reads the same batches): one read and one push per batch, each
        push bringing the next read's values back in its round trip."""
        (x_all, y_all), _ = next(data)
        order = np.random.default_rng(seed + epoch).permutation(len(y_all))[begin:end]
        loss_sum, correct = 0.0, 0
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            x, y = x_all[idx], y_all[idx]
            w0, c0, w1, c1 = pscluster.read(variables)
            h_pre, h, p, loss = forward((w0, c0, w1, c1), x, y)
            loss_sum += float(loss.sum())
            correct += int((p.argmax(axis=1) == y).sum())
            d = p.copy()
            d[np.arange(len(y)), y] -= 1
            d /= len(y)  # mean loss over the batch
            g_w1, g_c1 = h.T @ d, d.sum(axis=0)
            dh = (d @ w1.T) * (h_pre > 0)
            g_w0, g_c0 = x.T @ dh, dh.sum(axis=0)
            pscluster.apply_gradients(zip([g_w0, g_c0, g_w1, g_c1], variables))
        return loss_sum, len(order), correct

    def evaluate(data, begin, end):
        _, (x_all, y_all) = next(data)
        x, y = x_all[begin:end], y_all[begin:end]
        _, _, p, loss = forward(pscluster.read(variables), x, y)
        return float(loss.sum()), len(y), int((p.argmax(axis=1) == y).sum())

    def load_data(data):
        next(data)  # a worker's first next() runs dataset_fn there (reads the idx files)

    # Every worker loads the data before the timed epochs, as a YAML job's
    # workers do at setup and bench/compare_tf's TF program in its warm-up:
    # two closures per worker, the first two reaching both idle workers.
    for _ in range(2 * args.workers):
        coordinator.schedule(load_data, args=(data,))
    coordinator.join()

    n_train = 60000
    per_closure = args.batch * args.steps_per_closure
    start = time.monotonic()
    train_seconds = 0.0
    for epoch in range(args.epochs):
        epoch_start = time.monotonic()
        values = [coordinator.schedule(train_step, args=(data, epoch, b, min(b + per_closure, n_train),
                                                        args.batch, args.seed))
                  for b in range(0, n_train, per_closure)]
        coordinator.join()
        train_seconds += time.monotonic() - epoch_start
        totals = np.sum(coordinator.fetch(values), axis=0)
        print(f"epoch {epoch + 1}: train loss {totals[0] / totals[1]:.4f} "
              f"accuracy {totals[2] / totals[1]:.4f} ({time.monotonic() - start:.1f} s)",
              flush=True)
    evals = [coordinator.schedule(evaluate, args=(data, b, b + 2000)) for b in range(0, 10000, 2000)]
    totals = np.sum(coordinator.fetch(evals), axis=0)
    accuracy = totals[2] / totals[1]
    print(f"eval loss {totals[0] / totals[1]:.4f} accuracy {accuracy:.4f}")
    applied = [s["applied_steps"] for s in coordinator.ps_stats()]
    print(f"steps {coordinator.steps}; PS applied_steps {applied}; "
          f"wall {time.monotonic() - start:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"examples": n_train * args.epochs, "train_seconds": train_seconds,
                       "examples_per_sec": n_train * args.epochs / train_seconds,
                       "eval_accuracy": float(accuracy), "steps": coordinator.steps,
                       "applied_steps": applied, "wall_seconds": time.monotonic() - start}, f)
    strategy.close()
    cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
