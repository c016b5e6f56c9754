#include "ps/core/optimizer.h"

#include <cmath>
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

// TF's ApplyFtrl (with Keras' beta folded into l2) in double precision, as
// the reference for the float kernel.
struct FtrlReference {
  double lr, lr_power, l1, l2, beta;
  std::vector<double> w, accum, linear;

  void Step(const std::vector<double>& g) {
    const double l2_adjusted = l2 + beta / (2 * lr);
    for (size_t i = 0; i < w.size(); ++i) {
      const double new_accum = accum[i] + g[i] * g[i];
      linear[i] +=
          g[i] - (std::pow(new_accum, -lr_power) - std::pow(accum[i], -lr_power)) / lr * w[i];
      const double quadratic = std::pow(new_accum, -lr_power) / lr + 2 * l2_adjusted;
      w[i] = std::abs(linear[i]) > l1 ? ((linear[i] > 0 ? l1 : -l1) - linear[i]) / quadratic : 0.0;
      accum[i] = new_accum;
    }
  }
};

TEST(OptimizerTest, FtrlMatchesTfFormula) {
  struct Config {
    float lr_power, l1, l2, beta, initial_accumulator;
  };
  const std::vector<std::vector<float>> grads = {
      {0.5f, -1.0f, 0.01f, 0.0f}, {0.25f, 2.0f, -0.02f, 0.3f}, {-1.5f, 0.5f, 0.0f, -0.3f}};
  for (const Config& c :
       {Config{-0.5f, 0.0f, 0.0f, 0.0f, 0.1f}, Config{-0.5f, 0.05f, 0.1f, 0.0f, 0.1f},
        Config{-0.5f, 0.01f, 0.0f, 1.0f, 0.0f}, Config{-0.7f, 0.02f, 0.05f, 0.5f, 0.2f},
        Config{0.0f, 0.0f, 0.01f, 0.0f, 0.1f}}) {
    OptimizerProto p = Proto("ftrl", 0.1f);
    p.set_learning_rate_power(c.lr_power);
    p.set_l1(c.l1);
    p.set_l2(c.l2);
    p.set_beta(c.beta);
    p.set_initial_accumulator_value(c.initial_accumulator);
    const std::vector<float> w0 = {1.0f, -0.5f, 0.0f, 0.2f};
    FtrlReference ref{0.1, c.lr_power, c.l1, c.l2, c.beta, {}, {}, {}};
    ref.w.assign(w0.begin(), w0.end());
    ref.accum.assign(w0.size(), c.initial_accumulator);
    ref.linear.assign(w0.size(), 0.0);
    auto w = RunSteps(p, w0, grads);
    for (size_t step = 0; step < grads.size(); ++step) {
      ref.Step(std::vector<double>(grads[step].begin(), grads[step].end()));
      for (size_t i = 0; i < w0.size(); ++i) {
        EXPECT_NEAR(w[step][i], ref.w[i], 1e-5 * std::max(1.0, std::abs(ref.w[i])))
            << "lr_power " << c.lr_power << " l1 " << c.l1 << " l2 " << c.l2 << " beta " << c.beta
            << " step " << step << " element " << i;
      }
    }
  }
}

TEST(OptimizerTest, FtrlL1ZeroesSmallWeights) {
  // One step with |linear| = |g| <= l1 sets the weight to exactly 0.
  OptimizerProto p = Proto("ftrl", 0.1f);
  p.set_learning_rate_power(-0.5f);
  p.set_l1(1.0f);
  p.set_initial_accumulator_value(0.0f);
  auto w = RunSteps(p, {0.0f, 0.0f}, {{0.5f, -0.9f}});
  EXPECT_THAT(w[0], ElementsAre(0.0f, 0.0f));
}

