"""strategy.save / strategy.restore, the step counters and HashEmbedding
(pscluster._coordinator, pscluster._variables) against real servers: the
2 ps_server and 2 Python workers of conftest's py_cluster, whose PS write
checkpoints under RUN_DIR/checkpoints."""

import os
import signal
import subprocess
import time

import numpy as np
import pytest

import pscluster
from conftest import wait_until

_IDS = np.array([5, 10**12, -7, 3], np.int64)


def _train(strategy, steps):
    """Declares w (4,) and the hash table h (dim 2) under `strategy`, runs
    `steps` closures of one push each; returns (coordinator, w, h)."""
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        w = pscluster.Variable(shape=(4,), initializer="zeros", name="w")
        h = pscluster.HashEmbedding(2, max_rows=100, eviction="lfu",
                                    embeddings_initializer="zeros", name="h")

    def step(k):
        rows = h.lookup(_IDS)
        assert rows.shape == (4, 2)
        return pscluster.apply_gradients([
            (np.arange(4, dtype=np.float32) * k, w),
            (pscluster.IndexedSlices(np.full((4, 2), k, np.float32), _IDS), h)])

    for k in range(1, steps + 1):
        coordinator.schedule(step, args=(float(k),))
    coordinator.join()
    return coordinator, w, h


def _read(coordinator, w, h):
    return coordinator.schedule(lambda: (w.read(), h.lookup(_IDS))).fetch()


def test_hash_embedding_trained_and_read(strategy):
    coordinator, w, h = _train(strategy, 3)
    assert h.name == "h" and h.output_dim == 2 and h.shape == (None, 2)
    wv, rows = _read(coordinator, w, h)
    # SGD 0.5, each step one push of w and one of h's rows (k = 1, 2, 3).
    np.testing.assert_allclose(wv, -0.5 * 6 * np.arange(4))
    np.testing.assert_allclose(rows, np.full((4, 2), -0.5 * 6))
    # Any shape of ids; ids never touched get their initializer's rows.
    out = coordinator.schedule(lambda: h.lookup(np.array([[5, 99], [-7, 2**40]]))).fetch()
    np.testing.assert_allclose(out, [[[-3, -3], [0, 0]], [[-3, -3], [0, 0]]])
    assert coordinator.steps == 6 and coordinator.global_step == 6
    assert coordinator.lost_steps == 0 and coordinator.ps_recoveries == 0
    assert all("h" in "".join(s["variables"]) for s in coordinator.ps_stats())

    def whole():
        return h.read()

    with pytest.raises(pscluster.Error, match="lookup"):
        coordinator.schedule(whole).fetch()
    with pytest.raises(pscluster.Error):
        coordinator.join()


def test_hash_embedding_bad_input(strategy):
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        with pytest.raises(pscluster.Error) as e:
            pscluster.HashEmbedding(2, eviction="fifo", name="bad_eviction")
        assert e.value.code == "INVALID_ARGUMENT" and "eviction" in e.value.message
        with pytest.raises(pscluster.Error) as e:
            pscluster.HashEmbedding(0, name="bad_dim")
        assert e.value.code == "INVALID_ARGUMENT"
        with pytest.raises(pscluster.Error) as e:
            pscluster.HashEmbedding(2, max_rows=-1, name="bad_rows")
        assert e.value.code == "INVALID_ARGUMENT"
        h = pscluster.HashEmbedding(2, name="ok")

    def dense():
        pscluster.apply_gradients([(np.ones(2, np.float32), h)])

    with pytest.raises(pscluster.Error, match="IndexedSlices"):
        coordinator.schedule(dense).fetch()
    with pytest.raises(pscluster.Error):
        coordinator.join()


def test_save_then_restore_into_another_ps_count(strategy, py_cluster):
    coordinator, w, h = _train(strategy, 4)
    strategy.save("py-ckpt")
    root = os.path.join(py_cluster.run_dir, "checkpoints")
    assert strategy.checkpoint_root == root
    assert any(n.startswith("ckpt-") for n in os.listdir(os.path.join(root, "py-ckpt")))
    saved_w, saved_rows = _read(coordinator, w, h)
    saved_step = coordinator.global_step
    assert saved_step == 8
    strategy.close()

    # The same servers, one PS: the 2-shard checkpoint re-sharded into it.
    one_ps = pscluster.ParameterServerStrategy(
        pscluster.Cluster.from_addresses(py_cluster.ps_addresses[:1],
                                         py_cluster.worker_addresses),
        optimizer=pscluster.optimizers.SGD(0.5), checkpoint_root=root, cluster_wait=30.0)
    try:
        c1 = pscluster.ClusterCoordinator(one_ps)
        with one_ps.scope():
            w1 = pscluster.Variable(shape=(4,), initializer="ones", name="w")
            h1 = pscluster.HashEmbedding(2, max_rows=100, embeddings_initializer="ones",
                                         name="h")
        one_ps.restore("py-ckpt")
        assert c1.global_step == saved_step
        wv, rows = _read(c1, w1, h1)
        np.testing.assert_array_equal(wv, saved_w)
        np.testing.assert_array_equal(rows, saved_rows)
        stats = c1.ps_stats()
        assert len(stats) == 1 and stats[0]["applied_steps"] == saved_step
    finally:
        one_ps.close()


