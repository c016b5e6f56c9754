#include "coordinator/core/job_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/job_paths.h"
#include "coordinator/core/job_admission.h"

namespace pscluster {

bool IsTerminal(JobState state) {
  return state == SUCCEEDED || state == FAILED || state == CANCELLED;
}

JobManager::JobManager(std::vector<PsClient*> ps, std::vector<WorkerClient*> workers,
                       JobRunnerOptions options, std::string state_dir)
    : ps_(std::move(ps)),
      workers_(std::move(workers)),
      options_(std::move(options)),
      state_dir_(std::move(state_dir)) {
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

JobManager::~JobManager() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (!running_.empty()) jobs_[running_]->Interrupt();
    if (predicting_ != nullptr) predicting_->Cancel();
  }
  scheduler_.join();
}

std::string JobManager::CheckpointDirFor(const std::string& id, const JobSpec& spec) const {
  if (!spec.checkpoint.dir.empty()) {
    // Resolved under the root (as the runner will, failing the job if it
    // no longer resolves there).
    absl::StatusOr<CheckpointLocation> location =
        ResolveCheckpointDir(options_.checkpoint_root, spec.checkpoint.dir);
    return location.ok() ? location->dir : spec.checkpoint.dir;
  }
  if (state_dir_.empty() || options_.checkpoint_root.empty()) return "";
  // <checkpoint_root>/<job id>, the id made a checkpoint name component.
  std::string component = id;
  for (char& c : component) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      c = '_';
    }
  }
  if (component.size() > 200) component = component.substr(component.size() - 200);
  return absl::StrCat(options_.checkpoint_root, "/", component);
}

void JobManager::QueueLocked(const std::string& id, JobSpec spec, JobRunnerOptions options) {
  options.checkpoint_dir = CheckpointDirFor(id, spec);
  auto runner = std::make_unique<JobRunner>(id, std::move(spec), ps_, workers_, std::move(options));
  const int64_t ahead = static_cast<int64_t>(queue_.size()) + (running_.empty() ? 0 : 1);
  runner->Event("queued", ahead == 0 ? std::string("queued; runs next")
                                     : absl::StrCat("queued behind ", ahead, " job(s)"));
  jobs_[id] = std::move(runner);
  order_.push_back(id);
  queue_.push_back(id);
}

void JobManager::SchedulerLoop() {
  while (true) {
    JobRunner* runner;
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!queue_.empty() && predicting_ == nullptr);
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
      running_ = id;
      runner = jobs_[id].get();
    }
    runner->Run().IgnoreError();
    const JobStatusProto final_status = runner->Status();
    if (!runner->interrupted()) RecordEnd(id, final_status);
    absl::MutexLock lock(&mu_);
    running_.clear();
  }
}

void JobManager::RecordEnd(const std::string& job_id, const JobStatusProto& status) {
  JobLog* registry;
  {
    absl::MutexLock lock(&mu_);
    registry = registry_.get();
  }
  if (registry == nullptr) return;
  JobLogRecord r;
  r.mutable_ended()->set_job_id(job_id);
  r.mutable_ended()->set_state(status.state());
  r.mutable_ended()->set_error(status.error());
  r.mutable_ended()->set_status(status.SerializeAsString());
  if (absl::Status s = registry->Append(r); !s.ok()) {
    spdlog::warn("job {}: recording its end in the registry: {}", job_id, s.ToString());
  }
}

