#include "api/pscluster/function_worker.h"

#include "worker/worker_server_main.h"

namespace pscluster {

int RunFunctionWorker(int argc, char** argv, FunctionRunner* functions,
                      const std::string& name) {
  WorkerServerOptions options;
  options.name = name;
  options.functions = functions;
  return RunWorkerServer(argc, argv, options);
}

}  // namespace pscluster
