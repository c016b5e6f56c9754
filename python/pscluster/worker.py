"""The Python worker: `python3 -m pscluster.worker FLAGS`.

Runs a worker task that executes the Python functions a ClusterCoordinator
schedules (pickled with cloudpickle), and YAML jobs as worker_server does.
FLAGS are worker_server's: --address=HOST:PORT [--port_file=FILE], or
--cluster=cluster.yaml --task_index=I, or TF_CONFIG (task type worker);
--ps_timeout_ms, --data_root, ... (`--helpfull` lists them). Serves until
SIGTERM or SIGINT. The C++ worker core (api/pscluster/function_worker.h)
does everything but calling the functions.
"""

import sys


def main(argv=None):
    """Serves until SIGTERM/SIGINT; returns the exit code (2: bad flags)."""
    import _pscluster
    # Fail at start, not at the first closure, when a dependency is missing.
    import cloudpickle  # noqa: F401
    import numpy  # noqa: F401
    from pscluster import _worker_runtime  # noqa: F401
    args = list(sys.argv[1:] if argv is None else argv)
    return _pscluster.run_function_worker(["pscluster.worker"] + args)


if __name__ == "__main__":
    sys.exit(main())
