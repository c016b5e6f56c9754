#include "coordinator/core/job_runner.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <tuple>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/lr_schedule.h"
#include "common/metrics.h"
#include "common/backoff.h"
#include "common/control_auth.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "common/update_lease.h"
#include "coordinator/core/cluster_health.h"
#include "coordinator/core/worker_copies_ps_client.h"
#include "coordinator/core/signing_ps_client.h"

namespace pscluster {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

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

// The status of a job just submitted.
JobStatusProto QueuedStatus(const std::string& job_id, const JobSpec& spec, absl::Time now) {
  JobStatusProto status;
  status.set_job_id(job_id);
  status.set_name(spec.name);
  status.set_state(QUEUED);
  status.set_total_epochs(spec.train.epochs);
  status.set_per_replica_batch(spec.data.per_replica_batch);
  status.set_global_batch(spec.data.global_batch);
  status.set_replicas(spec.replicas);
  status.set_strategy(StrategyName(spec.strategy));
  status.set_eval_mode(EvalModeName(spec.eval.mode));
  status.set_learning_rate(DescribeLearningRate(spec.optimizer));
  status.set_submitted_unix_s(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  return status;
}

// With elastic workers, the cluster a job waits for at its start: a worker
// that left the roster is not waited for (it answers as healthy here).
class MembersHealth final : public HealthChecker {
 public:
  MembersHealth(HealthChecker* inner, const WorkerRoster* roster)
      : inner_(inner), roster_(roster) {}
  absl::StatusOr<uint64_t> CheckPs(int index) override { return inner_->CheckPs(index); }
  absl::Status CheckWorker(int index) override {
    if (roster_ != nullptr && !roster_->active(index)) return absl::OkStatus();
    return inner_->CheckWorker(index);
  }

 private:
  HealthChecker* const inner_;
  const WorkerRoster* const roster_;
};

std::vector<std::string> Addresses(const std::vector<WorkerClient*>& workers) {
  std::vector<std::string> out;
  for (WorkerClient* w : workers) out.push_back(w->address());
  return out;
}

}  // namespace

JobRunner::JobRunner(std::string job_id, JobSpec spec, std::vector<PsClient*> ps,
                     std::vector<WorkerClient*> workers, JobRunnerOptions options)
    : job_id_(std::move(job_id)),
      spec_(std::move(spec)),
      job_key_(options.lease_secret.empty() ? std::string()
                                            : DeriveJobKey(options.lease_secret, job_id_)),
      mirrors_(spec_.strategy == Strategy::kMultiWorkerMirrored && !options.worker_ps.empty()
                   ? std::make_unique<WorkerCopiesPsClient>(options.worker_ps)
                   : nullptr),
      all_ps_(Signing(mirrors_ != nullptr ? std::vector<PsClient*>{mirrors_.get()} : std::move(ps),
                      options.lease_secret, &signing_)),
      ps_(all_ps_.begin(),
          all_ps_.begin() + (options.job_ps > 0 && options.job_ps < static_cast<int>(all_ps_.size())
                                 ? options.job_ps
                                 : static_cast<int>(all_ps_.size()))),
      workers_(std::move(workers)),
      options_(std::move(options)),
      checkpoint_dir_(options_.checkpoint_dir.empty() ? spec_.checkpoint.dir
                                                      : options_.checkpoint_dir),
      max_attempts_(options_.max_attempts > 0
                        ? options_.max_attempts
                        : static_cast<int>(spec_.fault_tolerance.max_attempts)),
      members_health_(options_.health != nullptr
                          ? std::make_unique<MembersHealth>(options_.health, options_.roster)
                          : nullptr),
      board_(job_id_, QueuedStatus(job_id_, spec_, options_.now()), options_.now),
      checkpoint_policy_(spec_.checkpoint, options_.now),
      recovery_(std::make_shared<PsRecovery>(RecoveryOptions(ps_))),
      health_([this] {
        HealthWatch::Options o;
        o.health = options_.health;
        o.workers = workers_;
        o.interval = absl::Seconds(spec_.fault_tolerance.health_check_interval_s);
        o.worker_timeout = absl::Seconds(spec_.fault_tolerance.worker_timeout_s);
        o.roster = Mirrored() && !ElasticRing() ? nullptr : options_.roster;
        o.check_ps = [this] { Recovery()->CheckEveryPs(); };
        o.on_worker_lost = [this] {
          board_.Update([](JobStatusProto* s) { s->set_workers_lost(s->workers_lost() + 1); });
          if (options_.metrics != nullptr) options_.metrics->WorkerLost();
        };
        o.event = [this](const std::string& kind, const std::string& message) {
          board_.Event(kind, message);
        };
        return o;
      }()),
      phases_(
          [this] {
            PhaseRunner::Options o;
            o.job_id = job_id_;
            o.job_key = job_key_;
            o.spec = &spec_;
            o.workers = workers_;
            o.max_attempts = max_attempts_;
            o.retry_backoff = options_.retry_backoff;
            o.setup = &setup_request_;
            o.board = &board_;
            o.health = options_.health != nullptr ? &health_ : nullptr;
            o.metrics = options_.metrics;
            o.on_train_closure = [this](int64_t steps, int64_t examples, double loss_sum) {
              if (summaries_ != nullptr) {
                summaries_->TrainClosure(steps, examples, loss_sum, ExamplesPerSec());
              }
            };
            o.now = options_.now;
            o.roster = options_.roster;
            o.setup_worker = [this](int w) { return SetupJoined(w); };
            if (ElasticRing()) {
              o.reform_ring = [this](const std::vector<int>& m) { return ReformRing(m); };
            }
            return o;
          }(),
          [this] {
            PhaseRunner::Control c;
            c.ps_failed = [this] { return Recovery()->failed(); };
            c.mark_ps_failed = [this] { return Recovery()->MarkFailed(); };
            // A rescale asked for runs where a checkpoint would (no
            // closure in flight).
            c.checkpoint_due = [this] { return rescale_pending_.load() || CheckpointDue(); };
            c.checkpoint = [this] {
              return rescale_pending_.load() ? RunPendingRescale()
                                             : CheckpointWithRetries(/*final=*/false);
            };
            c.recover = [this] { return RecoverFromPsFailure(); };
            return c;
          }()) {
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
    rescales_metric_ = &prometheus::BuildCounter()
                            .Name("pscluster_ps_rescales_total")
                            .Help("Jobs moved onto another number of PS tasks (RescaleJob).")
                            .Register(*options_.registry)
                            .Add({});
    rescale_pause_metric_ =
        &prometheus::BuildGauge()
             .Name("pscluster_ps_rescale_last_pause_seconds")
             .Help("The last PS rescale's pause: from no closure in flight until dispatch "
                   "resumed on the new PS tasks.")
             .Register(*options_.registry)
             .Add({});
  }
  board_.Update([this](JobStatusProto* s) { s->set_num_ps(static_cast<int32_t>(ps_.size())); });
}

