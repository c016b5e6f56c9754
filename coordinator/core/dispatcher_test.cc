#include "coordinator/core/dispatcher.h"

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/core/closure_deadline.h"
#include "coordinator/core/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

// An asynchronous in-process worker with no thread of its own: it answers
// each call at once on the caller's thread (the executor's), or, when
// `hold` is set, keeps it until the test answers it (Answer) or cancels it
// (CancelCalls). Each closure's status is scripted per closure id (OK once
// the script runs out); a successful closure answers steps = its id.
class AsyncWorker : public WorkerClient {
 public:
  explicit AsyncWorker(std::string address) : address_(std::move(address)) {}
  std::string address() const override { return address_; }
  absl::Status SetupJob(const SetupJobRequest&, SetupJobResponse*) override {
    absl::MutexLock lock(&mu_);
    ++setups_;
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest&, absl::Duration, RunClosureResponse*) override {
    return absl::InternalError("the Dispatcher must not make blocking calls");
  }
  absl::Status RunClosures(const RunClosuresRequest&, absl::Duration,
                           RunClosuresResponse*) override {
    return absl::InternalError("the Dispatcher must not make blocking calls");
  }
  void RunClosureAsync(RunClosureRequest request, absl::Duration, RunClosureDone done) override {
    RunClosuresRequest one;
    *one.add_closures() = std::move(request);
    Start(
        std::move(one),
        [done = std::move(done)](absl::Status s, RunClosuresResponse* r) {
          RunClosureResponse response;
          if (s.ok()) {
            s = absl::Status(static_cast<absl::StatusCode>(r->results(0).code()),
                             r->results(0).message());
            response = r->results(0).response();
          }
          done(s, &response);
        },
        /*batched=*/false);
  }
  void RunClosuresAsync(RunClosuresRequest request, absl::Duration, RunClosuresDone done) override {
    Start(std::move(request), std::move(done), /*batched=*/true);
  }
  void CancelCalls() override {
    std::deque<Pending> cancelled;
    {
      absl::MutexLock lock(&mu_);
      cancelled.swap(pending_);
    }
    for (Pending& p : cancelled) {
      RunClosuresResponse r;
      p.done(absl::CancelledError("cancelled by the client"), &r);
    }
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }

  void Script(int64_t id, std::vector<absl::Status> statuses) {
    absl::MutexLock lock(&mu_);
    script_[id] = std::move(statuses);
  }
  void Hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  int pending() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(pending_.size());
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int setups() {
    absl::MutexLock lock(&mu_);
    return setups_;
  }
  std::vector<int> batch_sizes() {
    absl::MutexLock lock(&mu_);
    return batch_sizes_;
  }
  std::map<int64_t, int> runs() {
    absl::MutexLock lock(&mu_);
    return runs_;
  }

 private:
  struct Pending {
    RunClosuresRequest request;
    RunClosuresDone done;
  };
  void Start(RunClosuresRequest request, RunClosuresDone done, bool batched) {
    RunClosuresResponse response;
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      if (batched) batch_sizes_.push_back(request.closures_size());
      if (hold_) {
        pending_.push_back({std::move(request), std::move(done)});
        return;
      }
      for (const RunClosureRequest& c : request.closures()) {
        ++runs_[c.closure_id()];
        ClosureResult* result = response.add_results();
        auto& script = script_[c.closure_id()];
        if (!script.empty()) {
          result->set_code(static_cast<int32_t>(script.front().code()));
          result->set_message(std::string(script.front().message()));
          script.erase(script.begin());
          continue;
        }
        result->mutable_response()->set_steps(c.closure_id());
      }
    }
    done(absl::OkStatus(), &response);
  }

  const std::string address_;
  absl::Mutex mu_;
  std::map<int64_t, std::vector<absl::Status>> script_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int> runs_ ABSL_GUARDED_BY(mu_);
  std::vector<int> batch_sizes_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int setups_ ABSL_GUARDED_BY(mu_) = 0;
};

// What the success callbacks saw, thread-safe.
struct Recorded {
  absl::Mutex mu;
  std::map<int64_t, int> attempts;  // closure id -> failed runs before it succeeded
  std::map<int64_t, std::string> worker;
  int wrong_response = 0;
  std::vector<std::string> retries;
  size_t done() {
    absl::MutexLock lock(&mu);
    return attempts.size();
  }
};

