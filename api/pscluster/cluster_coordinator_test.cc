// ClusterCoordinator without servers: what it refuses before it connects,
// and Join / Done with nothing scheduled. tests/cluster_coordinator_test.sh
// runs it against real servers.
#include "api/pscluster/cluster_coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/time/clock.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

ClusterCoordinator::Options TwoTasks() {
  ClusterCoordinator::Options options;
  // Nothing listens there: nothing here may connect.
  options.ps_addresses = {"127.0.0.1:1"};
  options.worker_addresses = {"127.0.0.1:2"};
  return options;
}

InitializerProto Zeros() {
  InitializerProto init;
  init.set_type("zeros");
  return init;
}

OptimizerProto Sgd() {
  OptimizerProto opt;
  opt.set_type("sgd");
  opt.set_learning_rate(0.1f);
  return opt;
}

TEST(ParsePartitionerTest, KnowsTfsThreeKinds) {
  absl::StatusOr<PartitionerSpec> fixed = ParsePartitioner("fixed:3");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->type, PartitionerSpec::Type::kFixed);
  EXPECT_EQ(fixed->num_shards, 3);
  absl::StatusOr<PartitionerSpec> min = ParsePartitioner("min_size:1024:4");
  ASSERT_TRUE(min.ok()) << min.status();
  EXPECT_EQ(min->type, PartitionerSpec::Type::kMinSize);
  EXPECT_EQ(min->max_shards, 4);
  absl::StatusOr<PartitionerSpec> max = ParsePartitioner("max_size:4096");
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_EQ(max->type, PartitionerSpec::Type::kMaxSize);
  EXPECT_EQ(max->max_shards, 0);
  EXPECT_TRUE(ParsePartitioner("none").ok());
}

TEST(ParsePartitionerTest, UnknownOrMalformedIsAClearError) {
  absl::StatusOr<PartitionerSpec> unknown = ParsePartitioner("round_robin:2");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown partitioner 'round_robin'"));
  EXPECT_THAT(ParsePartitioner("fixed:two").status().message(), HasSubstr("'two' is not a number"));
  EXPECT_THAT(ParsePartitioner("fixed").status().message(), HasSubstr("wrong number of values"));
  EXPECT_THAT(ParsePartitioner("fixed:0").status().message(), HasSubstr("num_shards"));
}

TEST(ClusterCoordinatorTest, RefusesABadCluster) {
  ClusterCoordinator::Options no_ps = TwoTasks();
  no_ps.ps_addresses.clear();
  EXPECT_THAT(ClusterCoordinator::Create(no_ps).status().message(), HasSubstr("no PS task"));
  ClusterCoordinator::Options bad_address = TwoTasks();
  bad_address.worker_addresses = {"localhost"};
  EXPECT_THAT(ClusterCoordinator::Create(bad_address).status().message(),
              HasSubstr("worker address 'localhost'"));
  ClusterCoordinator::Options bad_partitioner = TwoTasks();
  bad_partitioner.partitioner = PartitionerSpec::Fixed(0);
  EXPECT_EQ(ClusterCoordinator::Create(bad_partitioner).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClusterCoordinatorTest, TakesAClusterFile) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/cluster.yaml";
  std::ofstream(path) << "cluster:\n"
                         "  chief: [127.0.0.1:3]\n"
                         "  worker: [127.0.0.1:4, 127.0.0.1:5]\n"
                         "  ps: [127.0.0.1:6]\n";
  ClusterCoordinator::Options options;
  options.cluster_file = path;
  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> c = ClusterCoordinator::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*c)->job_id().empty());
  options.cluster_file = path + ".missing";
  EXPECT_THAT(ClusterCoordinator::Create(options).status().message(), HasSubstr(".missing"));
}

TEST(ClusterCoordinatorTest, RefusesBadVariables) {
  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> c = ClusterCoordinator::Create(TwoTasks());
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status zero = (*c)->CreateVariable("w", {784, 0}, Zeros(), Sgd());
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.message(), HasSubstr("variable 'w' has shape [784, 0]"));
  EXPECT_EQ((*c)->CreateVariable("", {2}, Zeros(), Sgd()).code(),
            absl::StatusCode::kInvalidArgument);
  InitializerProto bad_init;
  bad_init.set_type("gaussian");
  EXPECT_THAT((*c)->CreateVariable("w", {2}, bad_init, Sgd()).message(),
              HasSubstr("variable 'w'"));
  OptimizerProto bad_opt = Sgd();
  bad_opt.set_type("lamb");
  EXPECT_THAT((*c)->CreateVariable("w", {2}, Zeros(), bad_opt).message(),
              HasSubstr("unknown optimizer 'lamb'"));
  ASSERT_TRUE((*c)->CreateVariable("w", {2, 3}, Zeros(), Sgd()).ok());
  EXPECT_EQ((*c)->CreateVariable("w", {2, 3}, Zeros(), Sgd()).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ((*c)->Schedule("", "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClusterCoordinatorTest, JoinAndDoneWithNothingScheduledReturnAtOnce) {
  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> c = ClusterCoordinator::Create(TwoTasks());
  ASSERT_TRUE(c.ok()) << c.status();
  const absl::Time start = absl::Now();
  EXPECT_TRUE((*c)->Join().ok());
  absl::StatusOr<bool> done = (*c)->Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  absl::StatusOr<bool> joined = (*c)->JoinFor(absl::Minutes(1));
  ASSERT_TRUE(joined.ok());
  EXPECT_TRUE(*joined);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ((*c)->PsStats().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ClusterCoordinatorTest, RefusesBadCheckpointOptions) {
  ClusterCoordinator::Options options = TwoTasks();
  options.checkpoint_dir = "periodic";
  absl::Status s = ClusterCoordinator::Create(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("checkpoint_root"));
  options = TwoTasks();
  options.checkpoint_keep = 0;
  EXPECT_EQ(ClusterCoordinator::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = TwoTasks();
  options.checkpoint_every_steps = -1;
  EXPECT_EQ(ClusterCoordinator::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClusterCoordinatorTest, NothingLostOrAppliedBeforeTheFirstSchedule) {
  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> c = ClusterCoordinator::Create(TwoTasks());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->lost_steps(), 0);
  EXPECT_EQ((*c)->global_step(), 0);
  EXPECT_EQ((*c)->ps_recoveries(), 0);
}

}  // namespace
}  // namespace pscluster