TEST(OptimizerTest, ApplyRowsChangesOnlyThoseRowsAndMatchesWholeUpdate) {
  // Adam on rows 2 and 0 of a [3, 2] table: row 1 and its slots stay as they
  // were (lazy Adam), and each touched row moves exactly as a [2] variable
  // given the same gradient would.
  auto opt = Optimizer::Create(Proto("adam", 0.01f));
  ASSERT_TRUE(opt.ok());
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  OptimizerSlots slots = (*opt)->NewSlots(6);
  slots[0][2] = 0.5f;  // Row 1's m: must survive untouched.
  slots[1][3] = 0.25f;
  const std::vector<int64_t> rows = {2, 0};
  const std::vector<float> grads = {0.1f, -0.2f, 0.3f, 0.4f};
  std::vector<float*> slot_data = {slots[0].data(), slots[1].data()};
  for (int64_t step = 1; step <= 3; ++step) {
    (*opt)->ApplyRows(step, 2, rows, grads, w.data(), slot_data);
  }
  EXPECT_EQ(w[2], 3.0f);
  EXPECT_EQ(w[3], 4.0f);
  EXPECT_EQ(slots[0][2], 0.5f);
  EXPECT_EQ(slots[0][3], 0.0f);
  EXPECT_EQ(slots[1][2], 0.0f);
  EXPECT_EQ(slots[1][3], 0.25f);

  auto row2 = RunSteps(Proto("adam", 0.01f), {5, 6}, {{0.1f, -0.2f}, {0.1f, -0.2f}, {0.1f, -0.2f}});
  auto row0 = RunSteps(Proto("adam", 0.01f), {1, 2}, {{0.3f, 0.4f}, {0.3f, 0.4f}, {0.3f, 0.4f}});
  EXPECT_THAT(w, ElementsAre(row0[2][0], row0[2][1], 3.0f, 4.0f, row2[2][0], row2[2][1]));
}

TEST(OptimizerTest, MomentumOnRowsIsLazy) {
  // Row 0 has velocity but no gradient: neither it nor its weight moves.
  auto opt = Optimizer::Create(Proto("momentum", 0.1f));
  ASSERT_TRUE(opt.ok());
  std::vector<float> w = {1.0f, 1.0f};
  OptimizerSlots slots = (*opt)->NewSlots(2);
  slots[0][0] = -0.5f;
  std::vector<float*> slot_data = {slots[0].data()};
  const std::vector<int64_t> rows = {1};
  for (int64_t step = 1; step <= 2; ++step) {
    (*opt)->ApplyRows(step, 1, rows, std::vector<float>{1.0f}, w.data(), slot_data);
  }
  EXPECT_THAT(w, ElementsAre(1.0f, FloatNear(0.71f, kTol)));
  EXPECT_EQ(slots[0][0], -0.5f);
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
  auto ftrl = Optimizer::Create(Proto("ftrl", 0.1f));
  ASSERT_TRUE(ftrl.ok());
  EXPECT_THAT((*ftrl)->SlotNames(), ElementsAre("accumulator", "linear"));
  OptimizerSlots ftrl_slots = (*ftrl)->NewSlots(2);
  EXPECT_THAT(ftrl_slots[0], ElementsAre(0.1f, 0.1f));
  EXPECT_THAT(ftrl_slots[1], ElementsAre(0.0f, 0.0f));
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
  p = Proto("ftrl", 0.1f);
  p.set_learning_rate_power(0.5f);
  cases.push_back({p, "learning_rate_power must be <= 0"});
  for (const char* field : {"l1", "l2", "beta"}) {
    p = Proto("ftrl", 0.1f);
    const std::string f = field;
    if (f == "l1") p.set_l1(-0.1f);
    if (f == "l2") p.set_l2(-0.1f);
    if (f == "beta") p.set_beta(-0.1f);
    cases.push_back({p, f + " must be >= 0"});
  }
  p = Proto("ftrl", 0.1f);
  p.set_initial_accumulator_value(-1.0f);
  cases.push_back({p, "ftrl: initial_accumulator_value must be >= 0"});
  for (const Case& c : cases) {
    auto opt = Optimizer::Create(c.proto);
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(opt.status().message()), HasSubstr(c.message));
  }
}

// Batch norm's moving statistics: each push folds a batch statistic into
// the current value, w = m * w + (1 - m) * g, whatever the learning rate.
TEST(OptimizerTest, MovingAverageFoldsInEachPush) {
  OptimizerProto p = Proto("moving_average", 1.0f);
  p.set_momentum(0.9f);
  const auto w = RunSteps(p, {1.0f, 0.0f}, {{3.0f, -2.0f}, {3.0f, -2.0f}});
  EXPECT_NEAR(w[0][0], 0.9f * 1.0f + 0.1f * 3.0f, kTol);
  EXPECT_NEAR(w[0][1], -0.2f, kTol);
  EXPECT_NEAR(w[1][0], 0.9f * 1.2f + 0.1f * 3.0f, kTol);
  auto opt = Optimizer::Create(p);
  ASSERT_TRUE(opt.ok());
  EXPECT_TRUE((*opt)->SlotNames().empty());
  p.set_momentum(1.0f);
  EXPECT_EQ(Optimizer::Create(p).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
