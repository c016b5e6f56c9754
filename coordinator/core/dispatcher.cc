#include "coordinator/core/dispatcher.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "common/backoff.h"

namespace pscluster {

// One state machine: at most one of its steps is pending at any time (a
// task, a timer, a call in flight, or a watch on the queue), so its state
// needs no lock. A watch and its recheck timer race: the armed ticket lets
// only the first one on. Each pending step holds the taker (shared_ptr): a
// recheck timer that lost the race may fire after its Dispatcher is gone,
// and touches nothing but the ticket.
class Dispatcher::Taker : public std::enable_shared_from_this<Taker> {
 public:
  Taker(Dispatcher* d, std::shared_ptr<Lane> lane, int64_t id)
      : d_(d), lane_(std::move(lane)), id_(id) {}

  // Looks at the queue: ends, takes and calls, or watches.
  void Step(bool woken) {
    const DispatchOptions& o = lane_->options;
    if (WorkerHeld(o)) {
      // A woken taker that will not take passes the wake on.
      if (woken) d_->queue_->PassWake();
      if (d_->queue_->WaitFor(absl::ZeroDuration())) return End();  // the phase ended
      d_->executor_->PostAfter(absl::Milliseconds(50),
                               [self = shared_from_this()] { self->Step(false); });
      return;
    }
    batch_.clear();
    const int64_t ticket = ++tickets_;
    armed_.store(ticket);
    absl::Duration recheck;
    std::shared_ptr<Taker> self = shared_from_this();
    DispatchExecutor* const executor = d_->executor_;  // read before a wake may end it all
    const ClosureQueue::Take take = d_->queue_->TakeOrWatch(
        std::max(o.closures_per_rpc, 1), o.worker_index, id_,
        [self, ticket] { self->Fire(ticket, /*woken=*/true); }, &batch_, &recheck);
    if (take == ClosureQueue::Take::kWatching) {
      // Nothing of this taker's may be touched from here: a wake may
      // already be running it.
      if (recheck != absl::InfiniteDuration()) {
        executor->PostAfter(recheck, [self, ticket] { self->Fire(ticket, /*woken=*/false); });
      }
      return;
    }
    armed_.store(0);
    if (take == ClosureQueue::Take::kEnded) return End();
    Call();
  }

 private:
  // A watch (woken) or its recheck timer went off.
  void Fire(int64_t ticket, bool woken) {
    int64_t expected = ticket;
    if (!armed_.compare_exchange_strong(expected, 0)) return;  // the other one went first
    if (woken) {
      d_->executor_->Post([self = shared_from_this()] { self->Step(true); });
    } else {
      d_->queue_->Unwatch(id_);  // on the executor already
      Step(false);
    }
  }

  void Call() {
    const DispatchOptions& o = lane_->options;
    const CallStart begin = BeginCall(d_->queue_, o, &batch_);
    if (begin == CallStart::kLeft) return End();
    if (begin == CallStart::kHeld) return Step(false);
    losses_before_ = LoadCount(o.worker_losses);
    start_ = absl::Now();
    const int n = static_cast<int>(batch_.size());
    const absl::Duration timeout = CallTimeout(o, n);
    std::shared_ptr<Taker> self = shared_from_this();
    if (n == 1) {
      lane_->worker->RunClosureAsync(MakeClosureRequest(o, batch_[0]), timeout,
                                     [self](absl::Status s, RunClosureResponse* r) {
                                       self->status_.assign(1, std::move(s));
                                       self->responses_.resize(1);
                                       self->responses_[0] = std::move(*r);
                                       self->d_->executor_->Post([self] { self->Finish(); });
                                     });
      return;
    }
    RunClosuresRequest request;
    for (const Closure& c : batch_) *request.add_closures() = MakeClosureRequest(o, c);
    lane_->worker->RunClosuresAsync(
        std::move(request), timeout, [self, n](absl::Status s, RunClosuresResponse* r) {
          SplitResults(std::move(s), r, static_cast<size_t>(n), &self->status_, &self->responses_);
          self->d_->executor_->Post([self] { self->Finish(); });
        });
  }

  void Finish() {
    const DispatchOptions& o = lane_->options;
    const CallOutcome out = FinishCall(lane_->worker, d_->queue_, o, &batch_, status_, &responses_,
                                       losses_before_, absl::Now() - start_);
    batch_.clear();
    responses_.clear();
    if (out.failed || out.worker_left) return End();
    if (!out.retried) return Step(false);
    // Back off before this worker takes more work, so healthy workers pick
    // the closures up first: a timer, no thread waits.
    const bool lost_job = out.lost_job && o.setup != nullptr;
    d_->executor_->PostAfter(ExponentialBackoff{o.retry_backoff, 6}.Before(out.backoff_attempts),
                             [self = shared_from_this(), lost_job] {
                               if (lost_job) return self->SetUpAgain();
                               self->Step(false);
                             });
  }

  // The worker lost the job (it restarted): sets it up again. Rare, and a
  // blocking call: on a thread of its own.
  void SetUpAgain() {
    d_->executor_->RunBlocking([self = shared_from_this()] {
      SetupJobResponse ignored;
      self->lane_->worker->SetupJob(*self->lane_->options.setup, &ignored).IgnoreError();
      self->d_->executor_->Post([self] { self->Step(false); });
    });
  }

  void End() {
    if (lane_->on_end) lane_->on_end();
    d_->Ended();  // the last touch of the Dispatcher: Join may return at once
  }

  Dispatcher* const d_;
  const std::shared_ptr<Lane> lane_;
  const int64_t id_;
  int64_t tickets_ = 0;
  std::atomic<int64_t> armed_{0};  // the ticket a watch or timer may fire; 0: none
  std::vector<Closure> batch_;
  std::vector<absl::Status> status_;
  std::vector<RunClosureResponse> responses_;
  int64_t losses_before_ = 0;
  absl::Time start_;
};

Dispatcher::~Dispatcher() { Join(); }

void Dispatcher::Start(WorkerClient* worker, DispatchOptions options, int takers,
                       std::function<void()> on_end, std::function<bool()> before) {
  auto lane = std::make_shared<Lane>(Lane{worker, std::move(options), std::move(on_end)});
  takers = std::max(takers, 1);
  if (!before) return StartTakers(lane, takers);
  {
    absl::MutexLock lock(&mu_);
    ++running_;  // the wait for `before` counts as a taker for Join
  }
  executor_->RunBlocking([this, lane, takers, before = std::move(before)] {
    if (before()) {
      StartTakers(lane, takers);
    } else if (lane->on_end) {
      for (int i = 0; i < takers; ++i) lane->on_end();
    }
    Ended();
  });
}

void Dispatcher::StartTakers(const std::shared_ptr<Lane>& lane, int takers) {
  std::vector<std::shared_ptr<Taker>> started;
  {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < takers; ++i) {
      started.push_back(std::make_shared<Taker>(this, lane, next_id_++));
    }
    running_ += takers;
  }
  for (auto& t : started) executor_->Post([t] { t->Step(false); });
}

void Dispatcher::Ended() {
  absl::MutexLock lock(&mu_);
  --running_;
}

void Dispatcher::Join() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; };
  mu_.Await(absl::Condition(&done));
}

int Dispatcher::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

}  // namespace pscluster
