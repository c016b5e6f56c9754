#include "api/pscluster/cluster_coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/pscluster/program_recovery.h"
#include "common/cluster_config.h"
#include "common/control_auth.h"
#include "common/initializer.h"
#include "common/model_variables.h"
#include "common/status_macros.h"
#include "common/update_lease.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/health_watch.h"
#include "coordinator/core/signing_ps_client.h"
#include "coordinator/service/grpc_health_checker.h"
#include "coordinator/service/grpc_worker_client.h"
#include "ps/service/remote_ps_client.h"

namespace pscluster {

// ---------------------------------------------------------------- RemoteValue

struct RemoteValue::State {
  explicit State(int64_t id) : closure_id(id) {}
  const int64_t closure_id;
  mutable absl::Mutex mu;
  bool ready ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<std::string> value ABSL_GUARDED_BY(mu);
  std::optional<FunctionError> error ABSL_GUARDED_BY(mu);

  // The first result wins.
  void Set(absl::StatusOr<std::string> v, std::optional<FunctionError> e) {
    absl::MutexLock lock(&mu);
    if (ready) return;
    ready = true;
    value = std::move(v);
    error = std::move(e);
  }
};

absl::StatusOr<std::string> RemoteValue::Fetch() const {
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(&state_->ready));
  return state_->value;
}

std::optional<FunctionError> RemoteValue::function_error() const {
  absl::MutexLock lock(&state_->mu);
  return state_->error;
}

bool RemoteValue::ready() const {
  absl::MutexLock lock(&state_->mu);
  return state_->ready;
}

bool RemoteValue::WaitFor(absl::Duration timeout) const {
  absl::MutexLock lock(&state_->mu);
  return state_->mu.AwaitWithTimeout(absl::Condition(&state_->ready), timeout);
}

int64_t RemoteValue::closure_id() const { return state_->closure_id; }

// ---------------------------------------------------------------- the cluster

struct ClusterCoordinator::Cluster {
  std::string secret;
  std::string job_key;
  std::vector<std::unique_ptr<RemotePsClient>> remote_ps;
  std::vector<std::unique_ptr<SigningPsClient>> ps;
  std::vector<std::unique_ptr<GrpcWorkerClient>> workers;
  SetupJobRequest setup;
  // The layout, each request with the job, its key and checkpoint dir.
  VariablePlan plan;
  std::unique_ptr<GrpcHealthChecker> health_checker;
  // Checkpoints, PS recovery and the step ledger; before `health`, which
  // calls it.
  std::unique_ptr<ProgramRecovery> recovery;
  std::unique_ptr<HealthWatch> health;
};

struct ClusterCoordinator::Session {
  ClosureQueue queue;
  std::vector<std::thread> dispatch;
  // Heals PS failures and takes periodic checkpoints (ControlLoop).
  std::thread control;
  // Waits for the queue to stop, then cancels the closures it dropped.
  std::thread watcher;
};

namespace {

std::string RandomHex() {
  const std::string bytes = RandomSecret().substr(0, 6);
  std::string hex;
  for (unsigned char c : bytes) absl::StrAppendFormat(&hex, "%02x", c);
  return hex;
}

absl::Status CheckAddresses(const std::vector<std::string>& addresses, const char* what) {
  if (addresses.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the cluster has no ", what, " task"));
  }
  for (const std::string& a : addresses) {
    if (absl::Status s = CheckHostPort(a); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " address '", a, "': ", s.message()));
    }
  }
  return absl::OkStatus();
}

// The status a function's error is raised as.
absl::Status FunctionErrorStatus(const FunctionError& e, const std::string& function,
                                 int64_t closure_id) {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  for (int c = 1; c <= 16; ++c) {
    if (absl::StatusCodeToString(static_cast<absl::StatusCode>(c)) == e.type()) {
      code = static_cast<absl::StatusCode>(c);
    }
  }
  std::string message = absl::StrCat("function '", function, "' (closure ", closure_id,
                                     ") raised ", e.type(), ": ", e.message());
  if (!e.traceback().empty()) absl::StrAppend(&message, "\n", e.traceback());
  return absl::Status(code, message);
}

