// ClusterCoordinator's PS recovery against real processes: 2 ps_server (one
// --checkpoint_root) and 2 recovery_test_worker. Periodic checkpoints every
// 100 steps; once the PS report 150 applied steps (progress, not time), PS 1
// is killed with SIGKILL and started again on its port, empty. The job
// heals (restores the newest checkpoint into both PS, retries the closures
// that failed on it), Join succeeds, and each PS applied exactly steps() -
// lost_steps() steps; b (SGD from zeros) holds exactly that many steps'
// updates.
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/pscluster/cluster_coordinator.h"
#include "api/pscluster/test_servers.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

constexpr int kClosures = 40;
constexpr int kStepsPerClosure = 10;
// Checkpoints at ~100 steps (at the first quiescent point past it, before
// 120); the kill at >= 150 applied steps: closures that ended after the
// checkpoint are rolled back, so some steps are lost (at most 2 closures of
// 10 steps are in flight, so >= 130 steps had ended).
constexpr int64_t kCheckpointEvery = 100;
constexpr int64_t kKillAfterSteps = 150;

// Runs 40 closures of 10 steps on 2 PS and 2 workers, kills PS `victim`
// once both PS applied `kill_after` steps and restarts it, and checks that
// the job healed with applied == steps - lost on every PS, lost > 0.
// `checkpoint_every`: periodic checkpoints (0: none).
void KillPsMidJob(const std::string& name, int64_t checkpoint_every, int64_t kill_after,
                  int victim) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  TestServers servers(absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name));
  ClusterCoordinator::Options o;
  for (int p = 0; p < 2; ++p) {
    absl::StatusOr<std::string> a = servers.StartPs(p);
    ASSERT_TRUE(a.ok()) << a.status();
    o.ps_addresses.push_back(*a);
  }
  for (int w = 0; w < 2; ++w) {
    absl::StatusOr<std::string> a = servers.StartWorker(w);
    ASSERT_TRUE(a.ok()) << a.status();
    o.worker_addresses.push_back(*a);
  }
  o.partitioner = PartitionerSpec::Fixed(2);
  o.health_interval = absl::Milliseconds(200);
  o.retry_backoff = absl::Milliseconds(50);
  o.cluster_wait = absl::Seconds(30);
  o.checkpoint_root = servers.checkpoint_root();
  if (checkpoint_every > 0) {
    o.checkpoint_dir = "periodic";
    o.checkpoint_every_steps = checkpoint_every;
  }
  o.ps_recovery_timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> made = ClusterCoordinator::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  ClusterCoordinator& c = **made;
  InitializerProto glorot;
  glorot.set_type("glorot_uniform");
  OptimizerProto adam;
  adam.set_type("adam");
  adam.set_learning_rate(0.01f);
  adam.set_beta1(0.9f);
  adam.set_beta2(0.999f);
  adam.set_epsilon(1e-7f);
  InitializerProto zeros;
  zeros.set_type("zeros");
  OptimizerProto sgd;
  sgd.set_type("sgd");
  sgd.set_learning_rate(1.0f);
  ASSERT_TRUE(c.CreateVariable("w", {16, 8}, glorot, adam).ok());
  ASSERT_TRUE(c.CreateVariable("b", {8}, zeros, sgd).ok());

  std::vector<RemoteValue> values;
  for (int i = 0; i < kClosures; ++i) {
    // 10 steps, 10 ms apart: the kill lands inside closures.
    absl::StatusOr<RemoteValue> v = c.Schedule("push", absl::StrCat(kStepsPerClosure, ":w,b:10"));
    ASSERT_TRUE(v.ok()) << v.status();
    values.push_back(*v);
  }
  // Progress: both PS applied kKillAfterSteps steps (bounded in time).
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int64_t applied = 0;
  while (applied < kill_after) {
    ASSERT_LT(absl::Now(), deadline) << "the PS applied only " << applied << " steps";
    absl::StatusOr<std::vector<StatsResponse>> stats = c.PsStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    applied = std::min((*stats)[0].applied_steps(), (*stats)[1].applied_steps());
    absl::SleepFor(absl::Milliseconds(10));
  }
  servers.KillPs(victim);
  absl::StatusOr<std::string> back = servers.RestartPs(victim);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(*back, o.ps_addresses[victim]);

  ASSERT_TRUE(c.Join().ok());
  for (const RemoteValue& v : values) {
    absl::StatusOr<std::string> r = v.Fetch();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, absl::StrCat(kStepsPerClosure));
  }
  EXPECT_EQ(c.steps(), kClosures * kStepsPerClosure);
  EXPECT_GE(c.ps_recoveries(), 1);
  const int64_t lost = c.lost_steps();
  std::cout << name << ": steps " << c.steps() << ", lost " << lost << ", recoveries "
            << c.ps_recoveries() << std::endl;
  EXPECT_GT(lost, 0);
  EXPECT_LT(lost, c.steps());
  EXPECT_EQ(c.global_step(), c.steps() - lost);
  absl::StatusOr<std::vector<StatsResponse>> stats = c.PsStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (size_t p = 0; p < stats->size(); ++p) {
    EXPECT_EQ((*stats)[p].applied_steps(), c.steps() - lost) << "PS " << p;
  }
  // b started at 0 under SGD with rate 1: it holds exactly the updates of
  // the steps applied, -steps * ((i % 7) + 1) / 1000.
  absl::StatusOr<RemoteValue> read = c.Schedule("read", "b");
  ASSERT_TRUE(read.ok());
  absl::StatusOr<std::string> bytes = read->Fetch();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_EQ(bytes->size(), 8 * sizeof(float));
  std::vector<float> b(8);
  std::memcpy(b.data(), bytes->data(), bytes->size());
  for (int i = 0; i < 8; ++i) {
    const double want = -static_cast<double>(c.steps() - lost) * ((i % 7) + 1) / 1000.0;
    EXPECT_NEAR(b[i], want, 1e-3) << "b[" << i << "]";
  }
}

TEST(ClusterCoordinatorRecoveryTest, KilledPsIsRestoredFromTheCheckpoint) {
  KillPsMidJob("from_checkpoint", kCheckpointEvery, kKillAfterSteps, /*victim=*/1);
}

// No checkpoint: every PS starts again from the initializers, and every
// step done before the recovery is lost (and counted so).
TEST(ClusterCoordinatorRecoveryTest, KilledPsWithoutCheckpointRestartsFromInitializers) {
  KillPsMidJob("no_checkpoint", 0, 50, /*victim=*/0);
}

}  // namespace
}  // namespace pscluster
