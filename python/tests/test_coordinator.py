"""ParameterServerStrategy / ClusterCoordinator (pscluster._coordinator)
against real servers: 2 ps_server and 2 Python workers (conftest.py)."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import pscluster
from conftest import wait_until


def _wait_for_file(path, timeout=20.0):
    """On a worker: blocks until `path` exists (bounded)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.01)


def test_variables_schedule_fetch_and_stats(strategy):
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        w = pscluster.Variable(shape=(4, 3), initializer="zeros", name="w")
        b = pscluster.Variable(shape=(2,), initializer=pscluster.initializers.Constant(1.0),
                               optimizer=pscluster.optimizers.SGD(1.0))
        emb = pscluster.Embedding(10, 2, embeddings_initializer="zeros")
    assert w.name == "w" and w.shape == (4, 3)
    assert b.name == "Variable" and emb.name == "embedding"
    w2 = None
    with strategy.scope():
        w2 = pscluster.Variable(shape=(2,), name="w")
    assert w2.name == "w_1"

    def step(scale):
        wv, bv = pscluster.read([w, b])
        assert wv.dtype == np.float32 and wv.shape == (4, 3)
        rows = emb.lookup(np.array([[1, 1], [3, 0]]))
        assert rows.shape == (2, 2, 2)
        n = pscluster.apply_gradients([
            (np.full((4, 3), scale, np.float32), w), (np.ones(2, np.float32), b),
            (pscluster.IndexedSlices(np.ones((3, 2)), [1, 1, 7]), emb), (None, w2)])
        return {"pushes": n, "closure": pscluster.context().closure_id, "pid": os.getpid()}

    def peek():
        return w.read(), b.read(), emb.lookup([1, 7, 0])

    first = coordinator.schedule(step, args=(1.0,))
    second = coordinator.schedule(step, kwargs={"scale": 2.0})
    coordinator.join()
    assert coordinator.done()
    out = coordinator.fetch({"a": [first], "b": (second, 7)})
    assert out["a"][0]["pushes"] == 2 and out["b"][0]["pushes"] == 2 and out["b"][1] == 7
    assert out["a"][0]["pid"] != os.getpid()
    assert first.ready() and first.closure_id != second.closure_id
    wv, bv, rows = coordinator.schedule(peek).fetch()
    # SGD 0.5 on w: -(0.5 * 1 + 0.5 * 2); SGD 1.0 on b from 1: 1 - 2.
    np.testing.assert_allclose(wv, np.full((4, 3), -1.5))
    np.testing.assert_allclose(bv, [-1.0, -1.0])
    # Row 1 got two gradients per step, row 7 one: 0.5 * (2 + 2), 0.5 * (1 + 1).
    np.testing.assert_allclose(rows, [[-2, -2], [-1, -1], [0, 0]])
    assert coordinator.steps == 4
    stats = coordinator.ps_stats()
    assert len(stats) == 2
    # Every variable has 2 shards, one per PS, and the rows pushed lie on
    # both (rows 0-4 on PS 0, 5-9 on PS 1): each step reached both.
    assert [s["applied_steps"] for s in stats] == [4, 4]
    assert any(v.startswith("w/part_") for v in stats[0]["variables"])


def test_per_worker_dataset(strategy):
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        pscluster.Variable(shape=(1,))

    def dataset_fn():
        return iter(range(1000))

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def take(it):
        return os.getpid(), next(it), next(it)

    values = [coordinator.schedule(take, args=(iterator,)) for _ in range(12)]
    coordinator.join()
    by_worker = {}
    for pid, a, b in coordinator.fetch(values):
        by_worker.setdefault(pid, []).extend([a, b])
    assert os.getpid() not in by_worker
    # Each worker process made its own iterator once and read it in order.
    for pid, seen in by_worker.items():
        assert sorted(seen) == list(range(len(seen))), (pid, seen)
    assert sum(len(s) for s in by_worker.values()) == 24


def test_join_and_done_with_nothing_scheduled(strategy):
    coordinator = pscluster.ClusterCoordinator(strategy)
    coordinator.join()
    assert coordinator.done()
    assert coordinator.steps == 0


