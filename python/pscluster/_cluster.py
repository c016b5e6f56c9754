"""pscluster.Cluster: a local cluster of child processes, as `psctl local`
starts one (C++: api/pscluster/local_process_cluster.h), or the addresses of
a cluster started elsewhere (TF_CONFIG, a cluster file, address lists) for
a ParameterServerStrategy."""

import json
import os
import sys

import _pscluster
from pscluster._client import TLS


def _python_worker_command():
    """argv of a Python worker (python3 -m pscluster.worker) that finds this
    package and its extension wherever they are."""
    import pscluster
    paths = [os.path.dirname(os.path.dirname(os.path.abspath(pscluster.__file__))),
             os.path.dirname(os.path.abspath(_pscluster.__file__))]
    boot = ("import sys; sys.path[:0] = %r; from pscluster.worker import main; "
            "sys.exit(main())" % paths)
    return [sys.executable, "-c", boot]


class Cluster:
    """A pscluster: Cluster.local(...) starts one here; from_addresses,
    from_cluster_file and from_tf_config name one already running (for
    ParameterServerStrategy; such a Cluster has no coordinator service)."""

    def __init__(self, impl, ps_addresses=(), worker_addresses=(), cluster_file=""):
        self._impl = impl
        self._stopped = impl is None
        self._ps = list(ps_addresses)
        self._workers = list(worker_addresses)
        self._cluster_file = cluster_file

    @classmethod
    def from_addresses(cls, ps, workers):
        """The PS and worker tasks at these "host:port" addresses."""
        return cls(None, [str(a) for a in ps], [str(a) for a in workers])

    @classmethod
    def from_cluster_file(cls, path):
        """The tasks of a cluster YAML file as the servers take
        (common/cluster_config.h); read by the C++ coordinator core."""
        return cls(None, cluster_file=os.fspath(path))

    @classmethod
    def from_tf_config(cls, tf_config=None):
        """The "ps" and "worker" tasks of TF_CONFIG (a JSON string or dict;
        default: the TF_CONFIG environment variable), as a TF
        ParameterServerStrategy program's chief reads them."""
        if tf_config is None:
            tf_config = os.environ.get("TF_CONFIG")
            if not tf_config:
                raise ValueError("TF_CONFIG is not set")
        if isinstance(tf_config, str):
            tf_config = json.loads(tf_config)
        spec = tf_config.get("cluster", {})
        if not spec.get("ps") or not spec.get("worker"):
            raise ValueError("TF_CONFIG's cluster needs 'ps' and 'worker' tasks, has %s"
                             % sorted(spec))
        return cls.from_addresses(spec["ps"], spec["worker"])

    @classmethod
    def local(cls, ps=2, workers=2, tls=False, run_dir=None, keep_run_dir=False,
              bin_dir=None, data_roots=(), start_timeout=30.0, worker="worker_server"):
        """Starts `ps` ps_server, `workers` worker_server and a coordinator on
        127.0.0.1 as children of this process, with a fresh bearer token (and,
        with tls=True, a throwaway CA and certificate for mutual TLS).

        worker: "worker_server" (YAML jobs and C++ functions), or "python":
            Python workers (`python3 -m pscluster.worker`, this interpreter)
            that run a ClusterCoordinator's scheduled Python functions and
            YAML jobs alike.

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
        if worker == "python":
            command = _python_worker_command()
        elif worker == "worker_server":
            command = []
        else:
            raise ValueError(f"worker must be 'worker_server' or 'python', not {worker!r}")
        impl = _pscluster.Cluster(int(ps), int(workers), bool(tls),
                                  os.fspath(run_dir) if run_dir else "", bool(keep_run_dir),
                                  os.fspath(bin_dir) if bin_dir else "",
                                  [os.fspath(d) for d in data_roots], float(start_timeout),
                                  command)
        c = cls(impl)
        c._ps = c._read_ports("ps", int(ps))
        c._workers = c._read_ports("worker", int(workers))
        return c

    def _read_ports(self, kind, n):
        out = []
        for i in range(n):
            with open(os.path.join(self.run_dir, f"{kind}-{i}.port")) as f:
                out.append(f"127.0.0.1:{int(f.read().strip())}")
        return out

    @property
    def ps_addresses(self):
        """"host:port" of each PS task (empty for a cluster file)."""
        return list(self._ps)

    @property
    def worker_addresses(self):
        """"host:port" of each worker task (empty for a cluster file)."""
        return list(self._workers)

    @property
    def cluster_file(self):
        return self._cluster_file

    def _local(self):
        if self._impl is None:
            raise ValueError("this Cluster names servers started elsewhere: it has no "
                             "coordinator service, run directory or child processes")
        return self._impl

    @property
    def address(self):
        """"127.0.0.1:PORT" of the coordinator."""
        return self._local().address

    @property
    def token(self):
        """The bearer token the coordinator accepts."""
        return self._local().token

    @property
    def tls(self):
        """A pscluster.TLS for clients of this cluster, or None without TLS."""
        cert, key, ca, server_name = self._local().tls_files
        return TLS(cert, key, ca, server_name) if cert else None

    @property
    def run_dir(self):
        return self._local().run_dir

    def pids(self):
        """Pids of the children: PS, then workers, then the coordinator."""
        return self._local().pids()

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