// Calls `call` until it answers something else than UNAVAILABLE, or until
// `deadline`.
template <typename Call>
absl::Status UntilAvailable(absl::Time deadline, Call call) {
  while (true) {
    absl::Status s = call();
    if (!absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s)) return s;
    if (absl::Now() >= deadline) return s;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::Create(Options options) {
  if (options.ps_addresses.empty() && options.worker_addresses.empty() &&
      !options.cluster_file.empty()) {
    ASSIGN_OR_RETURN(ClusterSpec cluster, LoadClusterFile(options.cluster_file));
    options.ps_addresses = cluster.ps;
    options.worker_addresses = cluster.worker;
  }
  RETURN_IF_ERROR(CheckAddresses(options.ps_addresses, "PS"));
  RETURN_IF_ERROR(CheckAddresses(options.worker_addresses, "worker"));
  if (absl::Status s = ValidatePartitioner(options.partitioner); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("partitioner: ", s.message()));
  }
  if (options.closures_per_worker < 1 || options.max_attempts < 1 ||
      options.max_steps_per_closure < 1) {
    return absl::InvalidArgumentError(
        "closures_per_worker, max_attempts and max_steps_per_closure must be >= 1");
  }
  if (!options.checkpoint_dir.empty() && options.checkpoint_root.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_dir '", options.checkpoint_dir,
        "' needs checkpoint_root: the PS tasks' --checkpoint_root as this program reaches it"));
  }
  if (options.checkpoint_every_steps < 0 || options.checkpoint_every < absl::ZeroDuration() ||
      options.checkpoint_keep < 1) {
    return absl::InvalidArgumentError(
        "checkpoint_every_steps and checkpoint_every must be >= 0, checkpoint_keep >= 1");
  }
  if (options.job_id.empty()) options.job_id = absl::StrCat("program-", RandomHex());
  return std::unique_ptr<ClusterCoordinator>(new ClusterCoordinator(std::move(options)));
}

ClusterCoordinator::ClusterCoordinator(Options options) : options_(std::move(options)) {}

ClusterCoordinator::~ClusterCoordinator() {
  std::shared_ptr<Session> session;
  std::unique_ptr<Cluster> cluster;
  {
    absl::MutexLock lock(&mu_);
    session = std::move(session_);
    cluster = std::move(cluster_);
  }
  EndSession(std::move(session));
  if (cluster == nullptr) return;
  cluster->health->Join();
  // The workers are let go and the job's variables freed; errors are only
  // logged (a server may be gone).
  ReleaseJobRequest release;
  release.set_job_id(options_.job_id);
  SignRequest(cluster->setup.worker_key(), "ReleaseJob", &release);
  for (auto& w : cluster->workers) {
    ReleaseJobResponse ignored;
    w->ReleaseJob(release, &ignored).IgnoreError();
  }
  for (auto& ps : cluster->ps) {
    EndJobRequest request;
    request.set_job(options_.job_id);
    EndJobResponse response;
    if (absl::Status s = ps->EndJob(request, &response); !s.ok()) {
      spdlog::warn("job {}: freeing its variables: {}", options_.job_id, s.ToString());
    }
  }
}

absl::Status ClusterCoordinator::CreateVariable(const std::string& name,
                                                std::vector<int64_t> shape,
                                                InitializerProto initializer,
                                                OptimizerProto optimizer) {
  if (name.empty()) return absl::InvalidArgumentError("a variable needs a name");
  for (int64_t d : shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' has shape [", absl::StrJoin(shape, ", "),
                       "]: every dimension must be >= 1"));
    }
  }
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  *spec.mutable_initializer() = std::move(initializer);
  *spec.mutable_optimizer() = std::move(optimizer);
  return Declare(std::move(spec));
}

absl::Status ClusterCoordinator::CreateHashTable(const std::string& name, int64_t dim,
                                                 int64_t max_rows, EvictionPolicy eviction,
                                                 InitializerProto initializer,
                                                 OptimizerProto optimizer) {
  if (name.empty()) return absl::InvalidArgumentError("a hash table needs a name");
  if (dim < 1 || max_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("hash table '", name, "': dim ", dim,
                                                   " must be >= 1 and max_rows ", max_rows,
                                                   " >= 0 (0: unbounded)"));
  }
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.set_kind(HASH_TABLE);
  spec.add_shape(dim);
  spec.set_max_rows(max_rows);
  spec.set_eviction(eviction);
  *spec.mutable_initializer() = std::move(initializer);
  *spec.mutable_optimizer() = std::move(optimizer);
  return Declare(std::move(spec));
}