PsRecovery::Options JobRunner::RecoveryOptions(std::vector<PsClient*> ps) {
  PsRecovery::Options o;
  o.job_id = job_id_;
  o.ps = std::move(ps);
  // A mirrored job's copies are its ring's members: one that left is not
  // waited for.
  o.health = Mirrored() ? members_health_.get() : options_.health;
  o.mirrored = Mirrored();
  o.workers = static_cast<int>(workers_.size());
  o.worker_addresses = Addresses(workers_);
  o.recovery_timeout = absl::Seconds(spec_.fault_tolerance.ps_recovery_timeout_s);
  o.now = options_.now;
  o.steps_counted = [this] { return StepsCounted(); };
  o.event = [this](const std::string& kind, const std::string& message) {
    board_.Event(kind, message);
  };
  return o;
}

std::shared_ptr<PsRecovery> JobRunner::Recovery() const {
  absl::MutexLock lock(&recovery_mu_);
  return recovery_;
}

JobRunner::~JobRunner() = default;

std::pair<int64_t, int64_t> JobRunner::StepsCounted() const {
  std::pair<int64_t, int64_t> counted;
  board_.Read([&](const JobStatusProto& s) { counted = {s.steps(), s.lost_steps()}; });
  return counted;
}

double JobRunner::ExamplesPerSec() const {
  double examples_per_sec = 0;
  board_.Read([&](const JobStatusProto& s) { examples_per_sec = s.examples_per_sec(); });
  return examples_per_sec;
}

