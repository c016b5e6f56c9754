#include "coordinator/core/closure_dispatch.h"

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/update_lease.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A worker that counts round trips and answers each closure with a status
// scripted per closure id (OK once the script runs out).
class ScriptedWorker : public WorkerClient {
 public:
  std::string address() const override { return "scripted"; }
  absl::Status SetupJob(const SetupJobRequest&, SetupJobResponse*) override {
    absl::MutexLock lock(&mu_);
    ++setups;
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration timeout,
                          RunClosureResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++runs[request.closure_id()];
    timeouts.push_back(timeout);
    requests.push_back(request);
    auto& script = script_[request.closure_id()];
    if (!script.empty()) {
      absl::Status s = script.front();
      script.erase(script.begin());
      return s;
    }
    response->set_steps(request.closure_id());  // lets the test match results to closures
    return absl::OkStatus();
  }
  absl::Status RunClosures(const RunClosuresRequest& request, absl::Duration timeout,
                           RunClosuresResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      batch_sizes.push_back(request.closures_size());
      if (!rpc_failures.empty()) {
        absl::Status s = rpc_failures.front();
        rpc_failures.erase(rpc_failures.begin());
        return s;
      }
    }
    return WorkerClient::RunClosures(request, timeout, response);
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }

  void Script(int64_t id, std::vector<absl::Status> statuses) {
    absl::MutexLock lock(&mu_);
    script_[id] = std::move(statuses);
  }

  absl::Mutex mu_;
  std::map<int64_t, std::vector<absl::Status>> script_;
  std::map<int64_t, int> runs;
  std::vector<int> batch_sizes;
  std::vector<absl::Duration> timeouts;  // of each RunClosure
  std::vector<RunClosureRequest> requests;  // of each RunClosure
  std::vector<absl::Status> rpc_failures;
  int setups = 0;
};

struct Recorded {
  std::map<int64_t, int> attempts;  // closure id -> failed runs before it succeeded
  int wrong_response = 0;
};

