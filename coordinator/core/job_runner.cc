#include "coordinator/core/job_runner.h"

#include <cmath>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "common/model_variables.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Errors after which the same closure may succeed on a (possibly other) worker.
bool Retryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsAborted(s) ||
         absl::IsFailedPrecondition(s) || absl::IsCancelled(s);
}

int64_t StepsFor(int64_t size, int64_t closure_examples, int64_t batch) {
  const int64_t full = size / closure_examples;
  const int64_t rest = size % closure_examples;
  return full * CeilDiv(closure_examples, batch) + CeilDiv(rest, batch);
}

}  // namespace

JobRunner::JobRunner(std::string job_id, JobSpec spec, std::vector<PsClient*> ps,
                     std::vector<WorkerClient*> workers, JobRunnerOptions options)
    : job_id_(std::move(job_id)),
      spec_(std::move(spec)),
      ps_(std::move(ps)),
      workers_(std::move(workers)),
      options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  status_.set_job_id(job_id_);
  status_.set_name(spec_.name);
  status_.set_state(PENDING);
  status_.set_total_epochs(spec_.train.epochs);
  start_ = absl::Now();
}

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

absl::Status JobRunner::CreateVariables(std::vector<VariablePlacementProto>* placement) {
  ASSIGN_OR_RETURN(VariablePlan plan, PlanVariables(ModelVariables(spec_), spec_.partitioner,
                                                    static_cast<int>(ps_.size())));
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (plan.per_ps[p].variables_size() == 0) continue;
    CreateVariablesResponse response;
    absl::Status s = ps_[p]->CreateVariables(plan.per_ps[p], &response);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("creating variables on PS ", p, ": ", s.message()));
    }
  }
  *placement = plan.placement;
  absl::MutexLock lock(&mu_);
  variables_ = ModelVariables(spec_);
  placement_ = std::move(plan.placement);
  return absl::OkStatus();
}

absl::StatusOr<DescribeJobResponse> JobRunner::Describe() const {
  std::vector<VariableSpecProto> vars;
  std::vector<VariablePlacementProto> placement;
  {
    absl::MutexLock lock(&mu_);
    vars = variables_;
    placement = placement_;
  }
  if (placement.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_id_, "' has not created its variables yet"));
  }
  DescribeJobResponse out;
  out.set_job_id(job_id_);
  // What each PS holds, by concrete (shard) name.
  std::map<std::string, VariableStats> held;
  for (size_t p = 0; p < ps_.size(); ++p) {
    StatsResponse stats;
    absl::Status s = ps_[p]->Stats(StatsRequest(), &stats);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("stats of PS ", p, ": ", s.message()));
    }
    PsLoad* load = out.add_ps();
    load->set_ps_index(static_cast<int>(p));
    load->set_address(p < options_.ps_addresses.size() ? options_.ps_addresses[p] : "in-process");
    for (const VariableStats& v : stats.variables()) {
      load->set_parameter_bytes(load->parameter_bytes() + v.parameter_bytes());
      load->set_slot_bytes(load->slot_bytes() + v.slot_bytes());
      load->set_variables(load->variables() + 1);
      held[v.name()] = v;
    }
  }
  for (size_t i = 0; i < vars.size() && i < placement.size(); ++i) {
    const VariableSpecProto& var = vars[i];
    VariableLayout* layout = out.add_variables();
    layout->set_name(var.name());
    layout->set_kind(var.kind() == HASH_TABLE ? "hash_table"
                     : IsRowAccessed(var)     ? "embedding"
                                              : "dense");
    if (var.kind() == HASH_TABLE) layout->add_shape(-1);
    for (int64_t d : var.shape()) layout->add_shape(d);
    layout->set_partitioner(DescribePlacement(var, placement[i]));
    auto add_shard = [&](const std::string& name, int ps_index, int64_t offset, int64_t rows) {
      ShardLayoutProto* shard = layout->add_shards();
      shard->set_name(name);
      shard->set_ps_index(ps_index);
      shard->set_row_offset(offset);
      shard->set_rows(rows);
      auto it = held.find(name);
      if (it != held.end()) {
        if (var.kind() == HASH_TABLE) shard->set_rows(it->second.rows());
        shard->set_parameter_bytes(it->second.parameter_bytes());
        shard->set_slot_bytes(it->second.slot_bytes());
        shard->set_evictions(it->second.evictions());
      }
    };
    if (placement[i].shards_size() == 0) {
      add_shard(var.name(), placement[i].ps_index(), 0, var.shape_size() > 0 ? var.shape(0) : 1);
    }
    for (const ShardProto& s : placement[i].shards()) {
      add_shard(s.name(), s.ps_index(), s.row_offset(), s.rows());
    }
  }
  return out;
}

