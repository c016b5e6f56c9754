#!/usr/bin/env python3
"""TensorFlow ParameterServerStrategy + ClusterCoordinator counterpart of
examples/movielens_ctr.yaml (MovieLens as a click-through-rate job), for
bench/compare_tf/run_ctr.sh.

  bench/compare_tf/.venv/bin/python bench/compare_tf/tf_ps_ctr.py train \\
      --ps 2 --workers 2 --epochs 3 [--json OUT.json] [--keep_logs]

Processes: as tf_ps_mlp.py, whose orchestration helpers this script imports
(free_ports, _die_with_parent, _pid_alive, Cluster, child_server). The
process you start is an orchestrator that never imports TensorFlow; it picks
free 127.0.0.1 ports, starts every PS and worker as its own child (a
tf.distribute.Server from TF_CONFIG, tf_ps_mlp.child_server), then the chief,
which builds ParameterServerStrategy + ClusterCoordinator, trains, evaluates
and writes a JSON result. Every child is stopped by pid at the end (SIGTERM,
then SIGKILL after 5 s), also on failure or Ctrl-C, and has PR_SET_PDEATHSIG.

Data: data/movielens/movielens.csv (header userId,movieId,rating,timestamp,
year,genres; 100,004 ratings), read on the chief with Python's csv module;
label = rating >= 4.0. Train/holdout split: pscluster's own rule, reproduced
exactly (worker/core/features.cc InHoldout): 0-based data row r (header not
counted) is in the holdout iff XXH3_64bits_withSeed(le64(r), seed 7) <
0.2 * 2^64. XXH3 of an 8-byte input is computed here in numpy (xxhash 0.8's
XXH3_len_4to8_64b; checked against the system's libxxhash.so.0 when it can
be loaded, see "split" in the result). 80% train (80k rows), 20% holdout.
A missing value (unquoted NA or empty, as pscluster's CsvReader: 7 rows have
year NA) gives the feature no id, i.e. a zero embedding.

Model (examples/movielens_ctr.yaml):
  user   : userId as the row of a fixed [672, 16] embedding (ids 1..671);
  movie  : movieId hashed, dim 16;
  genres : split at "|", values trimmed, each hashed, dim 8, mean combiner;
  decade : floor(year / 10) hashed, dim 4;
  concat (44) -> dense 128 relu -> 64 relu -> 1, sigmoid cross entropy
  (mean over the batch). Embeddings start U(-0.05, 0.05) (Keras' Embedding
  default, pscluster's too), kernels Glorot uniform, biases zero (stateless
  random, seed 7).
Hashed features: Keras' Hashing layer semantics without Keras
(tf.strings.to_hash_bucket_fast, i.e. FarmHash64 fingerprint of the value's
string form mod num_bins, as keras.layers.Hashing(num_bins) computes for
string and integer inputs), with fixed tables of --movie_bins (2^18),
--genre_bins (2^12) and --decade_bins (2^12) rows: TF's standard way to
serve an open vocabulary from a ParameterServerStrategy. pscluster uses
dynamic hash tables (a row per distinct id, created on first touch), so the
TF tables are mostly never-touched rows; the result counts the hash
collisions ("hashing": distinct values vs distinct buckets over the file).
Hashing is done once on the chief before training (as pscluster hashes ids
when it loads the CSV) and the id arrays are what the workers' datasets hold.

Variables: created under strategy.scope() with variable_partitioner =
tf.distribute.experimental.partitioners.MinSizePartitioner(
min_shard_bytes=16384, max_shards=2): every variable of more than 16 KiB
(the 4 tables, dense0 and dense1 kernels) is a ShardedVariable of 2 shards;
shards and the other variables are placed round-robin over the PS ("shards"
in the result). Lookups are tf.nn.embedding_lookup over a table's shards (TF's
"div" layout: contiguous row ranges) of the batch's unique ids.

Optimizer: Adam (lr 0.001, beta 0.9/0.999, epsilon 1e-7), one global step
counter for the bias correction, applied on the PS: dense variables (and
dense shards) with tf.raw_ops.ResourceApplyAdam (tf.keras' Adam kernel),
slots colocated with their (shard) variable; embedding shards with a lazy
sparse Adam (only the rows in the batch, their m and v updated, the same
update formula; TF has no sparse Adam kernel, so it is gather / unique /
segment-sum / scatter ops placed on the shard's PS). pscluster's Adam is lazy
on embedding rows too (ps/core/optimizer.h); tf.keras' own Adam would decay
every row's m and v on every step, i.e. touch all 2^18 movie rows.

Loop: per-replica batch 256; each coordinator.schedule runs a tf.function of
--steps_per_closure (20) steps in a tf.range loop over the per-worker
iterator (no return value); an epoch is ceil(train rows / 256) steps
(16 closures, the last one short), ended by coordinator.join(). Every worker
shuffles and repeats the whole training part (TF's PSS design, no
sharding). Warm-up (per-worker dataset and iterator, tracing: zero-step
closures) is not timed. examples/s = steps * 256 / wall time of the epoch
loop (first schedule to last join). Evaluation: AUC (exact, rank based with
ties averaged, numpy), logloss and accuracy (p >= 0.5) on the holdout, once,
after training, on the chief with the final variables (not timed).
"""

