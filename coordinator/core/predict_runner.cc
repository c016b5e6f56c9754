#include "coordinator/core/predict_runner.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/control_auth.h"
#include "common/job_paths.h"
#include "common/model_variables.h"
#include "common/status_macros.h"
#include "common/update_lease.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/cluster_health.h"
#include "coordinator/core/health_watch.h"
#include "coordinator/core/job_status_board.h"
#include "coordinator/core/phase_runner.h"
#include "coordinator/core/signing_ps_client.h"

namespace pscluster {

// The run's parts, built in order (each may use those before it): the job
// machinery a PREDICT phase runs on.
struct PredictRunner::Parts {
  Parts(PredictRunner* run, int max_attempts)
      : board(run->run_id_, Initial(run->run_id_), run->options_.now),
        health(HealthOptions(run, &board)),
        phases(PhaseOptions(run, max_attempts, &board,
                            run->options_.health != nullptr ? &health : nullptr),
               Control(run)) {}

  static JobStatusProto Initial(const std::string& run_id) {
    JobStatusProto s;
    s.set_job_id(run_id);
    s.set_state(RUNNING);
    return s;
  }
  static HealthWatch::Options HealthOptions(PredictRunner* run, JobStatusBoard* board) {
    HealthWatch::Options o;
    o.health = run->options_.health;
    o.workers = run->workers_;
    o.interval = absl::Seconds(run->spec_.fault_tolerance.health_check_interval_s);
    o.worker_timeout = absl::Seconds(run->spec_.fault_tolerance.worker_timeout_s);
    o.on_worker_lost = [] {};
    o.event = [board](const std::string& kind, const std::string& message) {
      board->Event(kind, message);
    };
    o.now = run->options_.now;
    return o;
  }
  static PhaseRunner::Options PhaseOptions(PredictRunner* run, int max_attempts,
                                           JobStatusBoard* board, HealthWatch* health) {
    PhaseRunner::Options o;
    o.job_id = run->run_id_;
    o.job_key = run->job_key_;
    o.spec = &run->spec_;
    o.workers = run->workers_;
    o.max_attempts = max_attempts;
    o.retry_backoff = run->options_.retry_backoff;
    o.setup = &run->setup_;
    o.board = board;
    o.health = health;
    o.metrics = run->options_.metrics;
    o.on_predict_closure = [run](const Closure& c, const RunClosureResponse& r) {
      run->OnAnswer(r, c.split.begin(), c.split.end());
    };
    o.now = run->options_.now;
    return o;
  }
  // No checkpoints. A PS that lost the restored model (NOT_FOUND from a
  // worker: it restarted empty) fails the run: its answers so far stay
  // right, but the next ones could not be computed.
  static PhaseRunner::Control Control(PredictRunner* run) {
    PhaseRunner::Control c;
    c.ps_failed = [run] {
      absl::MutexLock lock(&run->mu_);
      return run->ps_lost_;
    };
    c.mark_ps_failed = [run] {
      absl::MutexLock lock(&run->mu_);
      const bool before = run->ps_lost_;
      run->ps_lost_ = true;
      return before;
    };
    c.checkpoint_due = [] { return false; };
    c.checkpoint = [] { return absl::OkStatus(); };
    c.recover = [] {
      return absl::AbortedError(
          "a PS lost the restored model during the "
          "prediction (it restarted); run the "
          "prediction again");
    };
    return c;
  }

  JobStatusBoard board;
  HealthWatch health;
  PhaseRunner phases;
};

PredictRunner::PredictRunner(std::string run_id, JobSpec spec, std::vector<PsClient*> ps,
                             std::vector<WorkerClient*> workers, PredictRunnerOptions options)
    : run_id_(std::move(run_id)),
      spec_(std::move(spec)),
      job_key_(options.lease_secret.empty() ? std::string()
                                            : DeriveJobKey(options.lease_secret, run_id_)),
      workers_(std::move(workers)),
      options_(std::move(options)) {
  // The coordinator's control requests to the PS are signed, as a job's.
  for (PsClient* p : ps) {
    signing_.push_back(std::make_unique<SigningPsClient>(p, options_.lease_secret));
    ps_.push_back(signing_.back().get());
  }
}

PredictRunner::~PredictRunner() = default;

void PredictRunner::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (parts_ != nullptr) parts_->phases.Cancel(absl::CancelledError("prediction cancelled"));
}

