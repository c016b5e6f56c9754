// ClosureQueue: the coordinator's FIFO of closures waiting for a worker.
//
// Dispatch threads (several per worker) Get() closures, run them, and report
// Done(), PutBack() for a retry, or Fail() for an error that ends the phase.
// Wait() is TF's join(): it returns when every closure put in has finished,
// or the first error.
//
// A closure may prefer a worker (Closure::preferred_worker, with the taker's
// index given to GetUpTo): others take it only once it has waited
// `locality_wait` in the queue, or after it was put back (delay scheduling).
// A synchronous job's replicas so spread over the workers instead of piling
// on whichever threads ask first, and still run elsewhere when their worker
// is gone.
//
// An open queue (SetOpen) is fed while it runs: running out of closures does
// not end it, so the takers wait (or watch) for more; closing it lets them
// end.
//
// With BoundStaleness(S) the queue also keeps ps-lite's bounded delay
// (bounded_delay.h): closures are numbered as they are Put, and closure k is
// handed out only once every closure numbered below k - S is Done(closure);
// each closure taken carries its measured staleness. A retry keeps its
// number, so a closure of a lost worker holds the others only until it is
// put back.
//
// A taker that must not block (the asynchronous Dispatcher, a few threads
// for every worker) calls TakeOrWatch instead: it takes what it may now, or
// leaves a one-shot callback that the queue calls when something changed
// that may let it take or end (a closure put, the queue drained, stopped or
// resumed). A closure put wakes one watcher (preferring its worker's), not
// all: the takers' work per closure does not grow with their number.
//
// Time (queued_at, the locality wait) is read from the clock given to the
// constructor: absl::Now by default, a fake one in tests. Thread-safe; the
// clock is called with the queue's lock held, so it must not call back into
// the queue.
#ifndef PSCLUSTER_COORDINATOR_CORE_CLOSURE_QUEUE_H_
#define PSCLUSTER_COORDINATOR_CORE_CLOSURE_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/core/bounded_delay.h"
#include "protos/worker.pb.h"

namespace pscluster {

// A FUNCTION closure's call (ClusterCoordinator): the function registered
// on the workers and its argument bytes; shared, as a retried closure sends
// the same bytes again.
struct FunctionCall {
  std::string name;
  std::string args;
};

struct Closure {
  int64_t id = 0;
  int64_t split_index = 0;  // which split of its epoch
  ClosureMode mode = TRAIN;
  DataSplit split;
  int attempts = 0;  // failed runs so far
  // strategy: central_storage: the replica this closure runs of its split
  // (RunClosureRequest.replica); -1: none (the whole split).
  int replica = -1;
  // The worker that should run it, or -1 for any (see ClosureQueue).
  int preferred_worker = -1;
  // Only preferred_worker may run it, however long it waits, retries too
  // (multi_worker_mirrored: replica r is worker r's copy of the model).
  bool pinned = false;
  // FUNCTION closures only (RunClosureRequest.function, function_args).
  std::shared_ptr<const FunctionCall> call;
  absl::Time queued_at;  // set by Put
  // Bounded staleness (ClosureQueue::BoundStaleness): the closure's number,
  // set by Put (-1: none), and its staleness when it was last taken (the
  // closures numbered below it not finished then; -1: not measured).
  int64_t sequence = -1;
  int64_t staleness = -1;
};

class ClosureQueue {
 public:
  // `now`: the clock of queued_at and the locality wait.
  explicit ClosureQueue(
      absl::Duration locality_wait = absl::Milliseconds(300),
      std::function<absl::Time()> now = [] { return absl::Now(); })
      : locality_wait_(locality_wait), now_(std::move(now)) {}