absl::StatusOr<int> JobManager::Recover() {
  if (state_dir_.empty()) return 0;
  const std::string path = state_dir_ + "/jobs";
  absl::StatusOr<std::vector<JobLogRecord>> records = ReadJobLog(path);
  std::vector<JobLogRecord> registry;
  if (records.ok()) registry = *std::move(records);
  std::map<std::string, JobStatusProto> ended_in_registry;
  for (const JobLogRecord& r : registry) {
    if (!r.has_ended() || r.ended().job_id().empty()) continue;
    JobStatusProto status;
    status.ParseFromString(r.ended().status());
    status.set_job_id(r.ended().job_id());
    ended_in_registry[r.ended().job_id()] = status;
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(registry_, JobLog::Open(path));
  int queued = 0;
  for (const JobLogRecord& r : registry) {
    if (!r.has_started()) continue;
    ++submitted_;
    const std::string& id = r.started().job_id();
    owners_[id] = r.started().owner();
    absl::StatusOr<JobSpec> spec = ParseJobSpec(r.started().spec_yaml(), r.started().spec_path());
    if (!spec.ok()) {
      spdlog::warn("job {}: its recorded spec no longer parses ({}); not resumed", id,
                   spec.status().ToString());
      continue;
    }
    const std::string dir = CheckpointDirFor(id, *spec);
    std::optional<JobStatusProto> ended;
    if (auto it = ended_in_registry.find(id); it != ended_in_registry.end()) ended = it->second;
    if (!ended && !dir.empty()) {
      // A job that ended after its own log recorded it but before the registry did.
      absl::StatusOr<std::vector<JobLogRecord>> log = ReadJobLog(dir + "/joblog");
      if (log.ok()) {
        for (const JobLogRecord& e : *log) {
          if (!e.has_ended()) continue;
          JobStatusProto final_status;
          final_status.ParseFromString(e.ended().status());
          final_status.set_job_id(id);
          ended = final_status;
        }
      }
    }
    if (ended) {
      ended_[id] = EndedJob{*ended, dir};
      order_.push_back(id);
      continue;
    }
    if (absl::Status s =
            ResolveReplicas(ReplicasFor(*spec, static_cast<int64_t>(workers_.size())), &*spec);
        !s.ok()) {
      spdlog::warn("job {}: its spec does not fit this cluster ({}); not resumed", id,
                   s.ToString());
      continue;
    }
    JobRunnerOptions options = options_;
    options.resume = true;
    QueueLocked(id, *std::move(spec), options);
    ++queued;
  }
  return queued;
}

absl::StatusOr<SubmitJobResponse> JobManager::Submit(const std::string& spec_yaml,
                                                     const std::string& spec_path,
                                                     const std::string& owner) {
  ASSIGN_OR_RETURN(JobSpec spec,
                   ParseJobSpec(spec_yaml, spec_path.empty() ? "job.yaml" : spec_path));
  if (spec.strategy == Strategy::kOneDevice || spec.strategy == Strategy::kMirrored) {
    return absl::InvalidArgumentError(
        absl::StrCat("a coordinator runs strategy: parameter_server and central_storage jobs; "
                     "strategy: ",
                     StrategyName(spec.strategy), " runs in one process with `psctl local`"));
  }
  RETURN_IF_ERROR(CheckLabelled(spec));
  // The global batch and a learning rate scaled with the replicas depend on
  // this cluster's workers.
  RETURN_IF_ERROR(
      ResolveReplicas(ReplicasFor(spec, static_cast<int64_t>(workers_.size())), &spec));
  // A multi_worker_mirrored job's one "PS" is each worker's whole copy.
  RETURN_IF_ERROR(AdmitJob(
      spec, spec.strategy == Strategy::kMultiWorkerMirrored ? 1 : static_cast<int>(ps_.size()),
      options_.ps_memory_limit_bytes));
  RETURN_IF_ERROR(AdmitJobPaths(spec, options_.checkpoint_root, options_.data_roots));
  // A job that asks for checkpoints (a checkpoint.dir, or a trigger with the
  // default directory under the root) needs PS that can write them. A
  // multi_worker_mirrored job's copies are checkpointed by its workers.
  const bool default_dir = !state_dir_.empty() && !options_.checkpoint_root.empty();
  const bool asks_checkpoints =
      !spec.checkpoint.dir.empty() ||
      (default_dir && (spec.checkpoint.every_steps > 0 || spec.checkpoint.every_seconds > 0));
  if (asks_checkpoints && spec.strategy != Strategy::kMultiWorkerMirrored) {
    RETURN_IF_ERROR(AdmitCheckpointRoots(ps_, options_.ps_addresses, options_.health));
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the coordinator is shutting down");
  const std::string id = absl::StrCat(spec.name, "-", ++submitted_);
  if (!state_dir_.empty()) {
    if (registry_ == nullptr) {
      ASSIGN_OR_RETURN(registry_, JobLog::Open(state_dir_ + "/jobs"));
    }
    JobLogRecord r;
    r.mutable_started()->set_job_id(id);
    r.mutable_started()->set_spec_yaml(spec_yaml);
    r.mutable_started()->set_spec_path(spec_path);
    r.mutable_started()->set_owner(owner);
    r.mutable_started()->set_submitted_unix_s(
        absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
    RETURN_IF_ERROR(registry_->Append(r));
  }
  SubmitJobResponse response;
  response.set_job_id(id);
  owners_[id] = owner;
  response.set_queue_position(static_cast<int64_t>(queue_.size()) + (running_.empty() ? 0 : 1));
  QueueLocked(id, std::move(spec), options_);
  return response;
}

absl::StatusOr<JobRunner*> JobManager::Find(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return it->second.get();
}

JobStatusProto JobManager::StatusLocked(const std::string& job_id, JobRunner* runner) {
  JobStatusProto status = runner->Status();
  if (auto it = owners_.find(job_id); it != owners_.end()) status.set_owner(it->second);
  if (status.state() == QUEUED) {
    auto it = std::find(queue_.begin(), queue_.end(), job_id);
    if (it != queue_.end()) {
      status.set_queue_position((it - queue_.begin()) + (running_.empty() ? 0 : 1));
    }
  }
  return status;
}

absl::StatusOr<JobStatusProto> JobManager::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (auto it = ended_.find(job_id); it != ended_.end()) return OwnedLocked(it->second.status);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return StatusLocked(job_id, it->second.get());
}

absl::Status JobManager::Watch(const std::string& job_id,
                               const std::function<bool(const JobStatusProto&)>& on_update) {
  std::optional<JobStatusProto> ended;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = ended_.find(job_id); it != ended_.end()) ended = OwnedLocked(it->second.status);
  }
  if (ended) {
    on_update(*ended);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(JobRunner * runner, Find(job_id));
  int64_t seen = -1;
  while (true) {
    JobStatusProto status;
    seen = runner->WaitForChange(seen, absl::Seconds(1), &status);
    {
      absl::MutexLock lock(&mu_);
      status = status.state() == QUEUED ? StatusLocked(job_id, runner) : OwnedLocked(status);
    }
    if (!on_update(status) || IsTerminal(status.state())) return absl::OkStatus();
  }
}

JobStatusProto JobManager::OwnedLocked(JobStatusProto status) {
  if (auto it = owners_.find(status.job_id()); it != owners_.end()) status.set_owner(it->second);
  return status;
}

absl::StatusOr<RescaleJobResponse> JobManager::Rescale(const std::string& job_id, int num_ps,
                                                      const std::string& user) {
  JobRunner* runner = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = owners_.find(job_id); it != owners_.end() && !it->second.empty() &&
                                        it->second != user) {
      return absl::PermissionDeniedError(absl::StrCat("job '", job_id, "' belongs to '",
                                                      it->second, "'; only they may rescale it"));
    }
    if (auto it = ended_.find(job_id); it != ended_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job '", job_id, "' already ended (", JobState_Name(it->second.status.state()), ")"));
    }
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    runner = it->second.get();
  }
  // Waits (without the lock) for the job's next quiesced training point.
  return runner->Rescale(num_ps, absl::Seconds(120));
}