absl::Status JobRunner::OpenSummaries() {
  if (spec_.summaries.logdir.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string logdir,
                   ResolveSummaryDir(options_.checkpoint_root, spec_.summaries.logdir));
  JobSummaries::Options o;
  o.logdir = logdir;
  o.every_steps = spec_.summaries.every_steps;
  o.optimizer = spec_.optimizer;
  o.inline_eval = spec_.eval.mode == EvalSpec::Mode::kInline;
  o.now = options_.now;
  o.on_error = [this](const std::string& message) { board_.Event("summaries_failed", message); };
  ASSIGN_OR_RETURN(summaries_, JobSummaries::Create(std::move(o)));
  Event("summaries", "TensorBoard summaries in " + summaries_->path());
  return absl::OkStatus();
}

void JobRunner::Cancel() { phases_.Cancel(absl::CancelledError("job cancelled")); }

void JobRunner::Interrupt() {
  interrupted_ = true;
  phases_.Cancel(absl::CancelledError("coordinator shutdown"));
}

void JobRunner::CancelQueued() {
  phases_.Cancel(absl::CancelledError("cancelled while queued"));
  Finish(absl::CancelledError("cancelled while queued")).IgnoreError();
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

absl::Status JobRunner::SetupWorkers(DataSizes* data) {
  setup_request_.set_job_id(job_id_);
  setup_request_.set_spec_yaml(spec_.yaml);
  setup_request_.set_replicas(static_cast<int32_t>(spec_.replicas));
  if (Mirrored()) {
    // The ring: the cluster's workers (elastic: those still members, FormFirstRing).
    if (ring_.empty() && !ElasticRing()) {
      for (size_t w = 0; w < workers_.size(); ++w) ring_.push_back(static_cast<int>(w));
    }
    for (int w : ring_) setup_request_.add_worker_addresses(options_.worker_addresses[w]);
  }
  if (!job_key_.empty()) {
    // The worker holds the job under its worker key, and takes its closures
    // only signed under it (common/control_auth.h).
    setup_request_.set_worker_key(DeriveWorkerKey(job_key_));
  }
  SetLayoutInSetup();

  // Workers load their data in parallel. With elastic workers, one that
  // left the cluster is skipped (set up if it comes back).
  auto member = [this](size_t w) {
    return options_.roster == nullptr || (Mirrored() && !ElasticRing()) ||
           options_.roster->active(static_cast<int>(w));
  };
  std::vector<absl::Status> status(workers_.size());
  std::vector<SetupJobResponse> responses(workers_.size());
  std::vector<std::thread> threads;
  size_t first = workers_.size();
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!member(w)) continue;
    first = std::min(first, w);
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
  if (first == workers_.size()) {
    return absl::UnavailableError("every worker of the cluster has left it");
  }
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!member(w)) continue;
    phases_.MarkSetUp(static_cast<int>(w));
    if (!status[w].ok()) {
      return absl::Status(status[w].code(), absl::StrCat("setting up worker ", w, " (",
                                                         workers_[w]->address(),
                                                         "): ", status[w].message()));
    }
    if (responses[w].train_examples() != responses[first].train_examples() ||
        responses[w].eval_examples() != responses[first].eval_examples()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "workers disagree on the data: worker ", first, " has ",
          responses[first].train_examples(), "/", responses[first].eval_examples(),
          " train/eval examples, worker ", w, " has ", responses[w].train_examples(), "/",
          responses[w].eval_examples()));
    }
  }
  data->train = responses[first].train_examples();
  data->eval = responses[first].eval_examples();
  data_ = *data;
  const std::string backend = responses[first].backend();
  board_.Update([&](JobStatusProto* s) { s->set_backend(backend); });
  return absl::OkStatus();
}