DispatchOptions Options(int per_rpc, Recorded* recorded) {
  DispatchOptions d;
  d.job_id = "j";
  d.mode = NOOP;
  d.closures_per_rpc = per_rpc;
  d.max_attempts = 3;
  d.retry_backoff = absl::Milliseconds(1);
  d.on_success = [recorded](const Closure& c, const RunClosureResponse& r) {
    recorded->attempts[c.id] = c.attempts;
    if (r.steps() != c.id) ++recorded->wrong_response;
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

TEST(ClosureDispatchTest, SendsClosuresInBatchesOfClosuresPerRpc) {
  ScriptedWorker worker;
  ClosureQueue queue;
  Fill(&queue, 10);
  Recorded recorded;
  RunDispatchLoop(&worker, &queue, Options(4, &recorded));
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_THAT(worker.batch_sizes, ElementsAre(4, 4, 2));
  EXPECT_EQ(recorded.attempts.size(), 10u);
  EXPECT_EQ(recorded.wrong_response, 0);  // each result went to its own closure
}

TEST(ClosureDispatchTest, OneClosurePerRpcUsesRunClosure) {
  ScriptedWorker worker;
  ClosureQueue queue;
  Fill(&queue, 3);
  Recorded recorded;
  RunDispatchLoop(&worker, &queue, Options(1, &recorded));
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_TRUE(worker.batch_sizes.empty());
  EXPECT_EQ(recorded.attempts.size(), 3u);
}

// Each call the worker answered is counted for the health loop (a sign of
// life instead of a health check); a call it did not answer is not.
TEST(ClosureDispatchTest, CountsTheCallsTheWorkerAnswered) {
  ScriptedWorker worker;
  worker.Script(2, {absl::UnavailableError("connection refused")});
  ClosureQueue queue;
  Fill(&queue, 3);
  Recorded recorded;
  std::atomic<int64_t> answers{0};
  DispatchOptions d = Options(1, &recorded);
  d.worker_answers = &answers;
  RunDispatchLoop(&worker, &queue, d);
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(worker.requests.size(), 4u);
  EXPECT_EQ(answers.load(), 3);
}

// A failed closure inside a batch is retried alone; its batch-mates are not
// run again.
TEST(ClosureDispatchTest, RetriesOnlyTheFailedClosureOfABatch) {
  ScriptedWorker worker;
  worker.Script(3, {absl::UnavailableError("worker hiccup")});
  // A lost job is retried too, after the job is set up again.
  worker.Script(5, {absl::FailedPreconditionError("job 'j' is not set up on this worker")});
  ClosureQueue queue;
  Fill(&queue, 6);
  Recorded recorded;
  SetupJobRequest setup;
  DispatchOptions d = Options(3, &recorded);
  d.setup = &setup;
  RunDispatchLoop(&worker, &queue, d);
  EXPECT_TRUE(queue.Wait().ok());
  for (int64_t id = 1; id <= 6; ++id) {
    EXPECT_EQ(worker.runs[id], id == 3 || id == 5 ? 2 : 1) << "closure " << id;
    EXPECT_EQ(recorded.attempts[id], id == 3 || id == 5 ? 1 : 0) << "closure " << id;
  }
  EXPECT_EQ(worker.setups, 1);
}

// A failed round trip fails every closure in it; each is retried and counts
// the attempt.
TEST(ClosureDispatchTest, AFailedRoundTripIsEveryClosuresFailure) {
  ScriptedWorker worker;
  worker.rpc_failures = {absl::DeadlineExceededError("slow")};
  ClosureQueue queue;
  Fill(&queue, 2);
  Recorded recorded;
  RunDispatchLoop(&worker, &queue, Options(2, &recorded));
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_THAT(worker.batch_sizes, ElementsAre(2, 2));
  EXPECT_EQ(recorded.attempts[1], 1);
  EXPECT_EQ(recorded.attempts[2], 1);
}

// A closure that fails for good stops the queue with its error, and the
// loop returns without leaving its batch-mates in flight (Wait() returns).
TEST(ClosureDispatchTest, AFatalErrorInABatchFailsTheQueueNamingTheClosure) {
  ScriptedWorker worker;
  worker.Script(2, {absl::InvalidArgumentError("split out of range")});
  worker.Script(3, {absl::InvalidArgumentError("also bad")});
  ClosureQueue queue;
  Fill(&queue, 8);
  Recorded recorded;
  RunDispatchLoop(&worker, &queue, Options(4, &recorded));
  const absl::Status s = queue.Wait();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("closure 2 "));
  EXPECT_THAT(s.message(), HasSubstr("split out of range"));
  EXPECT_THAT(worker.batch_sizes, ElementsAre(4));  // nothing dispatched after it
  EXPECT_EQ(recorded.attempts.count(1), 1u);        // batch-mates that succeeded are recorded
  EXPECT_EQ(recorded.attempts.count(4), 1u);
}

// ClusterCoordinator's closures: each request names the function and its
// bytes under a lease of function_lease_steps; one that fails for good is
// reported to on_failure before the queue fails.
TEST(ClosureDispatchTest, FunctionClosuresCarryTheirCallAndLease) {
  ScriptedWorker worker;
  worker.Script(2, {absl::NotFoundError("no function 'f2'")});
  ClosureQueue queue;
  for (int64_t id = 1; id <= 2; ++id) {
    Closure c;
    c.id = id;
    c.mode = FUNCTION;
    c.call = std::make_shared<FunctionCall>(FunctionCall{"f" + std::to_string(id), "bytes"});
    queue.Put(c);
  }
  Recorded recorded;
  DispatchOptions d = Options(1, &recorded);
  d.mode = FUNCTION;
  d.job_key = std::string(kJobKeyBytes, 'k');
  d.function_lease_steps = 7;
  std::vector<std::pair<int64_t, std::string>> failed;
  d.on_failure = [&failed](const Closure& c, const absl::Status& s) {
    failed.emplace_back(c.id, std::string(s.message()));
  };
  RunDispatchLoop(&worker, &queue, d);
  EXPECT_TRUE(absl::IsNotFound(queue.Wait()));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].first, 2);
  EXPECT_THAT(failed[0].second, HasSubstr("function closure 2 ('f2') failed after 1 attempt(s)"));
  ASSERT_EQ(worker.requests.size(), 2u);
  const RunClosureRequest& first = worker.requests[0];
  EXPECT_EQ(first.mode(), FUNCTION);
  EXPECT_EQ(first.function(), "f1");
  EXPECT_EQ(first.function_args(), "bytes");
  EXPECT_EQ(first.lease_steps(), 7);
  EXPECT_EQ(first.lease(), MakeLease(d.job_key, "j", 1, 7));
}

