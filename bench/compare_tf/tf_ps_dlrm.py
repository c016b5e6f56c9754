#!/usr/bin/env python3
"""TensorFlow ParameterServerStrategy + ClusterCoordinator counterpart of
examples/criteo_dlrm.yaml (DLRM on datagen/criteo_gen's Criteo-layout click
log), reading criteo_gen's TFRecord files through tf.data, for
bench/compare_tf/run_dlrm.sh.

  bench/compare_tf/.venv/bin/python bench/compare_tf/tf_ps_dlrm.py train \\
      --data DIR --ps 2 --workers 2 --epochs 1 [--json OUT.json] [--keep_logs]
  bench/compare_tf/.venv/bin/python bench/compare_tf/tf_ps_dlrm.py check_rows \\
      --data DIR --tsv_data DIR2

DIR holds criteo_gen --format tfrecord output: train-*.tfrecord,
holdout-*.tfrecord (tf.Example: "label" int64, "I1".."I13" int64 lists,
"C1".."C26" bytes lists of 8 hex digits; an empty list is a missing value)
and meta.json (whose bayes_auc goes into the result). check_rows compares
every row of DIR's TFRecord files with DIR2's TSV(.gz) files (criteo_gen
--format tsv with the same flags): the rows pscluster trains on.

Processes: as tf_ps_ctr.py (orchestration helpers of tf_ps_mlp.py: an
orchestrator that never imports TensorFlow, every PS and worker its own
tf.distribute.Server child, then the chief; every child stopped by pid).

Input (what TF's guides do for Criteo): each worker's dataset is
TFRecordDataset(train files) -> shuffle(--shuffle_buffer records) ->
repeat -> batch(256) -> map(parse, AUTOTUNE) -> prefetch(2), the parse being
tf.io.parse_example of the batch (RaggedFeature per column) followed by the
feature transforms of examples/criteo_dlrm.yaml, as tensors:
  dense  : log(1 + max(I_j, 0)) for j = 1..13, 0 when missing;
  C1..C26: tf.strings.to_hash_bucket_fast(value, bins_f) (keras' Hashing),
           no id when missing;
  crosses: c1_x_c2 = hash(C1 "\\x01" C2), c3_x_c9 = hash(C3 "\\x01" C9),
           c4_x_i1 = hash(C4 "\\x01" bucket(I1)), bucket = the number of
           boundaries 2^k - 1 (k = 1..14) <= I1 (tf.raw_ops.Bucketize, TF's
           bucketized_column); no id when either part is missing.
Every worker shuffles and repeats the whole training set (TF's PSS design:
about 75 % distinct rows in an epoch on 2 workers), unless --data_service:
then the chief runs a tf.data service (dispatcher and one data-service worker
in its process) whose "distributed_epoch" job does the reading and parsing,
and both workers read that one job, so every row is used once per epoch (TF's
way to get exactly-once visitation under PSS); an epoch is then
floor(rows / 256) - 16 steps (the workers' read-ahead must not find the job
drained).
Tables: fixed rows per feature (TF's standard way to serve an open
vocabulary), bins_f = the power of two >= --bins_per_value (8) x the
feature's distinct values in the train files, counted on the chief before
training (not timed); the result lists them and the collisions. pscluster
uses dynamic hash tables (a row per distinct id), so it has no collisions.

Model (examples/criteo_dlrm.yaml): bottom MLP 13 -> 32 relu -> 16 relu = z0;
29 embeddings z1..z29 of dim 16 (a missing feature: a zero vector); dot
interaction [z0 | <zi, zj> for 0 <= i < j <= 29] (16 + 435 = 451); top MLP
451 -> 64 relu -> 32 relu -> 1; sigmoid cross entropy, mean over the batch.
Embeddings U(-0.05, 0.05), kernels Glorot uniform, biases zero (stateless
random, seed 7). Variables, partitioner (MinSizePartitioner 16 KiB, 2
shards), Adam (lr 0.001; ResourceApplyAdam on dense variables, lazy sparse
Adam on embedding shards, slots colocated) and the loop (per-replica batch
256, closures of 20 steps, an epoch = ceil(train rows / 256) steps, untimed
warm-up) are tf_ps_ctr.py's. Evaluation: exact AUC and logloss on all the
holdout rows, on the chief with the final variables, numpy (not timed).
"""

