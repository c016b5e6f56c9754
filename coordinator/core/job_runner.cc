#include "coordinator/core/job_runner.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/lr_schedule.h"
#include "common/metrics.h"
#include "common/backoff.h"
#include "common/control_auth.h"
#include "common/status_macros.h"
#include "common/update_lease.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/cluster_health.h"
#include "coordinator/core/worker_copies_ps_client.h"
#include "coordinator/core/signing_ps_client.h"

namespace pscluster {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `spec` resolved for the replicas of `workers` workers (common/job_spec.h)
// unless it already is; left unresolved (replicas 0) if it cannot be, which
// Run reports.
JobSpec Resolved(JobSpec spec, size_t workers) {
  if (spec.replicas > 0) return spec;
  JobSpec resolved = spec;
  if (ResolveReplicas(ReplicasFor(spec, static_cast<int64_t>(workers)), &resolved).ok()) {
    return resolved;
  }
  return spec;
}

int64_t StepsFor(int64_t size, int64_t closure_examples, int64_t batch) {
  const int64_t full = size / closure_examples;
  const int64_t rest = size % closure_examples;
  return full * CeilDiv(closure_examples, batch) + CeilDiv(rest, batch);
}

// `ps`, each wrapped in a SigningPsClient (owned by `owned`) under `secret`.
std::vector<PsClient*> Signing(std::vector<PsClient*> ps, const std::string& secret,
                               std::vector<std::unique_ptr<PsClient>>* owned) {
  std::vector<PsClient*> out;
  for (PsClient* p : ps) {
    owned->push_back(std::make_unique<SigningPsClient>(p, secret));
    out.push_back(owned->back().get());
  }
  return out;
}

}  // namespace

int64_t ClosureId(ClosureMode mode, int64_t epoch, int64_t split) {
  return (mode == EVAL ? (int64_t{1} << 62) : 0) | (epoch << 32) | split;
}

JobRunner::JobRunner(std::string job_id, JobSpec spec, std::vector<PsClient*> ps,
                     std::vector<WorkerClient*> workers, JobRunnerOptions options)
    : job_id_(std::move(job_id)),
      spec_(Resolved(std::move(spec), workers.size())),
      job_key_(options.lease_secret.empty() ? std::string()
                                            : DeriveJobKey(options.lease_secret, job_id_)),
      mirrors_(spec_.strategy == Strategy::kMultiWorkerMirrored && !options.worker_ps.empty()
                   ? std::make_unique<WorkerCopiesPsClient>(options.worker_ps)
                   : nullptr),
      ps_(Signing(mirrors_ != nullptr ? std::vector<PsClient*>{mirrors_.get()} : std::move(ps),
                  options.lease_secret, &signing_)),
      workers_(std::move(workers)),
      options_(std::move(options)),
      checkpoint_dir_(options_.checkpoint_dir.empty() ? spec_.checkpoint.dir
                                                      : options_.checkpoint_dir),
      max_attempts_(options_.max_attempts > 0 ? options_.max_attempts
                                              : static_cast<int>(spec_.fault_tolerance.max_attempts)),
      worker_down_(new std::atomic<bool>[workers_.size()]),
      worker_losses_(new std::atomic<int64_t>[workers_.size()]) {
  for (size_t w = 0; w < workers_.size(); ++w) {
    worker_down_[w] = false;
    worker_losses_[w] = 0;
  }
  if (options_.registry != nullptr) {
    // Registering an existing family returns it: every job shares these.
    checkpoint_failures_metric_ =
        &prometheus::BuildCounter()
             .Name("pscluster_checkpoint_failures_total")
             .Help("Failed checkpoint attempts, retries included, of every job.")
             .Register(*options_.registry)
             .Add({});
    checkpoints_disabled_metric_ =
        &prometheus::BuildGauge()
             .Name("pscluster_checkpoints_disabled")
             .Help("Running jobs that gave up checkpoints after failures (on_failure: continue).")
             .Register(*options_.registry)
             .Add({});
  }
  absl::MutexLock lock(&mu_);
  status_.set_job_id(job_id_);
  status_.set_name(spec_.name);
  status_.set_state(QUEUED);
  status_.set_total_epochs(spec_.train.epochs);
  status_.set_per_replica_batch(spec_.data.per_replica_batch);
  status_.set_global_batch(spec_.data.global_batch);
  status_.set_replicas(spec_.replicas);
  status_.set_strategy(StrategyName(spec_.strategy));
  status_.set_learning_rate(DescribeLearningRate(spec_.optimizer));
  start_ = absl::Now();
  status_.set_submitted_unix_s(absl::ToDoubleSeconds(start_ - absl::UnixEpoch()));
  last_checkpoint_time_ = start_;
}

