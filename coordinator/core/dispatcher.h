// Dispatcher: a phase's closure dispatch for any number of workers, driven
// from a DispatchExecutor's few threads instead of blocking threads per
// worker. Each worker gets `takers` state machines (a phase's
// closures_per_worker), each doing what RunDispatchLoop does
// (closure_dispatch.h), with the same steps and DispatchOptions:
//
//   take (ClosureQueue::TakeOrWatch: up to closures_per_rpc closures, or a
//   callback when the queue changes) -> BeginCall -> the worker's
//   asynchronous RunClosure(s) -> on its completion, on the executor:
//   FinishCall (record, retry, hand back, fail) -> take again; after a retry
//   a back-off timer first, and for a worker that lost the job its SetupJob
//   again (RunBlocking: a thread for that rare call).
//
// A held worker (DispatchOptions::worker_down) is looked at again every
// 50 ms on a timer; a taker ends once the queue is drained or stopped, a
// closure failed for good, or its worker left the roster.
//
// Thread-safe. Not owned: the queue, the executor, the workers; all outlive
// Join().
#ifndef PSCLUSTER_COORDINATOR_CORE_DISPATCHER_H_
#define PSCLUSTER_COORDINATOR_CORE_DISPATCHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/dispatch_executor.h"
#include "coordinator/core/worker_client.h"

namespace pscluster {

class Dispatcher {
 public:
  Dispatcher(ClosureQueue* queue, DispatchExecutor* executor)
      : queue_(queue), executor_(executor) {}
  // Join()s.
  ~Dispatcher() ABSL_LOCKS_EXCLUDED(mu_);
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Starts `takers` (>= 1) state machines for `worker` with `options`
  // (shared by them). `before` (may be null): run first on a thread of its
  // own (DispatchExecutor::RunBlocking; e.g. a joining worker's SetupJob);
  // false: the takers are not started. `on_end` (may be null): called once
  // per taker as it ends, or `takers` times when `before` said false, on an
  // executor thread.
  void Start(WorkerClient* worker, DispatchOptions options, int takers,
             std::function<void()> on_end = nullptr, std::function<bool()> before = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until every taker started so far ended.
  void Join() ABSL_LOCKS_EXCLUDED(mu_);
  // Takers not ended yet.
  int running() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One worker's options, shared by its takers.
  struct Lane {
    WorkerClient* worker;
    DispatchOptions options;
    std::function<void()> on_end;
  };
  class Taker;
  void StartTakers(const std::shared_ptr<Lane>& lane, int takers) ABSL_LOCKS_EXCLUDED(mu_);
  void Ended() ABSL_LOCKS_EXCLUDED(mu_);

  ClosureQueue* const queue_;
  DispatchExecutor* const executor_;
  mutable absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;  // takers' ids (ClosureQueue watchers)
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_DISPATCHER_H_