import argparse
import glob
import gzip
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tf_ps_mlp  # noqa: E402
from tf_ps_mlp import child_server  # noqa: E402
from tf_ps_ctr import auc_exact  # noqa: E402  (numpy only)

NUM_INTS, NUM_CATS = 13, 26
CATS = ["C%d" % k for k in range(1, NUM_CATS + 1)]
CROSSES = [("c1_x_c2", "C1", "C2"), ("c3_x_c9", "C3", "C9"), ("c4_x_i1", "C4", "I1")]
FEATURES = CATS + [c[0] for c in CROSSES]
I1_BOUNDARIES = [float(2 ** k - 1) for k in range(1, 15)]  # 1, 3, ..., 16383
EMB_DIM = 16
BOTTOM = [32, EMB_DIM]
TOP = [64, 32, 1]


# --------------------------------------------------------------------------
# Orchestrator (no TensorFlow here)
# --------------------------------------------------------------------------

class DlrmCluster(tf_ps_mlp.Cluster):
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


def files_of(data, split, ext):
    files = sorted(glob.glob(os.path.join(data, "%s-*-of-*.%s" % (split, ext))))
    if not files:
        raise SystemExit("tf_ps_dlrm: no %s-*.%s files in %s (criteo_gen --format %s)"
                         % (split, ext, data, "tfrecord" if ext == "tfrecord" else "tsv"))
    return files


def main_train(a):
    files_of(a.data, "train", "tfrecord")
    files_of(a.data, "holdout", "tfrecord")
    chief_args = ["--epochs", str(a.epochs), "--batch", str(a.batch),
                  "--steps_per_closure", str(a.steps_per_closure), "--lr", str(a.lr),
                  "--seed", str(a.seed), "--data", os.path.abspath(a.data),
                  "--bins_per_value", str(a.bins_per_value),
                  "--shuffle_buffer", str(a.shuffle_buffer)] + (
                      ["--data_service"] if a.data_service else [])
    threads = tf_ps_mlp.parse_threads(a)
    r = tf_ps_mlp.run_experiment(a.ps, a.workers, chief_args, a.timeout_s, threads,
                                 a.keep_logs, cluster_cls=DlrmCluster, name="tf_ps_dlrm")
    r.update({"system": "tensorflow", "job": "criteo-dlrm", "ps": a.ps, "workers": a.workers,
              "threads": {k: {"intra_op": v[0], "inter_op": v[1]} for k, v in threads.items()}})
    print(json.dumps(r, indent=2))
    print("tf_ps_dlrm: %.0f examples/s, eval AUC %.4f (Bayes %.4f), logloss %.4f "
          "(%d steps, %.1f s training)" % (r["examples_per_sec"], r["eval_auc"], r["bayes_auc"],
                                          r["eval_loss"], r["steps"], r["train_seconds"]),
          file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)


