"""ParameterServerStrategy and ClusterCoordinator (TF names), thin over the
C++ ClusterCoordinator (api/pscluster/cluster_coordinator.h) through the
extension (python/coordinator_bindings.cc).

Python pickles each scheduled function with its arguments (cloudpickle) and
hands the bytes to the C++ core's Schedule; the core queues, dispatches,
retries on worker failures and fills the RemoteValue; the Python workers
(pscluster.worker) unpickle and run it. Nothing of the scheduling is in
Python.
"""

import contextlib
import itertools
import os
import pickle
import sys
import sysconfig
import uuid

import cloudpickle

import _pscluster
from pscluster import partitioners as _partitioners
from pscluster import _variables
from pscluster.optimizers import Optimizer, initializer_text


def _error(code, message):
    e = _pscluster.Error(f"{code}: {message}")
    e.code = code
    e.message = message
    return e


class ParameterServerStrategy:
    """TF's tf.distribute.ParameterServerStrategy over a pscluster.Cluster.

    cluster: a pscluster.Cluster (Cluster.local(worker="python"),
        from_addresses, from_cluster_file, from_tf_config).
    variable_partitioner: None, a pscluster.partitioners.* or its text
        ("fixed:2"); pscluster.Error INVALID_ARGUMENT / TypeError otherwise.
    optimizer: the PS-side optimizer of variables created without one.

    Checkpoints (save, restore, periodic ones, PS recovery) are options of
    the strategy, as the C++ ClusterCoordinator::Options they map to:
    checkpoint_root: the PS tasks' --checkpoint_root as this program reaches
        it. Default (None): RUN_DIR/checkpoints for a Cluster.local (its PS
        use that root), none otherwise. "" or none: save and restore raise
        FAILED_PRECONDITION and a restarted PS rolls the job back to the
        initializers.
    checkpoint_dir: periodic checkpoints go here (relative to the root),
        every checkpoint_every_steps steps and/or checkpoint_every seconds
        (0: off); the newest checkpoint_keep are kept per directory.
    ps_recovery_timeout: seconds a PS recovery waits for every PS.
    Other options are the C++ core's (ClusterCoordinator::Options); times
    are seconds.
    """

    def __init__(self, cluster, variable_partitioner=None, optimizer=None, job_id="",
                 closures_per_worker=1, max_attempts=3, max_steps_per_closure=1 << 20,
                 health_interval=1.0, worker_timeout=20.0, cluster_wait=60.0,
                 ps_timeout=30.0, closure_timeout=300.0, checkpoint_root=None,
                 checkpoint_dir="", checkpoint_every_steps=0, checkpoint_every=0.0,
                 checkpoint_keep=3, ps_recovery_timeout=60.0):
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a pscluster.optimizers.*, not {optimizer!r}")
        self.cluster = cluster
        self.optimizer = optimizer
        self.variable_partitioner = variable_partitioner
        spec = _partitioners.to_spec(variable_partitioner)
        if checkpoint_root is None:
            checkpoint_root = (os.path.join(cluster.run_dir, "checkpoints")
                               if getattr(cluster, "_impl", None) is not None else "")
        self.checkpoint_root = os.fspath(checkpoint_root)
        self._core = _pscluster.ClusterCoordinator(
            cluster.ps_addresses, cluster.worker_addresses, cluster.cluster_file, job_id, spec,
            int(closures_per_worker), int(max_attempts), int(max_steps_per_closure),
            float(health_interval), float(worker_timeout), float(cluster_wait),
            float(ps_timeout), float(closure_timeout), self.checkpoint_root,
            os.fspath(checkpoint_dir), int(checkpoint_every_steps), float(checkpoint_every),
            int(checkpoint_keep), float(ps_recovery_timeout))
        self._names = set()
        self.variables = []

    @contextlib.contextmanager
    def scope(self):
        """Variables and Embeddings created inside live on this strategy's PS."""
        _variables._push_scope(self)
        try:
            yield self
        finally:
            _variables._pop_scope()

    @property
    def num_ps(self):
        return len(self.cluster.ps_addresses)

    @property
    def num_workers(self):
        return len(self.cluster.worker_addresses)

    def _unique_name(self, base):
        name = base
        for i in itertools.count(1):
            if name not in self._names:
                break
            name = f"{base}_{i}"
        return name

    def _create_variable(self, name, shape, initializer, optimizer):
        optimizer = optimizer or self.optimizer
        if optimizer is None:
            raise ValueError(f"variable '{name}' has no optimizer: pass optimizer= to it or to "
                             "ParameterServerStrategy (the PS applies the gradients)")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a pscluster.optimizers.*, not {optimizer!r}")
        self._core.create_variable(name, list(shape), initializer_text(initializer),
                                   optimizer.proto_text())
        self._names.add(name)

    def _create_hash_table(self, name, dim, max_rows, eviction, initializer, optimizer):
        optimizer = optimizer or self.optimizer
        if optimizer is None:
            raise ValueError(f"hash table '{name}' has no optimizer: pass optimizer= to it or "
                             "to ParameterServerStrategy (the PS applies the gradients)")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a pscluster.optimizers.*, not {optimizer!r}")
        self._core.create_hash_table(name, int(dim), int(max_rows), str(eviction).lower(),
                                     initializer_text(initializer), optimizer.proto_text())
        self._names.add(name)

    def save(self, dir):
        """TF's strategy.save: a checkpoint of every variable and hash table
        (values, optimizer slots, step counters) into `dir` (relative to
        checkpoint_root, or absolute under it), as a new ckpt-<id>. A
        consistent cut: dispatch pauses and the closures in flight end
        first. Before the first schedule it creates the variables. Raises
        pscluster.Error: FAILED_PRECONDITION without a checkpoint_root,
        INVALID_ARGUMENT for a dir outside it, a PS's or the storage's error."""
        self._core.save(os.fspath(dir))

    def restore(self, dir):
        """TF's strategy.restore: the newest checkpoint of `dir`, whatever PS
        count and partitioner saved it, re-sharded into this strategy's
        layout; global_step becomes the checkpoint's. Raises pscluster.Error:
        NOT_FOUND when `dir` holds no committed checkpoint,
        FAILED_PRECONDITION naming a variable the checkpoint lacks or saved
        with another shape; errors as save."""
        self._core.restore(os.fspath(dir))

    def close(self):
        """Cancels what is queued, waits for closures in flight and frees the
        variables on the PS. Idempotent."""
        self._core.close()


