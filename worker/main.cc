// worker_server: serves the Worker RPCs for one worker task.
//
//   worker_server --address=127.0.0.1:0 --port_file=F [--metrics_address=127.0.0.1:0]
//   worker_server --cluster=cluster.yaml --task_index=I   (or TF_CONFIG)
//
// Wiring only: worker_server_main.h does it all. This binary runs YAML jobs;
// program jobs need a worker binary with the program's functions
// (api/pscluster/function_worker.h).
#include "worker/worker_server_main.h"

int main(int argc, char** argv) {
  return pscluster::RunWorkerServer(argc, argv, pscluster::WorkerServerOptions{});
}