def main_check_rows(a):
    """Every TFRecord row of a.data equals the TSV row of a.tsv_data, in order."""
    from tensorflow.core.example import example_pb2  # protobuf only, no graph
    import struct

    def tfrecords(path):
        with open(path, "rb") as f:
            while True:
                head = f.read(12)
                if not head:
                    return
                (n,) = struct.unpack("<Q", head[:8])
                data = f.read(n)
                f.read(4)  # data CRC (criteo_gen's reader checks them; not repeated here)
                yield data

    def tsv_lines(path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", newline="\n") as f:
            for line in f:
                yield line.rstrip("\n")

    checked = {}
    for split in ("train", "holdout"):
        rec_files = files_of(a.data, split, "tfrecord")
        tsv_files = [f for f in files_of(a.tsv_data, split, "tsv*")]
        recs = (r for p in rec_files for r in tfrecords(p))
        lines = (l for p in tsv_files for l in tsv_lines(p))
        n = 0
        for rec, line in zip(recs, lines, strict=True):
            f = example_pb2.Example.FromString(rec).features.feature
            fields = [str(f["label"].int64_list.value[0])]
            fields += ["".join(str(v) for v in f["I%d" % j].int64_list.value)
                       for j in range(1, NUM_INTS + 1)]
            fields += ["".join(v.decode() for v in f[c].bytes_list.value) for c in CATS]
            if "\t".join(fields) != line:
                raise SystemExit("check_rows: %s row %d differs:\n  tfrecord %r\n  tsv      %r"
                                 % (split, n, "\t".join(fields), line))
            n += 1
        checked[split] = n
    print(json.dumps({"same_rows": True, "rows": checked,
                      "tfrecord": os.path.abspath(a.data), "tsv": os.path.abspath(a.tsv_data)}))


# --------------------------------------------------------------------------
# Chief (TensorFlow)
# --------------------------------------------------------------------------

def make_parse(tf):
    """parse(serialized [B]) -> (dense [B, 13] float, {feature: string [B]},
    label [B] float); a missing value is "" (strings)."""
    spec = {"label": tf.io.FixedLenFeature([1], tf.int64)}
    for j in range(1, NUM_INTS + 1):
        spec["I%d" % j] = tf.io.RaggedFeature(tf.int64)
    for c in CATS:
        spec[c] = tf.io.RaggedFeature(tf.string)
    boundaries = I1_BOUNDARIES

    def parse(serialized):
        p = tf.io.parse_example(serialized, spec)
        ints = {j: p["I%d" % j].to_tensor(default_value=-1, shape=[None, 1])[:, 0]
                for j in range(1, NUM_INTS + 1)}
        dense = tf.stack([tf.math.log1p(tf.cast(tf.maximum(ints[j], 0), tf.float32))
                          for j in range(1, NUM_INTS + 1)], axis=1)
        s = {c: p[c].to_tensor(default_value="", shape=[None, 1])[:, 0] for c in CATS}
        bucket = tf.strings.as_string(tf.raw_ops.Bucketize(
            input=tf.cast(ints[1], tf.float32), boundaries=boundaries))
        s["I1"] = tf.where(ints[1] >= 0, bucket, "")
        for name, x, y in CROSSES:
            both = tf.logical_and(s[x] != "", s[y] != "")
            s[name] = tf.where(both, tf.strings.join([s[x], s[y]], separator="\x01"), "")
        label = tf.cast(p["label"][:, 0], tf.float32)
        return dense, {f: s[f] for f in FEATURES}, label

    return parse


def make_featurize(tf, bins):
    """featurize(serialized [B]) -> {"dense", "label", feature: int32 ids [B], -1 = none}."""
    parse = make_parse(tf)

    def featurize(serialized):
        dense, strings, label = parse(serialized)
        out = {"dense": dense, "label": label}
        for f in FEATURES:
            ids = tf.cast(tf.strings.to_hash_bucket_fast(strings[f], bins[f]), tf.int32)
            out[f] = tf.where(strings[f] != "", ids, -1)
        return out

    return featurize


def count_values(tf, files):
    """Distinct values of each feature over `files` (the chief, eagerly)."""
    import numpy as np
    parse = make_parse(tf)
    seen = {f: set() for f in FEATURES}
    rows = 0
    ds = tf.data.TFRecordDataset(files).batch(8192).map(parse)
    for _, strings, label in ds:
        rows += int(label.shape[0])
        for f in FEATURES:
            seen[f].update(np.unique(strings[f].numpy()).tolist())
    for f in FEATURES:
        seen[f].discard(b"")
    return rows, seen


def read_holdout(tf, files, featurize):
    import numpy as np
    parts = list(tf.data.TFRecordDataset(files).batch(8192).map(featurize))
    return {k: np.concatenate([p[k].numpy() for p in parts]) for k in parts[0]}


def chief_train(a, tf):
    import numpy as np
    t0 = time.perf_counter()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=16384, max_shards=2)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    connect_s = time.perf_counter() - t0

    # Not timed: the table sizes from the train files' distinct values.
    t0 = time.perf_counter()
    train_files = files_of(a.data, "train", "tfrecord")
    holdout_files = files_of(a.data, "holdout", "tfrecord")
    n_train, seen = count_values(tf, train_files)
    bins = {f: max(16, 1 << int(np.ceil(np.log2(max(1, a.bins_per_value * len(seen[f]))))))
            for f in FEATURES}
    featurize = make_featurize(tf, bins)
    holdout = read_holdout(tf, holdout_files, featurize)
    hashing = {}
    for f in FEATURES:
        vals = sorted(seen[f])
        buckets = tf.strings.to_hash_bucket_fast(tf.constant(vals, tf.string), bins[f]).numpy()
        hashing[f] = {"num_bins": bins[f], "distinct_values": len(vals),
                      "distinct_buckets": len(set(buckets.tolist()))}
    prepare_s = time.perf_counter() - t0

    seed_counter = [0]

    def uniform(shape, limit):
        seed_counter[0] += 1
        return tf.random.stateless_uniform(shape, seed=[a.seed, seed_counter[0]],
                                           minval=-limit, maxval=limit)

    def glorot(shape):
        return uniform(shape, float(np.sqrt(6.0 / (shape[0] + shape[1]))))

    def shards(v):
        return [v] if isinstance(v, tf.Variable) else list(v.variables)

    def value(v):
        s = shards(v)
        return s[0] if len(s) == 1 else tf.concat(s, axis=0)

    n_vec = 1 + len(FEATURES)
    pairs = np.array([(i, j) for i in range(n_vec) for j in range(i + 1, n_vec)])
    top_in = EMB_DIM + len(pairs)
    t0 = time.perf_counter()
    with strategy.scope():
        tables = {f: tf.Variable(uniform([bins[f], EMB_DIM], 0.05), name="embedding/" + f)
                  for f in FEATURES}
        dense_layers = []  # (name, kernel, bias)
        for prefix, dims in (("bottom", [NUM_INTS] + BOTTOM), ("top", [top_in] + TOP)):
            for i in range(len(dims) - 1):
                dense_layers.append((
                    "%s_%d" % (prefix, i),
                    tf.Variable(glorot([dims[i], dims[i + 1]]), name="%s_%d/kernel" % (prefix, i)),
                    tf.Variable(tf.zeros([dims[i + 1]]), name="%s_%d/bias" % (prefix, i))))
        sparse_vars = [s for f in FEATURES for s in shards(tables[f])]
        dense_vars = [s for _, k, b in dense_layers for v in (k, b) for s in shards(v)]
        slots = []
        for s in sparse_vars + dense_vars:
            with strategy.extended.colocate_vars_with(s):
                base = s.name.split(":")[0]
                slots.append((tf.Variable(tf.zeros(s.shape, s.dtype), name=base + "/m"),
                              tf.Variable(tf.zeros(s.shape, s.dtype), name=base + "/v")))
        with strategy.extended.colocate_vars_with(dense_vars[0]):
            iterations = tf.Variable(0, dtype=tf.int64, name="iterations")
    create_s = time.perf_counter() - t0
    all_vars = sparse_vars + dense_vars
    shard_info = {"embedding/" + f: [{"shape": s.shape.as_list(), "device": s.device}
                                     for s in shards(tables[f])] for f in FEATURES}
    n_bottom = len(BOTTOM)

    lr = tf.constant(a.lr, tf.float32)
    beta1 = tf.constant(0.9, tf.float32)
    beta2 = tf.constant(0.999, tf.float32)
    eps = tf.constant(1e-7, tf.float32)
    batch = a.batch
    flat_pairs = tf.constant(pairs[:, 0] * n_vec + pairs[:, 1], tf.int32)

    if a.data_service:
        # TF's way to visit each row once per epoch under PSS: a tf.data
        # service job in "distributed_epoch" mode that both workers read (its
        # dispatcher and one data-service worker live in this process, which
        # then reads and parses the files). The job holds epochs * rows rows.
        dispatcher = tf.data.experimental.service.DispatchServer()
        service = dispatcher.target
        ds_worker = tf.data.experimental.service.WorkerServer(  # noqa: F841 (kept alive)
            tf.data.experimental.service.WorkerConfig(
                dispatcher_address=service.split("://")[1]))

    def dataset_fn(_input_context=None):
        ds = tf.data.TFRecordDataset(train_files)
        if a.data_service:
            ds = ds.shuffle(a.shuffle_buffer, reshuffle_each_iteration=True).repeat(a.epochs)
            ds = ds.batch(batch, drop_remainder=True).map(featurize)
            ds = ds.apply(tf.data.experimental.service.distribute(
                processing_mode="distributed_epoch", service=service, job_name="dlrm_train"))
            return ds.prefetch(2)
        ds = ds.shuffle(a.shuffle_buffer, reshuffle_each_iteration=True).repeat()
        ds = ds.batch(batch, drop_remainder=True)
        return ds.map(featurize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)

    def embed(table, ids):
        """[B, dim] rows of ids (one fetch per unique id); zeros where ids < 0."""
        where = tf.where(ids >= 0)
        uniq, pos = tf.unique(tf.gather_nd(ids, where))
        got = tf.gather(tf.nn.embedding_lookup(shards(table), uniq), pos)
        shape = tf.stack([tf.shape(ids, out_type=tf.int64)[0], tf.constant(EMB_DIM, tf.int64)])
        return tf.scatter_nd(where, got, shape)

    def mlp(h, layers, last_relu):
        for i, (_, k, b) in enumerate(layers):
            h = tf.matmul(h, value(k)) + value(b)
            if last_relu or i + 1 < len(layers):
                h = tf.nn.relu(h)
        return h

    def forward(x):
        z0 = mlp(x["dense"], dense_layers[:n_bottom], last_relu=True)
        z = tf.stack([z0] + [embed(tables[f], x[f]) for f in FEATURES], axis=1)
        dots = tf.reshape(tf.matmul(z, z, transpose_b=True), [-1, n_vec * n_vec])
        h = tf.concat([z0, tf.gather(dots, flat_pairs, axis=1)], axis=1)
        return mlp(h, dense_layers[n_bottom:], last_relu=False)[:, 0]

    def lazy_adam(var, m, v, g, b1p, b2p):
        """Adam on the rows of IndexedSlices g only, on var's PS (as tf_ps_ctr.py)."""
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
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                    labels=x["label"], logits=forward(x)))
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

    # With the data service, each worker's reader holds a few batches ahead
    # (prefetch, the service client's buffer), so one worker can find the job
    # drained while the other still buffers the last ones: an epoch stops 16
    # batches short of floor(rows / batch) (3 % of 200k rows).
    steps_per_epoch = (n_train // batch - 16) if a.data_service else -(-n_train // batch)
    warmup_s, epoch_seconds, train_s, plan = tf_ps_mlp.run_epochs(
        tf, coordinator, dataset_fn, train_closure, steps_per_epoch, a.steps_per_closure,
        a.epochs, a.workers_hint)
    steps = int(iterations.numpy())
    examples = steps * batch

    # Evaluation on the chief with the final variables, numpy (not timed).
    t0 = time.perf_counter()
    T = {f: np.concatenate([s.numpy() for s in shards(tables[f])]) for f in FEATURES}
    L = [(np.concatenate([s.numpy() for s in shards(k)]),
          np.concatenate([s.numpy() for s in shards(b)])) for _, k, b in dense_layers]

    def np_mlp(h, layers, last_relu):
        for i, (k, b) in enumerate(layers):
            h = h @ k + b
            if last_relu or i + 1 < len(layers):
                h = np.maximum(h, 0)
        return h

    def np_embed(table, ids):
        return table[np.maximum(ids, 0)] * (ids >= 0)[:, None]
    z0 = np_mlp(holdout["dense"], L[:n_bottom], True)
    z = np.stack([z0] + [np_embed(T[f], holdout[f]) for f in FEATURES], axis=1)
    dots = np.einsum("bik,bjk->bij", z, z)[:, pairs[:, 0], pairs[:, 1]]
    zl = np_mlp(np.concatenate([z0, dots], axis=1), L[n_bottom:], False)[:, 0]
    zl = zl.astype(np.float64)
    y = holdout["label"].astype(np.float64)
    eval_loss = float(np.mean(np.maximum(zl, 0) - zl * y + np.log1p(np.exp(-np.abs(zl)))))
    eval_auc = auc_exact(y, zl)
    eval_s = time.perf_counter() - t0
    with open(os.path.join(a.data, "meta.json")) as f:
        meta = json.load(f)
    return {
        "tf_version": tf.__version__, "numpy_version": np.__version__,
        "epochs": a.epochs, "per_replica_batch": batch, "steps_per_closure": a.steps_per_closure,
        "closures_per_epoch": len(plan), "steps_per_epoch": steps_per_epoch,
        "train_rows": n_train, "holdout_rows": int(len(y)),
        "train_files": train_files, "holdout_files": holdout_files,
        "steps": steps, "examples": examples,
        "train_seconds": train_s, "examples_per_sec": examples / train_s,
        "epoch_seconds": epoch_seconds,
        "eval_auc": eval_auc, "eval_loss": eval_loss, "eval_seconds": eval_s,
        "bayes_auc": meta["bayes_auc"], "bayes_logloss": meta["bayes_logloss"],
        "connect_seconds": connect_s, "prepare_seconds": prepare_s,
        "variable_create_seconds": create_s, "warmup_seconds": warmup_s,
        "model": {"embedding_dim": EMB_DIM, "features": FEATURES, "bottom": BOTTOM,
                  "top_input": top_in, "top": TOP},
        "input": ("tf.data service (distributed_epoch, in the chief): TFRecordDataset -> "
                  "shuffle(%d) -> repeat(epochs) -> batch(%d) -> map(parse_example + transforms + "
                  "hashing); each worker: distribute -> prefetch(2)" if a.data_service else
                  "each worker: TFRecordDataset -> shuffle(%d) -> repeat -> batch(%d) -> "
                  "map(parse_example + transforms + hashing, AUTOTUNE) -> prefetch(2)")
                 % (a.shuffle_buffer, batch),
        "data_service": a.data_service,
        "optimizer": "adam lr %g, beta 0.9/0.999, eps 1e-7: ResourceApplyAdam on dense "
                     "(shards), lazy sparse Adam on embedding shards" % a.lr,
        "variable_partitioner": "MinSizePartitioner(min_shard_bytes=16384, max_shards=2)",
        "hashing": hashing, "shards": shard_info,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def add_job(q, data_required=True):
        q.add_argument("--data", required=data_required,
                       help="criteo_gen --format tfrecord output")
        q.add_argument("--epochs", type=int, default=1)
        q.add_argument("--batch", type=int, default=256, help="per-replica batch")
        q.add_argument("--steps_per_closure", type=int, default=20)
        q.add_argument("--lr", type=float, default=0.001)
        q.add_argument("--seed", type=int, default=7, help="initializer seed")
        q.add_argument("--bins_per_value", type=int, default=8)
        q.add_argument("--shuffle_buffer", type=int, default=10000)
        q.add_argument("--data_service", action="store_true",
                       help="read through a tf.data service job (distributed_epoch): "
                            "every row once per epoch instead of every worker the whole file")

    t = sub.add_parser("train")
    t.add_argument("--ps", type=int, default=2)
    t.add_argument("--workers", type=int, default=2)
    add_job(t)
    for role in ("ps", "worker", "chief"):
        t.add_argument("--%s_intra" % role, type=int, default=1)
        t.add_argument("--%s_inter" % role, type=int, default=2)
    t.add_argument("--timeout_s", type=int, default=1800)
    t.add_argument("--keep_logs", action="store_true")
    t.add_argument("--json", default="")

    c = sub.add_parser("check_rows")
    c.add_argument("--data", required=True, help="criteo_gen --format tfrecord output")
    c.add_argument("--tsv_data", required=True, help="criteo_gen --format tsv output")

    for role in ("_ps", "_worker", "_chief"):
        q = sub.add_parser(role)
        q.add_argument("--intra", type=int, default=1)
        q.add_argument("--inter", type=int, default=2)
        q.add_argument("--out", default="")
        add_job(q, data_required=False)  # the PS and workers get no job flags

    a = p.parse_args()
    if a.cmd == "train":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        main_train(a)
    elif a.cmd == "check_rows":
        main_check_rows(a)
    elif a.cmd in ("_ps", "_worker"):
        child_server(a)
    else:
        tf_ps_mlp.run_chief(a, chief_train)


if __name__ == "__main__":
    main()
