#include "worker/core/worker_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/control_auth.h"
#include "common/job_paths.h"
#include "common/job_spec.h"
#include "common/status_macros.h"

namespace pscluster {

WorkerState::WorkerState(PsClientFactory ps_client_factory,
                         std::optional<std::vector<std::string>> data_roots)
    : ps_client_factory_(std::move(ps_client_factory)), data_roots_(std::move(data_roots)) {}

absl::Status WorkerState::SetupJob(const SetupJobRequest& request, SetupJobResponse* response) {
  return SetupJob(request, response, /*parsed=*/nullptr);
}

namespace {

// The job's spec from SetupJob: `parsed` when it is the request's YAML
// resolved for its replicas, else the YAML parsed and resolved here.
absl::StatusOr<JobSpec> SpecFor(const SetupJobRequest& request, const JobSpec* parsed) {
  if (parsed != nullptr && parsed->yaml == request.spec_yaml() &&
      parsed->replicas == std::max<int64_t>(1, request.replicas())) {
    return *parsed;
  }
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(request.spec_yaml(), request.job_id() + ".yaml"));
  // The batch of this worker's steps depends on the job's replicas when the
  // spec gives data.global_batch.
  if (request.replicas() <= 0 && spec.data.global_batch_given) {
    return absl::InvalidArgumentError(
        "SetupJob: the job gives data.global_batch but the request names no replicas");
  }
  RETURN_IF_ERROR(ResolveReplicas(std::max<int64_t>(1, request.replicas()), &spec));
  return spec;
}

}  // namespace

absl::Status WorkerState::SetupJob(const SetupJobRequest& request, SetupJobResponse* response,
                                   const JobSpec* parsed) {
  absl::MutexLock setup_lock(&setup_mu_);
  const std::string fingerprint = request.SerializeAsString();
  {
    absl::MutexLock lock(&mu_);
    if (HasJob() && fingerprint == setup_fingerprint_) {
      *response = setup_response_;
      return absl::OkStatus();
    }
  }
  if (request.job_id().empty()) return absl::InvalidArgumentError("SetupJob needs a job_id");
  if (!request.worker_key().empty() &&
      !CheckRequest(request.worker_key(), "SetupJob", request)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "SetupJob of job '", request.job_id(), "': its MAC does not check under its worker key"));
  }
  {
    // Checked before any data is read, and again before the switch.
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckSwitch(request));
  }
  if (request.program()) return SetupProgram(request, response, fingerprint);
  ASSIGN_OR_RETURN(JobSpec spec, SpecFor(request, parsed));
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
  RETURN_IF_ERROR(CheckSwitch(request));
  job_id_ = request.job_id();
  worker_key_ = request.worker_key();
  last_proof_ = now_();
  setup_fingerprint_ = fingerprint;
  setup_response_ = *response;
  trainer_ = std::move(trainer);
  function_job_.reset();
  return absl::OkStatus();
}

absl::Status WorkerState::SetupProgram(const SetupJobRequest& request,
                                       SetupJobResponse* response,
                                       const std::string& fingerprint) {
  if (function_runner_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", request.job_id(), "' is a program job (ClusterCoordinator) but this worker "
        "runs no functions: start a worker binary that registers them "
        "(api/pscluster/function_worker.h) instead of worker_server"));
  }
  std::vector<std::unique_ptr<PsClient>> ps;
  for (const std::string& address : request.ps_addresses()) {
    ps.push_back(ps_client_factory_(address));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<FunctionJob> job,
                   FunctionJob::Create(request, std::move(ps), function_runner_));
  response->set_backend("functions");
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckSwitch(request));
  job_id_ = request.job_id();
  worker_key_ = request.worker_key();
  last_proof_ = now_();
  setup_fingerprint_ = fingerprint;
  setup_response_ = *response;
  trainer_.reset();
  function_job_ = std::move(job);
  return absl::OkStatus();
}

absl::Status WorkerState::CheckSwitch(const SetupJobRequest& request) {
  if (!HasJob() || worker_key_.empty()) return absl::OkStatus();  // nobody holds it
  if (request.job_id() == job_id_ && request.worker_key() == worker_key_) {
    return absl::OkStatus();  // the same job, set up again by its coordinator
  }
  if (!request.release().empty() &&
      CheckRequestMac(worker_key_, "SetupJob.release", request, request.release())) {
    return absl::OkStatus();  // the held job's coordinator lets it go
  }
  const absl::Duration silent = now_() - last_proof_;
  if (silent >= hold_timeout_) return absl::OkStatus();  // its coordinator is gone
  return absl::PermissionDeniedError(absl::StrCat(
      "this worker serves job '", job_id_, "' of another coordinator (or one that did not let "
      "it go); SetupJob of job '", request.job_id(), "' is refused until that job's "
      "coordinator releases it or has been silent for ", absl::FormatDuration(hold_timeout_),
      " (", absl::FormatDuration(silent), " so far)"));
}

absl::Status WorkerState::RunClosure(const RunClosureRequest& request,
                                     RunClosureResponse* response) {
  std::shared_ptr<Trainer> trainer;
  std::shared_ptr<FunctionJob> function_job;
  std::string key;
  {
    absl::MutexLock lock(&mu_);
    if (!HasJob() || request.job_id() != job_id_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job '", request.job_id(), "' is not set up on this worker",
          job_id_.empty() ? "" : absl::StrCat(" (it serves job '", job_id_, "')")));
    }
    trainer = trainer_;
    function_job = function_job_;
    key = worker_key_;
  }
  if (!key.empty()) {
    if (!CheckRequest(key, "RunClosure", request)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "closure ", request.closure_id(), " of job '", request.job_id(),
          "' is not signed by the job's coordinator (no valid MAC under its worker key)"));
    }
    absl::MutexLock lock(&mu_);
    if (worker_key_ == key) last_proof_ = now_();
  }
  if (function_job != nullptr) return function_job->RunClosure(request, response);
  if (request.mode() == FUNCTION) {
    return absl::InvalidArgumentError(absl::StrCat(
        "closure ", request.closure_id(), ": job '", request.job_id(),
        "' is a YAML job; it runs no functions"));
  }
  if (data_roots_.has_value() && !request.split().path().empty()) {
    // A streaming closure names its file: it must lie where the spec's may.
    RETURN_IF_ERROR(CheckDataPath(absl::StrCat("closure ", request.closure_id(), "'s file"),
                                  request.split().path(), *data_roots_));
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

absl::Status WorkerState::ReleaseJob(const ReleaseJobRequest& request,
                                     ReleaseJobResponse* response) {
  absl::MutexLock lock(&mu_);
  if (!HasJob() || request.job_id() != job_id_ || worker_key_.empty()) {
    return absl::OkStatus();  // not held: nothing to release
  }
  if (!CheckRequest(worker_key_, "ReleaseJob", request)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "ReleaseJob of job '", job_id_, "' is not signed by the job's coordinator"));
  }
  worker_key_.clear();
  response->set_released(true);
  return absl::OkStatus();
}

absl::Status WorkerState::Ping(const PingRequest&, PingResponse* response) {
  absl::MutexLock lock(&mu_);
  response->set_job_id(job_id_);
  return absl::OkStatus();
}

}  // namespace pscluster
