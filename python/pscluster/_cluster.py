"""pscluster.Cluster: a local cluster of child processes, as `psctl local`
starts one (C++: api/pscluster/local_process_cluster.h)."""

import os

import _pscluster
from pscluster._client import TLS


class Cluster:
    """A running pscluster. Use Cluster.local(...) to start one."""

    def __init__(self, impl):
        self._impl = impl
        self._stopped = False

    @classmethod
    def local(cls, ps=2, workers=2, tls=False, run_dir=None, keep_run_dir=False,
              bin_dir=None, data_roots=(), start_timeout=30.0):
        """Starts `ps` ps_server, `workers` worker_server and a coordinator on
        127.0.0.1 as children of this process, with a fresh bearer token (and,
        with tls=True, a throwaway CA and certificate for mutual TLS).

        run_dir: logs and checkpoints (default: a fresh /tmp/pscluster-*,
            removed at stop() unless keep_run_dir).
        bin_dir: where the server binaries are (default: found next to the
            extension, in Bazel's output tree).
        data_roots: directories jobs may read data from (default:
            /usr/share/datasets).

        The children die with the thread that started them: start the cluster
        from the main thread. A child that dies is not restarted. Raises
        pscluster.Error (NOT_FOUND: a server binary is missing; ABORTED or
        DEADLINE_EXCEEDED with the failing child's log).
        """
        impl = _pscluster.Cluster(int(ps), int(workers), bool(tls),
                                  os.fspath(run_dir) if run_dir else "", bool(keep_run_dir),
                                  os.fspath(bin_dir) if bin_dir else "",
                                  [os.fspath(d) for d in data_roots], float(start_timeout))
        return cls(impl)

    @property
    def address(self):
        """"127.0.0.1:PORT" of the coordinator."""
        return self._impl.address

    @property
    def token(self):
        """The bearer token the coordinator accepts."""
        return self._impl.token

    @property
    def tls(self):
        """A pscluster.TLS for clients of this cluster, or None without TLS."""
        cert, key, ca, server_name = self._impl.tls_files
        return TLS(cert, key, ca, server_name) if cert else None

    @property
    def run_dir(self):
        return self._impl.run_dir

    def pids(self):
        """Pids of the children: PS, then workers, then the coordinator."""
        return self._impl.pids()

    def client(self, **kwargs):
        """A pscluster.Client of this cluster (its address, token and TLS)."""
        from pscluster._client import Client
        return Client(self.address, token=self.token, tls=self.tls, **kwargs)

    def stop(self, grace=5.0):
        """Stops every child (SIGTERM, then SIGKILL after `grace` seconds).
        Idempotent."""
        if not self._stopped:
            self._impl.stop(float(grace))
            self._stopped = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __del__(self):
        try:
            self.stop()
        except Exception:
            pass
