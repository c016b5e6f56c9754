#include "coordinator/core/phase_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "coordinator/core/bounded_delay.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/dispatcher.h"

namespace pscluster {

int64_t ClosureId(ClosureMode mode, int64_t epoch, int64_t split) {
  const int64_t kind = mode == EVAL ? (int64_t{1} << 62) : mode == PREDICT ? (int64_t{1} << 61) : 0;
  return kind | (epoch << 32) | split;
}

PhaseRunner::PhaseRunner(Options options, Control control)
    : options_(std::move(options)),
      control_(std::move(control)),
      spec_(*options_.spec),
      board_(options_.board),
      own_executor_(options_.executor == nullptr ? std::make_unique<DispatchExecutor>() : nullptr),
      executor_(options_.executor != nullptr ? options_.executor : own_executor_.get()) {}

void PhaseRunner::Cancel(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (current_queue_ != nullptr) current_queue_->Stop(why);
}

bool PhaseRunner::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

int64_t PhaseRunner::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

std::set<int64_t> PhaseRunner::finished_splits() const {
  absl::MutexLock lock(&mu_);
  return finished_splits_;
}

double PhaseRunner::TrainLoss() const {
  absl::MutexLock lock(&mu_);
  return epoch_examples_ > 0 ? epoch_loss_sum_ / epoch_examples_ : 0;
}

void PhaseRunner::FinishEpoch(const EpochResult& r) {
  absl::MutexLock lock(&mu_);
  board_->Update([&](JobStatusProto* s) {
    *s->add_epochs() = r;
    s->set_eval_accuracy(r.eval_accuracy());
    s->set_eval_loss(r.eval_loss());
    if (r.eval_auc() > 0) s->set_eval_auc(r.eval_auc());
  });
  epoch_ = r.epoch();
  finished_splits_.clear();
  epoch_examples_ = 0;
  epoch_loss_sum_ = 0;
}

void PhaseRunner::Rewind(int64_t epoch, std::set<int64_t> finished) {
  absl::MutexLock lock(&mu_);
  epoch_ = epoch;
  finished_splits_ = std::move(finished);
  epoch_examples_ = 0;
  epoch_loss_sum_ = 0;
}

void PhaseRunner::RestartFromFirstStep() {
  absl::MutexLock lock(&mu_);
  epoch_ = 0;
  finished_splits_.clear();
  epoch_examples_ = 0;
  epoch_loss_sum_ = 0;
  board_->Update([](JobStatusProto* s) {
    s->set_steps(0);
    s->set_examples(0);
  });
}

void PhaseRunner::ResumeFromLog(const std::vector<JobLogRecord>& history) {
  absl::MutexLock lock(&mu_);
  board_->Update([&](JobStatusProto* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const JobLogRecord& r : history) {
      if (r.has_epoch_finished()) {
        EpochResult e;
        e.ParseFromString(r.epoch_finished().result());
        *s->add_epochs() = e;
        s->set_eval_accuracy(e.eval_accuracy());
        s->set_eval_loss(e.eval_loss());
        s->set_eval_auc(e.eval_auc());
        epoch_ = r.epoch_finished().epoch() + 1;
        finished_splits_.clear();
      } else if (r.has_closure_finished() && r.closure_finished().epoch() == epoch_) {
        s->set_lost_steps(std::max(s->lost_steps(), r.closure_finished().lost_steps()));
        if (finished_splits_.insert(r.closure_finished().split()).second) {
          s->set_steps(s->steps() + r.closure_finished().steps());
          s->set_examples(s->examples() + r.closure_finished().examples());
        }
      }
    }
  });
  if (!history.empty()) {
    spdlog::info("job {}: resumed from its job log at epoch {} ({} closures of it finished)",
                 options_.job_id, epoch_ + 1, finished_splits_.size());
  }
}

