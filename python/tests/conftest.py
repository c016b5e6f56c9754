"""A local cluster (2 PS, 2 workers, a coordinator with a token) shared by
the tests of one session, stopped at its end, and the jobs they submit."""

import time

import pytest

import pscluster

DATA = "/usr/share/datasets/fashion-mnist"


def fashion_job(name="py-test", train_limit=10000, eval_limit=1000, epochs=1):
    """The tests' Fashion-MNIST MLP (tests/testlib.sh write_job's base job)."""
    train_limit_line = f"    limit: {train_limit}\n" if train_limit else ""
    return (
        f"name: {name}\n"
        "seed: 7\n"
        "model:\n"
        "  inputs: {dense: 784}\n"
        "  layers: [{dense: {units: 64, activation: relu}}, {dense: {units: 10}}]\n"
        "optimizer: {type: adam, learning_rate: 0.002}\n"
        "data:\n"
        "  train:\n"
        f"    images: {DATA}/train-images-idx3-ubyte.gz\n"
        f"    labels: {DATA}/train-labels-idx1-ubyte.gz\n"
        f"{train_limit_line}"
        "  eval:\n"
        f"    images: {DATA}/t10k-images-idx3-ubyte.gz\n"
        f"    labels: {DATA}/t10k-labels-idx1-ubyte.gz\n"
        f"    limit: {eval_limit}\n"
        "  per_replica_batch: 64\n"
        f"train: {{epochs: {epochs}, steps_per_closure: 10, closures_per_worker: 1}}\n")


@pytest.fixture(scope="session")
def cluster():
    with pscluster.Cluster.local(ps=2, workers=2, start_timeout=60) as c:
        yield c


@pytest.fixture
def client(cluster):
    return pscluster.Client(cluster.address, token=cluster.token, tls=cluster.tls)


def wait_until(predicate, timeout, what):
    """Polls `predicate` until it returns something true, at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture(scope="session")
def py_cluster():
    """2 PS and 2 Python workers (python3 -m pscluster.worker) for the
    ClusterCoordinator tests."""
    with pscluster.Cluster.local(ps=2, workers=2, worker="python", start_timeout=60) as c:
        yield c


@pytest.fixture
def strategy(py_cluster):
    """A ParameterServerStrategy on py_cluster (2 shards per variable, SGD
    0.5 by default), closed at the end of the test so that the workers are
    released for the next one."""
    s = pscluster.ParameterServerStrategy(
        py_cluster, variable_partitioner=pscluster.partitioners.FixedShardsPartitioner(2),
        optimizer=pscluster.optimizers.SGD(0.5), worker_timeout=10.0, cluster_wait=30.0)
    yield s
    s.close()