import argparse
import csv
import ctypes
import json
import os
import signal
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CSV = os.path.join(ROOT, "data", "movielens", "movielens.csv")
sys.path.insert(0, HERE)
# Orchestration helpers and the PS/worker server of the Fashion-MNIST script
# (it imports no TensorFlow at module level).
import tf_ps_mlp  # noqa: E402
from tf_ps_mlp import child_server  # noqa: E402

COLUMNS = ["userId", "movieId", "rating", "timestamp", "year", "genres"]
USER_VOCAB = 672
EMB_DIMS = {"user": 16, "movie": 16, "genres": 8, "decade": 4}


# --------------------------------------------------------------------------
# Orchestrator (no TensorFlow here)
# --------------------------------------------------------------------------

class CtrCluster(tf_ps_mlp.Cluster):
    """tf_ps_mlp's Cluster, but every child runs this script."""

    def spawn(self, name, task_type, index, extra_args):
        log = open(os.path.join(self.log_dir, name + ".log"), "w")
        cmd = [sys.executable, os.path.abspath(__file__), "_" + task_type,
               "--intra", str(self.threads[task_type][0]),
               "--inter", str(self.threads[task_type][1])] + extra_args
        p = subprocess.Popen(cmd, env=self._env(task_type, index), stdout=log,
                             stderr=subprocess.STDOUT, preexec_fn=tf_ps_mlp._die_with_parent)
        log.close()
        self.procs.append((name, p))
        return p


def run_experiment(num_ps, num_workers, chief_args, timeout_s, threads, keep_logs=False):
    """tf_ps_mlp.run_experiment with CtrCluster."""
    return tf_ps_mlp.run_experiment(num_ps, num_workers, chief_args, timeout_s, threads,
                                    keep_logs, cluster_cls=CtrCluster, name="tf_ps_ctr")


def main_train(a):
    chief_args = ["--epochs", str(a.epochs), "--batch", str(a.batch),
                  "--steps_per_closure", str(a.steps_per_closure), "--lr", str(a.lr),
                  "--seed", str(a.seed), "--csv", os.path.abspath(a.csv),
                  "--holdout_fraction", str(a.holdout_fraction),
                  "--split_seed", str(a.split_seed), "--movie_bins", str(a.movie_bins),
                  "--genre_bins", str(a.genre_bins), "--decade_bins", str(a.decade_bins)]
    threads = tf_ps_mlp.parse_threads(a)
    r = run_experiment(a.ps, a.workers, chief_args, a.timeout_s, threads, a.keep_logs)
    r.update({"system": "tensorflow", "job": "movielens-ctr", "ps": a.ps, "workers": a.workers,
              "threads": {k: {"intra_op": v[0], "inter_op": v[1]} for k, v in threads.items()}})
    print(json.dumps(r, indent=2))
    print("tf_ps_ctr: %.0f examples/s, eval AUC %.4f, logloss %.4f (%d steps, %.1f s training)"
          % (r["examples_per_sec"], r["eval_auc"], r["eval_loss"], r["steps"],
             r["train_seconds"]), file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)