class RemoteValue:
    """The result of a scheduled function (TF's RemoteValue)."""

    def __init__(self, impl, name):
        self._impl = impl
        self._name = name

    def fetch(self):
        """Blocks until the closure ended; its result, or pscluster.Error: the
        function's exception (with the worker's traceback in the message, and
        .function_error = (type, message, traceback)), CANCELLED when an
        earlier closure failed, or the cluster's error after retries."""
        try:
            data = self._impl.fetch()
        except _pscluster.Error as e:
            fe = self._impl.function_error()
            e.function_error = tuple(fe) if fe else None
            raise
        return pickle.loads(data)

    get = fetch

    def ready(self):
        return self._impl.ready()

    @property
    def closure_id(self):
        return self._impl.closure_id

    def __repr__(self):
        state = "ready" if self.ready() else "pending"
        return f"<pscluster.RemoteValue {self._name} closure {self.closure_id} {state}>"


_SYSTEM_DIRS = tuple(os.path.realpath(p) + os.sep for p in {
    sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")} | {
    "/usr/lib/python3/dist-packages"})
_by_value = set()
# Each module of sys.modules already looked at (name -> module): schedule
# runs once per closure, and resolving every module's path each time cost
# milliseconds per call (stat calls), CPU taken from the workers.
_examined = {}


def _pickle_user_modules_by_value():
    """Functions defined in the program's own modules (not installed ones)
    travel by value: the workers need not have them on their path."""
    for name, module in list(sys.modules.items()):
        if _examined.get(name) is module:
            continue
        _examined[name] = module
        if name in _by_value or name == "__main__" or name.split(".")[0] in (
                "pscluster", "_pscluster"):
            continue
        path = getattr(module, "__file__", None)
        if not path or not os.path.isfile(path):
            continue
        if (os.path.realpath(path).startswith(_SYSTEM_DIRS) or
                os.path.abspath(path).startswith(_SYSTEM_DIRS)):
            continue
        _by_value.add(name)
        try:
            cloudpickle.register_pickle_by_value(module)
        except (ValueError, AttributeError):
            pass


