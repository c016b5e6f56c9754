#!/usr/bin/env python3
"""TensorFlow MultiWorkerMirroredStrategy counterpart of
examples/fashion_mnist_mlp.yaml, for bench/strategies.sh.

  bench/compare_tf/.venv/bin/python bench/compare_tf/tf_mwms_mlp.py \\
      --workers 2 --epochs 2 --json OUT.json [--keep_logs]

The process you start is an orchestrator that never imports TensorFlow. It
picks N free 127.0.0.1 ports and starts N worker processes, each with its own
TF_CONFIG ({"cluster": {"worker": [...]}, "task": {"type": "worker",
"index": i}}). MWMS is SPMD: every worker runs the same training program,
holds a full copy of the model, and all-reduces its gradients with the others
on every step (CPU collectives over gRPC, CommunicationImplementation RING by
default; AUTO picks RING on CPU). Worker 0 (the chief) also evaluates. Each
worker writes a small JSON result; the orchestrator checks that all replicas
ended with the same weights, then stops every child by pid (SIGTERM, SIGKILL
after 5 s), also on failure, timeout or Ctrl-C (try/finally); children also
get PR_SET_PDEATHSIG so none outlives a killed orchestrator.

Model and optimizer as tf_ps_mlp.py: MLP 784-256(relu)-10, softmax cross
entropy, Glorot-uniform kernels (stateless, same seed on every worker), zero
biases, Adam (lr 0.001, beta 0.9/0.999, eps 1e-7) as tf.raw_ops.
ResourceApplyAdam (the kernel tf.keras' Adam uses), applied by every replica
to its own copy of each MirroredVariable with the all-reduced gradient.

Data: Fashion-MNIST read with gzip+numpy, /255. Manual sharding by worker
index: strategy.distribute_datasets_from_function, whose dataset_fn takes
examples i::N (input_context.input_pipeline_id = worker i of N), shuffles its
shard each epoch and batches it by 64 (the per-replica batch; global batch
64 x N). No batch is dropped, so an epoch visits every one of the 60,000
examples once: ceil(30000/64) = 469 steps for 2 workers, the last one a
partial global batch of 96; each step's gradient is the mean over the
examples of the whole global batch (the per-replica sums and the example
count are all-reduced together: one collective per step).

Loop: custom training loop, `strategy.run(step)` inside a tf.function that
runs --steps_per_call steps (default 20, like the pscluster job's
steps_per_closure) in a tf.range loop; Python calls it until the epoch is
done. (Keras' model.fit is not used: Keras 3 adds its own per-step overhead
and callbacks; the raw loop is the fastest honest TF.) Timing: the first call
runs 1 step (tracing, iterator start-up and the collectives' first
rendezvous) and is not timed; examples/s = the examples of every other step /
wall time on the chief from the end of that warm-up to the end of the last
step. Evaluation: accuracy and loss on the 10k test set, once, after
training, on the chief with numpy (not timed).
"""

import argparse
import ctypes
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

T_START = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = "/usr/share/datasets/fashion-mnist"
sys.path.insert(0, HERE)
# The orchestration and data helpers of the ParameterServerStrategy script
# (it imports no TensorFlow at module level).
from tf_ps_mlp import _die_with_parent, _pid_alive, free_ports, load_idx, write_result  # noqa: E402


# --------------------------------------------------------------------------
# Orchestrator (no TensorFlow here)
# --------------------------------------------------------------------------

def stop_children(procs):
    """Stops every child by pid: SIGTERM, then SIGKILL after 5 s."""
    for _, p in procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + 5
    for _, p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    return [p.pid for _, p in procs]


def _tail(path, n=4000):
    try:
        with open(path) as f:
            return f.read()[-n:]
    except OSError:
        return "(no log)"