absl::Status ClusterCoordinator::Declare(VariableSpecProto spec) {
  const std::string name = spec.name();
  const OptimizerProto& optimizer = spec.optimizer();
  if (absl::Status s = ValidateInitializer(spec.initializer()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name, "': ", s.message()));
  }
  static const char* const kOptimizers[] = {"sgd", "momentum", "adagrad", "adam", "ftrl"};
  bool known = false;
  for (const char* o : kOptimizers) known = known || optimizer.type() == o;
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", name, "': unknown optimizer '", optimizer.type(),
                     "' (sgd, momentum, adagrad, adam or ftrl)"));
  }
  if (!(optimizer.learning_rate() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", name, "': the optimizer's learning_rate must be > 0"));
  }
  absl::MutexLock lock(&mu_);
  if (cluster_ != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variable '", name, "' is declared after the first Schedule: declare every variable "
        "before scheduling"));
  }
  for (const VariableSpecProto& v : variables_) {
    if (v.name() == name) {
      return absl::AlreadyExistsError(absl::StrCat("variable '", name, "' is declared twice"));
    }
  }
  variables_.push_back(std::move(spec));
  return absl::OkStatus();
}

absl::Status ClusterCoordinator::StartLocked() {
  if (cluster_ != nullptr) return absl::OkStatus();
  auto cluster = std::make_unique<Cluster>();
  cluster->secret = RandomSecret();
  cluster->job_key = DeriveJobKey(cluster->secret, options_.job_id);
  const int num_ps = static_cast<int>(options_.ps_addresses.size());
  for (const std::string& address : options_.ps_addresses) {
    RemotePsClient::Options o;
    o.target = address;
    o.call_timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.ps_timeout));
    cluster->remote_ps.push_back(std::make_unique<RemotePsClient>(o));
    cluster->ps.push_back(
        std::make_unique<SigningPsClient>(cluster->remote_ps.back().get(), cluster->secret));
  }
  ASSIGN_OR_RETURN(cluster->plan, PlanVariables(variables_, options_.partitioner, num_ps));
  VariablePlan& plan = cluster->plan;
  for (CreateVariablesRequest& request : plan.per_ps) {
    request.set_job(options_.job_id);
    request.set_job_key(cluster->job_key);
    // The job's Saves may name any directory under the PS's root.
    if (!options_.checkpoint_root.empty()) request.set_checkpoint_dir(".");
  }
  const absl::Time deadline = absl::Now() + options_.cluster_wait;
  // A start that fails frees what it created: the next Schedule starts
  // again under a new key.
  auto free_variables = [&] {
    for (auto& ps : cluster->ps) {
      EndJobRequest request;
      request.set_job(options_.job_id);
      EndJobResponse ignored;
      ps->EndJob(request, &ignored).IgnoreError();
    }
  };
  for (int p = 0; p < num_ps; ++p) {
    const CreateVariablesRequest& request = plan.per_ps[p];
    CreateVariablesResponse response;
    absl::Status s = UntilAvailable(
        deadline, [&] { return cluster->ps[p]->CreateVariables(request, &response); });
    if (!s.ok()) {
      free_variables();
      return absl::Status(s.code(), absl::StrCat("creating the variables on PS ", p, " (",
                                                 options_.ps_addresses[p], "): ", s.message()));
    }
  }
  SetupJobRequest& setup = cluster->setup;
  setup.set_job_id(options_.job_id);
  setup.set_program(true);
  for (const VariableSpecProto& v : variables_) *setup.add_variables() = v;
  for (const std::string& a : options_.ps_addresses) setup.add_ps_addresses(a);
  for (const VariablePlacementProto& p : plan.placement) *setup.add_placement() = p;
  setup.set_replicas(static_cast<int32_t>(options_.worker_addresses.size()));
  setup.set_worker_key(DeriveWorkerKey(cluster->job_key));
  SignRequest(setup.worker_key(), "SetupJob", &setup);
  GrpcWorkerClientOptions worker_options;
  worker_options.closure_timeout =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.closure_timeout));
  for (const std::string& address : options_.worker_addresses) {
    cluster->workers.push_back(std::make_unique<GrpcWorkerClient>(address, worker_options));
    SetupJobResponse response;
    absl::Status s = UntilAvailable(
        deadline, [&] { return cluster->workers.back()->SetupJob(setup, &response); });
    if (!s.ok()) {
      free_variables();
      return absl::Status(s.code(), absl::StrCat("setting up worker ", address, ": ",
                                                 s.message()));
    }
  }
  cluster->health_checker =
      std::make_unique<GrpcHealthChecker>(options_.ps_addresses, options_.worker_addresses);
  ProgramRecovery::Options recovery;
  recovery.job_id = options_.job_id;
  for (auto& ps : cluster->ps) recovery.ps.push_back(ps.get());
  recovery.health = cluster->health_checker.get();
  recovery.checkpoint_root = options_.checkpoint_root;
  recovery.checkpoint_dir = options_.checkpoint_dir;
  recovery.every_steps = options_.checkpoint_every_steps;
  recovery.every = options_.checkpoint_every;
  recovery.keep = options_.checkpoint_keep;
  recovery.recovery_timeout = options_.ps_recovery_timeout;
  absl::StatusOr<std::unique_ptr<ProgramRecovery>> created =
      ProgramRecovery::Create(std::move(recovery));
  if (!created.ok()) {
    free_variables();
    return created.status();
  }
  cluster->recovery = *std::move(created);
  cluster->recovery->SetPlan(&cluster->plan);
  HealthWatch::Options health;
  health.health = cluster->health_checker.get();
  for (auto& w : cluster->workers) health.workers.push_back(w.get());
  health.interval = options_.health_interval;
  health.worker_timeout = options_.worker_timeout;
  health.check_ps = [recovery = cluster->recovery.get()] {
    recovery->ps_recovery()->CheckEveryPs();
  };
  const std::string job = options_.job_id;
  health.event = [job](const std::string& kind, const std::string& message) {
    spdlog::warn("job {}: {}: {}", job, kind, message);
  };
  cluster->health = std::make_unique<HealthWatch>(std::move(health));
  cluster->health->Start();
  spdlog::info("job {}: {} variables on {} PS, {} workers", options_.job_id, variables_.size(),
               num_ps, options_.worker_addresses.size());
  cluster_ = std::move(cluster);
  return absl::OkStatus();
}

