// Adapter test: JobWatch against a fake Coordinator service on 127.0.0.1,
// killed and started again at the same port as psctl local's supervisor does.
#include "client/job_watch.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

JobStatusProto MakeStatus(JobState state, int steps) {
  JobStatusProto s;
  s.set_job_id("job-1");
  s.set_state(state);
  s.set_steps(steps);
  return s;
}

// Streams `statuses`; then, unless the last is final, holds the stream open
// until the server shuts down (as a coordinator that gets killed mid-job).
class FakeCoordinator final : public Coordinator::Service {
 public:
  FakeCoordinator(std::vector<JobStatusProto> statuses, bool knows_job)
      : statuses_(std::move(statuses)), knows_job_(knows_job) {}

  grpc::Status GetJob(grpc::ServerContext*, const GetJobRequest* request,
                      JobStatusProto* response) override {
    if (!knows_job_) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    *response = statuses_.front();
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* request,
                        grpc::ServerWriter<JobStatusProto>* writer) override {
    if (!knows_job_) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->job_id());
    }
    for (const JobStatusProto& s : statuses_) writer->Write(s);
    if (IsFinalState(statuses_.back().state())) return grpc::Status::OK;
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(10));
    return grpc::Status::CANCELLED;
  }

 private:
  const std::vector<JobStatusProto> statuses_;
  const bool knows_job_;
};

// A server for `service` on 127.0.0.1:`port` (0: any); sets *port.
std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  const int requested = *port;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(requested),
                           grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (requested != 0 && *port != requested) return nullptr;
  return server;
}

void Kill(grpc::Server* server) { server->Shutdown(std::chrono::system_clock::now()); }

// Collects what the watch reports.
struct Seen {
  absl::Mutex mu;
  std::vector<JobStatusProto> statuses ABSL_GUARDED_BY(mu);
  std::vector<std::string> notices ABSL_GUARDED_BY(mu);

  JobWatchOptions Options(absl::Duration reconnect_timeout) {
    JobWatchOptions o;
    o.on_status = [this](const JobStatusProto& s) {
      absl::MutexLock lock(&mu);
      statuses.push_back(s);
    };
    o.on_notice = [this](const std::string& n) {
      absl::MutexLock lock(&mu);
      notices.push_back(n);
    };
    o.reconnect_timeout = reconnect_timeout;
    return o;
  }
  bool WaitForStatuses(size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return statuses.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
};

class JobWatchTest : public ::testing::Test {
 protected:
  void StartFirst() {
    server_ = Serve(&first_, &port_);
    ASSERT_NE(server_, nullptr);
    stub_ = Coordinator::NewStub(MakeChannel("127.0.0.1:" + std::to_string(port_)));
  }

  FakeCoordinator first_{{MakeStatus(RUNNING, 1)}, /*knows_job=*/true};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Coordinator::Stub> stub_;
  Seen seen_;
};

TEST_F(JobWatchTest, FollowsTheJobAcrossACoordinatorRestart) {
  StartFirst();
  JobWatch watch(stub_.get(), "job-1", seen_.Options(absl::Seconds(30)));
  ASSERT_TRUE(seen_.WaitForStatuses(1));
  Kill(server_.get());
  server_.reset();
  // The coordinator is away: the watch waits for it instead of ending.
  EXPECT_FALSE(watch.WaitFor(absl::Milliseconds(700)));

  FakeCoordinator second({MakeStatus(RUNNING, 2), MakeStatus(SUCCEEDED, 3)}, /*knows_job=*/true);
  int port = port_;
  std::unique_ptr<grpc::Server> restarted = Serve(&second, &port);
  ASSERT_NE(restarted, nullptr) << "port " << port_ << " could not be bound again";
  ASSERT_TRUE(watch.WaitFor(absl::Seconds(20)));
  EXPECT_TRUE(watch.stream_status().ok()) << watch.stream_status();
  ASSERT_TRUE(watch.last().has_value());
  EXPECT_EQ(watch.last()->state(), SUCCEEDED);
  EXPECT_EQ(watch.last()->steps(), 3);
  absl::MutexLock lock(&seen_.mu);
  ASSERT_EQ(seen_.notices.size(), 2u);
  EXPECT_THAT(seen_.notices[0], HasSubstr("lost the job stream"));
  EXPECT_THAT(seen_.notices[1], HasSubstr("watching job job-1"));
  restarted->Shutdown();
}

TEST_F(JobWatchTest, ARestartedCoordinatorThatForgotTheJobEndsTheWatch) {
  StartFirst();
  JobWatch watch(stub_.get(), "job-1", seen_.Options(absl::Seconds(30)));
  ASSERT_TRUE(seen_.WaitForStatuses(1));
  Kill(server_.get());
  server_.reset();
  FakeCoordinator amnesiac({MakeStatus(RUNNING, 0)}, /*knows_job=*/false);
  int port = port_;
  std::unique_ptr<grpc::Server> restarted = Serve(&amnesiac, &port);
  ASSERT_NE(restarted, nullptr);
  ASSERT_TRUE(watch.WaitFor(absl::Seconds(20)));
  EXPECT_EQ(watch.stream_status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(watch.stream_status().message()),
              HasSubstr("restarted coordinator does not know job job-1"));
  restarted->Shutdown();
}

TEST_F(JobWatchTest, GivesUpWhenTheCoordinatorStaysAway) {
  StartFirst();
  JobWatch watch(stub_.get(), "job-1", seen_.Options(absl::Seconds(1)));
  ASSERT_TRUE(seen_.WaitForStatuses(1));
  Kill(server_.get());
  server_.reset();
  ASSERT_TRUE(watch.WaitFor(absl::Seconds(10)));
  EXPECT_FALSE(watch.stream_status().ok());
  EXPECT_THAT(std::string(watch.stream_status().message()), HasSubstr("did not come back"));
}

TEST_F(JobWatchTest, WithoutReconnectTheFirstBreakEndsTheWatch) {
  StartFirst();
  JobWatch watch(stub_.get(), "job-1", seen_.Options(absl::ZeroDuration()));
  ASSERT_TRUE(seen_.WaitForStatuses(1));
  Kill(server_.get());
  server_.reset();
  ASSERT_TRUE(watch.WaitFor(absl::Seconds(10)));
  EXPECT_FALSE(watch.stream_status().ok());
  absl::MutexLock lock(&seen_.mu);
  EXPECT_TRUE(seen_.notices.empty());
}

TEST_F(JobWatchTest, CancelEndsTheWaitForTheCoordinator) {
  StartFirst();
  JobWatch watch(stub_.get(), "job-1", seen_.Options(absl::Seconds(60)));
  ASSERT_TRUE(seen_.WaitForStatuses(1));
  Kill(server_.get());
  server_.reset();
  EXPECT_FALSE(watch.WaitFor(absl::Milliseconds(500)));
  const absl::Time start = absl::Now();
  watch.Cancel();
  ASSERT_TRUE(watch.WaitFor(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(watch.stream_status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace pscluster
