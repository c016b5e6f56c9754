// FunctionJob: a worker's side of a program job (SetupJobRequest.program,
// api/pscluster/cluster_coordinator.h), as Trainer is of a YAML job. It runs
// FUNCTION closures: the named function of the worker's FunctionRunner,
// with a FunctionContext over the job's variables on the PS tasks.
//
// A closure answers OK with the function's result bytes or its user error
// (RunClosureResponse.function_error: the coordinator fails the closure and
// does not retry it), and `steps`, the pushes it made. Errors returned are
// the cluster's and are retried by the coordinator: a PS that failed during
// the function, whatever the function did with that error.
//
// Thread-safe: closures run concurrently, each with its own context.
#ifndef PSCLUSTER_WORKER_CORE_FUNCTION_JOB_H_
#define PSCLUSTER_WORKER_CORE_FUNCTION_JOB_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/ps_client.h"
#include "protos/worker.pb.h"
#include "worker/core/function_context.h"
#include "worker/core/function_registry.h"

namespace pscluster {

class FunctionJob {
 public:
  // `ps[i]` is PS task i (owned); `runner` is not owned and outlives the
  // job. INVALID_ARGUMENT for a request that is not a program job, or whose
  // variables and placement do not agree (VariableTable::Create).
  static absl::StatusOr<std::unique_ptr<FunctionJob>> Create(
      const SetupJobRequest& request, std::vector<std::unique_ptr<PsClient>> ps,
      FunctionRunner* runner);

  // FUNCTION: runs the function (NOT_FOUND from FunctionRunner::Check for an
  // unknown name). NOOP: OK at once. Other modes: INVALID_ARGUMENT. A PS
  // failure during the function is returned as the PS's error.
  absl::Status RunClosure(const RunClosureRequest& request, RunClosureResponse* response);

 private:
  FunctionJob() = default;

  std::vector<std::unique_ptr<PsClient>> owned_ps_;
  std::vector<PsClient*> ps_;
  VariableTable table_;
  FunctionRunner* runner_ = nullptr;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_FUNCTION_JOB_H_