absl::Status JobManager::Cancel(const std::string& job_id, const std::string& user) {
  JobRunner* queued = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = owners_.find(job_id); it != owners_.end() && !it->second.empty() &&
                                        it->second != user) {
      return absl::PermissionDeniedError(absl::StrCat("job '", job_id, "' belongs to '",
                                                      it->second, "'; only they may cancel it"));
    }
    if (auto it = ended_.find(job_id); it != ended_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job '", job_id, "' already ended (", JobState_Name(it->second.status.state()), ")"));
    }
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    JobRunner* runner = it->second.get();
    const JobState state = runner->Status().state();
    if (IsTerminal(state)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", job_id, "' already ended (", JobState_Name(state), ")"));
    }
    auto q = std::find(queue_.begin(), queue_.end(), job_id);
    if (q == queue_.end()) {
      runner->Cancel();
      return absl::OkStatus();
    }
    queue_.erase(q);
    queued = runner;
  }
  queued->CancelQueued();
  RecordEnd(job_id, queued->Status());
  return absl::OkStatus();
}

absl::StatusOr<DescribeJobResponse> JobManager::Describe(const std::string& job_id) {
  ASSIGN_OR_RETURN(JobRunner * runner, Find(job_id));
  return runner->Describe();
}

absl::StatusOr<std::vector<JobEvent>> JobManager::Events(const std::string& job_id) {
  std::optional<EndedJob> ended;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = ended_.find(job_id); it != ended_.end()) ended = it->second;
  }
  if (!ended) {
    ASSIGN_OR_RETURN(JobRunner * runner, Find(job_id));
    return runner->Events();
  }
  // A job that ended under an earlier coordinator: its events are in its log.
  std::vector<JobEvent> events;
  if (!ended->checkpoint_dir.empty()) {
    absl::StatusOr<std::vector<JobLogRecord>> log = ReadJobLog(ended->checkpoint_dir + "/joblog");
    if (log.ok()) {
      for (const JobLogRecord& r : *log) {
        if (!r.has_event()) continue;
        JobEvent& e = events.emplace_back();
        e.set_unix_seconds(r.event().unix_seconds());
        e.set_kind(r.event().kind());
        e.set_message(r.event().message());
      }
    }
  }
  if (events.empty()) {
    JobEvent& e = events.emplace_back();
    e.set_kind(absl::AsciiStrToLower(JobState_Name(ended->status.state())));
    e.set_message(ended->status.error().empty()
                      ? "ended before this coordinator started; its event log is not kept"
                      : ended->status.error());
  }
  return events;
}