std::pair<int64_t, int64_t> PhaseRunner::RecordSuccess(ClosureMode mode, const Closure& c,
                                                       const RunClosureResponse& r,
                                                       PhaseTotals* totals, bool* split_done) {
  absl::MutexLock lock(&mu_);
  if (r.corrupt_records() > 0) {
    // Streaming input skipped corrupt records (corrupt_records: skip): the
    // job counts them, and names the first in its events.
    board_->Update([&](JobStatusProto* s) {
      s->set_corrupt_records(s->corrupt_records() + r.corrupt_records());
    });
    if (!corrupt_named_) {
      corrupt_named_ = true;
      board_->Event("corrupt_records",
                    absl::StrCat("skipped ", r.corrupt_records(), " corrupt records in closure ",
                                 c.id, " (more may follow; the job status counts them): first: ",
                                 r.first_corrupt()));
    }
  }
  totals->examples += r.examples();
  totals->loss_sum += r.loss_sum();
  totals->correct += r.correct();
  auto merge = [](const auto& from, std::vector<int64_t>* into) {
    if (into->size() < static_cast<size_t>(from.size())) into->resize(from.size());
    for (int b = 0; b < from.size(); ++b) (*into)[b] += from[b];
  };
  merge(r.positive_histogram(), &totals->positive);
  merge(r.negative_histogram(), &totals->negative);
  *split_done = true;
  std::pair<int64_t, int64_t> counted;
  if (mode != TRAIN) {
    board_->Update([&](JobStatusProto* s) { counted = {s->steps(), s->lost_steps()}; });
    return counted;
  }
  // A synchronous split is done once every replica's closure is: its global
  // steps count then (each replica reports all of them).
  int64_t steps = r.steps();
  if (c.replica >= 0) {
    int64_t& done = sync_replicas_done_[c.split_index];
    ++done;
    *split_done = done >= (c.split.replicas() > 0 ? c.split.replicas() : SyncShares(spec_));
    steps = *split_done ? r.steps() : 0;
  }
  if (*split_done) finished_splits_.insert(c.split_index);
  epoch_examples_ += r.examples();
  epoch_loss_sum_ += r.loss_sum();
  const bool has_loss = epoch_examples_ > 0;
  const double train_loss = has_loss ? epoch_loss_sum_ / epoch_examples_ : 0;
  const double secs = train_seconds_ + absl::ToDoubleSeconds(options_.now() - phase_start_);
  board_->Update([&](JobStatusProto* s) {
    s->set_steps(s->steps() + steps);
    s->set_steps_trained(s->steps_trained() + steps);
    s->set_examples(s->examples() + r.examples());
    if (has_loss) s->set_train_loss(train_loss);
    if (secs > 0) s->set_examples_per_sec(s->examples() / secs);
    s->set_compute_seconds(s->compute_seconds() + r.compute_seconds());
    s->set_pull_seconds(s->pull_seconds() + r.pull_seconds());
    s->set_push_seconds(s->push_seconds() + r.push_seconds());
    s->set_max_closure_staleness(std::max(s->max_closure_staleness(), c.staleness));
    s->set_max_push_staleness(std::max(s->max_push_staleness(), r.max_push_staleness()));
    counted = {s->steps(), s->lost_steps()};
  });
  if (options_.metrics != nullptr) options_.metrics->TrainingDone(steps, r.examples());
  return counted;
}

