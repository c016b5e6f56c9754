#!/usr/bin/env python3
"""MovieLens CTR (examples/movielens_ctr.yaml's model) in PyTorch, its
embeddings on 2 PS, trained by 2 Python workers through a ClusterCoordinator.

Label: rating >= 4. Features: user (a [672, 16] table), movie (16), genres
(8, mean of a row's genres) and release decade (4), concatenated into an MLP
128 relu -> 64 relu -> 1 with sigmoid cross-entropy; Adam 0.001 on the PS,
batch 256, 20 steps per closure, 3 epochs, MinSizePartitioner(16 KiB, 2).
The holdout is the YAML job's: row r is in it when XXH3-64(r as 8 LE bytes,
seed 7) < 0.2 * 2^64 (worker/core/features.cc InHoldout).

Differences from the YAML job, which the C++ core cannot do yet: the movie,
genre and decade tables are dense variables over vocabularies this program
builds from the CSV (the YAML job uses hash tables), so ids never collide.

    python3 examples/python/movielens_ctr_torch.py [--epochs 3]
"""

import argparse
import csv
import struct
import sys
import time

import numpy as np

import pscluster

CSV = "data/movielens/movielens.csv"


def load(path):
    """Every rating: ints and vocab indices, the label, and the holdout mask."""
    import xxhash
    users, movies, years, genres, labels = [], [], [], [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            users.append(int(row["userId"]))
            movies.append(int(row["movieId"]))
            years.append(int(row["year"]) if row["year"] not in ("", "NA") else -1)
            genres.append(row["genres"].split("|"))
            labels.append(1.0 if float(row["rating"]) >= 4.0 else 0.0)
    n = len(users)
    bound = int(0.2 * 2 ** 64)
    holdout = np.array([xxhash.xxh3_64_intdigest(struct.pack("<Q", r), seed=7) < bound
                        for r in range(n)])
    movie_vocab = {m: i for i, m in enumerate(sorted(set(movies)))}
    genre_vocab = {g: i for i, g in enumerate(sorted({g for gs in genres for g in gs}))}
    decades = sorted({y // 10 for y in years if y >= 0})
    decade_vocab = {d: i + 1 for i, d in enumerate(decades)}  # 0: unknown year
    max_genres = max(len(gs) for gs in genres)
    genre_ids = np.zeros((n, max_genres), np.int64)
    genre_mask = np.zeros((n, max_genres), np.float32)
    for r, gs in enumerate(genres):
        for k, g in enumerate(gs):
            genre_ids[r, k] = genre_vocab[g]
            genre_mask[r, k] = 1.0
    return {
        "user": np.array(users, np.int64),
        "movie": np.array([movie_vocab[m] for m in movies], np.int64),
        "decade": np.array([decade_vocab.get(y // 10, 0) if y >= 0 else 0 for y in years],
                           np.int64),
        "genre_ids": genre_ids, "genre_mask": genre_mask,
        "label": np.array(labels, np.float32), "holdout": holdout,
        "sizes": (len(movie_vocab), len(genre_vocab), len(decades) + 1),
    }


def auc(labels, scores):
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    # Ties share their mean rank.
    s = scores[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        if j > i:
            ranks[order[i:j + 1]] = (i + j + 2) / 2.0
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps_per_closure", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--csv", default=CSV)
    args = parser.parse_args()

    data = load(args.csv)
    n_movies, n_genres, n_decades = data["sizes"]
    train_rows = np.flatnonzero(~data["holdout"])
    test_rows = np.flatnonzero(data["holdout"])

    cluster = pscluster.Cluster.local(ps=2, workers=2, worker="python", start_timeout=60)
    strategy = pscluster.ParameterServerStrategy(
        cluster, variable_partitioner=pscluster.partitioners.MinSizePartitioner(16384, 2),
        optimizer=pscluster.optimizers.Adam(0.001))
    coordinator = pscluster.ClusterCoordinator(strategy)
    init = pscluster.initializers
    with strategy.scope():
        user = pscluster.Embedding(672, 16, init.RandomUniform(seed=args.seed), name="user")
        movie = pscluster.Embedding(n_movies, 16, init.RandomUniform(seed=args.seed + 1),
                                    name="movie")
        genre = pscluster.Variable(shape=(n_genres, 8), name="genres",
                                   initializer=init.RandomUniform(seed=args.seed + 2))
        decade = pscluster.Variable(shape=(n_decades, 4), name="decade",
                                    initializer=init.RandomUniform(seed=args.seed + 3))
        dense = []
        for i, (fan_in, units) in enumerate([(44, 128), (128, 64), (64, 1)]):
            dense.append(pscluster.Variable(shape=(fan_in, units), name=f"dense_{i}/kernel",
                                            initializer=init.GlorotUniform(args.seed + 10 + i)))
            dense.append(pscluster.Variable(shape=(units,), name=f"dense_{i}/bias"))
    dense_vars = [genre, decade] + dense
    csv_path = args.csv

    def dataset_fn():
        import itertools
        return itertools.repeat(load(csv_path))

    per_worker = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def forward(d, rows, push):
        import torch
        from pscluster import torch_bridge
        params = torch_bridge.read(dense_vars, requires_grad=push)
        g, dec, k0, b0, k1, b1, k2, b2 = params
        u = torch_bridge.lookup(user, d["user"][rows], requires_grad=push)
        m = torch_bridge.lookup(movie, d["movie"][rows], requires_grad=push)
        mask = torch.from_numpy(d["genre_mask"][rows])
        ge = (g[torch.from_numpy(d["genre_ids"][rows])] * mask[..., None]).sum(1) / \
            mask.sum(1, keepdim=True)
        de = dec[torch.from_numpy(d["decade"][rows])]
        h = torch.cat([u, m, ge, de], dim=1)
        h = torch.relu(h @ k0 + b0)
        h = torch.relu(h @ k1 + b1)
        logits = (h @ k2 + b2)[:, 0]
        return logits, params, u, m

    def train_step(it, epoch, begin, end, batch, seed):
        import torch
        from pscluster import torch_bridge
        d = next(it)
        train = np.flatnonzero(~d["holdout"])
        order = train[np.random.default_rng(seed + epoch).permutation(len(train))][begin:end]
        loss_sum = 0.0
        for s in range(0, len(order), batch):
            rows = order[s:s + batch]
            logits, params, u, m = forward(d, rows, push=True)
            y = torch.from_numpy(d["label"][rows])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
            loss.backward()
            torch_bridge.apply_gradients(list(zip(params, dense_vars)) + [(u, user), (m, movie)])
            loss_sum += float(loss) * len(rows)
        return loss_sum, len(order)

    def predict(it, begin, end):
        import torch
        d = next(it)
        rows = np.flatnonzero(d["holdout"])[begin:end]
        with torch.no_grad():
            logits, _, _, _ = forward(d, rows, push=False)
        return torch.sigmoid(logits).numpy()

    per_closure = args.batch * args.steps_per_closure
    start = time.monotonic()
    for epoch in range(args.epochs):
        values = [coordinator.schedule(train_step, args=(
            per_worker, epoch, b, min(b + per_closure, len(train_rows)), args.batch, args.seed))
            for b in range(0, len(train_rows), per_closure)]
        coordinator.join()
        loss_sum, n = np.sum(coordinator.fetch(values), axis=0)
        preds = np.concatenate(coordinator.fetch(
            [coordinator.schedule(predict, args=(per_worker, b, b + 5000))
             for b in range(0, len(test_rows), 5000)]))
        labels = data["label"][test_rows]
        logloss = -np.mean(labels * np.log(preds + 1e-7) + (1 - labels) * np.log(1 - preds + 1e-7))
        print(f"epoch {epoch + 1}: train loss {loss_sum / n:.4f}; holdout AUC "
              f"{auc(labels, preds):.4f} logloss {logloss:.4f} "
              f"({time.monotonic() - start:.1f} s)", flush=True)
    print(f"steps {coordinator.steps}; PS applied_steps "
          f"{[s['applied_steps'] for s in coordinator.ps_stats()]}")
    strategy.close()
    cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