JobRunner::~JobRunner() = default;

void JobRunner::Update(const std::function<void(JobStatusProto*)>& change) {
  absl::MutexLock lock(&mu_);
  change(&status_);
  ++version_;
}

JobStatusProto JobRunner::Status() const {
  absl::MutexLock lock(&mu_);
  JobStatusProto s = status_;
  const absl::Time end = std::min(absl::Now(), end_);
  s.set_wall_seconds(absl::ToDoubleSeconds(end - start_));
  return s;
}

int64_t JobRunner::WaitForChange(int64_t seen, absl::Duration timeout,
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

void JobRunner::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (current_queue_ != nullptr) current_queue_->Stop(absl::CancelledError("job cancelled"));
}

void JobRunner::Event(const std::string& kind, const std::string& message) {
  JobEvent e;
  e.set_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  e.set_kind(kind);
  e.set_message(message);
  if (kind == "failed" || kind == "retry" || kind == "worker_down" || kind == "worker_lost" ||
      kind == "ps_down" || kind == "checkpoint_failed" || kind == "accounting") {
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

std::vector<JobEvent> JobRunner::Events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

void JobRunner::Interrupt() {
  absl::MutexLock lock(&mu_);
  interrupted_ = true;
  cancelled_ = true;
  if (current_queue_ != nullptr) current_queue_->Stop(absl::CancelledError("coordinator shutdown"));
}

bool JobRunner::interrupted() const {
  absl::MutexLock lock(&mu_);
  return interrupted_;
}

void JobRunner::CancelQueued() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  Finish(absl::CancelledError("cancelled while queued")).IgnoreError();
}

void JobRunner::Log(const JobLogRecord& record) {
  if (log_ == nullptr) return;
  absl::Status s = log_->Append(record);  // fsynced: see JobLog
  if (s.ok()) return;
  // A broken disk fails every append: say so once, then every 30 s.
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&log_warning_mu_);
  ++log_failures_;
  if (now - last_log_warning_ < absl::Seconds(30)) return;
  spdlog::warn("job {}: job log: {} ({} failed appends so far)", job_id_, s.ToString(),
               log_failures_);
  last_log_warning_ = now;
}

SetupJobRequest JobRunner::ReleasingSetup(WorkerClient* worker) const {
  SetupJobRequest request = setup_request_;
  PingResponse held;
  if (options_.lease_secret.empty() || !worker->Ping(PingRequest(), &held).ok() ||
      held.job_id().empty() || held.job_id() == job_id_) {
    return request;
  }
  // The worker still holds an earlier job: this coordinator's proof that it
  // lets that job go (the worker refuses a switch without it).
  request.set_release(RequestMac(DeriveWorkerKey(DeriveJobKey(options_.lease_secret,
                                                              held.job_id())),
                                 "SetupJob.release", request));
  return request;
}

absl::Status JobRunner::SetupWorkers(int64_t* train_examples, int64_t* eval_examples) {
  setup_request_.set_job_id(job_id_);
  setup_request_.set_spec_yaml(spec_.yaml);
  setup_request_.set_replicas(static_cast<int32_t>(spec_.replicas));
  if (Mirrored()) {
    for (const std::string& a : options_.worker_addresses) setup_request_.add_worker_addresses(a);
  }
  for (const std::string& a : options_.ps_addresses) setup_request_.add_ps_addresses(a);
  for (const auto& p : plan_.placement) *setup_request_.add_placement() = p;
  if (!job_key_.empty()) {
    // The worker holds the job under its worker key, and takes its closures
    // only signed under it (common/control_auth.h).
    setup_request_.set_worker_key(DeriveWorkerKey(job_key_));
    SignRequest(setup_request_.worker_key(), "SetupJob", &setup_request_);
  }

  // Workers load their data in parallel.
  std::vector<absl::Status> status(workers_.size());
  std::vector<SetupJobResponse> responses(workers_.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers_.size(); ++w) {
    threads.emplace_back([&, w] {
      // A worker that restarts or is slow to answer while the job starts is
      // asked again (bounded); errors of the job's own input are final.
      for (int attempt = 1;; ++attempt) {
        status[w] = workers_[w]->SetupJob(ReleasingSetup(workers_[w]), &responses[w]);
        const bool transient = absl::IsUnavailable(status[w]) ||
                               absl::IsDeadlineExceeded(status[w]) || absl::IsAborted(status[w]);
        if (status[w].ok() || !transient || attempt >= max_attempts_) break;
        Event("retry", absl::StrCat("setting up worker ", w, " (", workers_[w]->address(),
                                    "), attempt ", attempt, ": ", status[w].ToString(),
                                    "; retrying"));
        absl::SleepFor(ExponentialBackoff{options_.retry_backoff, 5}.Before(attempt));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!status[w].ok()) {
      return absl::Status(status[w].code(), absl::StrCat("setting up worker ", w, " (",
                                                         workers_[w]->address(),
                                                         "): ", status[w].message()));
    }
    if (responses[w].train_examples() != responses[0].train_examples() ||
        responses[w].eval_examples() != responses[0].eval_examples()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "workers disagree on the data: worker 0 has ", responses[0].train_examples(), "/",
          responses[0].eval_examples(), " train/eval examples, worker ", w, " has ",
          responses[w].train_examples(), "/", responses[w].eval_examples()));
    }
  }
  *train_examples = responses[0].train_examples();
  *eval_examples = responses[0].eval_examples();
  const std::string backend = responses[0].backend();
  Update([&](JobStatusProto* s) { s->set_backend(backend); });
  return absl::OkStatus();
}