int64_t PhaseRunner::FormReplicas(std::vector<int>* members) {
  members->clear();
  std::vector<int> active;
  if (Elastic()) active = options_.roster->ActiveIndices();
  const int64_t devices = std::max<int64_t>(1, spec_.devices);
  const int64_t global = StepExamples(spec_);
  {
    absl::MutexLock lock(&mu_);
    for (int w : active) {
      auto it = setup_.find(w);
      if (it != setup_.end() && it->second == Setup::kDone) members->push_back(w);
    }
  }
  if (Mirrored() && Elastic()) {
    // The ring, re-formed (with no lock held: it sets workers up) when its
    // members changed; replica r is pinned to ring_[r].
    if (ring_.empty()) {
      for (size_t w = 0; w < options_.workers.size(); ++w) ring_.push_back(static_cast<int>(w));
    }
    if (!members->empty() && *members != ring_) {
      std::vector<int> sorted = ring_;
      std::sort(sorted.begin(), sorted.end());
      if (sorted != *members) ring_ = options_.reform_ring(*members);
    }
    *members = ring_;
  }
  absl::MutexLock lock(&mu_);
  int64_t replicas = SyncShares(spec_);
  if (Mirrored() && Elastic()) {
    replicas = static_cast<int64_t>(members->size());
  } else if (!members->empty()) {
    // Each step keeps the job's global batch (so its learning rate holds),
    // split over the workers there are; more replicas than workers when one
    // replica's share would pass the batch limit (any worker runs any).
    const int64_t fewest =
        (global + JobLimits::kMaxBatch * devices - 1) / (JobLimits::kMaxBatch * devices);
    replicas = std::clamp<int64_t>(static_cast<int64_t>(members->size()), fewest,
                                   JobLimits::kMaxReplicas / devices);
  }
  const int64_t was = formed_replicas_ > 0 ? formed_replicas_ : SyncShares(spec_);
  formed_replicas_ = replicas;
  if (replicas == was) return replicas;
  const int64_t per_replica = (global + replicas * devices - 1) / (replicas * devices);
  board_->Update([&](JobStatusProto* s) {
    s->set_replicas(replicas * devices);
    s->set_per_replica_batch(per_replica);
  });
  board_->Event(
      "replicas_reformed",
      absl::StrCat(replicas * devices, " replicas (were ", was * devices,
                   ") from the next split of epoch ", epoch_ + 1, ": ", members->size(),
                   " workers hold the job; each step still takes the "
                   "global batch of ",
                   global, " examples (", per_replica, " a replica), at the same learning rate"));
  return replicas;
}

void PhaseRunner::MarkSetUp(int w) {
  absl::MutexLock lock(&mu_);
  setup_[w] = Setup::kDone;
}

bool PhaseRunner::EnsureSetUp(int w) {
  if (options_.roster == nullptr) return true;
  {
    absl::MutexLock lock(&mu_);
    auto not_running = [this, w]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return setup_[w] != Setup::kRunning;
    };
    mu_.Await(absl::Condition(&not_running));
    if (setup_[w] != Setup::kNone) return setup_[w] == Setup::kDone;
    setup_[w] = Setup::kRunning;
  }
  absl::Status s = options_.setup_worker ? options_.setup_worker(w) : absl::OkStatus();
  if (!s.ok()) {
    board_->Event("worker_join_failed",
                  absl::StrCat("worker ", w, " (", Worker(w)->address(),
                               ") joined the cluster but could not take the job: ", s.ToString()));
  }
  absl::MutexLock lock(&mu_);
  setup_[w] = s.ok() ? Setup::kDone : Setup::kFailed;
  return s.ok();
}