# --------------------------------------------------------------------------
# Data: pscluster's split rule, CSV reading, AUC (numpy, no TensorFlow)
# --------------------------------------------------------------------------

# XXH3_kSecret[8:24] (xxhash.h), all that XXH3_len_4to8_64b reads.
_XXH3_SECRET_8_24 = bytes([0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
                           0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb])
_M64 = (1 << 64) - 1


def xxh3_64_le64(values, seed):
    """XXH3_64bits_withSeed(le64(v), 8, seed) for each int64 v (numpy uint64)."""
    import numpy as np
    seed &= _M64
    swapped = int.from_bytes((seed & 0xffffffff).to_bytes(4, "little"), "big")
    seed ^= (swapped << 32) & _M64
    bitflip = ((int.from_bytes(_XXH3_SECRET_8_24[:8], "little")
                ^ int.from_bytes(_XXH3_SECRET_8_24[8:], "little")) - seed) & _M64
    v = np.asarray(values, dtype=np.int64).astype(np.uint64)
    lo, hi = v & np.uint64(0xffffffff), v >> np.uint64(32)
    h = (hi + (lo << np.uint64(32))) ^ np.uint64(bitflip)

    def rotl(x, r):
        return (x << np.uint64(r)) | (x >> np.uint64(64 - r))
    prime_mx2 = np.uint64(0x9FB21C651E98DF25)
    h = h ^ rotl(h, 49) ^ rotl(h, 24)
    h = h * prime_mx2
    h = h ^ ((h >> np.uint64(35)) + np.uint64(8))
    h = h * prime_mx2
    return h ^ (h >> np.uint64(28))


def in_holdout(rows, fraction, seed):
    """pscluster's InHoldout(row, fraction, seed) for an array of rows."""
    import numpy as np
    if not fraction > 0:
        return np.zeros(len(rows), bool)
    if fraction >= 1:
        return np.ones(len(rows), bool)
    bound = np.uint64(int(np.ldexp(fraction, 64)))  # exact, < 2^64, truncated as in C++
    return xxh3_64_le64(rows, seed) < bound


def check_xxh3_against_libxxhash():
    """Compares xxh3_64_le64 with the C library, when one can be loaded."""
    import numpy as np
    try:
        lib = ctypes.CDLL("libxxhash.so.0")
    except OSError:
        return "not checked (no libxxhash.so.0)"
    f = lib.XXH3_64bits_withSeed
    f.restype = ctypes.c_uint64
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    rows = np.array([0, 1, 2, 7, 4096, 100003, (1 << 40) + 5, (1 << 63) - 1], np.int64)
    for seed in (0, 7, 11, 0xdeadbeefcafef00d):
        mine = [int(x) for x in xxh3_64_le64(rows, seed)]
        ref = [f(struct.pack("<q", int(r)), 8, seed) for r in rows]
        if mine != ref:
            raise RuntimeError("xxh3_64_le64 disagrees with libxxhash (seed %d)" % seed)
    return "matches libxxhash.so.0"


def _missing(s):
    # pscluster's CsvReader: an unquoted NA or an empty field is missing. The
    # csv module drops the quotes, so a quoted "NA" would count as missing
    # here too; no numeric or genres field of this file is quoted "NA".
    return s == "" or s == "NA"


def read_movielens(path):
    """Columns of the CSV as Python lists; checks the header."""
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        if header != COLUMNS:
            raise ValueError("%s: header %s, expected %s" % (path, header, COLUMNS))
        cols = {c: [] for c in COLUMNS}
        for rec in r:
            if len(rec) != len(COLUMNS):
                raise ValueError("%s: record %d has %d fields" % (path, r.line_num, len(rec)))
            for c, v in zip(COLUMNS, rec):
                cols[c].append(v)
    return cols