void JobRunner::ReleaseWorkers() {
  if (job_key_.empty()) return;
  ReleaseJobRequest request;
  request.set_job_id(job_id_);
  SignRequest(DeriveWorkerKey(job_key_), "ReleaseJob", &request);
  for (WorkerClient* w : workers_) {
    ReleaseJobResponse response;
    // Best effort: a worker that does not answer is let go by its hold
    // timeout (worker_server --job_hold_timeout_s).
    w->ReleaseJob(request, &response).IgnoreError();
  }
}

absl::Status JobRunner::Finish(absl::Status status) {
  stop_health_ = true;
  if (checkpoints_disabled_metric_ != nullptr && Status().checkpoints_disabled()) {
    checkpoints_disabled_metric_->Decrement();  // no longer running
  }
  if (interrupted()) {
    // Not an end: the job resumes in the next coordinator.
    Event("interrupted", "the coordinator is shutting down; the job resumes when it restarts");
    Update([](JobStatusProto* s) {
      s->set_state(QUEUED);
      s->set_error("interrupted by a coordinator shutdown");
    });
    return absl::CancelledError("interrupted by a coordinator shutdown");
  }
  // After the final checkpoint: nothing of the job stays on the PS tasks.
  if (touched_ps_) {
    // Only PS that answer their health check are asked (a PS that is down
    // would hold each call for its full deadline, and the job's end with it);
    // without every PS there is no final layout to keep.
    const std::vector<bool> up = PsAnswering();
    const bool all_up = std::all_of(up.begin(), up.end(), [](bool u) { return u; });
    absl::StatusOr<DescribeJobResponse> last =
        all_up ? Describe() : absl::UnavailableError("a PS is down");
    if (last.ok()) {
      absl::MutexLock lock(&mu_);
      // What each PS applied, for "applied == steps on every PS".
      status_.clear_ps_applied_steps();
      for (const PsLoad& p : last->ps()) status_.add_ps_applied_steps(p.applied_steps());
      final_describe_ = *std::move(last);
    }
    EndOnEveryPs(up);
  }
  ReleaseWorkers();
  if (status.ok()) {
    Event("succeeded", "the job succeeded");
  } else if (absl::IsCancelled(status)) {
    Event("cancelled", std::string(status.message()));
  } else {
    Event("failed", std::string(status.message()));
  }
  JobLogRecord rec;
  {
    absl::MutexLock lock(&mu_);
    end_ = absl::Now();
    if (status.ok()) {
      status_.set_state(SUCCEEDED);
    } else if (absl::IsCancelled(status) && cancelled_) {
      status_.set_state(CANCELLED);
      status_.set_error(std::string(status.message()));
    } else {
      status_.set_state(FAILED);
      status_.set_error(std::string(status.message()));
    }
    rec.mutable_ended()->set_state(status_.state());
    rec.mutable_ended()->set_error(status_.error());
    JobStatusProto final_status = status_;
    final_status.set_wall_seconds(absl::ToDoubleSeconds(end_ - start_));
    rec.mutable_ended()->set_status(final_status.SerializeAsString());
  }
  // Logged before the final status is published, so that whoever sees the
  // job end also finds it ended in the log.
  Log(rec);
  Update([](JobStatusProto*) {});
  return status;
}