absl::Status JobRunner::SetupJoined(int w) {
  WorkerClient* worker = options_.roster->client(w);
  SetupJobResponse response;
  absl::Status s = worker->SetupJob(ReleasingSetup(worker), &response);
  if (!s.ok()) return s;
  if (response.train_examples() != data_.train || response.eval_examples() != data_.eval) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it holds ", response.train_examples(), "/", response.eval_examples(),
        " train/eval examples, the job's workers ", data_.train, "/", data_.eval));
  }
  Event("worker_joined", absl::StrCat("worker ", w, " (", worker->address(),
                                      ") joined the job"));
  return absl::OkStatus();
}

void JobRunner::ReleaseWorkers() {
  if (job_key_.empty()) return;
  ReleaseJobRequest request;
  request.set_job_id(job_id_);
  SignRequest(DeriveWorkerKey(job_key_), "ReleaseJob", &request);
  std::vector<WorkerClient*> workers = workers_;
  if (options_.roster != nullptr && (!Mirrored() || ElasticRing())) {
    // Those that joined too (one that left and comes back is released by
    // the next job's SetupJob, ReleasingSetup).
    for (int w = static_cast<int>(workers_.size()); w < options_.roster->size(); ++w) {
      if (options_.roster->active(w)) workers.push_back(options_.roster->client(w));
    }
  }
  for (WorkerClient* w : workers) {
    ReleaseJobResponse response;
    // Best effort: a worker that does not answer is let go by its hold
    // timeout (worker_server --job_hold_timeout_s).
    w->ReleaseJob(request, &response).IgnoreError();
  }
}

absl::Status JobRunner::Finish(absl::Status status) {
  health_.Stop();
  {
    // A rescale still waiting for a quiesced point never gets one.
    absl::MutexLock lock(&rescale_mu_);
    if (rescale_pending_.exchange(false) && !rescale_result_.has_value()) {
      rescale_result_ = absl::FailedPreconditionError(
          "the job ended before it reached a point to rescale at (a training phase with no "
          "closure in flight)");
    }
  }
  if (checkpoints_disabled_metric_ != nullptr && checkpoint_policy_.disabled()) {
    checkpoints_disabled_metric_->Decrement();  // no longer running
  }
  if (interrupted()) {
    // Not an end: the job resumes in the next coordinator.
    Event("interrupted", "the coordinator is shutting down; the job resumes when it restarts");
    board_.Update([](JobStatusProto* s) {
      s->set_state(QUEUED);
      s->set_error("interrupted by a coordinator shutdown");
    });
    return absl::CancelledError("interrupted by a coordinator shutdown");
  }
  // After the final checkpoint: nothing of the job stays on the PS tasks.
  std::optional<std::vector<int64_t>> applied;
  if (touched_ps_) {
    // Only PS that answer their health check are asked (a PS that is down
    // would hold each call for its full deadline, and the job's end with it);
    // without every PS there is no final layout to keep.
    const std::vector<bool> up = Recovery()->Answering();
    const bool all_up = std::all_of(up.begin(), up.end(), [](bool u) { return u; });
    absl::StatusOr<DescribeJobResponse> last =
        all_up ? Describe() : absl::UnavailableError("a PS is down");
    if (last.ok()) {
      // What each PS applied, for "applied == steps on every PS".
      applied.emplace();
      for (const PsLoad& p : last->ps()) applied->push_back(p.applied_steps());
      absl::MutexLock lock(&mu_);
      final_describe_ = *std::move(last);
    }
    Recovery()->EndOnEveryPs(up);
  }
  ReleaseWorkers();
  if (status.ok()) {
    Event("succeeded", "the job succeeded");
  } else if (absl::IsCancelled(status)) {
    Event("cancelled", std::string(status.message()));
  } else {
    Event("failed", std::string(status.message()));
  }
  const bool cancelled = phases_.cancelled();
  const JobStatusProto final_status = board_.End([&](JobStatusProto* s) {
    if (applied.has_value()) {
      s->clear_ps_applied_steps();
      for (int64_t a : *applied) s->add_ps_applied_steps(a);
    }
    if (status.ok()) {
      s->set_state(SUCCEEDED);
    } else if (absl::IsCancelled(status) && cancelled) {
      s->set_state(CANCELLED);
      s->set_error(std::string(status.message()));
    } else {
      s->set_state(FAILED);
      s->set_error(std::string(status.message()));
    }
  });
  JobLogRecord rec;
  rec.mutable_ended()->set_state(final_status.state());
  rec.mutable_ended()->set_error(final_status.error());
  rec.mutable_ended()->set_status(final_status.SerializeAsString());
  // Logged before the final status is published, so that whoever sees the
  // job end also finds it ended in the log.
  board_.Log(rec);
  board_.Update([](JobStatusProto*) {});
  return status;
}

