#include "coordinator/core/closure_dispatch.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/control_auth.h"
#include "common/update_lease.h"

namespace pscluster {
namespace {

const char* ModeName(ClosureMode mode) {
  switch (mode) {
    case TRAIN:
      return "training";
    case EVAL:
      return "eval";
    case PREDICT:
      return "predict";
    case FUNCTION:
      return "function";
    default:
      return "no-op";
  }
}

}  // namespace

RunClosureRequest MakeClosureRequest(const DispatchOptions& options, const Closure& c) {
  RunClosureRequest request;
  request.set_job_id(options.job_id);
  request.set_closure_id(c.id);
  request.set_mode(options.mode);
  *request.mutable_split() = c.split;
  if (c.replica >= 0) request.set_replica(c.replica);
  if (options.round != nullptr) request.set_round(options.round->load());
  if (c.call != nullptr) {
    request.set_function(c.call->name);
    request.set_function_args(c.call->args);
  }
  if (!options.job_key.empty()) {
    // An eval closure's lease covers no steps: it lets the worker pull, not push.
    int64_t steps = options.mode == TRAIN && options.batch > 0
                        ? (c.split.end() - c.split.begin() + options.batch - 1) / options.batch
                        : 0;
    if (options.mode == FUNCTION) steps = options.function_lease_steps;
    request.set_lease_steps(steps);
    request.set_lease(MakeLease(options.job_key, options.job_id, c.id, steps));
    // The worker takes the closure only from the job's coordinator.
    SignRequest(DeriveWorkerKey(options.job_key), "RunClosure", &request);
  }
  return request;
}

namespace {

bool IsSet(const std::atomic<bool>* flag) { return flag != nullptr && *flag; }

}  // namespace

bool WorkerHeld(const DispatchOptions& options) {
  return IsSet(options.worker_down) && !IsSet(options.health_stopped);
}

int64_t LoadCount(const std::atomic<int64_t>* counter) {
  return counter != nullptr ? counter->load() : 0;
}

namespace {

// Runs `batch` on `worker`, blocking: one RunClosure for a single closure,
// else one RunClosures, under options.deadline. Fills one status and response
// per closure.
void RunBatch(WorkerClient* worker, const DispatchOptions& options,
              const std::vector<Closure>& batch, std::vector<absl::Status>* status,
              std::vector<RunClosureResponse>* responses) {
  const int n = static_cast<int>(batch.size());
  const absl::Duration timeout = CallTimeout(options, n);
  if (n == 1) {
    status->assign(1, absl::OkStatus());
    responses->assign(1, RunClosureResponse());
    (*status)[0] =
        worker->RunClosure(MakeClosureRequest(options, batch[0]), timeout, &(*responses)[0]);
    return;
  }
  RunClosuresRequest request;
  for (const Closure& c : batch) *request.add_closures() = MakeClosureRequest(options, c);
  RunClosuresResponse response;
  const absl::Status s = worker->RunClosures(request, timeout, &response);
  SplitResults(s, &response, batch.size(), status, responses);
}

}  // namespace

bool RetryableClosureError(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsAborted(s) ||
         absl::IsFailedPrecondition(s) || absl::IsCancelled(s);
}

bool IsPsError(const absl::Status& s) { return absl::StartsWith(s.message(), "ps "); }

absl::Duration CallTimeout(const DispatchOptions& options, int closures) {
  return options.deadline != nullptr ? options.deadline->For(closures) : absl::InfiniteDuration();
}

void SplitResults(absl::Status s, RunClosuresResponse* response, size_t n,
                  std::vector<absl::Status>* status, std::vector<RunClosureResponse>* responses) {
  status->assign(n, absl::OkStatus());
  responses->assign(n, RunClosureResponse());
  if (s.ok() && response->results_size() != static_cast<int>(n)) {
    s = absl::InternalError(absl::StrCat("worker answered ", response->results_size(),
                                         " results for ", n, " closures"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!s.ok()) {
      (*status)[i] = s;  // the round trip failed: every closure did
      continue;
    }
    ClosureResult* r = response->mutable_results(static_cast<int>(i));
    (*status)[i] = absl::Status(static_cast<absl::StatusCode>(r->code()), r->message());
    (*responses)[i] = std::move(*r->mutable_response());
  }
}

void RunDispatchLoop(WorkerClient* worker, ClosureQueue* queue, const DispatchOptions& options) {
  const int per_rpc = std::max(options.closures_per_rpc, 1);
  std::vector<absl::Status> status;
  std::vector<RunClosureResponse> responses;
  while (true) {
    while (WorkerHeld(options)) {
      absl::SleepFor(absl::Milliseconds(50));
      if (!queue->WaitFor(absl::ZeroDuration())) continue;
      return;  // the phase ended meanwhile
    }
    std::vector<Closure> batch = queue->GetUpTo(per_rpc, options.worker_index);
    if (batch.empty()) return;
    const CallStart begin = BeginCall(queue, options, &batch);
    if (begin == CallStart::kLeft) return;
    if (begin == CallStart::kHeld) continue;
    const int64_t losses_before = LoadCount(options.worker_losses);
    const absl::Time start = absl::Now();
    RunBatch(worker, options, batch, &status, &responses);
    const CallOutcome out = FinishCall(worker, queue, options, &batch, status, &responses,
                                       losses_before, absl::Now() - start);
    if (out.failed || out.worker_left) return;
    if (!out.retried) continue;
    // Back off before this worker takes more work, so healthy workers pick
    // the closures up first.
    absl::SleepFor(ExponentialBackoff{options.retry_backoff, 6}.Before(out.backoff_attempts));
    if (out.lost_job && options.setup != nullptr) {
      // The worker lost the job (it restarted): set it up again.
      SetupJobResponse ignored;
      worker->SetupJob(*options.setup, &ignored).IgnoreError();
    }
  }
}

CallStart BeginCall(ClosureQueue* queue, const DispatchOptions& options,
                    std::vector<Closure>* batch) {
  if (WorkerHeld(options)) {
    // It stopped answering while this taker waited for work: the closures
    // go to another worker, untried.
    for (Closure& c : *batch) queue->PutBack(std::move(c));
    batch->clear();
    return CallStart::kHeld;
  }
  WorkerRoster* const roster = options.roster;
  if (roster != nullptr && !roster->BeginCall(options.roster_index)) {
    // The worker is leaving the cluster: its closures go to others, untried.
    for (Closure& c : *batch) queue->PutBack(std::move(c));
    batch->clear();
    return CallStart::kLeft;
  }
  return CallStart::kGo;
}

CallOutcome FinishCall(WorkerClient* worker, ClosureQueue* queue, const DispatchOptions& options,
                       std::vector<Closure>* closures, const std::vector<absl::Status>& status,
                       std::vector<RunClosureResponse>* responses, int64_t losses_before,
                       absl::Duration elapsed) {
  std::vector<Closure>& batch = *closures;
  const bool all_ok =
      std::all_of(status.begin(), status.end(), [](const absl::Status& s) { return s.ok(); });
  // Every closure succeeded: the call says how long closures take.
  if (options.deadline != nullptr && all_ok) {
    options.deadline->Observe(elapsed, static_cast<int>(batch.size()));
  }
  WorkerRoster* const roster = options.roster;
  if (roster != nullptr) roster->EndCall(options.roster_index);
  if (options.worker_answers != nullptr &&
      std::any_of(status.begin(), status.end(), [](const absl::Status& s) { return s.ok(); })) {
    options.worker_answers->fetch_add(1, std::memory_order_relaxed);  // a sign of life
  }
  // Counted up by the health loop before it cancelled the call.
  const bool worker_lost = LoadCount(options.worker_losses) != losses_before;
  // It left the cluster during the call (its leave wait ran out): what
  // failed is handed back, as a preemption, not a failure.
  const bool worker_left = roster != nullptr && !roster->active(options.roster_index);

  bool failed = false;   // a closure failed for good: the queue is stopped
  bool retried = false;  // some closure goes back to the queue
  bool worker_unavailable = false;
  bool lost_job = false;
  int backoff_attempts = 1;
  for (size_t i = 0; i < batch.size(); ++i) {
    Closure& c = batch[i];
    const absl::Status& s = status[i];
    if (s.ok()) {
      if (options.on_success) options.on_success(c, (*responses)[i]);
      queue->Done(c);
      continue;
    }
    // A PS outage is not the closure's fault: it is retried without
    // counting (the coordinator pauses dispatch and recovers the PS).
    const bool ps_lost = options.on_ps_lost && IsPsError(s) && absl::IsNotFound(s);
    if (ps_lost) options.on_ps_lost();
    const bool ps_outage = ps_lost || (options.ps_failed && options.ps_failed()) ||
                           (RetryableClosureError(s) && IsPsError(s));
    const std::string what =
        c.call != nullptr
            ? absl::StrCat("function closure ", c.id, " ('", c.call->name, "')")
            : absl::StrCat(
                  ModeName(options.mode), " closure ", c.id,
                  c.replica >= 0 ? absl::StrCat(" replica ", c.replica) : std::string(), " (epoch ",
                  c.split.epoch() + 1,
                  c.split.path().empty()
                      ? absl::StrCat(", examples [", c.split.begin(), ", ", c.split.end(), ")")
                      : absl::StrCat(", records [", c.split.begin(), ", ", c.split.end(), ") of ",
                                     c.split.path()),
                  ")");
    if (worker_left) {
      spdlog::info(
          "job {}: {} was in flight on worker {}, which left the cluster ({}); "
          "handing it back",
          options.job_id, what, worker->address(), s.ToString());
      queue->PutBack(c);
      continue;
    }
    if (worker_lost) {
      // Cancelled because the worker was declared lost meanwhile: not the
      // closure's fault, and not counted.
      const std::string retry =
          absl::StrCat(what, " was in flight on worker ", worker->address(), ", declared lost (",
                       s.ToString(), "); re-dispatching it");
      if (options.on_retry) {
        options.on_retry(retry);
      } else {
        spdlog::warn("job {}: {}", options.job_id, retry);
      }
      queue->PutBack(c);
      continue;
    }
    if (!ps_outage) ++c.attempts;
    if ((!RetryableClosureError(s) && !ps_lost) || c.attempts >= options.max_attempts) {
      if (!failed) {
        const absl::Status error(s.code(), absl::StrCat(what, " failed after ", c.attempts,
                                                        " attempt(s), last on worker ",
                                                        worker->address(), ": ", s.message()));
        if (options.on_failure) options.on_failure(c, error);
        queue->Fail(error);
        failed = true;
      } else {
        queue->PutBack(c);  // the queue is stopped: only accounts for it
      }
      continue;
    }
    const std::string retry =
        absl::StrCat(what, " failed on worker ", worker->address(), " (attempt ", c.attempts,
                     "): ", s.ToString(), "; retrying");
    if (options.on_retry) {
      options.on_retry(retry);
    } else {
      spdlog::warn("job {}: {}", options.job_id, retry);
    }
    queue->PutBack(c);
    retried = true;
    backoff_attempts = std::max(backoff_attempts, c.attempts);
    if (absl::IsUnavailable(s) && !IsPsError(s)) worker_unavailable = true;
    if (absl::IsFailedPrecondition(s)) lost_job = true;
  }
  CallOutcome out;
  out.failed = failed;
  out.worker_left = worker_left;
  out.retried = retried;
  out.lost_job = lost_job;
  out.backoff_attempts = backoff_attempts;
  // A worker that answered UNAVAILABLE itself is held until it answers
  // health checks again.
  if (!failed && !worker_left && retried && worker_unavailable && options.worker_down != nullptr) {
    *options.worker_down = true;
  }
  return out;
}

}  // namespace pscluster