DispatchOptions Options(int per_rpc, Recorded* recorded, const std::string& worker = "") {
  DispatchOptions d;
  d.job_id = "j";
  d.mode = NOOP;
  d.closures_per_rpc = per_rpc;
  d.max_attempts = 3;
  d.retry_backoff = absl::Milliseconds(1);
  d.on_success = [recorded, worker](const Closure& c, const RunClosureResponse& r) {
    absl::MutexLock lock(&recorded->mu);
    recorded->attempts[c.id] = c.attempts;
    recorded->worker[c.id] = worker;
    if (r.steps() != c.id) ++recorded->wrong_response;
  };
  d.on_retry = [recorded](const std::string& what) {
    absl::MutexLock lock(&recorded->mu);
    recorded->retries.push_back(what);
  };
  return d;
}

void Fill(ClosureQueue* queue, int n) {
  for (int64_t id = 1; id <= n; ++id) {
    Closure c;
    c.id = id;
    c.split_index = id;
    queue->Put(c);
  }
}

DispatchExecutor::Options TwoThreads() {
  DispatchExecutor::Options o;
  o.threads = 2;
  return o;
}

// 256 workers, two takers each, from the executor's two threads: every
// closure runs once and the takers end when the queue drains.
TEST(DispatcherTest, ManyWorkersFromTwoThreadsRunEveryClosureOnce) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  Fill(&queue, 2000);
  Recorded recorded;
  std::vector<std::unique_ptr<AsyncWorker>> workers;
  Dispatcher dispatcher(&queue, &executor);
  for (int w = 0; w < 256; ++w) {
    workers.push_back(std::make_unique<AsyncWorker>(absl::StrCat("w", w)));
    DispatchOptions d = Options(1, &recorded, workers.back()->address());
    d.worker_index = w;
    dispatcher.Start(workers.back().get(), d, 2);
  }
  dispatcher.Join();
  EXPECT_EQ(dispatcher.running(), 0);
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(executor.threads(), 2);
  EXPECT_EQ(recorded.done(), 2000u);
  EXPECT_EQ(recorded.wrong_response, 0);
  int calls = 0;
  for (auto& w : workers) {
    for (const auto& [id, runs] : w->runs()) EXPECT_EQ(runs, 1) << "closure " << id;
    calls += w->calls();
  }
  EXPECT_EQ(calls, 2000);
}

// closures_per_rpc: up to that many closures a call; each closure's result
// on its own (one failed closure of a batch is retried alone).
TEST(DispatcherTest, BatchesClosuresAndRetriesOneOfABatchAlone) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  Fill(&queue, 10);
  Recorded recorded;
  AsyncWorker worker("w");
  worker.Script(3, {absl::UnavailableError("ps 127.0.0.1:1: down")});
  Dispatcher dispatcher(&queue, &executor);
  dispatcher.Start(&worker, Options(4, &recorded), 1);
  dispatcher.Join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(recorded.done(), 10u);
  EXPECT_EQ(recorded.wrong_response, 0);
  // A PS outage is not counted as an attempt.
  EXPECT_EQ(recorded.attempts[3], 0);
  EXPECT_EQ(worker.runs()[3], 2);
  std::vector<int> sizes = worker.batch_sizes();
  ASSERT_FALSE(sizes.empty());
  EXPECT_EQ(sizes[0], 4);
  for (int s : sizes) EXPECT_LE(s, 4);
}

