"""The current closure's FunctionContext on a Python worker (one per
thread), bound by _worker_runtime.run while a scheduled function runs."""

import threading

_local = threading.local()


def current():
    """The running closure's context; RuntimeError outside one."""
    ctx = getattr(_local, "context", None)
    if ctx is None:
        raise RuntimeError(
            "no closure is running on this thread: read variables and apply gradients only "
            "inside a function scheduled with ClusterCoordinator.schedule (it runs on a "
            "worker), not on the coordinator")
    return ctx


def bind(ctx):
    previous = getattr(_local, "context", None)
    _local.context = ctx
    return previous


def unbind(previous):
    _local.context = previous