absl::Status JobRunner::Run() {
  // Wall time counts from here: time spent QUEUED is not the job's.
  board_.Start();
  checkpoint_policy_.Start();
  board_.Update([](JobStatusProto* s) { s->set_state(RUNNING); });
  if (options_.metrics != nullptr) options_.metrics->JobStarted(!checkpoint_dir_.empty());
  if (Mirrored() && mirrors_ == nullptr) {
    return Finish(absl::FailedPreconditionError(
        "strategy multi_worker_mirrored needs the workers' copies of the model, which this "
        "coordinator was not given"));
  }
  if (ps_.empty()) return Finish(absl::InvalidArgumentError("the cluster has no PS task"));
  if (workers_.empty()) return Finish(absl::InvalidArgumentError("the cluster has no worker"));
  if (const int64_t replicas = ReplicasFor(spec_, static_cast<int64_t>(workers_.size()));
      spec_.replicas != replicas) {
    // The spec is resolved once, by whoever parsed it (JobManager, psctl),
    // for this cluster.
    Update([](JobStatusProto* st) { st->set_invalid_input(true); });
    return Finish(absl::FailedPreconditionError(absl::StrCat(
        "the job spec was resolved for ", spec_.replicas, " replicas (0: not resolved), but this "
        "cluster runs ", replicas, " (common/job_spec.h, ResolveReplicas)")));
  }
  if (absl::Status s = CheckLabelled(spec_); !s.ok()) {
    Update([](JobStatusProto* st) { st->set_invalid_input(true); });
    return Finish(s);
  }
  DataSizes data;
  if (absl::Status s = Prepare(&data); !s.ok()) return Finish(s);
  health_.Start();
  struct JoinOnExit {
    HealthWatch* health;
    ~JoinOnExit() { health->Join(); }
  } join_health{&health_};
  if (absl::Status s = RunEpochs(data); !s.ok()) return Finish(s);
  return Finish(FinalChecks());
}

absl::Status JobRunner::Prepare(DataSizes* data) {
  if (options_.health != nullptr) {
    // Every task must answer first, workers included (a rollout may still
    // be starting them); one that never does is named. Elastic workers that
    // left are not waited for.
    MembersHealth members(options_.health,
                          Mirrored() && !ElasticRing() ? nullptr : options_.roster);
    RETURN_IF_ERROR(WaitForCluster(
        members, Mirrored() ? 0 : static_cast<int>(ps_.size()),
        static_cast<int>(workers_.size()), options_.ps_addresses, options_.worker_addresses,
        absl::Now() + options_.cluster_wait, absl::Milliseconds(200),
        [this] { return phases_.cancelled(); }));
  }
  Event("started", absl::StrCat("running on ", ps_.size(), " PS and ", workers_.size(),
                                 " workers"));
  // Errors of the job's own input, found before any training step.
  auto invalid_input = [this](const absl::Status& s) {
    if (absl::IsInvalidArgument(s) || absl::IsNotFound(s) || absl::IsDataLoss(s) ||
        absl::IsFailedPrecondition(s) || absl::IsOutOfRange(s)) {
      board_.Update([](JobStatusProto* st) { st->set_invalid_input(true); });
    }
    return s;
  };
  if (absl::Status s = OpenSummaries(); !s.ok()) return invalid_input(s);
  // Before the variables: a restored checkpoint's position is checked
  // against the plan's file set.
  if (absl::Status s = PlanStreams(); !s.ok()) return invalid_input(s);
  if (absl::Status s = FormFirstRing(); !s.ok()) return s;
  if (absl::Status s = PrepareVariables(); !s.ok()) return invalid_input(s);
  Recovery()->NoteStateIncarnations();
  if (absl::Status s = SetupWorkers(data); !s.ok()) return invalid_input(s);
  const int64_t epoch = phases_.epoch();
  bool complete = false;
  board_.Read([&](const JobStatusProto& s) {
    complete = epoch >= spec_.train.epochs && s.resumed_from_checkpoint() >= 0;
  });
  if (complete) {
    board_.Update([](JobStatusProto* s) { s->set_already_complete(true); });
    Event("resumed", absl::StrCat("checkpoint ", Status().resumed_from_checkpoint(), " in ",
                                  checkpoint_dir_, " already covers all ", spec_.train.epochs,
                                  " epochs: nothing to train in this run"));
  }
  // A synchronous step takes a global batch (over the replicas); a worker's
  // asynchronous one a batch per device.
  const int64_t batch = StepExamples(spec_);
  const int64_t closure_examples = spec_.train.steps_per_closure * batch;
  const int64_t epoch_steps = train_stream_.has_value()
                                  ? train_stream_->epoch_steps()
                                  : StepsFor(data->train, closure_examples, batch);
  board_.Update([&](JobStatusProto* s) { s->set_total_steps(spec_.train.epochs * epoch_steps); });
  return absl::OkStatus();
}

