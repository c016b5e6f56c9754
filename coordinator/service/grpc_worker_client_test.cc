#include "coordinator/service/grpc_worker_client.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

// A worker whose RunClosure never finishes on its own (a hung process): it
// returns once the client cancels or its deadline passes.
class StuckWorker final : public Worker::Service {
 public:
  grpc::Status RunClosure(grpc::ServerContext* ctx, const RunClosureRequest*,
                          RunClosureResponse*) override {
    started_.Notify();
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  absl::Notification started_;
};

class GrpcWorkerClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = StartServer(ServerOptions(), {&service_}, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    GrpcWorkerClientOptions options;
    options.closure_timeout = std::chrono::seconds(30);
    client_ =
        std::make_unique<GrpcWorkerClient>(absl::StrCat("127.0.0.1:", server_->port()), options);
  }
  void TearDown() override { server_->Shutdown(); }

  StuckWorker service_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<GrpcWorkerClient> client_;
};

TEST_F(GrpcWorkerClientTest, CancelCallsEndsACallInFlight) {
  absl::Status status;
  const absl::Time start = absl::Now();
  std::thread call([&] {
    RunClosureResponse response;
    status = client_->RunClosure(RunClosureRequest(), absl::Seconds(30), &response);
  });
  service_.started_.WaitForNotification();
  client_->CancelCalls();
  call.join();
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(GrpcWorkerClientTest, RunClosureHonoursItsTimeout) {
  RunClosureResponse response;
  const absl::Time start = absl::Now();
  const absl::Status s =
      client_->RunClosure(RunClosureRequest(), absl::Milliseconds(300), &response);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(GrpcWorkerClientTest, CancelCallsWithNothingInFlightIsHarmless) {
  client_->CancelCalls();
  RunClosureResponse response;
  const absl::Status s =
      client_->RunClosure(RunClosureRequest(), absl::Milliseconds(200), &response);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;  // not cancelled by the earlier call
}

}  // namespace
}  // namespace pscluster
