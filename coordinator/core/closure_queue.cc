#include "coordinator/core/closure_queue.h"

#include <algorithm>

namespace pscluster {

void ClosureQueue::Call(Wakers* wakers) {
  for (std::function<void()>& wake : *wakers) wake();
}

void ClosureQueue::WakeOne(int worker, bool pinned, Wakers* out) {
  if (watchers_.empty()) return;
  auto it = watchers_.begin();
  if (worker >= 0) {
    it = std::find_if(watchers_.begin(), watchers_.end(),
                      [worker](const Watcher& w) { return w.worker == worker; });
    // Nobody else may take a pinned closure; its worker's next take finds it.
    if (it == watchers_.end() && pinned) return;
    if (it == watchers_.end()) it = watchers_.begin();
  }
  out->push_back(std::move(it->wake));
  watchers_.erase(it);
}

void ClosureQueue::WakeAll(Wakers* out) {
  for (Watcher& w : watchers_) out->push_back(std::move(w.wake));
  watchers_.clear();
}

void ClosureQueue::WakeAfterFinish(Wakers* out) {
  if (stopped_ || (Drained() && !open_)) {
    WakeAll(out);
    return;
  }
  if (delay_.has_value() && delay_->max_staleness() != BoundedDelay::kUnbounded) {
    for (size_t i = 0; i < queue_.size() && !watchers_.empty(); ++i) WakeOne(-1, false, out);
  }
}

void ClosureQueue::Put(Closure closure) {
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    closure.queued_at = now_();
    if (stopped_) return;
    if (delay_.has_value()) closure.sequence = delay_->Add();
    if (closure.preferred_worker >= 0) ++preferring_;
    WakeOne(closure.preferred_worker, closure.pinned, &wakers);
    queue_.push_back(std::move(closure));
  }
  Call(&wakers);
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
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    open_ = open;
    if (!open) WakeAll(&wakers);  // drained now, they end; else they look again
  }
  Call(&wakers);
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
                       [&](const Closure& c)
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return Eligible(c, worker, now); });
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
  TakeLocked(max, worker, &taken);
  return taken;
}

void ClosureQueue::TakeLocked(int max, int worker, std::vector<Closure>* out) {
  const absl::Time now = now_();
  const size_t want = static_cast<size_t>(std::max(max, 1));
  const size_t before = out->size();
  for (auto it = queue_.begin(); it != queue_.end() && out->size() - before < want;) {
    if (Eligible(*it, worker, now)) {
      if (delay_.has_value()) it->staleness = delay_->Start(it->sequence);
      if (it->preferred_worker >= 0) --preferring_;
      out->push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  in_flight_ += static_cast<int64_t>(out->size() - before);
}

ClosureQueue::Take ClosureQueue::TakeOrWatch(int max, int worker, int64_t watcher,
                                             std::function<void()> wake, std::vector<Closure>* out,
                                             absl::Duration* recheck) {
  *recheck = absl::InfiniteDuration();
  absl::MutexLock lock(&mu_);
  if (stopped_) return Take::kEnded;
  if (!paused_) {
    if (queue_.empty() && in_flight_ == 0 && !open_) return Take::kEnded;
    const size_t before = out->size();
    if (!queue_.empty()) TakeLocked(max, worker, out);
    if (out->size() > before) return Take::kTaken;
    if (worker >= 0 && preferring_ > 0) {
      // A closure waiting for another worker becomes takeable with time.
      const absl::Time now = now_();
      for (const Closure& c : queue_) {
        if (c.pinned || c.preferred_worker < 0 || c.preferred_worker == worker) continue;
        if (delay_.has_value() && !delay_->MayStart(c.sequence)) continue;
        *recheck = std::min(*recheck, c.queued_at + locality_wait_ - now);
      }
      *recheck = std::max(*recheck, absl::Milliseconds(1));
    }
  }
  watchers_.push_back(Watcher{watcher, worker, std::move(wake)});
  return Take::kWatching;
}

void ClosureQueue::Unwatch(int64_t watcher) {
  std::function<void()> dropped;  // destroyed with no lock held
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(watchers_.begin(), watchers_.end(),
                         [watcher](const Watcher& w) { return w.id == watcher; });
  if (it == watchers_.end()) return;
  dropped = std::move(it->wake);
  watchers_.erase(it);
}

void ClosureQueue::PassWake() {
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty()) WakeOne(-1, false, &wakers);
  }
  Call(&wakers);
}

void ClosureQueue::Done() {
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    WakeAfterFinish(&wakers);
  }
  Call(&wakers);
}

void ClosureQueue::Done(const Closure& closure) {
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (delay_.has_value()) delay_->Finish(closure.sequence);
    WakeAfterFinish(&wakers);
  }
  Call(&wakers);
}

void ClosureQueue::PutBack(Closure closure) {
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (!closure.pinned) closure.preferred_worker = -1;  // a retry runs on any free worker
    if (stopped_) return;
    if (closure.preferred_worker >= 0) ++preferring_;
    WakeOne(closure.preferred_worker, closure.pinned, &wakers);
    queue_.push_back(std::move(closure));
  }
  Call(&wakers);
}

void ClosureQueue::Fail(absl::Status error) {
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (error_.ok()) error_ = std::move(error);
    stopped_ = true;
    queue_.clear();
    preferring_ = 0;
    WakeAll(&wakers);
  }
  Call(&wakers);
}

void ClosureQueue::Stop(absl::Status reason) {
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(reason);
    stopped_ = true;
    queue_.clear();
    preferring_ = 0;
    WakeAll(&wakers);
  }
  Call(&wakers);
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
  Wakers wakers;
  {
    absl::MutexLock lock(&mu_);
    paused_ = false;
    WakeAll(&wakers);
  }
  Call(&wakers);
}

bool ClosureQueue::WaitUntilIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || in_flight_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

int ClosureQueue::waiting_takers() const {
  absl::MutexLock lock(&mu_);
  return waiting_takers_ + static_cast<int>(watchers_.size());
}

bool ClosureQueue::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (stopped_ && in_flight_ == 0) || (!paused_ && Drained() && !open_);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

}  // namespace pscluster