DispatchOptions PhaseRunner::DispatchOptionsFor(int w, ClosureMode mode, ClosureQueue* queue,
                                                PhaseTotals* totals) {
  DispatchOptions d;
  d.job_id = options_.job_id;
  d.mode = mode;
  d.job_key = options_.job_key;
  const bool sync = mode == TRAIN && Synchronous();
  d.batch = mode == TRAIN ? StepExamples(spec_) : spec_.data.per_replica_batch;
  d.worker_index = w;
  d.round = &round_;
  d.closures_per_rpc = static_cast<int>(spec_.train.closures_per_rpc);
  d.max_attempts = options_.max_attempts;
  d.retry_backoff = options_.retry_backoff;
  d.setup = options_.setup;
  d.on_retry = [this](const std::string& what) {
    if (options_.metrics != nullptr) options_.metrics->ClosureRetried();
    board_->Event("retry", what);
    // A mirrored replica that failed left the copies apart (some applied
    // the step, or the others wait for it): roll them all back.
    if (Mirrored() && !control_.mark_ps_failed()) {
      board_->Event("replica_failed",
                    "a multi_worker_mirrored replica failed; rolling every copy back to the last "
                    "checkpoint");
    }
  };
  d.ps_failed = control_.ps_failed;
  d.on_ps_lost = [this] {
    if (!control_.mark_ps_failed()) {
      spdlog::warn(
          "job {}: a PS no longer holds the job (it restarted, or the job was ended "
          "there); pausing dispatch",
          options_.job_id);
    }
  };
  if (options_.health != nullptr) {
    d.worker_down = options_.health->worker_down(w);
    d.health_stopped = options_.health->stopped();
    d.worker_losses = options_.health->worker_losses(w);
    d.worker_answers = options_.health->worker_answers(w);
  }
  if (Elastic()) {
    d.roster = options_.roster;
    d.roster_index = w;
  }
  d.deadline = mode == EVAL      ? &eval_deadline_
               : mode == PREDICT ? &predict_deadline_
                                 : &train_deadline_;
  d.on_success = [this, mode, queue, totals, sync](const Closure& c, const RunClosureResponse& r) {
    bool split_done = false;
    const auto [steps_now, lost_now] = RecordSuccess(mode, c, r, totals, &split_done);
    if (mode == TRAIN && options_.on_train_closure) {
      options_.on_train_closure(steps_now, r.examples(), r.loss_sum());
    }
    if (mode == PREDICT && options_.on_predict_closure) options_.on_predict_closure(c, r);
    // Hold further dispatch for the control loop to take the checkpoint. (A
    // synchronous phase takes it between its splits: pausing one replica
    // would hold the others at the step's barrier.)
    if (mode == TRAIN && !sync && control_.checkpoint_due()) queue->Pause();
    // A synchronous split is logged once, when its last replica is done;
    // the job log's counts are then those of one replica's closure.
    if (mode == TRAIN && split_done && board_->has_log()) {
      JobLogRecord rec;
      ClosureFinished* f = rec.mutable_closure_finished();
      f->set_epoch(c.split.epoch());
      f->set_split(c.split_index);
      f->set_steps(r.steps());
      f->set_examples(r.examples());
      f->set_loss_sum(r.loss_sum());
      f->set_global_steps(steps_now);
      f->set_lost_steps(lost_now);
      board_->Log(rec);
    }
  };
  return d;
}

absl::StatusOr<PhaseEnd> PhaseRunner::RunPhase(ClosureMode mode, int64_t epoch, int64_t size,
                                               int64_t closure_examples, PhaseTotals* totals) {
  // Split i is [i x closure_examples, ...) of the epoch's permutation.
  std::vector<DataSplit> plan;
  for (int64_t b = 0; b < size; b += closure_examples) {
    DataSplit s;
    s.set_epoch(epoch);
    s.set_begin(b);
    s.set_end(std::min(size, b + closure_examples));
    plan.push_back(std::move(s));
  }
  std::vector<int64_t> indices(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) indices[i] = static_cast<int64_t>(i);
  return RunPlannedPhase(mode, epoch, std::move(plan), indices, totals);
}

