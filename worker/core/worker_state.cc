#include "worker/core/worker_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_paths.h"
#include "common/job_spec.h"
#include "common/status_macros.h"

namespace pscluster {

WorkerState::WorkerState(PsClientFactory ps_client_factory,
                         std::optional<std::vector<std::string>> data_roots)
    : ps_client_factory_(std::move(ps_client_factory)), data_roots_(std::move(data_roots)) {}

absl::Status WorkerState::SetupJob(const SetupJobRequest& request, SetupJobResponse* response) {
  absl::MutexLock setup_lock(&setup_mu_);
  const std::string fingerprint = request.SerializeAsString();
  {
    absl::MutexLock lock(&mu_);
    if (trainer_ != nullptr && fingerprint == setup_fingerprint_) {
      *response = setup_response_;
      return absl::OkStatus();
    }
  }
  if (request.job_id().empty()) return absl::InvalidArgumentError("SetupJob needs a job_id");
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(request.spec_yaml(), request.job_id() + ".yaml"));
  // The batch of this worker's steps depends on the job's replicas when the
  // spec gives data.global_batch.
  if (request.replicas() <= 0 && spec.data.global_batch_given) {
    return absl::InvalidArgumentError(
        "SetupJob: the job gives data.global_batch but the request names no replicas");
  }
  RETURN_IF_ERROR(ResolveReplicas(std::max<int64_t>(1, request.replicas()), &spec));
  if (data_roots_.has_value()) RETURN_IF_ERROR(CheckDataFiles(spec, *data_roots_));
  std::vector<std::unique_ptr<PsClient>> ps;
  if (spec.strategy == Strategy::kMultiWorkerMirrored) {
    // No PS: this worker's copy, all-reduced with the other workers'.
    if (!mirror_factory_) {
      return absl::FailedPreconditionError(
          "this worker cannot run multi_worker_mirrored jobs (no collective service)");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<PsClient> mirror, mirror_factory_(request));
    ps.push_back(std::move(mirror));
  } else {
    for (const std::string& address : request.ps_addresses()) {
      ps.push_back(ps_client_factory_(address));
    }
  }
  std::vector<VariablePlacementProto> placement(request.placement().begin(),
                                                request.placement().end());
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                   Trainer::Create(spec, std::move(ps), placement, request.job_id()));
  response->set_backend(trainer->backend_name());
  response->set_train_examples(trainer->train_examples());
  response->set_eval_examples(trainer->eval_examples());
  absl::MutexLock lock(&mu_);
  job_id_ = request.job_id();
  setup_fingerprint_ = fingerprint;
  setup_response_ = *response;
  trainer_ = std::move(trainer);
  return absl::OkStatus();
}

absl::Status WorkerState::RunClosure(const RunClosureRequest& request,
                                     RunClosureResponse* response) {
  std::shared_ptr<Trainer> trainer;
  {
    absl::MutexLock lock(&mu_);
    if (trainer_ == nullptr || request.job_id() != job_id_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job '", request.job_id(), "' is not set up on this worker",
          job_id_.empty() ? "" : absl::StrCat(" (it serves job '", job_id_, "')")));
    }
    trainer = trainer_;
  }
  return trainer->RunClosure(request, response);
}

absl::Status WorkerState::RunClosures(const RunClosuresRequest& request,
                                      RunClosuresResponse* response) {
  response->mutable_results()->Reserve(request.closures_size());
  for (const RunClosureRequest& closure : request.closures()) {
    ClosureResult* result = response->add_results();
    const absl::Status s = RunClosure(closure, result->mutable_response());
    result->set_code(static_cast<int32_t>(s.code()));
    result->set_message(std::string(s.message()));
  }
  return absl::OkStatus();
}

absl::Status WorkerState::Ping(const PingRequest&, PingResponse* response) {
  absl::MutexLock lock(&mu_);
  response->set_job_id(job_id_);
  return absl::OkStatus();
}

}  // namespace pscluster