absl::StatusOr<RemoteValue> ClusterCoordinator::Schedule(const std::string& function,
                                                         std::string args) {
  if (function.empty()) return absl::InvalidArgumentError("Schedule needs a function name");
  RETURN_IF_ERROR(RaiseIfFailed());
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(StartLocked());
  StartSessionLocked();
  const int64_t id = next_closure_id_++;
  auto state = std::make_shared<RemoteValue::State>(id);
  pending_[id] = state;
  Closure closure;
  closure.id = id;
  closure.mode = FUNCTION;
  closure.call = std::make_shared<FunctionCall>(FunctionCall{function, std::move(args)});
  session_->queue.Put(std::move(closure));
  if (session_->queue.stopped()) {
    // Stopped before the closure was queued: nothing will run it.
    pending_.erase(id);
    state->Set(absl::CancelledError(absl::StrCat("closure ", id, " ('", function,
                                                 "') was cancelled: an earlier closure failed")),
               std::nullopt);
  }
  return RemoteValue(state);
}

void ClusterCoordinator::StartSessionLocked() {
  if (session_ != nullptr) return;
  session_ = std::make_shared<Session>();
  Session* session = session_.get();
  session->queue.SetOpen(true);
  Cluster* cluster = cluster_.get();
  ProgramRecovery* recovery = cluster->recovery.get();
  for (size_t w = 0; w < cluster->workers.size(); ++w) {
    DispatchOptions d;
    d.job_id = options_.job_id;
    d.mode = FUNCTION;
    d.job_key = cluster->job_key;
    d.function_lease_steps = options_.max_steps_per_closure;
    d.worker_index = static_cast<int>(w);
    d.max_attempts = options_.max_attempts;
    d.retry_backoff = options_.retry_backoff;
    d.setup = &cluster->setup;
    d.worker_down = cluster->health->worker_down(static_cast<int>(w));
    d.health_stopped = cluster->health->stopped();
    d.worker_losses = cluster->health->worker_losses(static_cast<int>(w));
    d.worker_answers = cluster->health->worker_answers(static_cast<int>(w));
    // A PS that failed: closures failing on it are retried without counting
    // attempts while the control thread heals it.
    d.ps_failed = [recovery] { return recovery->ps_recovery()->failed(); };
    d.on_ps_lost = [recovery] { recovery->ps_recovery()->MarkFailed(); };
    d.on_success = [this, session, recovery](const Closure& c, const RunClosureResponse& r) {
      steps_ += r.steps();
      recovery->AddSteps(r.steps());
      if (r.has_function_error()) {
        const absl::Status error = FunctionErrorStatus(r.function_error(), c.call->name, c.id);
        Resolve(c.id, error, r.function_error());
        // TF: the closures after a failed one are cancelled.
        session->queue.Stop(error);
        return;
      }
      Resolve(c.id, r.function_result());
    };
    d.on_failure = [this](const Closure& c, const absl::Status& error) { Resolve(c.id, error); };
    for (int t = 0; t < options_.closures_per_worker; ++t) {
      session->dispatch.emplace_back([worker = cluster->workers[w].get(), session, d] {
        RunDispatchLoop(worker, &session->queue, d);
      });
    }
  }
  session->watcher = std::thread([this, session] {
    const absl::Status why = session->queue.Wait();
    CancelPending(why);
  });
  // The recovery is handed over here, not read from cluster_ by the thread:
  // the destructor takes cluster_ before it ends the session, and a thread
  // that starts late (a loaded machine) would find it gone.
  session->control = std::thread([this, session, recovery] { ControlLoop(session, recovery); });
}

