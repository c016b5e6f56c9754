#include "coordinator/core/job_status_board.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace pscluster {

JobStatusBoard::JobStatusBoard(std::string job_id, JobStatusProto initial,
                               std::function<absl::Time()> now)
    : job_id_(std::move(job_id)), now_(std::move(now)) {
  absl::MutexLock lock(&mu_);
  status_ = std::move(initial);
  start_ = now_();
}

absl::Time JobStatusBoard::Start() {
  absl::MutexLock lock(&mu_);
  start_ = now_();
  return start_;
}

void JobStatusBoard::Update(const std::function<void(JobStatusProto*)>& change) {
  absl::MutexLock lock(&mu_);
  change(&status_);
  ++version_;
}

void JobStatusBoard::Read(const std::function<void(const JobStatusProto&)>& read) const {
  absl::MutexLock lock(&mu_);
  read(status_);
}

JobStatusProto JobStatusBoard::Status() const {
  absl::MutexLock lock(&mu_);
  JobStatusProto s = status_;
  const absl::Time end = std::min(now_(), end_);
  s.set_wall_seconds(absl::ToDoubleSeconds(end - start_));
  return s;
}

int64_t JobStatusBoard::WaitForChange(int64_t seen, absl::Duration timeout,
                                      JobStatusProto* out) const {
  int64_t version;
  {
    absl::MutexLock lock(&mu_);
    auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ > seen; };
    mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
    version = version_;
  }
  *out = Status();
  return version;
}

JobStatusProto JobStatusBoard::End(const std::function<void(JobStatusProto*)>& change) {
  absl::MutexLock lock(&mu_);
  end_ = now_();
  change(&status_);
  JobStatusProto final_status = status_;
  final_status.set_wall_seconds(absl::ToDoubleSeconds(end_ - start_));
  return final_status;
}

void JobStatusBoard::Event(const std::string& kind, const std::string& message) {
  JobEvent e;
  e.set_unix_seconds(absl::ToDoubleSeconds(now_() - absl::UnixEpoch()));
  e.set_kind(kind);
  e.set_message(message);
  if (kind == "failed" || kind == "retry" || kind == "worker_down" || kind == "worker_lost" ||
      kind == "ps_down" || kind == "checkpoint_failed" || kind == "accounting" ||
      kind == "summaries_failed") {
    spdlog::warn("job {}: {}: {}", job_id_, kind, message);
  } else {
    spdlog::info("job {}: {}: {}", job_id_, kind, message);
  }
  std::vector<JobEvent> pending;
  {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(e));
    if (log_ != nullptr) {
      pending.assign(events_.begin() + static_cast<std::ptrdiff_t>(events_logged_), events_.end());
      events_logged_ = events_.size();
    }
  }
  for (const JobEvent& p : pending) {
    JobLogRecord rec;
    rec.mutable_event()->set_unix_seconds(p.unix_seconds());
    rec.mutable_event()->set_kind(p.kind());
    rec.mutable_event()->set_message(p.message());
    Log(rec);
  }
}

std::vector<JobEvent> JobStatusBoard::Events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

void JobStatusBoard::AttachLog(std::unique_ptr<JobLog> log) {
  absl::MutexLock lock(&mu_);
  log_ = std::move(log);
}

bool JobStatusBoard::has_log() const {
  absl::MutexLock lock(&mu_);
  return log_ != nullptr;
}

void JobStatusBoard::Log(const JobLogRecord& record) {
  JobLog* log;
  {
    absl::MutexLock lock(&mu_);
    log = log_.get();
  }
  if (log == nullptr) return;
  absl::Status s = log->Append(record);  // fsynced: see JobLog
  if (s.ok()) return;
  // A broken disk fails every append: say so once, then every 30 s.
  const absl::Time now = now_();
  absl::MutexLock lock(&log_warning_mu_);
  ++log_failures_;
  if (now - last_log_warning_ < absl::Seconds(30)) return;
  spdlog::warn("job {}: job log: {} ({} failed appends so far)", job_id_, s.ToString(),
               log_failures_);
  last_log_warning_ = now;
}

}  // namespace pscluster
