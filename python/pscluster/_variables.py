"""PS-held variables: pscluster.Variable and pscluster.Embedding, and the
calls a scheduled function makes on them (read, lookup, apply_gradients).

A variable is declared on the coordinator under strategy.scope(): the C++
ClusterCoordinator creates it on the PS (partitioned by the strategy's
variable_partitioner) before the first schedule. Inside a scheduled
function, on a worker, `var.read()` pulls it, `emb.lookup(ids)` pulls only
those rows, and `apply_gradients` pushes one step under the closure's lease
(applied once however often the closure is retried). Values are float32
NumPy arrays; torch tensors are accepted as gradients (pscluster.torch_bridge
gives tensors from pulls).
"""

import threading

import numpy as np

from pscluster import _context

_scope = threading.local()


def _current_strategy():
    stack = getattr(_scope, "stack", None)
    if not stack:
        raise ValueError("create pscluster.Variable and pscluster.Embedding under "
                         "`with strategy.scope():` (a pscluster.ParameterServerStrategy)")
    return stack[-1]


def _push_scope(strategy):
    if not hasattr(_scope, "stack"):
        _scope.stack = []
    _scope.stack.append(strategy)


def _pop_scope():
    _scope.stack.pop()


def _as_float32(value, what):
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    a = np.ascontiguousarray(value, dtype=np.float32)
    return a


class Variable:
    """A float32 variable held by the PS tasks (TF: a variable created under
    a ParameterServerStrategy's scope).

    shape: every dimension >= 1 (pscluster.Error INVALID_ARGUMENT otherwise).
    initializer: run on the PS: a name ("zeros", "glorot_uniform", ...) or
        pscluster.initializers.*. Initial values from the program are not
        supported (the PS initializes).
    optimizer: the PS-side optimizer (pscluster.optimizers.Adam(0.001), ...);
        default: the strategy's `optimizer`.
    """

    def __init__(self, shape=None, initializer="zeros", name=None, optimizer=None,
                 initial_value=None, dtype="float32"):
        if initial_value is not None:
            raise NotImplementedError(
                "pscluster.Variable takes a shape and a PS-side initializer, not an "
                "initial_value (the PS initializes its shards)")
        if str(np.dtype(dtype)) != "float32":
            raise TypeError(f"PS variables are float32, not {dtype}")
        if shape is None:
            raise ValueError("pscluster.Variable needs a shape")
        strategy = _current_strategy()
        try:
            self._shape = tuple(int(d) for d in shape)
        except TypeError:
            self._shape = (int(shape),)
        self._name = strategy._unique_name(name or type(self).__name__)
        strategy._create_variable(self._name, self._shape, initializer, optimizer)

    @classmethod
    def _remote(cls, name, shape):
        v = cls.__new__(cls)
        v._name = name
        v._shape = tuple(shape)
        return v

    def __reduce__(self):
        # A closure's captured variable travels as its name and shape.
        return (_remote_variable, (type(self), self._name, self._shape))

    @property
    def name(self):
        return self._name

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return np.float32

    def read(self):
        """Pulls the whole variable (shards assembled): a float32 array.
        Only inside a scheduled function."""
        return _context.current().pull([self._name])[0]

    read_value = read

    def __repr__(self):
        return f"<pscluster.{type(self).__name__} '{self._name}' shape={self._shape}>"


def _remote_variable(cls, name, shape):
    return cls._remote(name, shape)


class Embedding(Variable):
    """A [rows, dim] table on the PS read by rows (TF: a Keras Embedding under
    a ParameterServerStrategy, sharded along rows by the partitioner).
    For any int64 ids (a dynamic vocabulary) see HashEmbedding."""

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", name=None,
                 optimizer=None):
        super().__init__(shape=(int(input_dim), int(output_dim)),
                         initializer=embeddings_initializer, name=name or "embedding",
                         optimizer=optimizer)

    @property
    def input_dim(self):
        return self._shape[0]

    @property
    def output_dim(self):
        return self._shape[1]

    def lookup(self, ids):
        """Pulls rows `ids` (any shape of ints in [0, input_dim)): an array of
        ids.shape + (output_dim,). Only inside a scheduled function."""
        ids = np.asarray(ids, dtype=np.int64)
        rows = _context.current().pull_rows(self._name, ids.reshape(-1))
        return rows.reshape(ids.shape + tuple(self._shape[1:]))

    __call__ = lookup


