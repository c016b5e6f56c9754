// JobRunner's training and eval phases (job_runner.h): the closures of an
// epoch queued (a synchronous job's split by split, one closure per replica),
// the dispatch threads that run them on the workers, the results recorded,
// and the phase's control loop (checkpoints, PS recovery, rollbacks).
#include <algorithm>
#include <deque>
#include <thread>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/job_runner.h"

namespace pscluster {

std::pair<int64_t, int64_t> JobRunner::RecordSuccess(ClosureMode mode, const Closure& c,
                                                     const RunClosureResponse& r,
                                                     PhaseTotals* totals, bool* split_done) {
  absl::MutexLock lock(&mu_);
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
  if (mode == TRAIN) {
    // A synchronous split is done once every replica's closure is: its
    // global steps count then (each replica reports all of them).
    int64_t steps = r.steps();
    if (c.replica >= 0) {
      int64_t& done = sync_replicas_done_[c.split_index];
      ++done;
      *split_done = done >= SyncShares(spec_);
      steps = *split_done ? r.steps() : 0;
    }
    if (*split_done) finished_splits_.insert(c.split_index);
    status_.set_steps(status_.steps() + steps);
    status_.set_steps_trained(status_.steps_trained() + steps);
    status_.set_examples(status_.examples() + r.examples());
    epoch_examples_ += r.examples();
    epoch_loss_sum_ += r.loss_sum();
    if (epoch_examples_ > 0) status_.set_train_loss(epoch_loss_sum_ / epoch_examples_);
    const double secs = train_seconds_ + absl::ToDoubleSeconds(absl::Now() - phase_start_);
    if (secs > 0) status_.set_examples_per_sec(status_.examples() / secs);
    status_.set_compute_seconds(status_.compute_seconds() + r.compute_seconds());
    status_.set_pull_seconds(status_.pull_seconds() + r.pull_seconds());
    status_.set_push_seconds(status_.push_seconds() + r.push_seconds());
    if (options_.metrics != nullptr) options_.metrics->TrainingDone(steps, r.examples());
  }
  ++version_;
  return {status_.steps(), status_.lost_steps()};
}

void JobRunner::DispatchLoop(int w, ClosureMode mode, ClosureQueue* queue, PhaseTotals* totals) {
  DispatchOptions d;
  d.job_id = job_id_;
  d.mode = mode;
  d.job_key = job_key_;
  const bool sync = mode == TRAIN && Synchronous();
  d.batch = mode == TRAIN ? StepExamples(spec_) : spec_.data.per_replica_batch;
  d.worker_index = w;
  d.round = &round_;
  d.closures_per_rpc = static_cast<int>(spec_.train.closures_per_rpc);
  d.max_attempts = max_attempts_;
  d.retry_backoff = options_.retry_backoff;
  d.setup = &setup_request_;
  d.on_retry = [this](const std::string& what) {
    if (options_.metrics != nullptr) options_.metrics->ClosureRetried();
    Event("retry", what);
    // A mirrored replica that failed left the copies apart (some applied
    // the step, or the others wait for it): roll them all back.
    if (Mirrored() && !ps_failed_.exchange(true)) {
      Event("replica_failed",
            "a multi_worker_mirrored replica failed; rolling every copy back to the last "
            "checkpoint");
    }
  };
  d.ps_failed = [this] { return ps_failed_.load(); };
  d.on_ps_lost = [this] {
    if (!ps_failed_.exchange(true)) {
      spdlog::warn("job {}: a PS no longer holds the job (it restarted, or the job was ended "
                   "there); pausing dispatch",
                   job_id_);
    }
  };
  if (options_.health != nullptr) {
    d.worker_down = &worker_down_[w];
    d.health_stopped = &stop_health_;
    d.worker_losses = &worker_losses_[w];
  }
  d.deadline = mode == EVAL ? &eval_deadline_ : &train_deadline_;
  d.on_success = [this, mode, queue, totals, sync](const Closure& c,
                                                   const RunClosureResponse& r) {
    bool split_done = false;
    const auto [steps_now, lost_now] = RecordSuccess(mode, c, r, totals, &split_done);
    // Hold further dispatch for the control loop to take the checkpoint. (A
    // synchronous phase takes it between its splits: pausing one replica
    // would hold the others at the step's barrier.)
    if (mode == TRAIN && !sync && CheckpointDue()) queue->Pause();
    // A synchronous split is logged once, when its last replica is done;
    // the job log's counts are then those of one replica's closure.
    if (mode == TRAIN && split_done && log_ != nullptr) {
      JobLogRecord rec;
      ClosureFinished* f = rec.mutable_closure_finished();
      f->set_epoch(c.split.epoch());
      f->set_split(c.split_index);
      f->set_steps(r.steps());
      f->set_examples(r.examples());
      f->set_loss_sum(r.loss_sum());
      f->set_global_steps(steps_now);
      f->set_lost_steps(lost_now);
      Log(rec);
    }
  };
  RunDispatchLoop(workers_[w], queue, d);
}

absl::StatusOr<JobRunner::PhaseEnd> JobRunner::RunPhase(ClosureMode mode, int64_t epoch,
                                                        int64_t size, int64_t closure_examples,
                                                        PhaseTotals* totals) {
  ClosureQueue queue;
  // A synchronous phase runs its splits one at a time, each as one closure
  // per replica: the replicas meet at every step's barrier on the PS, and
  // the next split starts once every replica finished this one.
  const bool sync = mode == TRAIN && Synchronous();
  std::deque<Closure> splits;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("job cancelled");
    current_queue_ = &queue;
    phase_start_ = absl::Now();
    sync_replicas_done_.clear();
    int64_t split = 0;
    for (int64_t b = 0; b < size; b += closure_examples, ++split) {
      if (mode == TRAIN && finished_splits_.count(split)) continue;
      Closure c;
      c.id = ClosureId(mode, epoch, split);
      c.split_index = split;
      c.mode = mode;
      c.split.set_epoch(epoch);
      c.split.set_begin(b);
      c.split.set_end(std::min(size, b + closure_examples));
      splits.push_back(std::move(c));
    }
  }
  // Queues the next split: whole, or one closure per replica, replica r
  // preferring worker r mod workers.
  auto put_next = [&] {
    if (splits.empty()) return false;
    Closure c = std::move(splits.front());
    splits.pop_front();
    if (!sync) {
      queue.Put(std::move(c));
      if (options_.metrics != nullptr) options_.metrics->ClosuresScheduled(1);
      return true;
    }
    for (int64_t r = 0; r < SyncShares(spec_); ++r) {
      Closure replica = c;
      replica.replica = static_cast<int>(r);
      replica.preferred_worker = static_cast<int>(r % static_cast<int64_t>(workers_.size()));
      replica.pinned = Mirrored();
      queue.Put(std::move(replica));
    }
    if (options_.metrics != nullptr) options_.metrics->ClosuresScheduled(SyncShares(spec_));
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
  const int64_t per_worker =
      sync ? std::max(spec_.train.closures_per_worker, SyncShares(spec_))
           : spec_.train.closures_per_worker;
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers_.size(); ++w) {
    for (int64_t k = 0; k < per_worker; ++k) {
      threads.emplace_back([this, w, mode, &queue, totals] {
        DispatchLoop(static_cast<int>(w), mode, &queue, totals);
      });
    }
  }
  PhaseEnd end = PhaseEnd::kDone;
  absl::Status error;
  // The phase's control loop: checkpoints (asked for by dispatch threads,
  // which pause the queue when one is due) and PS recovery run here, with
  // no closure in flight.
  while (true) {
    const bool drained =
        sync ? queue.WaitUntilEmpty(absl::Milliseconds(20)) : queue.WaitFor(absl::Milliseconds(20));
    if (ps_failed_) {
      queue.Pause();
      // Mirrored replicas still in flight wait in their ring for the one that
      // failed: stop waiting for them.
      if (Mirrored()) {
        for (WorkerClient* w : workers_) w->CancelCalls();
      }
      queue.WaitUntilIdle(absl::Seconds(spec_.fault_tolerance.ps_recovery_timeout_s));
      error = RecoverFromPsFailure();
      queue.Stop(absl::AbortedError("rolled back"));
      end = PhaseEnd::kRolledBack;
      break;
    }
    if (sync) {
      // Between splits nothing is in flight: the time for a checkpoint.
      if (!drained) continue;
      if (queue.stopped()) break;
      if (CheckpointDue()) {
        error = CheckpointWithRetries(/*final=*/false);
        if (!error.ok()) {
          queue.Stop(error);
          break;
        }
        if (ps_failed_) continue;  // recovered above, on the next turn
      }
      if (!put_next()) {
        queue.SetOpen(false);
        break;
      }
      continue;
    }
    if (mode == TRAIN && CheckpointDue()) {
      queue.Pause();
      if (queue.WaitUntilIdle(absl::Seconds(spec_.fault_tolerance.ps_recovery_timeout_s)) &&
          !ps_failed_) {
        // A failure is retried later (CheckpointDue says when); only one
        // that fails the job (checkpoint.on_failure: fail) ends the phase.
        error = CheckpointWithRetries(/*final=*/false);
        if (!error.ok()) {
          queue.Stop(error);
          break;
        }
      }
      // A checkpoint that found a PS failed leaves dispatch paused for the
      // recovery on the next turn.
      if (!ps_failed_) queue.Resume();
      continue;
    }
    if (drained) break;
    queue.Resume();  // a pause asked for by a dispatch thread that is no longer due
  }
  absl::Status s = queue.Wait();
  for (auto& t : threads) t.join();
  {
    absl::MutexLock lock(&mu_);
    current_queue_ = nullptr;
    if (mode == TRAIN) train_seconds_ += absl::ToDoubleSeconds(absl::Now() - phase_start_);
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