absl::StatusOr<int64_t> PredictRunner::SetupWorkers(std::string* backend) {
  setup_.set_job_id(run_id_);
  setup_.set_spec_yaml(spec_.yaml);
  setup_.set_replicas(static_cast<int32_t>(spec_.replicas));
  for (const std::string& a : options_.ps_addresses) setup_.add_ps_addresses(a);
  ASSIGN_OR_RETURN(const VariablePlan plan, PlanVariables(ModelVariables(spec_), spec_.partitioner,
                                                          static_cast<int>(ps_.size())));
  for (const auto& p : plan.placement) *setup_.add_placement() = p;
  if (!job_key_.empty()) {
    setup_.set_worker_key(DeriveWorkerKey(job_key_));
    SignRequest(setup_.worker_key(), "SetupJob", &setup_);
  }
  std::vector<absl::Status> status(workers_.size());
  std::vector<SetupJobResponse> responses(workers_.size());
  std::vector<std::thread> threads;
  const int attempts = std::max<int>(1, options_.max_attempts > 0
                                            ? options_.max_attempts
                                            : static_cast<int>(spec_.fault_tolerance.max_attempts));
  for (size_t w = 0; w < workers_.size(); ++w) {
    threads.emplace_back([&, w] {
      for (int attempt = 1;; ++attempt) {
        SetupJobRequest request = setup_;
        PingResponse held;
        if (!options_.lease_secret.empty() && workers_[w]->Ping(PingRequest(), &held).ok() &&
            !held.job_id().empty() && held.job_id() != run_id_) {
          // The worker still holds an earlier job of this coordinator: the
          // proof that the coordinator lets it go (SetupJobRequest.release).
          request.set_release(
              RequestMac(DeriveWorkerKey(DeriveJobKey(options_.lease_secret, held.job_id())),
                         "SetupJob.release", request));
        }
        status[w] = workers_[w]->SetupJob(request, &responses[w]);
        const bool transient = absl::IsUnavailable(status[w]) ||
                               absl::IsDeadlineExceeded(status[w]) || absl::IsAborted(status[w]);
        if (status[w].ok() || !transient || attempt >= attempts) break;
        absl::SleepFor(ExponentialBackoff{options_.retry_backoff, 5}.Before(attempt));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!status[w].ok()) {
      return absl::Status(status[w].code(),
                          absl::StrCat("setting up worker ", w, " (", workers_[w]->address(),
                                       "): ", status[w].message()));
    }
    if (responses[w].eval_examples() != responses[0].eval_examples()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "workers disagree on the rows to predict: worker 0 has ", responses[0].eval_examples(),
          ", worker ", w, " has ", responses[w].eval_examples()));
    }
  }
  *backend = responses[0].backend();
  return responses[0].eval_examples();
}

void PredictRunner::Cleanup() {
  for (size_t p = 0; p < ps_.size(); ++p) {
    EndJobRequest request;
    request.set_job(run_id_);
    EndJobResponse response;
    if (absl::Status s = ps_[p]->EndJob(request, &response); !s.ok()) {
      spdlog::warn("predict {}: could not free its variables on PS {} ({}); the next job frees them",
                   run_id_, p, s.ToString());
    }
  }
  if (job_key_.empty()) return;
  ReleaseJobRequest release;
  release.set_job_id(run_id_);
  SignRequest(DeriveWorkerKey(job_key_), "ReleaseJob", &release);
  for (WorkerClient* w : workers_) {
    ReleaseJobResponse ignored;
    w->ReleaseJob(release, &ignored).IgnoreError();  // best effort, as a job's end
  }
}

void PredictRunner::OnAnswer(const RunClosureResponse& r, int64_t begin, int64_t end) {
  const TensorProto& t = r.predictions();
  absl::Status error;
  if (t.dtype() != DT_FLOAT32 || t.shape_size() != 2 || r.first_row() != begin ||
      t.shape(0) != end - begin ||
      t.data().size() != static_cast<size_t>(t.shape(0) * t.shape(1)) * sizeof(float)) {
    error = absl::InternalError(
        absl::StrCat("a worker answered the predict closure of rows [", begin, ", ", end,
                     ") with a malformed result (first row ", r.first_row(), ", shape [",
                     t.shape_size() > 0 ? t.shape(0) : -1, ", ",
                     t.shape_size() > 1 ? t.shape(1) : -1, "], ", t.data().size(), " bytes)"));
  } else {
    std::vector<float> values(static_cast<size_t>(t.shape(0) * t.shape(1)));
    std::memcpy(values.data(), t.data().data(), t.data().size());
    error = table_->Record(begin, end - begin, t.shape(1), std::move(values)).status();
  }
  if (!error.ok()) {
    absl::MutexLock lock(&mu_);
    if (answer_error_.ok()) answer_error_ = error;
    parts_->phases.Cancel(error);
    return;
  }
  if (!options_.on_progress) return;
  PredictProgress p;
  p.closures = table_->num_splits();
  p.closures_done = table_->splits_done();
  p.rows = table_->rows();
  p.rows_done = table_->rows_done();
  p.duplicates = table_->duplicates();
  for (const JobEvent& e : parts_->board.Events()) p.retries += e.kind() == "retry" ? 1 : 0;
  options_.on_progress(p, *table_);
}

