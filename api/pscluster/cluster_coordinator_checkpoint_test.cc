// ClusterCoordinator's Save and Restore against real processes: 3 ps_server
// (one --checkpoint_root) and one recovery_test_worker. A checkpoint saved
// from 2 PS (fixed:2) restores into 3 PS (fixed:3) with the same values and
// the same optimizer state (one more step gives the same values), and into
// the same job after more training; Restore's and Save's errors.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/pscluster/cluster_coordinator.h"
#include "api/pscluster/test_servers.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    servers_ = new TestServers(absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ckpt_test"));
    for (int p = 0; p < 3; ++p) {
      absl::StatusOr<std::string> a = servers_->StartPs(p);
      ASSERT_TRUE(a.ok()) << a.status();
      ps_.push_back(*a);
    }
    absl::StatusOr<std::string> w = servers_->StartWorker(0);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = *w;
  }
  static void TearDownTestSuite() {
    delete servers_;
    servers_ = nullptr;
  }

  // A coordinator over the first `num_ps` PS with `partitioner`, declaring
  // w [10, 4] (glorot_uniform, Adam) and b [`b_size`] (zeros, SGD 1).
  std::unique_ptr<ClusterCoordinator> Make(int num_ps, const std::string& partitioner,
                                           int64_t b_size = 4, bool root = true) {
    ClusterCoordinator::Options o;
    o.ps_addresses.assign(ps_.begin(), ps_.begin() + num_ps);
    o.worker_addresses = {worker_};
    absl::StatusOr<PartitionerSpec> spec = ParsePartitioner(partitioner);
    EXPECT_TRUE(spec.ok()) << spec.status();
    o.partitioner = *spec;
    o.health_interval = absl::Milliseconds(200);
    o.cluster_wait = absl::Seconds(30);
    if (root) o.checkpoint_root = servers_->checkpoint_root();
    absl::StatusOr<std::unique_ptr<ClusterCoordinator>> c = ClusterCoordinator::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    InitializerProto glorot;
    glorot.set_type("glorot_uniform");
    glorot.set_seed(7);
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
    EXPECT_TRUE((*c)->CreateVariable("w", {10, 4}, glorot, adam).ok());
    EXPECT_TRUE((*c)->CreateVariable("b", {b_size}, zeros, sgd).ok());
    return *std::move(c);
  }

  static std::vector<float> Read(ClusterCoordinator& c) {
    absl::StatusOr<RemoteValue> v = c.Schedule("read", "w,b");
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return {};
    absl::StatusOr<std::string> bytes = v->Fetch();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return {};
    std::vector<float> out(bytes->size() / sizeof(float));
    std::memcpy(out.data(), bytes->data(), out.size() * sizeof(float));
    return out;
  }

  static void Train(ClusterCoordinator& c, int closures, int steps) {
    for (int i = 0; i < closures; ++i) {
      ASSERT_TRUE(c.Schedule("push", absl::StrCat(steps)).ok());
    }
    ASSERT_TRUE(c.Join().ok());
  }

  static TestServers* servers_;
  static std::vector<std::string> ps_;
  static std::string worker_;
};

TestServers* CheckpointTest::servers_ = nullptr;
std::vector<std::string> CheckpointTest::ps_;
std::string CheckpointTest::worker_;

TEST_F(CheckpointTest, SaveThenRestoreIntoAnotherPsCount) {
  std::vector<float> saved, one_more;
  {
    std::unique_ptr<ClusterCoordinator> a = Make(2, "fixed:2");
    Train(*a, 4, 5);
    EXPECT_EQ(a->steps(), 20);
    EXPECT_EQ(a->global_step(), 20);
    saved = Read(*a);
    ASSERT_EQ(saved.size(), 44u);
    ASSERT_TRUE(a->Save("reshard").ok());
    // Two more steps, then the checkpoint back: the same job's values are
    // replaced between closures.
    Train(*a, 1, 2);
    EXPECT_NE(Read(*a), saved);
    ASSERT_TRUE(a->Restore("reshard").ok());
    EXPECT_EQ(Read(*a), saved);
    EXPECT_EQ(a->global_step(), 20);
    Train(*a, 1, 1);
    one_more = Read(*a);
    absl::StatusOr<std::vector<StatsResponse>> stats = a->PsStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    for (const StatsResponse& s : *stats) EXPECT_EQ(s.applied_steps(), 21);
  }
  // Another job on 3 PS, w in 3 shards: restored before its first Schedule.
  std::unique_ptr<ClusterCoordinator> b = Make(3, "fixed:3");
  ASSERT_TRUE(b->Restore("reshard").ok());
  EXPECT_EQ(b->global_step(), 20);
  EXPECT_EQ(Read(*b), saved);
  absl::StatusOr<std::vector<StatsResponse>> stats = b->PsStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 3u);
  for (const StatsResponse& s : *stats) {
    bool shard = false;
    for (const auto& v : s.variables()) shard = shard || v.name().rfind("w/part_", 0) == 0;
    EXPECT_TRUE(shard) << "every PS holds a shard of w";
  }
  // Adam's slots and counters came along: one more step lands where the
  // saving job's did.
  Train(*b, 1, 1);
  EXPECT_EQ(Read(*b), one_more);
  EXPECT_EQ(b->global_step(), 21);
  stats = b->PsStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].applied_steps(), 21);
}

