#!/usr/bin/env python3
"""TensorFlow ParameterServerStrategy + ClusterCoordinator counterpart of
examples/fashion_mnist_mlp.yaml, for bench/compare_tf.

Modes (run with bench/compare_tf/.venv/bin/python):

  tf_ps_mlp.py train    --ps 2 --workers 2 --epochs 3 --json OUT.json
  tf_ps_mlp.py dispatch --workers 1,2,4 --seconds 5 --json OUT.json

The process you start is an orchestrator that never imports TensorFlow. For
each experiment it picks free 127.0.0.1 ports, starts every PS and worker as
its own child process (a tf.distribute.Server built from TF_CONFIG), then a
child for the chief (coordinator), which builds ParameterServerStrategy +
ClusterCoordinator, runs the experiment, and writes its result to a JSON
file. All children are stopped by pid at the end (try/finally: SIGTERM, then
SIGKILL), also on failure or Ctrl-C; they also get PR_SET_PDEATHSIG so none
outlives a killed orchestrator.

train: MLP 784-256(relu)-10, softmax cross entropy, Adam(lr 0.001, beta1 0.9,
beta2 0.999, epsilon 1e-7) applied on the PS with ResourceApplyAdam (the
kernel tf.keras' Adam uses; slots colocated with their variable), Glorot
uniform kernels, zero biases; Fashion-MNIST read with gzip+numpy, scaled
/255; per-replica batch 64. Each scheduled closure is a tf.function running
--steps_per_closure steps (default 20, like the pscluster job) in a
tf.while_loop over the per-worker iterator, and returns nothing (TF's advice:
no per-closure copy-back). An epoch is ceil(60000/64) = 938 steps, scheduled
as closures of 20 steps (the last one 18) and ended by coordinator.join().
Evaluation: accuracy and loss on the 10k test set, once, after training, on
the chief with the final variables (not timed).

dispatch: closures/s of a no-op tf.function (no inputs, no outputs) scheduled
through coordinator.schedule on a cluster of 1 PS and N workers, after a
warm-up, over about --seconds of scheduling followed by join().
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

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = "/usr/share/datasets/fashion-mnist"


# --------------------------------------------------------------------------
# Orchestrator (no TensorFlow here)
# --------------------------------------------------------------------------

def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held open together while picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent():
    # Linux: SIGKILL this child when the orchestrator dies (even by SIGKILL).
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Cluster:
    """PS and worker servers (and later the chief) as child processes."""

    def __init__(self, num_ps, num_workers, log_dir, threads):
        self.log_dir = log_dir
        self.threads = threads
        ports = free_ports(1 + num_ps + num_workers)
        self.spec = {
            "chief": ["127.0.0.1:%d" % ports[0]],
            "ps": ["127.0.0.1:%d" % p for p in ports[1:1 + num_ps]],
            "worker": ["127.0.0.1:%d" % p for p in ports[1 + num_ps:]],
        }
        self.procs = []  # (name, Popen)

    def _env(self, task_type, index):
        env = dict(os.environ)
        env["TF_CONFIG"] = json.dumps({"cluster": self.spec,
                                       "task": {"type": task_type, "index": index},
                                       "rpc_layer": "grpc"})
        env["GRPC_FAIL_FAST"] = "use_caller"  # required on every task (TF docs)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        return env

    def spawn(self, name, task_type, index, extra_args):
        log = open(os.path.join(self.log_dir, name + ".log"), "w")
        cmd = [sys.executable, os.path.abspath(__file__), "_" + task_type,
               "--intra", str(self.threads[task_type][0]),
               "--inter", str(self.threads[task_type][1])] + extra_args
        p = subprocess.Popen(cmd, env=self._env(task_type, index), stdout=log,
                             stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        log.close()
        self.procs.append((name, p))
        return p

    def start_servers(self):
        for i in range(len(self.spec["ps"])):
            self.spawn("ps-%d" % i, "ps", i, [])
        for i in range(len(self.spec["worker"])):
            self.spawn("worker-%d" % i, "worker", i, [])

    def check_alive(self):
        for name, p in self.procs:
            if p.poll() is not None and name != "chief":
                raise RuntimeError("%s (pid %d) exited with %s; log: %s" % (
                    name, p.pid, p.returncode, os.path.join(self.log_dir, name + ".log")))

    def stop(self):
        """Stops every child by pid: SIGTERM, then SIGKILL after 5 s."""
        for _, p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 5
        for _, p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        return [p.pid for _, p in self.procs]


def run_experiment(num_ps, num_workers, chief_args, timeout_s, threads, keep_logs=False,
                   cluster_cls=None, name="compare_tf"):
    """Runs the cluster's servers and its chief; returns the chief's result.

    cluster_cls: the Cluster class whose children run (default Cluster: this
    script's); name: the log directory's prefix and the name in warnings.
    """
    log_dir = tempfile.mkdtemp(prefix=name + "-")
    out = os.path.join(log_dir, "result.json")
    cluster = (cluster_cls or Cluster)(num_ps, num_workers, log_dir, threads)
    t_start = time.time()
    ok = False
    try:
        cluster.start_servers()
        chief = cluster.spawn("chief", "chief", 0, chief_args + ["--out", out])
        deadline = time.time() + timeout_s
        while chief.poll() is None:
            cluster.check_alive()
            if time.time() > deadline:
                raise RuntimeError("chief timed out after %d s; logs in %s" % (timeout_s, log_dir))
            time.sleep(0.2)
        if chief.returncode != 0 or not os.path.exists(out):
            with open(os.path.join(log_dir, "chief.log")) as f:
                tail = f.read()[-4000:]
            raise RuntimeError("chief exited with %s; logs in %s; chief log tail:\n%s" % (
                chief.returncode, log_dir, tail))
        with open(out) as f:
            result = json.load(f)
        ok = True
    finally:
        pids = cluster.stop()
        leftover = [pid for pid in pids if _pid_alive(pid)]
        if leftover:
            print("%s: WARNING: children still alive: %s" % (name, leftover), file=sys.stderr)
        if ok and not keep_logs:
            for entry in os.listdir(log_dir):
                os.unlink(os.path.join(log_dir, entry))
            os.rmdir(log_dir)
        elif keep_logs:
            print("%s: logs in %s" % (name, log_dir), file=sys.stderr)
    result["process_wall_seconds"] = time.time() - t_start
    result["child_pids"] = pids
    return result


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); Popen.wait() reaped ours already.
    return True


def parse_threads(a):
    return {"ps": (a.ps_intra, a.ps_inter), "worker": (a.worker_intra, a.worker_inter),
            "chief": (a.chief_intra, a.chief_inter)}


def main_train(a):
    chief_args = ["--mode", "train", "--epochs", str(a.epochs), "--batch", str(a.batch),
                  "--steps_per_closure", str(a.steps_per_closure), "--lr", str(a.lr),
                  "--seed", str(a.seed)]
    r = run_experiment(a.ps, a.workers, chief_args, a.timeout_s, parse_threads(a), a.keep_logs)
    r.update({"system": "tensorflow", "ps": a.ps, "workers": a.workers,
              "threads": {k: {"intra_op": v[0], "inter_op": v[1]}
                          for k, v in parse_threads(a).items()}})
    print(json.dumps(r, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)


def main_dispatch(a):
    rows = []
    version = None
    for w in [int(x) for x in a.workers.split(",")]:
        chief_args = ["--mode", "dispatch", "--seconds", str(a.seconds)]
        r = run_experiment(1, w, chief_args, a.timeout_s, parse_threads(a), a.keep_logs)
        version = r.get("tf_version")
        row = {"workers": w, "ps": 1, "closures": r["closures"], "seconds": r["seconds"],
               "closures_per_sec": r["closures_per_sec"]}
        rows.append(row)
        print("compare_tf: TF dispatch, %d worker(s): %.0f closures/s (%d closures in %.2f s)"
              % (w, row["closures_per_sec"], row["closures"], row["seconds"]), file=sys.stderr)
    out = {"system": "tensorflow", "tf_version": version,
           "what": "closures/s of a no-op tf.function (no args, no outputs) through "
                   "ClusterCoordinator.schedule, then join(); 1 PS + N workers on loopback",
           "threads": {k: {"intra_op": v[0], "inter_op": v[1]}
                       for k, v in parse_threads(a).items()},
           "dispatch": rows}
    print(json.dumps(out, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


# --------------------------------------------------------------------------
# Child processes (TensorFlow)
# --------------------------------------------------------------------------

def _exit_on_sigterm():
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))


def child_server(a):
    """A PS or worker: a tf.distribute.Server from TF_CONFIG, run until killed."""
    _exit_on_sigterm()
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=a.intra,
                                      inter_op_parallelism_threads=a.inter)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc",
                                  config=config, start=True)
    print("server %s:%d started (intra %d, inter %d)" % (
        resolver.task_type, resolver.task_id, a.intra, a.inter), flush=True)
    server.join()


def load_idx(images_gz, labels_gz):
    with gzip.open(images_gz, "rb") as f:
        buf = f.read()
    import numpy as np
    magic, n, rows, cols = np.frombuffer(buf, ">u4", count=4, offset=0)
    assert magic == 2051, images_gz
    images = np.frombuffer(buf, np.uint8, offset=16).reshape(n, rows * cols)
    with gzip.open(labels_gz, "rb") as f:
        lbuf = f.read()
    magic, m = np.frombuffer(lbuf, ">u4", count=2, offset=0)
    assert magic == 2049 and m == n, labels_gz
    labels = np.frombuffer(lbuf, np.uint8, offset=8)
    return images, labels


def _make_strategy(tf):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    return strategy, coordinator


def run_epochs(tf, coordinator, dataset_fn, train_closure, steps_per_epoch, spc, epochs,
               workers):
    """Warm-up (not timed), then `epochs` timed epochs of closures of `spc` steps.

    Not timed: per-worker datasets and iterators, tracing. A zero-step closure
    traces train_closure(iterator, steps) and builds the iterator on the worker
    that runs it; 2 per worker so that (with one closure in flight per worker)
    every worker very likely builds its iterator here. Each epoch schedules
    ceil(steps_per_epoch / spc) closures and joins. Returns (warm-up seconds,
    each epoch's seconds, training seconds, the epoch's closure plan).
    """
    plan = [spc] * (steps_per_epoch // spc)
    if steps_per_epoch % spc:
        plan.append(steps_per_epoch % spc)
    step_tensors = {n: tf.constant(n, tf.int32) for n in set(plan) | {0}}
    t0 = time.perf_counter()
    per_worker_iter = iter(coordinator.create_per_worker_dataset(dataset_fn))
    for _ in range(2 * workers):
        coordinator.schedule(train_closure, args=(per_worker_iter, step_tensors[0]))
    coordinator.join()
    warmup_s = time.perf_counter() - t0
    epoch_seconds = []
    t_train = time.perf_counter()
    for _ in range(epochs):
        te = time.perf_counter()
        for n in plan:
            coordinator.schedule(train_closure, args=(per_worker_iter, step_tensors[n]))
        coordinator.join()
        epoch_seconds.append(time.perf_counter() - te)
    return warmup_s, epoch_seconds, time.perf_counter() - t_train, plan


def chief_train(a, tf):
    import numpy as np
    tf.random.set_seed(a.seed)
    train_x, train_y = load_idx(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz"),
                                os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz"))
    test_x, test_y = load_idx(os.path.join(DATA_DIR, "t10k-images-idx3-ubyte.gz"),
                              os.path.join(DATA_DIR, "t10k-labels-idx1-ubyte.gz"))
    t0 = time.perf_counter()
    strategy, coordinator = _make_strategy(tf)
    connect_s = time.perf_counter() - t0

    def kernel(shape, seed):
        # Glorot uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)).
        limit = np.sqrt(6.0 / (shape[0] + shape[1]))
        return tf.random.stateless_uniform(shape, seed=[a.seed, seed], minval=-limit,
                                           maxval=limit)
    with strategy.scope():
        w1 = tf.Variable(kernel((784, 256), 1), name="dense0/kernel")
        b1 = tf.Variable(tf.zeros([256]), name="dense0/bias")
        w2 = tf.Variable(kernel((256, 10), 2), name="dense1/kernel")
        b2 = tf.Variable(tf.zeros([10]), name="dense1/bias")
        params = [w1, b1, w2, b2]
        slots = []
        for p in params:
            with strategy.extended.colocate_vars_with(p):
                m = tf.Variable(tf.zeros_like(p), name=p.name.split(":")[0] + "/m")
                v = tf.Variable(tf.zeros_like(p), name=p.name.split(":")[0] + "/v")
            slots.append((m, v))
        with strategy.extended.colocate_vars_with(w1):
            iterations = tf.Variable(0, dtype=tf.int64, name="iterations")
    placement = {p.name: p.device for p in params + [s for mv in slots for s in mv] + [iterations]}

    lr = tf.constant(a.lr, tf.float32)
    beta1 = tf.constant(0.9, tf.float32)
    beta2 = tf.constant(0.999, tf.float32)
    eps = tf.constant(1e-7, tf.float32)
    batch = a.batch

    def dataset_fn(_input_context=None):
        ds = tf.data.Dataset.from_tensor_slices((train_x, train_y))
        ds = ds.shuffle(len(train_x), reshuffle_each_iteration=True).repeat()
        ds = ds.batch(batch, drop_remainder=True)
        ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, tf.cast(y, tf.int32)))
        return ds.prefetch(2)

    @tf.function
    def train_closure(iterator, num_steps):
        for _ in tf.range(num_steps):
            x, y = next(iterator)
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, w1) + b1)
                logits = tf.matmul(h, w2) + b2
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            grads = tape.gradient(loss, params)
            t = tf.cast(iterations.assign_add(1), tf.float32)
            b1p = tf.pow(beta1, t)
            b2p = tf.pow(beta2, t)
            for p, (m, v), g in zip(params, slots, grads):
                tf.raw_ops.ResourceApplyAdam(var=p.handle, m=m.handle, v=v.handle,
                                             beta1_power=b1p, beta2_power=b2p, lr=lr,
                                             beta1=beta1, beta2=beta2, epsilon=eps, grad=g)

    steps_per_epoch = -(-len(train_x) // batch)  # 938: every example once (+ 32 extra)
    warmup_s, epoch_seconds, train_s, plan = run_epochs(
        tf, coordinator, dataset_fn, train_closure, steps_per_epoch, a.steps_per_closure,
        a.epochs, a.workers_hint)
    steps = int(iterations.numpy())
    examples = steps * batch

    # Evaluation on the chief with the final variables (not timed).
    W1, B1, W2, B2 = [p.numpy() for p in params]
    x = test_x.astype(np.float32) / 255.0
    logits = np.maximum(x @ W1 + B1, 0) @ W2 + B2
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    eval_loss = float(-logp[np.arange(len(test_y)), test_y].mean())
    eval_acc = float((logits.argmax(axis=1) == test_y).mean())
    return {
        "tf_version": tf.__version__,
        "epochs": a.epochs, "per_replica_batch": batch, "steps_per_closure": a.steps_per_closure,
        "closures_per_epoch": len(plan), "steps_per_epoch": steps_per_epoch,
        "steps": steps, "examples": examples,
        "train_seconds": train_s, "examples_per_sec": examples / train_s,
        "epoch_seconds": epoch_seconds,
        "eval_accuracy": eval_acc, "eval_loss": eval_loss,
        "connect_seconds": connect_s, "warmup_seconds": warmup_s,
        "placement": placement,
    }


def chief_dispatch(a, tf):
    strategy, coordinator = _make_strategy(tf)
    del strategy

    @tf.function
    def noop():
        pass

    for _ in range(50):  # warm-up: tracing, first RPCs
        coordinator.schedule(noop)
    coordinator.join()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        for _ in range(50):
            coordinator.schedule(noop)
        n += 50
    coordinator.join()
    secs = time.perf_counter() - t0
    return {"tf_version": tf.__version__, "closures": n, "seconds": secs,
            "closures_per_sec": n / secs}


def write_result(path, result):
    """Writes a chief's result JSON atomically (the orchestrator polls for it)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.rename(tmp, path)
    sys.stdout.flush()
    sys.stderr.flush()


def run_chief(a, compute):
    """A chief child: TF's thread settings, `compute(a, tf)`, its result to a.out."""
    _exit_on_sigterm()
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(a.intra)
    tf.config.threading.set_inter_op_parallelism_threads(a.inter)
    a.workers_hint = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    write_result(a.out, compute(a, tf))
    # Skip interpreter teardown: stopping a coordinator with remote eager
    # contexts can block; the orchestrator stops the servers anyway.
    os._exit(0)


def child_chief(a):
    run_chief(a, lambda a, tf: chief_train(a, tf) if a.mode == "train" else chief_dispatch(a, tf))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def add_threads(q):
        # 2 cores shared by 5+ processes: one intra-op thread each; 2 inter-op
        # threads so a worker can overlap its input pipeline / RPCs with compute.
        # (inter_op 1 everywhere deadlocks: the chief never gets past start-up.
        # 0 = TF's default, one per core.)
        for role in ("ps", "worker", "chief"):
            q.add_argument("--%s_intra" % role, type=int, default=1)
            q.add_argument("--%s_inter" % role, type=int, default=2)
        q.add_argument("--timeout_s", type=int, default=1800)
        q.add_argument("--keep_logs", action="store_true")
        q.add_argument("--json", default="")

    t = sub.add_parser("train")
    t.add_argument("--ps", type=int, default=2)
    t.add_argument("--workers", type=int, default=2)
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--steps_per_closure", type=int, default=20)
    t.add_argument("--lr", type=float, default=0.001)
    t.add_argument("--seed", type=int, default=42)
    add_threads(t)

    d = sub.add_parser("dispatch")
    d.add_argument("--workers", default="1,2,4")
    d.add_argument("--seconds", type=float, default=5.0)
    add_threads(d)

    for role in ("_ps", "_worker", "_chief"):
        c = sub.add_parser(role)
        c.add_argument("--intra", type=int, default=1)
        c.add_argument("--inter", type=int, default=2)
        c.add_argument("--mode", default="train")
        c.add_argument("--epochs", type=int, default=3)
        c.add_argument("--batch", type=int, default=64)
        c.add_argument("--steps_per_closure", type=int, default=20)
        c.add_argument("--lr", type=float, default=0.001)
        c.add_argument("--seed", type=int, default=42)
        c.add_argument("--seconds", type=float, default=5.0)
        c.add_argument("--out", default="")

    a = p.parse_args()
    if not a.cmd.startswith("_"):
        # SIGTERM to the orchestrator unwinds through the finally blocks that
        # stop the children (which also die with it through PDEATHSIG).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.cmd == "train":
        main_train(a)
    elif a.cmd == "dispatch":
        main_dispatch(a)
    elif a.cmd in ("_ps", "_worker"):
        child_server(a)
    else:
        child_chief(a)


if __name__ == "__main__":
    main()
