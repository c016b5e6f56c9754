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
