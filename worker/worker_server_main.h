// RunWorkerServer: a worker task's whole life (worker_server's main): parses
// the command line (--address / --cluster / TF_CONFIG, the server flags and
// the worker's own), serves the Worker RPCs until SIGTERM or SIGINT, and
// returns the process's exit code (kExitBadFlags for bad flags).
#ifndef PSCLUSTER_WORKER_WORKER_SERVER_MAIN_H_
#define PSCLUSTER_WORKER_WORKER_SERVER_MAIN_H_

#include <string>

#include "worker/core/function_registry.h"

namespace pscluster {

struct WorkerServerOptions {
  // The program's name in messages and logs ("<name> listening on ...").
  std::string name = "worker_server";
  // The functions program jobs run here (not owned; outlives the call).
  // Null: the worker runs YAML jobs only.
  FunctionRunner* functions = nullptr;
};

int RunWorkerServer(int argc, char** argv, const WorkerServerOptions& options);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_WORKER_SERVER_MAIN_H_
