// The dispatch loop: take closures from a ClosureQueue, run them on one
// worker and record each result, retrying failed closures with backoff.
// RunDispatchLoop does it blocking a thread; the Dispatcher (dispatcher.h)
// does the same steps (BeginCall, MakeClosureRequest, FinishCall, below) as
// state machines driven from a few threads, `closures_per_worker` of them
// per worker of a phase; bench/dispatch_bench drives both.
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
#include <vector>

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
  // Called on the dispatching thread (RunDispatchLoop's, or one of the
  // Dispatcher's executor threads: keep it short) for each closure that
  // succeeded, before the queue hears Done(). Must not block on the queue.
  std::function<void(const Closure&, const RunClosureResponse&)> on_success;
  // Called on the dispatching thread with the closure that failed for good and
  // the error the queue is failed with, before queue->Fail(). Null: none.
  std::function<void(const Closure&, const absl::Status&)> on_failure;
  // Called on the dispatching thread with a sentence on each closure failure
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
  // each call that succeeded. Not owned; shared by the phase's
  // takers. Null: no deadline of its own (the WorkerClient's longest).
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
// Fail(). Blocks its thread for each call: the Python API's
// ClusterCoordinator runs it on threads of its own; a phase uses the
// asynchronous Dispatcher (dispatcher.h), the same steps from a few threads
// for any number of workers. Not owned: `worker`, `queue`.
void RunDispatchLoop(WorkerClient* worker, ClosureQueue* queue, const DispatchOptions& options);

// The steps of one call, shared by RunDispatchLoop and the Dispatcher.

// While set, the worker gets no work (it stopped answering, health_watch.h).
bool WorkerHeld(const DispatchOptions& options);
// *counter, or 0 for null.
int64_t LoadCount(const std::atomic<int64_t>* counter);
// The request of closure `c` (its lease and signature with a job key).
RunClosureRequest MakeClosureRequest(const DispatchOptions& options, const Closure& c);
// The deadline of a call of `closures` closures (options.deadline's, or none).
absl::Duration CallTimeout(const DispatchOptions& options, int closures);
// One status and response per closure of a RunClosures call that returned
// `rpc` (its error is every closure's; a wrong count of results is INTERNAL).
void SplitResults(absl::Status rpc, RunClosuresResponse* response, size_t n,
                  std::vector<absl::Status>* status, std::vector<RunClosureResponse>* responses);

enum class CallStart {
  kGo,    // call the worker (roster->BeginCall was counted)
  kHeld,  // the worker is held: the closures went back, untried; wait
  kLeft,  // the worker is leaving: the closures went back, untried; end
};
// Before calling the worker with `batch` (taken from `queue`).
CallStart BeginCall(ClosureQueue* queue, const DispatchOptions& options,
                    std::vector<Closure>* batch);

// What a finished call leaves the taker to do.
struct CallOutcome {
  bool failed = false;       // a closure failed for good: the queue is stopped; end
  bool worker_left = false;  // the worker left the cluster: end
  bool retried = false;      // some closure went back: back off before taking more
  bool lost_job = false;     // the worker lost the job: send options.setup again
  int backoff_attempts = 1;  // ExponentialBackoff's attempts for the back-off
};
// After a call that BeginCall let go, with one status and response per
// closure of `batch` and `elapsed` the call's time: feeds the deadline, ends
// the roster's call, counts the answer, and finishes each closure (Done()
// after on_success, PutBack() for a retry or hand-back, Fail() for the first
// that failed for good); sets *worker_down for a worker that answered
// UNAVAILABLE. `losses_before`: *worker_losses before the call.
CallOutcome FinishCall(WorkerClient* worker, ClosureQueue* queue, const DispatchOptions& options,
                       std::vector<Closure>* batch, const std::vector<absl::Status>& status,
                       std::vector<RunClosureResponse>* responses, int64_t losses_before,
                       absl::Duration elapsed);

// Errors after which the same closure may succeed on a (possibly other) worker.
bool RetryableClosureError(const absl::Status& s);

// True for an error a worker reports about a PS it could not reach
// ("ps <address>: ...", RemotePsClient).
bool IsPsError(const absl::Status& s);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CLOSURE_DISPATCH_H_
