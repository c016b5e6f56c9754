#include "coordinator/core/job_manager.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pscluster {

bool IsTerminal(JobState state) {
  return state == SUCCEEDED || state == FAILED || state == CANCELLED;
}

JobManager::JobManager(std::vector<PsClient*> ps, std::vector<WorkerClient*> workers,
                       JobRunnerOptions options, std::string state_dir)
    : ps_(std::move(ps)),
      workers_(std::move(workers)),
      options_(std::move(options)),
      state_dir_(std::move(state_dir)) {}

std::string JobManager::CheckpointDirFor(const std::string& id, const JobSpec& spec) const {
  if (!spec.checkpoint.dir.empty()) return spec.checkpoint.dir;
  if (!state_dir_.empty()) return absl::StrCat(state_dir_, "/", id);
  return "";
}

void JobManager::StartLocked(const std::string& id, JobSpec spec, JobRunnerOptions options) {
  options.checkpoint_dir = CheckpointDirFor(id, spec);
  Job& job = jobs_[id];
  job.runner = std::make_unique<JobRunner>(id, std::move(spec), ps_, workers_, std::move(options));
  JobRunner* runner = job.runner.get();
  job.thread = std::thread([runner] { runner->Run().IgnoreError(); });
}

absl::StatusOr<int> JobManager::Recover() {
  if (state_dir_.empty()) return 0;
  const std::string path = state_dir_ + "/jobs";
  absl::StatusOr<std::vector<JobLogRecord>> records = ReadJobLog(path);
  std::vector<JobLogRecord> submitted;
  if (records.ok()) submitted = *std::move(records);
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(registry_, JobLog::Open(path));
  int resumed = 0;
  for (const JobLogRecord& r : submitted) {
    if (!r.has_started()) continue;
    ++submitted_;
    const std::string& id = r.started().job_id();
    absl::StatusOr<JobSpec> spec = ParseJobSpec(r.started().spec_yaml(), r.started().spec_path());
    if (!spec.ok()) continue;
    // Ended jobs are done; the others resume from their own job log.
    const std::string dir = CheckpointDirFor(id, *spec);
    bool ended = false;
    if (!dir.empty()) {
      absl::StatusOr<std::vector<JobLogRecord>> log = ReadJobLog(dir + "/joblog");
      if (log.ok()) {
        for (const JobLogRecord& e : *log) {
          if (!e.has_ended()) continue;
          ended = true;
          JobStatusProto final_status;
          final_status.ParseFromString(e.ended().status());
          final_status.set_job_id(id);
          ended_[id] = final_status;
        }
      }
    }
    if (ended || dir.empty()) continue;
    JobRunnerOptions options = options_;
    options.resume = true;
    StartLocked(id, *std::move(spec), options);
    ++resumed;
  }
  return resumed;
}

JobManager::~JobManager() {
  std::map<std::string, Job> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, job] : jobs_) job.runner->Cancel();
    jobs.swap(jobs_);
  }
  for (auto& [id, job] : jobs) {
    if (job.thread.joinable()) job.thread.join();
  }
}

absl::StatusOr<std::string> JobManager::Submit(const std::string& spec_yaml,
                                               const std::string& spec_path) {
  ASSIGN_OR_RETURN(JobSpec spec,
                   ParseJobSpec(spec_yaml, spec_path.empty() ? "job.yaml" : spec_path));
  if (spec.strategy != Strategy::kParameterServer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a coordinator runs strategy: parameter_server jobs; strategy: ", StrategyName(spec.strategy),
        " runs in one process with `psctl local`"));
  }
  absl::MutexLock lock(&mu_);
  for (auto& [id, job] : jobs_) {
    if (!IsTerminal(job.runner->Status().state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", id, "' is still running; cancel it or wait for it to end"));
    }
  }
  const std::string id = absl::StrCat(spec.name, "-", ++submitted_);
  if (!state_dir_.empty()) {
    if (registry_ == nullptr) {
      ASSIGN_OR_RETURN(registry_, JobLog::Open(state_dir_ + "/jobs"));
    }
    JobLogRecord r;
    r.mutable_started()->set_job_id(id);
    r.mutable_started()->set_spec_yaml(spec_yaml);
    r.mutable_started()->set_spec_path(spec_path);
    RETURN_IF_ERROR(registry_->Append(r));
  }
  StartLocked(id, std::move(spec), options_);
  return id;
}

absl::StatusOr<JobRunner*> JobManager::Find(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return it->second.runner.get();
}

absl::StatusOr<JobStatusProto> JobManager::Get(const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = ended_.find(job_id);
    if (it != ended_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(JobRunner * runner, Find(job_id));
  return runner->Status();
}

absl::Status JobManager::Watch(const std::string& job_id,
                               const std::function<bool(const JobStatusProto&)>& on_update) {
  std::optional<JobStatusProto> ended;
  {
    absl::MutexLock lock(&mu_);
    auto it = ended_.find(job_id);
    if (it != ended_.end()) ended = it->second;
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
    if (!on_update(status) || IsTerminal(status.state())) return absl::OkStatus();
  }
}

absl::Status JobManager::Cancel(const std::string& job_id) {
  ASSIGN_OR_RETURN(JobRunner * runner, Find(job_id));
  runner->Cancel();
  return absl::OkStatus();
}

absl::StatusOr<DescribeJobResponse> JobManager::Describe(const std::string& job_id) {
  ASSIGN_OR_RETURN(JobRunner * runner, Find(job_id));
  return runner->Describe();
}

std::vector<JobStatusProto> JobManager::List() {
  absl::MutexLock lock(&mu_);
  std::vector<JobStatusProto> out;
  for (const auto& [id, status] : ended_) out.push_back(status);
  for (auto& [id, job] : jobs_) out.push_back(job.runner->Status());
  return out;
}

}  // namespace pscluster
