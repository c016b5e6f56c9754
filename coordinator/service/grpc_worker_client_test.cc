#include "coordinator/service/grpc_worker_client.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/dispatch_executor.h"
#include "coordinator/core/dispatcher.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

// A worker whose RunClosure of closure 0 never finishes on its own (a hung
// process): it returns once the client cancels or its deadline passes. Other
// closures answer at once, steps = their id.
class StuckWorker final : public Worker::Service {
 public:
  grpc::Status RunClosure(grpc::ServerContext* ctx, const RunClosureRequest* request,
                          RunClosureResponse* response) override {
    if (request->closure_id() != 0) {
      response->set_steps(request->closure_id());
      return grpc::Status::OK;
    }
    if (!started_.HasBeenNotified()) started_.Notify();
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  grpc::Status RunClosures(grpc::ServerContext*, const RunClosuresRequest* request,
                           RunClosuresResponse* response) override {
    for (const RunClosureRequest& c : request->closures()) {
      ClosureResult* r = response->add_results();
      if (c.closure_id() == 7) {
        r->set_code(static_cast<int32_t>(absl::StatusCode::kAborted));
        r->set_message("closure 7 aborted");
        continue;
      }
      r->mutable_response()->set_steps(c.closure_id());
    }
    return grpc::Status::OK;
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

// The asynchronous forms (gRPC's callback API): `done` gets the answer.
TEST_F(GrpcWorkerClientTest, AsyncCallsAnswer) {
  RunClosureRequest request;
  request.set_closure_id(5);
  absl::Notification one;
  absl::Status one_status;
  int64_t one_steps = 0;
  client_->RunClosureAsync(request, absl::Seconds(30), [&](absl::Status s, RunClosureResponse* r) {
    one_status = s;
    one_steps = r->steps();
    one.Notify();
  });
  ASSERT_TRUE(one.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(one_status.ok()) << one_status;
  EXPECT_EQ(one_steps, 5);

  RunClosuresRequest batch;
  for (int64_t id : {6, 7, 8}) batch.add_closures()->set_closure_id(id);
  absl::Notification many;
  absl::Status many_status;
  RunClosuresResponse many_response;
  client_->RunClosuresAsync(batch, absl::Seconds(30), [&](absl::Status s, RunClosuresResponse* r) {
    many_status = s;
    many_response = std::move(*r);
    many.Notify();
  });
  ASSERT_TRUE(many.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(many_status.ok()) << many_status;
  ASSERT_EQ(many_response.results_size(), 3);
  EXPECT_EQ(many_response.results(0).response().steps(), 6);
  EXPECT_EQ(many_response.results(1).code(), static_cast<int32_t>(absl::StatusCode::kAborted));
  EXPECT_EQ(many_response.results(2).response().steps(), 8);
}

TEST_F(GrpcWorkerClientTest, CancelCallsEndsAnAsyncCallInFlight) {
  absl::Notification done;
  absl::Status status;
  client_->RunClosureAsync(RunClosureRequest(), absl::Seconds(30),
                           [&](absl::Status s, RunClosureResponse*) {
                             status = s;
                             done.Notify();
                           });
  service_.started_.WaitForNotification();
  client_->CancelCalls();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
}

TEST_F(GrpcWorkerClientTest, AnAsyncCallHonoursItsTimeout) {
  absl::Notification done;
  absl::Status status;
  client_->RunClosureAsync(RunClosureRequest(), absl::Milliseconds(300),
                           [&](absl::Status s, RunClosureResponse*) {
                             status = s;
                             done.Notify();
                           });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
}

// The Dispatcher over real gRPC clients: 32 workers' takers (one server
// behind them all) from two executor threads, closures one per call and in
// batches; the aborted closure of a batch is retried until it fails.
TEST_F(GrpcWorkerClientTest, TheDispatcherDrivesManyClientsFromTwoThreads) {
  std::vector<std::unique_ptr<GrpcWorkerClient>> clients;
  for (int w = 0; w < 32; ++w) {
    clients.push_back(std::make_unique<GrpcWorkerClient>(
        absl::StrCat("127.0.0.1:", server_->port()), GrpcWorkerClientOptions()));
  }
  DispatchExecutor::Options eo;
  eo.threads = 2;
  DispatchExecutor executor(eo);
  for (int per_rpc : {1, 4}) {
    ClosureQueue queue;
    for (int64_t id = 100; id < 600; ++id) {
      Closure c;
      c.id = id;
      queue.Put(c);
    }
    absl::Mutex mu;
    int64_t done = 0, wrong = 0;
    Dispatcher dispatcher(&queue, &executor);
    for (int w = 0; w < 32; ++w) {
      DispatchOptions d;
      d.job_id = "j";
      d.mode = NOOP;
      d.worker_index = w;
      d.closures_per_rpc = per_rpc;
      d.on_success = [&](const Closure& c, const RunClosureResponse& r) {
        absl::MutexLock lock(&mu);
        ++done;
        if (r.steps() != c.id) ++wrong;
      };
      dispatcher.Start(clients[w].get(), d, 2);
    }
    dispatcher.Join();
    EXPECT_TRUE(queue.Wait().ok()) << "per_rpc " << per_rpc;
    EXPECT_EQ(done, 500) << "per_rpc " << per_rpc;
    EXPECT_EQ(wrong, 0);
  }
}

}  // namespace
}  // namespace pscluster