absl::Status JobRunner::SetupWorkers(const std::vector<VariablePlacementProto>& placement,
                                     int64_t* train_examples, int64_t* eval_examples) {
  setup_request_.set_job_id(job_id_);
  setup_request_.set_spec_yaml(spec_.yaml);
  for (const std::string& a : options_.ps_addresses) setup_request_.add_ps_addresses(a);
  for (const auto& p : placement) *setup_request_.add_placement() = p;

  // Workers load their data in parallel.
  std::vector<absl::Status> status(workers_.size());
  std::vector<SetupJobResponse> responses(workers_.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers_.size(); ++w) {
    threads.emplace_back([&, w] { status[w] = workers_[w]->SetupJob(setup_request_, &responses[w]); });
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

void JobRunner::DispatchLoop(WorkerClient* worker, ClosureMode mode, ClosureQueue* queue,
                             PhaseTotals* totals) {
  while (std::optional<Closure> c = queue->Get()) {
    RunClosureRequest request;
    request.set_job_id(job_id_);
    request.set_closure_id(c->id);
    request.set_mode(mode);
    *request.mutable_split() = c->split;
    RunClosureResponse response;
    absl::Status s = worker->RunClosure(request, &response);
    if (s.ok()) {
      absl::MutexLock lock(&mu_);
      totals->examples += response.examples();
      totals->loss_sum += response.loss_sum();
      totals->correct += response.correct();
      auto merge = [](const auto& from, std::vector<int64_t>* into) {
        if (into->size() < static_cast<size_t>(from.size())) into->resize(from.size());
        for (int b = 0; b < from.size(); ++b) (*into)[b] += from[b];
      };
      merge(response.positive_histogram(), &totals->positive);
      merge(response.negative_histogram(), &totals->negative);
      if (mode == TRAIN) {
        status_.set_steps(status_.steps() + response.steps());
        status_.set_examples(status_.examples() + response.examples());
        epoch_examples_ += response.examples();
        epoch_loss_sum_ += response.loss_sum();
        if (epoch_examples_ > 0) status_.set_train_loss(epoch_loss_sum_ / epoch_examples_);
        const double secs = train_seconds_ + absl::ToDoubleSeconds(absl::Now() - phase_start_);
        if (secs > 0) status_.set_examples_per_sec(status_.examples() / secs);
        status_.set_compute_seconds(status_.compute_seconds() + response.compute_seconds());
        status_.set_pull_seconds(status_.pull_seconds() + response.pull_seconds());
        status_.set_push_seconds(status_.push_seconds() + response.push_seconds());
      }
      ++version_;
      queue->Done();
      continue;
    }
    ++c->attempts;
    const std::string what = absl::StrCat(
        mode == TRAIN ? "training" : "eval", " closure ", c->id, " (epoch ", c->split.epoch() + 1,
        ", examples [", c->split.begin(), ", ", c->split.end(), "))");
    if (!Retryable(s) || c->attempts >= options_.max_attempts) {
      queue->Fail(absl::Status(s.code(), absl::StrCat(what, " failed after ", c->attempts,
                                                      " attempt(s), last on worker ",
                                                      worker->address(), ": ", s.message())));
      return;
    }
    queue->PutBack(*c);
    // Back off before this worker takes more work, so healthy workers pick
    // the closure up first.
    absl::SleepFor(options_.retry_backoff * (1 << std::min(c->attempts - 1, 6)));
    if (absl::IsFailedPrecondition(s)) {
      // The worker lost the job (it restarted): set it up again.
      SetupJobResponse ignored;
      worker->SetupJob(setup_request_, &ignored).IgnoreError();
    }
  }
}

absl::Status JobRunner::RunPhase(ClosureMode mode, int64_t epoch, int64_t size,
                                 int64_t closure_examples, PhaseTotals* totals) {
  ClosureQueue queue;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("job cancelled");
    current_queue_ = &queue;
    phase_start_ = absl::Now();
  }
  for (int64_t b = 0; b < size; b += closure_examples) {
    Closure c;
    c.id = next_closure_id_.fetch_add(1);
    c.mode = mode;
    c.split.set_epoch(epoch);
    c.split.set_begin(b);
    c.split.set_end(std::min(size, b + closure_examples));
    queue.Put(std::move(c));
  }
  std::vector<std::thread> threads;
  for (WorkerClient* w : workers_) {
    for (int64_t k = 0; k < spec_.train.closures_per_worker; ++k) {
      threads.emplace_back([this, w, mode, &queue, totals] { DispatchLoop(w, mode, &queue, totals); });
    }
  }
  absl::Status s = queue.Wait();
  for (auto& t : threads) t.join();
  absl::MutexLock lock(&mu_);
  current_queue_ = nullptr;
  if (mode == TRAIN) train_seconds_ += absl::ToDoubleSeconds(absl::Now() - phase_start_);
  return s;
}

absl::Status JobRunner::Finish(absl::Status status) {
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
  ++version_;
  return status;
}

absl::Status JobRunner::Run() {
  Update([](JobStatusProto* s) { s->set_state(RUNNING); });
  if (ps_.empty()) return Finish(absl::InvalidArgumentError("the cluster has no PS task"));
  if (workers_.empty()) return Finish(absl::InvalidArgumentError("the cluster has no worker"));
  std::vector<VariablePlacementProto> placement;
  if (absl::Status s = CreateVariables(&placement); !s.ok()) return Finish(s);
  int64_t train_n = 0, eval_n = 0;
  if (absl::Status s = SetupWorkers(placement, &train_n, &eval_n); !s.ok()) return Finish(s);

  const int64_t batch = spec_.data.per_replica_batch;
  const int64_t closure_examples = spec_.train.steps_per_closure * batch;
  Update([&](JobStatusProto* s) {
    s->set_total_steps(spec_.train.epochs * StepsFor(train_n, closure_examples, batch));
  });
  for (int64_t epoch = 0; epoch < spec_.train.epochs; ++epoch) {
    const absl::Time epoch_start = absl::Now();
    {
      absl::MutexLock lock(&mu_);
      status_.set_epoch(epoch + 1);
      epoch_examples_ = 0;
      epoch_loss_sum_ = 0;
      ++version_;
    }
    PhaseTotals train;
    if (absl::Status s = RunPhase(TRAIN, epoch, train_n, closure_examples, &train); !s.ok()) {
      return Finish(s);
    }
    PhaseTotals eval;
    if (absl::Status s = RunPhase(EVAL, epoch, eval_n, options_.eval_closure_examples, &eval);
        !s.ok()) {
      return Finish(s);
    }
    Update([&](JobStatusProto* s) {
      EpochResult* r = s->add_epochs();
      r->set_epoch(epoch + 1);
      r->set_train_loss(train.examples > 0 ? train.loss_sum / train.examples : 0);
      r->set_eval_accuracy(eval.examples > 0 ? static_cast<double>(eval.correct) / eval.examples : 0);
      r->set_eval_loss(eval.examples > 0 ? eval.loss_sum / eval.examples : 0);
      r->set_wall_seconds(absl::ToDoubleSeconds(absl::Now() - epoch_start));
      s->set_eval_accuracy(r->eval_accuracy());
      s->set_eval_loss(r->eval_loss());
      if (!eval.positive.empty() || !eval.negative.empty()) {
        const double auc = AucFromHistograms(eval.positive, eval.negative);
        if (!std::isnan(auc)) {
          r->set_eval_auc(auc);
          s->set_eval_auc(auc);
        }
      }
    });
  }
  return Finish(absl::OkStatus());
}

}  // namespace pscluster