TEST(ClosureDispatchTest, GivesUpAfterMaxAttempts) {
  ScriptedWorker worker;
  const absl::Status down = absl::UnavailableError("down");
  worker.Script(1, {down, down, down});
  ClosureQueue queue;
  Fill(&queue, 1);
  Recorded recorded;
  RunDispatchLoop(&worker, &queue, Options(4, &recorded));
  const absl::Status s = queue.Wait();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("failed after 3 attempt(s), last on worker scripted"));
  EXPECT_EQ(worker.runs[1], 3);
}

// Each call runs under the job's closure deadline: the cap before any
// closure finished, then a multiple of the longest one (here the floor).
TEST(ClosureDispatchTest, CallsRunUnderTheClosureDeadline) {
  ScriptedWorker worker;
  ClosureQueue queue;
  Fill(&queue, 3);
  Recorded recorded;
  ClosureDeadlineOptions o;
  o.floor = absl::Seconds(7);
  o.cap = absl::Seconds(99);
  ClosureDeadline deadline(o);
  DispatchOptions d = Options(1, &recorded);
  d.deadline = &deadline;
  RunDispatchLoop(&worker, &queue, d);
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_THAT(worker.timeouts, ElementsAre(absl::Seconds(99), absl::Seconds(7), absl::Seconds(7)));
  EXPECT_GT(deadline.longest(), absl::ZeroDuration());
}

// A hung worker (a SIGSTOPped process): RunClosure blocks until the
// coordinator cancels its calls, then answers CANCELLED.
class HungWorker : public WorkerClient {
 public:
  std::string address() const override { return "hung"; }
  absl::Status SetupJob(const SetupJobRequest&, SetupJobResponse*) override {
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest&, absl::Duration,
                          RunClosureResponse*) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    const int cancels = cancels_;
    auto cancelled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancels_ > cancels; };
    mu_.Await(absl::Condition(&cancelled));
    return absl::CancelledError("cancelled by the client");
  }
  void CancelCalls() override {
    absl::MutexLock lock(&mu_);
    ++cancels_;
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }
  void AwaitCall() {
    absl::MutexLock lock(&mu_);
    auto called = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ > 0; };
    mu_.Await(absl::Condition(&called));
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int cancels_ ABSL_GUARDED_BY(mu_) = 0;
};

// What the health loop does to a worker that hung: it is marked down, its
// loss is counted, then its calls are cancelled. The closure it held runs on
// the other worker and its attempt is not counted (max_attempts 1 would
// fail it otherwise); the hung worker gets nothing more.
TEST(ClosureDispatchTest, AClosureOfALostWorkerGoesToAnotherUncounted) {
  HungWorker hung;
  ScriptedWorker healthy;
  ClosureQueue queue;
  Fill(&queue, 4);
  Recorded recorded;
  std::atomic<bool> hung_down{false}, healthy_down{false};
  std::atomic<int64_t> hung_losses{0}, healthy_losses{0};
  std::vector<std::string> retries;
  absl::Mutex retries_mu;
  auto options = [&](std::atomic<bool>* down, std::atomic<int64_t>* losses) {
    DispatchOptions d = Options(1, &recorded);
    d.max_attempts = 1;
    d.worker_down = down;
    d.worker_losses = losses;
    d.on_retry = [&](const std::string& what) {
      absl::MutexLock lock(&retries_mu);
      retries.push_back(what);
    };
    return d;
  };
  const DispatchOptions hung_options = options(&hung_down, &hung_losses);
  std::thread hung_thread([&] { RunDispatchLoop(&hung, &queue, hung_options); });
  hung.AwaitCall();  // the first closure is stuck on it
  const DispatchOptions healthy_options = options(&healthy_down, &healthy_losses);
  std::thread healthy_thread([&] { RunDispatchLoop(&healthy, &queue, healthy_options); });
  hung_down = true;
  ++hung_losses;
  hung.CancelCalls();
  hung_thread.join();
  healthy_thread.join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(hung.calls(), 1);
  EXPECT_EQ(healthy.runs.size(), 4u);  // the hung worker's closure too
  for (int64_t id = 1; id <= 4; ++id) EXPECT_EQ(recorded.attempts[id], 0) << "closure " << id;
  ASSERT_EQ(retries.size(), 1u);
  EXPECT_THAT(retries[0], HasSubstr("declared lost"));
}

}  // namespace
}  // namespace pscluster