def test_restore_and_save_errors(strategy, py_cluster):
    with strategy.scope():
        pscluster.Variable(shape=(2,), name="v")
    with pytest.raises(pscluster.Error) as e:
        strategy.restore("no-such-checkpoint")
    assert e.value.code == "NOT_FOUND" and "no-such-checkpoint" in e.value.message
    with pytest.raises(pscluster.Error) as e:
        strategy.save("/definitely/outside/the/root")
    assert e.value.code == "INVALID_ARGUMENT"
    strategy.close()  # releases the workers for the next strategy

    no_root = pscluster.ParameterServerStrategy(
        pscluster.Cluster.from_addresses(py_cluster.ps_addresses, py_cluster.worker_addresses),
        optimizer=pscluster.optimizers.SGD(0.5))
    try:
        assert no_root.checkpoint_root == ""
        with no_root.scope():
            pscluster.Variable(shape=(2,), name="v")
        with pytest.raises(pscluster.Error) as e:
            no_root.save("x")
        assert e.value.code == "FAILED_PRECONDITION", e.value.message
        assert "checkpoint_root" in e.value.message
    finally:
        no_root.close()


def test_ps_killed_and_restarted_job_heals(tmp_path):
    """Periodic checkpoints every 20 steps; once both PS applied 50 steps
    (progress, not time), PS 1 is SIGKILLed and started again on its port,
    empty, with its own flags. The coordinator restores the newest
    checkpoint into both PS and retries the closures that failed: join()
    succeeds and every PS holds coordinator.global_step steps."""
    with pscluster.Cluster.local(ps=2, workers=2, worker="python", start_timeout=60) as cluster:
        strategy = pscluster.ParameterServerStrategy(
            cluster, variable_partitioner=pscluster.partitioners.FixedShardsPartitioner(2),
            optimizer=pscluster.optimizers.SGD(1.0), health_interval=0.2, cluster_wait=30.0,
            checkpoint_dir="periodic", checkpoint_every_steps=20, ps_recovery_timeout=30.0)
        coordinator = pscluster.ClusterCoordinator(strategy)
        with strategy.scope():
            b = pscluster.Variable(shape=(8,), initializer="zeros", name="b")
        closures, steps_per_closure = 30, 5

        def train(i):
            for _ in range(steps_per_closure):
                b.read()
                pscluster.apply_gradients([(np.ones(8, np.float32), b)])
                time.sleep(0.01)
            return i

        values = [coordinator.schedule(train, args=(i,)) for i in range(closures)]
        wait_until(lambda: min(s["applied_steps"] for s in coordinator.ps_stats()) >= 50, 60,
                   "both PS to apply 50 steps")
        victim = cluster.pids()[1]
        with open(f"/proc/{victim}/cmdline", "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\0") if a]
        address = cluster.ps_addresses[1]
        argv = [f"--address={address}" if a.startswith("--address=") else a for a in argv]
        os.kill(victim, signal.SIGKILL)
        log = open(tmp_path / "ps-1.restart.log", "wb")
        restarted = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            coordinator.join()
            assert coordinator.fetch(values) == list(range(closures))
            assert coordinator.steps == closures * steps_per_closure
            assert coordinator.ps_recoveries >= 1
            lost = coordinator.lost_steps
            print(f"PS recovery: steps {coordinator.steps}, lost {lost}, recoveries "
                  f"{coordinator.ps_recoveries}")
            assert 0 <= lost < coordinator.steps
            assert coordinator.global_step == coordinator.steps - lost
            stats = coordinator.ps_stats()
            assert [s["applied_steps"] for s in stats] == [coordinator.global_step] * 2, stats
            # SGD 1.0 from zeros, a gradient of ones per step held.
            final = coordinator.schedule(lambda: b.read()).fetch()
            np.testing.assert_array_equal(final, np.full(8, -coordinator.global_step))
            strategy.close()
        finally:
            restarted.kill()
            restarted.wait(timeout=10)
            log.close()