def auc_exact(labels, scores):
    """ROC AUC (Mann-Whitney, ties counted half), numpy only."""
    import numpy as np
    labels = np.asarray(labels).astype(bool)
    uniq, inv, counts = np.unique(scores, return_inverse=True, return_counts=True)
    del uniq
    ends = np.cumsum(counts)
    avg_rank = ends - (counts - 1) / 2.0  # 1-based average rank of each distinct score
    ranks = avg_rank[inv]
    pos = int(labels.sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


# --------------------------------------------------------------------------
# Chief (TensorFlow)
# --------------------------------------------------------------------------

def prepare_data(a, tf):
    """Reads, labels, splits and hashes the CSV. Returns (train, holdout, info)."""
    import numpy as np
    t0 = time.perf_counter()
    cols = read_movielens(a.csv)
    n = len(cols["userId"])
    user = np.array([int(x) for x in cols["userId"]], np.int64)
    if user.min() < 0 or user.max() >= USER_VOCAB:
        raise ValueError("userId outside [0, %d)" % USER_VOCAB)
    rating = np.array([float(x) for x in cols["rating"]], np.float64)
    label = (rating >= 4.0).astype(np.float32)

    def hash_strings(strings, bins):
        return tf.strings.to_hash_bucket_fast(tf.constant(strings, tf.string), bins).numpy()

    # movie: every row has one (int) movieId; Hashing hashes its decimal string.
    movie_str = [str(int(x)) for x in cols["movieId"]]
    movie = hash_strings(movie_str, a.movie_bins).astype(np.int32)
    # decade: floor(year / 10), hashed as a decimal string; -1 when year is missing.
    dec_vals = [None if _missing(y) else str(int(np.floor(int(y) / 10.0))) for y in cols["year"]]
    decade = np.full(n, -1, np.int32)
    present = [i for i, d in enumerate(dec_vals) if d is not None]
    decade[present] = hash_strings([dec_vals[i] for i in present], a.decade_bins)
    # genres: split at "|", trimmed, empty values skipped; padded with -1.
    gen_lists = [[] if _missing(g) else [p.strip() for p in g.split("|") if p.strip()]
                 for g in cols["genres"]]
    gmax = max(1, max(len(g) for g in gen_lists))
    flat = [v for g in gen_lists for v in g]
    flat_ids = hash_strings(flat, a.genre_bins) if flat else np.zeros(0, np.int64)
    genres = np.full((n, gmax), -1, np.int32)
    k = 0
    for i, g in enumerate(gen_lists):
        genres[i, :len(g)] = flat_ids[k:k + len(g)]
        k += len(g)

    def collisions(values, ids):
        return {"distinct_values": len(set(values)), "distinct_buckets": len(set(ids.tolist()))}
    hashing = {
        "how": "tf.strings.to_hash_bucket_fast(str(value), num_bins) (= keras.layers.Hashing)",
        "movie": dict(num_bins=a.movie_bins, **collisions(movie_str, movie)),
        "genres": dict(num_bins=a.genre_bins, **collisions(flat, flat_ids)),
        "decade": dict(num_bins=a.decade_bins,
                       **collisions([d for d in dec_vals if d is not None], decade[present])),
        "decade_missing_rows": n - len(present),
    }

    hold = in_holdout(np.arange(n, dtype=np.int64), a.holdout_fraction, a.split_seed)
    split = {"rule": "pscluster InHoldout: XXH3_64bits_withSeed(le64(row), seed) < "
                     "fraction * 2^64, row = 0-based data row",
             "holdout_fraction": a.holdout_fraction, "seed": a.split_seed,
             "xxh3_check": check_xxh3_against_libxxhash(),
             "rows": n, "train_rows": int((~hold).sum()), "holdout_rows": int(hold.sum()),
             "train_positive_rate": float(label[~hold].mean()),
             "holdout_positive_rate": float(label[hold].mean())}
    arrays = {"user": user.astype(np.int32), "movie": movie, "genres": genres,
              "decade": decade[:, None], "label": label}
    train = {k: v[~hold] for k, v in arrays.items()}
    holdout = {k: v[hold] for k, v in arrays.items()}
    info = {"hashing": hashing, "split": split, "genres_max_per_row": gmax,
            "data_prepare_seconds": time.perf_counter() - t0}
    return train, holdout, info


def chief_train(a, tf):
    import numpy as np
    # No TF op before the strategy connects to the cluster (as tf_ps_mlp.py).
    t0 = time.perf_counter()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=16384, max_shards=2)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    connect_s = time.perf_counter() - t0
    # Not timed: CSV, split, hashing (eager ops on the chief).
    train, holdout, info = prepare_data(a, tf)
    n_train = len(train["label"])

    seed_counter = [0]

    def uniform(shape, limit):
        seed_counter[0] += 1
        return tf.random.stateless_uniform(shape, seed=[a.seed, seed_counter[0]],
                                           minval=-limit, maxval=limit)

    def glorot(shape):
        return uniform(shape, float(np.sqrt(6.0 / (shape[0] + shape[1]))))

    def shards(v):
        # A ShardedVariable is not a tf.Variable; its shards are.
        return [v] if isinstance(v, tf.Variable) else list(v.variables)

    def value(v):
        s = shards(v)
        return s[0] if len(s) == 1 else tf.concat(s, axis=0)

    rows = {"user": USER_VOCAB, "movie": a.movie_bins, "genres": a.genre_bins,
            "decade": a.decade_bins}
    concat_dim = sum(EMB_DIMS.values())
    t0 = time.perf_counter()
    with strategy.scope():
        tables = {f: tf.Variable(uniform([rows[f], EMB_DIMS[f]], 0.05), name="embedding/" + f)
                  for f in ("user", "movie", "genres", "decade")}
        dims = [concat_dim, 128, 64, 1]
        kernels, biases = [], []
        for i in range(3):
            kernels.append(tf.Variable(glorot([dims[i], dims[i + 1]]), name="dense%d/kernel" % i))
            biases.append(tf.Variable(tf.zeros([dims[i + 1]]), name="dense%d/bias" % i))
        sparse_vars = [s for f in ("user", "movie", "genres", "decade") for s in shards(tables[f])]
        dense_vars = [s for v in kernels + biases for s in shards(v)]
        slots = []  # (m, v) of each shard of sparse_vars + dense_vars
        for s in sparse_vars + dense_vars:
            with strategy.extended.colocate_vars_with(s):
                base = s.name.split(":")[0]
                slots.append((tf.Variable(tf.zeros(s.shape, s.dtype), name=base + "/m"),
                              tf.Variable(tf.zeros(s.shape, s.dtype), name=base + "/v")))
        with strategy.extended.colocate_vars_with(dense_vars[0]):
            iterations = tf.Variable(0, dtype=tf.int64, name="iterations")
    create_s = time.perf_counter() - t0
    # (A ShardedVariable's own name is "ShardedVariable": name them here.)
    named = [("embedding/" + f, t) for f, t in tables.items()]
    named += [("dense%d/kernel" % i, k) for i, k in enumerate(kernels)]
    named += [("dense%d/bias" % i, b) for i, b in enumerate(biases)]
    shard_info = {name: [{"shape": s.shape.as_list(), "device": s.device} for s in shards(v)]
                  for name, v in named}
    all_vars = sparse_vars + dense_vars
    slots_colocated = all(m.device == s.device and v.device == s.device
                          for s, (m, v) in zip(all_vars, slots))

    lr = tf.constant(a.lr, tf.float32)
    beta1 = tf.constant(0.9, tf.float32)
    beta2 = tf.constant(0.999, tf.float32)
    eps = tf.constant(1e-7, tf.float32)
    batch = a.batch

    def dataset_fn(_input_context=None):
        ds = tf.data.Dataset.from_tensor_slices(train)
        ds = ds.shuffle(n_train, reshuffle_each_iteration=True).repeat()
        return ds.batch(batch, drop_remainder=True).prefetch(2)

    def lookup(table, ids):
        """Rows of `ids` (any shape) from `table`, one fetch per unique id."""
        flat = tf.reshape(ids, [-1])
        uniq, pos = tf.unique(flat)
        got = tf.nn.embedding_lookup(shards(table), uniq)  # "div": contiguous shards
        return tf.gather(got, pos)

    def pooled_mean(table, ids):
        """Mean of the rows of each row's ids >= 0 ([B, K] -> [B, dim]); 0 for none."""
        valid = ids >= 0
        b = tf.shape(ids)[0]
        row_of = tf.broadcast_to(tf.range(b)[:, None], tf.shape(ids))
        emb = lookup(table, tf.boolean_mask(ids, valid))
        total = tf.math.unsorted_segment_sum(emb, tf.boolean_mask(row_of, valid), b)
        count = tf.reduce_sum(tf.cast(valid, tf.float32), axis=1, keepdims=True)
        return total / tf.maximum(count, 1.0)

    def forward(x):
        h = tf.concat([lookup(tables["user"], x["user"]),
                       lookup(tables["movie"], x["movie"]),
                       pooled_mean(tables["genres"], x["genres"]),
                       pooled_mean(tables["decade"], x["decade"])], axis=1)
        for i in range(3):
            h = tf.matmul(h, value(kernels[i])) + value(biases[i])
            if i < 2:
                h = tf.nn.relu(h)
        return h[:, 0]

    def lazy_adam(var, m, v, g, b1p, b2p):
        """Adam on the rows of IndexedSlices g only, computed on var's PS."""
        with tf.device(var.device):
            uniq, pos = tf.unique(g.indices)
            gs = tf.math.unsorted_segment_sum(g.values, pos, tf.shape(uniq)[0])
            m_r = beta1 * tf.raw_ops.ResourceGather(resource=m.handle, indices=uniq,
                                                    dtype=tf.float32) + (1.0 - beta1) * gs
            v_r = beta2 * tf.raw_ops.ResourceGather(resource=v.handle, indices=uniq,
                                                    dtype=tf.float32) + (1.0 - beta2) * tf.square(gs)
            lr_t = lr * tf.sqrt(1.0 - b2p) / (1.0 - b1p)
            tf.raw_ops.ResourceScatterUpdate(resource=m.handle, indices=uniq, updates=m_r)
            tf.raw_ops.ResourceScatterUpdate(resource=v.handle, indices=uniq, updates=v_r)
            tf.raw_ops.ResourceScatterSub(resource=var.handle, indices=uniq,
                                          updates=lr_t * m_r / (tf.sqrt(v_r) + eps))

    @tf.function
    def train_closure(iterator, num_steps):
        for _ in tf.range(num_steps):
            x = next(iterator)
            with tf.GradientTape() as tape:
                logits = forward(x)
                loss = tf.reduce_mean(
                    tf.nn.sigmoid_cross_entropy_with_logits(labels=x["label"], logits=logits))
            grads = tape.gradient(loss, all_vars)
            t = tf.cast(iterations.assign_add(1), tf.float32)
            b1p = tf.pow(beta1, t)
            b2p = tf.pow(beta2, t)
            for p, (m, v), g in zip(all_vars, slots, grads):
                if isinstance(g, tf.IndexedSlices):
                    lazy_adam(p, m, v, g, b1p, b2p)
                else:
                    tf.raw_ops.ResourceApplyAdam(var=p.handle, m=m.handle, v=v.handle,
                                                 beta1_power=b1p, beta2_power=b2p, lr=lr,
                                                 beta1=beta1, beta2=beta2, epsilon=eps, grad=g)

    steps_per_epoch = -(-n_train // batch)
    warmup_s, epoch_seconds, train_s, plan = tf_ps_mlp.run_epochs(
        tf, coordinator, dataset_fn, train_closure, steps_per_epoch, a.steps_per_closure,
        a.epochs, a.workers_hint)
    steps = int(iterations.numpy())
    examples = steps * batch

    # Evaluation on the chief with the final variables, numpy (not timed).
    t0 = time.perf_counter()
    T = {f: np.concatenate([s.numpy() for s in shards(tables[f])]) for f in tables}
    K = [np.concatenate([s.numpy() for s in shards(k)]) for k in kernels]
    B = [np.concatenate([s.numpy() for s in shards(b)]) for b in biases]

    def np_pooled(table, ids):
        valid = (ids >= 0)
        e = table[np.where(valid, ids, 0)] * valid[..., None]
        return e.sum(axis=1) / np.maximum(valid.sum(axis=1), 1)[:, None]
    h = np.concatenate([T["user"][holdout["user"]], T["movie"][holdout["movie"]],
                        np_pooled(T["genres"], holdout["genres"]),
                        np_pooled(T["decade"], holdout["decade"])], axis=1)
    for i in range(3):
        h = h @ K[i] + B[i]
        if i < 2:
            h = np.maximum(h, 0)
    z = h[:, 0].astype(np.float64)
    y = holdout["label"].astype(np.float64)
    eval_loss = float(np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))))
    eval_acc = float(np.mean((z >= 0) == (y > 0.5)))
    eval_auc = auc_exact(y, z)
    eval_s = time.perf_counter() - t0
    return {
        "tf_version": tf.__version__, "numpy_version": np.__version__,
        "epochs": a.epochs, "per_replica_batch": batch, "steps_per_closure": a.steps_per_closure,
        "closures_per_epoch": len(plan), "steps_per_epoch": steps_per_epoch,
        "train_rows": n_train, "holdout_rows": len(holdout["label"]),
        "steps": steps, "examples": examples,
        "train_seconds": train_s, "examples_per_sec": examples / train_s,
        "epoch_seconds": epoch_seconds,
        "eval_auc": eval_auc, "eval_loss": eval_loss, "eval_accuracy": eval_acc,
        "eval_seconds": eval_s,
        "connect_seconds": connect_s, "variable_create_seconds": create_s,
        "warmup_seconds": warmup_s,
        "optimizer": "adam lr %g, beta 0.9/0.999, eps 1e-7: ResourceApplyAdam on dense "
                     "(shards), lazy sparse Adam on embedding shards" % a.lr,
        "variable_partitioner": "MinSizePartitioner(min_shard_bytes=16384, max_shards=2)",
        "shards": shard_info, "slots_colocated": slots_colocated,
        **info,
    }


