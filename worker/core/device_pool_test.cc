#include "worker/core/device_pool.h"

#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/core/cpu_backend.h"

namespace pscluster {
namespace {

// How long a test waits for the other threads before it fails instead of
// hanging: a bound on a deadlock, never reached when the code is right.
constexpr absl::Duration kDeadlockBound = absl::Seconds(60);

// A backend factory that records the options of every backend it builds
// and fails the call numbered `fail_call` (0-based; -1: never).
class FakeFactory {
 public:
  explicit FakeFactory(int fail_call = -1) : fail_call_(fail_call) {}

  BackendFactory factory() {
    return [this](const BackendOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
      absl::MutexLock lock(&mu_);
      const int call = static_cast<int>(devices_.size());
      devices_.push_back(options.cuda_device);
      if (call == fail_call_) return absl::FailedPreconditionError("no device here");
      return CreateCpuBackend();
    };
  }

  // The cuda_device of every call so far, in order.
  std::vector<int> devices() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return devices_;
  }

 private:
  const int fail_call_;
  absl::Mutex mu_;
  std::vector<int> devices_ ABSL_GUARDED_BY(mu_);
};

// Per-closure buffers of the test: how often a Workspace was initialised
// and what its last borrower left in it.
struct Buffers {
  int inits = 0;
  int left = 0;
};

DevicePool<Buffers>::Options PoolOptions(FakeFactory* factory, int64_t devices = 1) {
  DevicePool<Buffers>::Options options;
  options.devices = devices;
  options.make_backend = factory->factory();
  options.init_buffers = [](Buffers* buffers) { ++buffers->inits; };
  return options;
}

// Counts arrivals; Wait returns true once `expected` have arrived, false
// after kDeadlockBound.
class Barrier {
 public:
  explicit Barrier(int expected) : expected_(expected) {}

  bool ArriveAndWait() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++arrived_;
    auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return arrived_ >= expected_; };
    return mu_.AwaitWithTimeout(absl::Condition(&all), kDeadlockBound);
  }

 private:
  const int expected_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(DevicePoolTest, OneDeviceIsOneBackendWithoutThreads) {
  FakeFactory factory;
  DevicePool<Buffers> pool(PoolOptions(&factory));
  absl::StatusOr<DevicePool<Buffers>::Lent> lent = pool.Acquire();
  ASSERT_TRUE(lent.ok()) << lent.status();
  const Devices& devices = *(*lent)->devices;
  ASSERT_NE(devices.backend, nullptr);
  EXPECT_EQ(devices.backend->name(), "cpu (OpenBLAS)");
  EXPECT_TRUE(devices.slots.empty());
  EXPECT_EQ(devices.threads, nullptr);
  EXPECT_EQ((*lent)->buffers.inits, 1);
  EXPECT_EQ(factory.devices(), std::vector<int>({0}));
}

TEST(DevicePoolTest, SeveralDevicesGetABackendEachOnTheirOwnGpu) {
  FakeFactory factory;
  DevicePool<Buffers> pool(PoolOptions(&factory, /*devices=*/3));
  absl::StatusOr<DevicePool<Buffers>::Lent> lent = pool.Acquire();
  ASSERT_TRUE(lent.ok()) << lent.status();
  const Devices& devices = *(*lent)->devices;
  ASSERT_NE(devices.backend, nullptr);
  ASSERT_EQ(devices.slots.size(), 3u);
  for (const auto& slot : devices.slots) EXPECT_NE(slot->backend, nullptr);
  ASSERT_NE(devices.threads, nullptr);
  // The whole-step backend on GPU 0, then replica d on GPU d.
  EXPECT_EQ(factory.devices(), std::vector<int>({0, 0, 1, 2}));
}

TEST(DevicePoolTest, AReturnedWorkspaceIsLentAgainAsItWasLeft) {
  FakeFactory factory;
  DevicePool<Buffers> pool(PoolOptions(&factory));
  const DevicePool<Buffers>::Workspace* first;
  {
    absl::StatusOr<DevicePool<Buffers>::Lent> lent = pool.Acquire();
    ASSERT_TRUE(lent.ok()) << lent.status();
    first = lent->get();
    (*lent)->buffers.left = 7;
  }  // returned here
  absl::StatusOr<DevicePool<Buffers>::Lent> again = pool.Acquire();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->get(), first);
  EXPECT_EQ((*again)->buffers.left, 7);
  EXPECT_EQ((*again)->buffers.inits, 1);    // not initialised twice
  EXPECT_EQ(factory.devices().size(), 1u);  // nor rebuilt
}