  void Put(Closure closure) ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps closures within `max_staleness` (>= 0) of the oldest unfinished
  // one (bounded_delay.h); closures must then be finished with
  // Done(closure). REQUIRES: called before the first Put.
  void BoundStaleness(int64_t max_staleness) ABSL_LOCKS_EXCLUDED(mu_);
  // The largest staleness of a closure taken so far (0 without
  // BoundStaleness: the queue does not measure it then).
  int64_t max_staleness_observed() const ABSL_LOCKS_EXCLUDED(mu_);
  // While open, the queue is not drained when it runs empty (Get() waits for
  // more closures, Wait() and WaitFor() go on waiting). Closed by default.
  void SetOpen(bool open) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until nothing is queued or in flight (open or not), or the queue
  // stopped with nothing in flight, at most `timeout`; true if so.
  bool WaitUntilEmpty(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  bool stopped() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until a closure is available (and marks it in flight), or returns
  // nullopt once the queue is drained (empty, nothing in flight) or stopped.
  std::optional<Closure> Get() ABSL_LOCKS_EXCLUDED(mu_);
  // Like Get(), but takes up to `max` (>= 1) queued closures at once, all
  // marked in flight; empty where Get() returns nullopt. Each one is then
  // finished on its own with Done(), PutBack() or Fail().
  // `worker`: the taker's worker index, for preferred workers (-1: takes
  // any closure at once).
  std::vector<Closure> GetUpTo(int max, int worker = -1) ABSL_LOCKS_EXCLUDED(mu_);
  // What TakeOrWatch did.
  enum class Take {
    kTaken,     // *out holds 1 to `max` closures, in flight
    kWatching,  // nothing to take now: `wake` will be called once
    kEnded,     // drained or stopped: a taker ends (GetUpTo's empty answer)
  };
  // GetUpTo without blocking. kWatching: `wake` is registered and called
  // once, outside the queue's lock on the thread that changed the queue, when
  // something changed that may let this taker take or end; it must be cheap
  // (post the retry elsewhere) and must not call back into the queue. Then
  // *recheck is how long until time alone may let it take (a closure waiting
  // for another worker's locality wait; InfiniteDuration: never), which wakes
  // no one: the caller looks again then (its `wake` may still be called
  // later, once).
  // `watcher`: the taker's id for Unwatch.
  Take TakeOrWatch(int max, int worker, int64_t watcher, std::function<void()> wake,
                   std::vector<Closure>* out, absl::Duration* recheck) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops `watcher`'s callback if not called yet (it looks again on its own,
  // after *recheck).
  void Unwatch(int64_t watcher) ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes one watcher, if any closure is queued: a woken taker that will not
  // take (its worker is held) passes the wake on.
  void PassWake() ABSL_LOCKS_EXCLUDED(mu_);

  // A closure Get() returned has finished. With BoundStaleness, use
  // Done(closure), which also lets the closures waiting on it start.
  void Done() ABSL_LOCKS_EXCLUDED(mu_);
  void Done(const Closure& closure) ABSL_LOCKS_EXCLUDED(mu_);
  // The closure Get() returned failed and will be retried: back to the
  // tail, for any worker.
  void PutBack(Closure closure) ABSL_LOCKS_EXCLUDED(mu_);
  // The closure Get() returned failed for good: records the first error and
  // stops the queue; queued closures are dropped.
  void Fail(absl::Status error) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops the queue with `reason` (e.g. CANCELLED) unless an error is recorded.
  void Stop(absl::Status reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until drained or stopped; returns the recorded error or OK.
  absl::Status Wait() ABSL_LOCKS_EXCLUDED(mu_);

  // While paused, Get() hands out nothing (closures in flight go on). Used to
  // quiesce the cluster for a checkpoint or a PS recovery.
  void Pause() ABSL_LOCKS_EXCLUDED(mu_);
  void Resume() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until no closure is in flight (or the queue stopped), at most
  // `timeout`; true when none is.
  bool WaitUntilIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until drained, stopped, or `timeout`; true when drained or stopped.
  bool WaitFor(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // How many Get()/GetUpTo() calls are blocked now, and TakeOrWatch
  // watchers not yet woken, each having found nothing it may take: an event
  // tests wait on instead of sleeping.
  int waiting_takers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool Drained() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && in_flight_ == 0;
  }
  // `worker` may take `c` at `now`.
  bool Eligible(const Closure& c, int worker, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (delay_.has_value() && !delay_->MayStart(c.sequence)) return false;
    if (c.pinned) return worker < 0 || c.preferred_worker == worker;
    return worker < 0 || c.preferred_worker < 0 || c.preferred_worker == worker ||
           now - c.queued_at >= locality_wait_;
  }

  // Takes up to `max` eligible closures for `worker` into *out, in flight.
  void TakeLocked(int max, int worker, std::vector<Closure>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakers to call once the lock is released: one watcher for a closure
  // preferring `worker` (-1: any; pinned: only that worker's), or all.
  using Wakers = std::vector<std::function<void()>>;
  void WakeOne(int worker, bool pinned, Wakers* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeAll(Wakers* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a closure finished: wakes every watcher once the queue drained
  // (they end), and with a staleness bound, watchers for the closures the
  // finished one may have let start.
  void WakeAfterFinish(Wakers* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Call(Wakers* wakers);

  const absl::Duration locality_wait_;
  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  std::deque<Closure> queue_ ABSL_GUARDED_BY(mu_);
  // How many of queue_ prefer a worker (preferred_worker >= 0): while none
  // does, a taker need not scan the queue for one (GetUpTo).
  int64_t preferring_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_takers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::optional<BoundedDelay> delay_ ABSL_GUARDED_BY(mu_);
  struct Watcher {
    int64_t id;
    int worker;
    std::function<void()> wake;
  };
  // TakeOrWatch's callbacks, oldest first.
  std::deque<Watcher> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CLOSURE_QUEUE_H_