// The back-off after a failure is a timer on the executor's clock: the
// closure is not sent again until the clock passes it, and no thread sleeps.
TEST(DispatcherTest, RetryBackoffIsATimerOnTheInjectedClock) {
  FakeClock clock;
  DispatchExecutor::Options o = TwoThreads();
  o.now = [&] { return clock.Now(); };
  DispatchExecutor executor(o);
  ClosureQueue queue;
  Fill(&queue, 1);
  Recorded recorded;
  AsyncWorker worker("w");
  worker.Script(1, {absl::DeadlineExceededError("slow")});
  DispatchOptions d = Options(1, &recorded);
  d.retry_backoff = absl::Seconds(10);
  Dispatcher dispatcher(&queue, &executor);
  dispatcher.Start(&worker, d, 1);
  ASSERT_TRUE(WaitUntil([&] { return executor.pending_timers() == 1; }));
  EXPECT_EQ(worker.calls(), 1);
  clock.Advance(absl::Seconds(9));
  executor.Wake();
  // Still backing off (the queue holds the closure; nobody else takes it).
  absl::Notification looked;
  executor.Post([&] { looked.Notify(); });
  ASSERT_TRUE(looked.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(worker.calls(), 1);
  EXPECT_EQ(executor.pending_timers(), 1);
  clock.Advance(absl::Seconds(1));
  executor.Wake();
  dispatcher.Join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(worker.calls(), 2);
  EXPECT_EQ(recorded.attempts[1], 1);
  ASSERT_EQ(recorded.retries.size(), 1u);
  EXPECT_THAT(recorded.retries[0], HasSubstr("attempt 1"));
}

// A closure that fails for good fails the queue with a message naming it and
// the worker; every taker ends.
TEST(DispatcherTest, AClosureThatFailsForGoodFailsTheQueue) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  Fill(&queue, 20);
  Recorded recorded;
  AsyncWorker a("wa"), b("wb");
  a.Script(5, {absl::InvalidArgumentError("bad split")});
  b.Script(5, {absl::InvalidArgumentError("bad split")});
  Dispatcher dispatcher(&queue, &executor);
  dispatcher.Start(&a, Options(1, &recorded), 2);
  dispatcher.Start(&b, Options(1, &recorded), 2);
  dispatcher.Join();
  const absl::Status s = queue.Wait();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("closure 5"));
  EXPECT_THAT(s.message(), HasSubstr("bad split"));
  EXPECT_THAT(s.message(), HasSubstr("last on worker w"));
}

// A worker that lost the job (FAILED_PRECONDITION) gets SetupJob again
// after the back-off, then the closure runs.
TEST(DispatcherTest, AWorkerThatLostTheJobIsSetUpAgain) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  Fill(&queue, 3);
  Recorded recorded;
  AsyncWorker worker("w");
  worker.Script(2, {absl::FailedPreconditionError("no job j")});
  SetupJobRequest setup;
  setup.set_job_id("j");
  DispatchOptions d = Options(1, &recorded);
  d.setup = &setup;
  Dispatcher dispatcher(&queue, &executor);
  dispatcher.Start(&worker, d, 1);
  dispatcher.Join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(worker.setups(), 1);
  EXPECT_EQ(recorded.done(), 3u);
  EXPECT_EQ(recorded.attempts[2], 1);
}

// A worker held down gets nothing; the other runs everything, and the held
// worker's takers end with the queue.
TEST(DispatcherTest, AHeldWorkerGetsNoClosures) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  Fill(&queue, 30);
  Recorded recorded;
  AsyncWorker down("down"), up("up");
  std::atomic<bool> is_down{true}, not_down{false}, stopped{false};
  DispatchOptions dd = Options(1, &recorded, "down");
  dd.worker_down = &is_down;
  dd.health_stopped = &stopped;
  DispatchOptions du = Options(1, &recorded, "up");
  du.worker_down = &not_down;
  du.health_stopped = &stopped;
  Dispatcher dispatcher(&queue, &executor);
  dispatcher.Start(&down, dd, 2);
  dispatcher.Start(&up, du, 2);
  dispatcher.Join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(down.calls(), 0);
  EXPECT_EQ(up.calls(), 30);
}