TEST_F(CheckpointTest, RestoreAndSaveErrorsNameTheProblem) {
  {
    std::unique_ptr<ClusterCoordinator> a = Make(1, "none");
    ASSERT_TRUE(a->Save("errors").ok());  // before any Schedule: the initial values
    absl::Status s = a->Restore("no-such-dir");
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_NE(s.message().find("no-such-dir"), std::string::npos) << s;
    s = a->Save("../outside");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    // Still usable after the errors.
    Train(*a, 1, 1);
  }
  {
    // A variable whose shape differs from the checkpoint's.
    std::unique_ptr<ClusterCoordinator> c = Make(2, "none", /*b_size=*/5);
    absl::Status s = c->Restore("errors");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("'b'"), std::string::npos) << s;
  }
  {
    // A variable the checkpoint lacks.
    std::unique_ptr<ClusterCoordinator> c = Make(2, "fixed:2");
    InitializerProto zeros;
    zeros.set_type("zeros");
    OptimizerProto sgd;
    sgd.set_type("sgd");
    sgd.set_learning_rate(0.1f);
    ASSERT_TRUE(c->CreateVariable("extra", {3}, zeros, sgd).ok());
    absl::Status s = c->Restore("errors");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("extra"), std::string::npos) << s;
  }
  {
    // No checkpoint root: Save and Restore say what is missing.
    std::unique_ptr<ClusterCoordinator> c = Make(1, "none", 4, /*root=*/false);
    absl::Status s = c->Save("errors");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("checkpoint_root"), std::string::npos) << s;
  }
  ClusterCoordinator::Options o;
  o.ps_addresses = {ps_[0]};
  o.worker_addresses = {worker_};
  o.checkpoint_dir = "periodic";
  EXPECT_EQ(ClusterCoordinator::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// Save while closures are queued and running is a consistent cut: the
// checkpoint holds exactly the steps of the closures that ended before it
// (b, SGD from zeros, shows them), and the job goes on to the end.
TEST_F(CheckpointTest, SaveDuringTrainingIsAConsistentCut) {
  std::unique_ptr<ClusterCoordinator> a = Make(2, "fixed:2");
  std::vector<RemoteValue> values;
  for (int i = 0; i < 12; ++i) {
    absl::StatusOr<RemoteValue> v = a->Schedule("push", "5:w,b:2");
    ASSERT_TRUE(v.ok());
    values.push_back(*v);
  }
  ASSERT_TRUE(values[2].Fetch().ok());  // progress: some closures ended
  ASSERT_TRUE(a->Save("cut").ok());
  ASSERT_TRUE(a->Join().ok());
  EXPECT_TRUE(values[11].WaitFor(absl::ZeroDuration()));
  absl::StatusOr<bool> joined = a->JoinFor(absl::ZeroDuration());
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(*joined);
  EXPECT_EQ(a->global_step(), 60);
  a.reset();
  std::unique_ptr<ClusterCoordinator> b = Make(1, "none");
  ASSERT_TRUE(b->Restore("cut").ok());
  const int64_t cut = b->global_step();
  EXPECT_GE(cut, 15);
  EXPECT_LT(cut, 60);
  EXPECT_EQ(cut % 5, 0) << "whole closures only";
  const std::vector<float> v = Read(*b);
  ASSERT_EQ(v.size(), 44u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(v[40 + i], -static_cast<double>(cut) * ((i % 7) + 1) / 1000.0, 1e-4);
  }
}

// A bounded hash table: rows by any int64 key, saved from 2 PS and
// restored into 3 (rows re-hashed to their new shards); a whole read of it
// is the function's error.
TEST_F(CheckpointTest, HashTableRowsByKeyReshardOnRestore) {
  auto make = [&](int num_ps) {
    std::unique_ptr<ClusterCoordinator> c = Make(num_ps, "none");
    InitializerProto zeros;
    zeros.set_type("zeros");
    OptimizerProto sgd;
    sgd.set_type("sgd");
    sgd.set_learning_rate(1.0f);
    EXPECT_TRUE(c->CreateHashTable("e", 3, 100, LFU, zeros, sgd).ok());
    return c;
  };
  auto rows = [](ClusterCoordinator& c, const std::string& ids) {
    absl::StatusOr<RemoteValue> v = c.Schedule("read_rows", "e:" + ids);
    EXPECT_TRUE(v.ok());
    absl::StatusOr<std::string> bytes = v->Fetch();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    std::vector<float> out(bytes.ok() ? bytes->size() / sizeof(float) : 0);
    if (bytes.ok()) std::memcpy(out.data(), bytes->data(), bytes->size());
    return out;
  };
  const std::string ids = "1,7,1099511627776,-5,123456789";
  std::vector<float> saved;
  {
    std::unique_ptr<ClusterCoordinator> a = make(2);
    ASSERT_TRUE(a->Schedule("push_rows", "e:" + ids + ":4").ok());
    ASSERT_TRUE(a->Join().ok());
    saved = rows(*a, ids);
    ASSERT_EQ(saved.size(), 15u);
    for (int r = 0; r < 5; ++r) {
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(saved[r * 3 + j], -4 * (j + 1) / 100.0, 1e-6);
    }
    absl::StatusOr<RemoteValue> whole = a->Schedule("read", "e");
    ASSERT_TRUE(whole.ok());
    absl::Status s = whole->Fetch().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("hash table"), std::string::npos) << s;
    EXPECT_TRUE(a->Join().code() == absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(a->Save("hash").ok());
  }
  std::unique_ptr<ClusterCoordinator> b = make(3);
  ASSERT_TRUE(b->Restore("hash").ok());
  EXPECT_EQ(rows(*b, ids), saved);
  EXPECT_EQ(rows(*b, "99"), std::vector<float>(3, 0.0f)) << "a new key starts from zeros";
  EXPECT_EQ(b->CreateHashTable("f", 0, 1, LFU, InitializerProto(), OptimizerProto()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
