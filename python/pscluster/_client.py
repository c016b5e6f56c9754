"""pscluster.Client: the job client, one call per C++ JobClient method."""

import json
import os

import _pscluster


class TLS:
    """Mutual TLS files for a Client: this client's certificate and key, and
    the cluster CA. `server_name` (optional) is the name the coordinator's
    certificate is checked against instead of the dialled host."""

    def __init__(self, cert, key, ca, server_name=""):
        self.cert = os.fspath(cert)
        self.key = os.fspath(key)
        self.ca = os.fspath(ca)
        self.server_name = server_name or ""

    def __repr__(self):
        return f"TLS(cert={self.cert!r}, key={self.key!r}, ca={self.ca!r})"


def _tls_files(tls):
    if tls is None:
        return "", "", "", ""
    if isinstance(tls, dict):
        tls = TLS(**tls)
    return tls.cert, tls.key, tls.ca, tls.server_name


class Client:
    """A client of a pscluster coordinator's job service.

    address: "host:port" of the coordinator.
    token: the bearer token of its job service (None: send none).
    tls: a pscluster.TLS, or a dict with cert, key, ca (and server_name);
        None for plaintext. TLS is one setting per process.
    connect_timeout: seconds to wait for the connection (0: do not wait).
    rpc_timeout: seconds each call may take (not watch).

    Raises pscluster.Error (code UNAVAILABLE when the coordinator cannot be
    reached, INVALID_ARGUMENT / NOT_FOUND for bad TLS files). Thread-safe.
    """

    def __init__(self, address, token=None, tls=None, connect_timeout=10.0, rpc_timeout=10.0):
        cert, key, ca, server_name = _tls_files(tls)
        self._client = _pscluster.Client(address, token or "", cert, key, ca, server_name,
                                         float(connect_timeout), float(rpc_timeout))

    @property
    def address(self):
        return self._client.address

    def submit(self, spec):
        """Submits a job; returns its id.

        spec: the path of a job YAML file (str or os.PathLike), or the YAML
        text itself (a str with a newline in it). The spec is checked before
        it is sent: a bad one raises pscluster.Error with code
        INVALID_ARGUMENT and a "FILE:LINE:COL: ..." message, and nothing is
        submitted.
        """
        if isinstance(spec, str) and "\n" in spec:
            return self._client.submit(spec, "")
        return self._client.submit_file(os.fspath(spec))

    def status(self, job_id):
        """The job's current status (dict; NOT_FOUND for an unknown id)."""
        return json.loads(self._client.status(job_id))

    def watch(self, job_id, timeout=None, on_update=None):
        """Follows the job until it ends; returns its final status (dict).

        A job that FAILED or was CANCELLED is returned, not raised: check
        ["state"]. timeout: seconds (None: no limit); when it passes first,
        raises pscluster.Error with code DEADLINE_EXCEEDED (the job goes on).
        on_update: called with each status dict while the job runs.
        """
        callback = None
        if on_update is not None:
            callback = lambda text: on_update(json.loads(text))
        return json.loads(self._client.watch(
            job_id, None if timeout is None else float(timeout), callback))

    def logs(self, job_id):
        """The job's events, oldest first: dicts with unix_seconds, kind, message."""
        return json.loads(self._client.events(job_id))["events"]

    def cancel(self, job_id):
        """Asks the coordinator to cancel the job (watch it to see it end).
        FAILED_PRECONDITION if it already ended."""
        self._client.cancel(job_id)

    def jobs(self):
        """Every job the coordinator knows (list of status dicts)."""
        return json.loads(self._client.list())["jobs"]