absl::Status JobRunner::Run() {
  {
    // Wall time counts from here: time spent QUEUED is not the job's.
    absl::MutexLock lock(&mu_);
    start_ = absl::Now();
    last_checkpoint_time_ = start_;
  }
  Update([](JobStatusProto* s) { s->set_state(RUNNING); });
  if (options_.metrics != nullptr) options_.metrics->JobStarted(!checkpoint_dir_.empty());
  if (Mirrored() && mirrors_ == nullptr) {
    return Finish(absl::FailedPreconditionError(
        "strategy multi_worker_mirrored needs the workers' copies of the model, which this "
        "coordinator was not given"));
  }
  if (ps_.empty()) return Finish(absl::InvalidArgumentError("the cluster has no PS task"));
  if (workers_.empty()) return Finish(absl::InvalidArgumentError("the cluster has no worker"));
  if (spec_.replicas == 0) {
    // The batch or learning rate cannot be resolved for this cluster.
    JobSpec spec = spec_;
    absl::Status s = ResolveReplicas(ReplicasFor(spec, static_cast<int64_t>(workers_.size())), &spec);
    Update([](JobStatusProto* st) { st->set_invalid_input(true); });
    return Finish(s.ok() ? absl::InternalError("the job spec was not resolved") : s);
  }
  if (options_.health != nullptr) {
    // Every task must answer first, workers included (a rollout may still
    // be starting them); one that never does is named.
    absl::Status s = WaitForCluster(
        *options_.health, Mirrored() ? 0 : static_cast<int>(ps_.size()),
        static_cast<int>(workers_.size()),
        options_.ps_addresses, options_.worker_addresses, absl::Now() + options_.cluster_wait,
        absl::Milliseconds(200), [this] {
          absl::MutexLock lock(&mu_);
          return cancelled_;
        });
    if (!s.ok()) return Finish(s);
  }
  Event("started", absl::StrCat("running on ", ps_.size(), " PS and ", workers_.size(),
                                 " workers"));
  // Errors of the job's own input, found before any training step.
  auto invalid_input = [this](const absl::Status& s) {
    if (absl::IsInvalidArgument(s) || absl::IsNotFound(s) || absl::IsDataLoss(s) ||
        absl::IsFailedPrecondition(s) || absl::IsOutOfRange(s)) {
      Update([](JobStatusProto* st) { st->set_invalid_input(true); });
    }
    return s;
  };
  if (absl::Status s = Prepare(); !s.ok()) return Finish(invalid_input(s));
  NoteStateIncarnations();
  int64_t train_n = 0, eval_n = 0;
  if (absl::Status s = SetupWorkers(&train_n, &eval_n); !s.ok()) {
    return Finish(invalid_input(s));
  }
  {
    absl::MutexLock lock(&mu_);
    if (epoch_ >= spec_.train.epochs && status_.resumed_from_checkpoint() >= 0) {
      status_.set_already_complete(true);
      ++version_;
    }
  }
  if (Status().already_complete()) {
    Event("resumed", absl::StrCat("checkpoint ", Status().resumed_from_checkpoint(), " in ",
                                  checkpoint_dir_, " already covers all ", spec_.train.epochs,
                                  " epochs: nothing to train in this run"));
  }

  // A synchronous step takes a global batch (over the replicas); a worker's
  // asynchronous one a batch per device.
  const int64_t batch = StepExamples(spec_);
  const int64_t closure_examples = spec_.train.steps_per_closure * batch;
  closures_per_epoch_ = CeilDiv(train_n, closure_examples);
  Update([&](JobStatusProto* s) {
    s->set_total_steps(spec_.train.epochs * StepsFor(train_n, closure_examples, batch));
  });
  std::thread health;
  if (options_.health != nullptr) health = std::thread([this] { HealthLoop(); });
  struct JoinOnExit {
    std::thread* t;
    std::atomic<bool>* stop;
    ~JoinOnExit() {
      *stop = true;
      if (t->joinable()) t->join();
    }
  } join_health{&health, &stop_health_};

  while (true) {
    int64_t epoch;
    {
      absl::MutexLock lock(&mu_);
      epoch = epoch_;
      status_.set_epoch(std::min(epoch + 1, spec_.train.epochs));
      ++version_;
    }
    if (epoch >= spec_.train.epochs) break;
    const absl::Time epoch_start = absl::Now();
    PhaseTotals train;
    absl::StatusOr<PhaseEnd> t = RunPhase(TRAIN, epoch, train_n, closure_examples, &train);
    if (!t.ok()) return Finish(t.status());
    if (*t == PhaseEnd::kRolledBack) continue;
    PhaseTotals eval;
    absl::StatusOr<PhaseEnd> e = RunPhase(EVAL, epoch, eval_n, options_.eval_closure_examples, &eval);
    if (!e.ok()) return Finish(e.status());
    if (*e == PhaseEnd::kRolledBack) continue;
    EpochResult r;
    r.set_epoch(epoch + 1);
    {
      absl::MutexLock lock(&mu_);
      r.set_train_loss(epoch_examples_ > 0 ? epoch_loss_sum_ / epoch_examples_ : 0);
    }
    r.set_eval_accuracy(eval.examples > 0 ? static_cast<double>(eval.correct) / eval.examples : 0);
    r.set_eval_loss(eval.examples > 0 ? eval.loss_sum / eval.examples : 0);
    r.set_wall_seconds(absl::ToDoubleSeconds(absl::Now() - epoch_start));
    if (!eval.positive.empty() || !eval.negative.empty()) {
      const double auc = AucFromHistograms(eval.positive, eval.negative);
      if (!std::isnan(auc)) r.set_eval_auc(auc);
    }
    {
      absl::MutexLock lock(&mu_);
      *status_.add_epochs() = r;
      status_.set_eval_accuracy(r.eval_accuracy());
      status_.set_eval_loss(r.eval_loss());
      if (r.eval_auc() > 0) status_.set_eval_auc(r.eval_auc());
      epoch_ = epoch + 1;
      finished_splits_.clear();
      epoch_examples_ = 0;
      epoch_loss_sum_ = 0;
      ++version_;
    }
    Event("epoch", absl::StrCat("epoch ", epoch + 1, "/", spec_.train.epochs, " finished: train loss ",
                                absl::SixDigits(r.train_loss()), ", eval accuracy ",
                                absl::SixDigits(r.eval_accuracy()),
                                r.eval_auc() > 0 ? absl::StrCat(", eval AUC ", absl::SixDigits(r.eval_auc()))
                                                 : std::string()));
    JobLogRecord rec;
    rec.mutable_epoch_finished()->set_epoch(epoch);
    rec.mutable_epoch_finished()->set_result(r.SerializeAsString());
    Log(rec);
  }
  // Every step counted must have been applied once on every PS, before the
  // final checkpoint keeps the result.
  if (absl::Status s = AuditFinalSteps(); !s.ok()) return Finish(s);
  if (checkpoints_ != nullptr) {
    if (absl::Status s = CheckpointWithRetries(/*final=*/true); !s.ok()) return Finish(s);
  }
  return Finish(absl::OkStatus());
}