absl::Status JobRunner::PlanStreams() {
  for (auto [source, plan, part] :
       {std::tuple{&spec_.data.train, &train_stream_, "train"},
        std::tuple{&spec_.data.eval, &eval_stream_, "eval"}}) {
    if (!source->stream.enabled) continue;
    if (*part == 'e' && spec_.eval.mode != EvalSpec::Mode::kInline) continue;
    const bool train = *part == 't';
    const int64_t batch = train ? StepExamples(spec_) : spec_.data.per_replica_batch;
    const int64_t unit = train ? spec_.train.steps_per_closure * batch
                               : std::max<int64_t>(batch, options_.eval_closure_examples);
    if (!options_.data_roots.empty()) {
      // What the patterns match, checked before the coordinator opens it.
      absl::StatusOr<std::vector<std::string>> files = ExpandDataFiles(
          absl::StrCat("data.", part),
          source->paths.empty() ? std::vector<std::string>{source->path} : source->paths,
          options_.data_roots);
      if (!files.ok()) return files.status();
    }
    absl::StatusOr<StreamPlan> made = StreamPlan::Create(*source, unit, batch);
    if (!made.ok()) {
      return absl::Status(made.status().code(),
                          absl::StrCat("data.", part, ": ", made.status().message()));
    }
    plan->emplace(*std::move(made));
    Event("planned",
          absl::StrCat("data.", part, ": ", (*plan)->files(), " files, ", (*plan)->records(),
                       " records in ", (*plan)->units(), " units of shard ",
                       source->stream.shard == StreamSpec::Shard::kFile ? "file" : "data", ", ",
                       (*plan)->epoch_steps(), " steps an epoch (", (*plan)->fingerprint(), ")"));
    if (const auto& lost = (*plan)->lost_tails(); !lost.empty()) {
      // corrupt_records: skip: the rest of each such file is counted once,
      // as one corrupt record, and named.
      Update([&](JobStatusProto* s) {
        s->set_corrupt_records(s->corrupt_records() + static_cast<int64_t>(lost.size()));
      });
      for (const std::string& m : lost) Event("corrupt_records", absl::StrCat("data.", part, ": ", m));
    }
  }
  return absl::OkStatus();
}