def test_exception_raised_at_join_and_fetch_later_closures_cancelled(strategy, tmp_path):
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        pscluster.Variable(shape=(1,))
    go_bad, go_good = str(tmp_path / "go_bad"), str(tmp_path / "go_good")

    def bad_step(x):
        _wait_for_file(go_bad)
        raise ValueError(f"bad batch {x}")

    def good_step(i):
        _wait_for_file(go_good)
        return i

    # Both workers are busy (the bad closure, the first good one) before the
    # bad one raises: the 19 good ones still queued are then cancelled.
    bad = coordinator.schedule(bad_step, args=(3,))
    goods = [coordinator.schedule(good_step, args=(i,)) for i in range(20)]
    open(go_bad, "w").close()
    wait_until(bad.ready, 30, "the failing closure to end")
    open(go_good, "w").close()
    with pytest.raises(pscluster.Error) as e:
        coordinator.join()
    message = str(e.value)
    assert "bad_step" in message and "ValueError: bad batch 3" in message
    assert "Traceback (most recent call last)" in message
    assert 'raise ValueError(f"bad batch {x}")' in message  # the worker's source line
    assert "_worker_runtime" not in message  # the function's frames only
    coordinator.join()  # raised once

    with pytest.raises(pscluster.Error) as e:
        bad.fetch()
    assert e.value.code == "UNKNOWN"
    assert "ValueError: bad batch 3" in e.value.message
    assert "Traceback (most recent call last)" in e.value.message
    assert e.value.function_error[0] == "ValueError"
    assert e.value.function_error[1] == "bad batch 3"
    cancelled = 0
    for i, v in enumerate(goods):
        try:
            assert v.fetch() == i
        except pscluster.Error as err:
            assert err.code == "CANCELLED", err
            cancelled += 1
    assert cancelled >= len(goods) - 1  # only the one in flight ran

    # After the error is raised the coordinator schedules again.
    assert coordinator.schedule(good_step, args=(99,)).fetch() == 99


def test_ctrl_c_interrupts_join_and_fetch(strategy, tmp_path):
    """SIGINT while join() or fetch() waits raises KeyboardInterrupt at once;
    the closure goes on, and a later join() waits for it."""
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        pscluster.Variable(shape=(1,))
    go = str(tmp_path / "go")

    def slow(i):
        _wait_for_file(go, timeout=60)
        return i

    def interrupt_when(entering):
        entering.wait(30)
        os.kill(os.getpid(), signal.SIGINT)

    for wait in ("join", "fetch"):
        value = coordinator.schedule(slow, args=(7,))
        entering = threading.Event()
        sender = threading.Thread(target=interrupt_when, args=(entering,))
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            entering.set()
            coordinator.join() if wait == "join" else value.fetch()
        sender.join(30)
        # Interrupted, not ended: the closure still waits for its file.
        assert not value.ready(), wait
    open(go, "w").close()
    coordinator.join()
    assert coordinator.done()


def test_bad_input(strategy, py_cluster):
    with pytest.raises(ValueError, match="strategy.scope"):
        pscluster.Variable(shape=(2,))
    with strategy.scope():
        with pytest.raises(pscluster.Error) as e:
            pscluster.Variable(shape=(3, 0), name="empty")
        assert e.value.code == "INVALID_ARGUMENT"
        assert "empty" in e.value.message
        with pytest.raises(ValueError, match="unknown initializer"):
            pscluster.Variable(shape=(2,), initializer="nope")
    with pytest.raises(pscluster.Error) as e:
        pscluster.ParameterServerStrategy(py_cluster, variable_partitioner="bogus:3")
    assert e.value.code == "INVALID_ARGUMENT" and "bogus" in e.value.message
    with pytest.raises(pscluster.Error) as e:
        pscluster.partitioners.FixedShardsPartitioner(0)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(TypeError, match="variable_partitioner"):
        pscluster.ParameterServerStrategy(py_cluster, variable_partitioner=lambda shape: 2)

    coordinator = pscluster.ClusterCoordinator(strategy)
    lock = threading.Lock()

    def uses_a_lock():
        with lock:
            return 1

    with pytest.raises(pscluster.Error) as e:
        coordinator.schedule(uses_a_lock)
    assert e.value.code == "INVALID_ARGUMENT"
    assert "uses_a_lock" in e.value.message and "pickle" in e.value.message
    with pytest.raises(TypeError):
        coordinator.schedule(42)

    # A variable misused inside a function is the function's error.
    with strategy.scope():
        v = pscluster.Variable(shape=(2,))

    def wrong_shape():
        pscluster.apply_gradients([(np.ones(3, np.float32), v)])

    with pytest.raises(pscluster.Error) as e:
        coordinator.schedule(wrong_shape).fetch()
    assert "INVALID_ARGUMENT" in e.value.message and "Variable" in e.value.message
    with pytest.raises(pscluster.Error):
        coordinator.join()
    with pytest.raises(RuntimeError, match="no closure is running"):
        v.read()