def run(a):
    log_dir = tempfile.mkdtemp(prefix="tf_mwms-")
    ports = free_ports(a.workers)
    spec = {"worker": ["127.0.0.1:%d" % p for p in ports]}
    procs = []  # (name, Popen)
    outs = [os.path.join(log_dir, "result-%d.json" % i) for i in range(a.workers)]
    ok = False
    try:
        for i in range(a.workers):
            env = dict(os.environ)
            env["TF_CONFIG"] = json.dumps({"cluster": spec,
                                           "task": {"type": "worker", "index": i}})
            env["CUDA_VISIBLE_DEVICES"] = ""  # CPU only (tensorflow-cpu anyway)
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            cmd = [sys.executable, os.path.abspath(__file__), "--role", "worker",
                   "--epochs", str(a.epochs), "--batch", str(a.batch),
                   "--steps_per_call", str(a.steps_per_call), "--lr", str(a.lr),
                   "--seed", str(a.seed), "--intra", str(a.intra), "--inter", str(a.inter),
                   "--communication", a.communication,
                   "--collective_timeout_s", str(a.collective_timeout_s),
                   "--out", outs[i]]
            log = open(os.path.join(log_dir, "worker-%d.log" % i), "w")
            p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 preexec_fn=_die_with_parent)
            log.close()
            procs.append(("worker-%d" % i, p))
        deadline = time.time() + a.timeout_s
        # Every worker writes its result, then waits (bounded) to be stopped:
        # none exits while a peer may still be in the last collective.
        while not all(os.path.exists(o) for o in outs):
            for (name, p), o in zip(procs, outs):
                if p.poll() is not None and not os.path.exists(o):
                    raise RuntimeError("%s (pid %d) exited with %s; log tail:\n%s" % (
                        name, p.pid, p.returncode,
                        _tail(os.path.join(log_dir, name + ".log"))))
            if time.time() > deadline:
                raise RuntimeError("timed out after %d s; logs in %s" % (a.timeout_s, log_dir))
            time.sleep(0.2)
        results = []
        for o in outs:
            with open(o) as f:
                results.append(json.load(f))
        ok = True
    finally:
        pids = stop_children(procs)
        leftover = [pid for pid in pids if _pid_alive(pid)]
        if leftover:
            print("tf_mwms: WARNING: children still alive: %s" % leftover, file=sys.stderr)
        if not ok or a.keep_logs:
            print("tf_mwms: logs in %s" % log_dir, file=sys.stderr)
        else:
            for name in os.listdir(log_dir):
                os.unlink(os.path.join(log_dir, name))
            os.rmdir(log_dir)

    chief = results[0]
    sums = [r["weights_abs_sum"] for r in results]
    in_sync = max(sums) - min(sums) <= 1e-6 * max(1.0, abs(sums[0]))
    r = dict(chief)
    r.update({
        "system": "tensorflow",
        "strategy": "MultiWorkerMirroredStrategy",
        "workers": a.workers, "replicas": a.workers,
        "per_replica_batch": a.batch, "global_batch": a.batch * a.workers,
        "communication": a.communication,
        "threads": {"intra_op": a.intra, "inter_op": a.inter},
        "data_sharding": "manual: worker i of N reads examples i::N "
                         "(distribute_datasets_from_function)",
        "loop": "custom: strategy.run in a tf.function, %d steps per call" % a.steps_per_call,
        "replica_weights_abs_sum": sums, "replicas_in_sync": in_sync,
        "per_worker_train_seconds": [x["train_seconds"] for x in results],
        "process_wall_seconds": time.time() - T_START,
        "child_pids": pids,
    })
    if not in_sync:
        print("tf_mwms: WARNING: replicas ended with different weights: %s" % sums,
              file=sys.stderr)
    print(json.dumps(r, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)


# --------------------------------------------------------------------------
# Worker processes (TensorFlow)
# --------------------------------------------------------------------------

def worker(a):
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    import numpy as np
    import tensorflow as tf
    # Threads before the strategy (it initialises the eager context).
    tf.config.threading.set_intra_op_parallelism_threads(a.intra)
    tf.config.threading.set_inter_op_parallelism_threads(a.inter)
    impl = {"auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
            "ring": tf.distribute.experimental.CommunicationImplementation.RING}[a.communication]
    t0 = time.perf_counter()
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=impl, timeout_seconds=a.collective_timeout_s))
    connect_s = time.perf_counter() - t0
    resolver = strategy.cluster_resolver
    task_id = resolver.task_id
    num_workers = strategy.num_replicas_in_sync
    tf.random.set_seed(a.seed)

    train_x, train_y = load_idx(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz"),
                                os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz"))
    test_x, test_y = load_idx(os.path.join(DATA_DIR, "t10k-images-idx3-ubyte.gz"),
                              os.path.join(DATA_DIR, "t10k-labels-idx1-ubyte.gz"))

    def kernel(shape, seed):
        # Glorot uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)); the
        # same stateless seed on every worker, so the replicas start equal.
        limit = np.sqrt(6.0 / (shape[0] + shape[1]))
        return tf.random.stateless_uniform(shape, seed=[a.seed, seed], minval=-limit,
                                           maxval=limit)
    with strategy.scope():
        w1 = tf.Variable(kernel((784, 256), 1), name="dense0/kernel")
        b1 = tf.Variable(tf.zeros([256]), name="dense0/bias")
        w2 = tf.Variable(kernel((256, 10), 2), name="dense1/kernel")
        b2 = tf.Variable(tf.zeros([10]), name="dense1/bias")
        params = [w1, b1, w2, b2]
        slots = [(tf.Variable(tf.zeros_like(p)), tf.Variable(tf.zeros_like(p)))
                 for p in params]

    per_replica = a.batch

    def dataset_fn(ctx):
        # Manual sharding by worker index: worker i reads examples i::N.
        ds = tf.data.Dataset.from_tensor_slices((train_x, train_y))
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        shard = len(range(ctx.input_pipeline_id, len(train_x), ctx.num_input_pipelines))
        ds = ds.shuffle(shard, seed=a.seed + ctx.input_pipeline_id,
                        reshuffle_each_iteration=True)
        ds = ds.batch(per_replica, drop_remainder=False)
        ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, tf.cast(y, tf.int32)),
                    num_parallel_calls=1)
        return ds.repeat().prefetch(2)

    shard_size = len(range(task_id, len(train_x), num_workers))
    steps_per_epoch = -(-shard_size // per_replica)  # 469 for 2 workers
    # Equal shards (60000 divides by 2, 3, 4, 5, 6...) give every worker the
    # same number of steps, as the collectives need.
    assert len(train_x) % num_workers == 0, "workers must divide 60000"
    dist_ds = strategy.distribute_datasets_from_function(dataset_fn)
    iterator = iter(dist_ds)

    lr = tf.constant(a.lr, tf.float32)
    beta1 = tf.constant(0.9, tf.float32)
    beta2 = tf.constant(0.999, tf.float32)
    eps = tf.constant(1e-7, tf.float32)

    def step_fn(x, y, t):
        ctx = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w1) + b1)
            logits = tf.matmul(h, w2) + b2
            loss_sum = tf.reduce_sum(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss_sum, params)
        count = tf.cast(tf.shape(y)[0], tf.float32)
        # One collective: the gradient sums, the loss sum and the count.
        red_grads, red_loss, red_count = ctx.all_reduce(
            tf.distribute.ReduceOp.SUM, (grads, loss_sum, count))
        b1p = tf.pow(beta1, t)
        b2p = tf.pow(beta2, t)
        for p, (m, v), g in zip(params, slots, red_grads):
            # p.handle in replica context: this replica's copy.
            tf.raw_ops.ResourceApplyAdam(var=p.handle, m=m.handle, v=v.handle,
                                         beta1_power=b1p, beta2_power=b2p, lr=lr,
                                         beta1=beta1, beta2=beta2, epsilon=eps,
                                         grad=g / red_count)
        return red_loss / red_count

    @tf.function
    def train_call(iterator, first_step, num_steps):
        # Runs steps first_step+1 .. first_step+num_steps (Adam's t is 1-based).
        loss = tf.constant(0.0)
        for i in tf.range(num_steps):
            x, y = next(iterator)
            t = tf.cast(first_step + i + 1, tf.float32)
            per_replica_loss = strategy.run(step_fn, args=(x, y, t))
            loss = strategy.experimental_local_results(per_replica_loss)[0]
        return loss

    plan = []  # (epoch, steps) calls
    for e in range(a.epochs):
        left = steps_per_epoch
        while left:
            n = min(a.steps_per_call, left)
            plan.append((e, n))
            left -= n
    # Warm-up (not timed): the first call runs 1 step of epoch 1 (tracing,
    # iterator start-up, first collective rendezvous).
    e0, n0 = plan[0]
    plan = [(e0, 1), (e0, n0 - 1)] + plan[1:] if n0 > 1 else plan
    plan = [p for p in plan if p[1] > 0]
    t0 = time.perf_counter()
    step = 0
    last_loss = float(train_call(iterator, tf.constant(step, tf.int64),
                                 tf.constant(plan[0][1], tf.int64)))
    step += plan[0][1]
    warmup_s = time.perf_counter() - t0
    warmup_steps = step

    epoch_seconds = [0.0] * a.epochs
    epoch_loss = []
    t_train = time.perf_counter()
    for e, n in plan[1:]:
        te = time.perf_counter()
        last_loss = float(train_call(iterator, tf.constant(step, tf.int64),
                                     tf.constant(n, tf.int64)))  # float(): waits
        epoch_seconds[e] += time.perf_counter() - te
        step += n
        if step % steps_per_epoch == 0:
            epoch_loss.append(last_loss)
    train_s = time.perf_counter() - t_train
    steps = step
    total_steps = a.epochs * steps_per_epoch
    assert steps == total_steps, (steps, total_steps)
    examples_per_epoch = len(train_x)
    timed_examples = a.epochs * examples_per_epoch - warmup_steps * per_replica * num_workers

    values = [p.numpy() for p in params]  # cross-replica: the local copy
    weights_abs_sum = float(sum(np.abs(v.astype(np.float64)).sum() for v in values))
    result = {
        "task_id": task_id, "train_seconds": train_s, "weights_abs_sum": weights_abs_sum,
    }
    if task_id == 0:
        W1, B1, W2, B2 = values
        x = test_x.astype(np.float32) / 255.0
        logits = np.maximum(x @ W1 + B1, 0) @ W2 + B2
        logits = logits - logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        result.update({
            "tf_version": tf.__version__,
            "epochs": a.epochs, "steps_per_epoch": steps_per_epoch, "steps": steps,
            "examples": a.epochs * examples_per_epoch,
            "warmup_steps": warmup_steps, "warmup_seconds": warmup_s,
            "timed_examples": timed_examples,
            "examples_per_sec": timed_examples / train_s,
            "epoch_seconds": epoch_seconds,
            "train_loss_last_step_each_epoch": epoch_loss,
            "eval_loss": float(-logp[np.arange(len(test_y)), test_y].mean()),
            "eval_accuracy": float((logits.argmax(axis=1) == test_y).mean()),
            "connect_seconds": connect_s, "steps_per_call": a.steps_per_call,
        })
    write_result(a.out, result)
    # Wait (bounded) for the orchestrator's SIGTERM rather than exit while a
    # peer may still be finishing the last collective; skip the interpreter
    # teardown (stopping collective contexts can block).
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.5)
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="per-replica batch")
    p.add_argument("--steps_per_call", type=int, default=20,
                   help="training steps per tf.function call")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=42)
    # 2 cores shared by N workers: one intra-op thread each; inter-op 2 so
    # that the collectives' async kernels and the input pipeline overlap.
    p.add_argument("--intra", type=int, default=1)
    p.add_argument("--inter", type=int, default=2)
    p.add_argument("--communication", choices=["ring", "auto"], default="ring")
    p.add_argument("--collective_timeout_s", type=float, default=300.0)
    p.add_argument("--timeout_s", type=int, default=1800, help="whole run's limit")
    p.add_argument("--json", default="", help="write the result here")
    p.add_argument("--keep_logs", action="store_true", help="keep /tmp/tf_mwms-* logs")
    p.add_argument("--role", default="orchestrator", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.role == "worker":
        worker(a)
        return
    if a.workers < 1 or 60000 % a.workers:
        p.error("--workers must divide 60000 (equal shards, equal steps per worker)")
    # SIGTERM to the orchestrator unwinds through the finally block that stops
    # the children (which also die with it through PDEATHSIG).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run(a)


if __name__ == "__main__":
    main()