std::vector<StepDiscrepancy> JobRunner::CompareWithPs(AccountingPoint point,
                                                      std::vector<std::string>* unanswered) {
  const std::vector<PsSteps> ps = AskPsSteps(ps_, job_id_, step_reach_);
  StepLedger ledger;
  ledger.point = point;
  std::vector<uint64_t> known;
  {
    absl::MutexLock lock(&mu_);
    ledger.steps = status_.steps();
    ledger.lost_steps = status_.lost_steps();
    known = state_incarnation_;
  }
  for (size_t p = 0; unanswered != nullptr && p < ps.size(); ++p) {
    if (step_reach_[p] != StepReach::kNone && !ps[p].answered) {
      unanswered->push_back(absl::StrCat("PS ", p, ": ", ps[p].error));
    }
  }
  return CompareSteps(ledger, step_reach_, ps, known);
}

absl::Status JobRunner::AuditFinalSteps() {
  std::vector<std::string> unanswered;
  const std::vector<StepDiscrepancy> found = CompareWithPs(AccountingPoint::kEnd, &unanswered);
  if (!unanswered.empty()) {
    return absl::UnavailableError(absl::StrCat("could not check what every PS applied of the job: ",
                                               absl::StrJoin(unanswered, "; ")));
  }
  for (const StepDiscrepancy& d : found) Event("accounting", d.message);
  return AccountingError(found);
}

void JobRunner::NoteStateIncarnations() {
  const std::vector<PsSteps> ps = AskPsSteps(ps_, job_id_, step_reach_);
  absl::MutexLock lock(&mu_);
  state_incarnation_.assign(ps.size(), 0);
  for (size_t p = 0; p < ps.size(); ++p) {
    if (ps[p].answered) state_incarnation_[p] = ps[p].incarnation;
  }
}

}  // namespace pscluster
