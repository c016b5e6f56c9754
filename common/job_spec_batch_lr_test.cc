// The job spec's global batch and learning-rate schedules: data.global_batch
// or data.per_replica_batch resolved for the replicas, and
// optimizer.learning_rate as a number or a schedule mapping.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "common/job_spec.h"
#include "common/lr_schedule.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using P = LearningRateScheduleProto;

// A job whose optimizer and data batch lines are LR and BATCH.
std::string Job(const std::string& lr, const std::string& batch,
                const std::string& strategy = "parameter_server") {
  return absl::StrReplaceAll(R"(name: j
strategy: STRATEGY
model:
  inputs: {dense: 4}
  layers: [{dense: {units: 2}}]
optimizer: {type: sgd, learning_rate: LR}
data:
  train: {images: a, labels: b}
  eval: {images: c, labels: d}
  BATCH
)",
                             {{"LR", lr}, {"BATCH", batch}, {"STRATEGY", strategy}});
}

TEST(JobSpecBatchTest, PerReplicaBatchGivesTheGlobalBatch) {
  auto spec = ParseJobSpec(Job("0.1", "per_replica_batch: 32"), "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->replicas, 0);
  EXPECT_EQ(ReplicasFor(*spec, 4), 4);
  ASSERT_TRUE(ResolveReplicas(ReplicasFor(*spec, 4), &*spec).ok());
  EXPECT_EQ(spec->data.per_replica_batch, 32);
  EXPECT_EQ(spec->data.global_batch, 128);
  EXPECT_EQ(spec->replicas, 4);
}

TEST(JobSpecBatchTest, NeitherBatchIsPerReplica64) {
  auto spec = ParseJobSpec(Job("0.1", "shuffle: true"), "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ResolveReplicas(2, &*spec).ok());
  EXPECT_EQ(spec->data.per_replica_batch, 64);
  EXPECT_EQ(spec->data.global_batch, 128);
}

TEST(JobSpecBatchTest, GlobalBatchIsSplitOverTheReplicas) {
  auto spec = ParseJobSpec(Job("0.1", "global_batch: 128"), "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.per_replica_batch, 0);  // not known before the replicas
  ASSERT_TRUE(ResolveReplicas(4, &*spec).ok());
  EXPECT_EQ(spec->data.per_replica_batch, 32);
  EXPECT_EQ(spec->data.global_batch, 128);
  // Resolving again (another cluster size) starts from what the YAML gave.
  ASSERT_TRUE(ResolveReplicas(2, &*spec).ok());
  EXPECT_EQ(spec->data.per_replica_batch, 64);
  EXPECT_EQ(spec->data.global_batch, 128);
}

TEST(JobSpecBatchTest, OneDeviceHasOneReplica) {
  auto spec = ParseJobSpec(Job("0.1", "global_batch: 100", "one_device"), "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ReplicasFor(*spec, 3), 1);
  ASSERT_TRUE(ResolveReplicas(ReplicasFor(*spec, 3), &*spec).ok());
  EXPECT_EQ(spec->data.per_replica_batch, 100);
  EXPECT_EQ(spec->data.global_batch, 100);
}

TEST(JobSpecBatchTest, StrategiesCountTheirReplicas) {
  // central_storage: one replica per worker device; a worker steps through
  // the global batch and sends one share per step.
  auto spec = ParseJobSpec(Job("0.1", "global_batch: 120", "central_storage") + "devices: 2\n",
                           "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->strategy, Strategy::kCentralStorage);
  EXPECT_STREQ(StrategyName(spec->strategy), "central_storage");
  ASSERT_EQ(ReplicasFor(*spec, 3), 6);
  ASSERT_TRUE(ResolveReplicas(6, &*spec).ok());
  EXPECT_EQ(spec->data.per_replica_batch, 20);
  EXPECT_EQ(StepExamples(*spec), 120);
  EXPECT_EQ(SyncShares(*spec), 3);
  // mirrored: `devices` replicas in one process.
  spec = ParseJobSpec(Job("0.1", "per_replica_batch: 16", "mirrored") + "devices: 4\n", "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ReplicasFor(*spec, 7), 4);
  ASSERT_TRUE(ResolveReplicas(4, &*spec).ok());
  EXPECT_EQ(spec->data.global_batch, 64);
  EXPECT_EQ(StepExamples(*spec), 64);
  // parameter_server with devices: each worker's step is one batch per device.
  spec = ParseJobSpec(Job("0.1", "per_replica_batch: 16") + "devices: 2\n", "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ResolveReplicas(ReplicasFor(*spec, 2), &*spec).ok());
  EXPECT_EQ(spec->replicas, 4);
  EXPECT_EQ(StepExamples(*spec), 32);
  // one_device is one device.
  spec = ParseJobSpec(Job("0.1", "per_replica_batch: 16", "one_device") + "devices: 2\n", "j.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("use strategy: mirrored"));
  spec = ParseJobSpec(Job("0.1", "per_replica_batch: 16") + "devices: 0\n", "j.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("devices"));
  spec = ParseJobSpec(Job("0.1", "per_replica_batch: 16", "ring"), "j.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("central_storage"));
}

TEST(JobSpecBatchTest, GlobalBatchMustDivideByTheReplicas) {
  auto spec = ParseJobSpec(Job("0.1", "global_batch: 100"), "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const absl::Status s = ResolveReplicas(3, &*spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("data.global_batch 100 does not divide evenly by the job's 3 "
                                     "replicas (one per worker)"));
  EXPECT_EQ(spec->replicas, 0);
  EXPECT_EQ(ResolveReplicas(0, &*spec).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveReplicas(JobLimits::kMaxReplicas + 1, &*spec).code(),
            absl::StatusCode::kInvalidArgument);
  auto big = ParseJobSpec(Job("0.1", "global_batch: 131072"), "j.yaml");
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_THAT(ResolveReplicas(1, &*big).message(),
              HasSubstr("is 131072 per replica, over the limit of 65536"));
  EXPECT_TRUE(ResolveReplicas(2, &*big).ok());
}

TEST(JobSpecLearningRateTest, NumberIsAConstantRate) {
  auto spec = ParseJobSpec(Job("0.25", "per_replica_batch: 8"), "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FLOAT_EQ(spec->optimizer.learning_rate(), 0.25f);
  EXPECT_FALSE(spec->optimizer.has_schedule());
  ASSERT_TRUE(ResolveReplicas(4, &*spec).ok());
  EXPECT_FLOAT_EQ(spec->optimizer.learning_rate(), 0.25f);  // not scaled unless asked
}

TEST(JobSpecLearningRateTest, WarmupCosineScaledWithReplicas) {
  auto spec =
      ParseJobSpec(Job("{initial: 0.1, warmup_steps: 500, warmup_from: 0.01, decay: cosine, "
                       "decay_steps: 10000, alpha: 0.05, scale_with_replicas: linear}",
                       "per_replica_batch: 32"),
                   "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->optimizer.has_schedule());
  const P& s = spec->optimizer.schedule();
  EXPECT_EQ(s.decay(), P::COSINE);
  EXPECT_DOUBLE_EQ(s.initial(), 0.1);
  EXPECT_EQ(s.warmup_steps(), 500);
  EXPECT_DOUBLE_EQ(s.warmup_from(), 0.01);
  EXPECT_EQ(s.decay_steps(), 10000);
  EXPECT_DOUBLE_EQ(s.alpha(), 0.05);
  EXPECT_TRUE(spec->scale_lr_with_replicas);
  ASSERT_TRUE(ResolveReplicas(4, &*spec).ok());
  EXPECT_DOUBLE_EQ(spec->optimizer.schedule().initial(), 0.4);
  EXPECT_DOUBLE_EQ(spec->optimizer.schedule().warmup_from(), 0.01);  // a start, not scaled
  EXPECT_FLOAT_EQ(spec->optimizer.learning_rate(), 0.4f);
  EXPECT_NEAR(LearningRateAt(spec->optimizer.schedule(), 500), 0.4, 1e-12);
  EXPECT_NEAR(LearningRateAt(spec->optimizer.schedule(), 10500), 0.02, 1e-12);
  // Resolving again does not scale twice.
  ASSERT_TRUE(ResolveReplicas(2, &*spec).ok());
  EXPECT_DOUBLE_EQ(spec->optimizer.schedule().initial(), 0.2);
}

TEST(JobSpecLearningRateTest, DecayKinds) {
  struct Case {
    std::string lr;
    P::Decay decay;
    int64_t decay_steps;
    bool staircase;
    double alpha;
  };
  for (const Case& c : std::vector<Case>{
           {"{initial: 0.1, decay: exponential, decay_steps: 100, decay_rate: 0.96}",
            P::EXPONENTIAL, 100, false, 0},
           {"{initial: 0.1, decay: exponential, decay_steps: 100, decay_rate: 0.9, "
            "staircase: true}",
            P::EXPONENTIAL, 100, true, 0},
           // Step decay: x decay_rate every step_size steps.
           {"{initial: 0.1, decay: step, step_size: 30, decay_rate: 0.1}", P::EXPONENTIAL, 30, true,
            0},
           {"{initial: 0.2, decay: cosine, decay_steps: 50, final: 0.002}", P::COSINE, 50, false,
            0.01},
           {"{initial: 0.1, warmup_steps: 10}", P::CONSTANT, 0, false, 0},
       }) {
    auto spec = ParseJobSpec(Job(c.lr, "per_replica_batch: 8"), "j.yaml");
    ASSERT_TRUE(spec.ok()) << c.lr << ": " << spec.status();
    ASSERT_TRUE(spec->optimizer.has_schedule()) << c.lr;
    const P& s = spec->optimizer.schedule();
    EXPECT_EQ(s.decay(), c.decay) << c.lr;
    EXPECT_EQ(s.decay_steps(), c.decay_steps) << c.lr;
    EXPECT_EQ(s.staircase(), c.staircase) << c.lr;
    EXPECT_NEAR(s.alpha(), c.alpha, 1e-12) << c.lr;
  }
  auto piecewise = ParseJobSpec(
      Job("{decay: step, boundaries: [100, 200], values: [0.1, 0.01, 0.001]}", "global_batch: 8"),
      "j.yaml");
  ASSERT_TRUE(piecewise.ok()) << piecewise.status();
  const P& s = piecewise->optimizer.schedule();
  EXPECT_EQ(s.decay(), P::PIECEWISE_CONSTANT);
  EXPECT_DOUBLE_EQ(s.initial(), 0.1);
  EXPECT_FLOAT_EQ(piecewise->optimizer.learning_rate(), 0.1f);
  ASSERT_EQ(s.values_size(), 3);
  EXPECT_NEAR(LearningRateAt(s, 150), 0.01, 1e-12);
  // A mapping with a constant rate and no warmup needs no schedule.
  auto constant = ParseJobSpec(Job("{initial: 0.3}", "global_batch: 8"), "j.yaml");
  ASSERT_TRUE(constant.ok()) << constant.status();
  EXPECT_FALSE(constant->optimizer.has_schedule());
  EXPECT_FLOAT_EQ(constant->optimizer.learning_rate(), 0.3f);
}

TEST(JobSpecLearningRateTest, InvalidSchedulesNameTheFieldAndPlace) {
  struct Bad {
    std::string lr;
    std::string batch;
    std::string message;
  };
  const std::string pr = "per_replica_batch: 8";
  for (const Bad& c : std::vector<Bad>{
           {"0.1", "per_replica_batch: 8\n  global_batch: 16",
            "j.yaml:11:17: data: give per_replica_batch or global_batch, not both"},
           {"0.1", "global_batch: 0", "data.global_batch must be >= 1, got 0"},
           {"0.1", "global_batch: 2147483648", "data.global_batch must be <= 1073741824"},
           {"{decay: cosine, decay_steps: 10}", pr,
            "optimizer.learning_rate is missing required key 'initial'"},
           {"{initial: 0, decay: constant}", pr, "optimizer.learning_rate.initial must be > 0"},
           {"{initial: .nan}", pr, "optimizer.learning_rate.initial must be > 0, got nan"},
           {"{initial: 0.1, decay: linear}", pr,
            "unknown optimizer.learning_rate.decay 'linear' (expected constant, cosine, "
            "exponential or step)"},
           {"{initial: 0.1, decay: cosine}", pr,
            "optimizer.learning_rate is missing required key 'decay_steps'"},
           {"{initial: 0.1, decay: cosine, decay_steps: 0}", pr,
            "optimizer.learning_rate.decay_steps must be >= 1, got 0"},
           {"{initial: 0.1, decay: cosine, decay_steps: 2000000000000}", pr,
            "optimizer.learning_rate.decay_steps must be <= 1099511627776"},
           {"{initial: 0.1, decay: cosine, decay_steps: 10, alpha: 2}", pr,
            "optimizer.learning_rate.alpha must be in [0, 1], got 2"},
           {"{initial: 0.1, decay: cosine, decay_steps: 10, final: 0.5}", pr,
            "optimizer.learning_rate.final must be in [0, initial (0.1)], got 0.5"},
           {"{initial: 0.1, decay: cosine, decay_steps: 10, final: 0.01, alpha: 0.1}", pr,
            "give alpha (a fraction of initial) or final (a rate), not both"},
           {"{initial: 0.1, decay: cosine, decay_steps: 10, decay_rate: 0.5}", pr,
            "optimizer.learning_rate: decay 'cosine' has no option 'decay_rate'"},
           {"{initial: 0.1, decay_steps: 10}", pr,
            "optimizer.learning_rate: decay 'constant' has no option 'decay_steps'"},
           {"{initial: 0.1, decay: exponential, decay_steps: 10}", pr,
            "optimizer.learning_rate is missing required key 'decay_rate'"},
           {"{initial: 0.1, decay: exponential, decay_steps: 10, decay_rate: 1.5}", pr,
            "optimizer.learning_rate.decay_rate must be in (0, 1], got 1.5"},
           {"{initial: 0.1, decay: step, decay_rate: 0.5}", pr,
            "optimizer.learning_rate is missing required key 'step_size'"},
           {"{decay: step, boundaries: [10, 5], values: [0.1, 0.01, 0.001]}", pr,
            "optimizer.learning_rate.boundaries[1] must be >= 11, got 5"},
           {"{decay: step, boundaries: [10], values: [0.1]}", pr,
            "optimizer.learning_rate.values must be a list of 2 rates (one more than boundaries)"},
           {"{decay: step, boundaries: [10], values: [0.1, -1]}", pr,
            "optimizer.learning_rate.values[1] must be > 0, got -1"},
           {"{initial: 0.1, decay: step, boundaries: [10], values: [0.1, 0.01]}", pr,
            "optimizer.learning_rate.initial is not used with values"},
           {"{decay: step, step_size: 5, decay_rate: 0.5, boundaries: [10], values: [0.1, 0.01]}",
            pr, "decay 'step' takes step_size and decay_rate, or boundaries and values, not both"},
           {"{initial: 0.1, warmup_steps: -1}", pr,
            "optimizer.learning_rate.warmup_steps must be >= 0, got -1"},
           {"{initial: 0.1, warmup_from: 0.01}", pr,
            "optimizer.learning_rate.warmup_from needs warmup_steps > 0"},
           {"{initial: 0.1, warmup_steps: 5, warmup_from: -0.1}", pr,
            "optimizer.learning_rate.warmup_from must be >= 0, got -0.1"},
           {"{initial: 0.1, scale_with_replicas: sqrt}", pr,
            "unknown optimizer.learning_rate.scale_with_replicas 'sqrt' (expected none or "
            "linear)"},
           {"{initial: 0.1, warmup: 10}", pr, "unknown key 'warmup' in optimizer.learning_rate"},
           {"[0.1]", pr, "optimizer.learning_rate must be a number, got a list"},
       }) {
    auto spec = ParseJobSpec(Job(c.lr, c.batch), "j.yaml");
    ASSERT_FALSE(spec.ok()) << c.lr << " / " << c.batch;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr(c.message)) << c.lr;
    EXPECT_THAT(spec.status().message(), HasSubstr("j.yaml:")) << c.lr;
  }
  // ftrl divides by its rate: only a constant one.
  std::string ftrl = absl::StrReplaceAll(Job("{initial: 0.1, warmup_steps: 10}", pr),
                                         {{"type: sgd", "type: ftrl"}});
  auto spec = ParseJobSpec(ftrl, "j.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(),
              HasSubstr("optimizer 'ftrl' takes a constant learning_rate"));
}

TEST(JobSpecLearningRateTest, ScheduleExampleParsesAndResolves) {
  auto spec = LoadJobSpec("examples/fashion_mnist_mlp_schedule.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ResolveReplicas(ReplicasFor(*spec, 2), &*spec).ok());
  EXPECT_EQ(spec->data.per_replica_batch, 64);
  EXPECT_EQ(spec->data.global_batch, 128);
  EXPECT_EQ(DescribeLearningRate(spec->optimizer),
            "0.04, cosine decay over 4190 steps to 0.0004, after 500 warmup steps from 0");
}

}  // namespace
}  // namespace pscluster