def child_chief(a):
    tf_ps_mlp.run_chief(a, chief_train)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def add_job(q):
        q.add_argument("--epochs", type=int, default=3)
        q.add_argument("--batch", type=int, default=256, help="per-replica batch")
        q.add_argument("--steps_per_closure", type=int, default=20)
        q.add_argument("--lr", type=float, default=0.001)
        q.add_argument("--seed", type=int, default=7, help="initializer seed")
        q.add_argument("--csv", default=DEFAULT_CSV)
        q.add_argument("--holdout_fraction", type=float, default=0.2)
        q.add_argument("--split_seed", type=int, default=7)
        q.add_argument("--movie_bins", type=int, default=1 << 18)
        q.add_argument("--genre_bins", type=int, default=1 << 12)
        q.add_argument("--decade_bins", type=int, default=1 << 12)

    t = sub.add_parser("train")
    t.add_argument("--ps", type=int, default=2)
    t.add_argument("--workers", type=int, default=2)
    add_job(t)
    # Thread settings as tf_ps_mlp.py: intra-op 1, inter-op 2 in every process.
    for role in ("ps", "worker", "chief"):
        t.add_argument("--%s_intra" % role, type=int, default=1)
        t.add_argument("--%s_inter" % role, type=int, default=2)
    t.add_argument("--timeout_s", type=int, default=1800)
    t.add_argument("--keep_logs", action="store_true")
    t.add_argument("--json", default="")

    for role in ("_ps", "_worker", "_chief"):
        c = sub.add_parser(role)
        c.add_argument("--intra", type=int, default=1)
        c.add_argument("--inter", type=int, default=2)
        c.add_argument("--out", default="")
        add_job(c)

    a = p.parse_args()
    if a.cmd == "train":
        # SIGTERM to the orchestrator unwinds through the finally block that
        # stops the children (which also die with it through PDEATHSIG).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        main_train(a)
    elif a.cmd in ("_ps", "_worker"):
        child_server(a)
    else:
        child_chief(a)


if __name__ == "__main__":
    main()
