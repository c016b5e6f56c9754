#include "ps/core/optimizer.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;

OptimizerProto Proto(const std::string& type, float lr) {
  OptimizerProto p;
  p.set_type(type);
  p.set_learning_rate(lr);
  p.set_momentum(0.9f);
  p.set_initial_accumulator_value(0.1f);
  p.set_beta1(0.9f);
  p.set_beta2(0.999f);
  p.set_epsilon(1e-7f);
  return p;
}

// Runs `grads` (one vector per step) through `proto` starting from `w`, and
// returns the weights after each step.
std::vector<std::vector<float>> RunSteps(const OptimizerProto& proto, std::vector<float> w,
                                         const std::vector<std::vector<float>>& grads) {
  auto opt = Optimizer::Create(proto);
  EXPECT_TRUE(opt.ok()) << opt.status();
  OptimizerSlots slots = (*opt)->NewSlots(static_cast<int64_t>(w.size()));
  std::vector<std::vector<float>> out;
  for (size_t step = 0; step < grads.size(); ++step) {
    (*opt)->Apply(static_cast<int64_t>(step + 1), grads[step], absl::MakeSpan(w), &slots);
    out.push_back(w);
  }
  return out;
}

constexpr float kTol = 1e-6f;

TEST(OptimizerTest, Sgd) {
  auto w = RunSteps(Proto("sgd", 0.1f), {1.0f, -1.0f}, {{0.5f, -1.0f}, {0.5f, 2.0f}});
  EXPECT_THAT(w[0], ElementsAre(FloatNear(0.95f, kTol), FloatNear(-0.9f, kTol)));
  EXPECT_THAT(w[1], ElementsAre(FloatNear(0.90f, kTol), FloatNear(-1.1f, kTol)));
}

TEST(OptimizerTest, Momentum) {
  // v1 = -0.1, w1 = 0.9; v2 = 0.9 * -0.1 - 0.1 = -0.19, w2 = 0.71.
  auto w = RunSteps(Proto("momentum", 0.1f), {1.0f}, {{1.0f}, {1.0f}});
  EXPECT_THAT(w[0], ElementsAre(FloatNear(0.9f, kTol)));
  EXPECT_THAT(w[1], ElementsAre(FloatNear(0.71f, kTol)));
}

TEST(OptimizerTest, MomentumNesterov) {
  // w1 = 1 + 0.9 * -0.1 - 0.1 = 0.81; w2 = 0.81 + 0.9 * -0.19 - 0.1 = 0.539.
  OptimizerProto p = Proto("momentum", 0.1f);
  p.set_nesterov(true);
  auto w = RunSteps(p, {1.0f}, {{1.0f}, {1.0f}});
  EXPECT_THAT(w[0], ElementsAre(FloatNear(0.81f, kTol)));
  EXPECT_THAT(w[1], ElementsAre(FloatNear(0.539f, kTol)));
}

TEST(OptimizerTest, Adagrad) {
  // accum 0.1 + 1 = 1.1, w1 = 1 - 0.1 / sqrt(1.1); accum 1.35, w2 = w1 - 0.05 / sqrt(1.35).
  auto w = RunSteps(Proto("adagrad", 0.1f), {1.0f}, {{1.0f}, {0.5f}});
  EXPECT_THAT(w[0], ElementsAre(FloatNear(0.9046538f, kTol)));
  EXPECT_THAT(w[1], ElementsAre(FloatNear(0.8616206f, kTol)));
}

TEST(OptimizerTest, AdamFirstStepMovesEachWeightByLearningRate) {
  // Step 1 moves each weight by ~lr * sign(g) whatever |g|; values from a
  // double-precision reference of the Keras update.
  auto w = RunSteps(Proto("adam", 0.001f), {1.0f, 1.0f}, {{0.5f, -2.0f}, {-0.25f, -2.0f}});
  EXPECT_THAT(w[0], ElementsAre(FloatNear(0.999f, kTol), FloatNear(1.001f, kTol)));
  EXPECT_THAT(w[1], ElementsAre(FloatNear(0.9987337f, kTol), FloatNear(1.002f, kTol)));
}

TEST(OptimizerTest, SlotsHaveNamesAndInitialValues) {
  auto adagrad = Optimizer::Create(Proto("adagrad", 0.1f));
  ASSERT_TRUE(adagrad.ok());
  OptimizerSlots slots = (*adagrad)->NewSlots(3);
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_THAT(slots[0], ElementsAre(0.1f, 0.1f, 0.1f));

  auto adam = Optimizer::Create(Proto("adam", 0.1f));
  ASSERT_TRUE(adam.ok());
  EXPECT_THAT((*adam)->SlotNames(), ElementsAre("m", "v"));
  auto sgd = Optimizer::Create(Proto("sgd", 0.1f));
  ASSERT_TRUE(sgd.ok());
  EXPECT_TRUE((*sgd)->NewSlots(5).empty());
}

TEST(OptimizerTest, RejectsBadConfig) {
  struct Case {
    OptimizerProto proto;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({Proto("rmsprop", 0.1f), "unknown optimizer 'rmsprop'"});
  cases.push_back({Proto("sgd", 0.0f), "learning_rate must be > 0"});
  cases.push_back({Proto("sgd", -1.0f), "learning_rate must be > 0"});
  OptimizerProto p = Proto("momentum", 0.1f);
  p.set_momentum(1.0f);
  cases.push_back({p, "momentum must be in [0, 1)"});
  p = Proto("adam", 0.1f);
  p.set_beta2(1.5f);
  cases.push_back({p, "beta2 must be in [0, 1)"});
  p = Proto("adam", 0.1f);
  p.set_epsilon(0.0f);
  cases.push_back({p, "epsilon must be > 0"});
  p = Proto("adagrad", 0.1f);
  p.set_initial_accumulator_value(-1.0f);
  cases.push_back({p, "initial_accumulator_value must be >= 0"});
  for (const Case& c : cases) {
    auto opt = Optimizer::Create(c.proto);
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(opt.status().message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace pscluster
