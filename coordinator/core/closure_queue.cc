#include "coordinator/core/closure_queue.h"

#include <algorithm>

namespace pscluster {

void ClosureQueue::Put(Closure closure) {
  absl::MutexLock lock(&mu_);
  if (!stopped_) queue_.push_back(std::move(closure));
}

std::optional<Closure> ClosureQueue::Get() {
  std::vector<Closure> one = GetUpTo(1);
  if (one.empty()) return std::nullopt;
  return std::move(one.front());
}

std::vector<Closure> ClosureQueue::GetUpTo(int max) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || (!paused_ && (!queue_.empty() || in_flight_ == 0));
  };
  mu_.Await(absl::Condition(&ready));
  std::vector<Closure> taken;
  if (stopped_) return taken;
  const size_t n = std::min(queue_.size(), static_cast<size_t>(std::max(max, 1)));
  taken.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    taken.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  in_flight_ += static_cast<int64_t>(n);
  return taken;
}

void ClosureQueue::Done() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void ClosureQueue::PutBack(Closure closure) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (!stopped_) queue_.push_back(std::move(closure));
}

void ClosureQueue::Fail(absl::Status error) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (error_.ok()) error_ = std::move(error);
  stopped_ = true;
  queue_.clear();
}

void ClosureQueue::Stop(absl::Status reason) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = std::move(reason);
  stopped_ = true;
  queue_.clear();
}

absl::Status ClosureQueue::Wait() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (stopped_ && in_flight_ == 0) || Drained();
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

bool ClosureQueue::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (stopped_ && in_flight_ == 0) || (!paused_ && Drained());
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

}  // namespace pscluster
