// ClosureDeadline: how long the coordinator waits for one RunClosure(s) call
// before it gives up on it (DEADLINE_EXCEEDED: the closure is retried,
// possibly on another worker). The deadline follows the job's own closures:
// `multiple` x the longest closure seen so far, at least `floor`, at most
// `cap`; before any closure has finished, `cap`, so that a job's first
// (slowest: cold caches, lazy setup) closures are never cut short.
//
// It bounds a worker that still answers health checks but whose closure
// never ends (a stuck step); a worker that stops answering at all is handled
// sooner by the health loop (fault_tolerance.worker_timeout_s).
//
// Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_CLOSURE_DEADLINE_H_
#define PSCLUSTER_COORDINATOR_CORE_CLOSURE_DEADLINE_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pscluster {

struct ClosureDeadlineOptions {
  // The shortest deadline, whatever the closures take.
  absl::Duration floor = absl::Seconds(10);
  // Deadline = multiple x the longest closure seen (per closure of a call).
  double multiple = 10;
  // The longest deadline, and the one before any closure has finished.
  absl::Duration cap = absl::Seconds(300);
};

class ClosureDeadline {
 public:
  explicit ClosureDeadline(ClosureDeadlineOptions options = {});

  // The deadline of one call that runs `closures` (>= 1) closures.
  absl::Duration For(int closures) const ABSL_LOCKS_EXCLUDED(mu_);

  // Records a call that ran `closures` (>= 1) closures to completion in
  // `elapsed`. Only successful calls should be recorded: a failed one says
  // nothing about how long a closure takes.
  void Observe(absl::Duration elapsed, int closures) ABSL_LOCKS_EXCLUDED(mu_);

  // The longest time per closure seen so far; zero before any.
  absl::Duration longest() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const ClosureDeadlineOptions options_;
  mutable absl::Mutex mu_;
  absl::Duration longest_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CLOSURE_DEADLINE_H_
