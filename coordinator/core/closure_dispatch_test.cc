#include "coordinator/core/closure_dispatch.h"

#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
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
  absl::Status RunClosure(const RunClosureRequest& request, RunClosureResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++runs[request.closure_id()];
    auto& script = script_[request.closure_id()];
    if (!script.empty()) {
      absl::Status s = script.front();
      script.erase(script.begin());
      return s;
    }
    response->set_steps(request.closure_id());  // lets the test match results to closures
    return absl::OkStatus();
  }
  absl::Status RunClosures(const RunClosuresRequest& request,
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
    return WorkerClient::RunClosures(request, response);
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

}  // namespace
}  // namespace pscluster
