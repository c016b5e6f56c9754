// train.max_staleness and train.staleness_lr (docs/staleness.md).
#include <string>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

std::string Spec(const std::string& train, const std::string& optimizer = "adam") {
  return R"(name: mlp
model:
  inputs: {dense: 4}
  layers: [{dense: {units: 2}}]
optimizer: {type: )" +
         optimizer + R"(, learning_rate: 0.01}
data:
  train: {format: idx, images: tr.gz, labels: trl.gz}
  eval: {images: te.gz, labels: tel.gz}
train: )" +
         train + "\n";
}

TEST(JobSpecStalenessTest, AbsentIsUnbounded) {
  auto spec = ParseJobSpec(Spec("{epochs: 1}"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train.max_staleness, -1);
  EXPECT_EQ(spec->train.staleness_lr, TrainSpec::StalenessLr::kNone);
  EXPECT_FALSE(spec->optimizer.inverse_staleness_lr());
}

TEST(JobSpecStalenessTest, ParsesTheBoundAndTheRate) {
  auto spec = ParseJobSpec(Spec("{max_staleness: 0}"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train.max_staleness, 0);
  spec = ParseJobSpec(Spec("{max_staleness: 3, staleness_lr: inverse}"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train.max_staleness, 3);
  EXPECT_EQ(spec->train.staleness_lr, TrainSpec::StalenessLr::kInverse);
  // The PS applies it: it travels in the optimizer, and survives the
  // replica scaling of the rate.
  EXPECT_TRUE(spec->optimizer.inverse_staleness_lr());
  ASSERT_TRUE(ResolveReplicas(4, &*spec).ok());
  EXPECT_TRUE(spec->optimizer.inverse_staleness_lr());
}

TEST(JobSpecStalenessTest, RejectsBadValuesNamingTheField) {
  struct Case {
    std::string train;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"{max_staleness: -1}", "train.max_staleness must be >= 0, got -1"},
           {"{max_staleness: 1.5}", "train.max_staleness must be an integer"},
           {"{max_staleness: many}", "train.max_staleness must be an integer"},
           {"{max_staleness: 10000001}", "train.max_staleness must be <= 1000000"},
           {"{staleness_lr: sqrt}", "unknown train.staleness_lr 'sqrt' (expected none or inverse)"},
       }) {
    auto spec = ParseJobSpec(Spec(c.train), "job.yaml");
    ASSERT_FALSE(spec.ok()) << c.train;
    EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));
    EXPECT_THAT(spec.status().message(), HasSubstr(c.message)) << c.train;
    EXPECT_THAT(spec.status().message(), HasSubstr("job.yaml:")) << c.train;
  }
}

TEST(JobSpecStalenessTest, InverseRateNeedsARateOptimizer) {
  auto spec = ParseJobSpec(Spec("{staleness_lr: inverse}", "ftrl"), "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("staleness_lr: inverse needs optimizer sgd"));
}

}  // namespace
}  // namespace pscluster