class ClusterCoordinator:
    """TF's tf.distribute.coordinator.ClusterCoordinator(strategy).

    schedule() returns at once; closures run on any free Python worker.
    A worker that dies has its closures retried on another; their pushes are
    applied once. An exception in a function is raised by the next join(),
    done() or schedule() (and by fetch of its RemoteValue), with the
    worker's traceback; closures not yet run are then cancelled.
    """

    def __init__(self, strategy):
        if not isinstance(strategy, ParameterServerStrategy):
            raise TypeError("ClusterCoordinator takes a pscluster.ParameterServerStrategy")
        self.strategy = strategy
        self._core = strategy._core

    def schedule(self, fn, args=(), kwargs=None):
        """Queues fn(*args, **kwargs) on the workers; a RemoteValue.
        pscluster.Error INVALID_ARGUMENT when fn or its arguments cannot be
        pickled (naming fn); the first schedule creates the variables."""
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        if not callable(fn):
            raise TypeError(f"schedule takes a function, not {fn!r}")
        _pickle_user_modules_by_value()
        try:
            payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
        except Exception as e:
            raise _error("INVALID_ARGUMENT",
                         f"cannot pickle function '{name}' or its arguments for the workers "
                         f"(cloudpickle): {type(e).__name__}: {e}") from e
        return RemoteValue(self._core.schedule(name, payload), name)

    def join(self):
        """Blocks until every scheduled function ended; raises the first
        failed one's error (once)."""
        self._core.join()

    def done(self):
        """Whether every scheduled function ended, without blocking."""
        return self._core.done()

    def fetch(self, val):
        """The values of a RemoteValue, or of a structure (list, tuple, dict)
        of them; other leaves as they are."""
        if isinstance(val, RemoteValue):
            return val.fetch()
        if isinstance(val, dict):
            return {k: self.fetch(v) for k, v in val.items()}
        if isinstance(val, (list, tuple)):
            out = [self.fetch(v) for v in val]
            return type(val)(out) if isinstance(val, list) or not hasattr(val, "_fields") \
                else type(val)(*out)
        return val

    def create_per_worker_dataset(self, dataset_fn):
        """TF semantics: dataset_fn() runs on each worker, once per worker
        process, when a scheduled function first uses the dataset's
        iterator there. iter() of the result is passed to scheduled
        functions; next() on it yields that worker's elements. dataset_fn
        returns any iterable (a list, a generator, a torch DataLoader)."""
        return PerWorkerDataset(dataset_fn)

    @property
    def steps(self):
        """Pushes of the closures that ended, each closure counted once."""
        return self._core.steps()

    @property
    def global_step(self):
        """The steps the variables hold (every PS's applied steps): steps -
        lost_steps without a restore; after strategy.restore, the
        checkpoint's step plus the steps since, less those lost since."""
        return self._core.global_step()

    @property
    def lost_steps(self):
        """Of steps, those a PS recovery rolled back (applied after the
        checkpoint it restored); their closures are not run again."""
        return self._core.lost_steps()

    @property
    def ps_recoveries(self):
        """PS failures healed so far (a PS that died or restarted)."""
        return self._core.ps_recoveries()

    def ps_stats(self):
        """Per PS task: a dict with applied_steps, duplicate_steps, ...
        for this program's job."""
        return self._core.ps_stats()

    @property
    def job_id(self):
        return self._core.job_id

    def close(self):
        self.strategy.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class PerWorkerDataset:
    """A dataset created on each worker (create_per_worker_dataset)."""

    def __init__(self, dataset_fn):
        try:
            _pickle_user_modules_by_value()
            self._fn_bytes = cloudpickle.dumps(dataset_fn)
        except Exception as e:
            raise _error("INVALID_ARGUMENT", f"cannot pickle dataset_fn {dataset_fn!r}: {e}") \
                from e
        self._id = uuid.uuid4().hex

    def __iter__(self):
        return PerWorkerIterator(self._id, self._fn_bytes)


# On a worker: dataset id -> that worker's iterator.
_worker_iterators = {}


class PerWorkerIterator:
    """Passed to a scheduled function: next() gives this worker's next
    element (the worker's iterator lives in the worker process)."""

    def __init__(self, dataset_id, fn_bytes):
        self._id = dataset_id
        self._fn_bytes = fn_bytes

    def __reduce__(self):
        return (PerWorkerIterator, (self._id, self._fn_bytes))

    def _local(self):
        it = _worker_iterators.get(self._id)
        if it is None:
            it = iter(cloudpickle.loads(self._fn_bytes)())
            _worker_iterators[self._id] = it
        return it

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._local())

    def get_next(self):
        return next(self)
