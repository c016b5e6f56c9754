#include "coordinator/core/dispatch_executor.h"

#include <algorithm>

namespace pscluster {

DispatchExecutor::DispatchExecutor(Options options) : options_(std::move(options)) {
  int n = options_.threads;
  if (n <= 0) n = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  pool_.reserve(n);
  for (int i = 0; i < n; ++i) pool_.emplace_back([this] { Work(); });
}

DispatchExecutor::~DispatchExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : pool_) t.join();
  std::vector<Blocking> blocking;
  {
    absl::MutexLock lock(&mu_);
    blocking.swap(blocking_);
  }
  for (Blocking& b : blocking) b.thread.join();
}

void DispatchExecutor::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void DispatchExecutor::PostAt(absl::Time when, std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  timers_.emplace(std::make_pair(when, next_timer_++), std::move(task));
  ++wakes_;  // it may be due before what a waiting thread waits for
}

void DispatchExecutor::RunBlocking(std::function<void()> task) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::thread> finished;
  {
    absl::MutexLock lock(&mu_);
    // Threads that finished are joined here, so that they do not pile up
    // over a long job.
    for (auto it = blocking_.begin(); it != blocking_.end();) {
      if (it->done->load()) {
        finished.push_back(std::move(it->thread));
        it = blocking_.erase(it);
      } else {
        ++it;
      }
    }
    blocking_.push_back(Blocking{std::thread([task = std::move(task), done] {
                                   task();
                                   done->store(true);
                                 }),
                                 done});
  }
  for (std::thread& t : finished) t.join();
}

void DispatchExecutor::Wake() {
  absl::MutexLock lock(&mu_);
  ++wakes_;
}

int DispatchExecutor::pending_timers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(timers_.size());
}

void DispatchExecutor::Work() {
  absl::MutexLock lock(&mu_);
  while (true) {
    // Due timers join the task FIFO.
    const absl::Time now = options_.now();
    while (!timers_.empty() && timers_.begin()->first.first <= now) {
      tasks_.push_back(std::move(timers_.begin()->second));
      timers_.erase(timers_.begin());
    }
    if (!tasks_.empty()) {
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      mu_.Unlock();
      task();
      task = nullptr;  // what it holds goes with no lock held
      mu_.Lock();
      continue;
    }
    if (stop_) return;
    const int64_t wakes = wakes_;
    absl::Duration wait = options_.poll;
    if (!timers_.empty()) wait = std::min(wait, timers_.begin()->first.first - now);
    auto woken = [this, wakes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || !tasks_.empty() || wakes_ != wakes;
    };
    mu_.AwaitWithTimeout(absl::Condition(&woken), std::max(wait, absl::Microseconds(100)));
  }
}

}  // namespace pscluster