absl::StatusOr<PhaseEnd> PhaseRunner::RunPlannedPhase(ClosureMode mode, int64_t epoch,
                                                      std::vector<DataSplit> plan,
                                                      const std::vector<int64_t>& split_indices,
                                                      PhaseTotals* totals) {
  const std::vector<WorkerClient*>& workers = options_.workers;
  ClosureQueue queue(absl::Milliseconds(300), options_.now);
  // Bounded staleness (train.max_staleness, docs/staleness.md): only an
  // asynchronous job's training closures can be stale. Unbounded, their
  // staleness is still measured (JobStatus.max_closure_staleness).
  if (mode == TRAIN && spec_.strategy == Strategy::kParameterServer) {
    queue.BoundStaleness(spec_.train.max_staleness >= 0 ? spec_.train.max_staleness
                                                        : BoundedDelay::kUnbounded);
  }
  // A synchronous phase runs its splits one at a time, each as one closure
  // per replica: the replicas meet at every step's barrier on the PS, and
  // the next split starts once every replica finished this one.
  const bool sync = mode == TRAIN && Synchronous();
  std::deque<Closure> splits;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("job cancelled");
    current_queue_ = &queue;
    phase_start_ = options_.now();
    sync_replicas_done_.clear();
    for (size_t i = 0; i < plan.size(); ++i) {
      const int64_t split = split_indices[i];
      if (mode == TRAIN && finished_splits_.count(split)) continue;
      Closure c;
      c.id = ClosureId(mode, epoch, split);
      c.split_index = split;
      c.mode = mode;
      c.split = std::move(plan[i]);
      c.split.set_epoch(epoch);
      splits.push_back(std::move(c));
    }
  }
  // Queues the next split: whole, or one closure per replica, replica r
  // preferring worker r mod workers (unless that one is down). The queue's
  // locality wait runs on the job's clock.
  auto put_next = [&] {
    if (splits.empty()) return false;
    Closure c = std::move(splits.front());
    splits.pop_front();
    if (!sync) {
      queue.Put(std::move(c));
      if (options_.metrics != nullptr) options_.metrics->ClosuresScheduled(1);
      return true;
    }
    // The replicas are formed anew for each split (elastic workers): every
    // replica of one split shares its count (DataSplit.replicas).
    std::vector<int> members;
    int64_t replicas = FormReplicas(&members);
    if (Mirrored() && Elastic()) {
      // Each member's replica is pinned to it and its ring waits for it: a
      // member that leaves now still runs it (WorkerRoster::ExpectCalls).
      // One that left since the ring was formed is re-formed out first.
      for (size_t tries = 0; !options_.roster->ExpectCalls(members); ++tries) {
        if (tries > members.size()) break;  // (a leave per try; bounded anyway)
        replicas = FormReplicas(&members);
      }
      pinned_to_ = members;
    }
    if (Elastic()) c.split.set_replicas(static_cast<int32_t>(replicas));
    for (int64_t r = 0; r < replicas; ++r) {
      Closure replica = c;
      replica.replica = static_cast<int>(r);
      replica.preferred_worker =
          members.empty() ? static_cast<int>(r % static_cast<int64_t>(workers.size()))
                          : members[static_cast<size_t>(r % static_cast<int64_t>(members.size()))];
      replica.pinned = Mirrored();
      // A worker that is down now would hold its replica back for the
      // locality wait at every split until it answers again (20x slower
      // steps): any worker takes it at once. A pinned replica waits.
      if (!replica.pinned && options_.health != nullptr &&
          options_.health->worker_down(replica.preferred_worker)->load()) {
        replica.preferred_worker = -1;
      }
      queue.Put(std::move(replica));
    }
    if (options_.metrics != nullptr) options_.metrics->ClosuresScheduled(replicas);
    return true;
  };
  if (sync) {
    queue.SetOpen(true);
    if (!put_next()) queue.SetOpen(false);
  } else {
    while (put_next()) {
    }
  }
  // A synchronous split's replicas may all have to run on one worker (the
  // others down): every worker can take every replica at once.
  const int64_t per_worker = sync ? std::max(spec_.train.closures_per_worker, SyncShares(spec_))
                                  : spec_.train.closures_per_worker;
  // Every worker's dispatch, driven from the executor's few threads.
  Dispatcher dispatcher(&queue, executor_);
  // Elastic workers: the roster's members, and those that join meanwhile
  // (checked on each turn of the control loop below); `live` counts each
  // worker's dispatch state machines still running, so that one that left and
  // came back is started again.
  WorkerRoster* const roster = Elastic() ? options_.roster : nullptr;
  int64_t roster_seen = roster != nullptr ? roster->version() : 0;
  std::map<int, std::shared_ptr<std::atomic<int>>> live;
  auto start_worker = [&](int w) {
    auto& count = live[w];
    if (count == nullptr) count = std::make_shared<std::atomic<int>>(0);
    *count += static_cast<int>(per_worker);
    // A worker that may not hold the job yet is set up first, on a thread
    // of its own (SetupJob blocks).
    std::function<bool()> before;
    if (options_.roster != nullptr) {
      absl::MutexLock lock(&mu_);
      auto it = setup_.find(w);
      if (it == setup_.end() || it->second != Setup::kDone) {
        before = [this, w] { return EnsureSetUp(w); };
      }
    }
    dispatcher.Start(
        Worker(w), DispatchOptionsFor(w, mode, &queue, totals), static_cast<int>(per_worker),
        [count] { --*count; }, std::move(before));
  };
  auto start_joined = [&] {
    for (int w : roster->ActiveIndices()) {
      auto it = live.find(w);
      if (it == live.end() || *it->second == 0) start_worker(w);
    }
  };
  if (roster != nullptr) {
    start_joined();
  } else {
    for (size_t w = 0; w < workers.size(); ++w) start_worker(static_cast<int>(w));
  }
  const absl::Duration idle_wait = absl::Seconds(spec_.fault_tolerance.ps_recovery_timeout_s);
  PhaseEnd end = PhaseEnd::kDone;
  absl::Status error;
  // The phase's control loop: checkpoints (asked for by the dispatch,
  // which pause the queue when one is due) and PS recovery run here, with
  // no closure in flight.
  while (true) {
    const bool drained =
        sync ? queue.WaitUntilEmpty(absl::Milliseconds(20)) : queue.WaitFor(absl::Milliseconds(20));
    if (roster != nullptr && roster->version() != roster_seen) {
      // Workers joined (or left): the new ones get their dispatch.
      roster_seen = roster->version();
      start_joined();
    }
    if (control_.ps_failed()) {
      queue.Pause();
      // Mirrored replicas still in flight wait in their ring for the one that
      // failed: stop waiting for them.
      if (Mirrored()) {
        for (WorkerClient* w : workers) w->CancelCalls();
      }
      queue.WaitUntilIdle(idle_wait);
      error = control_.recover();
      queue.Stop(absl::AbortedError("rolled back"));
      end = PhaseEnd::kRolledBack;
      break;
    }
    if (sync) {
      // Between splits nothing is in flight: the time for a checkpoint.
      if (!drained) continue;
      if (queue.stopped()) break;
      if (control_.checkpoint_due()) {
        error = control_.checkpoint();
        if (!error.ok()) {
          queue.Stop(error);
          break;
        }
        if (control_.ps_failed()) continue;  // recovered above, on the next turn
      }
      if (!put_next()) {
        queue.SetOpen(false);
        break;
      }
      continue;
    }
    if (mode == TRAIN && control_.checkpoint_due()) {
      queue.Pause();
      if (queue.WaitUntilIdle(idle_wait) && !control_.ps_failed()) {
        // A failure is retried later (checkpoint_due says when); only one
        // that fails the job (checkpoint.on_failure: fail) ends the phase.
        error = control_.checkpoint();
        if (!error.ok()) {
          queue.Stop(error);
          break;
        }
      }
      // A checkpoint that found a PS failed leaves dispatch paused for the
      // recovery on the next turn.
      if (!control_.ps_failed()) queue.Resume();
      continue;
    }
    if (drained) break;
    queue.Resume();  // a pause asked for by the dispatch that is no longer due
  }
  absl::Status s = queue.Wait();
  dispatcher.Join();
  // Pinned replicas a stopped queue never ran are expected no more.
  if (!pinned_to_.empty()) options_.roster->ClearExpected(pinned_to_);
  {
    absl::MutexLock lock(&mu_);
    current_queue_ = nullptr;
    if (mode == TRAIN) train_seconds_ += absl::ToDoubleSeconds(options_.now() - phase_start_);
  }
  if (!error.ok()) return error;
  if (end == PhaseEnd::kRolledBack) return end;
  if (!s.ok()) {
    // A closure failed for good (a cancelled job is not a closure's failure).
    if (options_.metrics != nullptr && !absl::IsCancelled(s)) options_.metrics->ClosureFailed();
    return s;
  }
  return end;
}

}  // namespace pscluster