std::vector<JobStatusProto> JobManager::List() {
  absl::MutexLock lock(&mu_);
  std::vector<JobStatusProto> out;
  for (const std::string& id : order_) {
    if (auto it = ended_.find(id); it != ended_.end()) {
      out.push_back(OwnedLocked(it->second.status));
    } else if (auto j = jobs_.find(id); j != jobs_.end()) {
      out.push_back(StatusLocked(id, j->second.get()));
    }
  }
  return out;
}

int64_t JobManager::QueueDepth() {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

absl::Status JobManager::Predict(const PredictRequest& request,
                                const std::function<bool(const PredictResponse&)>& write) {
  const std::string path = request.spec_path().empty() ? "job.yaml" : request.spec_path();
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(request.spec_yaml(), path));
  if (!request.checkpoint_dir().empty()) spec.checkpoint.dir = request.checkpoint_dir();
  if (spec.checkpoint.dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no checkpoint to predict from: give PredictRequest.checkpoint_dir or "
              "checkpoint.dir"));
  }
  if (spec.strategy == Strategy::kMultiWorkerMirrored) {
    // Its checkpoint restores onto PS like any other: predict with the
    // parameter-server layout of the same model.
    spec.strategy = Strategy::kParameterServer;
  }
  if (spec.strategy == Strategy::kOneDevice || spec.strategy == Strategy::kMirrored) {
    spec.strategy = Strategy::kParameterServer;
  }
  RETURN_IF_ERROR(
      ResolveReplicas(ReplicasFor(spec, static_cast<int64_t>(workers_.size())), &spec));
  // Reads only where this coordinator allows (data files, the checkpoint).
  RETURN_IF_ERROR(AdmitJobPaths(spec, options_.checkpoint_root, options_.data_roots));
  PredictRunnerOptions o;
  o.ps_addresses = options_.ps_addresses;
  o.lease_secret = options_.lease_secret;
  o.checkpoint_dir = spec.checkpoint.dir;
  o.checkpoint_root = options_.checkpoint_root;
  o.health = options_.health;
  o.metrics = options_.metrics;
  o.cluster_wait = options_.cluster_wait;
  o.closure_rows = request.closure_rows() > 0 ? request.closure_rows() : 500;
  o.max_attempts = options_.max_attempts;
  o.retry_backoff = options_.retry_backoff;
  // Progress and rows come from the dispatch threads: one writer at a time,
  // and the rows in order (TakeReady and send under write_mu).
  absl::Mutex write_mu;
  bool gone = false;  // the caller went away
  int64_t rows_sent = 0;
  PredictRunner* self = nullptr;
  auto send = [&](const PredictResponse& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
    if (!gone && !write(r)) {
      gone = true;
      self->Cancel();
    }
    return !gone;
  };
  // The rows ready in `table`, about 1 MiB a message.
  auto send_rows = [&](PredictionTable& table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
    const int64_t outputs = std::max<int64_t>(table.outputs(), 1);
    const int64_t per_message =
        std::max<int64_t>(1, (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float) * outputs));
    PredictResponse pending;
    for (PredictionTable::Split& split : table.TakeReady()) {
      TensorProto* values = pending.mutable_rows()->mutable_values();
      if (values->shape_size() == 2 && values->shape(0) + split.rows > per_message) {
        if (!send(pending)) return;
        pending.Clear();
        values = pending.mutable_rows()->mutable_values();
      }
      if (values->shape_size() == 0) {
        pending.mutable_rows()->set_first_row(split.first_row);
        values->set_dtype(DT_FLOAT32);
        values->add_shape(0);
        values->add_shape(outputs);
      }
      values->set_shape(0, values->shape(0) + split.rows);
      values->mutable_data()->append(reinterpret_cast<const char*>(split.values.data()),
                                     split.values.size() * sizeof(float));
      rows_sent += split.rows;
    }
    if (pending.has_rows()) send(pending);
  };
  o.on_progress = [&](const PredictProgress& p, PredictionTable& table) {
    PredictResponse r;
    PredictProgressProto* out = r.mutable_progress();
    out->set_closures_done(p.closures_done);
    out->set_closures(p.closures);
    out->set_rows_done(p.rows_done);
    out->set_rows(p.rows);
    out->set_retries(p.retries);
    out->set_duplicates(p.duplicates);
    absl::MutexLock lock(&write_mu);
    if (send(r)) send_rows(table);
  };
  std::string run_id;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the coordinator is shutting down");
    if (predicting_ != nullptr) {
      return absl::FailedPreconditionError("another batch prediction is running on the cluster");
    }
    // A job whose status has ended (what `psctl status` shows) may still be
    // recording its end: wait for that, briefly, rather than call it busy.
    auto state = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return running_.empty() ? JOB_STATE_UNKNOWN : jobs_[running_]->Status().state();
    };
    if (state() == SUCCEEDED || state() == FAILED || state() == CANCELLED) {
      auto wrapped_up = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return running_.empty() || stopping_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&wrapped_up), absl::Seconds(30));
    }
    if (!running_.empty() || !queue_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the cluster is busy with job ", running_.empty() ? queue_.front() : running_,
          " (and ", queue_.size(), " queued): predict once it is idle"));
    }
    run_id = absl::StrCat("predict-", ++predictions_, "-",
                          absl::ToUnixMillis(absl::Now()));
  }
  PredictRunner runner(run_id, std::move(spec), ps_, workers_, std::move(o));
  self = &runner;
  {
    absl::MutexLock lock(&mu_);
    predicting_ = &runner;
  }
  absl::StatusOr<PredictResult> result = runner.Run();
  {
    absl::MutexLock lock(&mu_);
    predicting_ = nullptr;
  }
  RETURN_IF_ERROR(result.status());
  PredictionTable& table = *result->table;
  absl::MutexLock lock(&write_mu);
  send_rows(table);  // those no progress report took
  if (gone) return absl::CancelledError("the caller went away");
  if (rows_sent != table.rows()) {
    // Verify() passed, so this is a bug here: never a short result.
    return absl::InternalError(absl::StrCat("sent ", rows_sent, " of the ", table.rows(),
                                            " rows predicted"));
  }
  PredictResponse done;
  PredictSummary* s = done.mutable_summary();
  s->set_run_id(run_id);
  s->set_rows(table.rows());
  s->set_outputs(table.outputs());
  s->set_closures(result->progress.closures);
  s->set_retries(result->progress.retries);
  s->set_duplicates(result->progress.duplicates);
  s->set_checkpoint_id(result->checkpoint_id);
  s->set_global_step(result->global_step);
  s->set_predict_seconds(result->predict_seconds);
  s->set_backend(result->backend);
  if (!send(done)) return absl::CancelledError("the caller went away");
  return absl::OkStatus();
}

}  // namespace pscluster
