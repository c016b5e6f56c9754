// HealthWatch: a running job's health-check loop. Every
// fault_tolerance.health_check_interval_s it checks the PS tasks (through
// PsRecovery::CheckEveryPs: a PS down or restarted pauses dispatch) and
// every worker. A worker that does not answer is marked down (dispatch hands
// it nothing; closure_dispatch.h) until it answers again; one that has
// failed every check for worker_timeout_s (hung, e.g. SIGSTOPped) is
// declared lost: its loss is counted (dispatch then re-runs its closures
// without counting an attempt) and its calls in flight are cancelled, on
// every pass while it stays lost.
//
// Liveness rides on the RPCs already flowing: a worker whose calls were
// answered since the last pass (worker_answers(w), counted by dispatch) is
// alive without a health check, and the HealthChecker hears of it
// (WorkerAnswered); any other worker is asked with CheckWorkerWithin(w,
// interval), which the coordinator's shared ClusterLiveness answers from what
// another poller learned within the interval. A worker marked down is always
// asked itself (CheckWorker).
//
// Thread-safe: the flags are atomics read by the dispatch threads; Start
// and Stop are called by the job's thread.
#ifndef PSCLUSTER_COORDINATOR_CORE_HEALTH_WATCH_H_
#define PSCLUSTER_COORDINATOR_CORE_HEALTH_WATCH_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/core/health_checker.h"
#include "coordinator/core/worker_client.h"
#include "coordinator/core/worker_roster.h"

namespace pscluster {

class HealthWatch {
 public:
  struct Options {
    // Not owned; must outlive the watch. Null: no health checks (Start
    // starts nothing).
    HealthChecker* health = nullptr;
    std::vector<WorkerClient*> workers;  // not owned
    // Elastic workers (worker_roster.h; not owned): the workers are the
    // roster's, as it grows (index = roster index, as the health checker's);
    // workers that left are not checked. Null: `workers`, fixed.
    WorkerRoster* roster = nullptr;
    absl::Duration interval = absl::Seconds(1);
    absl::Duration worker_timeout = absl::Seconds(60);
    // One pass over the PS tasks (PsRecovery::CheckEveryPs); null: none.
    std::function<void()> check_ps;
    // A worker was declared lost (the job's count and metric).
    std::function<void()> on_worker_lost;
    // Records a job event (JobStatusBoard::Event).
    std::function<void(const std::string& kind, const std::string& message)> event;
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };

  explicit HealthWatch(Options options);
  // Join()s the loop.
  ~HealthWatch();

  // Starts the loop on its own thread (nothing without a health checker).
  // REQUIRES: called at most once, from the thread that calls Join.
  void Start();
  // Tells the loop to stop (it ends after its current pass and wait);
  // dispatch threads waiting for a down worker stop waiting. Idempotent.
  void Stop();
  // Stop(), then waits for the loop to end. Idempotent.
  void Join();

  // One pass of the loop (what the thread does every interval).
  void CheckOnce();

  // For DispatchOptions (closure_dispatch.h): worker `w` is down, the times
  // it was declared lost, and the loop stopped.
  // (Grown on demand for workers that joined; the pointers stay valid.)
  std::atomic<bool>* worker_down(int w) ABSL_LOCKS_EXCLUDED(flags_mu_);
  std::atomic<int64_t>* worker_losses(int w) ABSL_LOCKS_EXCLUDED(flags_mu_);
  // Counted up by dispatch for each call worker `w` answered.
  std::atomic<int64_t>* worker_answers(int w) ABSL_LOCKS_EXCLUDED(flags_mu_);
  const std::atomic<bool>* stopped() const { return &stop_; }

 private:
  // Grows the flags to `n` workers.
  void Grow(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(flags_mu_);

  const Options options_;
  // A deque: growing it leaves the flags handed out where they are.
  mutable absl::Mutex flags_mu_;
  std::deque<std::atomic<bool>> worker_down_ ABSL_GUARDED_BY(flags_mu_);
  std::deque<std::atomic<int64_t>> worker_losses_ ABSL_GUARDED_BY(flags_mu_);
  std::deque<std::atomic<int64_t>> worker_answers_ ABSL_GUARDED_BY(flags_mu_);
  std::atomic<bool> stop_{false};
  // The loop's own state (only CheckOnce touches it, on one thread at a
  // time): when each worker began failing its checks (InfiniteFuture while
  // it answers), whether it is declared lost, and its worker_answers at the
  // last pass.
  std::vector<absl::Time> down_since_;
  std::vector<bool> lost_;
  std::vector<int64_t> answers_seen_;
  std::thread thread_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_HEALTH_WATCH_H_