void ClusterCoordinator::ControlLoop(Session* session, ProgramRecovery* recovery) {
  // Ends when the queue stopped and nothing is in flight.
  while (!session->queue.WaitFor(absl::Milliseconds(20))) {
    if (!recovery->ps_recovery()->failed() && !recovery->CheckpointDue()) continue;
    absl::MutexLock control(&control_mu_);
    session->queue.Pause();
    session->queue.WaitUntilIdle(absl::InfiniteDuration());
    if (session->queue.stopped()) break;
    if (absl::Status s = recovery->HealIfFailed(); !s.ok()) {
      spdlog::error("job {}: {}", options_.job_id, s.ToString());
      session->queue.Stop(s);  // the job fails: Join raises it
      break;
    }
    if (recovery->CheckpointDue()) {
      const auto [next, oldest] = ClosureIds();
      // A failure is retried at the next trigger after a backoff, or healed
      // first when a PS failed (the next turn).
      if (absl::Status s = recovery->Checkpoint(next, oldest); !s.ok()) {
        spdlog::warn("job {}: checkpoint failed: {}", options_.job_id, s.ToString());
      }
    }
    if (!recovery->ps_recovery()->failed()) session->queue.Resume();
  }
  session->queue.Resume();
}

std::pair<int64_t, int64_t> ClusterCoordinator::ClosureIds() {
  absl::MutexLock lock(&mu_);
  int64_t oldest = next_closure_id_;
  for (const auto& [id, state] : pending_) oldest = std::min(oldest, id);
  return {next_closure_id_, oldest};
}

absl::Status ClusterCoordinator::Quiesced(
    const std::function<absl::Status(ProgramRecovery*)>& op) {
  absl::MutexLock control(&control_mu_);
  ProgramRecovery* recovery;
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(StartLocked());
    recovery = cluster_->recovery.get();
    session = session_;
  }
  if (session != nullptr) {
    session->queue.Pause();
    session->queue.WaitUntilIdle(absl::InfiniteDuration());
  }
  absl::Status s = recovery->HealIfFailed();
  if (!s.ok()) {
    if (session != nullptr) session->queue.Stop(s);
    return s;
  }
  s = op(recovery);
  if (session != nullptr && !recovery->ps_recovery()->failed()) session->queue.Resume();
  return s;
}

absl::Status ClusterCoordinator::Save(const std::string& dir) {
  return Quiesced([&](ProgramRecovery* recovery) -> absl::Status {
    ASSIGN_OR_RETURN(const CheckpointManifest m, recovery->Save(dir, ClosureIds().first));
    spdlog::info("job {}: saved checkpoint {} into {} at step {}", options_.job_id,
                 m.checkpoint_id(), dir, m.global_step());
    return absl::OkStatus();
  });
}