class HashEmbedding(Variable):
    """A bounded hash-table embedding (TF's dynamic embedding / tf.lookup
    idea): any int64 id -> a float32 row of `output_dim`, one shard per PS
    (ids hashed to shards). A row is created by `embeddings_initializer` on
    first touch (lookup or gradient); past `max_rows` rows per PS shard
    (0: unbounded) the PS evicts by `eviction`: "lfu" (least frequently
    touched) or "age" (least recently touched). Read with lookup(ids),
    trained by row gradients (pscluster.IndexedSlices); never read whole.
    Checkpoints re-hash its rows into any PS count.

    pscluster.Error INVALID_ARGUMENT for output_dim < 1, max_rows < 0 or an
    unknown eviction.
    """

    def __init__(self, output_dim, max_rows=0, eviction="lfu",
                 embeddings_initializer="uniform", name=None, optimizer=None):
        strategy = _current_strategy()
        self._shape = (int(output_dim),)
        self._name = strategy._unique_name(name or "hash_embedding")
        strategy._create_hash_table(self._name, int(output_dim), int(max_rows), eviction,
                                    embeddings_initializer, optimizer)

    @property
    def output_dim(self):
        return self._shape[0]

    @property
    def shape(self):
        """(None, output_dim): the number of rows is dynamic."""
        return (None, self._shape[0])

    def read(self):
        raise TypeError(f"HashEmbedding '{self._name}' is read by rows only: use lookup(ids)")

    read_value = read

    def lookup(self, ids):
        """Pulls rows `ids` (any shape of int64s; unseen ids get new rows):
        an array of ids.shape + (output_dim,). Only inside a scheduled
        function."""
        ids = np.asarray(ids, dtype=np.int64)
        rows = _context.current().pull_rows(self._name, ids.reshape(-1))
        return rows.reshape(ids.shape + (self._shape[0],))

    __call__ = lookup


class IndexedSlices:
    """Row gradients (TF's tf.IndexedSlices): `values[k]` is the gradient of
    row `indices[k]`; repeated indices are summed."""

    def __init__(self, values, indices):
        self.values = values
        self.indices = indices


def read(variables):
    """Pulls several variables in one request per PS; a list of arrays."""
    return _context.current().pull([v.name for v in variables])


def apply_gradients(grads_and_vars):
    """One step: pushes each (gradient, variable) pair; the variables'
    PS-side optimizers apply them. Dense gradients (shaped as their
    variables) go in one push; each IndexedSlices (row gradients, e.g. of an
    Embedding) is one more push of those rows. Pairs with a None gradient
    are skipped. Returns the number of pushes (steps) made."""
    ctx = _context.current()
    dense, rows = [], []
    for grad, var in grads_and_vars:
        if grad is None:
            continue
        if not isinstance(var, Variable):
            raise TypeError(f"apply_gradients takes (gradient, pscluster.Variable) pairs, "
                            f"got a {type(var).__name__}")
        if isinstance(grad, IndexedSlices):
            ids = np.asarray(grad.indices, dtype=np.int64).reshape(-1)
            row_shape = var._shape if isinstance(var, HashEmbedding) else var.shape[1:]
            values = _as_float32(grad.values, var.name).reshape(
                (ids.shape[0],) + tuple(row_shape))
            rows.append((var.name, ids, values))
        elif isinstance(var, HashEmbedding):
            raise TypeError(f"HashEmbedding '{var.name}' takes row gradients "
                            "(pscluster.IndexedSlices), not a dense gradient")
        else:
            dense.append((var.name, _as_float32(grad, var.name)))
    pushes = 0
    if dense:
        ctx.push(dense)
        pushes += 1
    for name, ids, values in rows:
        ctx.push_rows(name, ids, values)
        pushes += 1
    return pushes