// An open queue (a synchronous phase): takers watch it instead of blocking
// a thread, wake when closures are put, and end once it is closed.
TEST(DispatcherTest, TakersWatchAnOpenQueueAndEndWhenItCloses) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  queue.SetOpen(true);
  Recorded recorded;
  std::vector<std::unique_ptr<AsyncWorker>> workers;
  Dispatcher dispatcher(&queue, &executor);
  for (int w = 0; w < 8; ++w) {
    workers.push_back(std::make_unique<AsyncWorker>(absl::StrCat("w", w)));
    DispatchOptions d = Options(1, &recorded);
    d.worker_index = w;
    dispatcher.Start(workers.back().get(), d, 2);
  }
  ASSERT_TRUE(WaitUntil([&] { return queue.waiting_takers() == 16; }));
  for (int round = 0; round < 5; ++round) {
    // One replica per worker, each preferring its worker.
    for (int w = 0; w < 8; ++w) {
      Closure c;
      c.id = round * 8 + w + 1;
      c.replica = w;
      c.preferred_worker = w;
      queue.Put(c);
    }
    ASSERT_TRUE(queue.WaitUntilEmpty(absl::Seconds(20)));
  }
  EXPECT_EQ(recorded.done(), 40u);
  EXPECT_EQ(dispatcher.running(), 16);
  queue.SetOpen(false);
  dispatcher.Join();
  EXPECT_TRUE(queue.Wait().ok());
  // The preferred worker took each replica (it was watching).
  for (int w = 0; w < 8; ++w) EXPECT_EQ(workers[w]->calls(), 5) << "worker " << w;
}

// A paused queue hands out nothing; Resume wakes the watching takers.
TEST(DispatcherTest, PauseHoldsDispatchAndResumeWakesIt) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  queue.Pause();
  Fill(&queue, 6);
  Recorded recorded;
  AsyncWorker worker("w");
  Dispatcher dispatcher(&queue, &executor);
  dispatcher.Start(&worker, Options(1, &recorded), 2);
  ASSERT_TRUE(WaitUntil([&] { return queue.waiting_takers() == 2; }));
  EXPECT_EQ(worker.calls(), 0);
  queue.Resume();
  dispatcher.Join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(worker.calls(), 6);
}

// A worker declared lost: its calls in flight are cancelled and their
// closures go to another worker without counting an attempt.
TEST(DispatcherTest, AClosureOfALostWorkerGoesToAnotherUncounted) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  Fill(&queue, 4);
  Recorded recorded;
  AsyncWorker hung("hung"), healthy("healthy");
  hung.Hold(true);
  std::atomic<bool> hung_down{false}, healthy_down{false};
  std::atomic<int64_t> hung_losses{0}, healthy_losses{0};
  DispatchOptions dh = Options(1, &recorded, "hung");
  dh.max_attempts = 1;
  dh.worker_down = &hung_down;
  dh.worker_losses = &hung_losses;
  DispatchOptions dg = Options(1, &recorded, "healthy");
  dg.max_attempts = 1;
  dg.worker_down = &healthy_down;
  dg.worker_losses = &healthy_losses;
  Dispatcher dispatcher(&queue, &executor);
  dispatcher.Start(&hung, dh, 1);
  ASSERT_TRUE(WaitUntil([&] { return hung.pending() == 1; }));
  dispatcher.Start(&healthy, dg, 1);
  ASSERT_TRUE(WaitUntil([&] { return recorded.done() == 3; }));
  hung_down = true;  // what the health loop does: down, counted, cancelled
  ++hung_losses;
  hung.CancelCalls();
  dispatcher.Join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(hung.calls(), 1);
  EXPECT_EQ(healthy.calls(), 4);
  for (int64_t id = 1; id <= 4; ++id) {
    EXPECT_EQ(recorded.attempts[id], 0) << "closure " << id;
    EXPECT_EQ(recorded.worker[id], "healthy") << "closure " << id;
  }
  ASSERT_EQ(recorded.retries.size(), 1u);
  EXPECT_THAT(recorded.retries[0], HasSubstr("declared lost"));
}

// Each call's deadline comes from the ClosureDeadline and the times of the
// calls that succeeded feed it.
TEST(DispatcherTest, SuccessfulCallsFeedTheClosureDeadline) {
  DispatchExecutor executor(TwoThreads());
  ClosureQueue queue;
  Fill(&queue, 5);
  Recorded recorded;
  AsyncWorker worker("w");
  ClosureDeadline deadline;
  ASSERT_EQ(deadline.longest(), absl::ZeroDuration());
  DispatchOptions d = Options(1, &recorded);
  d.deadline = &deadline;
  Dispatcher dispatcher(&queue, &executor);
  dispatcher.Start(&worker, d, 1);
  dispatcher.Join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_GT(deadline.longest(), absl::ZeroDuration());
}

}  // namespace
}  // namespace pscluster