def test_python_worker_killed_mid_closure_every_update_applied_once(tmp_path):
    """A worker killed while its closure is between pushes: the closure is
    retried on the other worker and each PS applies every step once."""
    with pscluster.Cluster.local(ps=2, workers=2, worker="python", start_timeout=60) as cluster:
        strategy = pscluster.ParameterServerStrategy(
            cluster, variable_partitioner=pscluster.partitioners.FixedShardsPartitioner(2),
            optimizer=pscluster.optimizers.SGD(0.01), worker_timeout=10.0)
        coordinator = pscluster.ClusterCoordinator(strategy)
        with strategy.scope():
            w = pscluster.Variable(shape=(8, 4), initializer="ones")
        victim_pid = str(tmp_path / "victim.pid")
        steps_per_closure = 5

        def train(i, victim):
            for s in range(steps_per_closure):
                w.read()
                pscluster.apply_gradients([(np.full((8, 4), i + s, np.float32), w)])
                if victim and s == 2 and not os.path.exists(victim_pid):
                    # First run only: tell the test, then wait to be killed.
                    with open(victim_pid + ".tmp", "w") as f:
                        f.write(str(os.getpid()))
                    os.rename(victim_pid + ".tmp", victim_pid)
                    _wait_for_file(victim_pid + ".never", timeout=60)
            return i

        values = [coordinator.schedule(train, args=(i, i == 3)) for i in range(8)]
        pid = int(wait_until(lambda: os.path.exists(victim_pid) and open(victim_pid).read(),
                             60, "the victim closure to push 3 steps"))
        assert pid in cluster.pids()[2:4]
        os.kill(pid, signal.SIGKILL)
        coordinator.join()
        assert coordinator.fetch(values) == list(range(8))
        scheduled = 8 * steps_per_closure
        assert coordinator.steps == scheduled
        stats = coordinator.ps_stats()
        assert [s["applied_steps"] for s in stats] == [scheduled, scheduled]
        # The retry pushed the victim's first 3 steps again: dropped.
        assert all(s["duplicate_steps"] >= 3 for s in stats), stats
        strategy.close()


def test_pushes_read_ahead_and_reads_see_the_closures_own_pushes(strategy):
    # apply_gradients brings back what the function read since its last push
    # (worker_bindings.cc): the next read is that value, after the push.
    coordinator = pscluster.ClusterCoordinator(strategy)
    sgd = pscluster.optimizers.SGD(1.0)
    with strategy.scope():
        w = pscluster.Variable(shape=(4, 3), initializer="ones", optimizer=sgd)  # 2 shards
        u = pscluster.Variable(shape=(1, 3), initializer="ones", optimizer=sgd)  # 1 shard
        emb = pscluster.Embedding(10, 2, embeddings_initializer="zeros", optimizer=sgd)

    def steps():
        seen = []
        for _ in range(3):
            wv, uv = pscluster.read([w, u])
            seen.append((float(wv[3, 2]), float(uv[0, 1])))
            wv += 100  # the function's own arrays
            uv += 100
            pscluster.apply_gradients([(np.ones((4, 3), np.float32), w),
                                       (np.full((1, 3), 2, np.float32), u)])
        a, b = pscluster.read([u, u])  # named twice: two arrays
        a[0, 0] = 7
        pscluster.apply_gradients([(pscluster.IndexedSlices(np.ones((1, 2)), [1]), emb)])
        return seen, float(b[0, 0]), emb.lookup([1])[0].tolist(), pscluster.context().steps

    seen, again, row, steps_pushed = coordinator.schedule(steps).fetch()
    assert seen == [(1.0, 1.0), (0.0, -1.0), (-1.0, -3.0)]
    assert again == -5.0
    assert row == [-1.0, -1.0]
    assert steps_pushed == 4
    np.testing.assert_allclose(coordinator.schedule(u.read).fetch(), [[-5, -5, -5]])


def test_lambda_and_numpy_results(strategy):
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        pscluster.Variable(shape=(1,))
    v = coordinator.schedule(lambda n: np.arange(n, dtype=np.float32), args=(3,))
    np.testing.assert_array_equal(v.fetch(), [0, 1, 2])


def test_torch_bridge(strategy):
    torch = pytest.importorskip("torch")
    coordinator = pscluster.ClusterCoordinator(strategy)
    with strategy.scope():
        w = pscluster.Variable(shape=(3,), initializer="ones")
        emb = pscluster.Embedding(6, 2, embeddings_initializer="zeros")

    def step():
        from pscluster import torch_bridge
        (wt,) = torch_bridge.read([w])
        rows = torch_bridge.lookup(emb, torch.tensor([0, 4, 4]))
        loss = (wt * 2).sum() + rows.sum()
        loss.backward()
        return torch_bridge.apply_gradients([(wt, w), (rows, emb)])

    assert coordinator.schedule(step).fetch() == 2
    values = coordinator.schedule(lambda: (w.read(), emb.lookup([0, 4, 5]))).fetch()
    np.testing.assert_allclose(values[0], [0, 0, 0])  # 1 - 0.5 * 2
    np.testing.assert_allclose(values[1], [[-0.5, -0.5], [-1, -1], [0, 0]])