absl::StatusOr<PredictResult> PredictRunner::Run() {
  if (ps_.empty()) return absl::InvalidArgumentError("the cluster has no PS task");
  if (workers_.empty()) return absl::InvalidArgumentError("the cluster has no worker");
  if (spec_.strategy == Strategy::kMultiWorkerMirrored) {
    return absl::InvalidArgumentError(
        "batch prediction runs on PS tasks; a multi_worker_mirrored job has "
        "none (its checkpoint "
        "still restores onto PS: give the spec another strategy)");
  }
  if (options_.closure_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows per predict closure must be >= 1, not ", options_.closure_rows));
  }
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("prediction cancelled");
  }
  if (options_.health != nullptr) {
    std::vector<std::string> worker_addresses;
    for (WorkerClient* w : workers_) worker_addresses.push_back(w->address());
    RETURN_IF_ERROR(WaitForCluster(*options_.health, static_cast<int>(ps_.size()),
                                   static_cast<int>(workers_.size()), options_.ps_addresses,
                                   worker_addresses, absl::Now() + options_.cluster_wait,
                                   absl::Milliseconds(200)));
  }
  // The variables, restored from the checkpoint into the run's namespace.
  const std::string dir =
      options_.checkpoint_dir.empty() ? spec_.checkpoint.dir : options_.checkpoint_dir;
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        "no checkpoint directory: give one (the spec has no checkpoint.dir)");
  }
  ASSIGN_OR_RETURN(const CheckpointLocation location,
                   ResolveCheckpointDir(options_.checkpoint_root, dir));
  ASSIGN_OR_RETURN(VariablePlan plan, PlanVariables(ModelVariables(spec_), spec_.partitioner,
                                                    static_cast<int>(ps_.size())));
  for (CreateVariablesRequest& r : plan.per_ps) {
    r.set_job(run_id_);
    r.set_job_key(job_key_);
    r.set_checkpoint_dir(location.name_prefix.empty() ? "." : location.name_prefix);
  }
  CheckpointManager checkpoints(location.dir, /*keep=*/1, run_id_, location.name_prefix);
  if (checkpoints.List().empty()) {
    return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", location.dir));
  }
  PredictResult result;
  absl::StatusOr<CheckpointManifest> restored = checkpoints.RestoreLatest(plan, ps_);
  if (!restored.ok()) {
    Cleanup();
    return restored.status();
  }
  result.checkpoint_id = restored->checkpoint_id();
  result.global_step = restored->global_step();
  absl::StatusOr<int64_t> rows = SetupWorkers(&result.backend);
  if (!rows.ok()) {
    Cleanup();
    return rows.status();
  }
  absl::StatusOr<PredictResult> done = Predict(*rows, std::move(result));
  Cleanup();
  return done;
}

absl::StatusOr<PredictResult> PredictRunner::Predict(int64_t rows, PredictResult result) {
  table_ = std::make_unique<PredictionTable>(rows, options_.closure_rows);
  const int max_attempts = options_.max_attempts > 0
                               ? options_.max_attempts
                               : static_cast<int>(spec_.fault_tolerance.max_attempts);
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("prediction cancelled");
    parts_ = std::make_unique<Parts>(this, max_attempts);
  }
  if (options_.on_progress) {
    PredictProgress p;
    p.closures = table_->num_splits();
    p.rows = rows;
    options_.on_progress(p, *table_);
  }
  parts_->health.Start();
  const absl::Time start = options_.now();
  PhaseTotals totals;
  absl::StatusOr<PhaseEnd> end =
      parts_->phases.RunPhase(PREDICT, /*epoch=*/0, rows, options_.closure_rows, &totals);
  result.predict_seconds = absl::ToDoubleSeconds(options_.now() - start);
  parts_->health.Join();
  {
    absl::MutexLock lock(&mu_);
    if (!answer_error_.ok()) return answer_error_;
  }
  if (!end.ok()) return end.status();
  if (*end == PhaseEnd::kRolledBack) {
    return absl::AbortedError("the prediction was rolled back after a PS failure");
  }
  // Loudly: a row without exactly one prediction is a bug, never a result.
  RETURN_IF_ERROR(table_->Verify());
  result.progress.closures = table_->num_splits();
  result.progress.closures_done = table_->splits_done();
  result.progress.rows = table_->rows();
  result.progress.rows_done = table_->rows_done();
  result.progress.duplicates = table_->duplicates();
  for (const JobEvent& e : parts_->board.Events()) {
    result.progress.retries += e.kind() == "retry" ? 1 : 0;
  }
  result.table = std::move(table_);
  return result;
}

}  // namespace pscluster