absl::Status ClusterCoordinator::Restore(const std::string& dir) {
  return Quiesced([&](ProgramRecovery* recovery) -> absl::Status {
    RETURN_IF_ERROR(recovery->Restore(dir).status());
    // The update keys restored belong to closures below the floor.
    absl::MutexLock lock(&mu_);
    next_closure_id_ = std::max(next_closure_id_, recovery->next_closure_floor());
    return absl::OkStatus();
  });
}

int64_t ClusterCoordinator::lost_steps() {
  absl::MutexLock lock(&mu_);
  return cluster_ != nullptr ? cluster_->recovery->lost_steps() : 0;
}

int64_t ClusterCoordinator::global_step() {
  absl::MutexLock lock(&mu_);
  return cluster_ != nullptr ? cluster_->recovery->global_step() : 0;
}

int64_t ClusterCoordinator::ps_recoveries() {
  absl::MutexLock lock(&mu_);
  return cluster_ != nullptr ? cluster_->recovery->ps_recoveries() : 0;
}

void ClusterCoordinator::Resolve(int64_t id, absl::StatusOr<std::string> value,
                                 std::optional<FunctionError> error) {
  std::shared_ptr<RemoteValue::State> state;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    state = std::move(it->second);
    pending_.erase(it);
  }
  state->Set(std::move(value), std::move(error));
}

void ClusterCoordinator::CancelPending(const absl::Status& why) {
  std::vector<std::shared_ptr<RemoteValue::State>> cancelled;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, state] : pending_) cancelled.push_back(std::move(state));
    pending_.clear();
  }
  for (auto& state : cancelled) {
    state->Set(absl::CancelledError(absl::StrCat("closure ", state->closure_id,
                                                 " was cancelled: ", why.message())),
               std::nullopt);
  }
}

void ClusterCoordinator::EndSession(std::shared_ptr<Session> session) {
  if (session == nullptr) return;
  session->queue.Stop(absl::CancelledError("the coordinator stopped scheduling"));
  for (std::thread& t : session->dispatch) t.join();
  session->watcher.join();
  if (session->control.joinable()) session->control.join();
}

absl::Status ClusterCoordinator::RaiseIfFailed() {
  std::shared_ptr<Session> failed;
  {
    absl::MutexLock lock(&mu_);
    if (session_ == nullptr || !session_->queue.stopped()) return absl::OkStatus();
    failed = std::move(session_);
  }
  // Stopped: Wait returns the first error once the closures in flight end.
  const absl::Status error = failed->queue.Wait();
  EndSession(std::move(failed));
  return error;
}

absl::Status ClusterCoordinator::Join() {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    if (session_ == nullptr) return absl::OkStatus();
    session = session_;
  }
  session->queue.WaitUntilEmpty(absl::InfiniteDuration());
  return RaiseIfFailed();
}

absl::StatusOr<bool> ClusterCoordinator::JoinFor(absl::Duration timeout) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    if (session_ == nullptr) return true;
    session = session_;
  }
  if (!session->queue.WaitUntilEmpty(timeout)) return false;
  RETURN_IF_ERROR(RaiseIfFailed());
  return true;
}

absl::StatusOr<bool> ClusterCoordinator::Done() {
  RETURN_IF_ERROR(RaiseIfFailed());
  absl::MutexLock lock(&mu_);
  if (session_ == nullptr) return true;
  return session_->queue.WaitUntilEmpty(absl::ZeroDuration());
}

absl::StatusOr<std::vector<StatsResponse>> ClusterCoordinator::PsStats() {
  absl::MutexLock lock(&mu_);
  if (cluster_ == nullptr) {
    return absl::FailedPreconditionError("nothing was scheduled: the variables do not exist yet");
  }
  std::vector<StatsResponse> stats(cluster_->ps.size());
  for (size_t p = 0; p < cluster_->ps.size(); ++p) {
    StatsRequest request;
    request.set_job(options_.job_id);
    RETURN_IF_ERROR(cluster_->ps[p]->Stats(request, &stats[p]));
  }
  return stats;
}

}  // namespace pscluster
