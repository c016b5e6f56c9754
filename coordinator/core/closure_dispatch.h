// The dispatch loop: what one of a JobRunner phase's dispatch threads does.
// It takes closures from a ClosureQueue, runs them on one worker and records
// each result, retrying failed closures with backoff. JobRunner runs
// `closures_per_worker` of these per worker; bench/dispatch_bench drives the
// same function to measure scheduling itself.
//
// With closures_per_rpc > 1 the loop takes up to that many closures at once
// and sends them in one RunClosures call; each closure's result is still
// handled on its own (success recorded, failure retried or fatal), exactly as
// one RunClosure per closure would be. An error of the RPC itself is every
// closure's error.
#ifndef PSCLUSTER_COORDINATOR_CORE_CLOSURE_DISPATCH_H_
#define PSCLUSTER_COORDINATOR_CORE_CLOSURE_DISPATCH_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/core/closure_deadline.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/worker_client.h"
#include "coordinator/core/worker_roster.h"
#include "protos/worker.pb.h"

namespace pscluster {

struct DispatchOptions {
  std::string job_id;
  ClosureMode mode = TRAIN;
  // The job's key (common/update_lease.h): each TRAIN closure is sent with
  // its lease for ceil(split size / batch) steps. Empty: no leases.
  std::string job_key;
  // Examples per step of a closure: per_replica_batch, or global_batch for
  // the replicas of a synchronous job (each steps through its split a
  // global batch at a time).
  int64_t batch = 1;
  // FUNCTION closures: the steps (pushes) each closure's lease covers.
  int64_t function_lease_steps = 0;
  // This loop's worker, for closures that prefer one (ClosureQueue); -1:
  // takes any closure.
  int worker_index = -1;
  // Synchronous closures: the job's rollback count (RunClosureRequest.round),
  // read as each closure is sent. Null: 0.
  const std::atomic<int64_t>* round = nullptr;
  // Closures per round trip to the worker; 1 (default) uses RunClosure, more
  // uses RunClosures. Worth it only for closures cheaper than an RPC.
  int closures_per_rpc = 1;
  // A closure that fails this many times (not counting PS outages) fails the
  // queue with a message naming it and the worker.
  int max_attempts = 3;
  // Backoff before this worker takes more work after a failure:
  // retry_backoff * 2^(attempts-1), capped at 2^6.
  absl::Duration retry_backoff = absl::Milliseconds(200);
  // Re-sent to a worker that answers FAILED_PRECONDITION (it lost the job,
  // e.g. it restarted). Not owned; null: not re-sent.
  const SetupJobRequest* setup = nullptr;
  // Called on the dispatch thread for each closure that succeeded, before
  // the queue hears Done(). Must not block on the queue.
  std::function<void(const Closure&, const RunClosureResponse&)> on_success;
  // Called on the dispatch thread with the closure that failed for good and
  // the error the queue is failed with, before queue->Fail(). Null: none.
  std::function<void(const Closure&, const absl::Status&)> on_failure;
  // Called on the dispatch thread with a sentence on each closure failure
  // that will be retried. Null: the sentence is logged here instead.
  std::function<void(const std::string&)> on_retry;
  // True while the job knows its PS tasks to be down: failures then do not
  // count as attempts. Null: never.
  std::function<bool()> ps_failed;
  // Called when a worker reports that a PS lost its variables (NOT_FOUND
  // from "ps <address>": the PS restarted empty); the closure is retried
  // without counting. Null: such an error fails the closure.
  std::function<void()> on_ps_lost;
  // Health checking, both null without it. While *worker_down is set the
  // loop hands this worker nothing; the loop sets it when the worker answers
  // UNAVAILABLE itself. *health_stopped ends the wait.
  std::atomic<bool>* worker_down = nullptr;
  const std::atomic<bool>* health_stopped = nullptr;
  // How many times the health loop declared the worker lost (it failed its
  // health checks for worker_timeout_s; worker_down is then set). The
  // health loop increments it, then cancels the worker's calls in flight
  // (WorkerClient::CancelCalls). A closure whose call failed while it grew
  // goes back to the queue for another worker without counting an attempt:
  // the worker hung, not the closure. Null: never.
  const std::atomic<int64_t>* worker_losses = nullptr;
  // Counted up for each call the worker answered (some closure of it
  // succeeded): the health loop takes it as a sign of life instead of a
  // health check (health_watch.h). Null: not counted.
  std::atomic<int64_t>* worker_answers = nullptr;
  // The deadline of each call (ClosureDeadline::For), fed with the time of
  // each call that succeeded. Not owned; shared by the phase's dispatch
  // threads. Null: no deadline of its own (the WorkerClient's longest).
  ClosureDeadline* deadline = nullptr;
  // Elastic workers (worker_roster.h): each call to this worker is
  // bracketed by roster->BeginCall/EndCall(roster_index); the loop ends once
  // the worker leaves (closures it took go back untried), and the closures
  // of a call that failed because the worker left go back without counting
  // an attempt (handed back, not retried). Null: a fixed worker.
  WorkerRoster* roster = nullptr;
  int roster_index = -1;
};

// Runs closures from `queue` on `worker` until the queue is drained or
// stopped, or a closure fails for good (then queue->Fail() gets its error and
// this returns). Every closure taken is finished with Done(), PutBack() or
// Fail(). Not owned: `worker`, `queue`.
void RunDispatchLoop(WorkerClient* worker, ClosureQueue* queue, const DispatchOptions& options);

// Errors after which the same closure may succeed on a (possibly other) worker.
bool RetryableClosureError(const absl::Status& s);

// True for an error a worker reports about a PS it could not reach
// ("ps <address>: ...", RemotePsClient).
bool IsPsError(const absl::Status& s);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CLOSURE_DISPATCH_H_
