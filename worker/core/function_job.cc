#include "worker/core/function_job.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pscluster {

absl::StatusOr<std::unique_ptr<FunctionJob>> FunctionJob::Create(
    const SetupJobRequest& request, std::vector<std::unique_ptr<PsClient>> ps,
    FunctionRunner* runner) {
  if (!request.program()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", request.job_id(), "' is not a program job"));
  }
  std::unique_ptr<FunctionJob> job(new FunctionJob());
  ASSIGN_OR_RETURN(
      job->table_,
      VariableTable::Create({request.variables().begin(), request.variables().end()},
                            {request.placement().begin(), request.placement().end()},
                            static_cast<int>(ps.size())));
  for (auto& p : ps) job->ps_.push_back(p.get());
  job->owned_ps_ = std::move(ps);
  job->runner_ = runner;
  return job;
}

absl::Status FunctionJob::RunClosure(const RunClosureRequest& request,
                                     RunClosureResponse* response) {
  if (request.mode() == NOOP) return absl::OkStatus();
  if (request.mode() != FUNCTION) {
    return absl::InvalidArgumentError(absl::StrCat(
        "closure ", request.closure_id(), ": job '", request.job_id(),
        "' is a program job; it runs FUNCTION closures only, not ",
        ClosureMode_Name(request.mode())));
  }
  RETURN_IF_ERROR(runner_->Check(request.function()));
  FunctionContext context(&table_, &ps_, request);
  const absl::Time start = absl::Now();
  FunctionOutcome outcome = runner_->Run(request.function(), request.function_args(), &context);
  response->set_compute_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  // A PS that failed under the function fails the closure for a retry,
  // whatever the function made of the error.
  RETURN_IF_ERROR(context.cluster_error());
  response->set_steps(context.steps());
  if (outcome.error.has_value()) {
    *response->mutable_function_error() = *std::move(outcome.error);
  } else {
    response->set_function_result(std::move(outcome.result));
  }
  return absl::OkStatus();
}

}  // namespace pscluster
