#include "coordinator/core/closure_queue.h"

#include <algorithm>

namespace pscluster {

void ClosureQueue::Put(Closure closure) {
  absl::MutexLock lock(&mu_);
  closure.queued_at = now_();
  if (stopped_) return;
  if (delay_.has_value()) closure.sequence = delay_->Add();
  if (closure.preferred_worker >= 0) ++preferring_;
  queue_.push_back(std::move(closure));
}

void ClosureQueue::BoundStaleness(int64_t max_staleness) {
  absl::MutexLock lock(&mu_);
  delay_.emplace(max_staleness);
}

int64_t ClosureQueue::max_staleness_observed() const {
  absl::MutexLock lock(&mu_);
  return delay_.has_value() ? delay_->max_observed() : 0;
}

void ClosureQueue::SetOpen(bool open) {
  absl::MutexLock lock(&mu_);
  open_ = open;
}

bool ClosureQueue::WaitUntilEmpty(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (stopped_ && in_flight_ == 0) || Drained();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
}

bool ClosureQueue::stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

std::optional<Closure> ClosureQueue::Get() {
  std::vector<Closure> one = GetUpTo(1);
  if (one.empty()) return std::nullopt;
  return std::move(one.front());
}

std::vector<Closure> ClosureQueue::GetUpTo(int max, int worker) {
  absl::MutexLock lock(&mu_);
  auto ready = [this, worker]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopped_) return true;
    if (paused_) return false;
    if (queue_.empty()) return in_flight_ == 0 && !open_;
    const absl::Time now = now_();
    return std::any_of(queue_.begin(), queue_.end(),
                       [&](const Closure& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                         return Eligible(c, worker, now);
                       });
  };
  // A closure queued for another worker is waited for with a timed wait.
  auto waiting_on_time = [this, worker]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (worker < 0 || preferring_ == 0) return false;  // no scan of a queue that prefers no one
    return std::any_of(queue_.begin(), queue_.end(), [worker](const Closure& c) {
      return c.preferred_worker >= 0 && c.preferred_worker != worker;
    });
  };
  // Counted from here until ready: the lock is held up to the first wait, so
  // whoever reads the count sees this call only while it waits.
  ++waiting_takers_;
  while (true) {
    if (waiting_on_time()) {
      // A closure queued for another worker becomes takeable with time
      // alone, which wakes no one: look again every few ms.
      if (mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(20))) break;
    } else {
      // Until takeable, or until a closure for another worker is queued
      // (then the timed wait above).
      auto ready_or_timed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return ready() || waiting_on_time();
      };
      mu_.Await(absl::Condition(&ready_or_timed));
      if (ready()) break;
    }
  }
  --waiting_takers_;
  std::vector<Closure> taken;
  if (stopped_ || queue_.empty()) return taken;
  const absl::Time now = now_();
  const size_t want = static_cast<size_t>(std::max(max, 1));
  for (auto it = queue_.begin(); it != queue_.end() && taken.size() < want;) {
    if (Eligible(*it, worker, now)) {
      if (delay_.has_value()) it->staleness = delay_->Start(it->sequence);
      if (it->preferred_worker >= 0) --preferring_;
      taken.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  in_flight_ += static_cast<int64_t>(taken.size());
  return taken;
}

void ClosureQueue::Done() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void ClosureQueue::Done(const Closure& closure) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (delay_.has_value()) delay_->Finish(closure.sequence);
}

void ClosureQueue::PutBack(Closure closure) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (!closure.pinned) closure.preferred_worker = -1;  // a retry runs on any free worker
  if (stopped_) return;
  if (closure.preferred_worker >= 0) ++preferring_;
  queue_.push_back(std::move(closure));
}

void ClosureQueue::Fail(absl::Status error) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (error_.ok()) error_ = std::move(error);
  stopped_ = true;
  queue_.clear();
  preferring_ = 0;
}

void ClosureQueue::Stop(absl::Status reason) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = std::move(reason);
  stopped_ = true;
  queue_.clear();
  preferring_ = 0;
}

absl::Status ClosureQueue::Wait() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (stopped_ && in_flight_ == 0) || (Drained() && !open_);
  };
  mu_.Await(absl::Condition(&done));
  return error_;
}

void ClosureQueue::Pause() {
  absl::MutexLock lock(&mu_);
  paused_ = true;
}

void ClosureQueue::Resume() {
  absl::MutexLock lock(&mu_);
  paused_ = false;
}

bool ClosureQueue::WaitUntilIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || in_flight_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

int ClosureQueue::waiting_takers() const {
  absl::MutexLock lock(&mu_);
  return waiting_takers_;
}

bool ClosureQueue::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (stopped_ && in_flight_ == 0) || (!paused_ && Drained() && !open_);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

}  // namespace pscluster