absl::Status JobRunner::RunEpochs(const DataSizes& data) {
  const int64_t closure_examples = spec_.train.steps_per_closure * StepExamples(spec_);
  while (true) {
    const int64_t epoch = phases_.epoch();
    board_.Update(
        [&](JobStatusProto* s) { s->set_epoch(std::min(epoch + 1, spec_.train.epochs)); });
    if (epoch >= spec_.train.epochs) return absl::OkStatus();
    const absl::Time epoch_start = options_.now();
    PhaseTotals train;
    absl::StatusOr<PhaseEnd> trained;
    if (train_stream_.has_value()) {
      StreamPlan::Epoch units = train_stream_->ForEpoch(epoch, spec_.seed, spec_.data.shuffle);
      trained = phases_.RunPlannedPhase(TRAIN, epoch, std::move(units.splits),
                                        units.split_indices, &train);
    } else {
      trained = phases_.RunPhase(TRAIN, epoch, data.train, closure_examples, &train);
    }
    ASSIGN_OR_RETURN(const PhaseEnd t, trained);
    if (t == PhaseEnd::kRolledBack) continue;
    // eval: sidecar evaluates the checkpoints in another process, eval: none
    // not at all; the epoch's result then holds no eval metrics.
    const bool inline_eval = spec_.eval.mode == EvalSpec::Mode::kInline;
    PhaseTotals eval;
    if (inline_eval) {
      absl::StatusOr<PhaseEnd> evaluated;
      if (eval_stream_.has_value()) {
        // The eval files in order, the same units every epoch.
        StreamPlan::Epoch units = eval_stream_->ForEpoch(epoch, spec_.seed, /*shuffle=*/false);
        evaluated = phases_.RunPlannedPhase(EVAL, epoch, std::move(units.splits),
                                            units.split_indices, &eval);
      } else {
        evaluated =
            phases_.RunPhase(EVAL, epoch, data.eval, options_.eval_closure_examples, &eval);
      }
      ASSIGN_OR_RETURN(const PhaseEnd e, evaluated);
      if (e == PhaseEnd::kRolledBack) continue;
    }
    EpochResult r;
    r.set_epoch(epoch + 1);
    r.set_train_loss(phases_.TrainLoss());
    r.set_eval_accuracy(eval.examples > 0 ? static_cast<double>(eval.correct) / eval.examples : 0);
    r.set_eval_loss(eval.examples > 0 ? eval.loss_sum / eval.examples : 0);
    r.set_wall_seconds(absl::ToDoubleSeconds(options_.now() - epoch_start));
    if (!eval.positive.empty() || !eval.negative.empty()) {
      const double auc = AucFromHistograms(eval.positive, eval.negative);
      if (!std::isnan(auc)) r.set_eval_auc(auc);
    }
    phases_.FinishEpoch(r);
    if (summaries_ != nullptr) {
      // What each PS holds now (no closure is in flight); none when a PS
      // is down (its Stats would hold the job for a whole deadline).
      const std::vector<bool> up = Recovery()->Answering();
      std::vector<PsLoad> ps;
      if (std::all_of(up.begin(), up.end(), [](bool u) { return u; })) {
        absl::StatusOr<DescribeJobResponse> described = Describe();
        if (described.ok()) ps.assign(described->ps().begin(), described->ps().end());
      }
      summaries_->EpochFinished(StepsCounted().first, r, ExamplesPerSec(), ps);
    }
    Event("epoch",
          absl::StrCat("epoch ", epoch + 1, "/", spec_.train.epochs, " finished: train loss ",
                       absl::SixDigits(r.train_loss()),
                       inline_eval ? absl::StrCat(", eval accuracy ",
                                                  absl::SixDigits(r.eval_accuracy()))
                                   : absl::StrCat(" (eval: ", EvalModeName(spec_.eval.mode), ")"),
                       r.eval_auc() > 0 ? absl::StrCat(", eval AUC ", absl::SixDigits(r.eval_auc()))
                                        : std::string()));
    JobLogRecord rec;
    rec.mutable_epoch_finished()->set_epoch(epoch);
    rec.mutable_epoch_finished()->set_result(r.SerializeAsString());
    board_.Log(rec);
  }
}

absl::Status JobRunner::FinalChecks() {
  // Every step counted must have been applied once on every PS, before the
  // final checkpoint keeps the result.
  RETURN_IF_ERROR(Recovery()->AuditFinalSteps());
  if (checkpoints_ != nullptr) RETURN_IF_ERROR(CheckpointWithRetries(/*final=*/true));
  return absl::OkStatus();
}

}  // namespace pscluster
