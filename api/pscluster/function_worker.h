// The worker side of ClusterCoordinator (cluster_coordinator.h): a worker
// binary that a user builds around their own functions.
//
//   int main(int argc, char** argv) {
//     pscluster::FunctionRegistry functions;
//     functions.Register("train_step", TrainStep);  // Function: (context, args) -> result bytes
//     return pscluster::RunFunctionWorker(argc, argv, &functions);
//   }
//
// A function reads and updates the program's variables through its
// FunctionContext (Pull / PullRows / Push / PushRows, worker/core/
// function_context.h): every Push is one step, applied once however often
// the closure is retried, provided the function pushes in the same order
// each time it runs. The binary takes worker_server's flags (--address,
// --cluster + --task_index or TF_CONFIG, --ps_timeout_ms, ...) and also runs
// YAML jobs as worker_server does.
#ifndef PSCLUSTER_API_PSCLUSTER_FUNCTION_WORKER_H_
#define PSCLUSTER_API_PSCLUSTER_FUNCTION_WORKER_H_

#include <string>

#include "worker/core/function_context.h"
#include "worker/core/function_registry.h"

namespace pscluster {

// Serves one worker task that runs `functions` (not owned; a
// FunctionRegistry, or another FunctionRunner) until SIGTERM or SIGINT, and
// returns the exit code: 0, or 2 for bad flags. `name` prefixes its messages
// and its "NAME listening on HOST:PORT" line.
int RunFunctionWorker(int argc, char** argv, FunctionRunner* functions,
                      const std::string& name = "function_worker");

}  // namespace pscluster

#endif  // PSCLUSTER_API_PSCLUSTER_FUNCTION_WORKER_H_