TEST(DevicePoolTest, BorrowersAtOnceGetWorkspacesOfTheirOwnThenShareThem) {
  constexpr int kBorrowers = 4;
  FakeFactory factory;
  DevicePool<Buffers> pool(PoolOptions(&factory));
  // Every borrower holds its workspace until all hold one (the test thread
  // meets them there too), then until the test releases them.
  Barrier all_hold(kBorrowers + 1);
  absl::Notification release;
  std::vector<const DevicePool<Buffers>::Workspace*> held(kBorrowers, nullptr);
  std::vector<int> met(kBorrowers, 0);  // not vector<bool>: one writer each
  std::vector<int> released(kBorrowers, 0);
  std::vector<std::thread> borrowers;
  for (int i = 0; i < kBorrowers; ++i) {
    borrowers.emplace_back([&, i] {
      absl::StatusOr<DevicePool<Buffers>::Lent> lent = pool.Acquire();
      if (!lent.ok()) return;
      held[i] = lent->get();
      met[i] = all_hold.ArriveAndWait();
      released[i] = release.WaitForNotificationWithTimeout(kDeadlockBound);
    });  // the workspace goes back here
  }
  EXPECT_TRUE(all_hold.ArriveAndWait());
  // All hold one at once: one built for each.
  EXPECT_EQ(factory.devices().size(), static_cast<size_t>(kBorrowers));
  release.Notify();
  for (std::thread& t : borrowers) t.join();
  const std::set<const DevicePool<Buffers>::Workspace*> distinct(held.begin(), held.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kBorrowers));
  EXPECT_EQ(distinct.count(nullptr), 0u);
  for (int i = 0; i < kBorrowers; ++i) {
    EXPECT_TRUE(met[i]) << "borrower " << i;
    EXPECT_TRUE(released[i]) << "borrower " << i;
  }

  // The pool now holds them all: as many borrowers again build nothing.
  std::vector<DevicePool<Buffers>::Lent> again;
  for (int i = 0; i < kBorrowers; ++i) {
    absl::StatusOr<DevicePool<Buffers>::Lent> lent = pool.Acquire();
    ASSERT_TRUE(lent.ok()) << lent.status();
    EXPECT_EQ(distinct.count(lent->get()), 1u);
    again.push_back(*std::move(lent));
  }
  EXPECT_EQ(factory.devices().size(), static_cast<size_t>(kBorrowers));
}

TEST(DevicePoolTest, AFailedBuildReturnsTheErrorAndPoolsNothing) {
  FakeFactory factory(/*fail_call=*/2);  // replica 1's backend
  DevicePool<Buffers> pool(PoolOptions(&factory, /*devices=*/2));
  absl::StatusOr<DevicePool<Buffers>::Lent> lent = pool.Acquire();
  ASSERT_FALSE(lent.ok());
  EXPECT_EQ(lent.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lent.status().message(), "no device here");
  // The next borrower builds a whole new workspace.
  absl::StatusOr<DevicePool<Buffers>::Lent> next = pool.Acquire();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)->devices->slots.size(), 2u);
  EXPECT_EQ((*next)->buffers.inits, 1);
  EXPECT_EQ(factory.devices(), std::vector<int>({0, 0, 1, 0, 0, 1}));
}

TEST(DeviceThreadsTest, RunCallsEachIndexOnceDeviceZeroOnTheCaller) {
  constexpr int kThreads = 3;
  DeviceThreads threads(kThreads);
  for (int n = 1; n <= kThreads + 1; ++n) {
    std::vector<int> calls(kThreads + 1, 0);
    std::vector<std::thread::id> ran_on(kThreads + 1);
    threads.Run(n, [&](int index) {
      ++calls[index];  // each index is written by one thread only
      ran_on[index] = std::this_thread::get_id();
    });
    // Run returned: every call is done and its writes are visible.
    for (int i = 0; i <= kThreads; ++i) {
      EXPECT_EQ(calls[i], i < n ? 1 : 0) << "n " << n << ", index " << i;
    }
    EXPECT_EQ(ran_on[0], std::this_thread::get_id());
    for (int i = 1; i < n; ++i) EXPECT_NE(ran_on[i], std::this_thread::get_id());
  }
}

TEST(DeviceThreadsTest, TheDevicesOfAStepRunAtTheSameTime) {
  constexpr int kThreads = 3;
  DeviceThreads threads(kThreads);
  for (int round = 0; round < 20; ++round) {
    // Each call waits for all the others: run one after another, they
    // would time out instead.
    Barrier all_started(kThreads + 1);
    std::vector<int> met(kThreads + 1, 0);
    threads.Run(kThreads + 1, [&](int index) { met[index] = all_started.ArriveAndWait(); });
    for (int i = 0; i <= kThreads; ++i) EXPECT_EQ(met[i], 1) << "round " << round << ", " << i;
  }
}

}  // namespace
}  // namespace pscluster
