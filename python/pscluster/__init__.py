"""pscluster: train on a parameter-server cluster from Python.

Two faces over pscluster's C++ core, through the pybind11 extension
`_pscluster`:

* TF's ParameterServerStrategy programming model (docs/cluster_coordinator.md):

    import numpy as np
    import pscluster

    cluster = pscluster.Cluster.local(ps=2, workers=2, worker="python")
    strategy = pscluster.ParameterServerStrategy(
        cluster, variable_partitioner=pscluster.partitioners.FixedShardsPartitioner(2))
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        w = pscluster.Variable(shape=(4,), initializer="zeros",
                               optimizer=pscluster.optimizers.SGD(0.1))

    def step(x):
        value = w.read()                          # pull (float32 NumPy)
        pscluster.apply_gradients([(value - x, w)])  # one push, applied once
        return float(value.sum())

    result = coordinator.schedule(step, args=(np.ones(4, np.float32),))
    coordinator.join()
    print(result.fetch())

* The job client for YAML jobs:

    with pscluster.Cluster.local(ps=2, workers=2) as cluster:
        client = pscluster.Client(cluster.address, token=cluster.token, tls=cluster.tls)
        job_id = client.submit("examples/fashion_mnist_mlp.yaml")
        final = client.watch(job_id, timeout=600)

Failures raise pscluster.Error, whose .code is the gRPC status code name.
Checkpoints: strategy.save(dir) / strategy.restore(dir) (any PS count),
periodic ones and PS recovery (ParameterServerStrategy's checkpoint_*
options); pscluster.HashEmbedding is a bounded hash-table embedding.
"""

import importlib

from _pscluster import Error
from pscluster import initializers, optimizers, partitioners
from pscluster._client import TLS, Client
from pscluster._cluster import Cluster
from pscluster._context import current as context

# Imported on first use: they need NumPy and cloudpickle, which the job
# client does not.
_LAZY = {
    "ClusterCoordinator": "pscluster._coordinator",
    "ParameterServerStrategy": "pscluster._coordinator",
    "PerWorkerDataset": "pscluster._coordinator",
    "PerWorkerIterator": "pscluster._coordinator",
    "RemoteValue": "pscluster._coordinator",
    "Embedding": "pscluster._variables",
    "HashEmbedding": "pscluster._variables",
    "IndexedSlices": "pscluster._variables",
    "Variable": "pscluster._variables",
    "apply_gradients": "pscluster._variables",
    "read": "pscluster._variables",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pscluster' has no attribute {name!r}")

__all__ = [
    "Client", "Cluster", "ClusterCoordinator", "Embedding", "Error", "HashEmbedding",
    "IndexedSlices",
    "ParameterServerStrategy", "PerWorkerDataset", "PerWorkerIterator", "RemoteValue", "TLS",
    "Variable", "apply_gradients", "context", "initializers", "optimizers", "partitioners",
    "read",
]
