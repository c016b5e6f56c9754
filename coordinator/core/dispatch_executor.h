// DispatchExecutor: the few threads that drive a coordinator's closure
// dispatch (closure_dispatch.h's Dispatcher) for any number of workers: a
// FIFO of tasks and timers on an injectable clock, run by a fixed pool
// (max(2, cores) threads by default). Tasks must not block for long: a call
// to a worker is started here and finishes in a callback that posts the next
// task; what must block (a SetupJob sent again) goes to RunBlocking.
//
// Timers run on the clock given in Options: with a fake clock, a test
// advances it and calls Wake() so that the pool looks at the timers again
// (it also looks every `poll` of real time).
//
// Thread-safe. The destructor runs the tasks already posted, drops the
// timers not yet due, joins the pool and RunBlocking's threads. REQUIRES:
// nothing posts to the executor once it is being destroyed.
#ifndef PSCLUSTER_COORDINATOR_CORE_DISPATCH_EXECUTOR_H_
#define PSCLUSTER_COORDINATOR_CORE_DISPATCH_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pscluster {

class DispatchExecutor {
 public:
  struct Options {
    // Pool threads; <= 0: max(2, hardware threads).
    int threads = 0;
    // The clock of PostAt/PostAfter.
    std::function<absl::Time()> now = [] { return absl::Now(); };
    // How often (real time) an idle pool looks at its timers even unwoken:
    // a fake clock moves without waking anyone.
    absl::Duration poll = absl::Milliseconds(100);
  };

  DispatchExecutor() : DispatchExecutor(Options()) {}
  explicit DispatchExecutor(Options options);
  ~DispatchExecutor() ABSL_LOCKS_EXCLUDED(mu_);
  DispatchExecutor(const DispatchExecutor&) = delete;
  DispatchExecutor& operator=(const DispatchExecutor&) = delete;

  // Runs `task` on a pool thread soon (FIFO).
  void Post(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `task` on a pool thread once the clock reads `when` or later.
  void PostAt(absl::Time when, std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);
  void PostAfter(absl::Duration delay, std::function<void()> task) {
    PostAt(options_.now() + delay, std::move(task));
  }
  // Runs `task` on a thread of its own, for work that blocks (rare: a
  // worker's SetupJob sent again, a joining worker's setup). The destructor
  // joins it.
  void RunBlocking(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);
  // The clock moved (a fake one): timers due now run.
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Time Now() const { return options_.now(); }
  int threads() const { return static_cast<int>(pool_.size()); }
  // Timers not yet run (for tests: a backoff is armed).
  int pending_timers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Work() ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  // Timers by due time; the second key keeps equal times in posting order.
  std::map<std::pair<absl::Time, int64_t>, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  int64_t next_timer_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;  // Wake() calls: a waiting thread looks again
  // RunBlocking's threads; those done are joined by the next RunBlocking,
  // the rest by the destructor.
  struct Blocking {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Blocking> blocking_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> pool_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_DISPATCH_EXECUTOR_H_
