"""pscluster: submit and follow pscluster training jobs from Python.

A thin face over pscluster's C++ job client (api/pscluster/job_client.h),
through the pybind11 extension `_pscluster`:

    import pscluster

    with pscluster.Cluster.local(ps=2, workers=2) as cluster:
        client = pscluster.Client(cluster.address, token=cluster.token, tls=cluster.tls)
        job_id = client.submit("examples/fashion_mnist_mlp.yaml")
        final = client.watch(job_id, timeout=600)
        print(final["state"], final["eval_accuracy"])

Job statuses and events are dicts in the schema of `psctl status -o json`
and `psctl logs -o json` (client/result_json.h). Failures raise
pscluster.Error, whose .code is the gRPC status code name.

Only the job client exists so far: ParameterServerStrategy, ClusterCoordinator
and workers running users' own Python functions (issue 20) are not built yet.
"""

from pscluster._client import TLS, Client
from pscluster._cluster import Cluster
from _pscluster import Error

__all__ = ["Client", "Cluster", "Error", "TLS"]
