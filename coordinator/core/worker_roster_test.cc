#include "coordinator/core/worker_roster.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

class NamedWorker : public WorkerClient {
 public:
  explicit NamedWorker(std::string address) : address_(std::move(address)) {}
  std::string address() const override { return address_; }
  absl::Status SetupJob(const SetupJobRequest&, SetupJobResponse*) override {
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest&, absl::Duration, RunClosureResponse*) override {
    return absl::OkStatus();
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override { return absl::OkStatus(); }

 private:
  std::string address_;
};

WorkerRoster::Options Connecting(std::vector<int>* connected) {
  WorkerRoster::Options o;
  o.connect = [connected](const std::string& address, int index) {
    connected->push_back(index);
    return std::make_unique<NamedWorker>(address);
  };
  return o;
}

TEST(WorkerRosterTest, JoinAppendsAndRejoinKeepsTheIndex) {
  NamedWorker w0("127.0.0.1:1000"), w1("127.0.0.1:1001");
  std::vector<int> connected;
  WorkerRoster roster({&w0, &w1}, Connecting(&connected));
  EXPECT_EQ(roster.size(), 2);
  EXPECT_EQ(roster.active_count(), 2);
  const int64_t v0 = roster.version();
  absl::StatusOr<int> i = roster.Join("127.0.0.1:2000");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(*i, 2);
  EXPECT_EQ(connected, std::vector<int>({2}));
  EXPECT_EQ(roster.client(2)->address(), "127.0.0.1:2000");
  EXPECT_GT(roster.version(), v0);
  // A member cannot join twice.
  EXPECT_TRUE(absl::IsAlreadyExists(roster.Join("127.0.0.1:2000").status()));
  EXPECT_TRUE(absl::IsAlreadyExists(roster.Join("127.0.0.1:1001").status()));
  // It leaves, and comes back at its old index without a new client.
  absl::StatusOr<int> left = roster.Leave("127.0.0.1:2000", absl::Seconds(1));
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 0);
  EXPECT_FALSE(roster.active(2));
  EXPECT_EQ(roster.ActiveIndices(), std::vector<int>({0, 1}));
  i = roster.Join("127.0.0.1:2000");
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(*i, 2);
  EXPECT_EQ(connected, std::vector<int>({2}));
  EXPECT_TRUE(roster.active(2));
}

TEST(WorkerRosterTest, BadAddressesAndStrangersAreRefused) {
  std::vector<int> connected;
  WorkerRoster::Options o = Connecting(&connected);
  o.probe = [](const std::string& address) {
    return address == "127.0.0.1:9" ? absl::UnavailableError("connection refused")
                                    : absl::OkStatus();
  };
  WorkerRoster roster({}, o);
  for (const char* bad : {"", "nohostport", "127.0.0.1:0", "127.0.0.1:70000", "host:port"}) {
    absl::Status s = roster.Join(bad).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad << ": " << s;
    EXPECT_NE(s.message().find("cannot register worker"), std::string::npos) << s;
  }
  absl::Status s = roster.Join("127.0.0.1:9").status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("does not answer Ping"), std::string::npos) << s;
  EXPECT_EQ(roster.size(), 0);
  EXPECT_TRUE(connected.empty());
  EXPECT_TRUE(absl::IsNotFound(roster.Leave("127.0.0.1:5", absl::ZeroDuration()).status()));
}

TEST(WorkerRosterTest, LeaveStopsNewCallsAndWaitsForThoseInFlight) {
  NamedWorker w0("127.0.0.1:1000");
  std::vector<int> connected;
  WorkerRoster roster({&w0}, Connecting(&connected));
  ASSERT_TRUE(roster.BeginCall(0));
  absl::Notification left;
  int in_flight = -1;
  std::thread leaver([&] {
    in_flight = *roster.Leave("127.0.0.1:1000", absl::Seconds(30));
    left.Notify();
  });
  // Once leaving, no new call starts; the leave waits for the one in flight.
  while (roster.active(0)) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(roster.BeginCall(0));
  EXPECT_FALSE(left.HasBeenNotified());
  roster.EndCall(0);
  leaver.join();
  EXPECT_EQ(in_flight, 0);
}

TEST(WorkerRosterTest, ALeavingWorkerStillStartsTheCallsExpectedOfIt) {
  NamedWorker w0("127.0.0.1:1000"), w1("127.0.0.1:1001");
  std::vector<int> connected;
  WorkerRoster roster({&w0, &w1}, Connecting(&connected));
  // A mirrored split's replicas are pinned to workers 0 and 1.
  ASSERT_TRUE(roster.ExpectCalls({0, 1}));
  absl::Notification left;
  int in_flight = -1;
  std::thread leaver([&] {
    in_flight = *roster.Leave("127.0.0.1:1001", absl::Seconds(30));
    left.Notify();
  });
  while (roster.active(1)) absl::SleepFor(absl::Milliseconds(1));
  // Worker 1 left before it started its replica: it still may, once.
  EXPECT_FALSE(roster.ExpectCalls({0, 1}));  // all or none: 0 gets no second one
  ASSERT_TRUE(roster.BeginCall(1));
  EXPECT_FALSE(roster.BeginCall(1));
  EXPECT_FALSE(left.HasBeenNotified());
  roster.EndCall(1);
  leaver.join();
  EXPECT_EQ(in_flight, 0);
  // Worker 0's expected call is used up by its call; a cleared one is gone.
  ASSERT_TRUE(roster.BeginCall(0));
  roster.EndCall(0);
  ASSERT_TRUE(roster.ExpectCalls({0}));
  roster.ClearExpected({0});
  EXPECT_EQ(*roster.Leave("127.0.0.1:1000", absl::ZeroDuration()), 0);
}

TEST(WorkerRosterTest, LeaveWaitIsBounded) {
  NamedWorker w0("127.0.0.1:1000");
  std::vector<int> connected;
  WorkerRoster roster({&w0}, Connecting(&connected));
  ASSERT_TRUE(roster.BeginCall(0));
  absl::StatusOr<int> left = roster.Leave("127.0.0.1:1000", absl::Milliseconds(10));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 1);
  roster.EndCall(0);
}

}  // namespace
}  // namespace pscluster
